"""Partitions of the budget levels: privacy-aware (thesis Alg. 10) and utility-based (Alg. 11).

Both work on the *public* budget levels and their public head counts only
(:class:`~histogram.personalized.budgets.BudgetLevels`), never on the data:
a partition is a public plan, so choosing it costs no privacy (thesis §5.2).
A partition groups *contiguous* levels in ascending order (the thesis sorts
the budget vector and cuts it); each group is later released at its
smallest ε.

Planning uses floats (it is a public optimisation: a worse plan is less
accurate, never less private); the ε each group is released at stays exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from histogram.errors import MechanismError
from histogram.personalized.budgets import BudgetLevels

__all__ = [
    "BudgetPartition",
    "CountUtility",
    "privacy_aware_partition",
    "utility_based_partition",
    "waste",
]


@dataclass(frozen=True)
class BudgetPartition:
    """Contiguous groups of budget levels: group ``g`` holds levels ``starts[g] … starts[g+1]−1``."""

    levels: BudgetLevels
    starts: tuple[int, ...]

    def __post_init__(self) -> None:
        s = tuple(int(x) for x in self.starts)
        if (
            not s
            or s[0] != 0
            or any(b <= a for a, b in zip(s, s[1:], strict=False))
            or s[-1] >= self.levels.size
        ):
            raise MechanismError(
                f"partition starts {s} must begin at 0 and ascend strictly below {self.levels.size}"
            )
        object.__setattr__(self, "starts", s)

    @property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        bounds = (*self.starts, self.levels.size)
        return tuple(tuple(range(bounds[g], bounds[g + 1])) for g in range(len(self.starts)))

    @property
    def epsilons(self) -> tuple[Fraction, ...]:
        """Each group's release ε: its smallest budget (exact)."""
        return tuple(self.levels.epsilons[s] for s in self.starts)

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(sum(self.levels.counts[i] for i in g) for g in self.groups)


def _dlap_variance(eps: np.ndarray) -> np.ndarray:
    """Variance of discrete Laplace noise of scale 1/ε: ``2a/(1−a)²`` with ``a = e^{−ε}``."""
    a = np.exp(-eps)
    return 2 * a / (1 - a) ** 2


