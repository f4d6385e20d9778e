"""The JSON decoder alone, per event; prints JSON.

    OMP_NUM_THREADS=1 python benchmarks/bench_decode.py [--events 20000] [--repeats 7]

For 500-event messages and single-event messages (a 100 × 100 grid, 50k people): the best of
``--repeats`` runs of :meth:`EventDecoder.decode` (msgspec first, as shipped), of the same decoder
with msgspec refusing everything (the pydantic path the service used before), and of
:func:`validate_batch` on the result, in µs per event.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402

from histogram.domain import Domain  # noqa: E402
from stream.ingest.events import EventDecoder, validate_batch  # noqa: E402

T0 = 1_704_067_200
DOMAIN = Domain.from_description([{"name": "x", "kind": "numeric", "min": 0, "max": 100, "bins": 100},
                                  {"name": "y", "kind": "numeric", "min": 0, "max": 100, "bins": 100}])


def events(n: int) -> list[dict]:
    return [{"user_id": f"u{(i * 7919) % 50_000}", "event_time": T0 + i * 0.001,
             "attributes": {"x": i % 100, "y": (i * 7) % 100}} for i in range(n)]


def best(fn, repeats: int) -> float:  # noqa: ANN001
    out = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def _refuse(payload: bytes) -> object:
    raise msgspec.ValidationError("the pydantic path")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    evs = events(args.events)
    shapes = {"batch_500": [json.dumps(evs[i:i + 500]).encode() for i in range(0, len(evs), 500)],
              "single_event": [json.dumps(e).encode() for e in evs]}
    out: dict[str, dict[str, float]] = {}
    for name, payloads in shapes.items():
        fast = EventDecoder(DOMAIN, max_events_per_message=1000)
        slow = EventDecoder(DOMAIN, max_events_per_message=1000)
        slow._fast = _refuse  # type: ignore[method-assign]
        batch = fast.decode(payloads).batch
        per = 1e6 / len(evs)
        out[name] = {"msgspec_decode_us": round(best(lambda: fast.decode(payloads), args.repeats) * per, 3),  # noqa: B023
                     "pydantic_decode_us": round(best(lambda: slow.decode(payloads), args.repeats) * per, 3),  # noqa: B023
                     "validate_us": round(best(lambda: validate_batch(batch, DOMAIN), args.repeats) * per, 3)}  # noqa: B023
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
