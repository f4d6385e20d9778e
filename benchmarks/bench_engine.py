"""Release-engine speed: histogram building and one timestep's decision + LPA release.

Prints one JSON object. Targets (issue 2):
* building histograms: >= 2,000,000 records/s on one core, census domain (27,648 bins);
* one timestep's decision plus LPA release with the production (secure)
  randomness: <= 5 ms for 10^4 bins, <= 150 ms for 10^6 bins.

Run: ``python benchmarks/bench_engine.py [--records 2000000] [--repeats 7]``.
Medians of ``--repeats`` runs; the machine is shared, so also compare the
noise-only cost (``noise_ms``) with the total.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from fractions import Fraction

import numpy as np

from controller.method import MethodSpec, build_engine
from controller.units import UserLevel
from histogram.build import build_histogram
from histogram.domain import CategoricalAttribute, Domain, NumericAttribute
from histogram.lpa import LaplaceMechanism
from histogram.noise import Randomness


def census() -> Domain:
    return Domain(
        (
            NumericAttribute("age", 0, 96, 96),
            CategoricalAttribute("gender", ("m", "f")),
            CategoricalAttribute("education", tuple(f"e{i}" for i in range(12))),
            CategoricalAttribute("insurance", ("yes", "no")),
            CategoricalAttribute("marital", ("single", "married")),
            CategoricalAttribute("income", ("low", "mid", "high")),
        )
    )


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_build(n: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    d = census()
    ages = rng.uniform(0, 96, n)
    codes = {a.name: rng.integers(0, a.bins, n) for a in d.attributes[1:]}
    strings = {a.name: np.asarray(a.values)[codes[a.name]] for a in d.attributes[1:]}
    users = rng.permutation(n).astype(np.int64)
    users[: n // 10] = users[n // 10 : 2 * (n // 10)]  # 10% of people have two records
    times = rng.uniform(0, 3600, n)
    raw = {"age": ages, **strings}
    coded = {"age": ages, **codes}
    flags = {"age": False, **{k: True for k in codes}}
    out = {}
    t = median_time(lambda: build_histogram(d, raw), repeats)
    out["records_per_s_values"] = n / t
    t = median_time(lambda: build_histogram(d, coded, codes=flags), repeats)
    out["records_per_s_codes"] = n / t
    t = median_time(lambda: build_histogram(d, coded, codes=flags, user_ids=users, order_key=times), repeats)
    out["records_per_s_codes_bounded"] = n / t
    t = median_time(lambda: build_histogram(d, raw, user_ids=users, order_key=times), repeats)
    out["records_per_s_values_bounded"] = n / t
    return out


def bench_step(bins: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(1)
    population = 50 * bins
    spec = MethodSpec("dsat", UserLevel(1, 10_000, 10_000), population=population, threshold=0.0)
    engine = build_engine(spec, LaplaceMechanism(), bins)
    rnd = Randomness.secure()
    hists = [rng.poisson(50, bins).astype(np.int64) for _ in range(4)]
    state = engine.initial_state()
    _, state = engine.step(state, hists[0], rnd.drawer("b", 0))  # first release: the next steps query
    steps, kinds = [], []
    for i in range(repeats):
        s0 = time.perf_counter()
        rel, _ = engine.step(state, hists[1 + i % 3], rnd.drawer("b", 1))
        steps.append(time.perf_counter() - s0)
        kinds.append(rel.kind)
    noise = median_time(lambda: rnd.drawer("b", 2).discrete_laplace(Fraction(10), bins), repeats)
    return {
        "step_ms": statistics.median(steps) * 1000,
        "noise_ms": noise * 1000,
        "fresh_fraction": kinds.count("fresh") / len(kinds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "processor": platform.processor() or platform.machine()},
        "histogram_build": {"records": args.records, **bench_build(args.records, args.repeats)},
        "step_1e4_bins": bench_step(10_000, max(args.repeats, 15)),
        "step_1e6_bins": bench_step(1_000_000, args.repeats),
        "targets": {"records_per_s": 2_000_000, "step_1e4_ms": 5, "step_1e6_ms": 150},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
