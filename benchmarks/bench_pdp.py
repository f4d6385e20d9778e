"""Benchmark: the personalized-DP mechanisms measured as in thesis §5.3 (count task).

Usage::

    python benchmarks/bench_pdp.py [--records 100000] [--runs 10] [--queries 1000] [--seed 1]
        [--datasets us,brazil,flights] [--budgets uniform,normal,tiers] [--answer query,histogram]
        [--json out.json] [--plot out.png] [--markdown]

What the thesis does (§5.3.1–5.3.2.1, Figures 5.2–5.5) and what this script does:

* **Data.** The thesis uses 100,000 IPUMS census records of the US and of
  Brazil on Age, Gender, Education and Annual Income. No copy of IPUMS (or of
  any flights data) is in this repository, so the datasets are synthetic
  substitutes: ``us`` = the census model of ``stream.lab.generate``
  (Age 96 × Gender 2 × Education 12 × Income 3 = 6,912 bins); ``brazil`` =
  the same model tilted younger, less educated and poorer; ``flights`` = a
  flights-like model (carrier 14 × departure hour 24 × distance class 10 ×
  arrival-delay class 8 = 26,880 bins) with skewed carriers, morning/evening
  peaks and delays growing through the day. One record per person.
* **Budgets** drawn independently of the records (the thesis's assumption)
  and rounded down to a public grid of 1/10000: ``uniform`` U(0.01, 0.1);
  ``normal`` N(0.1, 1) restricted to the thesis's range [0.01, 1] by
  redrawing values outside it (a truncated normal, mean 0.47: the thesis
  reports the average budget of its normal setting "around 0.5", which a
  clipped normal, mean 0.36, does not give); ``normal-clipped`` the
  clipped variant an earlier version of this script used; ``tiers`` three
  consent tiers 0.01/0.05/0.1 (20/50/30 %), not in the thesis.
* **Mechanisms.** Minimum; Threshold at the mean (the thesis leaves it out
  of its experiments; shown for reference); Jorgensen et al.'s Sampling at a
  sweep of thresholds from the smallest to the largest budget, including the
  mean (the x-axis of Figures 5.2–5.5); privacy-aware partitioning (Alg. 10,
  k by eq. 5.2.3, minimum group size ``records/20``) and utility-based
  partitioning (Alg. 11, eq. 5.2.6, minimum group size ``records/100``),
  both combined by inverse-variance weights (§5.2.4) from the public
  :class:`CountUtility`; and, not in the thesis, ``planned-sampling``:
  Sampling at the threshold that minimises the predicted error
  (:meth:`PersonalizedMechanism.query_variance`) at the workload's public
  prior frequency, chosen from public information only.
* **Queries and error.** The thesis's random range-count queries (a random
  interval on every attribute), relative frequency error
  |A_act − A_noisy| / n, mean over the queries; mean ± sd over ``--runs``
  seeded releases (the thesis does not state its count-task repetitions).
* **How a query is answered** (``--answer``):

  - ``query``: the thesis's Definition 5.1.1 / 5.2.1 read literally: the
    ε-DP mechanism ``DP^f`` is applied to the count query ``f`` itself, one
    discrete Laplace draw (scale 1/ε, sensitivity 1) per query and part, so
    each *query* is ε_i-PDP (answering the whole workload this way would
    compose: an evaluation semantics, not a release the service makes);
  - ``histogram``: one PDP histogram release per mechanism answers every
    query (noise summed over the query's bins): the whole workload is ε_i-PDP,
    which is what the service publishes.

Prints one JSON object; ``--markdown`` prints the summary table on stderr;
``--plot`` draws one panel per (answer mode, dataset, budgets): RFE against
the Sampling threshold, with Minimum and the partitionings as horizontal
lines, as in Figures 5.2–5.5, and the planned threshold as a red star.
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

from histogram.lpa import LaplaceMechanism  # noqa: E402
from histogram.noise import NoiseDrawer, Randomness  # noqa: E402
from histogram.personalized import (  # noqa: E402
    BudgetLevels,
    CountUtility,
    PersonalizedMechanism,
    minimum,
    privacy_aware,
    sample_inclusion,
    sampling,
    threshold,
    utility_based,
)
from histogram.query import RangeQueries, answer_range_queries, random_range_queries  # noqa: E402
from stream.lab.generate import CensusProfile, sample_census  # noqa: E402

GRID = 10_000  # budgets on a public grid of 1/GRID
CENSUS_SHAPE = (96, 2, 12, 3)
CENSUS_COLUMNS = (0, 1, 2, 5)  # age, gender, education, income of the census model
FLIGHTS_SHAPE = (14, 24, 10, 8)  # carrier, departure hour, distance class, arrival-delay class
DATASETS = ("us", "brazil", "flights")
BUDGETS = ("uniform", "normal", "normal-clipped", "tiers")
ANSWERS = ("query", "histogram")
# Sampling thresholds evenly spaced from the smallest to the largest budget (plus the mean)
SWEEP = 9
PLAN_POINTS = 41  # candidate thresholds for the planned Sampling threshold


# -- populations --------------------------------------------------------------------


def _flights(n: int, rng: np.random.Generator) -> np.ndarray:
    share = 1.0 / np.arange(1, FLIGHTS_SHAPE[0] + 1) ** 1.1
    carrier = rng.choice(FLIGHTS_SHAPE[0], size=n, p=share / share.sum())
    hours = np.arange(24)
    w = np.exp(-0.5 * ((hours - 8) / 2.0) ** 2) + 0.8 * np.exp(-0.5 * ((hours - 18) / 2.5) ** 2)
    w[:5] = 0.01
    hour = rng.choice(24, size=n, p=w / w.sum())
    # regional carriers (high index) fly short; the big ones a log-normal spread of distances
    mu = 1.0 + 3.5 * (1 - carrier / FLIGHTS_SHAPE[0])
    distance = np.clip(np.round(rng.lognormal(np.log(mu), 0.5)), 0, FLIGHTS_SHAPE[2] - 1)
    # delays build up through the day: class 0 early, 1 on time, 2..7 growing delays
    late = np.clip(rng.exponential(0.6 + 0.08 * np.maximum(hour - 6, 0)), 0, 6)
    delay = np.where(rng.random(n) < 0.2, 0, 1 + np.floor(late)).astype(np.int64)
    return np.stack([carrier, hour, distance, delay], axis=1).astype(np.int64)


def population(name: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, tuple[int, ...]]:
    """Flat bin index per person and the domain shape of dataset ``name``."""
    if name == "us":
        rows, shape = sample_census(n, CensusProfile(), rng)[:, CENSUS_COLUMNS], CENSUS_SHAPE
    elif name == "brazil":
        tilt = CensusProfile(age=-1.2, female=0.0, education=-0.8, income=-0.8)
        rows, shape = sample_census(n, tilt, rng)[:, CENSUS_COLUMNS], CENSUS_SHAPE
    elif name == "flights":
        rows, shape = _flights(n, rng), FLIGHTS_SHAPE
    else:
        raise ValueError(f"unknown dataset {name!r}; choose from {DATASETS}")
    return np.ravel_multi_index(tuple(rows.T), shape).astype(np.int64), shape


def budgets(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Budget numerators over GRID (int64), drawn independently of the records
    (:func:`stream.lab.generate.budget_units`, the laws ``dpstream generate --budgets`` draws)."""
    from stream.lab.generate import budget_units

    if kind not in BUDGETS:
        raise ValueError(f"unknown budget distribution {kind!r}; choose from {BUDGETS}")
    return budget_units(kind, n, rng, GRID)


