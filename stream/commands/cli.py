"""The ``dpstream`` command line: ``dpstream <command> [options]``.

Subcommands live in ``stream/commands/<name>.py`` (see
:mod:`stream.commands`); :data:`COMMAND_MODULES` lists them, in the order
``dpstream --help`` shows them. A listed module that cannot be imported, or
that lacks ``register``, is an error: a command never silently disappears.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import typing
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from stream.commands import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, CommandError, print_error
from stream.service.allocator import tune_allocator

__all__ = ["COMMAND_MODULES", "CommandModuleError", "build_parser", "main"]

COMMAND_MODULES: tuple[str, ...] = ("replay", "generate", "evaluate", "run", "check-config", "broker", "demo")


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one stderr line (exit 2), naming the fix.

    argparse's default prints the whole usage block first; a person (and a log collector) needs the
    one line that says which option was wrong and how to see the right form.
    """

    def error(self, message: str) -> typing.NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


class CommandModuleError(RuntimeError):
    """A module listed in :data:`COMMAND_MODULES` is missing or malformed (a packaging bug)."""


def _load(name: str) -> ModuleType:
    qualified = f"stream.commands.{name.replace('-', '_')}"
    try:
        module = importlib.import_module(qualified)
    except ModuleNotFoundError as exc:
        if exc.name == qualified:
            raise CommandModuleError(
                f"the command {name!r} is listed in stream.commands.cli.COMMAND_MODULES but "
                f"stream/commands/{name.replace('-', '_')}.py "
                "does not exist"
            ) from None
        raise CommandModuleError(f"the command {name!r} cannot be loaded: {exc}") from exc
    except ImportError as exc:
        raise CommandModuleError(f"the command {name!r} cannot be loaded: {exc}") from exc
    if not callable(getattr(module, "register", None)):
        raise CommandModuleError(f"stream/commands/{name}.py has no register(subparsers) function")
    return module


def _installed_version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("dpstream")
        except PackageNotFoundError:
            return "unknown (not installed)"
    except ImportError:  # pragma: no cover
        return "unknown"


class _VersionAction(argparse._VersionAction):
    """``--version``, looking the installed version up only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        self.version = f"dpstream {_installed_version()}"
        super().__call__(parser, namespace, values, option_string)


#: Errors the person can fix (one line each, exit 2), by module and class name. Looked up only once
#: something was raised, in the modules already imported (one never imported raised nothing of its
#: own), so start-up does not import the HTTP server or the broker for their exception classes.
_USER_FIXABLE: tuple[tuple[str, str], ...] = (
    ("stream.config", "ConfigError"),
    ("stream.service.http", "ListenError"),
    ("stream.service.broker", "EmbeddedBrokerMissing"),
)


def _user_fixable(exc: BaseException) -> bool:
    for module, name in _USER_FIXABLE:
        mod = sys.modules.get(module)
        if mod is not None and isinstance(exc, getattr(mod, name)):
            return True
    return False


def build_parser(modules: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser with one subparser per command module.

    Raises:
        CommandModuleError: a listed module is missing or has no ``register``.
    """
    parser = OneLineParser(
        prog="dpstream",
        description="Differentially private histograms of a live population, released on Kafka.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    sub.required = True
    for name in COMMAND_MODULES if modules is None else modules:
        _load(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dpstream``; returns the exit status."""
    try:
        parser = build_parser()
    except CommandModuleError as exc:
        print(f"dpstream: internal error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    args = parser.parse_args(None if argv is None else list(argv))
    handler = getattr(args, "handler", None) or getattr(args, "func", None)
    if handler is None:  # pragma: no cover - every command sets one
        parser.error(f"the command {args.command!r} has no handler")
    tune_allocator()  # numpy temporaries: heap, not fresh page-faulting mappings (stream.service.allocator)

    try:
        status = handler(args)
    except CommandError as exc:
        print_error(args.command, exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"dpstream {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_FAILURE
    except Exception as exc:
        if not _user_fixable(exc):
            raise
        print_error(args.command, exc)  # the person can fix it: one line each, exit 2
        return EXIT_USAGE
    return int(status or 0)


if __name__ == "__main__":
    raise SystemExit(main())