@dataclass(frozen=True)
class CountUtility:
    """Public utility of one group of ``n`` persons released at ε, for count/range queries.

    ``U(n, ε) = 1 / (query_bins · Var_DLap(1/ε) / n² + sampling_variance / n)``: the
    precision (inverse variance) of the group's estimate of a query's relative
    frequency, from its noise (``query_bins`` noisy counts summed, divided by
    ``n``) and from the group being a sample of the population (``f(1−f)/n``
    for a query of relative frequency ``f``: give a public prior, 0 to ignore).
    With ``sampling_variance = 0`` this is the thesis's ``(nε)²`` utility up to
    a constant. Groups are combined with weights proportional to ``U``.
    """

    query_bins: float = 1.0
    sampling_variance: float = 0.0

    def __post_init__(self) -> None:
        if not self.query_bins > 0 or not self.sampling_variance >= 0:
            raise MechanismError("CountUtility needs query_bins > 0 and sampling_variance >= 0")

    def __call__(self, n: np.ndarray, eps: np.ndarray) -> np.ndarray:
        n = np.asarray(n, dtype=np.float64)
        eps = np.asarray(eps, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            u = 1.0 / (self.query_bins * _dlap_variance(eps) / n**2 + self.sampling_variance / n)
        return np.where(n > 0, u, 0.0)


def _prefix(levels: BudgetLevels) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    eps = np.array([float(e) for e in levels.epsilons])
    cnt = np.array(levels.counts, dtype=np.float64)
    c = np.concatenate([[0.0], np.cumsum(cnt)])
    s1 = np.concatenate([[0.0], np.cumsum(cnt * eps)])
    s2 = np.concatenate([[0.0], np.cumsum(cnt * eps**2)])
    return eps, c, s1, s2


class _Segments:
    """Statistics of the groups ``s … e−1`` ending at ``e``, one column at a time (O(L) memory)."""

    def __init__(self, levels: BudgetLevels) -> None:
        self.eps, self.c, self.s1, self.s2 = _prefix(levels)

    def column(self, e: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(n, W, m)`` for the groups ``s … e−1``, ``s = 0 … e−1``: size, waste, smallest ε."""
        m = self.eps[:e]
        n = self.c[e] - self.c[:e]
        w = (self.s2[e] - self.s2[:e]) - 2 * m * (self.s1[e] - self.s1[:e]) + m**2 * n
        return n, np.maximum(w, 0.0), m


def waste(partition: BudgetPartition) -> float:
    """Thesis Def. 5.2.2: ``Σ_groups Σ_persons (ε_i − min_group)²`` over the public head counts."""
    total = 0.0
    for g, eps in zip(partition.groups, partition.epsilons, strict=True):
        for i in g:
            total += (
                partition.levels.counts[i] * (float(partition.levels.epsilons[i]) - float(eps)) ** 2
            )
    return total


def _from_cuts(levels: BudgetLevels, back: list[np.ndarray], end: int) -> BudgetPartition:
    starts = []
    e = end
    for k in range(len(back) - 1, -1, -1):
        s = int(back[k][e])
        starts.append(s)
        e = s
    return BudgetPartition(levels, tuple(sorted(starts)))


def privacy_aware_partition(levels: BudgetLevels, min_size: int) -> BudgetPartition:
    """Thesis Alg. 10 for every k, with k chosen by eq. (5.2.3).

    For each ``k = 1 … ⌊total/min_size⌋`` the k-partition minimising the waste
    ``W`` (groups of at least ``min_size`` registered persons) is found by
    dynamic programming; the k minimising ``Σ_g W_g / n_g`` is returned
    (ties: fewer groups).

    Raises:
        MechanismError: if ``min_size < 1`` or no group can reach ``min_size``.
    """
    if min_size < 1:
        raise MechanismError(f"min_size must be >= 1, got {min_size}")
    seg = _Segments(levels)
    L = levels.size
    kmax = max(1, min(L, levels.total // min_size))
    prev = np.full(L + 1, np.inf)
    prev[0] = 0.0
    prev_scaled = np.full(L + 1, np.inf)
    prev_scaled[0] = 0.0
    back: list[np.ndarray] = []
    best: tuple[float, BudgetPartition] | None = None
    for _k in range(kmax):
        cur = np.full(L + 1, np.inf)
        cur_scaled = np.full(L + 1, np.inf)
        arg = np.zeros(L + 1, dtype=np.int64)
        for e in range(1, L + 1):
            n, w, _ = seg.column(e)  # recomputed per k: O(L) memory, not O(L²)
            row = prev[:e] + np.where(n >= min_size, w, np.inf)
            i = int(np.argmin(row))
            cur[e], arg[e] = row[i], i
            cur_scaled[e] = prev_scaled[i] + (w[i] / max(n[i], 1.0) if n[i] >= min_size else np.inf)
        back.append(arg)
        prev, prev_scaled = cur, cur_scaled
        if math.isfinite(cur[L]):
            objective = float(cur_scaled[L])
            if best is None or objective < best[0] - 1e-15:
                best = (objective, _from_cuts(levels, back, L))
    if best is None:
        raise MechanismError(
            f"no group of budget levels reaches min_size={min_size} registered persons (total {levels.total}); "
            "lower min_size"
        )
    return best[1]


def utility_based_partition(
    levels: BudgetLevels, utility: CountUtility, min_size: int = 1
) -> BudgetPartition:
    """Thesis Alg. 11 with eq. (5.2.6): the partition maximising ``Σ_g U(n_g, min ε_g)`` over all k.

    Groups must hold at least ``min_size`` registered persons.

    Raises:
        MechanismError: if ``min_size < 1`` or no group can reach ``min_size``.
    """
    if min_size < 1:
        raise MechanismError(f"min_size must be >= 1, got {min_size}")
    seg = _Segments(levels)
    L = levels.size
    best = np.full(L + 1, -np.inf)
    best[0] = 0.0
    arg = np.zeros(L + 1, dtype=np.int64)
    for e in range(1, L + 1):
        n, _, m = seg.column(e)
        row = best[:e] + np.where(n >= min_size, utility(n, m), -np.inf)
        i = int(np.argmax(row))
        best[e], arg[e] = row[i], i
    if not math.isfinite(best[L]):
        raise MechanismError(
            f"no group of budget levels reaches min_size={min_size} registered persons (total {levels.total}); "
            "lower min_size"
        )
    starts, e = [], L
    while e > 0:
        starts.append(int(arg[e]))
        e = int(arg[e])
    return BudgetPartition(levels, tuple(sorted(starts)))
