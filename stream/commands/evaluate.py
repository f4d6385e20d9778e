"""``dpstream evaluate``: every method, R times, on your own data, side by side.

Exit status (``stream.commands``): 0 evaluated; 2 bad arguments, a
configuration or method that cannot run, or input that cannot be used
(missing, empty, no timesteps, a bad row under ``--strict``), or an output
that cannot be written; 1 anything else that stopped the evaluation. Bad rows
without ``--strict`` are counted by reason (with their first line numbers) on
stderr, never silently dropped.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from stream.commands import add_config_option

__all__ = ["register", "run"]

DEFAULT_METHODS = "dsat,dsft,uniform,fixed"


def _int_at_least(low: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "evaluate",
        help="replay every method R times on historical data and compare their errors",
        description=(
            "Window the input once into true per-timestep histograms (the service's reader, windowing "
            "and contribution bounding), run each method's release engine --runs times with seeded noise "
            "(with LPA — the w-event methods, user-level DSAT, DSFT, uniform and fixed, with any post-processing for "
            "the data-independent ones — all runs of a method go in one array pass through the policy's own "
            "rule, with the same exact noise sampler and an exact ε ledger: evaluation only, and replay does "
            "not reproduce those runs; "
            "--replayable draws run r's noise from the engine's own drawers of seed+r, so 'dpstream replay --seed "
            "seed+r' reproduces it), and report per method "
            "the mean absolute/relative error per bin, the error of --queries random range-count queries, "
            "fresh releases and the epsilon spent, each with a 95% confidence interval over the runs."
        ),
    )
    add_config_option(p)
    p.add_argument("--input", required=True, help="events CSV, or a counts file (one row per timestep)")
    p.add_argument("--methods", default=None,
                   help=f"comma-separated decision methods (default {DEFAULT_METHODS}; bd and ba need w-event; "
                        "auto: the planner's choice from the configuration alone; "
                        "with --recommend: the methods to try, default all)")
    p.add_argument("--recommend", action="store_true",
                   help="try every method this config can run, as published, +nonnegative and +kalman, and "
                        "print them ranked with the reason for the first (tuning on private history is not free)")
    p.add_argument("--rank-by", choices=("mae", "query_abs_error"), default="mae",
                   help="--recommend: rank by MAE per bin (default) or range-query error")
    p.add_argument("--runs", type=_int_at_least(1), default=10, help="runs per method (default 10)")
    p.add_argument("--queries", type=_int_at_least(0), default=1000,
                   help="random range-count queries per timestep (default 1000; 0 = none)")
    p.add_argument("--query-size", type=_int_at_least(1), default=None,
                   help="make every query cover about this many bins (default: random intervals)")
    p.add_argument("--seed", type=_int_at_least(0), default=0, help="seed of the noise and the queries (default 0)")
    p.add_argument("--sanity", type=_positive_float, default=1.0,
                   help="sanity bound s of the relative error |x - y| / max(s, y) (default 1)")
    p.add_argument("--true", dest="true_versions", default="",
                   help="also report the non-private '-true' versions of these methods (e.g. dsat,fixed)")
    p.add_argument("--json", dest="json_out", default=None, help="write the result here (default: stdout)")
    p.add_argument("--plot", default=None, help="also draw a PNG comparing the methods (needs matplotlib)")
    p.add_argument("--input-kind", choices=("auto", "events", "counts"), default="auto",
                   help="auto: an events CSV if the header has the user-id and event-time columns")
    p.add_argument("--counts", dest="input_kind", action="store_const", const="counts",
                   help="the input is a counts file (same as --input-kind counts)")
    p.add_argument("--strict", action="store_true", help="stop at the first bad input row (exit 1)")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar on stderr (auto: only on a terminal)")
    p.add_argument("--mechanisms", default=None,
                   help="compare release mechanisms instead of decision methods (issue 15): any of lpa, psd, copula, "
                        "copula-kendall, copula-mle, copula-median, marginals, marginals-1..3, run on the records "
                        "(the histogram is never built for copula/marginals) behind the service's engine: one public "
                        "schedule, --methods fixed (default) or uniform, at the config's epsilon and C, or --methods "
                        "dsat/dsft deciding in front of each; range-box and marginal queries")
    p.add_argument("--max-cells", type=_int_at_least(1), default=2_000_000,
                   help="--mechanisms: lpa and psd build the full histogram only up to this many cells; above, "
                        "they are skipped with the reason (default 2,000,000: psd peaked at 12 GiB on 1.7M cells)")
    p.add_argument("--synthetic", type=_int_at_least(1), default=100_000,
                   help="--mechanisms: synthetic records per copula/marginals release, for boxes wider than their "
                        "closed forms (default 100,000)")
    p.add_argument("--personal", default=None, metavar="MECHANISMS",
                   help="privacy.personal streams: evaluate every method under each of these PDP mechanisms "
                        "(minimum, threshold, sampling, privacy_aware, utility_based, or all), as rows "
                        "method@mechanism; threshold and sampling without privacy.personal.threshold use the "
                        "declared head-count-weighted mean budget. Default: the configuration's own mechanism")
    p.add_argument("--jobs", type=_int_at_least(0), default=0,
                   help="methods evaluated in parallel processes (default 0: one per core; 1: none); "
                        "the results do not depend on it")
    p.add_argument("--replayable", action="store_true",
                   help="draw run r's noise from the service engine's own drawers of seed+r (slower), so that "
                        "'dpstream replay --seed seed+r' reproduces run r; without it, noise is drawn in "
                        "blocks (same noise law, other values)")
    p.set_defaults(func=run, handler=run)
    return p


#: What a counts file cannot tell (docs/privacy.md §1.2, docs/evaluation.md).
COUNTS_CAVEAT = (
    "a counts file is taken as already aggregated, so contribution bounding (at most "
    "privacy.contribution_bound records per person per timestep) cannot be checked: the ε figures hold only "
    "if the file was built that way; evaluate the events file to have it checked"
)


def _err(msg: str) -> None:
    from stream.commands import print_error

    print_error("evaluate", msg)  # one prefixed line per line of msg (a ConfigError has one per problem)


def _unwritable(target: str) -> str | None:
    """Why ``target`` cannot be written (None: it can), checked without creating it."""
    import os

    path = Path(target)
    if path.is_dir():
        return "is a directory: give a file name"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"the directory {parent} does not exist: create it or choose another path"
    if path.exists() and not os.access(path, os.W_OK):
        return "the file is not writable: choose another path or change its permissions"
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        return f"the directory {parent} is not writable: choose another path"
    return None


def _outputs_usable(args: argparse.Namespace) -> bool:
    """Before any work: the plotting extra is there if --plot asks for it, and --json/--plot can be
    written (False: the reason is on stderr)."""
    if args.plot:
        from stream.lab.plot import MISSING, matplotlib_available

        if not matplotlib_available():
            _err(f"--plot {args.plot}: {MISSING}; or drop --plot")
            return False
    for flag, target in (("--json", args.json_out), ("--plot", args.plot)):
        problem = _unwritable(target) if target else None
        if problem:
            _err(f"{flag} {target}: {problem}")
            return False
    return True


def _write_result(args: argparse.Namespace, result: dict[str, Any], table: str) -> bool:
    """The table for a person (stdout when the JSON goes to a file, else stderr: stdout stays JSON)
    and the JSON (--json, or stdout). False: the file could not be written (said on stderr)."""
    text = json.dumps(result, indent=2, allow_nan=False)
    print(table, file=sys.stdout if args.json_out else sys.stderr)
    if args.json_out:
        try:
            Path(args.json_out).write_text(text + "\n")
        except OSError as exc:
            _err(f"cannot write {args.json_out}: {exc.strerror or exc}")
            return False
    else:
        print(text)
    return True


def run(args: argparse.Namespace) -> int:
    from controller.errors import ConfigurationError, StateError
    from histogram.errors import HistogramError
    from stream.commands import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, load_resolved
    from stream.config import ConfigError
    from stream.lab.evaluate import (
        EvaluationError,
        check_methods,
        evaluate,
        parse_methods,
    )
    from stream.lab.inputs import load_truth

    if args.mechanisms is not None:
        return _run_mechanisms(args)
    try:
        settings = load_resolved(args.config)
        model_release_refusal(settings, args)
        if args.recommend:
            from stream.lab.recommend import candidates

            asked = parse_methods(args.methods) if args.methods else []
            methods = candidates(settings, [m for m in asked if m != "auto"] or None)
            methods += ["auto"] if "auto" in asked else []  # where the planner's pick ranks, when asked
        else:
            methods = parse_methods(args.methods or DEFAULT_METHODS)
        personal_mechanisms = None
        if args.personal is not None:
            from stream.lab.personal import parse_personal

            personal_mechanisms = parse_personal(args.personal)
            if settings.privacy.personal is None:
                raise EvaluationError("--personal compares PDP mechanisms: the configuration has no privacy.personal")
        if args.recommend and settings.privacy.personal is not None:
            raise EvaluationError("--recommend does not rank personalized streams (privacy.personal) yet: compare "
                                  "methods and PDP mechanisms with --methods and --personal all")
        true_versions = parse_methods(args.true_versions) if args.true_versions.strip() else []
        missing = [m for m in true_versions if m not in methods]
        if missing:
            raise EvaluationError(f"--true names {', '.join(missing)}, which --methods does not list")
        per_method = check_methods(settings, methods)
    except (ConfigError, EvaluationError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    # fail before any work on what would only fail at the end: the plotting extra and the outputs
    if not _outputs_usable(args):
        return EXIT_USAGE
    progress = {"auto": None, "on": True, "off": False}[args.progress]
    try:
        truth = load_truth(settings, args.input, kind=args.input_kind, strict=args.strict, progress=progress)
    except EvaluationError as exc:  # InputError included
        _err(str(exc))
        return EXIT_USAGE
    print(f"dpstream evaluate: {truth.report.summary()}", file=sys.stderr)
    for line in truth.report.details():
        print(f"  {line}", file=sys.stderr)
    counts_file = truth.report.kind == "counts"
    if counts_file:
        print(f"dpstream evaluate: note: {COUNTS_CAVEAT}", file=sys.stderr)
    try:
        result = evaluate(
            settings,
            truth.counts,
            methods,
            runs=args.runs,
            queries=args.queries,
            seed=args.seed,
            sanity=args.sanity,
            query_size=args.query_size,
            true_versions=true_versions,
            progress=progress,
            jobs=args.jobs or None,
            replayable=args.replayable,
            personal=truth.personal,
            personal_mechanisms=personal_mechanisms,
        )
    except (EvaluationError, ConfigError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    except (StateError, ConfigurationError, HistogramError) as exc:
        _err(f"the release path stopped: {exc}")
        return EXIT_FAILURE
    result = {**result, "input": {
        "kind": truth.report.kind,
        "contribution_bounding": "not checked" if counts_file else
        f"applied: at most {settings.privacy.contribution_bound} record(s) per person per timestep",
        **({"caveat": COUNTS_CAVEAT} if counts_file else {}),
    }}
    from stream.planning.diagnostics import threshold_below_noise_floor

    diagnostics = []
    for name, method_settings in per_method.items():
        diagnosis = threshold_below_noise_floor(method_settings)
        if diagnosis is not None:
            diagnostics.append({"method": name, **diagnosis.to_json()})
            print(f"dpstream evaluate: warning: {name}: {diagnosis.message()}", file=sys.stderr)
    result["diagnostics"] = diagnostics
    if "plan" in result:  # decision: auto: why it ran what it ran (from the configuration alone)
        for line in result["plan"]["reasons"]:
            print(f"dpstream evaluate: {line}", file=sys.stderr)
        for line in result["plan"]["warnings"]:
            print(f"dpstream evaluate: warning: auto: {line}", file=sys.stderr)
    zero_mae = result["references"]["zero-release"]["mae"]
    for name in result["worse_than_zero_release"]:
        print(f"dpstream evaluate: warning: {name} has a larger error than publishing all zeros "
              f"(mean absolute error per bin {result['methods'][name]['mae']:.4g} against {zero_mae:.4g}): "
              "at this ε and on this data it is worse than releasing nothing; see 'references' in the output",
              file=sys.stderr)
    from stream.lab.table import results_table

    if args.recommend:
        from stream.lab.recommend import ranking, recommendation

        result["recommendation"] = {"rank_by": args.rank_by, "ranking": [n for n, _ in ranking(result, args.rank_by)]}
        print(recommendation(result, args.rank_by, diagnostics),
              file=sys.stdout if args.json_out else sys.stderr)
    if not _write_result(args, result, results_table(result)):
        return EXIT_USAGE
    if args.plot:
        from stream.lab.plot import PlotUnavailableError, plot_methods

        try:
            plot_methods(result, args.plot, title=f"dpstream evaluate: {Path(args.input).name}")
        except PlotUnavailableError as exc:  # checked before the run; only if it vanished meanwhile
            _err(str(exc))
            return EXIT_USAGE
        except OSError as exc:
            _err(f"cannot write {args.plot}: {exc.strerror or exc}")
            return EXIT_USAGE
    return EXIT_OK


def model_release_refusal(settings: Any, args: argparse.Namespace) -> None:
    """Plain ``evaluate`` compares decision methods on histograms; a model release is evaluated
    with ``--mechanisms`` (range-box and marginal queries answered from the released model).

    Raises:
        EvaluationError: the configuration's ``release.mechanism`` is ``copula`` or ``marginals``;
            the message names the ``--mechanisms`` command that evaluates it.
    """
    from stream.lab.evaluate import EvaluationError

    release = settings.release
    if release.mechanism not in ("copula", "marginals"):
        return
    if release.mechanism == "copula":
        name = "copula-" + (release.copula.correlation if release.copula is not None else "kendall")
    else:
        name = f"marginals-{release.marginals.k if release.marginals is not None else 2}"
    decision = release.decision if release.decision in ("dsat", "dsft") else "fixed"
    raise EvaluationError(
        f"release.mechanism: {release.mechanism} releases a model, not a histogram, and plain evaluate compares "
        f"decision methods on histograms: run 'dpstream evaluate --config {args.config} --input {args.input} "
        f"--mechanisms {name} --methods {decision}' (--methods fixed, uniform, dsat or dsft)")


def _run_mechanisms(args: argparse.Namespace) -> int:
    """``--mechanisms``: release mechanisms on the records (stream.lab.mechanisms)."""
    from controller.errors import ConfigurationError, StateError
    from histogram.errors import HistogramError
    from stream.commands import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
    from stream.config import ConfigError, load_settings
    from stream.lab.errors import EvaluationError, InputError
    from stream.lab.inputs import load_records
    from stream.lab.mechanisms import (
        ENGINE_DECISIONS,
        SCHEDULES,
        evaluate_mechanisms,
        mechanisms_table,
        parse_mechanisms,
        plot_mechanisms,
    )

    try:
        settings = load_settings(args.config)
        names = parse_mechanisms(args.mechanisms)
        schedule = (args.methods or "fixed").strip().lower()
        if schedule not in (*SCHEDULES, *ENGINE_DECISIONS):
            raise EvaluationError(f"with --mechanisms, --methods names the one decision every mechanism runs behind: "
                                  f"a public schedule ({' or '.join(SCHEDULES)}) or the service's "
                                  f"{' or '.join(ENGINE_DECISIONS)}, "
                                  f"got {args.methods!r}")
        if args.recommend or args.true_versions.strip():
            raise EvaluationError("--recommend and --true compare decision methods: drop them with --mechanisms")
        if args.input_kind == "counts":
            raise EvaluationError("--mechanisms reads the records of an events file, not a counts file")
    except (ConfigError, EvaluationError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    if not _outputs_usable(args):
        return EXIT_USAGE
    try:
        truth = load_records(settings, args.input, strict=args.strict)
    except InputError as exc:
        _err(str(exc))
        return EXIT_USAGE
    print(f"dpstream evaluate: {truth.report.summary()}", file=sys.stderr)
    for line in truth.report.details():
        print(f"  {line}", file=sys.stderr)
    from stream.lab.progress import progress_bar

    bar = progress_bar(len(names) * args.runs * truth.timesteps,
                       {"auto": None, "on": True, "off": False}[args.progress], "evaluate mechanisms", unit="timestep")
    try:
        result = evaluate_mechanisms(settings, truth, names, runs=args.runs, queries=max(1, args.queries),
                                     seed=args.seed, sanity=args.sanity, schedule=schedule,
                                     max_cells=args.max_cells, synthetic=args.synthetic,
                                     progress=bar.update if bar is not None else None)
    except (EvaluationError, ConfigError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    except (StateError, ConfigurationError, HistogramError) as exc:
        _err(f"the release path stopped: {exc}")
        return EXIT_FAILURE
    finally:
        if bar is not None:
            bar.close()
    result["input"] = {"kind": "events", "contribution_bounding":
                       f"applied: at most {settings.privacy.contribution_bound} record(s) per person per timestep"}
    for name, why in result["skipped"].items():
        print(f"dpstream evaluate: note: {name} skipped: {why}", file=sys.stderr)
    if not _write_result(args, result, mechanisms_table(result)):
        return EXIT_USAGE
    if args.plot:
        try:
            plot_mechanisms(result, args.plot, title=f"dpstream evaluate --mechanisms: {Path(args.input).name}")
        except OSError as exc:
            _err(f"cannot write {args.plot}: {exc.strerror or exc}")
            return EXIT_USAGE
    return EXIT_OK
