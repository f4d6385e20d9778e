"""One small HTTP server: ``/metrics``, ``/healthz``, ``/readyz``, ``/domain``.

* ``/healthz`` (liveness) answers 200 while the process serves HTTP. It never
  asks Kafka: a broker outage must not make an orchestrator kill a healthy
  service (which would only add restarts to the outage).
* ``/readyz`` (readiness) is 200 once start-up recovery is done, the last
  Kafka transaction committed, the journal is writable, the broker answers
  (:class:`stream.service.probe.BrokerProbe`) and the release loop keeps
  turning; 503 with every reason otherwise (starting, recovering, retrying a
  transaction, journal write failing, broker unreachable, loop stalled,
  stopping, refused to start). The body names each check.
* ``/metrics``: Prometheus text format from the injected registry.
* ``/domain``: the stream's public domain message (what each count means).

A plain ``wsgiref`` server in a daemon thread; requests are tiny.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["Health", "make_app", "HttpServer", "ListenError"]


@dataclass
class Health:
    """Thread-safe service status shared with the HTTP thread and the broker probe.

    ``set`` records the release loop's own state (starting, recovering, running, retrying a
    transaction, journal blocked, stopping…); ``check`` records an independent check (the
    broker probe). The service is ready only when the loop says so, no check fails, and —
    with ``stall_after`` set — the loop ran an iteration within the last ``stall_after``
    seconds (a loop stuck in a call is not ready, even if it last said "running").
    """

    ready: bool = False
    reason: str = "starting"
    started: float = field(default_factory=time.time)
    last_loop: float = field(default_factory=time.monotonic)
    stall_after: float | None = None
    _failing: dict[str, str] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def set(self, ready: bool, reason: str = "") -> None:
        with self._lock:
            self.ready, self.reason = ready, reason or ("running" if ready else "not ready")

    def check(self, name: str, ok: bool, reason: str = "") -> None:
        """Record check ``name``: passing, or failing with ``reason`` (what is wrong, what to do)."""
        with self._lock:
            if ok:
                self._failing.pop(name, None)
            else:
                self._failing[name] = reason or f"{name} check failing"

    def tick(self) -> None:
        self.last_loop = time.monotonic()

    def checks(self) -> dict[str, str]:
        """Every check's state: ``"ok"`` or why it fails (``loop`` is the release loop)."""
        ready, reason, idle = self._loop_view()
        with self._lock:
            failing = dict(self._failing)
        return {"loop": "ok" if ready else reason, **{name: failing.get(name, "ok") for name in sorted(failing)}}

    def _loop_view(self) -> tuple[bool, str, float]:
        with self._lock:
            ready, reason = self.ready, self.reason
        idle = time.monotonic() - self.last_loop
        if ready and self.stall_after is not None and idle > self.stall_after:
            return False, (f"release loop stalled: no iteration for {idle:.0f} s (stuck in a Kafka or disk "
                           "call?); see the log, a restart is safe (the journal re-sends what was pending)"), idle
        return ready, reason, idle

    def view(self) -> tuple[bool, str, float]:
        """(ready, reason, seconds since the loop's last iteration)."""
        ready, reason, idle = self._loop_view()
        with self._lock:
            failing = list(self._failing.values())
        if failing:
            reasons = failing if ready else [reason, *failing]
            return False, "; ".join(reasons), idle
        return ready, reason, idle

    def is_ready(self) -> bool:
        return self.view()[0]


Response = tuple[str, list[tuple[str, str]], bytes]


def make_app(registry: CollectorRegistry, health: Health,
             domain: Callable[[], bytes | None] = lambda: None) -> Callable[..., Iterable[bytes]]:
    """The WSGI application."""

    def route(path: str) -> Response:
        if path == "/metrics":
            return "200 OK", [("Content-Type", CONTENT_TYPE_LATEST)], generate_latest(registry)
        if path == "/healthz":
            _, reason, idle = health.view()
            body = json.dumps({"status": "ok", "state": reason, "loop_idle_seconds": round(idle, 3)})
            return "200 OK", [("Content-Type", "application/json")], body.encode()
        if path == "/readyz":
            ready, reason, _ = health.view()
            body = json.dumps({"ready": ready, "state": reason, "checks": health.checks()}).encode()
            return ("200 OK" if ready else "503 Service Unavailable"), [("Content-Type", "application/json")], body
        if path == "/domain":
            data = domain()
            if data is None:
                return "404 Not Found", [("Content-Type", "text/plain")], b"no domain yet\n"
            return "200 OK", [("Content-Type", "application/json")], data
        if path == "/":
            return "200 OK", [("Content-Type", "text/plain")], b"dpstream: /metrics /healthz /readyz /domain\n"
        return "404 Not Found", [("Content-Type", "text/plain")], b"not found\n"

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain"), ("Allow", "GET, HEAD")])
            return [b"method not allowed\n"]
        status, headers, body = route(environ.get("PATH_INFO", "/"))
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


class ListenError(OSError):
    """An HTTP port could not be bound at start-up; the message names the setting and the fix."""


class HttpServer:
    """Serves :func:`make_app` on ``host:port`` from a daemon thread (port 0: any free port)."""

    def __init__(self, app: Callable[..., Iterable[bytes]], host: str = "127.0.0.1", port: int = 8000, *,
                 setting: str = "service.http_port") -> None:
        """Bind ``host:port`` now.

        Raises:
            ListenError: the address cannot be bound (in use, not local, no permission); names ``setting``.
        """
        try:
            self._server = make_server(host, port, app, server_class=_Server, handler_class=_QuietHandler)
        except (OSError, OverflowError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise ListenError(
                f"{setting}: cannot listen on {host}:{port} ({reason}); stop the process using it "
                f"or set {setting} to a free port (0 picks any free port)") from None
        self.host = host
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="dpstream-http", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> HttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
