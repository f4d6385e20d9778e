"""``dpstream replay``: a CSV file through the service's release path, into JSON Lines.

Exit status: 0 written; 2 bad configuration or input (one-line message);
1 anything else that stopped the replay.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from stream.commands import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, add_config_option, print_error
from stream.commands import non_negative_int as _seed

__all__ = ["register", "run"]




def _block_mib(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of MiB, got {text!r}") from None
    if not 0.01 <= value <= 1024:
        raise argparse.ArgumentTypeError(f"must lie in [0.01, 1024] MiB, got {value}")
    return int(value * (1 << 20))


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "replay",
        help="replay an events CSV (or counts file) through the release path into JSONL",
        description=(
            "Run exactly the release path the service runs (validation, event-time windowing, "
            "contribution bounding, decision + mechanism, message format) on a CSV file and write one "
            "release message per timestep as JSON Lines. The first line is the stream's domain message "
            "(message_type \"domain\": what each count position means); every further line is a release "
            "message (message_type \"release\"), in timestep order. A summary goes to stderr."
        ),
        epilog=(
            "Input: a header row; the columns named by schema.user_id, schema.event_time (epoch seconds or "
            "ISO-8601) and one per schema.attributes entry. Rejected rows are counted by reason and their "
            "first line numbers shown. Exit status: 0 ok, 2 bad configuration or input, 1 other failure."
        ),
    )
    add_config_option(p)
    p.add_argument("--input", required=True, metavar="EVENTS.csv", help="events CSV (or counts file with --counts)")
    p.add_argument("--output", required=True, metavar="RELEASES.jsonl", help="where to write the messages")
    p.add_argument(
        "--seed", type=_seed, default=None, metavar="S",
        help="reproducible noise from seed S (sets randomness.seed and allow_seeded_noise; "
             "for evaluation and comparisons only, never for real releases)",
    )
    p.add_argument("--strict", action="store_true",
                   help="stop with an error at the first rejected or late row instead of counting it")
    p.add_argument("--counts", action="store_true",
                   help="the input is a counts file: one row per timestep, one column per bin (already "
                        "bounded); windowing is skipped")
    p.add_argument("--block-size", type=_block_mib, default=16 << 20, metavar="MiB",
                   help="CSV block size in MiB (default 16)")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar on stderr (auto: only on a terminal)")
    p.add_argument("--summary-json", metavar="FILE", default=None,
                   help="also write the summary as JSON to FILE ('-' for stdout)")
    p.set_defaults(handler=run, func=run)
    return p


def _err(msg: str) -> None:
    print_error("replay", msg)  # one prefixed line per line of msg (a ConfigError has one per problem)


def run(args: argparse.Namespace) -> int:
    from controller.errors import ConfigurationError, StateError
    from histogram.errors import HistogramError
    from stream.commands import load_resolved
    from stream.config import ConfigError
    from stream.ingest.csvio import CsvError
    from stream.lab.replay import ReplayError, replay

    overrides: dict[str, Any] = {}
    if args.seed is not None:
        overrides["randomness"] = {"seed": args.seed, "allow_seeded_noise": True}
    try:
        settings = load_resolved(args.config, **overrides)
    except ConfigError as exc:
        _err(str(exc))
        return EXIT_USAGE
    from stream.planning.diagnostics import threshold_below_noise_floor

    diagnosis = threshold_below_noise_floor(settings)
    if diagnosis is not None:
        print(f"dpstream replay: warning: {diagnosis.message()}", file=sys.stderr)
    try:
        summary = replay(settings, args.input, args.output, counts=args.counts, strict=args.strict,
                         block_size=args.block_size,
                         progress={"auto": None, "on": True, "off": False}[getattr(args, "progress", "off")])
    except (CsvError, ReplayError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    except OSError as exc:
        _err(f"cannot write {args.output}: {exc.strerror or exc}")
        return EXIT_USAGE
    except (StateError, ConfigurationError, HistogramError) as exc:
        _err(f"the release path stopped: {exc}")
        return EXIT_FAILURE
    for line in summary.lines():
        print(line, file=sys.stderr)
    if args.summary_json:
        text = json.dumps(summary.to_json(), indent=2, sort_keys=True)
        if args.summary_json == "-":
            print(text)
        else:
            try:
                with open(args.summary_json, "w", encoding="utf-8") as fh:
                    fh.write(text + "\n")
            except OSError as exc:
                _err(f"cannot write {args.summary_json}: {exc.strerror or exc}")
                return EXIT_USAGE
    return EXIT_OK
