"""Benchmark: PSD release on a 1024 × 1024 grid with 500,000 records (one core).

Usage::

    python benchmarks/bench_psd.py [--runs 7] [--bins 1024] [--records 500000] [--epsilon 1]
    python benchmarks/bench_psd.py --accuracy [--epsilon 1]   # the error table of docs/privacy.md §7.6

Prints one JSON object: the median wall time (seconds) of ``--runs`` releases
for each PSD variant (default options otherwise), for the quadtree down to
single-bin leaves (the most leaves), and for LPA on the same histogram, plus a
stage breakdown of the default PSD release. A release covers
everything :meth:`PSDMechanism.release` does: tree build with private medians,
noise, least squares, non-negativity, expansion to the grid and the JSON-ready
leaf description. Building the histogram is not timed. Target: ≤ 2 s for the
PSD release.

``--accuracy`` instead measures the mean absolute error of range queries on
the same skewed histogram (large queries: sides of 1/4 to 1/2 of the grid;
medium: sides up to 1/16; empty: 8 × 8 blocks with no record) for LPA and
several PSD configurations, over ``--runs`` seeded releases.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core; must precede the numpy import

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from fractions import Fraction  # noqa: E402

import numpy as np  # noqa: E402

from histogram.lpa import LaplaceMechanism  # noqa: E402
from histogram.noise import Randomness  # noqa: E402
from histogram.psd.consistency import least_squares, nonnegative  # noqa: E402
from histogram.psd.mechanism import PSDMechanism  # noqa: E402
from histogram.psd.tree import PSDTree, build_tree  # noqa: E402
from histogram.query import RangeQueries, answer_range_queries  # noqa: E402


def skewed_histogram(bins: int, records: int, seed: int = 0) -> np.ndarray:
    """Most records in a few Gaussian clusters, the rest uniform (the data generator is not noise)."""
    rng = np.random.default_rng(seed)
    k = 8
    centres = rng.uniform(0.1 * bins, 0.9 * bins, (k, 2))
    share = rng.dirichlet(np.ones(k)) * records * 0.9
    parts = [
        rng.normal(c, bins * rng.uniform(0.01, 0.05), (int(s), 2))
        for c, s in zip(centres, share, strict=True)
    ]
    parts.append(rng.uniform(0, bins, (records - sum(len(p) for p in parts), 2)))
    idx = np.clip(np.concatenate(parts).astype(np.int64), 0, bins - 1)
    return np.bincount(idx[:, 0] * bins + idx[:, 1], minlength=bins * bins).astype(np.int64)


def timed(fn, runs: int) -> list[float]:
    out = []
    for i in range(runs):
        t0 = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t0)
    return out


def stages(mech: PSDMechanism, hist: np.ndarray, eps: Fraction, runs: int) -> dict[str, float]:
    """Median time of each stage of the default release (same code path as ``release``)."""
    acc: dict[str, list[float]] = {}
    for i in range(runs):
        noise = Randomness.seeded(1000 + i).drawer("bench-psd", 0)
        t = [time.perf_counter()]
        budget = mech.budget(eps)
        levels = build_tree(hist.reshape(mech.shape), mech.plan, budget, mech.sensitivity, noise)
        t.append(time.perf_counter())
        parents = [lv.parent for lv in levels]
        beta, _ = least_squares(
            parents, [lv.noisy for lv in levels], [lv.variance for lv in levels]
        )
        final = nonnegative(parents, beta)
        t.append(time.perf_counter())
        lo = np.concatenate([lv.lo[:, lv.leaf] for lv in levels], axis=1).T
        hi = np.concatenate([lv.hi[:, lv.leaf] for lv in levels], axis=1).T
        count = np.concatenate([f[lv.leaf] for f, lv in zip(final, levels, strict=True)])
        tree = PSDTree(mech.shape, lo, hi, count, count, count, mech.confidence)
        tree.to_bins()
        t.append(time.perf_counter())
        tree.describe()
        t.append(time.perf_counter())
        for name, a, b in zip(
            (
                "tree_build_medians_noise",
                "least_squares_nonnegative",
                "expansion_to_grid",
                "json_description",
            ),
            t[:-1],
            t[1:],
            strict=True,
        ):
            acc.setdefault(name, []).append(b - a)
    return {k: round(statistics.median(v), 4) for k, v in acc.items()}


def accuracy(hist: np.ndarray, bins: int, eps: Fraction, runs: int) -> dict[str, object]:
    """Mean absolute range-query errors of LPA and PSD configurations (seeded, reproducible)."""
    shape = (bins, bins)
    rng = np.random.default_rng(1)  # query workload, not noise
    m = 300
    lo = rng.integers(0, bins // 2, (m, 2))
    large = RangeQueries(lo, np.minimum(lo + rng.integers(bins // 4, bins // 2, (m, 2)), bins - 1))
    lo = rng.integers(0, bins - bins // 16, (m, 2))
    medium = RangeQueries(lo, np.minimum(lo + rng.integers(1, bins // 16, (m, 2)), bins - 1))
    grid = hist.reshape(shape)
    k = max(2, bins // 128)
    corners = []
    for _ in range(1_000_000):
        c = rng.integers(0, bins - k, 2)
        if grid[c[0] : c[0] + k, c[1] : c[1] + k].sum() == 0:
            corners.append(c)
            if len(corners) == 200:
                break
    else:
        raise SystemExit(f"fewer than 200 empty {k} x {k} blocks found; the data is too dense")
    empty = RangeQueries(np.array(corners), np.array(corners) + k - 1)
    workloads = {"large": large, "medium": medium, "empty": empty}
    truth = {name: answer_range_queries(hist, shape, q) for name, q in workloads.items()}
    configs: dict[str, object] = {"lpa": LaplaceMechanism()}
    for height in (7, 8, 9, 10):
        configs[f"quad h={height}"] = PSDMechanism(shape, variant="quad", height=height)
    for variant in ("hybrid", "kd"):
        for height in (8, 10):
            configs[f"{variant} h={height}"] = PSDMechanism(shape, variant=variant, height=height)
    out: dict[str, object] = {}
    for name, mech in configs.items():
        errs: dict[str, list[float]] = {w: [] for w in workloads}
        for i in range(runs):
            counts = mech.release(
                hist, eps, Randomness.seeded(i).drawer("bench-accuracy", 0)
            ).counts  # type: ignore[attr-defined]
            for w, q in workloads.items():
                errs[w].append(
                    float(np.abs(answer_range_queries(counts, shape, q) - truth[w]).mean())
                )
        out[name] = {w: round(statistics.mean(v), 2) for w, v in errs.items()}
    return {
        "grid": list(shape),
        "records": int(hist.sum()),
        "epsilon": str(eps),
        "runs": runs,
        "mean_abs_error": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--bins", type=int, default=1024, help="bins per attribute (2-D grid)")
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--epsilon", default="1")
    parser.add_argument(
        "--accuracy", action="store_true", help="measure query errors instead of time"
    )
    args = parser.parse_args()
    eps = Fraction(args.epsilon)
    hist = skewed_histogram(args.bins, args.records)
    if args.accuracy:
        print(json.dumps(accuracy(hist, args.bins, eps, args.runs), indent=2))
        return
    shape = (args.bins, args.bins)
    result: dict[str, object] = {
        "grid": list(shape),
        "records": int(hist.sum()),
        "epsilon": str(eps),
        "runs": args.runs,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "seconds_median": {},
        "seconds_all": {},
    }
    mechanisms: dict[str, object] = {"lpa": LaplaceMechanism()}
    for variant in ("quad", "kd", "hybrid"):
        mechanisms[f"psd_{variant}"] = PSDMechanism(shape, variant=variant)
    # worst case for the expansion and the description: quadtree down to single bins
    full = max(1, (args.bins - 1).bit_length())
    mechanisms[f"psd_quad_height_{full}"] = PSDMechanism(shape, variant="quad", height=full)
    leaves: dict[str, int] = {}
    for name, mech in mechanisms.items():

        def run(i: int, mech=mech, name=name) -> None:
            out = mech.release(hist, eps, Randomness.seeded(i).drawer(f"bench-{name}", 0))  # type: ignore[attr-defined]
            if "tree" in out.details:
                leaves[name] = len(out.details["tree"]["leaves"]["count"])

        times = timed(run, args.runs)
        result["seconds_median"][name] = round(statistics.median(times), 4)  # type: ignore[index]
        result["seconds_all"][name] = [round(x, 4) for x in times]  # type: ignore[index]
    default = PSDMechanism(shape)
    result["psd_default"] = {
        "variant": default.variant,
        "height": default.height,
        "count_allocation": default.count_allocation,
        "leaves": leaves.get(f"psd_{default.variant}"),
        "stages_seconds_median": stages(default, hist, eps, args.runs),
    }
    result["psd_leaves"] = leaves
    result["target_seconds"] = 2.0
    result["psd_default_within_target"] = result["seconds_median"][f"psd_{default.variant}"] <= 2.0  # type: ignore[index]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
