"""LPA: the Laplace perturbation algorithm, with discrete Laplace noise.

Adds independent discrete Laplace noise of scale ``b = Δ/ε`` to every bin.
Privacy map: for integer count vectors whose L1 distance between neighbours is
at most Δ, the release is ``Δ/b``-DP (the ratio of pmfs at any output is at
most ``exp(|shift|/b)`` summed over bins). With contribution bounding to one
record per person per timestep, Δ = 1 under add/remove-one-person.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from histogram.errors import MechanismError
from histogram.mechanism import NoisyHistogram
from histogram.noise import NoiseDrawer, discrete_laplace_half_width, discrete_laplace_mean_abs

__all__ = ["LaplaceMechanism", "NoisyHistogram"]


@dataclass(frozen=True)
class LaplaceMechanism:
    """Discrete Laplace noise on every bin.

    Attributes:
        sensitivity: L1 sensitivity Δ of the count vector to one person (the
            per-timestep contribution bound; 1 by default).
        confidence: the probability the reported half-widths refer to.
    """

    sensitivity: int = 1
    confidence: float = 0.95
    name: str = "lpa"

    def __post_init__(self) -> None:
        if isinstance(self.sensitivity, bool) or not isinstance(self.sensitivity, int) or self.sensitivity < 1:
            raise MechanismError(f"sensitivity must be an integer >= 1, got {self.sensitivity!r}")
        if not 0.0 < self.confidence < 1.0:
            raise MechanismError(f"confidence must lie in (0, 1), got {self.confidence}")

    # -- privacy map -----------------------------------------------------
    def scale(self, epsilon: Fraction) -> Fraction:
        """Noise scale ``b = Δ/ε`` that makes one release ε-DP."""
        if not isinstance(epsilon, Fraction | int) or epsilon <= 0:
            raise MechanismError(f"epsilon must be a positive Fraction, got {epsilon!r}")
        return Fraction(self.sensitivity) / Fraction(epsilon)

    def scale_in_units(self, units: np.ndarray, unit: Fraction) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`scale` of many ε at once, each ``units[i]·unit``: ``Δ/ε`` as unreduced int64
        pairs ``(Δ·unit.den, units[i]·unit.num)`` (the lab's ledger counts ε in whole units)."""
        units = np.asarray(units, dtype=np.int64)
        return np.full(units.shape, self.sensitivity * unit.denominator, dtype=np.int64), units * unit.numerator

    def epsilon(self, scale: Fraction) -> Fraction:
        """Privacy map: the ε of one release at noise scale ``scale``."""
        if not isinstance(scale, Fraction | int) or scale <= 0:
            raise MechanismError(f"scale must be a positive Fraction, got {scale!r}")
        return Fraction(self.sensitivity) / Fraction(scale)

    # -- accuracy ----------------------------------------------------------
    def half_width(self, epsilon: Fraction) -> int:
        """Half-width of each count's interval at ``self.confidence``."""
        return discrete_laplace_half_width(self.scale(epsilon), self.confidence)

    def expected_abs_error(self, epsilon: Fraction, bins: int = 1) -> float:
        """Expected absolute error of one released count (does not depend on bins)."""
        return discrete_laplace_mean_abs(self.scale(epsilon))

    def expected_abs_error_in_units(self, units: int, unit: Fraction) -> float:
        """:meth:`expected_abs_error` at ε = ``units·unit``, without ``Fraction`` arithmetic: the
        scale read as the correctly rounded float of ``Δ·unit.den / (units·unit.num)``, the same
        float ``float(Δ/ε)`` is, so the result is bit for bit the same."""
        return discrete_laplace_mean_abs(self.sensitivity * unit.denominator / (units * unit.numerator))

    # -- release -------------------------------------------------------------
    def release(self, counts: np.ndarray, epsilon: Fraction, noise: NoiseDrawer) -> NoisyHistogram:
        """Noisy counts: ``counts + DiscreteLaplace(Δ/ε)`` per bin."""
        true = np.asarray(counts)
        if true.ndim != 1 or true.dtype.kind not in "iu":
            raise MechanismError("LPA releases a 1-D integer count vector")
        scale = self.scale(epsilon)
        noisy = true.astype(np.int64) + noise.discrete_laplace(scale, true.size)
        noisy.setflags(write=False)
        width = np.broadcast_to(np.float64(self.half_width(epsilon)), noisy.shape)
        return NoisyHistogram(noisy, Fraction(epsilon), width, self.confidence)
