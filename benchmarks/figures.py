"""Reproduce the thesis's figures 4.2–4.9 on dpstream's synthetic datasets.

One command per figure; each prints one JSON object (the numbers behind the
figure) and writes ``docs/figures/<figure>.png`` and ``<figure>.json``::

    python benchmarks/figures.py fig4_2      # absolute error vs k
    python benchmarks/figures.py fig4_3      # DSFT vs threshold T, against DSAT
    python benchmarks/figures.py fig4_4      # error vs ε
    python benchmarks/figures.py fig4_5      # error vs update rate r
    python benchmarks/figures.py fig4_6      # error vs number of dimensions
    python benchmarks/figures.py fig4_7      # error vs query range size
    python benchmarks/figures.py fig4_8      # w-event: DSAT vs BD, BA vs w
    python benchmarks/figures.py fig4_9      # w-event: DSAT vs BD, BA vs ε
    python benchmarks/figures.py noise_floor # not in the thesis: release.noise_floor vs T
    python benchmarks/figures.py noise_floor_w  # … and under w-event privacy, vs w
    python benchmarks/figures.py all         # all of the above

Every setting also runs the baselines uniform and fixed (w-event: "Sample"),
as the independent benchmark of Schäler et al. asks. Datasets are generated
once with ``stream.lab.generate`` into ``--data`` (events CSV + config), read and
windowed once with the service's own reader and windowing
(``stream.lab.inputs.load_truth``), and cached there as ``truth.npy``. Runs go
exactly as ``dpstream evaluate`` runs them (:func:`stream.lab.evaluate.evaluate_settings`):
the lab's runner stepping the policies' own runs-axis rules where it applies
(:func:`stream.lab.runner.run_many`), else the engine once per run with
``Randomness.seeded(seed + r)``. ``--jobs 2`` spreads the (setting, method) cells over
processes. ``--quick`` shrinks everything for a smoke test.

Scale (stated in docs/results.md): census N = 200 timesteps, P = 500,000
people (the thesis's n; N = 500 there), C = 5 releases (the thesis's
0.01·N at N = 500), read from the generator's counts file (100 million events
per dataset would not fit the time budget; the counts are what windowing the
events gives, which tests/stream/lab/test_evaluate.py checks on small data);
``--census-population 50000 --census-events`` runs the census figures on
events through the service's reader and windowing instead. Traffic: N = 300
timesteps of 15 minutes, 20,000 objects on a 64×64 grid, events CSV (the
thesis: Oldenburg, 1,000 timestamps, 500K objects, 1024×1024).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from controller.svt import user_level_k  # noqa: E402
from histogram.accuracy import Workload  # noqa: E402
from stream.config import Settings, load_settings  # noqa: E402
from stream.lab.evaluate import evaluate_settings  # noqa: E402
from stream.lab.generate import census_attributes, generate  # noqa: E402
from stream.lab.inputs import load_truth  # noqa: E402
from stream.lab.metrics import build_workload  # noqa: E402

FIGURES = ("fig4_2", "fig4_3", "fig4_4", "fig4_5", "fig4_6", "fig4_7", "fig4_8", "fig4_9", "noise_floor", "noise_floor_w")


@dataclass(frozen=True)
class Scale:
    census_n: int = 200
    census_p: int = 500_000
    census_c: int = 5
    traffic_n: int = 300
    traffic_p: int = 20_000
    traffic_grid: int = 64
    traffic_c: int = 3
    runs: int = 10
    queries: int = 2000
    seed: int = 1
    census_events: bool = False


QUICK = Scale(census_n=30, census_p=3000, census_c=3, traffic_n=60, traffic_p=2000, traffic_grid=16,
              traffic_c=2, runs=3, queries=200, census_events=True)


# -- datasets ----------------------------------------------------------------------------

def dataset(data_dir: Path, kind: str, *, n: int, p: int, seed: int, rate: float = 0.5,
            grid: int = 64, events: bool = True) -> tuple[Settings, np.ndarray, dict[str, Any]]:
    """Generate (once) and read (once) a dataset; returns its settings, true histograms and facts.

    ``events=True``: the events CSV, windowed by the service's code; ``False``:
    the generator's counts file (the same histograms, without writing the events).
    """
    tag = f"{kind}-N{n}-P{p}-s{seed}" + (f"-r{rate:g}" if kind == "census" else f"-g{grid}")
    d = data_dir / tag
    source = d / ("events.csv" if events else "counts.csv")
    config, cache = d / "config.yaml", d / f"truth-{source.stem}.npy"
    facts: dict[str, Any] = {"dataset": tag, "input": source.name}
    if not (source.exists() and config.exists()):
        t0 = time.perf_counter()
        generate(kind, d, timesteps=n, population=p, seed=seed, rate=rate, grid=grid,  # type: ignore[arg-type]
                 events=events, counts=not events)
        facts["generate_seconds"] = round(time.perf_counter() - t0, 2)
    settings = load_settings(config)
    if cache.exists():
        truth = np.load(cache)
    else:
        t0 = time.perf_counter()
        loaded = load_truth(settings, source, kind="events" if events else "counts")
        truth = loaded.counts
        facts["read_seconds"] = round(time.perf_counter() - t0, 2)
        facts["read"] = loaded.report.summary()
        np.save(cache, truth)
    facts["events"] = int(truth.sum())
    return settings, truth, facts


# -- running cells (optionally in worker processes) ------------------------------------------

_REGISTRY: dict[str, Any] = {}


def _cell(task: tuple[str, str, dict[str, Any], str, bool, int, int]) -> dict[str, Any]:
    wl_key, base_key, changes, method, with_true, runs, seed = task
    workload: Workload = _REGISTRY[wl_key]
    base: Settings = _REGISTRY[base_key]
    s = base.with_changes({**changes, "release": {**changes.get("release", {}), "decision": method}})
    res = evaluate_settings({method: s}, workload, runs=runs, seed=seed,
                            true_versions=[method] if with_true else [], progress=False)
    return res["methods"]


class Runner:
    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.tasks: list[tuple[str, str, dict[str, Any], str, bool, int, int]] = []

    def add(self, workload: Workload, base: Settings, changes: dict[str, Any], method: str, *,
            runs: int, seed: int, with_true: bool = False) -> int:
        wl_key, base_key = f"w{id(workload)}", f"s{id(base)}"
        _REGISTRY[wl_key], _REGISTRY[base_key] = workload, base
        self.tasks.append((wl_key, base_key, changes, method, with_true, runs, seed))
        return len(self.tasks) - 1

    def run(self) -> list[dict[str, Any]]:
        tasks, self.tasks = self.tasks, []
        if self.jobs <= 1 or len(tasks) <= 1:
            return [_cell(t) for t in _progress(tasks)]
        import multiprocessing as mp

        with ProcessPoolExecutor(self.jobs, mp_context=mp.get_context("fork")) as pool:
            futures = [pool.submit(_cell, t) for t in tasks]
            return [f.result() for f in _progress(futures)]


def _progress(items: list[Any]) -> Any:
    if not sys.stderr.isatty():
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, file=sys.stderr, leave=False, desc="cells")


# -- the figures ------------------------------------------------------------------------------

USER_METHODS = ("dsat", "dsft", "fixed", "uniform")
W_METHODS = ("dsat", "bd", "ba", "fixed", "uniform")


def _census(args: argparse.Namespace, sc: Scale, rate: float = 0.5) -> tuple[Settings, np.ndarray, dict[str, Any]]:
    s, truth, facts = dataset(args.data, "census", n=sc.census_n, p=sc.census_p, seed=sc.seed, rate=rate,
                              events=sc.census_events)
    s = s.with_changes({"privacy": {"cutoff": sc.census_c}})
    return s, truth, facts


def _traffic(args: argparse.Namespace, sc: Scale) -> tuple[Settings, np.ndarray, dict[str, Any]]:
    return dataset(args.data, "traffic", n=sc.traffic_n, p=sc.traffic_p, seed=sc.seed, grid=sc.traffic_grid)


def _workload(s: Settings, truth: np.ndarray, sc: Scale, query_size: int | None = None) -> Workload:
    return build_workload(truth, s.domain().shape, queries=sc.queries, seed=sc.seed, query_size=query_size)


def _sweep(runner: Runner, sc: Scale, xs: list[Any], cells: dict[str, list[tuple[Workload, Settings, dict[str, Any]]]],
           with_true: tuple[str, ...] = ()) -> dict[str, list[dict[str, Any]]]:
    """``cells[name][i]`` = (workload, base settings, changes) of x value ``i``; constant cells are shared.

    A series ``name`` is a method, or ``method+variant`` for the same method
    under other settings (the variant's changes are in its cells).
    """
    index: dict[str, list[int]] = {}
    seen: dict[tuple[int, int, str, str], int] = {}
    for name, row in cells.items():
        method = name.split("+", 1)[0]
        idx = []
        for wl, base, changes in row:
            key = (id(wl), id(base), json.dumps(changes, sort_keys=True), method)
            if key not in seen:
                seen[key] = runner.add(wl, base, changes, method, runs=sc.runs, seed=sc.seed,
                                       with_true=name in with_true)
            idx.append(seen[key])
        index[name] = idx
    results = runner.run()
    series: dict[str, list[dict[str, Any]]] = {}
    for name, idx in index.items():
        method = name.split("+", 1)[0]
        series[name] = [results[i][method] for i in idx]
        if name in with_true:
            series[f"{name}-true"] = [results[i][f"{method}-true"] for i in idx]
    return series


def fig4_2(args: argparse.Namespace, sc: Scale, runner: Runner) -> dict[str, Any]:
    s, truth, facts = _census(args, sc)
    wl = _workload(s, truth, sc)
    ks = [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4]
    default_k = float(user_level_k(s.domain().size, sc.census_c, sc.census_n, 1, "lyu"))
    cells = {
        "dsat": [(wl, s, {"release": {"k": k}}) for k in ks],
        "dsft": [(wl, s, {"release": {"k": k}}) for k in ks],
        "fixed": [(wl, s, {})] * len(ks),
        "uniform": [(wl, s, {})] * len(ks),
    }
    series = _sweep(runner, sc, ks, cells)
    return {"x_name": "k", "x": ks, "series": series, "facts": {**facts, "default_k": default_k},
            "title": "Absolute error vs k (census, user-level)", "logx": True}


def fig4_3(args: argparse.Namespace, sc: Scale, runner: Runner) -> dict[str, Any]:
    s, truth, facts = _census(args, sc)
    wl = _workload(s, truth, sc)
    ts = [0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.2, 1.6, 2.0]
    cells = {
        "dsft": [(wl, s, {"release": {"threshold": t}}) for t in ts],
        "dsat": [(wl, s, {"release": {"threshold": t}}) for t in ts],
        "fixed": [(wl, s, {})] * len(ts),
        "uniform": [(wl, s, {})] * len(ts),
    }
    series = _sweep(runner, sc, ts, cells)
    return {"x_name": "threshold T (DSAT: initial T)", "x": ts, "series": series, "facts": facts,
            "title": "Absolute error vs threshold T (census, user-level)", "logx": True}


def noise_floor(args: argparse.Namespace, sc: Scale, runner: Runner) -> dict[str, Any]:
    """Not in the thesis: DSFT and DSAT with ``release.noise_floor`` (threshold measured above the noise)."""
    s, truth, facts = _census(args, sc)
    wl = _workload(s, truth, sc)
    ts = [0.005, 0.025, 0.1, 0.2, 0.4, 0.8, 1.2, 2.0]
    floor = {"noise_floor": True}
    cells = {
        "dsft": [(wl, s, {"release": {"threshold": t}}) for t in ts],
        "dsft+floor": [(wl, s, {"release": {"threshold": t, **floor}}) for t in ts],
        "dsat": [(wl, s, {"release": {"threshold": t}}) for t in ts],
        "dsat+floor": [(wl, s, {"release": {"threshold": t, **floor}}) for t in ts],
        "fixed": [(wl, s, {})] * len(ts),
        "uniform": [(wl, s, {})] * len(ts),
    }
    series = _sweep(runner, sc, ts, cells)
    return {"x_name": "threshold T (DSAT: initial T; +floor: above the noise floor)", "x": ts, "series": series,
            "facts": facts, "title": "release.noise_floor: error vs threshold (census, user-level)", "logx": True,
            "extra": ("fresh_releases", "fresh releases")}


def fig4_4(args: argparse.Namespace, sc: Scale, runner: Runner) -> dict[str, Any]:
    s, truth, facts = _census(args, sc)
    wl = _workload(s, truth, sc)
    eps = [0.1, 0.25, 0.5, 1.0, 2.0]
    cells = {m: [(wl, s, {"privacy": {"epsilon": e}}) for e in eps] for m in USER_METHODS}
    series = _sweep(runner, sc, eps, cells, with_true=("dsat", "fixed"))
    return {"x_name": "epsilon", "x": eps, "series": series, "facts": facts,
            "title": "Accuracy vs privacy budget ε (census, user-level)", "logx": True}


def fig4_5(args: argparse.Namespace, sc: Scale, runner: Runner) -> dict[str, Any]:
    rates = [0.1, 0.3, 0.5, 0.7, 0.9]
    cells: dict[str, list[Any]] = {m: [] for m in USER_METHODS}
    facts = {}
    for r in rates:
        s, truth, f = _census(args, sc, rate=r)
        facts[str(r)] = f
        wl = _workload(s, truth, sc)
        for m in USER_METHODS:
            cells[m].append((wl, s, {}))
    series = _sweep(runner, sc, rates, cells, with_true=("dsat", "fixed"))
    return {"x_name": "update rate r", "x": rates, "series": series, "facts": facts,
            "title": "Absolute error vs update rate (census, user-level)", "logx": False}


def fig4_6(args: argparse.Namespace, sc: Scale, runner: Runner) -> dict[str, Any]:
    s6, truth6, facts = _census(args, sc)
    dims = [3, 4, 5, 6]
    shape6 = s6.domain().shape
    cells: dict[str, list[Any]] = {m: [] for m in USER_METHODS}
    for d in dims:
        # each person has exactly one event per timestep, so the windowed histogram of the
        # first d attributes is the 6-D one summed over the others (same rows, same bounding)
        truth = truth6.reshape((truth6.shape[0], *shape6)).sum(axis=tuple(range(1 + d, 1 + len(shape6))))
        truth = truth.reshape(truth.shape[0], -1)
        s = s6.with_changes({"schema": {"attributes": census_attributes(d)}})
        wl = _workload(s, truth, sc)
        for m in USER_METHODS:
            cells[m].append((wl, s, {}))
    series = _sweep(runner, sc, dims, cells, with_true=("dsat", "fixed"))
    return {"x_name": "dimensions", "x": dims, "series": series, "facts": facts,
            "title": "Absolute error vs number of dimensions (census, user-level)", "logx": False}


def fig4_7(args: argparse.Namespace, sc: Scale, runner: Runner) -> dict[str, Any]:
    s, truth, facts = _census(args, sc)
    total = s.domain().size
    sizes = [x for x in (1, 10, 100, 1000, 10_000) if x <= total]
    cells: dict[str, list[Any]] = {m: [] for m in USER_METHODS}
    for size in sizes:
        wl = _workload(s, truth, sc, query_size=size)
        facts[f"mean_size_{size}"] = float(np.mean(np.prod(wl.queries.queries.hi - wl.queries.queries.lo + 1, axis=1)))
        for m in USER_METHODS:
            cells[m].append((wl, s, {}))
    series = _sweep(runner, sc, sizes, cells)
    return {"x_name": "query range size (bins)", "x": sizes, "series": series, "facts": facts,
            "title": "Query accuracy vs query range size (census, user-level)", "logx": True,
            "extra": ("query_rel_error", "relative error (s = 1)")}


def fig4_8(args: argparse.Namespace, sc: Scale, runner: Runner) -> dict[str, Any]:
    s, truth, facts = _traffic(args, sc)
    wl = _workload(s, truth, sc)
    n = sc.traffic_n
    ws = sorted({max(sc.traffic_c, w) for w in (n // 25, n // 12, n // 6, n // 3, (4 * n) // 5)})
    cells = {m: [(wl, s, {"privacy": {"w": w, "cutoff": sc.traffic_c}}) for w in ws] for m in W_METHODS}
    series = _sweep(runner, sc, ws, cells)
    return {"x_name": "w (timesteps)", "x": ws, "series": series, "facts": facts,
            "title": "Query accuracy vs w (traffic, w-event)", "logx": True}


def fig4_9(args: argparse.Namespace, sc: Scale, runner: Runner) -> dict[str, Any]:
    s, truth, facts = _traffic(args, sc)
    wl = _workload(s, truth, sc)
    w = (4 * sc.traffic_n) // 5  # the thesis: w = 800 of 1,000 timestamps
    eps = [0.1, 0.25, 0.5, 1.0, 2.0]
    cells = {m: [(wl, s, {"privacy": {"w": w, "cutoff": sc.traffic_c, "epsilon": e}}) for e in eps]
             for m in W_METHODS}
    series = _sweep(runner, sc, eps, cells)
    return {"x_name": "epsilon", "x": eps, "series": series, "facts": {**facts, "w": w},
            "title": f"Query accuracy vs ε (traffic, w-event, w = {w})", "logx": True}


def noise_floor_w(args: argparse.Namespace, sc: Scale, runner: Runner) -> dict[str, Any]:
    """Not in the thesis: w-event DSAT with ``release.noise_floor``, against Fig. 4.8's methods."""
    s, truth, facts = _traffic(args, sc)
    wl = _workload(s, truth, sc)
    n = sc.traffic_n
    ws = sorted({max(sc.traffic_c, w) for w in (n // 25, n // 6, n // 3, (4 * n) // 5)})
    names = ("dsat", "dsat+floor", "bd", "fixed", "uniform")
    cells = {m: [(wl, s, {"privacy": {"w": w, "cutoff": sc.traffic_c},
                          "release": {"noise_floor": m.endswith("+floor")}}) for w in ws] for m in names}
    series = _sweep(runner, sc, ws, cells)
    return {"x_name": "w (timesteps)", "x": ws, "series": series, "facts": facts,
            "title": "release.noise_floor under w-event privacy (traffic)", "logx": True}


# -- output -----------------------------------------------------------------------------------

def _table(fig: dict[str, Any], metric: str = "query_abs_error") -> str:
    xs = fig["x"]
    lines = ["| method | " + " | ".join(f"{fig['x_name'].split(' (')[0]} = {x:g}" for x in xs) + " |",
             "|---|" + "---|" * len(xs)]
    for method, points in fig["series"].items():
        cells = []
        for p in points:
            v, ci = p.get(metric), p.get(f"{metric}_ci")
            if v is None:
                cells.append("–")
            elif ci is None or max(v - ci[0], ci[1] - v) <= 1e-9 * max(1.0, abs(v)):
                cells.append(f"{v:.4g}")
            else:
                cells.append(f"{v:.4g} ± {max(v - ci[0], ci[1] - v):.2g}")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("figure", choices=(*FIGURES, "all"))
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("DPSTREAM_FIGURE_DATA", "/tmp/dpstream-figures")),
                    help="where datasets are generated and cached (default /tmp/dpstream-figures)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "figures", help="PNG/JSON output directory")
    ap.add_argument("--runs", type=int, default=None, help="runs per cell (default 10)")
    ap.add_argument("--queries", type=int, default=None, help="range queries per timestep (default 2000)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes (default 2)")
    ap.add_argument("--quick", action="store_true", help="tiny datasets and few runs (smoke test)")
    ap.add_argument("--census-population", type=int, default=None, help="census P (default 500000)")
    ap.add_argument("--census-events", action="store_true",
                    help="census: write and window the events CSV instead of reading the counts file")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNGs")
    args = ap.parse_args(argv)
    sc = QUICK if args.quick else Scale()
    changes = {"runs": args.runs, "queries": args.queries, "census_p": args.census_population,
               "census_events": True if args.census_events else None}
    sc = Scale(**{**vars(sc), **{k: v for k, v in changes.items() if v is not None}})
    args.data.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    runner = Runner(args.jobs)
    figures = FIGURES if args.figure == "all" else (args.figure,)
    fns = {name: globals()[name] for name in FIGURES}
    for name in figures:
        t0 = time.perf_counter()
        fig = fns[name](args, sc, runner)
        fig["figure"] = name
        fig["seconds"] = round(time.perf_counter() - t0, 1)
        fig["scale"] = vars(sc)
        extra = fig.pop("extra", None)
        if not args.no_plot:
            try:
                from stream.lab.plot import plot_sweep

                plot_sweep(fig["x"], fig["series"], args.out / f"{name}.png", metric="query_abs_error",
                           xlabel=fig["x_name"], ylabel="range-query absolute error", title=fig["title"],
                           logx=fig.get("logx", False), extra_metric=extra or ("mae", "MAE per bin"))
            except Exception as exc:  # plotting is optional: numbers still come out
                print(f"{name}: plot skipped: {exc}", file=sys.stderr)
        fig["table_query_abs_error"] = _table(fig)
        fig["table_mae"] = _table(fig, "mae")
        if extra:
            fig[f"table_{extra[0]}"] = _table(fig, extra[0])
        (args.out / f"{name}.json").write_text(json.dumps(fig, indent=1) + "\n")
        print(json.dumps(fig))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
