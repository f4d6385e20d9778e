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

import numpy as np

from histogram.noise import NoiseDrawer

__all__ = ["Draw", "TapeMismatch", "RecordingDrawer", "ReplayDrawer"]

KINDS = ("discrete_laplace", "gumbel", "uniform")


@dataclass(frozen=True)
class Draw:
    """One call on a drawer.

    Attributes:
        kind: ``discrete_laplace``, ``gumbel`` or ``uniform``.
        scale: the discrete Laplace scale as passed (None for the other kinds).
        size: the requested size (None for a scalar discrete Laplace draw).
        values: the values returned, always as a read-only 1-D array
            (int64 for discrete Laplace, float64 otherwise).
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

    def gumbel(self, size: int) -> np.ndarray:
        values = self.inner.gumbel(size)
        self.tape.append(Draw("gumbel", None, int(size), np.asarray(values, dtype=np.float64)))
        return values

    def uniform(self, size: int) -> np.ndarray:
        values = self.inner.uniform(size)
        self.tape.append(Draw("uniform", None, int(size), np.asarray(values, dtype=np.float64)))
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
        if kind == "discrete_laplace" and Fraction(entry.scale) != Fraction(scale):  # type: ignore[arg-type]
            raise TapeMismatch(f"call {self._pos}: discrete Laplace scale {scale} but the tape has {entry.scale}")
        self._pos += 1
        return entry

    def discrete_laplace(self, scale: Fraction, size: int | None = None) -> np.ndarray | int:
        entry = self._next("discrete_laplace", scale, size)
        return int(entry.values[0]) if size is None else entry.values.copy()

    def gumbel(self, size: int) -> np.ndarray:
        return self._next("gumbel", None, int(size)).values.copy()

    def uniform(self, size: int) -> np.ndarray:
        return self._next("uniform", None, int(size)).values.copy()

    def assert_exhausted(self) -> None:
        if self.remaining:
            raise TapeMismatch(f"{self.remaining} recorded call(s) were never replayed")