def sweep(levels: BudgetLevels) -> list[Fraction]:
    """The Sampling thresholds: SWEEP points from the smallest to the largest budget, and the mean."""
    lo, hi = levels.minimum, levels.epsilons[-1]
    grid = {
        Fraction(int((lo + (hi - lo) * Fraction(i, SWEEP - 1)) * GRID), GRID) for i in range(SWEEP)
    }
    mean = Fraction(int(float(levels.mean()) * GRID), GRID)
    grid = {
        g for g in grid if abs(g - mean) > (hi - lo) / (4 * (SWEEP - 1))
    }  # no near-duplicate of the mean
    grid.add(mean)
    return sorted(g for g in grid if lo <= g <= hi)


def planned_threshold(levels: BudgetLevels, frequency: float, query_bins: float) -> Fraction:
    """Sampling's threshold chosen from public information only: the one of PLAN_POINTS evenly
    spaced budgets minimising :meth:`PersonalizedMechanism.query_variance` at a prior frequency."""
    lo, hi = levels.minimum, levels.epsilons[-1]
    grid = sorted(
        {
            Fraction(int((lo + (hi - lo) * Fraction(i, PLAN_POINTS - 1)) * GRID), GRID)
            for i in range(PLAN_POINTS)
        }
        | {hi}
    )
    grid = [t for t in grid if t >= lo]
    return min(grid, key=lambda t: sampling(levels, t).query_variance(frequency, query_bins))


