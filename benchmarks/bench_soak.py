"""Soak benchmark: an endless w-event stream through the service path; prints JSON.

    python benchmarks/bench_soak.py [--timesteps 1000,10000,100000] [--bins 10,4096] [--w 20]
                                    [--events 4] [--profile]

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timesteps", default="1000,10000,100000", help="cumulative milestones, comma-separated")
    ap.add_argument("--bins", default="10,4096")
    ap.add_argument("--w", type=int, default=20)
    ap.add_argument("--events", type=int, default=4, help="events per timestep")
    ap.add_argument("--profile", action="store_true", help="tracemalloc diff first → last milestone")
    args = ap.parse_args()
    milestones = sorted(int(x) for x in args.timesteps.split(","))
    if args.profile:
        tracemalloc.start(4)
    results = [soak(int(b), milestones, args.w, args.events, args.profile) for b in args.bins.split(",")]
    print(json.dumps({"benchmark": "soak", "python": sys.version.split()[0], "results": results}, indent=1))


if __name__ == "__main__":
    main()
