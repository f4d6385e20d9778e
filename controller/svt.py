"""Calibration of the decision stage: the sparse vector technique (SVT).

DSFT/DSAT compare a noisy distance with a noisy threshold and stop after a
cutoff of positive answers: that is SVT (Lyu, Su & Li, "Understanding the
Sparse Vector Technique for Differential Privacy", PVLDB 10(6), 2017, Alg. 1).
For queries of sensitivity Δ, a budget ε₁ = ε_t + ε_q and at most ``c``
positive answers:

* threshold noise ρ ~ Lap(Δ/ε_t), drawn once per instance;
* query noise ν_i ~ Lap(2cΔ/ε_q) — the factor 2 because distances to the last
  release are not monotonic in the data (one more person can raise one
  distance and lower another); ``Lap(cΔ/ε_q)`` only for monotonic queries;
* only above/below is used; the instance stops after ``c`` positives.

The split ε_t : ε_q defaults to Lyu et al.'s optimum for non-monotonic
queries, 1 : (2c)^{2/3} (their §4.2, "optimizing privacy budget allocation"),
rounded to a rational. ``split="even"`` gives 1:1 (threshold Lap(2Δ/ε₁),
query Lap(4cΔ/ε₁)).

Noise here is *discrete* Laplace on integer distances: the proof only shifts
noise by integer multiples of Δ, where the discrete pmf ratio obeys the same
``exp(|shift|/b)`` bound (``docs/privacy.md`` §2).

This module also derives the ε₁/ε₂ split ``k`` (thesis Theorem 4.3.4) for
our calibration, in count space (where the population size cancels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from controller.errors import ConfigurationError

__all__ = ["SVTCalibration", "lyu_threshold_share", "optimal_decision_share", "rational"]

Split = Literal["lyu", "even"]


def rational(x: float, max_denominator: int = 10_000) -> Fraction:
    """A public real parameter as a nearby Fraction (used for splits, never for data)."""
    return Fraction(repr(float(x))).limit_denominator(max_denominator)


def lyu_threshold_share(cutoff: int, monotonic: bool = False) -> Fraction:
    """ε_t / ε₁ for Lyu et al.'s split ε_t : ε_q = 1 : (2c)^{2/3} (or c^{2/3} if monotonic)."""
    base = cutoff if monotonic else 2 * cutoff
    return rational(1.0 / (1.0 + base ** (2.0 / 3.0)))


@dataclass(frozen=True)
class SVTCalibration:
    """Noise scales of one SVT instance.

    Attributes:
        epsilon: ε₁, the whole instance's cost (threshold and every query).
        cutoff: c, the most positive answers the instance gives.
        sensitivity: Δ of each query (count-space distance: the contribution bound).
        threshold_share: ε_t / ε₁.
        monotonic: whether all queries move the same way between neighbours.
        query_factor: the multiplier of ``cΔ/ε_q`` in the query noise scale
            (2 for non-monotonic queries). Exposed only so the privacy audit
            can build the deliberately broken variants; production code must
            not set it.
    """

    epsilon: Fraction
    cutoff: int
    sensitivity: int = 1
    threshold_share: Fraction = Fraction(1, 2)
    monotonic: bool = False
    query_factor: Fraction | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.epsilon, Fraction | int) or self.epsilon <= 0:
            raise ConfigurationError(f"the decision budget ε₁ must be > 0, got {self.epsilon!r}")
        if self.cutoff < 1:
            raise ConfigurationError(f"SVT cutoff must be >= 1, got {self.cutoff}")
        if self.sensitivity < 1:
            raise ConfigurationError(f"sensitivity must be >= 1, got {self.sensitivity}")
        if not 0 < self.threshold_share < 1:
            raise ConfigurationError(f"threshold share must lie in (0, 1), got {self.threshold_share}")

    @classmethod
    def build(
        cls, epsilon: Fraction, cutoff: int, sensitivity: int = 1, split: Split = "lyu"
    ) -> SVTCalibration:
        if split == "lyu":
            share = lyu_threshold_share(cutoff)
        elif split == "even":
            share = Fraction(1, 2)
        else:
            raise ConfigurationError(f"svt split must be 'lyu' or 'even', got {split!r}")
        return cls(Fraction(epsilon), cutoff, sensitivity, share)

    @property
    def epsilon_threshold(self) -> Fraction:
        return self.epsilon * self.threshold_share

    @property
    def epsilon_queries(self) -> Fraction:
        return self.epsilon - self.epsilon_threshold

    @property
    def threshold_scale(self) -> Fraction:
        """Scale of ρ: Δ/ε_t."""
        return Fraction(self.sensitivity) / self.epsilon_threshold

    @property
    def query_scale(self) -> Fraction:
        """Scale of each ν_i: 2cΔ/ε_q (cΔ/ε_q for monotonic queries)."""
        factor = self.query_factor
        if factor is None:
            factor = Fraction(1) if self.monotonic else Fraction(2)
        return factor * self.cutoff * self.sensitivity / self.epsilon_queries

    def privacy_loss_bound(self) -> Fraction:
        """Lyu et al.'s bound Δ/b_t + 2cΔ/b_q (non-monotonic); equals ε₁ when calibrated."""
        factor = Fraction(1) if self.monotonic else Fraction(2)
        return (
            self.sensitivity / self.threshold_scale
            + factor * self.cutoff * self.sensitivity / self.query_scale
        )


