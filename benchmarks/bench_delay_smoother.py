"""The fixed-lag smoother of the ``model`` filters (``release.delay``) on the six families: mean
absolute error per bin of each schedule + filter + delay, as the service publishes it. Prints JSON.

    PYTHONPATH=. python3 benchmarks/bench_delay_smoother.py --runs 3 --jobs 2 > after.json
    # the same figures at another commit (a worktree of it), for a before/after comparison:
    PYTHONPATH=/path/to/worktree python3 /path/to/worktree/benchmarks/bench_delay_smoother.py ... > before.json
    python3 benchmarks/bench_delay_smoother.py --compare before.json after.json

Each family stream is what ``dpstream generate <family> --timesteps 1000 --scale 1000 --seed 1``
writes, the configuration the generated one with ε and w set (w-event). Each run steps the
engine once (the planner's simulation, :func:`stream.planning.planner._simulate`: its seeded noise)
and the chain is applied to that run's releases with the delay, every timestep scored with the
value published for it ``delay`` timesteps later (:func:`stream.planning.planner._chain_errors`,
the service's :class:`histogram.postprocess.PostProcessor`, the one metrics module).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from families import settings_for  # noqa: E402

from stream.planning.families import FAMILIES, FamilyParams, family_series  # noqa: E402

SETTINGS = ((0.1, 10), (0.1, 50), (1.0, 10), (1.0, 50))


def measure(args: tuple[str, float, int, str, int, tuple[str, ...], tuple[int, ...]]) -> dict[str, float]:
    """``{"family|ε|w|method|chain|delay": MAE}`` for one stream and schedule, every chain and delay
    applied to the same ``runs`` engine runs."""
    from stream.planning.planner import _chain_errors, _simulate

    family, eps, w, method, runs, chains, delays = args
    settings = settings_for(family, eps, w, 1000.0).with_changes({"release": {"decision": method}})
    truth = family_series(family, 1000, 1, params=FamilyParams(scale=1000.0))
    traces = [_simulate(settings, truth, seed, ())[1] for seed in range(runs)]
    out = {}
    for chain in chains:
        for delay in delays:
            errs = _chain_errors(settings, chain, [truth] * runs, traces, delay=delay)
            out[f"{family}|{eps:g}|{w}|{method}|{chain}|{delay}"] = sum(errs) / len(errs)
    return out


def compare(before: dict[str, float], after: dict[str, float]) -> dict[str, object]:
    ratios = {k: after[k] / before[k] for k in before if k in after and before[k] > 0}
    logs = [math.log(r) for r in ratios.values()]
    ranked = sorted(ratios, key=ratios.get)
    return {"settings": len(ratios), "geometric_mean": math.exp(sum(logs) / len(logs)),
            "worse_by_more_than_1pct": sum(r > 1.01 for r in ratios.values()),
            "better_by_more_than_1pct": sum(r < 0.99 for r in ratios.values()),
            "best": [[k, before[k], after[k]] for k in ranked[:8]],
            "worst": [[k, before[k], after[k]] for k in ranked[::-1][:8]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--methods", default="sample,fixed")
    ap.add_argument("--chains", default="model+nonnegative,model-trend+nonnegative")
    ap.add_argument("--delays", default="0,1,2")
    ap.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"),
                    help="only compare two earlier outputs of this benchmark")
    args = ap.parse_args()
    if args.compare:
        before, after = (json.loads(p.read_text()) for p in args.compare)
        print(json.dumps(compare(before, after), indent=1))
        return 0
    chains, delays = tuple(args.chains.split(",")), tuple(int(d) for d in args.delays.split(","))
    cells = [(f, e, w, m, args.runs, chains, delays) for e, w in SETTINGS for m in args.methods.split(",")
             for f in args.families.split(",")]
    out: dict[str, float] = {}
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            for part in pool.map(measure, cells):
                out.update(part)
    else:
        for cell in cells:
            out.update(measure(cell))
    print(json.dumps(out, indent=0, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
