"""The ``dpstream`` subcommands, one module each.

Each module ``stream/commands/<name>.py`` exposes ``register(subparsers)``,
which adds its parser and sets ``handler`` (a function ``args -> exit
status``) with ``set_defaults``; :data:`stream.commands.cli.COMMAND_MODULES` lists the
modules. Command modules import their heavy dependencies inside the handler
so ``dpstream --help`` stays fast.

Exit status convention: 0 success; 2 bad arguments, configuration or input
(with a one-line message, never a traceback); 1 anything else that stopped
the command (also with a message); 130 interrupted.
"""

from __future__ import annotations

import argparse

__all__ = [
    "CommandError", "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE", "EXIT_INTERRUPTED",
    "positive_int", "non_negative_int", "port_number", "print_error", "load_resolved",
    "add_config_option", "config_path",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CommandError(Exception):
    """A command failed for a reason the user can fix; ``str(exc)`` is the message.

    :func:`stream.commands.cli.main` prints each line of it as ``dpstream <command>: error: <line>``.
    """

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def print_error(command: str, message: object) -> None:
    """Print ``message`` on stderr, one ``dpstream <command>: error: ...`` line per line of it."""
    import sys

    for line in str(message).splitlines() or [""]:
        print(f"dpstream {command}: error: {line}", file=sys.stderr)


def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: a whole number >= 0."""
    return _whole_number(text, 0)


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0..65535 (0: any free port)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a valid port (1-65535, or 0 for any free port)")
    return value


_CONFIG_HELP = "the YAML configuration file (DPSTREAM_* environment variables override its settings)"


def add_config_option(parser: argparse.ArgumentParser, *, positional: bool = False) -> None:
    """``--config FILE`` (short ``-c FILE``): how every command that reads a configuration takes it.

    ``positional``: the command also takes it as its argument, ``FILE`` (``check-config FILE``, its
    original form); exactly one of the two forms, else a one-line usage error (exit 2). Read the
    path with :func:`config_path`.
    """
    if not positional:
        parser.add_argument("--config", "-c", required=True, metavar="FILE", help=_CONFIG_HELP)
        return
    either = parser.add_mutually_exclusive_group(required=True)
    # separate destinations: an absent optional positional would otherwise overwrite --config's value
    either.add_argument("config_file", nargs="?", default=None, metavar="FILE",
                        help=f"{_CONFIG_HELP}; or give it as --config FILE")
    either.add_argument("--config", "-c", default=None, metavar="FILE", help="the same, as for run, replay and evaluate")


def config_path(args: argparse.Namespace) -> str:
    """The configuration file a command was given (``--config FILE``, or ``FILE`` where accepted)."""
    path = getattr(args, "config", None) or getattr(args, "config_file", None)
    if path is None:  # pragma: no cover - argparse requires one of the two
        raise CommandError("no configuration given: pass --config FILE")
    return str(path)


def load_resolved(path: str | None, **overrides: object) -> object:
    """:func:`stream.config.load_settings`, with ``release.decision: auto`` replaced by the planner's
    choice (:func:`stream.planning.planner.resolve`: from the configuration and a declared-public history
    only; the settings' ``plan`` says why). Raises ``ConfigError`` (exit 2) when it cannot plan."""
    from stream.config import ConfigError, load_settings

    settings = load_settings(path, **overrides)
    if settings.release.decision != "auto":
        return settings
    from stream.planning.planner import PlannerError, resolve

    try:
        return resolve(settings)
    except PlannerError as exc:
        raise ConfigError(f"release.decision: auto: {exc}") from None
