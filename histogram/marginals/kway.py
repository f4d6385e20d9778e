"""DP k-way marginals (seed 002, SDS's aggregates) with pure ε-DP discrete Laplace noise.

For a record table over ``m`` attributes (``(n, m)`` integer levels, every
record complete, at most ``c`` records per person per timestep), the release
publishes, for every order ``k = 1 … R`` (``R`` = ``max_order``, SDS's
reporting length) and every set of ``k`` attributes, the full
``Π levels`` contingency table of those attributes, with noise on *every*
cell (also the empty ones, so nothing about which combinations occur leaks;
SDS's fabrication threshold then becomes pure post-processing).

Record sensitivity (SDS §2.2): one record contributes one k-tuple to each of
the ``C(m, k)`` tables of order k, so the L1 sensitivity of all order-k
tables together is ``Δ_k = c·C(m, k)``. Order k gets the share ``ε_k`` of ε
(``shares``, exact, summing to 1) and every cell of order k gets discrete
Laplace noise of scale ``Δ_k/ε_k``: each order is ε_k-DP, the release is
``Σ ε_k = ε``-DP (sequential composition). SDS's Gaussian (ε, δ) calibration
and DP-percentile sensitivity trimming are not used: records here have a
fixed, public number of attributes, so the worst case ``C(m, k)`` is exact.

Post-processing (no privacy cost):

* :func:`make_consistent` — mutual consistency of overlapping marginals
  (Qardaji, Yang & Li, "PriView", SIGMOD 2014, §4.2): for every attribute
  set ``A`` (by increasing size, ∅ first), the inverse-variance weighted mean
  of the projections onto ``A`` of every table containing ``A`` replaces each
  projection, spreading the correction evenly over the cells behind each
  cell of ``A``. Afterwards all tables agree on every shared sub-marginal.
* :meth:`KWayRelease.synthesize` — synthetic records from a Bayesian network
  whose structure is read from the released tables: each attribute is drawn
  given up to ``R − 1`` earlier attributes (chosen greedily by mutual
  information in the noisy 2-way tables) from the released table over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from math import comb

import numpy as np

from histogram.copula.statistics import check_records
from histogram.errors import MechanismError
from histogram.noise import NoiseDrawer
from histogram.records import RecordTable, rows_and_tables

__all__ = ["KWayMarginals", "KWayRelease", "make_consistent"]

Subset = tuple[int, ...]


@dataclass(frozen=True)
class KWayMarginals:
    """All k-way marginals up to ``max_order`` over a fixed public domain.

    Attributes:
        levels: levels per attribute (public).
        max_order: R, the largest marginal order released (1 ≤ R ≤ m).
        shares: ε share of each order 1..R (exact, positive, summing to 1);
            None = equal shares.
        sensitivity: c, records per person per timestep.
    """

    levels: tuple[int, ...]
    max_order: int = 2
    shares: tuple[Fraction, ...] | None = None
    sensitivity: int = 1
    name: str = "kway"

    def __post_init__(self) -> None:
        levels = tuple(int(v) for v in self.levels)
        if not levels or any(v < 1 for v in levels):
            raise MechanismError(f"levels must list at least one attribute with >= 1 level, got {self.levels!r}")
        object.__setattr__(self, "levels", levels)
        r = self.max_order
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= len(levels):
            raise MechanismError(f"max_order must be an integer in 1..{len(levels)} (the number of attributes), got {r!r}")
        if isinstance(self.sensitivity, bool) or not isinstance(self.sensitivity, int) or self.sensitivity < 1:
            raise MechanismError(f"sensitivity must be an integer >= 1, got {self.sensitivity!r}")
        shares = self.shares if self.shares is not None else tuple(Fraction(1, r) for _ in range(r))
        if len(shares) != r or any(not isinstance(s, Fraction | int) or isinstance(s, bool) or s <= 0 for s in shares):
            raise MechanismError(f"shares must be {r} positive exact numbers (one per order), got {self.shares!r}")
        if sum(Fraction(s) for s in shares) != 1:
            raise MechanismError(f"shares must sum to exactly 1, got {sum(Fraction(s) for s in shares)}")
        object.__setattr__(self, "shares", tuple(Fraction(s) for s in shares))

    def subsets(self, order: int) -> tuple[Subset, ...]:
        return tuple(combinations(range(len(self.levels)), order))

    def cells(self) -> int:
        """Number of released cells (public)."""
        return sum(int(np.prod([self.levels[a] for a in s])) for k in range(1, self.max_order + 1) for s in self.subsets(k))

    # -- privacy map -------------------------------------------------------
    def order_sensitivity(self, order: int) -> int:
        """Δ_k = c·C(m, k): L1 change of all order-k tables when one person is added or removed."""
        return self.sensitivity * comb(len(self.levels), order)

    def scale(self, order: int, epsilon: Fraction) -> Fraction:
        """Discrete Laplace scale of every order-k cell: ``Δ_k / (share_k · ε)``."""
        if not isinstance(epsilon, Fraction | int) or isinstance(epsilon, bool) or epsilon <= 0:
            raise MechanismError(f"epsilon must be a positive exact number, got {epsilon!r}")
        assert self.shares is not None
        return Fraction(self.order_sensitivity(order)) / (self.shares[order - 1] * Fraction(epsilon))

    def epsilon(self, epsilon: Fraction) -> Fraction:
        """The ε one release at ``epsilon`` costs (all of it)."""
        assert self.shares is not None
        return sum((s * Fraction(epsilon) for s in self.shares), Fraction(0))

    # -- release -----------------------------------------------------------
    def release(self, records: np.ndarray | RecordTable, epsilon: Fraction, noise: NoiseDrawer, *,
                consistent: bool = True) -> KWayRelease:
        """Noisy tables of every order 1..R (one discrete Laplace draw per order), made consistent."""
        x, table = rows_and_tables(records, self.levels, check_records)
        noisy: dict[Subset, np.ndarray] = {}
        variance: dict[Subset, float] = {}
        for k in range(1, self.max_order + 1):
            subsets = self.subsets(k)
            tables = [table(s) for s in subsets]
            flat = np.concatenate([t.ravel() for t in tables])
            scale = self.scale(k, epsilon)
            drawn = flat + np.asarray(noise.discrete_laplace(scale, flat.size), dtype=np.int64)
            alpha = np.exp(-1.0 / float(scale))
            var = 2 * alpha / (1 - alpha) ** 2  # variance of DLap(scale)
            offset = 0
            for s, t in zip(subsets, tables, strict=True):
                noisy[s] = drawn[offset : offset + t.size].reshape(t.shape)
                variance[s] = var
                offset += t.size
        raw = {s: v.copy() for s, v in noisy.items()}
        for v in raw.values():
            v.setflags(write=False)
        tables = make_consistent({s: v.astype(float) for s, v in noisy.items()}, variance) if consistent else {
            s: v.astype(float) for s, v in noisy.items()}
        for v in tables.values():
            v.setflags(write=False)
        return KWayRelease(self.levels, self.max_order, raw, tables, self.epsilon(epsilon))


def _project(table: np.ndarray, attrs: Subset, onto: Subset) -> np.ndarray:
    axes = tuple(i for i, a in enumerate(attrs) if a not in onto)
    return table.sum(axis=axes) if axes else table


def make_consistent(tables: dict[Subset, np.ndarray], variance: dict[Subset, float]) -> dict[Subset, np.ndarray]:
    """PriView-style mutual consistency (float tables; returns new arrays; ``variance`` = per-cell noise variance)."""
    out = {s: np.array(t, dtype=float) for s, t in tables.items()}
    attrs = sorted({a for s in out for a in s})
    top = max(len(s) for s in out)
    for size in range(0, top):
        for a_set in combinations(attrs, size):
            holders = [s for s in out if set(a_set) <= set(s)]
            if len(holders) < 2:
                continue
            projections, weights = [], []
            for s in holders:
                behind = out[s].size // max(1, int(np.prod([out[s].shape[s.index(a)] for a in a_set])))
                projections.append(_project(out[s], s, a_set))
                weights.append(1.0 / (variance[s] * behind))
            w = np.array(weights) / sum(weights)
            target = sum(wi * p for wi, p in zip(w, projections, strict=True))
            for s, p in zip(holders, projections, strict=True):
                behind = out[s].size // max(1, p.size)
                correction = (target - p) / behind
                shape = [out[s].shape[i] if a in a_set else 1 for i, a in enumerate(s)]
                out[s] = out[s] + np.reshape(correction, shape)
    return out


@dataclass(frozen=True)
class KWayRelease:
    """Released k-way marginals (safe to publish).

    Attributes:
        levels, max_order: the public domain and R.
        noisy: the raw noisy integer tables, keyed by attribute tuple.
        tables: the post-processed (consistent, float) tables.
        epsilon: the ε this release cost.
    """

    levels: tuple[int, ...]
    max_order: int
    noisy: dict[Subset, np.ndarray]
    tables: dict[Subset, np.ndarray]
    epsilon: Fraction

    @property
    def total(self) -> float:
        return float(max(0.0, self.tables[(0,)].sum()))

    def marginal(self, attributes: Subset) -> np.ndarray:
        """The released table over ``attributes`` (any order; axes follow ``attributes``), non-negative."""
        attrs = tuple(int(a) for a in attributes)
        key = tuple(sorted(attrs))
        if key not in self.tables:
            raise MechanismError(f"marginal over {attrs} was not released: at most {self.max_order} attributes")
        t = np.maximum(self.tables[key], 0.0)
        return np.transpose(t, [key.index(a) for a in attrs])

    def range_count(self, lo, hi) -> float:
        """Count in the box ``lo ≤ x ≤ hi`` (inclusive) from the smallest released table covering it."""
        lo = np.asarray(lo).reshape(-1)
        hi = np.asarray(hi).reshape(-1)
        top = np.asarray(self.levels) - 1
        active = tuple(j for j in range(len(self.levels)) if lo[j] > 0 or hi[j] < top[j])
        if len(active) > self.max_order:
            raise MechanismError(f"a box over {len(active)} attributes needs marginals of that order (R={self.max_order})")
        if not active:
            return self.total
        t = self.tables[active]
        box = tuple(slice(int(lo[j]), int(hi[j]) + 1) for j in active)
        return float(t[box].sum())

    def synthesize(self, size: int, noise: NoiseDrawer) -> np.ndarray:
        """``size`` synthetic records from a Bayesian network over the released tables (needs R ≥ 2)."""
        m = len(self.levels)
        if self.max_order < 2 and m > 1:
            raise MechanismError("synthesis needs 2-way marginals: set max_order >= 2")
        mi = np.zeros((m, m))
        for (j, k), t in ((s, t) for s, t in self.tables.items() if len(s) == 2):
            p = np.maximum(t, 0.0)
            p = p / p.sum() if p.sum() > 0 else np.full(p.shape, 1.0 / p.size)
            pj, pk = p.sum(1, keepdims=True), p.sum(0, keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                mi[j, k] = mi[k, j] = float(np.nansum(np.where(p > 0, p * np.log(p / (pj * pk)), 0.0)))
        out = np.zeros((int(size), m), dtype=np.int64)
        done: list[int] = []
        for j in range(m):
            parents = tuple(sorted(sorted(done, key=lambda d: -mi[j, d])[: self.max_order - 1]))
            key = tuple(sorted((*parents, j)))
            t = np.maximum(self.tables[key], 0.0)
            t = np.transpose(t, [key.index(a) for a in (*parents, j)])  # parents first, child last
            cond = t.reshape(-1, self.levels[j]) + 1e-12
            cond = np.cumsum(cond / cond.sum(axis=1, keepdims=True), axis=1)
            row = np.ravel_multi_index(tuple(out[:, p] for p in parents), [self.levels[p] for p in parents]) if parents else np.zeros(size, np.int64)
            u = noise.uniform_int(np.full(int(size), 2**53, dtype=np.int64)) / 2.0**53
            out[:, j] = np.minimum((u[:, None] >= cond[row]).sum(axis=1), self.levels[j] - 1)
            done.append(j)
        return out