def mechanisms(
    levels: BudgetLevels, utility: CountUtility, n: int, frequency: float = 0.05
) -> dict[str, PersonalizedMechanism]:
    """The plans of one setting; ``frequency`` is the public prior a planned threshold uses."""
    mean = Fraction(int(float(levels.mean()) * GRID), GRID)
    out: dict[str, PersonalizedMechanism] = {
        "minimum": minimum(levels),
        "threshold@mean": threshold(levels, mean),
        "privacy-aware": privacy_aware(levels, min_size=max(1, n // 20), utility=utility),
        "utility-based": utility_based(levels, utility, min_size=max(1, n // 100)),
        "planned-sampling": sampling(
            levels, planned_threshold(levels, frequency, utility.query_bins)
        ),
    }
    for t in sweep(levels):
        out[f"sampling@{float(t):.4g}"] = sampling(levels, t)
    return out


# -- answering ----------------------------------------------------------------------


def answer_per_query(
    mech: PersonalizedMechanism,
    bins: np.ndarray,
    level_of: np.ndarray,
    shape: tuple[int, ...],
    queries: RangeQueries,
    noise: NoiseDrawer,
) -> np.ndarray:
    """Thesis Def. 5.1.1/5.2.1 with ``f`` = one count query: a Laplace draw per query and part.

    The same plan, coins and combination as :meth:`PersonalizedMechanism.release`,
    but the part's noise goes on each query's exact answer instead of on each
    bin (sensitivity 1 per query). Each query alone is ε_i-PDP.
    """
    size = int(np.prod(shape))
    part = mech.part_of_level()[level_of]
    expected = mech.expected_members()
    total = float(mech.levels.total)
    lpa = LaplaceMechanism(sensitivity=1)
    est = np.zeros(queries.lo.shape[0])
    for k, p in enumerate(mech.parts):
        members = np.flatnonzero(part == k)
        if p.sample_below is not None:
            members = members[
                sample_inclusion(level_of[members], mech.levels.epsilons, p.sample_below, noise)
            ]
        hist = np.bincount(bins[members], minlength=size)
        exact = np.rint(answer_range_queries(hist, shape, queries)).astype(np.int64)
        noisy = lpa.release(exact, p.epsilon, noise).counts
        if expected[k] > 0:
            est += mech.weights[k] * noisy * (total / expected[k])
    return est


def run(
    records: int,
    runs: int,
    queries: int,
    seed: int,
    datasets: tuple[str, ...] = DATASETS,
    kinds: tuple[str, ...] = ("uniform", "normal", "tiers"),
    answers: tuple[str, ...] = ANSWERS,
) -> dict:
    results: dict = {}
    for data in datasets:
        rng = np.random.default_rng([seed, DATASETS.index(data)])
        bins, shape = population(data, records, rng)
        size = int(np.prod(shape))
        truth = np.bincount(bins, minlength=size)
        work = random_range_queries(shape, queries, rng)
        exact = answer_range_queries(truth, shape, work)
        mean_bins = float(np.mean(work.size))
        f = mean_bins / size  # the workload's mean selectivity under a uniform spread: public
        for kind in kinds:
            num = budgets(kind, records, rng)
            values, counts = np.unique(num, return_counts=True)
            levels = BudgetLevels(
                tuple(Fraction(int(v), GRID) for v in values), tuple(int(c) for c in counts)
            )
            level_of = np.searchsorted(values, num)
            for answer in answers:
                util = CountUtility(
                    query_bins=1.0 if answer == "query" else mean_bins,
                    sampling_variance=f * (1 - f),
                )
                key = f"{answer}/{data}/{kind}"
                setting: dict = {
                    "answer": answer,
                    "dataset": data,
                    "budgets": kind,
                    "bins": size,
                    "mean_query_bins": mean_bins,
                    "levels": levels.size,
                    "min": float(levels.minimum),
                    "mean": float(levels.mean()),
                    "max": float(levels.epsilons[-1]),
                    "mechanisms": {},
                }
                for name, mech in mechanisms(levels, util, records, f).items():
                    errs = []
                    start = time.perf_counter()
                    for r in range(runs):
                        drawer = Randomness.seeded(seed).drawer(f"pdp/{key}/{name}", r)
                        if answer == "query":
                            got = answer_per_query(mech, bins, level_of, shape, work, drawer)
                        else:
                            est = mech.release(bins, level_of, size, drawer).estimate
                            got = answer_range_queries(est, shape, work)
                        errs.append(float(np.mean(np.abs(got - exact))) / records)
                    setting["mechanisms"][name] = {
                        "rfe": float(np.mean(errs)),
                        "rfe_sd": float(np.std(errs)),
                        "threshold": float(mech.parts[0].epsilon) if "sampling" in name else None,
                        "groups": [
                            [
                                float(mech.levels.epsilons[p.levels[0]]),
                                float(mech.levels.epsilons[p.levels[-1]]),
                            ]
                            for p in mech.parts
                        ],
                        "weights": list(mech.weights),
                        "seconds_per_release": (time.perf_counter() - start) / runs,
                    }
                results[key] = setting
    return {
        "records": records,
        "runs": runs,
        "queries": queries,
        "seed": seed,
        "randomness": "seeded",
        "metric": "relative frequency error |A_act - A_noisy| / n, mean over queries, then mean (sd) over runs",
        "results": results,
    }


# -- summaries ----------------------------------------------------------------------


def summary(setting: dict) -> dict:
    """The better partitioning against Minimum and Sampling (at the mean, its best threshold, the max).

    ``beats_sampling_at`` lists the swept thresholds at which that partitioning's
    mean error is below Sampling's (the thesis's figures compare the two over
    the whole sweep).
    """
    m = setting["mechanisms"]
    by_t = sorted(
        (v for k, v in m.items() if k.startswith("sampling@")), key=lambda v: v["threshold"]
    )
    at_mean = min(by_t, key=lambda v: abs(v["threshold"] - setting["mean"]))
    best = min(by_t, key=lambda v: v["rfe"])
    part = min(("privacy-aware", "utility-based"), key=lambda k: m[k]["rfe"])
    return {
        "best_partitioning": part,
        "partitioning": m[part]["rfe"],
        "minimum": m["minimum"]["rfe"],
        "sampling_at_mean": at_mean["rfe"],
        "sampling_best": best["rfe"],
        "sampling_best_threshold": best["threshold"],
        "sampling_at_max": by_t[-1]["rfe"],
        "planned_sampling": m["planned-sampling"]["rfe"],
        "planned_threshold": m["planned-sampling"]["threshold"],
        "thresholds": [v["threshold"] for v in by_t],
        "beats_sampling_at": [v["threshold"] for v in by_t if m[part]["rfe"] < v["rfe"]],
    }


def markdown(report: dict) -> str:
    """Errors ×10⁻³; the last column: at how many of the swept thresholds the better partitioning wins."""
    lines = [
        "| answer | data | budgets | Minimum | Sampling @mean | Sampling best (t) | Sampling @max "
        "| privacy-aware (k) | utility-based (k) | partitioning < Sampling at | planned Sampling (t) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in report["results"].values():
        m, v = s["mechanisms"], summary(s)
        lines.append(
            f"| {s['answer']} | {s['dataset']} | {s['budgets']} | {1e3 * v['minimum']:.3f} "
            f"| {1e3 * v['sampling_at_mean']:.3f} "
            f"| {1e3 * v['sampling_best']:.3f} ({v['sampling_best_threshold']:.3g}) "
            f"| {1e3 * v['sampling_at_max']:.3f} "
            f"| {1e3 * m['privacy-aware']['rfe']:.3f} ({len(m['privacy-aware']['groups'])}) "
            f"| {1e3 * m['utility-based']['rfe']:.3f} ({len(m['utility-based']['groups'])}) "
            f"| {len(v['beats_sampling_at'])}/{len(v['thresholds'])} "
            f"| {1e3 * v['planned_sampling']:.3f} ({v['planned_threshold']:.3g}) |"
        )
    return "\n".join(lines)


def plot(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(report["results"].values())
    rows = list(dict.fromkeys((s["answer"], s["dataset"]) for s in settings))
    cols = list(dict.fromkeys(s["budgets"] for s in settings))
    fig, axes = plt.subplots(
        len(rows), len(cols), figsize=(3.3 * len(cols), 2.5 * len(rows)), squeeze=False
    )
    for s in settings:
        ax = axes[rows.index((s["answer"], s["dataset"])), cols.index(s["budgets"])]
        m = s["mechanisms"]
        samp = sorted(
            (v for k, v in m.items() if k.startswith("sampling@")), key=lambda v: v["threshold"]
        )
        t = [v["threshold"] for v in samp]
        ax.errorbar(
            t,
            [1e3 * v["rfe"] for v in samp],
            [1e3 * v["rfe_sd"] for v in samp],
            marker="o",
            ms=3,
            color="tab:blue",
            label="Sampling(t)",
        )
        for name, style in (
            ("minimum", ("k", ":")),
            ("privacy-aware", ("tab:orange", "--")),
            ("utility-based", ("tab:green", "-")),
        ):
            ax.axhline(1e3 * m[name]["rfe"], color=style[0], ls=style[1], label=name)
        if "planned-sampling" in m:
            planned = m["planned-sampling"]
            ax.plot(
                [planned["threshold"]],
                [1e3 * planned["rfe"]],
                marker="*",
                ms=9,
                ls="",
                color="tab:red",
                label="planned Sampling",
            )
        ax.axvline(s["mean"], color="grey", lw=0.6)
        ax.set_yscale("log")
        ax.set_title(
            f"{s['answer']}-answered · {s['dataset']} · {s['budgets']} budgets", fontsize=8
        )
        ax.tick_params(labelsize=7)
        ax.set_xlabel("Sampling threshold t (grey line: mean budget)", fontsize=7)
        ax.set_ylabel("RFE ×10⁻³ (log)", fontsize=7)
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--budgets", default="uniform,normal,tiers")
    parser.add_argument("--answer", default=",".join(ANSWERS))
    parser.add_argument("--json", help="also write the JSON report to this file")
    parser.add_argument("--plot", help="write the threshold-sweep figure (PNG) to this file")
    parser.add_argument(
        "--markdown", action="store_true", help="also print the summary table on stderr"
    )
    args = parser.parse_args()

    def split(value: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
        items = tuple(x for x in value.split(",") if x)
        bad = [x for x in items if x not in allowed]
        if not items or bad:
            parser.error(
                f"--{what} takes a comma-separated list from {', '.join(allowed)}; got {value!r}"
            )
        return items

    report = run(
        args.records,
        args.runs,
        args.queries,
        args.seed,
        split(args.datasets, DATASETS, "datasets"),
        split(args.budgets, BUDGETS, "budgets"),
        split(args.answer, ANSWERS, "answer"),
    )
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text + "\n")
    if args.plot:
        plot(report, args.plot)
    if args.markdown:
        print(markdown(report), file=sys.stderr)


if __name__ == "__main__":
    main()
