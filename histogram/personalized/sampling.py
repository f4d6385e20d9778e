"""Exact Bernoulli((e^a − 1)/(e^t − 1)) draws for Jorgensen et al.'s Sampling mechanism.

The Sampling mechanism keeps a person with budget ``a < t`` with probability
``p(a, t) = (e^a − 1)/(e^t − 1)``, irrational for every rational ``0 < a < t``.
A float coin ``random() < p`` would make the personal guarantee an estimate
(and leak through rounding); here it is drawn **exactly** from the project's
two exact primitives (:meth:`histogram.noise.NoiseDrawer.uniform_int` and
:meth:`~histogram.noise.NoiseDrawer.bernoulli_exp`).

Construction (proved in ``docs/privacy.md`` §12.3). Put ``a = A/D`` and
``t = T/D`` over a common denominator ``D``. Repeat: draw ``J`` uniform on
``{0, …, T−1}`` and accept it with probability ``exp(−(T − 1 − J)/D)``. The
accepted ``J`` has ``P(J = j) ∝ r^j`` with ``r = e^{1/D}``, so

    P(J < A) = (r^A − 1)/(r^T − 1) = (e^a − 1)/(e^t − 1)  exactly.

The person is kept iff ``J < A``. Each round accepts with probability at
least ``(1 − e^{−t})/t`` (≥ 0.63 for t ≤ 1), so few rounds are needed; the
rounds are internal and never published.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from histogram.errors import MechanismError
from histogram.noise import NoiseDrawer

__all__ = ["inclusion_probability", "sample_inclusion", "InclusionSampler", "MAX_DENOMINATOR"]

# bernoulli_exp takes denominators below 2**40; T = t·D must stay far below 2**62 for int64.
MAX_DENOMINATOR = 2**40


def inclusion_probability(a: Fraction, t: Fraction) -> float:
    """``p(a, t)`` as a float, for *planning and estimation only* (never to draw a coin)."""
    if a >= t:
        return 1.0
    return math.expm1(float(a)) / math.expm1(float(t))


def _common_denominator(values: list[Fraction]) -> int:
    d = 1
    for v in values:
        d = d * v.denominator // math.gcd(d, v.denominator)
    return d


def sample_inclusion(
    budgets: np.ndarray, levels: tuple[Fraction, ...], t: Fraction, noise: NoiseDrawer
) -> np.ndarray:
    """One independent exact coin per person: True (kept) with probability ``p(ε_i, t)``.

    Args:
        budgets: int64 level index of each person (into ``levels``).
        levels: the distinct budgets (exact Fractions, > 0).
        t: the threshold ε_t (> 0); persons with ``ε_i >= t`` are always kept.
        noise: the drawer (CSPRNG by default, seeded when the caller asked).

    Raises:
        MechanismError: if the common denominator of ``t`` and the budgets
            below it is 2⁴⁰ or more (round the public budgets to a coarser
            grid, e.g. 1/10000, downwards so no one gets more than they chose).
    """
    return InclusionSampler.build(levels, t).draw(budgets, noise)


@dataclass(frozen=True)
class InclusionSampler:
    """:func:`sample_inclusion` with the exact arithmetic on the public levels done once.

    ``draw`` consumes exactly the draws :func:`sample_inclusion` does (it is the same code), so a
    caller that draws one person at a time (the stream's per-person coins) pays the Fraction
    work once per stream instead of once per person.

    Attributes:
        numer: per level, ``A = ε·D`` for levels below ``t``, else ``T`` (always kept).
        big_t: ``T = t·D``.
        denominator: ``D``, the common denominator of ``t`` and the budgets below it.
    """

    numer: np.ndarray
    big_t: int
    denominator: int

    @classmethod
    def build(cls, levels: tuple[Fraction, ...], t: Fraction) -> InclusionSampler:
        t = Fraction(t)
        if t <= 0:
            raise MechanismError(f"sampling threshold must be > 0, got {t}")
        below = [Fraction(e) for e in levels if Fraction(e) < t]
        if not below:  # everyone is kept: no coin is ever drawn
            return cls(np.full(len(levels), 1, dtype=np.int64), 1, 1)
        d = _common_denominator([*below, t])
        if d >= MAX_DENOMINATOR:
            raise MechanismError(
                f"budgets below the threshold and the threshold {t} need a common denominator {d} >= 2**40 to be "
                "sampled exactly; round the declared budgets down to a coarser public grid (e.g. 1/10000)"
            )
        big_t = int(t * d)
        # A_i = ε_i·D for levels below t; persons at or above t keep A = T (always kept: J < T).
        numer = np.array(
            [int(Fraction(e) * d) if Fraction(e) < t else big_t for e in levels], dtype=np.int64
        )
        numer.setflags(write=False)
        return cls(numer, big_t, d)

    def draw(self, budgets: np.ndarray, noise: NoiseDrawer) -> np.ndarray:
        """Kept (True) or not, one exact coin per entry of ``budgets`` (level indices)."""
        idx = np.asarray(budgets, dtype=np.int64).reshape(-1)
        kept = np.ones(idx.size, dtype=bool)
        if idx.size == 0:
            return kept
        big_t, d = self.big_t, self.denominator
        a = self.numer[idx]
        pending = np.flatnonzero(a < big_t)
        while pending.size:
            j = noise.uniform_int(np.full(pending.size, big_t, dtype=np.int64))
            accepted = noise.bernoulli_exp(big_t - 1 - j, d)
            done = pending[accepted]
            kept[done] = j[accepted] < a[done]
            pending = pending[~accepted]
        return kept
