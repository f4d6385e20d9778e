"""Exact integer statistics of a record table, the inputs of the DP copula mechanisms.

A *record table* is an ``(n, m)`` integer array: row = one record of the
timestep (after contribution bounding), column ``j`` = the record's level of
attribute ``j`` in ``{0, …, levels[j] − 1}``. Nothing here is private output:
these are the true statistics the mechanisms add noise to.

Kendall's τ is computed from the two-way contingency table of a pair (``O(a·b)``
after an ``O(n)`` count), exactly, in integers: ``S = n_c − n_d``, where a
pair of records is concordant when both attributes order them the same way
strictly, discordant when strictly opposite, and tied (counted in neither)
otherwise (τ-a's numerator).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from histogram.errors import MechanismError

__all__ = ["check_records", "pairs", "marginal_counts", "two_way", "concordance", "median_split_table"]


def check_records(records: np.ndarray, levels: tuple[int, ...]) -> np.ndarray:
    """``records`` as an int64 ``(n, m)`` array, checked against ``levels``.

    Raises:
        MechanismError: wrong shape or dtype, or a level outside its attribute's range.
    """
    x = np.asarray(records)
    m = len(levels)
    if x.ndim != 2 or x.shape[1] != m:
        raise MechanismError(f"records must be an (n, {m}) integer array (one column per attribute), got shape {x.shape}")
    if x.size and x.dtype.kind not in "iu":
        raise MechanismError(f"records must hold integer levels, got dtype {x.dtype}")
    x = x.astype(np.int64, copy=False)
    if x.size:
        top = np.asarray(levels, dtype=np.int64)
        if (x < 0).any() or (x >= top[None, :]).any():
            bad = int(np.flatnonzero(((x < 0) | (x >= top[None, :])).any(axis=0))[0])
            raise MechanismError(
                f"attribute {bad} has a level outside 0..{levels[bad] - 1}: bin records with the public domain first"
            )
    return x


def pairs(m: int) -> tuple[tuple[int, int], ...]:
    """All attribute pairs ``(j, k)``, ``j < k``, in the fixed order every release uses."""
    return tuple(combinations(range(m), 2))


def marginal_counts(x: np.ndarray, levels: tuple[int, ...]) -> list[np.ndarray]:
    """One count vector per attribute (int64, length ``levels[j]``)."""
    return [np.bincount(x[:, j], minlength=levels[j]).astype(np.int64) for j in range(len(levels))]


def two_way(x: np.ndarray, levels: tuple[int, ...], j: int, k: int) -> np.ndarray:
    """The ``levels[j] × levels[k]`` contingency table of attributes ``j`` and ``k``."""
    flat = x[:, j] * levels[k] + x[:, k]
    return np.bincount(flat, minlength=levels[j] * levels[k]).astype(np.int64).reshape(levels[j], levels[k])


def concordance(table: np.ndarray) -> int:
    """``n_c − n_d`` of the records a two-way table counts, exactly (Python int).

    ``n_c = Σ_{i,j} N_ij · #{i' > i, j' > j}`` and ``n_d = Σ_{i,j} N_ij · #{i' > i, j' < j}``.
    """
    n = np.asarray(table, dtype=np.int64)
    a, b = n.shape
    # above[i, j] = Σ_{i' > i} N[i', j]
    above = np.zeros_like(n)
    if a > 1:
        above[:-1] = np.cumsum(n[::-1], axis=0)[::-1][1:]
    right = np.zeros_like(n)  # Σ_{i'>i, j'>j}
    if b > 1:
        right[:, :-1] = np.cumsum(above[:, ::-1], axis=1)[:, ::-1][:, 1:]
    left = np.zeros_like(n)  # Σ_{i'>i, j'<j}
    if b > 1:
        left[:, 1:] = np.cumsum(above, axis=1)[:, :-1]
    return int((n * right).sum()) - int((n * left).sum())


def median_split_table(x: np.ndarray, j: int, k: int, cut_j: int, cut_k: int) -> np.ndarray:
    """2 × 2 counts of (``x_j > cut_j``, ``x_k > cut_k``): row/column 0 = at or below the cut, 1 = above."""
    flat = (x[:, j] > cut_j).astype(np.int64) * 2 + (x[:, k] > cut_k).astype(np.int64)
    return np.bincount(flat, minlength=4).astype(np.int64).reshape(2, 2)
