"""Errors raised by the controller package. Each says what was wrong and what to do."""

from __future__ import annotations

from fractions import Fraction


class ControllerError(Exception):
    """Base class of every error raised by :mod:`controller`."""


class ConfigurationError(ControllerError, ValueError):
    """A privacy or method parameter is invalid. Nothing was released."""


class InsufficientBudgetError(ControllerError):
    """A spend would exceed the budget. Nothing was drawn and nothing charged.

    Attributes:
        remaining: what could still be spent at that timestep.
        requested: what was asked for.
    """

    def __init__(self, remaining: Fraction, requested: Fraction, detail: str = "") -> None:
        self.remaining = remaining
        self.requested = requested
        msg = f"spending ε={requested} would exceed the budget: only ε={remaining} remains"
        super().__init__(f"{msg} ({detail})" if detail else msg)


class StateError(ControllerError, ValueError):
    """A state snapshot is missing, malformed or inconsistent with the configuration.

    The service must stop releasing (fail closed) instead of starting over.
    """
