"""Issue 11's inclusion scenario, reproducible on any checkout that has both rules; prints JSON.

    python benchmarks/inclusion_scenario.py [--rule record-time|watermark]

Timestep 15 min, allowed_lateness 2 min, max_future 10 min. 2,700 events of 900 honest people
(record time = event time + 2 s), plus one extra person whose single event is 9 min 59 s
ahead of its own record time (within max_future). Both inputs go through the service's
windowing (:class:`stream.pipeline.ReleasePipeline`, offered in record-time order, 50 events a
poll, sealed after each poll) and the script prints, per sealed timestep, the L1 distance
between the true histograms of D and D′ = D + the extra person, and the worst one.

``record-time`` (the default rule): each event counts by its own record time; the worst L1 is
1, the extra person's own timestep. ``watermark`` (the legacy rule, kept behind
``kafka.allow_data_dependent_inclusion``): the extra event moves the watermark and seals a
timestep early, sending other people's events to the late topic (on the main before issue 11,
6745e51, the same scenario gave L1 = 201).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stream.ingest.events import EventBatch  # noqa: E402
from stream.pipeline import ReleasePipeline  # noqa: E402
from stream.service.testing import small_settings  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


def settings(rule: str):  # noqa: ANN201
    stream = {"timestep": "15m", "allowed_lateness": "2m", "max_future": "10m", "start": "2026-01-01T00:00:00Z"}
    if rule == "watermark":
        return small_settings(stream={**stream, "idle_timeout": "1h"})  # small_settings opts into the legacy rule
    return small_settings(stream={**stream, "clock_skew": "5s"}, kafka={"record_time": "trusted-create-time"})


def sealed_histograms(s, events: list[tuple[str, float, float, int, str]], rule: str) -> dict[int, np.ndarray]:  # noqa: ANN001
    p = ReleasePipeline(s)
    out: dict[int, np.ndarray] = {}
    seal_cell = p._seal_cell

    def spy(cell: int, counts: object) -> object:  # the true histogram of each sealed timestep
        data = p.window.take(cell)
        p.window.put_back(data)
        out[cell] = data.counts(p.domain.size)
        return seal_cell(cell, counts)

    p._seal_cell = spy  # type: ignore[method-assign]
    for i in range(0, len(events), 50):
        part = events[i:i + 50]
        batch = EventBatch.from_records([{"user_id": u, "event_time": t, "attributes": {"age": a, "sex": x}}
                                         for u, t, _r, a, x in part])
        if rule == "watermark":
            p.offer(batch, now=part[-1][2])
            p.seal(now=part[-1][2])
        else:
            p.offer(batch, record_time=np.array([e[2] for e in part]))
            p.seal(record_frontier=part[-1][2])
    if rule == "watermark":
        p.seal(final=True)
    else:
        p.seal(final=True, record_frontier=float("inf"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rule", choices=("record-time", "watermark"), default="record-time")
    args = ap.parse_args()
    s = settings(args.rule)
    base = [(f"p{i}", T0 + i, T0 + i + 2, i % 100, "MF"[i % 2]) for i in range(2700)]
    extra = ("newcomer", T0 + 700 + 599, T0 + 700, 30, "M")  # 9 min 59 s ahead of its own record time
    h = sealed_histograms(s, sorted(base, key=lambda e: e[2]), args.rule)
    h2 = sealed_histograms(s, sorted([*base, extra], key=lambda e: e[2]), args.rule)
    zero = np.zeros(s.domain().size, dtype=np.int64)
    l1 = {c: int(np.abs(h.get(c, zero) - h2.get(c, zero)).sum()) for c in sorted(set(h) | set(h2))}
    print(json.dumps({"rule": args.rule, "per_timestep_l1": {str(c): v for c, v in l1.items()},
                      "worst_l1": max(l1.values())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
