"""``dpstream check-config --config FILE`` (or ``check-config FILE``): validate a configuration without starting anything.

Reads the file (and the ``DPSTREAM_*`` environment overrides, as ``run``
would), validates every setting and builds the domain and the release
method, then prints one line summarising the stream. No broker is
contacted, no port is opened, no state directory or journal is created.

Exit status: 0 valid; 2 invalid, with one ``dpstream check-config: error:``
line per problem naming the setting, the value and the fix.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from stream.commands import add_config_option, config_path

__all__ = ["register", "run", "check", "summary", "planner_lines"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "check-config",
        help="validate a configuration file without starting anything",
        description="Validate a configuration (the file plus DPSTREAM_* environment overrides) exactly as "
                    "'dpstream run' would, without contacting Kafka, opening a port or creating the state "
                    "directory. Prints a one-line summary when valid (exit 0); one line per problem when not "
                    "(exit 2).",
    )
    add_config_option(p, positional=True)
    p.add_argument("--no-file-checks", dest="check_files", action="store_false",
                   help="do not require the files it names (kafka.ssl_cafile, ...) to exist here: for a "
                        "configuration checked on another machine than the one it runs on")
    p.set_defaults(func=run, handler=run)
    return p


def summary(settings: Any) -> str:
    """One line: stream id, method and mechanism, the privacy promise (ε exact), domain and topics."""
    from stream.config import format_duration

    p, r, k = settings.privacy, settings.release, settings.kafka
    domain = settings.domain()
    shape = "x".join(str(n) for n in domain.shape)
    names = ",".join(a.name for a in settings.schema.attributes)
    if p.unit == "user-level":
        promise = f"user-level ε={p.epsilon} over {p.horizon} timesteps"
    else:
        promise = f"w-event ε={p.epsilon} per {p.w} timesteps"
    if p.personal is not None:  # per-person budgets: the tiers' ε, the default last
        tiers = ", ".join(f"{n}={e}" for n, e in p.personal.tiers.items())
        promise += f", personal {p.personal.mechanism} ({tiers}, default={p.epsilon})"
    return (f"ok: stream {settings.stream.id}: {r.decision} + {r.mechanism}, {promise} (cutoff {p.cutoff}), "
            f"timestep {format_duration(settings.stream.timestep)}, domain {domain.size} bins "
            f"({names}: {shape}), {k.input_topic} -> {k.output_topic}, fingerprint {settings.fingerprint()[:12]}")


def check(path: str, *, check_files: bool = True) -> int:
    """Validate ``path``; print the summary line and return 0, or raise ConfigError (exit 2)."""
    from stream.commands import load_resolved
    from stream.config import ConfigError, missing_files

    settings = load_resolved(path)
    missing = missing_files(settings) if check_files else []
    if check_files and not missing:  # the files exist: are they schemas the decoder can use? (no network)
        from stream.ingest.formats import input_problems

        missing = input_problems(settings)
    if missing:
        raise ConfigError(*missing)
    print(summary(settings), file=sys.stdout)
    for line in planner_lines(settings):  # why decision: auto chose, and what to worry about (public only)
        print(f"dpstream check-config: {line}", file=sys.stderr)
    for line in delay_lines(settings):
        print(f"dpstream check-config: {line}", file=sys.stderr)
    return 0


def delay_lines(settings: Any) -> list[str]:
    """What ``release.delay`` does to publication (none without a delay)."""
    k = settings.release.delay
    if not k:
        return []
    return [f"release.delay {k}: timestep t is published with the release of t + {k} (smoothed with the releases "
            f"up to it, no ε), nothing during the first {k} timesteps, the last {k} together at the stream's end "
            "(--max-timesteps, stream.end); a stop or a crash keeps them for the restart"]


def planner_lines(settings: Any) -> list[str]:
    """The planner's reasons (``decision: auto``) and the configuration's warnings, one per line."""
    from stream.planning.planner import warnings_for

    lines = settings.plan.text().splitlines() if settings.plan is not None else \
        [f"warning: {w}" for w in warnings_for(settings)]
    planner = settings.release.planner
    if planner is not None and planner.online is not None:  # what the stream may switch to, and when
        policy = settings.engine().policy
        lines.append(f"online re-planning (release.planner.online): starts with {policy.labels[policy.start]}; every "
                     f"{planner.online.every} timesteps once {planner.online.min_releases} fresh releases exist, "
                     f"re-plans from the last {planner.timesteps} timesteps of releases among "
                     f"{', '.join(policy.labels)} (release messages keep release.decision: the start method)")
    return lines


def run(args: argparse.Namespace) -> int:
    return check(config_path(args), check_files=args.check_files)
