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

It is sampled with the Gumbel-max trick: ``argmax_s (ε·u(s)/(2Δ) + G_s)`` with
``G_s`` independent standard Gumbel variables is distributed exactly as above
(in real arithmetic). Many cells are handled in one vectorised call: their
candidates are concatenated, one segment per cell.

When one person has records in several cells of the same sub-step, the cells'
utilities move by amounts ``Δ_j`` with ``Σ_j Δ_j ≤ Δ``; each cell's choice
then costs ``ε·Δ_j/Δ`` and together at most ε (parallel composition).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from histogram.errors import MechanismError
from histogram.noise import NoiseDrawer

__all__ = ["median_scores", "exponential_choice", "median_probabilities"]


def median_scores(
    rank: np.ndarray, n: np.ndarray, epsilon: Fraction, sensitivity: int
) -> np.ndarray:
    """Exponential-mechanism log-weights ``ε·u(s)/(2Δ)`` of each candidate (float64)."""
    if epsilon <= 0:
        raise MechanismError(f"the median budget must be > 0, got {epsilon}")
    factor = float(Fraction(epsilon) / (2 * sensitivity))
    util = -np.abs(2 * np.asarray(rank, dtype=np.int64) - np.asarray(n, dtype=np.int64))
    return util.astype(np.float64) * factor


def exponential_choice(scores: np.ndarray, sizes: np.ndarray, noise: NoiseDrawer) -> np.ndarray:
    """Index (within its segment) of the candidate chosen in every segment.

    Args:
        scores: log-weights of all candidates, segment after segment.
        sizes: number of candidates of each segment (all >= 1).
        noise: draws one Gumbel variable per candidate, in order.

    Returns:
        int64 array with one 0-based position per segment; position ``i`` of a
        segment is chosen with probability ``exp(score_i) / Σ_j exp(score_j)``.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.size == 0:
        return np.zeros(0, dtype=np.int64)
    if np.any(sizes < 1):
        raise MechanismError("every segment needs at least one candidate")
    total = int(sizes.sum())
    if scores.shape != (total,):
        raise MechanismError(f"expected {total} scores, got shape {scores.shape}")
    key = scores + noise.gumbel(total)
    starts = np.cumsum(sizes) - sizes
    seg_max = np.maximum.reduceat(key, starts)
    hit = np.flatnonzero(key >= np.repeat(seg_max, sizes))
    seg_of_hit = np.repeat(np.arange(sizes.size), sizes)[hit]
    first = np.ones(hit.size, dtype=bool)
    first[1:] = seg_of_hit[1:] != seg_of_hit[:-1]
    return hit[first] - starts


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
    scores = median_scores(rank, np.full(cand.size, values.size), epsilon, sensitivity)
    w = np.exp(scores - scores.max())
    return w / w.sum()
