"""Private medians: the exponential mechanism over candidate split points.

A cell covers the inclusive bin range ``[lo, hi]`` on the split attribute
(``hi > lo``). The candidates are the split points ``s ∈ {lo+1, …, hi}``: the
left child gets ``[lo, s-1]``, the right one ``[s, hi]``, so both are
non-empty. With ``r(s)`` the number of records of the cell left of ``s`` and
``n`` the cell's count, the utility is

    u(s) = -|2·r(s) - n|        (0 at an exact median)

Adding or removing one person changes ``n`` by at most Δ (the per-timestep
contribution bound) and every ``r(s)`` by between 0 and the same amount in the
same direction, so ``2r(s) - n`` moves by at most Δ: the sensitivity of ``u``
is Δ. The exponential mechanism picks ``s`` with probability
``∝ exp(ε·u(s) / (2Δ))`` and is ε-DP (McSherry & Talwar, FOCS 2007); this is
the median Cormode et al. found most accurate among those they compared.

It is sampled **exactly**, by rejection: propose a candidate uniformly at
random and accept it with probability ``exp(-ε·(u* - u(s))/(2Δ))``, ``u*``
the cell's best utility, with the exact Bernoulli(exp(-γ)) sampler of
:mod:`histogram.noise` (``γ`` is rational: ε is a Fraction, utilities are
integers). An accepted proposal is ``s`` with probability ``∝ (1/m)·exp(ε·u(s)/(2Δ))``,
exactly the exponential mechanism; no floating-point number is involved.
Proposals are drawn a whole round at a time (as many as the cell has
candidates); the first accepted one in order is the answer, which is the
sequential algorithm batched. The best candidate is accepted with
probability 1, so a round fails with probability at most ``(1 - 1/m)^m < e⁻¹``.
Many cells are handled in one vectorised call: their candidates are
concatenated, one segment per cell.

When one person has records in several cells of the same sub-step, the cells'
utilities move by amounts ``Δ_j`` with ``Σ_j Δ_j ≤ Δ``; each cell's choice
then costs ``ε·Δ_j/Δ`` and together at most ε (parallel composition).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from histogram.errors import MechanismError
from histogram.noise import NoiseDrawer

__all__ = ["median_utility", "exponential_choice", "median_probabilities"]

# ε·(u* - u) numerators must stay exact in int64 (see GeneratorDrawer.bernoulli_exp).
_NUMERATOR_LIMIT = 2**62


def median_utility(rank: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``u(s) = -|2·r(s) - n|`` of each candidate (int64; 0 at an exact median, sensitivity Δ)."""
    return -np.abs(2 * np.asarray(rank, dtype=np.int64) - np.asarray(n, dtype=np.int64))


def exponential_choice(
    utility: np.ndarray, sizes: np.ndarray, epsilon: Fraction, sensitivity: int, noise: NoiseDrawer
) -> np.ndarray:
    """Index (within its segment) of the candidate chosen in every segment, exactly.

    Args:
        utility: integer utilities of all candidates, segment after segment.
        sizes: number of candidates of each segment (all >= 1).
        epsilon: the budget of one choice (exact); sensitivity: Δ of the utility.
        noise: draws the uniform proposals and the exact Bernoulli(exp(-γ)) acceptances.

    Returns:
        int64 array with one 0-based position per segment; position ``i`` of a
        segment is chosen with probability ``exp(ε·u_i/(2Δ)) / Σ_j exp(ε·u_j/(2Δ))``.
    """
    if epsilon <= 0:
        raise MechanismError(f"the median budget must be > 0, got {epsilon}")
    if sensitivity < 1:
        raise MechanismError(f"the utility sensitivity must be >= 1, got {sensitivity}")
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.size == 0:
        return np.zeros(0, dtype=np.int64)
    if np.any(sizes < 1):
        raise MechanismError("every segment needs at least one candidate")
    utility = np.asarray(utility, dtype=np.int64)
    total = int(sizes.sum())
    if utility.shape != (total,):
        raise MechanismError(f"expected {total} utilities, got shape {utility.shape}")
    weight = Fraction(epsilon) / (2 * sensitivity)  # acceptance exp(-weight·deficit)
    starts = np.cumsum(sizes) - sizes
    deficit = np.repeat(np.maximum.reduceat(utility, starts), sizes) - utility
    if deficit.size and int(deficit.max()) >= _NUMERATOR_LIMIT // weight.numerator:
        raise MechanismError(
            f"median utilities too far apart for exact sampling (ε numerator {weight.numerator}); "
            "use a budget with a smaller numerator"
        )
    numerator = deficit * weight.numerator
    choice = np.full(sizes.size, -1, dtype=np.int64)
    active = np.arange(sizes.size)
    while active.size:
        size = sizes[active]
        segment = np.repeat(active, size)
        proposal = noise.uniform_int(np.repeat(size, size))
        accepted = noise.bernoulli_exp(numerator[starts[segment] + proposal], weight.denominator)
        hit = np.flatnonzero(accepted)
        first = hit[np.unique(segment[hit], return_index=True)[1]]
        choice[segment[first]] = proposal[first]
        active = active[choice[active] < 0]
    return choice


def median_probabilities(
    values: np.ndarray, lo: int, hi: int, epsilon: Fraction, sensitivity: int = 1
) -> np.ndarray:
    """Exact distribution of the split point for one cell (public maths, for tests).

    Args:
        values: record positions (bin indices on the split attribute) in the cell.
        lo, hi: the cell's inclusive bin range (``hi > lo``).

    Returns:
        probabilities of ``s = lo+1, …, hi`` (float64, summing to 1).
    """
    values = np.asarray(values, dtype=np.int64)
    cand = np.arange(lo + 1, hi + 1)
    rank = (values[None, :] < cand[:, None]).sum(axis=1)
    scores = median_utility(rank, np.full(cand.size, values.size)) * float(Fraction(epsilon) / (2 * sensitivity))
    w = np.exp(scores - scores.max())
    return w / w.sum()