def optimal_decision_share(decision_var: float, publication_var: float) -> float:
    """The k minimising ``A/k² + B/(1-k)²`` (thesis Thm 4.3.4's objective for ε₁ = kε).

    ``A/(kε)²`` is the variance of the decision noise (threshold + query) and
    ``B/((1-k)ε)²`` the variance the publication adds to the next distance.
    Setting the derivative ``-2A/k³ + 2B/(1-k)³`` to zero gives
    ``k = 1 / (1 + (B/A)^{1/3})``.
    """
    if decision_var <= 0 or publication_var <= 0:
        raise ConfigurationError("variances must be positive")
    return 1.0 / (1.0 + (publication_var / decision_var) ** (1.0 / 3.0))


def user_level_k(bins: int, cutoff: int, horizon: int, sensitivity: int, split: Split) -> Fraction:
    """Default ε₁ = kε share for user-level DSFT/DSAT (our Theorem 4.3.4).

    Decision variance at ε₁ = 1 with SVT cutoff c = C - 1:
    ``2(Δ/s)² + 2(2cΔ/(1-s))²`` (threshold and query discrete-Laplace-like
    variances, ``s`` the threshold share); publication variance of the L1
    distance to a release at ε₂ = 1 over ``U`` bins with ``C`` releases:
    ``2·U·(CΔ)²``. In count space neither depends on the population size,
    unlike the thesis's normalised version. Capped at ``1 - C/N`` so that each
    fresh release gets at least the uniform baseline's ε/N (thesis).
    """
    c = max(cutoff - 1, 1)
    s = float(lyu_threshold_share(c) if split == "lyu" else Fraction(1, 2))
    a = 2 * (sensitivity / s) ** 2 + 2 * (2 * c * sensitivity / (1 - s)) ** 2
    b = 2.0 * bins * (cutoff * sensitivity) ** 2
    k = min(optimal_decision_share(a, b), 1.0 - cutoff / horizon)
    k = max(k, 1e-4)
    if not math.isfinite(k) or k <= 0:
        raise ConfigurationError("could not derive k; set release.k explicitly")
    return rational(k)


def w_event_k(bins: int, cutoff: int, w: int, sensitivity: int, split: Split) -> Fraction:
    """Default decision share for w-event DSAT (AboveThreshold instances, c = 1).

    Each window holds at most ``C + 1`` instances of cost ``kε/(C+1)`` and ``C``
    publications of ``(1-k)ε/C``; the same variance balance as
    :func:`user_level_k`, capped at ``1 - C/w``.
    """
    s = float(lyu_threshold_share(1) if split == "lyu" else Fraction(1, 2))
    a = (2 * (sensitivity / s) ** 2 + 2 * (2 * sensitivity / (1 - s)) ** 2) * (cutoff + 1) ** 2
    b = 2.0 * bins * (cutoff * sensitivity) ** 2
    cap = 1.0 - cutoff / w if cutoff < w else 0.5
    k = max(min(optimal_decision_share(a, b), cap), 1e-4)
    return rational(k)
