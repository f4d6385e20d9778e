"""The synthetic families at ε ∈ {0.1, 1}, w ∈ {10, 50}: mean absolute error per method (issue 13).

    PYTHONPATH=. python3 benchmarks/families.py --runs 20 --methods uniform,fixed,... > table.md

Methods are ``dpstream evaluate`` names (``m+<release.postprocess chain>``). Every method the lab's
runner takes (:func:`stream.lab.runner.runner_eligible`: the w-event methods with a stateless chain,
and uniform, fixed and sample with any chain) runs through :func:`stream.lab.evaluate.evaluate`,
i.e. the runner stepping the policy's own runs-axis rule; the others (a stateful chain such as
``kalman`` after a data-dependent method) step the engine once per run (``Randomness.seeded(seed +
r)``, as ``evaluate`` does) and apply every such chain asked for that method to the same releases,
so ``bd+kalman`` and ``bd+ewma`` share their noise and cost one engine run.

Each family stream is what ``dpstream generate <family> --timesteps 1000 --scale 1000 --seed 1``
writes; the config is the generated one with ε and w set. Prints a Markdown table (MAE per bin,
mean over the runs; the best private entry of each row in bold) and, per method, in how many
settings it beats the best plain baseline (Uniform, Sample, BD, BA, and fixed sampling, where
listed) by 20% or more, and how often the best post-processed entry of a row does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime

import numpy as np

from controller.runs import step_run
from histogram.accuracy import RunErrors, Workload
from histogram.noise import Randomness
from stream.config import Settings
from stream.lab.evaluate import check_methods, evaluate, split_method
from stream.lab.generate import build_config
from stream.lab.runner import runner_eligible
from stream.planning.families import FAMILIES, FamilyParams, family_attributes, family_series

PLAIN = ("uniform", "fixed", "sample", "bd", "ba")


def settings_for(family: str, epsilon: float, w: int, scale: float) -> Settings:
    config = build_config(family, family_attributes(1), timesteps=1000, population=int(scale), step_seconds=3600,
                          start=datetime(2024, 1, 1, tzinfo=UTC), epsilon=epsilon, w=w)
    return Settings(**config).validate_all()


def shared_runs(settings: dict[str, Settings], truth: np.ndarray, runs: int, seed: int) -> dict[str, float]:
    """MAE per bin of each name in ``settings`` (one decision method, several post-processing chains),
    every chain applied to the same engine run; run ``r`` draws from ``Randomness.seeded(seed + r)``.
    Scored by the one metrics module (:class:`histogram.accuracy.RunErrors`), the mean over runs."""
    any_s = next(iter(settings.values()))
    engine = any_s.engine()
    posts = {name: s.postprocessor() for name, s in settings.items()}
    workload = Workload.build(truth, (truth.shape[1],))
    errors = {name: [] for name in settings}
    for r in range(runs):
        rnd = Randomness.seeded(seed + r)
        post_states = {name: p.initial() for name, p in posts.items()}
        run_errors = {name: RunErrors(workload) for name in settings}
        for t, release, _ in step_run(engine, truth, lambda t, rnd=rnd: rnd.drawer(any_s.stream.id, t, "release")):
            for name, post in posts.items():
                if release.source_timestep is None:
                    out = np.zeros(truth.shape[1])
                else:
                    processed, post_states[name] = post.apply(post_states[name], release.counts, release.half_width,
                                                              release.confidence, release.kind == "fresh")
                    out = processed.counts
                run_errors[name].add(t, out)
        for name, acc in run_errors.items():
            errors[name].append(acc.metrics()[0]["mae"])
    return {name: float(np.mean(v)) for name, v in errors.items()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--methods", default="uniform,fixed,sample,bd,ba,uniform+nonnegative+kalman,"
                    "fixed+nonnegative+kalman,sample+nonnegative+kalman,bd+nonnegative+kalman,"
                    "ba+nonnegative+kalman,uniform+nonnegative+ewma")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--scale", type=float, default=1000.0)
    ap.add_argument("--epsilons", default="0.1,1")
    ap.add_argument("--ws", default="10,50")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write every setting's MAE per method here")
    ap.add_argument("--process-share", type=float, default=None,
                    help="the kalman/ewma filters' q (histogram.postprocess.PROCESS_SHARE) for this run: a "
                         "design sweep (benchmarks/kalman_share.py); the service always uses the shipped q")
    args = ap.parse_args()
    if args.process_share is not None:
        import histogram.postprocess as post

        post.PROCESS_SHARE = args.process_share
    methods = args.methods.split(",")
    cols = [*methods, "zero-release"]
    print("| family | ε | w | " + " | ".join(cols) + " |")
    print("|---|---|---|" + "---|" * len(cols))
    wins = dict.fromkeys(methods, 0)
    any_wins = helps = 0
    own = dict.fromkeys(methods, 0)
    cells = 0
    rows = []
    t0 = time.time()
    for family in args.families.split(","):
        truth = family_series(family, 1000, 1, params=FamilyParams(scale=args.scale))
        for epsilon in map(float, args.epsilons.split(",")):
            for w in map(int, args.ws.split(",")):
                s = settings_for(family, epsilon, w, args.scale)
                per_method = check_methods(s, methods)
                fast = [m for m in methods if runner_eligible(per_method[m])]
                shared: dict[str, list[str]] = {}
                for m in methods:
                    if m not in fast:
                        shared.setdefault(split_method(m)[0], []).append(m)
                r = evaluate(s, truth, fast or ["uniform"], runs=args.runs, queries=0, seed=0, progress=False,
                             jobs=args.jobs)
                maes = {m: r["methods"][m]["mae"] for m in fast}
                for names in shared.values():
                    maes.update(shared_runs(check_methods(s, names), truth, args.runs, 0))
                maes["zero-release"] = r["references"]["zero-release"]["mae"]
                rows.append({"family": family, "epsilon": epsilon, "w": w, "runs": args.runs, "scale": args.scale,
                             "runner": fast, "mae": maes})
                best = min(maes.values())
                plain = [maes[m] for m in methods if m in PLAIN]
                best_plain = min(plain) if plain else None
                cells += 1
                for m in methods:
                    if best_plain is not None and m not in PLAIN and maes[m] <= 0.8 * best_plain:
                        wins[m] += 1
                for m in methods:
                    base = m.split("+")[0]
                    if "+" in m and base in maes and maes[m] < maes[base]:
                        own[m] += 1
                others = [maes[m] for m in methods if m not in PLAIN]
                if best_plain is not None and others:
                    any_wins += min(others) <= 0.8 * best_plain
                    helps += min(others) < best_plain
                row = [f"**{v:.3g}**" if v == best else f"{v:.3g}" for v in (maes[c] for c in cols)]
                print(f"| {family} | {epsilon:g} | {w} | " + " | ".join(row) + " |", flush=True)
    print()
    for m, n in wins.items():
        if m not in PLAIN:
            print(f"- {m}: at least 20% below the best plain baseline in {n} of {cells} settings"
                  + (f"; below {m.split('+')[0]} itself in {own[m]}" if "+" in m else ""))
    print(f"- the best of them: at least 20% below the best plain baseline in {any_wins} of {cells} settings, "
          f"below it at all in {helps}")
    print(f"\n({cells} settings, {args.runs} runs each, {time.time() - t0:.0f} s)", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": "PYTHONPATH=. python3 benchmarks/families.py " + " ".join(sys.argv[1:]),
                       "seconds": round(time.time() - t0, 1), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
