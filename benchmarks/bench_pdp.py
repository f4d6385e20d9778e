"""Benchmark: the five personalized-DP mechanisms (thesis ch. 5) on a census-like population.

Usage::

    python benchmarks/bench_pdp.py [--records 100000] [--runs 20] [--queries 1000] [--seed 1] [--markdown]

Population: ``--records`` people drawn from the census model of
``stream.lab.generate`` (the thesis's first subset of attributes: Age 96,
Gender 2, Education 12, Income 3 = 6,912 bins), one record per person.
Budgets, assigned to people at random and independently of their record (the
thesis's assumption, docs/privacy.md §12.2), rounded *down* to a public grid
of 1/10000 so the exact sampler's denominator stays small:

* ``uniform``: U(0.01, 0.1) (thesis §5.3.1);
* ``normal``: N(0.1, 1) clipped to the thesis's range [0.01, 1.0] (about 46 %
  of people land on 0.01 and 18 % on 1.0);
* ``tiers``: three consent tiers, 0.01 (20 %), 0.05 (50 %), 0.1 (30 %).

The budget registry (levels and head counts) is public; the mechanisms plan
from it only. Mechanisms: Minimum; Threshold at the mean budget; Sampling
(Jorgensen et al.) at three thresholds (the 25th percentile, the mean and the
largest budget: the thesis varies it and finds the mean best for counts);
privacy-aware partitioning (min group size N/20) and utility-based
partitioning (min group size N/100), both combined with the public
:class:`CountUtility` (query_bins = the workload's mean number of bins per
query, sampling_variance = f(1 − f) for the workload's mean relative size f
under a uniform spread: both public).

Queries (public workload, same for every mechanism): ``count`` = COUNT(*)
with a random interval on ONE random attribute; ``range`` = the thesis's
random range-count queries (a random interval on every attribute). Error is
the thesis's relative frequency error |A_act − A_noisy| / N, averaged over the
queries; the JSON gives its mean and standard deviation over ``--runs``
seeded releases. Prints one JSON object (``--markdown`` adds the table of
docs/results.md on stderr).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core; must precede the numpy import

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from fractions import Fraction  # noqa: E402

import numpy as np  # noqa: E402

from histogram.noise import Randomness  # noqa: E402
from histogram.personalized import (  # noqa: E402
    BudgetLevels,
    CountUtility,
    PersonalizedMechanism,
    minimum,
    privacy_aware,
    sampling,
    threshold,
    utility_based,
)
from histogram.query import RangeQueries, answer_range_queries, random_range_queries  # noqa: E402
from stream.lab.generate import CensusProfile, sample_census  # noqa: E402

SHAPE = (96, 2, 12, 3)
COLUMNS = (0, 1, 2, 5)  # age, gender, education, income of the census model
GRID = 10_000  # budgets on a public grid of 1/GRID


def budgets(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Budget numerators over GRID (int64), assigned independently of the records."""
    if kind == "uniform":
        x = rng.uniform(0.01, 0.1, n)
    elif kind == "normal":
        x = np.clip(rng.normal(0.1, 1.0, n), 0.01, 1.0)
    elif kind == "tiers":
        x = rng.choice([0.01, 0.05, 0.1], size=n, p=[0.2, 0.5, 0.3])
    else:
        raise ValueError(kind)
    return np.maximum(np.floor(np.round(x * GRID, 6)).astype(np.int64), int(0.01 * GRID))


def one_attribute_queries(m: int, rng: np.random.Generator) -> RangeQueries:
    full = random_range_queries(SHAPE, m, rng)
    which = rng.integers(0, len(SHAPE), m)
    lo = np.zeros_like(full.lo)
    hi = np.tile(np.asarray(SHAPE) - 1, (m, 1))
    rows = np.arange(m)
    lo[rows, which] = full.lo[rows, which]
    hi[rows, which] = full.hi[rows, which]
    return RangeQueries(lo, hi)


