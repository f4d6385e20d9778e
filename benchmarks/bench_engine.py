"""Release-engine speed: histogram building, and one timestep's decision + LPA release per method.

Prints one JSON object. Targets (issue 2; the step targets as issue 29 restates them):

* building histograms: >= 2,000,000 records/s on one core, census domain (27,648 bins);
* one timestep's decision plus LPA release, production (secure) randomness, for every decision
  method the service runs (:data:`CASES`: user-level DSAT/DSFT/uniform/fixed and the eleven
  w-event methods of ``controller/method.py``): <= 2 ms at 10^4 bins, <= 150 ms at 10^6 bins.

Per method and domain size, the engine (``controller.method.build_engine`` + LPA, as the service
builds it) steps through a stream of Poisson histograms whose level moves every timestep (so
distance-based methods see changes), after :data:`WARMUP` untimed steps, until ``--repeats``
timesteps released fresh (at most :data:`MAX_STEPS_FACTOR` times that many steps). Reported
(milliseconds, medians):

* ``step_ms``: every timed step (fresh and republished);
* ``fresh_step_ms``: the steps that released fresh (the decision + the release): the target's figure;
* ``noise_ms``: the draws of each fresh step alone, replayed on a new drawer of the same kind: the
  same calls with the same scales and sizes (the release's ``Δ/ε``, decision noise included), so
  ``fresh_step_ms - noise_ms`` is what the decision, the accountant and the bookkeeping add;
* ``fresh_fraction``, ``timed_steps``.

Run::

    OMP_NUM_THREADS=1 python3 benchmarks/bench_engine.py [--records 2000000] [--repeats 7]
        [--methods all|user:dsat,w:fast,...] [--large-methods LIST] [--bins 10000,1000000]
    # before and after, alternating in the same rounds (each checkout's own controller/histogram):
    python3 benchmarks/bench_engine.py --root . --root /path/to/main [--pairs 3] [--methods ...]

With ``--root`` the script runs itself once per root and round in a subprocess with
``PYTHONPATH=ROOT`` (A B A B …), and prints per root the median over rounds of each figure and,
with two roots, the median of the per-round ratios first / second. The machine is shared: compare
figures measured in the same rounds, and ``noise_ms`` with the step.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve()

#: (privacy unit, decision method) pairs the service runs: ``user:NAME`` and ``w:NAME``.
CASES = (
    *(f"user:{m}" for m in ("dsat", "dsft", "uniform", "fixed")),
    *(f"w:{m}" for m in ("dsat", "dsft", "uniform", "fixed", "sample", "bd", "ba", "pegasus", "fast", "adapub",
                         "rescuedp", "adaptive-sample")),
)
#: The default list at 10^6 bins (every method there takes minutes on a shared 2-core machine): the
#: service's default and one method of each kind (distance test, schedule, budget division, filter).
LARGE = ("user:dsat", "w:dsat", "w:uniform", "w:bd", "w:fast")
#: Step targets (ms) by domain size (issue 29).
TARGET_MS = {10_000: 2.0, 1_000_000: 150.0}
#: Untimed steps before timing (first release, caches).
WARMUP = 2
#: At most this many times ``--repeats`` steps per method while waiting for fresh releases.
MAX_STEPS_FACTOR = 8
#: The stream's histograms: this many Poisson vectors of rising level, cycled.
LEVELS = 4


def census():
    from histogram.domain import CategoricalAttribute, Domain, NumericAttribute

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
    from histogram.build import build_histogram

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


class _Recorder:
    """A noise drawer that forwards every call to ``inner`` and notes the call (name, arguments):
    the step's draws, to be replayed alone. Values are not kept."""

    __slots__ = ("inner", "calls")

    def __init__(self, inner: Any, calls: list[tuple[str, tuple, dict]]) -> None:
        self.inner = inner
        self.calls = calls

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)
        if not callable(fn):
            return fn

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            return fn(*args, **kwargs)

        return call


