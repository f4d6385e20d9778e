"""Online re-planning (``release.planner.online``) against today's ``auto`` and the best fixed method
on streams whose regime changes halfway (issue 30 item 4).

    PYTHONPATH=. python3 benchmarks/bench_online.py --runs 3 > online.json

Each stream is two ``dpstream generate`` families glued at the middle (the first half of family A,
then the second half of family B; 1 bin, scale 1,000, seed 1). For ε ∈ {0.1, 1} and w ∈ {10, 50}:

* ``auto``: the planner's choice from the configuration alone (``release.planner`` with
  ``--plan-timesteps`` timesteps, 1 run), published with the chain it chose, or with
  ``--postprocess`` when given (the planner's own chain is kept in ``planner_postprocess``);
* ``online``: the same start, re-planned every ``--every`` timesteps from the releases;
* every candidate the online policy may switch to, run alone with the same chain; ``best fixed``
  is the smallest of them (chosen with hindsight, on the evaluated stream: an oracle).

Every run ``r`` steps the one engine (``settings.engine()``) with ``Randomness.seeded(seed + r)``
and applies the configured ``release.postprocess`` to the releases, as the service does. Prints
JSON: MAE per bin (mean over runs) per method, and the ratios online/auto and online/best fixed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime

import numpy as np

from histogram.accuracy import RunErrors, Workload, stream_errors
from histogram.noise import Randomness
from stream.config import Settings
from stream.lab.generate import build_config
from stream.planning.families import FamilyParams, family_attributes, family_series
from stream.planning.planner import resolve

REGIMES = (("sine", "sudden"), ("lognormal", "sudden"), ("randomwalk", "exponential"))


def truth_of(first: str, second: str, timesteps: int, scale: float) -> np.ndarray:
    half = timesteps // 2
    a = family_series(first, timesteps, 1, params=FamilyParams(scale=scale))
    b = family_series(second, timesteps, 1, params=FamilyParams(scale=scale))
    return np.concatenate([a[:half], b[half:]])


def mae(settings: Settings, truth: np.ndarray, runs: int, seed: int = 1) -> tuple[float, list]:
    """Mean over runs of each run's MAE per bin (:class:`histogram.accuracy.RunErrors`)."""
    engine = settings.engine()
    post = settings.postprocessor()
    workload = Workload.build(truth, (truth.shape[1],))
    per_run, switches = [], []
    for r in range(runs):
        rnd = Randomness.seeded(seed + r)
        state, pstate = engine.initial_state(), post.initial()
        errors = RunErrors(workload)
        for t in range(truth.shape[0]):
            release, state = engine.step(state, truth[t], rnd.drawer(settings.stream.id, t, "release"))
            if release.source_timestep is None:
                out = np.zeros(truth.shape[1])
            else:
                with np.errstate(invalid="ignore", divide="ignore"):
                    processed, pstate = post.apply(pstate, release.counts, release.half_width, release.confidence,
                                                   release.kind == "fresh")
                out = np.asarray(processed.counts, dtype=np.float64)
            errors.add(t, out)
        per_run.append(errors.metrics()[0]["mae"])
        switches.append(list(getattr(state.policy, "switches", ())))
    return float(np.mean(per_run)), switches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timesteps", type=int, default=300)
    ap.add_argument("--scale", type=float, default=1000)
    ap.add_argument("--every", type=int, default=30)
    ap.add_argument("--plan-timesteps", type=int, default=60)
    ap.add_argument("--epsilons", default="0.1,1")
    ap.add_argument("--ws", default="10,50")
    ap.add_argument("--postprocess", default=None,
                    help="publish auto's decision with this release.postprocess chain instead of the planner's "
                         "(auto, online and every fixed candidate alike)")
    ap.add_argument("--regimes", default=",".join(f"{a}->{b}" for a, b in REGIMES),
                    help="first->second family pairs, comma-separated")
    ap.add_argument("--also", default="",
                    help="more methods, each run alone: DECISION or DECISION:CHAIN (release.postprocess; default "
                         "the planner's chain), comma-separated, e.g. adaptive-sample:model+nonnegative")
    ap.add_argument("--only-also", action="store_true",
                    help="measure the --also methods only (not auto, online or the fixed candidates: their rows "
                         "are those of an earlier run with the same --runs, regimes and seeds)")
    args = ap.parse_args(argv)
    also = [a.partition(":") for a in args.also.split(",") if a]
    rows = []
    for first, second in (r.split("->") for r in args.regimes.split(",")):
        truth = truth_of(first, second, args.timesteps, args.scale)
        for eps in (float(e) for e in args.epsilons.split(",")):
            for w in (int(x) for x in args.ws.split(",")):
                t0 = time.time()
                config = build_config(first, family_attributes(1), timesteps=args.timesteps,
                                      population=int(args.scale), step_seconds=3600,
                                      start=datetime(2024, 1, 1, tzinfo=UTC), epsilon=eps, w=w)
                config["release"] = {**config.get("release", {}), "decision": "auto",
                                     "planner": {"timesteps": args.plan_timesteps, "runs": 1}}
                auto = resolve(Settings(**config).validate_all())
                planner_post = auto.release.postprocess
                if args.postprocess is not None:
                    auto = auto.with_changes({"release": {"postprocess": args.postprocess}})
                online = auto.with_changes({"release": {"planner": {"online": {"every": args.every,
                                                                              "min_releases": 3}}}})
                labels = online.engine().policy.labels
                row = {"regime": f"{first}->{second}", "epsilon": eps, "w": w,
                       "auto": auto.release.decision + ("(noise_floor)" if auto.release.noise_floor else ""),
                       "postprocess": auto.release.postprocess, "planner_postprocess": planner_post}
                row["mae_also"] = {
                    f"{d}+{c or auto.release.postprocess}": mae(auto.with_changes(
                        {"release": {"decision": d, **({"postprocess": c} if c else {})}}), truth, args.runs)[0]
                    for d, _, c in also}
                if args.only_also:
                    row["seconds"] = round(time.time() - t0, 1)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
                    continue
                row["mae_auto"], _ = mae(auto, truth, args.runs)
                row["mae_online"], row["switches"] = mae(online, truth, args.runs)
                fixed = {}
                for label in labels:
                    decision, _, rest = label.partition("(")
                    change = {"decision": decision}
                    if decision in ("dsat", "dsft"):
                        change["noise_floor"] = rest.startswith("noise_floor")
                    fixed[label], _ = mae(auto.with_changes({"release": change}), truth, args.runs)
                best = min(fixed, key=fixed.get)
                row.update(mae_fixed=fixed, best_fixed=best, mae_best_fixed=fixed[best],
                           mae_zero=stream_errors(Workload.build(truth, (truth.shape[1],)), np.zeros(truth.shape))[0]["mae"],
                           online_over_auto=row["mae_online"] / row["mae_auto"],
                           online_over_best=row["mae_online"] / fixed[best], seconds=round(time.time() - t0, 1))
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    json.dump({"command": "PYTHONPATH=. python3 benchmarks/bench_online.py " + " ".join(argv or sys.argv[1:]),
               "rows": rows}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
