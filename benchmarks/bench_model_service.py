"""Model releases in the service on a huge domain: time and memory per sealed timestep (issue 31 item 1).

``release.mechanism: copula | marginals`` on a domain of ``levels ** attributes`` cells
(default 8¹⁰ = 1,073,741,824) through the service's own :class:`stream.pipeline.ReleasePipeline`:
each timestep's events are offered as one columnar batch (decoding is not what is measured
here: ``bench_throughput.py`` measures it), then the timestep is sealed — contribution
bounding, the bounded records as a :class:`histogram.records.RecordTable` (never the count
vector), the decision in the model's space (DSAT), the model release, the message. Each
mechanism runs in a child process of its own, so its peak RSS (``ru_maxrss``) is its own.

Targets: ≤ 1 s and ≤ 1 GiB per timestep at 10⁶ people on one core.

    OMP_NUM_THREADS=1 python benchmarks/bench_model_service.py [--people 1000000] [--timesteps 3]
        [--attributes 10] [--levels 8] [--mechanisms copula,copula-mle,copula-median,marginals]

Prints one JSON document: per mechanism the seal time of every timestep (seconds), their
median, the kinds released, and the peak RSS (MiB) of its process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MECHANISMS = {
    "copula": {"mechanism": "copula", "copula": {"correlation": "kendall"}},
    "copula-mle": {"mechanism": "copula", "copula": {"correlation": "mle"}},
    "copula-median": {"mechanism": "copula", "copula": {"correlation": "median"}},
    "marginals": {"mechanism": "marginals", "marginals": {"k": 2}},
}


def child(name: str, people: int, timesteps: int, attributes: int, levels: int, seed: int) -> dict:
    import numpy as np

    from stream.ingest.events import EventBatch
    from stream.pipeline import ReleasePipeline
    from stream.service.testing import small_settings

    attrs = [{"name": f"a{j}", "kind": "numeric", "min": 0, "max": levels, "bins": levels} for j in range(attributes)]
    settings = small_settings(
        seed=seed, schema={"attributes": attrs},
        privacy={"epsilon": 1, "cutoff": 5, "horizon": 100, "population": people},
        release={"decision": "dsat", "threshold": 0.05, **MECHANISMS[name]},
    )
    pipeline = ReleasePipeline(settings)
    rng = np.random.default_rng(seed)
    # correlated attributes: a shared latent factor, so the model has dependence to find
    base = rng.normal(size=people)
    users = np.char.add("u", np.arange(people).astype(str))
    seal_s, kinds = [], []
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for t in range(timesteps):
        latent = 0.7 * base[:, None] + 0.7 * rng.normal(size=(people, attributes))
        cols = {f"a{j}": np.clip(np.floor((latent[:, j] + 2.5) / 5 * levels), 0, levels - 1) + 0.5
                for j in range(attributes)}
        times = t * 60 + 1 + np.arange(people) * (50.0 / people)
        pipeline.offer(EventBatch.from_columns(users, times, cols), whole_input=True)
        del latent, cols, times
        t0 = time.perf_counter()
        sealed = pipeline.seal(final=True)
        seal_s.append(time.perf_counter() - t0)
        kinds.extend(s.kind for s in sealed)
    return {
        "cells": settings.domain().size,
        "people_per_timestep": people,
        "seal_seconds": [round(x, 4) for x in seal_s],
        "seal_seconds_median": round(statistics.median(seal_s), 4),
        "kinds": kinds,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_before_events_mib": round(rss_before, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--people", type=int, default=1_000_000)
    p.add_argument("--timesteps", type=int, default=3)
    p.add_argument("--attributes", type=int, default=10)
    p.add_argument("--levels", type=int, default=8)
    p.add_argument("--mechanisms", default=",".join(MECHANISMS))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.people, args.timesteps, args.attributes, args.levels, args.seed)))
        return 0
    out = {"targets": {"seal_seconds": 1.0, "peak_rss_mib": 1024}, "load_average": os.getloadavg()[0],
           "mechanisms": {}}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    for name in [m.strip() for m in args.mechanisms.split(",") if m.strip()]:
        cmd = [sys.executable, __file__, "--child", name, "--people", str(args.people), "--timesteps",
               str(args.timesteps), "--attributes", str(args.attributes), "--levels", str(args.levels),
               "--seed", str(args.seed)]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            out["mechanisms"][name] = {"error": done.stderr.strip().splitlines()[-1:]}
            continue
        res = json.loads(done.stdout)
        res["meets_targets"] = (res["seal_seconds_median"] <= 1.0 and res["peak_rss_mib"] <= 1024)
        out["mechanisms"][name] = res
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
