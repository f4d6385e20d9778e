"""Soak benchmark: an endless w-event stream through the service path; prints JSON.

    python benchmarks/bench_soak.py [--timesteps 1000,10000,100000] [--bins 10,4096] [--w 20]
                                    [--events 4] [--profile]
    python benchmarks/bench_soak.py --mode backlog [--timesteps 1000,10000] [--bins 10,4096]
                                    [--per-checkpoint 100]

``--mode backlog`` (issue 28): catching up after downtime, through the real embedded broker and
``dpstream run`` as its own process. For each backlog size (each a fresh stream) the whole input
(``--events`` per 1-second timestep, record times set by the producer: ``kafka.record_time:
trusted-create-time``) is produced first, then the service is started with ``--max-timesteps``
equal to the backlog: ``stream.start`` lies years behind the wall clock, so the clock completes
every backlog timestep at once, and ``--max-timesteps`` bounds the catch-up. Reported per size:
``peak_rss_mb`` (the service process's ``ru_maxrss`` from ``wait4``), ``journal_peak_bytes``
(the journal's largest size on disk, sampled every 50 ms) and ``journal_bytes`` (at the end),
``largest_checkpoint_releases`` (``service.max_releases_per_checkpoint``, ``--per-checkpoint``),
``seconds`` (start to exit), and ``restart_s``: a second start on the same state, from spawn to its
"started" log line (Python imports included; it then exits, as every timestep is released).
The broker keeps every topic in memory (the releases too): 10⁵ timesteps at 4,096 bins would
hold gigabytes there, so choose the sizes to fit the machine.

The live mode (the default) is described below.

What runs: :class:`stream.service.loop.Service` itself — ``start()`` (journal
recovery, pipeline restore) and ``run()`` (poll → decode → window → seal →
journal append with fsync → transaction) — with the real journal in a
temporary state directory. Only Kafka is replaced, by in-process fakes
patched into ``stream.service.loop``: a reader that serves ``--events``
JSON events per 1-second timestep and makes one new timestep of input
"arrive" per poll (so the service is always caught up and checkpoints every
timestep, as a live stream does), and a transactional writer that keeps the
committed marker, offsets and the last ``kafka.startup_tail_records`` output
values (what ``read_tail`` returns at start-up).

Settings: w-event, ``w`` = 20 (``--w``), ε = 1, DSAT, LPA, record-time
inclusion (log-append-time), CSPRNG noise; domains of 10 bins (one numeric
attribute) and 4,096 bins (a 64 × 64 grid).

At each milestone (cumulative timesteps released) the running service is
stopped, and the benchmark reports:

* ``rss_mb``: the process's resident set size (``/proc/self/statm``) after
  a ``gc.collect()``, and ``peak_rss_mb`` (``ru_maxrss``, whole process);
* ``journal_bytes``: the journal file's size on disk (a sawtooth once
  compaction runs: ``journal_compacted_bytes`` right after a compaction,
  ``journal_limit_bytes`` the size that triggers the next one), and
  ``journal_index_entries``, the release digests held in memory;
* ``restart_s``: wall time of a fresh ``Service.start()`` on that state
  directory (open and verify the journal, plan the recovery against the fake
  Kafka, restore the pipeline) — the part of a restart that depends on the
  stream's history. The restarted service then carries on to the next
  milestone;
* ``seconds``: wall time of the run up to that milestone.

The fake broker's output tail (the last ``kafka.startup_tail_records``
release values, ~10 MB at 4,096 bins) lives in the same process and is part
of the RSS; it is bounded.

``--profile`` adds a ``tracemalloc`` diff between the first and the last
milestone of each domain: the top allocation sites that grew (and so grow with
the stream's length).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import stream.service.loop as loop_mod  # noqa: E402
from stream.config import load_settings  # noqa: E402
from stream.service.http import Health  # noqa: E402
from stream.service.journal import journal_path  # noqa: E402
from stream.service.metrics import Metrics  # noqa: E402
from stream.service.testing import FakeKafka, fake_kafka_parts  # noqa: E402

START = 1_700_000_000.0  # stream.start (on the 1 s grid), epoch seconds


def install_fakes(kafka: FakeKafka) -> None:
    for name, value in fake_kafka_parts(kafka).items():
        setattr(loop_mod, name, value)


def settings_for(bins: int, w: int, state_dir: str) -> Any:
    if bins == 10:
        attrs = [{"name": "x", "kind": "numeric", "min": 0, "max": 100, "bins": 10, "out_of_range": "reject"}]
    elif bins == 4096:
        attrs = [{"name": "x", "kind": "numeric", "min": 0, "max": 64, "bins": 64, "out_of_range": "reject"},
                 {"name": "y", "kind": "numeric", "min": 0, "max": 64, "bins": 64, "out_of_range": "reject"}]
    else:
        raise SystemExit("--bins takes 10 and/or 4096")
    return load_settings(None, **{
        "stream": {"id": "soak", "timestep": "1s", "start": "2023-11-14T22:13:20Z", "allowed_lateness": "0s"},
        "schema": {"attributes": attrs},
        "privacy": {"unit": "w-event", "epsilon": 1, "w": w, "population": 1000},
        "release": {"decision": "dsat", "mechanism": "lpa"},
        "kafka": {"input_topic": "soak-in", "output_topic": "soak-out", "record_time": "log-append-time",
                  "create_topics": False},
        "service": {"state_dir": state_dir},
    })


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _service(settings: Any, max_timesteps: int | None) -> Any:
    return loop_mod.Service(settings, metrics=Metrics(), health=Health(), stop=threading.Event(),
                            max_timesteps=max_timesteps)


def soak(bins: int, milestones: list[int], w: int, events: int, profile: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"bins": bins, "w": w, "events_per_timestep": events, "milestones": []}
    with tempfile.TemporaryDirectory(prefix="dpstream-soak-") as state_dir:
        s = settings_for(bins, w, state_dir)
        kafka = FakeKafka(start=START, events_per_step=events, two_d=bins == 4096, modulus=100 if bins == 10 else 64,
                          tail=s.kafka.startup_tail_records, output_topic=s.kafka.output_topic)
        install_fakes(kafka)
        path = journal_path(state_dir, s.stream.id)
        svc = _service(s, None)
        svc.start()
        t0 = time.perf_counter()
        first_snap = None
        for n in milestones:
            svc.max_timesteps = n
            svc.run()
            svc.close()
            seconds = time.perf_counter() - t0
            del svc
            gc.collect()
            entry: dict[str, Any] = {
                "timesteps": n,
                "seconds": round(seconds, 1),
                "rss_mb": round(_rss_mb(), 1),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "journal_bytes": path.stat().st_size,
            }
            if profile:
                snap = tracemalloc.take_snapshot()
                if first_snap is None:
                    first_snap = snap
            svc = _service(s, None)
            r0 = time.perf_counter()
            svc.start()
            entry["restart_s"] = round(time.perf_counter() - r0, 3)
            entry["next_timestep"] = svc.pipeline.next_index
            # the file is a sawtooth between these two: right after a compaction, and the size that triggers one
            entry["journal_compacted_bytes"] = svc.journal.base_size
            entry["journal_limit_bytes"] = (svc.journal.compact_limit() if s.service.journal_compact_bytes is None
                                            else s.service.journal_compact_bytes)
            entry["journal_index_entries"] = len(svc.journal.index)
            out["milestones"].append(entry)
            print(json.dumps({"progress": entry, "bins": bins}), file=sys.stderr, flush=True)
        if profile and first_snap is not None:
            last = tracemalloc.take_snapshot()
            stats = last.compare_to(first_snap, "lineno")
            out["growth"] = [{"site": str(st.traceback[0]), "size_diff_kb": round(st.size_diff / 1024, 1),
                              "count_diff": st.count_diff} for st in stats[:12]]
        svc.close()
    return out


def _backlog_config(bins: int, w: int, state_dir: str, bootstrap: str, tag: str, per_checkpoint: int) -> dict:
    settings = settings_for(bins, w, state_dir)
    cfg = json.loads(settings.model_dump_json(by_alias=True, exclude_unset=True))
    cfg["stream"]["clock_skew"] = "5s"  # stream.start is years back: the wall clock completes everything
    cfg["kafka"] = {"bootstrap_servers": bootstrap, "input_topic": f"{tag}.in", "output_topic": f"{tag}.out",
                    "dead_letter_topic": f"{tag}.dead", "late_topic": f"{tag}.late", "state_topic": f"{tag}.state",
                    "group_id": f"{tag}.group", "record_time": "trusted-create-time", "topic_partitions": 1,
                    "max_poll_interval_ms": 3000, "session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
    cfg["service"].update({"http_port": 0, "max_releases_per_checkpoint": per_checkpoint, "log_level": "INFO"})
    return cfg


def _produce_backlog(bootstrap: str, topic: str, timesteps: int, events: int, bins: int) -> float:
    """``events`` JSON events per 1-second timestep, each record stamped inside its timestep."""
    from kafka import KafkaProducer

    from stream.config import KafkaSection
    from stream.service.kafka_io import ensure_topics

    ensure_topics(KafkaSection(bootstrap_servers=bootstrap, input_topic=topic), {topic: 1})
    t0 = time.perf_counter()
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 18, acks=1)
    modulus = 100 if bins == 10 else 64
    n = 0
    for t in range(timesteps):
        stamp = int((START + t + 0.999) * 1000)
        for _ in range(events):
            n += 1
            attrs = {"x": n % modulus} if bins == 10 else {"x": n % modulus, "y": (n * 7) % modulus}
            value = json.dumps({"user_id": f"u{n % 1000}", "event_time": START + t + 0.5, "attributes": attrs})
            p.send(topic, value=value.encode(), partition=0, timestamp_ms=stamp)
    p.flush()
    p.close()
    return time.perf_counter() - t0


def _run_service(config: Path, timesteps: int, journal: Path, log: Path) -> dict[str, Any]:
    """``dpstream run --max-timesteps`` as a child process; its peak RSS, the journal's peak size, the
    time to its "started" line and to its exit."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "stream", "run", "--config", str(config),  # noqa: S603
                                 "--max-timesteps", str(timesteps)], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    started = None
    peak_journal = 0
    timeline: list[float] = []  # VmRSS (MB) every 2 s: where in the run the memory is
    next_sample = 0.0
    while True:
        done, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if journal.exists():
            peak_journal = max(peak_journal, journal.stat().st_size)
        if not done and time.perf_counter() >= next_sample:
            next_sample = time.perf_counter() + 2.0
            try:
                with open(f"/proc/{proc.pid}/statm") as f:
                    timeline.append(round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1))
            except OSError:
                pass
        if started is None and '"event": "started"' in log.read_text(errors="replace"):
            started = time.perf_counter() - t0
        if done:
            break
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"exit": proc.returncode, "seconds": round(time.perf_counter() - t0, 1),
            "started_s": None if started is None else round(started, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "journal_peak_bytes": peak_journal,
            "rss_timeline_mb": timeline if len(timeline) <= 12 else timeline[:: max(1, len(timeline) // 12)]}


def backlog(bins: int, sizes: list[int], w: int, events: int, per_checkpoint: int, broker: Any,
            workdir: Path) -> dict[str, Any]:
    """Each backlog size on a fresh stream: produce it all, then run the service over it and restart it."""
    import yaml

    from stream.service.journal import Journal

    out: dict[str, Any] = {"bins": bins, "w": w, "events_per_timestep": events, "per_checkpoint": per_checkpoint,
                           "backlogs": []}
    for n in sizes:
        tag = f"backlog-{bins}-{n}-{os.getpid()}-{int(time.time())}"
        state_dir = workdir / tag
        cfg = _backlog_config(bins, w, str(state_dir), broker.bootstrap, tag, per_checkpoint)
        config = workdir / f"{tag}.yaml"
        config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        produce_s = _produce_backlog(broker.bootstrap, cfg["kafka"]["input_topic"], n, events, bins)
        journal = journal_path(state_dir, cfg["stream"]["id"])
        first = _run_service(config, n, journal, workdir / f"{tag}.log")
        entry: dict[str, Any] = {"timesteps": n, "produce_s": round(produce_s, 1), **first,
                                 "journal_bytes": journal.stat().st_size if journal.exists() else 0}
        with Journal.open(state_dir, cfg["stream"]["id"]) as j:
            entry["next_timestep"] = (j.last_timestep or 0) + 1
            entry["largest_checkpoint_releases"] = max((len(cp.releases) for cp in j.checkpoints_on_disk()), default=0)
        again = _run_service(config, n, journal, workdir / f"{tag}.restart.log")
        entry["restart_s"] = again["started_s"]
        entry["restart_exit"] = again["exit"]
        out["backlogs"].append(entry)
        print(json.dumps({"progress": entry, "bins": bins}), file=sys.stderr, flush=True)
    return out


def main_backlog(args: Any) -> None:
    from stream.service.broker import EmbeddedBroker

    sizes = sorted(int(x) for x in args.timesteps.split(","))
    broker = EmbeddedBroker.start()
    try:
        with tempfile.TemporaryDirectory(prefix="dpstream-backlog-") as work:
            results = [backlog(int(b), sizes, args.w, args.events, args.per_checkpoint, broker, Path(work))
                       for b in args.bins.split(",")]
    finally:
        broker.stop()
    print(json.dumps({"benchmark": "soak-backlog", "python": sys.version.split()[0], "results": results}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("live", "backlog"), default="live",
                    help="live: in-process fakes, one timestep per poll; backlog: real broker, input first")
    ap.add_argument("--per-checkpoint", type=int, default=100, help="backlog: service.max_releases_per_checkpoint")
    ap.add_argument("--timesteps", default="1000,10000,100000", help="cumulative milestones, comma-separated")
    ap.add_argument("--bins", default="10,4096")
    ap.add_argument("--w", type=int, default=20)
    ap.add_argument("--events", type=int, default=4, help="events per timestep")
    ap.add_argument("--profile", action="store_true", help="tracemalloc diff first → last milestone")
    args = ap.parse_args()
    if args.mode == "backlog":
        main_backlog(args)
        return
    milestones = sorted(int(x) for x in args.timesteps.split(","))
    if args.profile:
        tracemalloc.start(4)
    results = [soak(int(b), milestones, args.w, args.events, args.profile) for b in args.bins.split(",")]
    print(json.dumps({"benchmark": "soak", "python": sys.version.split()[0], "results": results}, indent=1))


if __name__ == "__main__":
    main()