def mechanisms(
    levels: BudgetLevels, queries: RangeQueries, n: int
) -> dict[str, PersonalizedMechanism]:
    bins = float(np.mean(queries.size))
    f = bins / float(np.prod(SHAPE))
    util = CountUtility(query_bins=bins, sampling_variance=f * (1 - f))
    eps = np.repeat(np.array([float(e) for e in levels.epsilons]), levels.counts)
    q25 = Fraction(int(np.quantile(eps, 0.25) * GRID), GRID)
    mean = Fraction(int(float(levels.mean()) * GRID), GRID)
    out = {
        "minimum": minimum(levels),
        "threshold@mean": threshold(levels, mean),
        "sampling@q25": sampling(levels, max(q25, levels.minimum)),
        "sampling@mean": sampling(levels, mean),
        "sampling@max": sampling(levels, levels.epsilons[-1]),
        "privacy-aware": privacy_aware(levels, min_size=n // 20, utility=util),
        "utility-based": utility_based(levels, util, min_size=n // 100),
    }
    return out


def run(records: int, runs: int, queries: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    people = sample_census(records, CensusProfile(), rng)[:, COLUMNS]
    bins = np.ravel_multi_index(tuple(people.T), SHAPE)
    size = int(np.prod(SHAPE))
    truth = np.bincount(bins, minlength=size)
    workloads = {
        "count": one_attribute_queries(queries, rng),
        "range": random_range_queries(SHAPE, queries, rng),
    }
    exact = {k: answer_range_queries(truth, SHAPE, q) for k, q in workloads.items()}
    results: dict = {}
    for kind in ("uniform", "normal", "tiers"):
        num = budgets(kind, records, rng)
        values, counts = np.unique(num, return_counts=True)
        levels = BudgetLevels(
            tuple(Fraction(int(v), GRID) for v in values), tuple(int(c) for c in counts)
        )
        level_of = np.searchsorted(values, num)
        mechs = mechanisms(levels, workloads["range"], records)
        setting: dict = {
            "levels": levels.size,
            "min": str(levels.minimum),
            "mean": float(levels.mean()),
            "max": str(levels.epsilons[-1]),
            "mechanisms": {},
        }
        for name, mech in mechs.items():
            errs: dict[str, list[float]] = {k: [] for k in workloads}
            start = time.perf_counter()
            for r in range(runs):
                drawer = Randomness.seeded(seed).drawer(f"pdp/{kind}/{name}", r)
                est = mech.release(bins, level_of, size, drawer).estimate
                for k, q in workloads.items():
                    errs[k].append(
                        float(np.mean(np.abs(answer_range_queries(est, SHAPE, q) - exact[k])))
                        / records
                    )
            setting["mechanisms"][name] = {
                **{f"{k}_rfe": float(np.mean(v)) for k, v in errs.items()},
                **{f"{k}_rfe_sd": float(np.std(v)) for k, v in errs.items()},
                "groups": [
                    [
                        str(mech.levels.epsilons[p.levels[0]]),
                        str(mech.levels.epsilons[p.levels[-1]]),
                        str(p.epsilon),
                    ]
                    for p in mech.parts
                ],
                "seconds_per_release": (time.perf_counter() - start) / runs,
            }
        results[kind] = setting
    return {
        "records": records,
        "bins": size,
        "runs": runs,
        "queries": queries,
        "seed": seed,
        "randomness": "seeded",
        "metric": "relative frequency error |true - estimate| / N, mean over queries, then mean (sd) over runs",
        "results": results,
    }


def markdown(report: dict) -> str:
    lines = [
        "| budgets | mechanism | groups | count RFE (×10⁻³) | range RFE (×10⁻³) |",
        "|---|---|---|---|---|",
    ]
    for kind, setting in report["results"].items():
        for name, r in setting["mechanisms"].items():
            lines.append(
                f"| {kind} | {name} | {len(r['groups'])} | {1e3 * r['count_rfe']:.3f} ± {1e3 * r['count_rfe_sd']:.3f} "
                f"| {1e3 * r['range_rfe']:.3f} ± {1e3 * r['range_rfe_sd']:.3f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--markdown", action="store_true", help="also print the results table on stderr"
    )
    args = parser.parse_args()
    report = run(args.records, args.runs, args.queries, args.seed)
    print(json.dumps(report, indent=1))
    if args.markdown:
        print(markdown(report), file=sys.stderr)


if __name__ == "__main__":
    main()
