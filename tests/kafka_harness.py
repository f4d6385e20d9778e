"""Test fixtures around the real embedded broker, and helpers to drive the service.

Import the fixtures into a test module with
``from tests.kafka_harness import broker, kafka_settings  # noqa: F401``.
One broker per test module (module scope): starting one takes ~0.2 s, and
every test uses topic names of its own, so tests never see each other's data.
The service zygote (:class:`Zygote`) is one per test process (session scope).

Under pytest-xdist (the default: ``-n auto`` in pyproject.toml) every worker is a separate process
with its own brokers and zygote; names come from :func:`unique` (process id + counter + random),
ports are free ones picked at start, state lives under each test's ``tmp_path``: nothing here
assumes it is the only test process on the machine.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from stream.service.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[1]

# Small group timeouts: the embedded broker completes a JoinGroup only after
# the rebalance timeout (= max_poll_interval_ms), see broker.md.
FAST_GROUP = {"max_poll_interval_ms": 3000, "session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}

_counter = itertools.count()


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    b = EmbeddedBroker.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def zygote() -> Iterator[Zygote]:
    """One zygote per test process (per xdist worker): starting one imports numpy, pyarrow, pydantic
    and kafka-python (2-10 s on a loaded machine), and every run it forks is a fresh process, so the
    crash, compaction and scale-out modules share it instead of starting one each."""
    z = Zygote()
    try:
        yield z
    finally:
        z.close()


def unique(prefix: str) -> str:
    """A fresh name (topics, groups, stream ids) so tests never share data."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


