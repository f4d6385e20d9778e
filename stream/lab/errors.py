"""The lab's errors: what cannot run as asked, and input that cannot be read.

Kept apart from the modules that raise them so that the input reader (:mod:`stream.lab.inputs`)
and the evaluation (:mod:`stream.lab.evaluate`) share them without importing each other.
"""

from __future__ import annotations

__all__ = ["EvaluationError", "InputError"]


class EvaluationError(ValueError):
    """The evaluation cannot run as asked; the message says why and what to do."""


class InputError(EvaluationError):
    """The input cannot be read (missing, empty, malformed under ``--strict``, no timesteps)."""
