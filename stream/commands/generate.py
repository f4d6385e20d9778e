"""``dpstream generate census|traffic|<family>``: synthetic datasets.

``census`` and ``traffic`` are the thesis's dynamic datasets (§4.5.1);
``highdim`` a correlated, drifting population over 8–12 attributes and 10⁶+
cells (:mod:`stream.lab.highdim`, issue 15); the
families ``exponential``, ``sine``, ``lognormal``, ``trend``, ``randomwalk`` and
``sudden`` are count streams shaped like the public w-event benchmark's
(:mod:`stream.planning.families`). Writes ``DIR/events.csv`` and a matching ``DIR/config.yaml`` (and, with
``--counts``, ``DIR/counts.csv``: the true histogram of every timestep).
Exit status (``stream.commands``): 0 written; 2 bad arguments or files that
cannot be written.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from stream.commands import non_negative_int as _non_negative_int
from stream.commands import positive_int as _positive_int

__all__ = ["register", "run"]

FAMILY_NAMES = ("exponential", "sine", "lognormal", "trend", "randomwalk", "sudden")






def _start(text: str) -> datetime:
    try:
        dt = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO-8601 time like 2024-01-01T00:00:00Z, got {text!r}") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "generate",
        help="write a synthetic dynamic dataset (events.csv + config.yaml)",
        description=(
            "Write a synthetic dynamic dataset as the thesis builds them (section 4.5.1): "
            "'census' (6 attributes, 27,648 bins; people deleted and inserted at a rate that changes "
            "over 10 periods) or 'traffic' (moving objects on a grid with rush hours). Writes "
            "DIR/events.csv and DIR/config.yaml. The families exponential, sine, lognormal, trend, randomwalk "
            "and sudden write count streams like the w-event benchmark's (Schaler et al., PVLDB 2023: 1000 "
            "timesteps, largest value --scale in 10/100/1000/10000, floor 2); see docs/results.md. "
            "'highdim' writes a population with 8-12 correlated, drifting attributes over 10^6+ cells "
            "(issue 15), for 'dpstream evaluate --mechanisms'."
        ),
    )
    p.add_argument("kind", choices=("census", "traffic", "highdim", *FAMILY_NAMES), help="which dataset")
    p.add_argument("--timesteps", type=_positive_int, required=True, help="N, the number of timesteps")
    p.add_argument("--population", type=_positive_int, default=None,
                   help="P, people (objects) per timestep (census and traffic: required)")
    p.add_argument("--scale", type=float, default=1000.0,
                   help="families: the stream's largest count a (benchmark: 10, 100, 1000, 10000; default 1000)")
    p.add_argument("--period", type=_positive_int, default=40,
                   help="families sine/exponential: (average) period in timesteps (default 40)")
    p.add_argument("--bins", type=_positive_int, default=1,
                   help="families: independent streams side by side, one per bin (default 1, as the benchmark)")
    p.add_argument("--seed", type=_non_negative_int, default=0, help="seed of the data generator (default 0)")
    p.add_argument("--out", required=True, help="output directory (created if missing)")
    p.add_argument("--rate", type=float, default=0.5, help="census: update rate r (default 0.5)")
    p.add_argument("--periods", type=_positive_int, default=10, help="census: update periods (default 10)")
    p.add_argument("--sigma", type=float, default=None, help="census: sd of m per period (default: half its mean)")
    p.add_argument("--dimensions", type=int, default=6, choices=range(1, 7), metavar="1..6",
                   help="census: keep only the first d attributes (default 6)")
    p.add_argument("--attributes", type=int, default=8, metavar="8..12",
                   help="highdim: number of correlated attributes (default 8)")
    p.add_argument("--levels", type=_positive_int, default=6,
                   help="highdim: levels per attribute (default 6: 6^8 = 1,679,616 cells; at least 10^6 cells)")
    p.add_argument("--drift", type=float, default=1.0,
                   help="highdim: how far dependence and marginals drift over the horizon (0 = none, default 1)")
    p.add_argument("--jump", type=float, default=None,
                   help="highdim: at this share of the horizon (0..1) the dependence between attributes jumps "
                        "(a further quarter turn of the loadings) while every marginal stays on its path")
    p.add_argument("--grid", type=_positive_int, default=64, help="traffic: cells per side (default 64)")
    p.add_argument("--timestep", default=None, help="timestep length (default 1d for census, 15m for traffic)")
    p.add_argument("--start", type=_start, default=None, help="time of the first timestep (default 2024-01-01T00:00:00Z)")
    p.add_argument("--time-format", choices=("epoch", "iso"), default="epoch",
                   help="event_time column as epoch seconds (default) or ISO-8601")
    p.add_argument("--epsilon", type=float, default=1.0, help="privacy.epsilon in config.yaml (default 1)")
    p.add_argument("--threshold", type=float, default=0.025, help="release.threshold T (default 0.025)")
    p.add_argument("--w", type=_positive_int, default=None, help="traffic: privacy.w (default one day of timesteps)")
    p.add_argument("--cutoff", type=_positive_int, default=None, help="privacy.cutoff C (default ceil(0.01 N))")
    p.add_argument("--counts", action="store_true", help="also write DIR/counts.csv (true histogram per timestep)")
    p.add_argument("--counts-only", action="store_true",
                   help="write DIR/counts.csv and DIR/config.yaml but no events (large populations)")
    p.add_argument("--arrival-delay", type=float, default=None, metavar="SECONDS",
                   help="add an arrival_time column: event time + a seeded log-normal delivery delay with this "
                        "median (rows in arrival order; config.yaml sets schema.arrival_time and allowed_lateness "
                        "at the 99.9th percentile), so replay/evaluate follow the service's per-event rule")
    p.add_argument("--budgets", choices=("uniform", "normal", "tiers"), default=None,
                   help="census/traffic: personalized DP (thesis ch. 5): draw every person's epsilon (uniform on "
                        "[0.01, 0.1]; normal N(0.1, 1) truncated to [0.01, 1]; tiers 0.01/0.05/0.1 for 20/50/30%%), "
                        "write DIR/consent.csv and privacy.personal into config.yaml")
    p.add_argument("--budget-grid", type=_positive_int, default=100,
                   help="--budgets: floor every epsilon to a multiple of 1/GRID (default 100; 100..10000): "
                        "fewer distinct budgets keep the engine's per-tier input small")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar on stderr (auto: only on a terminal)")
    p.set_defaults(func=run, handler=run)
    return p


def run(args: argparse.Namespace) -> int:
    from stream.lab.generate import DEFAULT_START, generate
    from stream.planning.families import FAMILIES, FamilyParams

    family = highdim = None
    if args.kind == "highdim":
        from stream.lab.highdim import HighDimParams

        try:
            highdim = HighDimParams(attributes=args.attributes, levels=args.levels, drift=args.drift, jump=args.jump)
        except ValueError as exc:
            print(f"dpstream generate: error: {exc}", file=sys.stderr)
            return 2
    if args.kind in FAMILIES:
        try:
            family = FamilyParams(scale=args.scale, period=args.period)
        except ValueError as exc:
            print(f"dpstream generate: error: {exc}", file=sys.stderr)
            return 2
    elif args.population is None:
        print(f"dpstream generate: error: {args.kind} needs --population (people per timestep), e.g. "
              "--population 1000", file=sys.stderr)
        return 2

    from stream.lab.progress import progress_bar

    bar = progress_bar(args.timesteps, {"auto": None, "on": True, "off": False}[args.progress],
                       f"generate {args.kind}", unit="timestep")
    try:
        report = generate(
            args.kind,
            args.out,
            timesteps=args.timesteps,
            population=args.population or 1,
            seed=args.seed,
            rate=args.rate,
            periods=args.periods,
            sigma=args.sigma,
            dimensions=args.dimensions,
            grid=args.grid,
            timestep=args.timestep,
            start=args.start or DEFAULT_START,
            time_format=args.time_format,
            epsilon=args.epsilon,
            threshold=args.threshold,
            w=args.w,
            cutoff=args.cutoff,
            counts=args.counts or args.counts_only,
            events=not args.counts_only,
            progress=bar.update if bar is not None else None,
            arrival_delay=args.arrival_delay,
            bins=args.bins,
            family=family,
            highdim=highdim,
            budgets=args.budgets,
            budget_grid=args.budget_grid,
        )
    except ValueError as exc:
        print(f"dpstream generate: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"dpstream generate: error: cannot write to {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    finally:
        if bar is not None:
            bar.close()
    print(json.dumps(report.to_json()))
    return 0
