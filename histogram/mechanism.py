"""The interface every release mechanism (LPA, PSD, …) implements.

A mechanism turns the true count vector of one timestep into a noisy one at a
given ε, knows its privacy map (ε ↔ noise scale for its sensitivity) and the
accuracy of each released count. The decision stage and the step function use
only this interface, so mechanisms are interchangeable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

import numpy as np

from histogram.noise import NoiseDrawer

__all__ = ["Mechanism", "NoisyHistogram"]


@dataclass(frozen=True)
class NoisyHistogram:
    """One fresh release of a mechanism.

    Attributes:
        counts: released counts in bin order (int64 for LPA, float64 for
            mechanisms that post-process, such as PSD). Safe to publish.
        epsilon: the ε this release cost under its mechanism's privacy map.
        half_width: per-count accuracy: with probability ``confidence`` (over
            this release's noise) the true count of the timestep the release
            was drawn for lies within ``counts ± half_width``. May be a
            broadcast view when all counts share one width.
        confidence: the probability the half-widths refer to.
        details: mechanism-specific published extras (e.g. PSD's tree).
    """

    counts: np.ndarray
    epsilon: Fraction
    half_width: np.ndarray
    confidence: float
    details: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Mechanism(Protocol):
    """A histogram release mechanism with its privacy map."""

    name: str
    sensitivity: int

    def release(self, counts: np.ndarray, epsilon: Fraction, noise: NoiseDrawer) -> NoisyHistogram:
        """Release ``counts`` with ε-DP for neighbours at L1 distance ``sensitivity``."""
        ...

    def expected_abs_error(self, epsilon: Fraction, bins: int) -> float:
        """Expected absolute error of one released count at this ε (public)."""
        ...