def kafka_section(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """A ``kafka:`` config section with fresh topic names and fast group timeouts."""
    tag = unique("t")
    section = {
        "bootstrap_servers": bootstrap,
        "input_topic": f"{tag}.events",
        "output_topic": f"{tag}.releases",
        "dead_letter_topic": f"{tag}.dead",
        "late_topic": f"{tag}.late",
        "state_topic": f"{tag}.state",
        "group_id": f"{tag}.group",
        "request_timeout_ms": 10_000,
        **FAST_GROUP,
    }
    section.update(overrides)
    return section


_LAST_STAMP: dict[tuple[str, int | None], float] = {}
WALL = "wall"  # produce(stamp=WALL): the producer's own clock (kafka-python's default timestamp)


def _earliest_event_time(value: bytes) -> float | None:
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    times = []
    for e in doc if isinstance(doc, list) else [doc]:
        t = e.get("event_time") if isinstance(e, dict) else None
        if isinstance(t, int | float) and not isinstance(t, bool) and T0 - 86_400 <= t <= T0 + 10 * 86_400:
            times.append(float(t))
    return min(times) if times else None


def produce(bootstrap: str, topic: str, values: list[bytes | None], *, partitions: int | None = None,
            key: bytes | None = None, stamp: float | str | None = None) -> None:
    """Plain (non-transactional) producer for test input, playing the broker's LogAppendTime clock.

    The embedded broker ignores ``message.timestamp.type=LogAppendTime`` (records keep the
    producer's timestamp), so the harness stamps each record as a broker whose clock runs at
    the test data's pace would: the message's earliest event time (dated 2024, see :data:`T0`),
    never earlier than the partition's previous stamp (monotone per partition, as LogAppendTime
    is); a message without a usable event time gets the partition's previous stamp (or T0).
    ``stamp`` overrides it for every record of the call (seconds), or :data:`WALL` for the
    producer's own clock. The service tests run ``kafka.record_time: trusted-create-time`` with
    a ``stream.clock_skew`` wider than the gap between 2024 and the wall clock, so only these
    stamps complete timesteps; :func:`heartbeat` moves every partition past the last deadline.
    """
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    try:
        for i, v in enumerate(values):
            part = None if partitions is None else i % partitions
            ts_ms = None
            if stamp != WALL:
                slot = (topic, part)
                if stamp is not None:
                    r = float(stamp)  # type: ignore[arg-type]
                else:
                    r = _earliest_event_time(v) or _LAST_STAMP.get(slot, float(T0))
                r = max(r, _LAST_STAMP.get(slot, r))
                _LAST_STAMP[slot] = r
                ts_ms = int(r * 1000)
            p.send(topic, value=v, key=key, partition=part, timestamp_ms=ts_ms)
        p.flush()
    finally:
        p.close()


def heartbeat(bootstrap: str, topic: str, timesteps: int, *, partitions: int | None = None,
              lateness: float = 0.0, event_timestep: int | None = None) -> None:
    """Show every partition past the deadline of timestep ``timesteps − 1``: one event per partition
    stamped one second after it (end + ``lateness``), in a later timestep that never completes —
    what a live topic's next records do. Counts one consumed and accepted event per partition."""
    r = T0 + STEP * timesteps + lateness + 1
    t = r if event_timestep is None else T0 + STEP * event_timestep + 1  # a timestep no test looks at
    beat = json.dumps({"user_id": "heartbeat", "event_time": t, "attributes": {"age": 1, "sex": "F"}}).encode()
    n = partitions or 1
    produce(bootstrap, topic, [beat] * n, partitions=partitions, stamp=r)


def read_all(bootstrap: str, topic: str, *, isolation_level: str = "read_uncommitted",
             timeout_s: float = 10.0, expect: int | None = None) -> list[Any]:
    """Every record of ``topic`` (all partitions), as kafka-python ConsumerRecords."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation_level,
                      enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        deadline = time.monotonic() + timeout_s
        parts = None
        while not parts and time.monotonic() < deadline:
            parts = c.partitions_for_topic(topic)
            if not parts:
                time.sleep(0.1)
        if not parts:
            return []
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        out: list[Any] = []
        # The embedded broker's end offset is the last batch's base offset + 1:
        # stop at an empty poll once past it (and once `expect` records came).
        while time.monotonic() < deadline:
            batch = c.poll(timeout_ms=200)
            for recs in batch.values():
                out.extend(recs)
            if not batch and all(c.position(tp) >= ends[tp] for tp in tps):
                if expect is None or len(out) >= expect:
                    break
        return out
    finally:
        c.close()


def json_values(records: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in records]


# ---------------------------------------------------------------------------
# Service configuration for tests

T0 = 1_704_067_200  # 2024-01-01T00:00:00Z: event times are in the past, never "far future"
STEP = 60
#: stream.clock_skew for the record-time tests: wider than the gap between T0 and the wall clock
RECORD_SKEW = f"{int(time.time() - T0) + 30 * 86_400}s"


def service_config(bootstrap: str, state_dir: Path, *, stream_id: str | None = None, seed: int | None = None,
                   kafka: dict[str, Any] | None = None, **sections: Any) -> dict[str, Any]:
    """A complete config (dict) for the small test domain, with fast timeouts."""
    from stream.service.testing import SMALL_ATTRIBUTES

    # Which clock decides inclusion: record time (trusted-create-time: the harness's produce()
    # stamps records as the broker would, see there) with a clock_skew wider than the gap between
    # the 2024 test data and the wall clock, so only record-time progress completes timesteps.
    # kafka={"record_time": "watermark"} runs the legacy rule, explicitly opted into (outside the
    # privacy proof): the tests of that mode only.
    kafka = dict(kafka or {})
    legacy = kafka.setdefault("record_time", "trusted-create-time") == "watermark"
    if legacy:
        kafka.setdefault("allow_data_dependent_inclusion", True)
    cfg: dict[str, Any] = {
        "stream": {"id": stream_id or unique("s"), "timestep": f"{STEP}s", "start": T0,
                   **({"idle_timeout": "1s"} if legacy else {"clock_skew": RECORD_SKEW})},
        "schema": {"attributes": SMALL_ATTRIBUTES},
        "privacy": {"unit": "user-level", "epsilon": 1, "horizon": 100, "cutoff": 100, "population": 100},
        "release": {"decision": "uniform"},
        "kafka": kafka_section(bootstrap, **kafka),
        # journal_compact_bytes: check_published reads the private audit of every journaled checkpoint,
        # which compaction drops; the compaction tests (test_compaction_crash.py) set their own.
        # publish: when-complete: the 2024 test data with a clock_skew of years would put the public
        # release schedule (deadline + clock_skew + margin) a month ahead; these tests are about what
        # is released, and the schedule's own tests (test_publish_schedule.py) set it themselves
        "service": {"state_dir": str(state_dir), "http_port": 0, "commit_interval": "200ms",
                    "poll_timeout": "50ms", "log_level": "INFO", "journal_compact_bytes": 256 << 20,
                    "publish": "when-complete"},
    }
    if seed is not None:
        cfg["randomness"] = {"seed": seed, "allow_seeded_noise": True}
    for name, extra in sections.items():
        cfg[name] = {**cfg.get(name, {}), **extra}
    return cfg


def settings_from(cfg: dict[str, Any]) -> Any:
    from stream.config import load_settings

    return load_settings(None, **cfg)


def write_config(cfg: dict[str, Any], path: Path) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def event(user: str | int, timestep: int, *, age: float = 30, sex: str = "M", offset: float = 1.0) -> dict[str, Any]:
    return {"user_id": str(user), "event_time": T0 + STEP * timestep + offset, "attributes": {"age": age, "sex": sex}}


def timestep_of(ev: dict[str, Any]) -> int:
    return int((float(ev["event_time"]) - T0) // STEP)


# ---------------------------------------------------------------------------
# Running the service in-process (fast tests) and as killable processes


class InProcessService:
    """``run_service`` in a thread (no signals); ``stop()`` sets its flag."""

    def __init__(self, settings: Any, **kwargs: Any) -> None:
        import threading

        from stream.service.http import Health
        from stream.service.launcher import run_service
        from stream.service.metrics import Metrics

        self.settings = settings
        self.metrics = Metrics()
        self.health = Health()
        self.stop_flag = threading.Event()
        self.exit_code: int | None = None
        self.service: Any = None
        self.server: Any = None
        self._started = threading.Event()

        def on_started(service: Any, server: Any) -> None:
            self.service, self.server = service, server
            self._started.set()

        def target() -> None:
            self.exit_code = run_service(settings, stop=self.stop_flag, metrics=self.metrics, health=self.health,
                                         install_signals=False, on_started=on_started, **kwargs)
            self._started.set()

        self.thread = threading.Thread(target=target, name="service-under-test", daemon=True)

    def __enter__(self) -> InProcessService:
        self.thread.start()
        assert self._started.wait(60), "service did not start"
        return self

    def stop(self, timeout: float = 30) -> int | None:
        self.stop_flag.set()
        self.thread.join(timeout)
        return self.exit_code

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.metrics.registry.get_sample_value(name, labels or {})
        return 0.0 if value is None else value

    def published(self) -> int:
        """Timesteps whose release transaction committed (the service's own count: cheap to poll;
        read the output topic for what was actually published)."""
        return int(self.metric("dpstream_timesteps_sealed_total"))


def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.1, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


class Zygote:
    """A pre-imported Python process that forks service processes on request.

    Importing numpy, pyarrow, pydantic and kafka-python costs 1.5-3 s per
    process on these machines; the crash test restarts the service ~30 times.
    The zygote imports once and forks a fresh child per run: each child is a
    real, separate service process that the test kills with SIGKILL or stops
    with SIGTERM, exactly like a supervisor would.
    """

    def __init__(self) -> None:
        import subprocess
        import sys

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.kafka_harness", "zygote"], cwd=ROOT, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        ready = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert ready.strip() == "ready", ready

    def _ask(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def spawn(self, config: Path, log: Path, *, env: dict[str, str] | None = None, broken: bool | str = False) -> int:
        """``broken``: True runs :func:`install_broken_recovery`; ``"lose-filter-state"``
        :func:`install_lost_filter_state`."""
        return int(self._ask(op="run", config=str(config), log=str(log), env=env or {}, broken=broken)["pid"])

    def wait(self, pid: int, timeout: float) -> int | None:
        """Exit code (negative: killed by that signal), or None if still running after ``timeout``."""
        return self._ask(op="wait", pid=pid, timeout=timeout)["status"]

    def close(self) -> None:
        try:
            self._ask(op="exit")
        except Exception:  # noqa: BLE001
            pass
        self.proc.wait(10)


def _zygote_main() -> None:  # pragma: no cover - runs in the zygote process
    import argparse
    import signal
    import sys

    import stream.commands.run as run_command
    import stream.service.launcher  # noqa: F401 - pre-import everything heavy

    print("ready", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "run":
            pid = os.fork()
            if pid == 0:
                try:
                    fd = os.open(cmd["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                    os.dup2(fd, 1)
                    os.dup2(fd, 2)
                    devnull = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(devnull, 0)
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    os.environ.update(cmd["env"])
                    if cmd["broken"] == "lose-filter-state":
                        install_lost_filter_state()
                    elif cmd["broken"] == "lose-alert-state":
                        install_lost_alert_state()
                    elif cmd["broken"]:
                        install_broken_recovery()
                    code = run_command.run(argparse.Namespace(config=cmd["config"], max_timesteps=None))
                except BaseException as exc:  # noqa: BLE001
                    print(f"child crashed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                    code = 3
                os._exit(code)
            print(json.dumps({"pid": pid}), flush=True)
        elif cmd["op"] == "wait":
            deadline = time.monotonic() + float(cmd["timeout"])
            status = None
            while True:
                done, raw = os.waitpid(int(cmd["pid"]), os.WNOHANG)
                if done:
                    status = os.waitstatus_to_exitcode(raw)
                    break
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            print(json.dumps({"status": status}), flush=True)
        elif cmd["op"] == "exit":
            print(json.dumps({}), flush=True)
            return


def install_broken_recovery() -> None:
    """The deliberately broken variant: on restart, redraw instead of re-sending.

    When the journal holds a checkpoint whose transaction did not commit, it
    drops that checkpoint and recomputes from the one before — so the
    timesteps it held are stepped again with fresh noise — and it skips the
    start-up comparison with the output topic (which would refuse). The crash
    checker must catch this.
    """
    import stream.service.loop as service_module
    from stream.service.journal import plan_recovery as real_plan

    def broken_plan(journal: Any, **kw: Any) -> Any:
        kw["published"] = []
        plan = real_plan(journal, **kw)
        if plan.redo is not None and journal is not None:
            journal.drop_last_checkpoint()
            plan = real_plan(journal, **kw)
        return plan

    service_module.plan_recovery = broken_plan  # type: ignore[assignment]


def install_lost_filter_state() -> None:
    """The deliberately broken variant of a smoothing stream: a restart restores the engine but
    starts the ``release.postprocess`` smoother over (its journaled state ignored)."""
    from histogram.postprocess import PostProcessor, PostState

    PostProcessor.state_from_json = lambda self, data, bins: PostState()  # type: ignore[method-assign]


def install_lost_alert_state() -> None:
    """The deliberately broken variant of a stream with detectors: a restart starts the declared
    queries' detectors over (their journaled state ignored), so a chart's alerts after a restart
    differ from those of an uninterrupted run."""
    from stream.service.alerts import AlertWatch

    AlertWatch.restore = lambda self, state: None  # type: ignore[method-assign]


# ---------------------------------------------------------------------------
# Reading what the service published, and the crash checker


def committed_total(bootstrap: str, group: str, topic: str) -> int:
    """Sum of the group's committed offsets over the partitions of ``topic``."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        parts = c.partitions_for_topic(topic) or set()
        return sum(c.committed(TopicPartition(topic, p)) or 0 for p in parts)
    finally:
        c.close()


def releases_by_timestep(records: list[Any]) -> dict[int, set[bytes]]:
    """Every distinct release payload per timestep (domain messages skipped)."""
    out: dict[int, set[bytes]] = {}
    for r in records:
        doc = json.loads(r.value)
        if doc.get("message_type") in ("release", "model-release"):
            out.setdefault(int(doc["timestep"]["index"]), set()).add(bytes(r.value))
    return out


def dedupe_by_release_id(records: list[Any]) -> dict[str, bytes]:
    """What a consumer keeps: one payload per release_id (asserting duplicates are byte-identical)."""
    kept: dict[str, bytes] = {}
    for r in records:
        doc = json.loads(r.value)
        if doc.get("message_type") not in ("release", "model-release"):
            continue
        rid = doc["release_id"]
        if rid in kept:
            assert kept[rid] == bytes(r.value), f"release {rid[:12]} published with different bytes"
        kept[rid] = bytes(r.value)
    return kept


def dedupe_by_key(records: list[Any]) -> tuple[dict[bytes, Any], list[str]]:
    """Dead-letter / late records by key; duplicates must be byte-identical."""
    kept: dict[bytes, Any] = {}
    problems = []
    for r in records:
        if r.key in kept and (kept[r.key].value != r.value or kept[r.key].headers != r.headers):
            problems.append(f"record {r.key!r} published twice with different contents")
        kept.setdefault(r.key, r)
    return kept, problems


def check_published(bootstrap: str, cfg: dict[str, Any], *, injected: dict[int, int], dead: int,
                    timesteps: int) -> tuple[list[str], dict[str, Any]]:
    """The crash-test checker. Returns (violations, facts); no violations means:

    * exactly one distinct payload per timestep 0..timesteps-1 over *everything*
      produced to the output topic (read_uncommitted: aborted records count),
      each with the deterministic release_id;
    * the ledger (journal) spends exactly what the published releases imply —
      one publication entry per fresh release, same ε — and never above ε;
      the last release's epsilon_spent equals the ledger;
    * 0 events lost or counted twice: for every timestep, events counted
      (private journal audit) + late events == events injected; dead letters
      == bad messages injected; duplicates of dead/late records byte-identical.
    """
    from fractions import Fraction

    from controller.accountant import restore_accountant
    from stream.messages import release_id
    from stream.service.journal import Journal

    settings = settings_from(cfg)
    k, stream_id = cfg["kafka"], cfg["stream"]["id"]
    violations: list[str] = []
    out = read_all(bootstrap, k["output_topic"], isolation_level="read_uncommitted")
    by_t = releases_by_timestep(out)
    for t, payloads in sorted(by_t.items()):
        if len(payloads) != 1:
            violations.append(f"timestep {t}: {len(payloads)} distinct release payloads")
    missing = sorted(set(range(timesteps)) - set(by_t))
    if missing:
        violations.append(f"timesteps without a release: {missing[:10]}{'...' if len(missing) > 10 else ''}")
    if set(by_t) - set(range(timesteps)):
        violations.append(f"unexpected timesteps released: {sorted(set(by_t) - set(range(timesteps)))[:10]}")
    docs = {t: json.loads(next(iter(p))) for t, p in by_t.items()}
    fp = settings.fingerprint()
    for t, doc in docs.items():
        if doc["release_id"] != release_id(stream_id, t, fp):
            violations.append(f"timestep {t}: wrong release_id")
    with Journal.open(cfg["service"]["state_dir"], stream_id) as journal:
        acct = restore_accountant(journal.engine["accountant"])
        checkpoints = list(journal.checkpoints_on_disk())
    budget = Fraction(str(cfg["privacy"]["epsilon"]))
    if acct.spent > budget:
        violations.append(f"ledger spends {acct.spent} > ε = {budget}")
    if docs:
        last = docs[max(docs)]
        if Fraction(last["epsilon_spent_exact"]) != acct.spent:
            violations.append(f"last release says ε spent {last['epsilon_spent_exact']}, ledger {acct.spent}")
    publications: dict[int, list[Fraction]] = {}
    for e in acct.entries:
        if e.purpose == "publication":
            publications.setdefault(e.start, []).append(e.epsilon)
    fresh = {t: [Fraction(d["accuracy"]["epsilon_exact"])] for t, d in docs.items() if d["kind"] == "fresh"}
    if publications != fresh:
        diff = sorted(set(publications) ^ set(fresh))[:10]
        violations.append(f"ledger publications differ from the published fresh releases (timesteps {diff})")
    counted: dict[int, int] = {}
    for cp in checkpoints:
        for r in cp.releases:
            if r.timestep in counted:
                violations.append(f"timestep {r.timestep} journaled twice")
            counted[r.timestep] = int(r.audit.get("events", 0))
    late, late_problems = dedupe_by_key(read_all(bootstrap, k["late_topic"]))
    dlq, dlq_problems = dedupe_by_key(read_all(bootstrap, k["dead_letter_topic"]))
    violations += late_problems + dlq_problems
    late_by_t: dict[int, int] = {}
    for r in late.values():
        t = timestep_of(json.loads(r.value))
        late_by_t[t] = late_by_t.get(t, 0) + 1
    for t in range(timesteps):
        seen = counted.get(t, 0) + late_by_t.get(t, 0)
        if seen != injected.get(t, 0):
            violations.append(f"timestep {t}: injected {injected.get(t, 0)} events, counted "
                              f"{counted.get(t, 0)} + late {late_by_t.get(t, 0)}")
    if len(dlq) != dead:
        violations.append(f"dead letters: {len(dlq)} distinct, {dead} injected")
    facts = {"releases": len(out), "distinct_timesteps": len(by_t), "late": len(late), "dead": len(dlq),
             "fresh": len(fresh), "spent": str(acct.spent), "checkpoints": len(checkpoints)}
    return violations, facts


@dataclass
class CrashOutcome:
    violations: list[str]
    facts: dict[str, Any]
    runs: list[tuple[str, int | None]] = field(default_factory=list)
    log_text: str = ""


def synthetic_input(rng: Any, timesteps: int, per_timestep: int, *, bad_every: int = 97,
                    array_every: int = 7) -> tuple[list[list[bytes]], dict[int, int], int]:
    """Messages per timestep (chunks to produce in order), events injected per timestep, bad messages.

    Several events per person per timestep (a pool of 1.5×per_timestep ids),
    some 5-event array messages, and every ``bad_every``-th message malformed
    or out of domain (dead letters).
    """
    chunks: list[list[bytes]] = []
    injected: dict[int, int] = {}
    bad = 0
    n = 0
    for t in range(timesteps):
        evs = [event(f"u{int(rng.integers(0, per_timestep * 3 // 2))}", t, age=float(rng.integers(0, 100)),
                     sex="MF"[int(rng.integers(0, 2))], offset=float(rng.uniform(0, STEP - 0.001)))
               for _ in range(per_timestep)]
        injected[t] = len(evs)
        msgs: list[bytes] = []
        i = 0
        while i < len(evs):
            n += 1
            if n % bad_every == 0:
                msgs.append(b'{"user_id": "x", "event_time": ' if n % 2 else json.dumps(
                    {**evs[0], "attributes": {"age": 500, "sex": "M"}}).encode())
                bad += 1
                continue
            if n % array_every == 0:
                msgs.append(json.dumps(evs[i:i + 5]).encode())
                i += 5
            else:
                msgs.append(json.dumps(evs[i]).encode())
                i += 1
        chunks.append(msgs)
    return chunks, injected, bad


def crash_scenario(bootstrap: str, workdir: Path, *, seed: int, random_kills: int,
                   failpoints: list[tuple[str, int]], broken: bool = False, timesteps: int = 100,
                   per_timestep: int = 100, pace: float = 0.25, partitions: int = 2,
                   decision: str = "uniform", terms: int = 0, zygote: Zygote | None = None,
                   record_time: bool = True, seeded: bool = False, postprocess: str = "none") -> CrashOutcome:
    """Run the service through kill -9s and failpoint crashes while input arrives; then check.

    ``postprocess``: the stream's ``release.postprocess`` chain (a smoother's state must survive).

    The input (``timesteps`` × ``per_timestep`` events, plus dead letters) is
    produced at ``pace`` seconds per timestep by a background thread while
    the service is started, killed and restarted per the shuffled schedule.
    A last run (no faults) drains the input; it is stopped with SIGTERM
    once every timestep has a release.

    ``record_time`` (default): the service runs ``kafka.record_time: trusted-create-time`` and the feeder plays the broker's LogAppendTime clock (the embedded broker ignores it): every
    record of timestep ``t`` is stamped just before that timestep's end, monotone per partition;
    after the input, one heartbeat event per partition stamped past the last deadline (its own
    event time lies in a later, never-complete timestep) shows every partition past the end.
    ``stream.clock_skew`` is set larger than the gap between the simulated 2024 clock and the wall
    clock, so only record-time progress completes timesteps: what each holds is then fixed by
    the input alone. With ``seeded`` the releases must equal an offline replay with the arrival
    times and the same seed (``CrashOutcome.facts["replay_equal"]``); unseeded (the default) a
    redraw after a crash shows as two distinct payloads for one timestep.
    """
    import signal
    import threading

    import numpy as np

    from stream.config import KafkaSection
    from stream.service.kafka_io import ensure_topics

    rng = np.random.default_rng(seed)  # test data and kill times only; never release noise
    workdir.mkdir(parents=True, exist_ok=True)
    rec_kafka = {} if record_time else {"record_time": "watermark"}
    rec_stream = {} if record_time else {"idle_timeout": "1s"}
    cfg = service_config(bootstrap, workdir / "state", seed=seed if seeded else None,
                         kafka={"topic_partitions": partitions, "max_poll_records": 25, **rec_kafka},
                         stream={"allowed_lateness": f"{STEP}s", **rec_stream},
                         release={"decision": decision, "postprocess": postprocess},
                         privacy={"horizon": timesteps, "cutoff": timesteps if decision == "uniform" else 10})
    config_path = write_config(cfg, workdir / "config.yaml")
    k = KafkaSection(**cfg["kafka"])
    ensure_topics(k, {k.input_topic: partitions})
    chunks, injected, bad = synthetic_input(rng, timesteps, per_timestep)

    def feed() -> None:
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=2, acks="all")
        try:
            for t, msgs in enumerate(chunks):
                stamp = int((T0 + STEP * (t + 1)) * 1000) - 1 if record_time else None
                for m in msgs:
                    p.send(k.input_topic, value=m, partition=int(rng.integers(0, partitions)), timestamp_ms=stamp)
                p.flush()
                time.sleep(pace)
            if record_time:  # heartbeats: every partition shows a record time past the last deadline
                beat = json.dumps(event("heartbeat", timesteps + 3)).encode()
                for part in range(partitions):
                    p.send(k.input_topic, value=beat, partition=part,
                           timestamp_ms=int((T0 + STEP * timesteps + STEP + 1) * 1000))  # past D(last) = its end + lateness
                p.flush()
        finally:
            p.close()

    feeder = threading.Thread(target=feed, name="feeder", daemon=True)
    schedule: list[tuple[str, Any]] = ([("kill", None)] * random_kills + [("fail", f) for f in failpoints]
                                       + [("term", None)] * terms)
    order = rng.permutation(len(schedule))
    own_zygote = zygote is None
    zygote = zygote or Zygote()
    runs: list[tuple[str, int | None]] = []
    logs: list[Path] = []
    try:
        feeder.start()
        for i, j in enumerate(order.tolist()):
            kind, arg = schedule[j]
            log_path = workdir / f"run{i:02d}.log"
            logs.append(log_path)
            if kind == "kill":
                pid = zygote.spawn(config_path, log_path, broken=broken)
                time.sleep(float(rng.uniform(0.3, 2.0)))
                os.kill(pid, signal.SIGKILL)
                runs.append(("kill", zygote.wait(pid, 10)))
            elif kind == "term":
                pid = zygote.spawn(config_path, log_path, broken=broken)
                time.sleep(float(rng.uniform(0.8, 2.0)))
                os.kill(pid, signal.SIGTERM)
                runs.append(("term", zygote.wait(pid, 30)))
            else:
                name, nth = arg
                pid = zygote.spawn(config_path, log_path, env={"DPSTREAM_FAILPOINT": f"{name}:{nth}"},
                                   broken=broken)
                status = zygote.wait(pid, 8)
                reached = status is not None
                if not reached:  # nothing left to do (the input ended): kill it anyway
                    os.kill(pid, signal.SIGKILL)
                    status = zygote.wait(pid, 10)
                runs.append((f"{name}:{nth}" if reached else f"{name}:{nth} not reached", status))
        feeder.join(timesteps * pace + 60)
        log_path = workdir / "final.log"
        logs.append(log_path)
        pid = zygote.spawn(config_path, log_path, broken=broken)
        total = sum(len(c) for c in chunks)
        try:  # every input record consumed and committed, and every timestep released
            wait_for(lambda: (committed_total(bootstrap, k.group_id, k.input_topic) >= total
                              and len(releases_by_timestep(read_all(bootstrap, k.output_topic, timeout_s=5)))
                              >= timesteps) or zygote.wait(pid, 0) is not None,
                     timeout=90, interval=0.5, what="all input consumed and all timesteps released")
        except AssertionError:
            pass  # the checker reports what is missing
        os.kill(pid, signal.SIGTERM)
        status = zygote.wait(pid, 30)
        runs.append(("final+SIGTERM", status))
    finally:
        if own_zygote:
            zygote.close()
    violations, facts = check_published(bootstrap, cfg, injected=injected, dead=bad, timesteps=timesteps)
    if record_time and seeded:
        facts["replay_equal"] = _equals_replay(bootstrap, cfg, chunks, workdir, timesteps)
        if not facts["replay_equal"]:
            violations.append("record-time releases differ from the offline replay with arrival times")
    if status != 0:
        violations.append(f"the final run exited with {status}, not 0 after SIGTERM")
    text = "\n".join(p.read_text(errors="replace") for p in logs if p.exists())
    return CrashOutcome(violations, facts, runs, text)


