"""DPCopula and DP k-way marginals against LPA on a high-dimensional stream; a 10⁹-cell step. Prints JSON.

    OMP_NUM_THREADS=1 python benchmarks/bench_copula.py compare [--people 20000] [--epsilon 1] [--seeds 2]
    OMP_NUM_THREADS=1 python benchmarks/bench_copula.py step [--people 100000] [--method kendall]
    OMP_NUM_THREADS=1 python benchmarks/bench_copula.py sweep [--people 50000] [--runs 2]

``compare``: a drifting, correlated synthetic stream (:func:`drifting_records`:
8 attributes × 6 levels = 1,679,616 cells, a latent Gaussian factor model
whose loadings rotate over the horizon, plus a 30 % component with a
*different* dependence — so the Gaussian copula is not the true model);
at timesteps 0, H/2, H and each seed, every method releases once at the same
ε and answers the same queries:

* ``range2`` / ``range3``: 200 random boxes constraining 2 / 3 attributes
  (random sub-intervals), mean absolute error in records;
* ``marg1`` / ``marg2``: every 1-way / 2-way marginal, mean L1 error divided
  by the number of records (0 = exact, 2 = disjoint).

LPA materialises the full histogram (discrete Laplace on every cell, Δ = 1);
``copula-kendall`` declares the public population floor ``n₀ = 0.9 × people``;
``kway-R`` releases all marginals up to order R. Box queries over > R
attributes are answered by ``kway`` from its synthetic sample.

``step``: one release on a 10⁹-cell domain (9 attributes × 10 levels), run in
this process alone: wall and CPU time (``process_time``) of ``release`` + 100
range queries + a 100k-record synthetic sample, and the process's peak RSS
(``ru_maxrss``), which includes the interpreter, numpy/scipy and the record
table. ``--repeats R`` steps R times: the first step is cold (lazy imports
inside it count), the medians are over all R.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from histogram.copula import DPCopula  # noqa: E402
from histogram.lpa import LaplaceMechanism  # noqa: E402
from histogram.marginals import KWayMarginals  # noqa: E402
from histogram.noise import Randomness  # noqa: E402


def drifting_records(n: int, levels: tuple[int, ...], t: int, horizon: int, seed: int) -> np.ndarray:
    """``n`` records at timestep ``t`` of a drifting correlated stream (public workload generator).

    70 %: latent N(0, Σ_t) with a 2-factor Σ_t whose loadings rotate with t/horizon;
    30 %: a second component where attribute pairs (0,1), (2,3), … are anti-correlated.
    Attribute j is cut at uneven quantiles into ``levels[j]`` levels.
    """
    rng = np.random.default_rng([seed, t])
    m = len(levels)
    phase = np.pi / 2 * t / max(1, horizon)
    base = np.linspace(0, np.pi, m)
    load = np.stack([0.8 * np.cos(base + phase), 0.6 * np.sin(2 * base - phase)], axis=1)
    sigma = load @ load.T
    np.fill_diagonal(sigma, 1.0)
    sigma = sigma / np.sqrt(np.outer(np.diag(sigma), np.diag(sigma)))
    n2 = int(0.3 * n)
    z1 = rng.multivariate_normal(np.zeros(m), sigma, size=n - n2)
    alt = np.eye(m)
    for j in range(0, m - 1, 2):
        alt[j, j + 1] = alt[j + 1, j] = -0.7
    z2 = rng.multivariate_normal(np.zeros(m), alt, size=n2)
    z = np.concatenate([z1, z2])
    out = np.empty((n, m), dtype=np.int64)
    for j, L in enumerate(levels):
        q = np.sort(rng.uniform(0.05, 0.95, L - 1)) if j % 2 else np.linspace(0, 1, L + 1)[1:-1] ** 1.5
        out[:, j] = np.searchsorted(np.quantile(z[:, j], q), z[:, j])
    return out


def random_boxes(levels: tuple[int, ...], d: int, count: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    m = len(levels)
    boxes = []
    for _ in range(count):
        lo = np.zeros(m, dtype=np.int64)
        hi = np.asarray(levels, dtype=np.int64) - 1
        for j in rng.choice(m, size=d, replace=False):
            a, b = sorted(rng.integers(0, levels[j], size=2))
            if a == 0 and b == levels[j] - 1:
                b -= 1
            lo[j], hi[j] = a, b
        boxes.append((lo, hi))
    return boxes


def true_box(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> int:
    return int(np.all((x >= lo) & (x <= hi), axis=1).sum())


def table(x: np.ndarray, levels: tuple[int, ...], attrs: tuple[int, ...]) -> np.ndarray:
    shape = tuple(levels[a] for a in attrs)
    return np.bincount(np.ravel_multi_index(tuple(x[:, a] for a in attrs), shape), minlength=int(np.prod(shape))).reshape(shape).astype(float)


def answerers(method: str, x: np.ndarray, levels: tuple[int, ...], eps: Fraction, rnd: Randomness, t: int, people: int):
    """(range(lo, hi), marginal(attrs)) of one release by ``method``."""
    drawer = rnd.drawer(method, t)
    if method == "lpa":
        flat = np.ravel_multi_index(tuple(x.T), levels)
        counts = np.bincount(flat, minlength=int(np.prod(levels))).astype(np.int64)
        noisy = LaplaceMechanism().release(counts, eps, drawer).counts.reshape(levels)

        def rng_(lo, hi):
            return float(noisy[tuple(slice(a, b + 1) for a, b in zip(lo, hi, strict=True))].sum())

        def marg(attrs):
            return noisy.sum(axis=tuple(i for i in range(len(levels)) if i not in attrs)).astype(float)

        return rng_, marg
    if method.startswith("copula"):
        variant = method.split("-")[1]
        rel = DPCopula(levels, variant=variant, min_records=int(0.9 * people)).release(x, eps, drawer)
        model = rel.model
        latent = model.latent_sample(200_000, rnd.drawer(method, t, "synthetic"))
        sample = model.discretise(latent)
        return (lambda lo, hi: model.range_count(lo, hi, latent)), (lambda attrs: model.marginal(attrs, sample))
    r = int(method.split("-")[1])
    rel = KWayMarginals(levels, r).release(x, eps, drawer)
    syn = rel.synthesize(200_000, rnd.drawer(method, t, "synthetic"))

    def rng_k(lo, hi):
        active = [j for j in range(len(levels)) if lo[j] > 0 or hi[j] < levels[j] - 1]
        if len(active) <= r:
            return rel.range_count(lo, hi)
        return rel.total * true_box(syn, lo, hi) / syn.shape[0]

    return rng_k, (lambda attrs: rel.marginal(attrs))


def compare(args: argparse.Namespace) -> dict:
    levels = (6,) * 8
    eps = Fraction(args.epsilon)
    horizon = 10
    methods = ["lpa", "copula-kendall", "copula-median", "kway-2", "kway-3"]
    boxes = {d: random_boxes(levels, d, 200, 100 + d) for d in (2, 3)}
    acc: dict[str, dict[str, list[float]]] = {m: {"range2": [], "range3": [], "marg1": [], "marg2": [], "seconds": []} for m in methods}
    pairs2 = [(j, k) for j in range(8) for k in range(j + 1, 8)]
    for seed in range(args.seeds):
        rnd = Randomness.seeded(seed)
        for t in (0, horizon // 2, horizon):
            x = drifting_records(args.people, levels, t, horizon, seed)
            n = x.shape[0]
            for method in methods:
                start = time.perf_counter()
                rng_, marg = answerers(method, x, levels, eps, rnd, t, args.people)
                acc[method]["seconds"].append(time.perf_counter() - start)
                for d in (2, 3):
                    acc[method][f"range{d}"].append(float(np.mean([abs(rng_(lo, hi) - true_box(x, lo, hi)) for lo, hi in boxes[d]])))
                acc[method]["marg1"].append(float(np.mean([np.abs(marg((j,)) - table(x, levels, (j,))).sum() / n for j in range(8)])))
                acc[method]["marg2"].append(float(np.mean([np.abs(marg(p) - table(x, levels, p)).sum() / n for p in pairs2])))
    summary = {m: {k: round(float(np.mean(v)), 4) for k, v in d.items()} for m, d in acc.items()}
    lpa = summary["lpa"]
    ratios = {m: {k: round(summary[m][k] / lpa[k], 4) for k in ("range2", "range3", "marg1", "marg2")} for m in methods}
    return {"benchmark": "copula-compare", "cells": int(np.prod(levels)), "attributes": 8, "people": args.people,
            "epsilon": str(eps), "seeds": args.seeds, "timesteps": [0, horizon // 2, horizon],
            "mean_error": summary, "ratio_to_lpa": ratios}


def _one_step(args: argparse.Namespace, levels: tuple[int, ...], x: np.ndarray, rnd: Randomness) -> int:
    boxes = random_boxes(levels, 3, 100, 7)
    if args.method == "kway":
        rel = KWayMarginals(levels, 2).release(x, Fraction(1), rnd.drawer("big", 0))
        answers = [rel.range_count(lo, hi) if sum((lo > 0) | (hi < 9)) <= 2 else None for lo, hi in random_boxes(levels, 2, 100, 7)]
        rel.synthesize(100_000, rnd.drawer("big", 0, "synthetic"))
    else:
        rel = DPCopula(levels, variant=args.method, min_records=int(0.9 * args.people)).release(x, Fraction(1), rnd.drawer("big", 0))
        answers = [rel.model.range_count(lo, hi) for lo, hi in boxes]
        rel.model.sample(100_000, rnd.drawer("big", 0, "synthetic"))
    return len(answers)


def step(args: argparse.Namespace) -> dict:
    """``--repeats`` steps in this process; the first is cold (lazy imports included), the median over all."""
    levels = (10,) * 9
    x = drifting_records(args.people, levels, 0, 10, 0)
    rnd = Randomness.secure()
    wall, cpu = [], []
    queries = 0
    for _ in range(args.repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        queries = _one_step(args, levels, x, rnd)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"benchmark": "copula-step", "method": args.method, "cells": 10**9, "people": args.people,
            "step_seconds": round(wall[0], 3), "cpu_seconds": round(cpu[0], 3),
            "repeats": args.repeats, "median_step_seconds": round(float(np.median(wall)), 3),
            "median_cpu_seconds": round(float(np.median(cpu)), 3),
            "peak_rss_mib": round(peak / 2**20, 1), "queries": queries}


def gaussian_dependence_records(n: int, levels: tuple[int, ...], rho: float, margin: str, seed: int) -> np.ndarray:
    """Thesis §3.3 synthetic data: Gaussian dependence (equicorrelation ρ), margins gaussian | uniform | zipf."""
    rng = np.random.default_rng(seed)
    m = len(levels)
    corr = np.full((m, m), rho) + (1 - rho) * np.eye(m)
    z = rng.multivariate_normal(np.zeros(m), corr, size=n)
    from scipy.special import ndtr

    u = ndtr(z)
    out = np.empty((n, m), dtype=np.int64)
    for j, L in enumerate(levels):
        if margin == "uniform":
            p = np.full(L, 1.0 / L)
        elif margin == "zipf":
            p = 1.0 / np.arange(1, L + 1)
        else:
            grid = np.linspace(-2.5, 2.5, L)
            p = np.exp(-grid**2 / 2)
        cdf = np.cumsum(p / p.sum())
        out[:, j] = np.minimum(np.searchsorted(cdf, u[:, j]), L - 1)
    return out


def relative_error(answer: float, truth: int, sanity: float) -> float:
    return abs(answer - truth) / max(truth, sanity)


def _sweep_point(methods, x, levels, eps, rnd, boxes, people, key) -> dict[str, float]:
    out = {}
    sanity = max(1.0, 0.0005 * x.shape[0])
    truths = [true_box(x, lo, hi) for lo, hi in boxes]
    for method in methods:
        rng_, _ = answerers(method, x, levels, eps, rnd, key, people)
        out[method] = float(np.mean([relative_error(rng_(lo, hi), t, sanity) for (lo, hi), t in zip(boxes, truths, strict=True)]))
    return out


def sweep(args: argparse.Namespace) -> dict:
    """Thesis ch. 3 figures in shape, on synthetic substitutes (IPUMS extracts are not installable here)."""
    n = args.people
    result: dict = {"benchmark": "copula-sweep", "people": n, "runs": args.runs, "queries": args.queries,
                    "metric": "mean relative error, sanity bound max(1, 0.05% n); boxes constrain every attribute"}

    def avg(points: list[dict[str, float]]) -> dict[str, float]:
        return {k: round(float(np.mean([p[k] for p in points])), 4) for k in points[0]}

    # Fig 3.4: relative error vs ratio k (2-D, ε = 0.1)
    levels2 = (100, 100)
    fig34 = {}
    for k in ("1/8", "1/4", "1/2", "1", "2", "4", "8", "16"):
        pts = []
        for run in range(args.runs):
            x = gaussian_dependence_records(n, levels2, 0.6, "gaussian", run)
            boxes = random_boxes(levels2, 2, args.queries, 50 + run)
            rnd = Randomness.seeded(run)
            rel = DPCopula(levels2, ratio=Fraction(k), min_records=int(0.9 * n)).release(x, Fraction(1, 10), rnd.drawer("k", run))
            sanity = max(1.0, 0.0005 * n)
            pts.append({"copula-kendall": float(np.mean([relative_error(rel.model.range_count(lo, hi), true_box(x, lo, hi), sanity)
                                                        for lo, hi in boxes]))})
        fig34[k] = avg(pts)["copula-kendall"]
    result["fig3_4_error_vs_ratio_k"] = fig34

    # Fig 3.6 / 3.8: relative error vs ε, 8-D (6 levels each), three margin families
    levels8 = (6,) * 8
    methods = ["lpa", "copula-kendall", "copula-median", "kway-2"]
    fig38: dict[str, dict[str, dict[str, float]]] = {}
    for margin in ("gaussian", "uniform", "zipf"):
        fig38[margin] = {}
        for eps in ("1/10", "1/2", "1"):
            pts = []
            for run in range(args.runs):
                x = gaussian_dependence_records(n, levels8, 0.5, margin, 10 + run)
                boxes = random_boxes(levels8, 8, args.queries, 60 + run)
                pts.append(_sweep_point(methods, x, levels8, Fraction(eps), Randomness.seeded(run), boxes, n, run))
            fig38[margin][eps] = avg(pts)
    result["fig3_6_3_8_error_vs_epsilon_by_margin"] = fig38

    # Fig 3.9: relative error vs dimensionality (10 levels per attribute, ε = 1); LPA only where it fits (≤ 10⁶ cells)
    fig39 = {}
    for m in (2, 4, 6, 8, 10):
        levels = (10,) * m
        meth = (["lpa"] if 10**m <= 10**6 else []) + ["copula-kendall", "copula-median", "kway-2"]
        pts = []
        for run in range(args.runs):
            x = gaussian_dependence_records(n, levels, 0.5, "gaussian", 20 + run)
            boxes = random_boxes(levels, m, args.queries, 70 + run)
            pts.append(_sweep_point(meth, x, levels, Fraction(1), Randomness.seeded(run), boxes, n, run))
        fig39[f"{m}D (10^{m} cells)"] = avg(pts)
    result["fig3_9_error_vs_dimensionality"] = fig39
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--people", type=int, default=20_000)
    c.add_argument("--epsilon", default="1")
    c.add_argument("--seeds", type=int, default=2)
    s = sub.add_parser("step")
    s.add_argument("--people", type=int, default=100_000)
    s.add_argument("--method", choices=("kendall", "median", "mle", "kway"), default="kendall")
    s.add_argument("--repeats", type=int, default=1, help="steps in one process (first = cold, plus the median)")
    w = sub.add_parser("sweep")
    w.add_argument("--people", type=int, default=50_000)
    w.add_argument("--runs", type=int, default=2)
    w.add_argument("--queries", type=int, default=300)
    args = p.parse_args()
    print(json.dumps({"compare": compare, "step": step, "sweep": sweep}[args.cmd](args), indent=1))


if __name__ == "__main__":
    main()
