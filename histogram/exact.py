"""Exact rational parameters.

Privacy parameters (ε, scales, thresholds) are ``fractions.Fraction`` so that
budget sums are exact: ``0.1 + 0.1 + 0.1 <= 0.3`` is False with floats.
A float is accepted only through its shortest decimal representation
(``Fraction(str(x))``), never ``Fraction(x)``, which would keep the binary
rounding error.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from numbers import Rational

__all__ = ["to_fraction", "positive_fraction"]


def to_fraction(value: object, *, name: str = "value") -> Fraction:
    """Convert ``value`` to an exact :class:`~fractions.Fraction`.

    Accepts ints, Fractions, Decimals, decimal strings (``"0.1"``, ``"1/3"``) and
    finite floats (read through ``str``: ``0.1`` becomes exactly 1/10).

    Raises:
        ValueError: for bools, NaN, infinities, and anything unparsable.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got the boolean {value!r}")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
        return Fraction(str(value))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{name} must be finite, got {value!r}")
        return Fraction(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            if "/" in text:
                return Fraction(text)
            dec = Decimal(text)
        except (ValueError, ZeroDivisionError, ArithmeticError) as exc:
            raise ValueError(f"{name} must be a decimal or a fraction like '1/3', got {value!r}") from exc
        if not dec.is_finite():
            raise ValueError(f"{name} must be finite, got {value!r}")
        return Fraction(dec)
    raise ValueError(f"{name} must be a number, got {type(value).__name__} {value!r}")


def positive_fraction(value: object, *, name: str) -> Fraction:
    """Like :func:`to_fraction` but also requires the value to be > 0."""
    frac = to_fraction(value, name=name)
    if frac <= 0:
        raise ValueError(f"{name} must be > 0, got {frac}")
    return frac
