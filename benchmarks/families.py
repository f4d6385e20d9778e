"""The synthetic families at ε ∈ {0.1, 1}, w ∈ {10, 50}: mean absolute error per method (issue 13).

    PYTHONPATH=. python3 benchmarks/families.py --runs 20 --methods uniform,fixed,... > table.md

Each family stream is what ``dpstream generate <family> --timesteps 1000 --scale 1000 --seed 1``
writes; the config is the generated one with ε and w set. Prints a Markdown table (MAE per bin,
mean over the runs; the best private entry of each row in bold) and, per method, in how many
settings it beats the best plain baseline by 20% or more.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime

from stream.config import Settings
from stream.lab.evaluate import evaluate
from stream.lab.families import FAMILIES, FamilyParams, family_attributes, family_series
from stream.lab.generate import build_config

PLAIN = ("uniform", "fixed", "bd", "ba")


def settings_for(family: str, epsilon: float, w: int, scale: float) -> Settings:
    config = build_config(family, family_attributes(1), timesteps=1000, population=int(scale), step_seconds=3600,
                          start=datetime(2024, 1, 1, tzinfo=UTC), epsilon=epsilon, w=w)
    return Settings(**config).validate_all()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--methods", default="uniform,fixed,uniform+kalman,uniform+ewma,fixed+kalman")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--scale", type=float, default=1000.0)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    methods = args.methods.split(",")
    cols = [*methods, "zero-release"]
    print("| family | ε | w | " + " | ".join(cols) + " |")
    print("|---|---|---|" + "---|" * len(cols))
    wins = dict.fromkeys(methods, 0)
    cells = 0
    t0 = time.time()
    for family in args.families.split(","):
        truth = family_series(family, 1000, 1, params=FamilyParams(scale=args.scale))
        for epsilon in (0.1, 1.0):
            for w in (10, 50):
                s = settings_for(family, epsilon, w, args.scale)
                r = evaluate(s, truth, methods, runs=args.runs, queries=0, seed=0, progress=False,
                             jobs=args.jobs)
                maes = {m: r["methods"][m]["mae"] for m in methods}
                maes["zero-release"] = r["references"]["zero-release"]["mae"]
                best = min(maes.values())
                plain = [maes[m] for m in methods if m in PLAIN]
                best_plain = min(plain) if plain else None
                cells += 1
                for m in methods:
                    if best_plain is not None and m not in PLAIN and maes[m] <= 0.8 * best_plain:
                        wins[m] += 1
                row = [f"**{v:.3g}**" if v == best else f"{v:.3g}" for v in (maes[c] for c in cols)]
                print(f"| {family} | {epsilon:g} | {w} | " + " | ".join(row) + " |", flush=True)
    print()
    for m, n in wins.items():
        if m not in PLAIN:
            print(f"- {m}: at least 20% below the best plain baseline in {n} of {cells} settings")
    print(f"\n({cells} settings, {args.runs} runs each, {time.time() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