def timed_step(engine: Any, state: Any, counts: np.ndarray, drawer: Any) -> tuple[Any, Any, float, list]:
    """One engine step on ``counts`` with the drawer ``drawer()`` makes (made inside the timing, as
    the service makes one per timestep): the release, the next state, the seconds it took and the
    draws it made (name, arguments)."""
    calls: list[tuple[str, tuple, dict]] = []
    start = time.perf_counter()
    release, state = engine.step(state, counts, _Recorder(drawer(), calls))
    return release, state, time.perf_counter() - start, calls


def timed_replay(drawer: Any, calls: list[tuple[str, tuple, dict]]) -> float:
    """Seconds to make the draws ``calls`` alone (same calls, scales and sizes) on ``drawer()``."""
    start = time.perf_counter()
    d = drawer()
    for name, args, kwargs in calls:
        getattr(d, name)(*args, **kwargs)
    return time.perf_counter() - start


def _spec(case: str, bins: int):
    from controller.method import MethodSpec
    from controller.units import UserLevel, WEvent

    unit_name, _, method = case.partition(":")
    # user-level: ε = 1 over N = 10^4 timesteps, C = N; w-event: ε = 1 per w = 10, C = w
    unit = UserLevel(Fraction(1), 10_000, 10_000) if unit_name == "user" else WEvent(Fraction(1), 10, 10)
    threshold = 0.0  # DSFT/DSAT test and publish whenever the budget allows: the costly step
    return MethodSpec(method, unit, threshold=threshold, population=50 * bins)


def bench_method(case: str, bins: int, repeats: int, hists: list[np.ndarray]) -> dict[str, Any]:
    """One method's step and noise timings at ``bins`` bins (see the module docstring)."""
    from controller.method import build_engine
    from histogram.lpa import LaplaceMechanism
    from histogram.noise import Randomness

    engine = build_engine(_spec(case, bins), LaplaceMechanism(), bins)
    rnd = Randomness.secure()
    state = engine.initial_state()
    for t in range(WARMUP):
        _, state = engine.step(state, hists[t % len(hists)], rnd.drawer("bench", t))
    steps: list[float] = []
    fresh: list[float] = []
    noise: list[float] = []
    t = WARMUP
    while len(fresh) < repeats and len(steps) < MAX_STEPS_FACTOR * repeats:
        release, state, elapsed, calls = timed_step(engine, state, hists[t % len(hists)],
                                                    functools.partial(rnd.drawer, "bench", t))
        steps.append(elapsed)
        if release.kind == "fresh":
            fresh.append(elapsed)
            noise.append(timed_replay(functools.partial(rnd.drawer, "bench-noise", t), calls))
        t += 1

    def ms(xs: list[float]) -> float | None:
        return round(statistics.median(xs) * 1000, 3) if xs else None

    return {"step_ms": ms(steps), "fresh_step_ms": ms(fresh), "noise_ms": ms(noise),
            "fresh_fraction": round(len(fresh) / len(steps), 3), "timed_steps": len(steps)}


def _stream(bins: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.poisson(50 + 5 * k, bins).astype(np.int64) for k in range(LEVELS)]


def bench_steps(bins: int, cases: tuple[str, ...], repeats: int) -> dict[str, Any]:
    hists = _stream(bins)
    return {case: bench_method(case, bins, repeats, hists) for case in cases}