def _equals_replay(bootstrap: str, cfg: dict[str, Any], chunks: list[list[bytes]], workdir: Path,
                   timesteps: int) -> bool:
    """The published releases equal an offline replay of the same events with their arrival times."""
    import csv

    from stream.lab.replay import replay

    path = workdir / "arrivals.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user_id", "event_time", "arrival", "age", "sex"])
        for t, msgs in enumerate(chunks):
            arrival = T0 + STEP * (t + 1) - 0.001
            for m in msgs:
                try:
                    doc = json.loads(m)
                except ValueError:
                    continue  # a malformed message: dead-lettered, no part of any release
                for e in doc if isinstance(doc, list) else [doc]:
                    w.writerow([e["user_id"], repr(e["event_time"]), repr(arrival), e["attributes"]["age"],
                                e["attributes"]["sex"]])
    settings = settings_from({**cfg, "schema": {**cfg["schema"], "arrival_time": "arrival"}})
    out = workdir / "replay.jsonl"
    replay(settings, path, out)
    offline = {json.loads(line)["timestep"]["index"]: line for line in out.read_bytes().splitlines()[1:]}
    published = {json.loads(v)["timestep"]["index"]: v
                 for v in dedupe_by_release_id(read_all(bootstrap, cfg["kafka"]["output_topic"])).values()}
    return sorted(offline) == list(range(timesteps)) and offline == published


if __name__ == "__main__":  # pragma: no cover
    import sys

    if sys.argv[1:] == ["zygote"]:
        _zygote_main()
