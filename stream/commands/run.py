"""``dpstream run --config C``: the streaming service against any Kafka cluster.

Exit status: 0 stopped cleanly (SIGTERM / Ctrl-C), 2 refused to start
(invalid configuration, configuration drift, lost or inconsistent privacy
journal), 1 a fatal runtime error (Kafka unusable, fenced by another
instance).
"""

from __future__ import annotations

import argparse
from typing import Any

from stream.commands import add_config_option, positive_int

__all__ = ["register", "run"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "run",
        help="run the streaming service (consume events, publish DP releases on Kafka)",
        description=(
            "Consume events from kafka.input_topic, window them by event time, release one differentially "
            "private histogram per timestep on kafka.output_topic (Kafka transactions + a fsync'd privacy "
            "journal in service.state_dir), dead letters and late events on their topics. Serves /metrics, "
            "/healthz and /readyz on service.http_host:service.http_port, and with service.public_port the "
            "live page and release API for dashboard users (docs/api.md). Stops on SIGTERM or Ctrl-C."
        ),
    )
    add_config_option(p)
    p.add_argument("--max-timesteps", type=positive_int, default=None, metavar="K",
                   help="release timesteps 0..K-1 (never more, however many are complete), commit and exit 0 "
                        "(default: run until stopped; see also stream.end)")
    p.add_argument("--check", action="store_true",
                   help="only validate the configuration (as 'dpstream check-config'): start nothing, exit 0 "
                        "when valid, 2 with one line per problem when not")
    p.set_defaults(func=run, handler=run)
    return p


def run(args: argparse.Namespace) -> int:
    from stream.config import ConfigError, missing_files

    if getattr(args, "check", False):  # programmatic callers (tests) pass a Namespace without it
        from stream.commands.check_config import check

        return check(args.config, check_files=True)
    from stream.commands import load_resolved

    settings = load_resolved(args.config)  # ConfigError: one line per problem, exit 2 (cli.main)
    missing = missing_files(settings)
    if not missing:  # the files exist: are they schemas the decoder can use? (no network)
        from stream.ingest.formats import input_problems

        missing = input_problems(settings)
    if missing:
        raise ConfigError(*missing)
    from stream.service.launcher import run_service
    from stream.service.logs import setup_logging

    setup_logging(settings.service.log_level)

    # Warn only once nothing can stop the start any more (the HTTP and public ports bound, the state
    # directory and journal opened, the Kafka clients up): a fatal start-up error (a port in use, a
    # refused journal) then comes alone, not after warnings about a service that never ran.
    def started(_service: Any, _server: Any) -> None:
        _warn_about_configuration(settings)

    return run_service(settings, max_timesteps=args.max_timesteps, on_started=started)


def _warn_about_configuration(settings: object) -> None:
    """Log what the configuration alone says will go wrong (public information only)."""
    import logging

    from stream.planning.planner import warnings_for
    from stream.service.logs import log

    logger = logging.getLogger("dpstream.run")
    plan = getattr(settings, "plan", None)
    if plan is not None:  # decision: auto: why this method (public information only)
        for line in plan.reasons:
            log(logger, logging.INFO, line)
    for line in (plan.warnings if plan is not None else warnings_for(settings)):
        log(logger, logging.WARNING, line)
