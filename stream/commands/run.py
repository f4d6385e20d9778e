"""``dpstream run --config C``: the streaming service against any Kafka cluster.

Exit status: 0 stopped cleanly (SIGTERM / Ctrl-C), 2 refused to start
(invalid configuration, configuration drift, lost or inconsistent privacy
journal), 1 a fatal runtime error (Kafka unusable, fenced by another
instance).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

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
    p.add_argument("--config", "-c", required=True, help="YAML configuration file (DPSTREAM_* env vars override)")
    p.add_argument("--max-timesteps", type=int, default=None,
                   help="stop after this many timesteps were released (default: run until stopped)")
    p.set_defaults(func=run, handler=run)
    return p


def run(args: argparse.Namespace) -> int:
    from stream.config import ConfigError, load_settings
    from stream.service.logs import setup_logging
    from stream.service.loop import run_service

    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"dpstream run: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.service.log_level)
    _warn_about_configuration(settings)
    return run_service(settings, max_timesteps=args.max_timesteps)


def _warn_about_configuration(settings: object) -> None:
    """Log what the configuration alone says will go wrong (public information only)."""
    import logging

    from stream.lab.diagnostics import threshold_below_noise_floor
    from stream.service.logs import log

    diagnosis = threshold_below_noise_floor(settings)
    if diagnosis is not None:
        log(logging.getLogger("dpstream.run"), logging.WARNING, diagnosis.message())