def within_target(steps: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per domain size with a target: the methods whose ``fresh_step_ms`` meets it."""
    out = {}
    for bins, rows in steps.items():
        target = TARGET_MS.get(int(bins))
        if target is not None:
            met = sorted(c for c, r in rows.items() if r["fresh_step_ms"] is not None and r["fresh_step_ms"] <= target)
            out[bins] = {"target_ms": target, "met": met, "missed": sorted(set(rows) - set(met))}
    return out


def parse_cases(text: str) -> tuple[str, ...]:
    """``all``, or a comma list of ``user:NAME`` / ``w:NAME`` / ``NAME`` (every unit it runs under)."""
    if text.strip() == "all":
        return CASES
    out: list[str] = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        chosen = [item] if ":" in item else [c for c in CASES if c.partition(":")[2] == item]
        bad = [c for c in chosen if c not in CASES]
        if not chosen or bad:
            raise SystemExit(f"unknown method {item!r}: choose from all, {', '.join(CASES)} (or a bare method name)")
        out += [c for c in chosen if c not in out]
    return tuple(out)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One process's measurements (this checkout's modules, or the root given by PYTHONPATH)."""
    result: dict[str, Any] = {}
    if args.records:
        result["histogram_build"] = {"records": args.records, **bench_build(args.records, args.repeats)}
    steps = {}
    for bins in args.bins:
        cases = args.methods if bins < 1_000_000 else args.large_methods
        if cases:
            steps[str(bins)] = bench_steps(bins, cases, args.repeats)
    result["steps"] = steps
    result["within_target"] = within_target(steps)
    return result


def _child_argv(args: argparse.Namespace, records: int) -> list[str]:
    return [sys.executable, str(HERE), "--records", str(records), "--repeats", str(args.repeats),
            "--methods", ",".join(args.methods) or "none", "--large-methods", ",".join(args.large_methods) or "none",
            "--bins", ",".join(str(b) for b in args.bins), "--bare"]


def compare_roots(args: argparse.Namespace) -> dict[str, Any]:
    """Each root in a subprocess (``PYTHONPATH=ROOT``), alternating, ``--pairs`` rounds."""
    roots = [Path(r).resolve() for r in args.root]
    records = args.records or 0
    per: list[list[dict[str, Any]]] = [[] for _ in roots]
    for _ in range(args.pairs):
        for i, root in enumerate(roots):
            env = {**os.environ, "PYTHONPATH": str(root)}
            done = subprocess.run(_child_argv(args, records), env=env, cwd=root, check=True, capture_output=True,
                                  text=True)
            per[i].append(json.loads(done.stdout))

    def figures(result: dict[str, Any]) -> dict[str, float]:
        flat = {f"build.{k}": v for k, v in result.get("histogram_build", {}).items() if k != "records"}
        for bins, cases in result["steps"].items():
            for case, r in cases.items():
                for key in ("step_ms", "fresh_step_ms", "noise_ms"):
                    if r[key] is not None:
                        flat[f"{bins}.{case}.{key}"] = r[key]
        return flat

    flats = [[figures(r) for r in rounds] for rounds in per]
    keys = sorted(set.intersection(*(set(f) for rounds in flats for f in rounds)))
    out: dict[str, Any] = {"rounds": args.pairs, "roots": []}
    for root, rounds in zip(roots, flats, strict=True):
        out["roots"].append({"root": str(root), "medians": {k: round(statistics.median(f[k] for f in rounds), 3)
                                                            for k in keys}})
    if len(roots) == 2:
        out["first_over_second"] = {
            k: round(statistics.median(a[k] / b[k] for a, b in zip(flats[0], flats[1], strict=True) if b[k]), 3)
            for k in keys}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=None,
                    help="records for the histogram-build part (0: skip; default 2,000,000, 0 with --root)")
    ap.add_argument("--repeats", type=int, default=7, help="fresh steps timed per method (and build repeats)")
    ap.add_argument("--methods", default="all", help="methods at 10^4 bins (below 10^6): all, or user:NAME,w:NAME,…")
    ap.add_argument("--large-methods", default=",".join(LARGE), help="methods at 10^6 bins and above (same syntax)")
    ap.add_argument("--bins", default="10000,1000000", help="domain sizes, comma-separated")
    ap.add_argument("--root", action="append", help="checkout to run (PYTHONPATH); repeat to pair before/after")
    ap.add_argument("--pairs", type=int, default=3, help="alternating rounds with --root")
    ap.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)  # a --root child: figures only
    args = ap.parse_args(argv)
    args.methods = () if args.methods == "none" else parse_cases(args.methods)
    args.large_methods = () if args.large_methods == "none" else parse_cases(args.large_methods)
    args.bins = tuple(int(b) for b in args.bins.split(",") if b.strip())
    if args.root:
        result = compare_roots(args)
    else:
        if args.records is None:
            args.records = 2_000_000
        result = run(args)
    if not args.bare:
        result = {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "processor": platform.processor() or platform.machine()},
            "load_average": os.getloadavg(),
            **result,
            "targets": {"records_per_s": 2_000_000, "step_ms": {str(k): v for k, v in TARGET_MS.items()},
                        "figure": "fresh_step_ms"},
        }
    print(json.dumps(result, indent=None if args.bare else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
