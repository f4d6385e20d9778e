"""The one module that draws randomness for dpstream.

Every noise value, threshold noise and random choice that can influence
released bytes is drawn here. Two sources, one code path:

* :meth:`Randomness.secure` (production): each drawer is an AES-128 counter
  generator (``randomgen.AESCounter``, AES-NI) keyed with 128 fresh bits from
  the operating system's CSPRNG (:func:`secrets.token_bytes`). AES-CTR is a
  cryptographically strong stream; a new key per (stream, timestep, purpose)
  means no state is shared between releases.
* :meth:`Randomness.seeded` (tests and evaluation only): the same generator,
  keyed with SHA-256(seed, stream, timestep, purpose). The same seed gives the
  same noise for the same timestep in any process, so an offline replay and
  the service agree bit for bit. Production configuration refuses it unless
  an explicitly named switch is set (see ``stream.config``).

Integer counts get *discrete* Laplace noise (the two-sided geometric
distribution), ``P(Z = z) ∝ exp(-|z| / b)`` for integers ``z``: there are no
floating-point low bits to leak (Mironov, CCS 2012). It is sampled as the
difference of two geometric variables, each ``floor(b · E)`` with ``E`` a
standard exponential (``P(floor(bE) >= k) = exp(-k/b)`` exactly in real
arithmetic). The exponential is computed in double precision, so the pmf is
only reproduced approximately, and not at all in the far tail;
``docs/privacy.md`` §2.2 states the resulting (ε, δ) claim (δ ≤ m·2⁻⁴⁰ for m
draws) and what backs it.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol, runtime_checkable

import numpy as np
from randomgen import AESCounter

from histogram.errors import NoiseError

__all__ = [
    "NoiseDrawer",
    "GeneratorDrawer",
    "Randomness",
    "discrete_laplace_pmf",
    "discrete_laplace_tail",
    "discrete_laplace_half_width",
    "discrete_laplace_mean_abs",
]


@runtime_checkable
class NoiseDrawer(Protocol):
    """What mechanisms and decision policies draw from.

    All methods consume the drawer's stream in call order, so a step that
    makes the same calls gets the same values from a seeded drawer.
    """

    def discrete_laplace(self, scale: Fraction, size: int | None = None) -> np.ndarray | int:
        """Discrete Laplace noise with ``P(z) ∝ exp(-|z|/scale)``.

        Returns an ``int`` when ``size`` is None, else an int64 array.
        """
        ...

    def gumbel(self, size: int) -> np.ndarray:
        """Standard Gumbel variables (float64), for the exponential mechanism."""
        ...

    def uniform(self, size: int) -> np.ndarray:
        """Uniform variables in the open interval (0, 1) (float64)."""
        ...


def _check_scale(scale: Fraction) -> float:
    if not isinstance(scale, Fraction | int) or isinstance(scale, bool):
        raise NoiseError(f"noise scale must be an exact Fraction, got {type(scale).__name__} {scale!r}")
    if scale <= 0:
        raise NoiseError(f"noise scale must be > 0, got {scale}")
    value = float(scale)
    if not math.isfinite(value):
        raise NoiseError(f"noise scale {scale} is too large to sample")
    return value


class GeneratorDrawer:
    """A :class:`NoiseDrawer` over one AES-CTR keyed generator."""

    __slots__ = ("_gen", "draws")

    def __init__(self, key: int) -> None:
        if not 0 <= key < 2**128:
            raise NoiseError("AES key must be a 128-bit non-negative integer")
        self._gen = np.random.Generator(AESCounter(key=key, counter=0))
        self.draws = 0  # number of values drawn, for accounting checks in tests

    def _exponential(self, n: int) -> np.ndarray:
        return self._gen.standard_exponential(n)

    def discrete_laplace(self, scale: Fraction, size: int | None = None) -> np.ndarray | int:
        b = _check_scale(scale)
        n = 1 if size is None else int(size)
        if n < 0:
            raise NoiseError(f"size must be >= 0, got {size}")
        e = self._exponential(2 * n)
        e *= b
        g = np.floor(e, out=e).astype(np.int64)
        z = g[:n] - g[n:]
        self.draws += n
        return int(z[0]) if size is None else z

    def gumbel(self, size: int) -> np.ndarray:
        self.draws += int(size)
        return self._gen.gumbel(size=int(size))

    def uniform(self, size: int) -> np.ndarray:
        self.draws += int(size)
        u = self._gen.random(int(size))
        # random() is in [0, 1); map 0 (probability 2^-53) into the open interval.
        return np.where(u == 0.0, 2.0**-54, u)


@dataclass(frozen=True)
class Randomness:
    """Factory of per-(stream, timestep, purpose) noise drawers.

    Use :meth:`secure` in production and :meth:`seeded` only when a caller
    explicitly asks for reproducibility (tests, evaluation, replay with
    ``--seed``).
    """

    seed: int | None = None

    @classmethod
    def secure(cls) -> Randomness:
        """Fresh 128-bit keys from the OS CSPRNG for every drawer."""
        return cls(None)

    @classmethod
    def seeded(cls, seed: int) -> Randomness:
        """Reproducible drawers keyed from ``seed``. Never for production releases."""
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise NoiseError(f"seed must be a non-negative integer, got {seed!r}")
        return cls(seed)

    @property
    def reproducible(self) -> bool:
        return self.seed is not None

    def describe(self) -> str:
        return "secure" if self.seed is None else "seeded"

    def drawer(self, stream: str, timestep: int, purpose: str = "release") -> GeneratorDrawer:
        """A drawer for one purpose at one timestep of one stream."""
        if self.seed is None:
            key = int.from_bytes(secrets.token_bytes(16), "little")
        else:
            digest = hashlib.sha256(
                f"dpstream-noise-v1\x00{self.seed}\x00{stream}\x00{int(timestep)}\x00{purpose}".encode()
            ).digest()
            key = int.from_bytes(digest[:16], "little")
        return GeneratorDrawer(key)


# ---------------------------------------------------------------------------
# Closed forms of the discrete Laplace distribution (public maths, no data).


def _alpha(scale: Fraction | float) -> float:
    return math.exp(-1.0 / float(scale))


def discrete_laplace_pmf(z: np.ndarray | int, scale: Fraction | float) -> np.ndarray:
    """``P(Z = z) = (1 - a)/(1 + a) · a^|z|`` with ``a = exp(-1/scale)``."""
    a = _alpha(scale)
    return (1 - a) / (1 + a) * np.power(a, np.abs(np.asarray(z, dtype=np.float64)))


def discrete_laplace_tail(k: int, scale: Fraction | float) -> float:
    """``P(|Z| >= k)``: 1 for k <= 0, else ``2·a^k / (1 + a)``."""
    if k <= 0:
        return 1.0
    a = _alpha(scale)
    return 2.0 * a**k / (1.0 + a)


def discrete_laplace_half_width(scale: Fraction | float, confidence: float) -> int:
    """Smallest integer ``h >= 0`` with ``P(|Z| <= h) >= confidence``.

    This is the accuracy of a count released with discrete Laplace noise of
    this scale: the true count lies within ``released ± h`` with the stated
    probability (over the noise, for that timestep).
    """
    if not 0.0 < confidence < 1.0:
        raise NoiseError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    beta = 1.0 - confidence
    a = _alpha(scale)
    # P(|Z| > h) = P(|Z| >= h+1) = 2a^{h+1}/(1+a) <= beta
    k = math.ceil(math.log(beta * (1.0 + a) / 2.0) / math.log(a)) if a > 0 else 1
    h = max(0, k - 1)
    # guard against rounding in the closed form
    while discrete_laplace_tail(h + 1, scale) > beta:
        h += 1
    while h > 0 and discrete_laplace_tail(h, scale) <= beta:
        h -= 1
    return h


def discrete_laplace_mean_abs(scale: Fraction | float) -> float:
    """``E|Z| = 2a / (1 - a²)``: the expected absolute error of one noisy count."""
    a = _alpha(scale)
    return 2.0 * a / (1.0 - a * a)
