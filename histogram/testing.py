"""Test-only noise drawers: record the noise a run draws, replay it later.

:class:`RecordingDrawer` wraps any :class:`~histogram.noise.NoiseDrawer`,
passes every value through unchanged and appends each call (its kind, scale,
requested size and values) to a tape. :class:`ReplayDrawer` plays a tape back
and refuses any call that does not match the next entry, so a replay proves
that a second implementation (the vectorised twins of the privacy audit, an
offline replay) asks for the same noise, at the same scales, in the same
order, as the code that recorded it.

This module is for tests only. Nothing in ``histogram``, ``controller`` or
``stream`` may import it (``tests/histogram/test_noise_sampler.py`` checks): a replayed
tape is predictable noise and must never protect real people.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from histogram.noise import NoiseDrawer

__all__ = ["Draw", "TapeMismatch", "RecordingDrawer", "ReplayDrawer", "ReplayThenFresh"]

KINDS = ("discrete_laplace", "uniform_int", "bernoulli_exp")


@dataclass(frozen=True)
class Draw:
    """One call on a drawer.

    Attributes:
        kind: ``discrete_laplace``, ``uniform_int`` or ``bernoulli_exp``.
        scale: the discrete Laplace scale as passed, the ``bernoulli_exp``
            denominator, None for ``uniform_int``.
        size: the requested size (None for a scalar discrete Laplace draw).
        values: the values returned, always as a read-only 1-D array
            (int64, booleans for ``bernoulli_exp``).
    """

    kind: str
    scale: Fraction | int | None
    size: int | None
    values: np.ndarray

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown draw kind {self.kind!r}")
        arr = np.array(self.values, copy=True).reshape(-1)
        arr.setflags(write=False)
        object.__setattr__(self, "values", arr)

    @property
    def count(self) -> int:
        return int(self.values.size)


class TapeMismatch(AssertionError):
    """A replayed call differs from the recorded one (kind, scale, size) or the tape ran out."""


class RecordingDrawer:
    """A :class:`NoiseDrawer` that records everything its inner drawer returns.

    Attributes:
        inner: the drawer that produces the values.
        tape: the calls so far, in order.
    """

    __slots__ = ("inner", "tape")

    def __init__(self, inner: NoiseDrawer, tape: list[Draw] | None = None) -> None:
        self.inner = inner
        self.tape: list[Draw] = [] if tape is None else tape

    @property
    def draws(self) -> int:
        """Number of values drawn so far."""
        return sum(d.count for d in self.tape)

    def discrete_laplace(self, scale: Fraction, size: int | None = None) -> np.ndarray | int:
        values = self.inner.discrete_laplace(scale, size)
        self.tape.append(Draw("discrete_laplace", scale, size, np.asarray(values, dtype=np.int64)))
        return values

    def uniform_int(self, high: np.ndarray) -> np.ndarray:
        values = self.inner.uniform_int(high)
        self.tape.append(Draw("uniform_int", None, int(np.size(high)), np.asarray(values, dtype=np.int64)))
        return values

    def bernoulli_exp(self, numerator: np.ndarray, denominator: int) -> np.ndarray:
        values = self.inner.bernoulli_exp(numerator, denominator)
        self.tape.append(Draw("bernoulli_exp", int(denominator), int(np.size(numerator)), np.asarray(values, dtype=bool)))
        return values


class ReplayDrawer:
    """A :class:`NoiseDrawer` that returns recorded values, checking every call.

    Each call must match the next :class:`Draw` on the tape in kind, scale
    (exactly, as a rational) and size; otherwise :class:`TapeMismatch` is
    raised. :meth:`assert_exhausted` checks that the whole tape was used.
    """

    __slots__ = ("_tape", "_pos")

    def __init__(self, tape: Iterable[Draw]) -> None:
        self._tape = list(tape)
        self._pos = 0

    @property
    def remaining(self) -> int:
        """Calls left on the tape."""
        return len(self._tape) - self._pos

    @property
    def draws(self) -> int:
        """Number of values replayed so far."""
        return sum(d.count for d in self._tape[: self._pos])

    def _next(self, kind: str, scale: Fraction | None, size: int | None) -> Draw:
        if self._pos >= len(self._tape):
            raise TapeMismatch(f"tape exhausted: {kind}(scale={scale}, size={size}) was not recorded")
        entry = self._tape[self._pos]
        if entry.kind != kind or entry.size != size:
            raise TapeMismatch(
                f"call {self._pos}: {kind}(size={size}) but the tape has {entry.kind}(size={entry.size})"
            )
        if kind != "uniform_int" and Fraction(entry.scale) != Fraction(scale):  # type: ignore[arg-type]
            raise TapeMismatch(f"call {self._pos}: {kind} scale {scale} but the tape has {entry.scale}")
        self._pos += 1
        return entry

    def discrete_laplace(self, scale: Fraction, size: int | None = None) -> np.ndarray | int:
        entry = self._next("discrete_laplace", scale, size)
        return int(entry.values[0]) if size is None else entry.values.copy()

    def uniform_int(self, high: np.ndarray) -> np.ndarray:
        return self._next("uniform_int", None, int(np.size(high))).values.copy()

    def bernoulli_exp(self, numerator: np.ndarray, denominator: int) -> np.ndarray:
        return self._next("bernoulli_exp", int(denominator), int(np.size(numerator))).values.copy()

    def assert_exhausted(self) -> None:
        if self.remaining:
            raise TapeMismatch(f"{self.remaining} recorded call(s) were never replayed")


class ReplayThenFresh:
    """Replays a tape while the calls match it (as :class:`ReplayDrawer`), then draws from
    ``fallback``: a neighbouring run on D′ shares D's noise until it calls differently.

    ``mismatch`` is None while every call matched, else where the first one differed;
    :meth:`finish` also reports recorded calls that were never made.
    """

    def __init__(self, tape: Iterable[Draw], fallback: Any) -> None:
        self.replay, self.fallback = ReplayDrawer(tape), fallback
        self.mismatch: str | None = None

    def _call(self, name: str, *args: Any) -> Any:
        if self.mismatch is None:
            try:
                return getattr(self.replay, name)(*args)
            except TapeMismatch as exc:
                self.mismatch = str(exc)
        return getattr(self.fallback, name)(*args)

    def discrete_laplace(self, scale: Fraction, size: int | None = None) -> np.ndarray | int:
        return self._call("discrete_laplace", scale, size)

    def uniform_int(self, high: np.ndarray) -> np.ndarray:
        return self._call("uniform_int", high)

    def bernoulli_exp(self, numerator: np.ndarray, denominator: int) -> np.ndarray:
        return self._call("bernoulli_exp", numerator, denominator)

    def finish(self) -> str | None:
        """The first difference from the tape, including recorded calls never made (None: none)."""
        if self.mismatch is None and self.replay.remaining:
            self.mismatch = f"{self.replay.remaining} recorded calls not made"
        return self.mismatch
