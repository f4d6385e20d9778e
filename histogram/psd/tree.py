"""Building PSD's noisy tree over a histogram, and turning leaves back into bins.

Nodes are hyper-rectangles of bins, stored level by level as arrays (inclusive
``lo``/``hi`` bin indices per attribute, the index of the parent in the level
above, whether the node is a leaf). Everything is vectorised per level: a
level of a million nodes costs a few numpy passes, never a Python loop over
nodes.

Counts of boxes come from an N-dimensional prefix-sum table of the histogram
(inclusion–exclusion over the ``2^d`` corners), so the input is the count
vector itself, not the records; the work is ``O(bins + nodes·2^d)`` per level.

The true counts never leave this module: a level is recorded with its noisy
counts only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from histogram.errors import MechanismError
from histogram.noise import NoiseDrawer, discrete_laplace_variance
from histogram.psd.budget import PSDBudget, SubStep, TreePlan
from histogram.psd.median import exponential_choice, median_utility

__all__ = [
    "NoisyLevel",
    "PSDTree",
    "build_tree",
    "discrete_laplace_variance",
    "leaf_index_grid",
    "prefix_table",
]


@dataclass(frozen=True)
class NoisyLevel:
    """The nodes at one depth with their noisy counts (safe to publish).

    Attributes:
        lo, hi: ``(d, n)`` inclusive bin bounds of each node (attribute-major).
        parent: ``(n,)`` index of each node's parent in the previous level
            (``-1`` at the root).
        leaf: ``(n,)`` whether the node has no children.
        noisy: ``(n,)`` int64 count plus discrete Laplace noise.
        variance: ``(n,)`` variance of that noise (public: from the scale).
    """

    lo: np.ndarray
    hi: np.ndarray
    parent: np.ndarray
    leaf: np.ndarray
    noisy: np.ndarray
    variance: np.ndarray

    @property
    def size(self) -> int:
        return int(self.parent.size)


def prefix_table(hist: np.ndarray) -> np.ndarray:
    """int64 table ``P`` with ``P[i_1, …, i_d]`` = count of bins ``< i`` on every axis."""
    table = np.zeros(tuple(s + 1 for s in hist.shape), dtype=np.int64)
    table[tuple(slice(1, None) for _ in hist.shape)] = hist
    for axis in range(hist.ndim):
        np.cumsum(table, axis=axis, out=table)
    return table


def _box_sums(table: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Counts of boxes ``[lo, hi]`` (inclusive; ``(d, n)`` arrays) from a prefix table."""
    d = lo.shape[0]
    total = np.zeros(lo.shape[1], dtype=np.int64)
    for corner in itertools.product((0, 1), repeat=d):
        idx = tuple(hi[a] + 1 if bit else lo[a] for a, bit in enumerate(corner))
        if (d - sum(corner)) % 2:
            total -= table[idx]
        else:
            total += table[idx]
    return total


def _left_sums(
    table: np.ndarray, lo: np.ndarray, hi: np.ndarray, axis: int, cut: np.ndarray
) -> np.ndarray:
    """Counts of boxes ``[lo, hi]`` with the upper bound on ``axis`` replaced by ``cut - 1``.

    ``lo``/``hi`` are per-entry (already repeated to the length of ``cut``).
    """
    d = lo.shape[0]
    total = np.zeros(cut.shape[0], dtype=np.int64)
    for corner in itertools.product((0, 1), repeat=d):
        idx = tuple(
            (cut if bit else lo[a]) if a == axis else (hi[a] + 1 if bit else lo[a])
            for a, bit in enumerate(corner)
        )
        if (d - sum(corner)) % 2:
            total -= table[idx]
        else:
            total += table[idx]
    return total


def _private_medians(
    table: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    axis: int,
    epsilon: Fraction,
    sensitivity: int,
    noise: NoiseDrawer,
) -> np.ndarray:
    """Exponential-mechanism split point for each cell (all at least 2 bins wide on ``axis``)."""
    sizes = hi[axis] - lo[axis]  # candidates lo+1 … hi
    total = int(sizes.sum())
    starts = np.cumsum(sizes) - sizes
    offset = np.arange(total, dtype=np.int64) - np.repeat(starts, sizes)
    rep_lo = np.repeat(lo, sizes, axis=1)
    rep_hi = np.repeat(hi, sizes, axis=1)
    cut = rep_lo[axis] + 1 + offset
    rank = _left_sums(table, rep_lo, rep_hi, axis, cut)
    n = np.repeat(_box_sums(table, lo, hi), sizes)
    utility = median_utility(rank, n)
    return lo[axis] + 1 + exponential_choice(utility, sizes, epsilon, sensitivity, noise)


def _split(
    lo: np.ndarray, hi: np.ndarray, origin: np.ndarray, axis: int, cut: np.ndarray, mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split the cells in ``mask`` at ``cut`` (left ``[lo, cut-1]``, right ``[cut, hi]``)."""
    reps = 1 + mask.astype(np.int64)
    new_lo = np.repeat(lo, reps, axis=1)
    new_hi = np.repeat(hi, reps, axis=1)
    left = (np.cumsum(reps) - reps)[mask]
    new_hi[axis, left] = cut - 1
    new_lo[axis, left + 1] = cut
    return new_lo, new_hi, np.repeat(origin, reps)


def _children(
    table: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    steps: tuple[SubStep, ...],
    median_eps: Fraction,
    sensitivity: int,
    noise: NoiseDrawer,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Apply one level's sub-steps to the nodes ``lo``/``hi``; return the children and their parents."""
    origin = np.arange(lo.shape[1], dtype=np.int64)
    for step in steps:
        a = step.attribute
        mask = hi[a] > lo[a]
        if not mask.any():
            continue
        if step.kind == "median":
            cut = _private_medians(
                table, lo[:, mask], hi[:, mask], a, median_eps, sensitivity, noise
            )
        else:
            lo_a = lo[a, mask]
            cut = lo_a + (hi[a, mask] - lo_a + 1) // 2
        lo, hi, origin = _split(lo, hi, origin, a, cut, mask)
    return lo, hi, origin


def build_tree(
    hist: np.ndarray, plan: TreePlan, budget: PSDBudget, sensitivity: int, noise: NoiseDrawer
) -> list[NoisyLevel]:
    """Split recursively, releasing a noisy count of every node.

    Draw order (fixed, so a seeded drawer reproduces a release): for each depth,
    the noisy counts of its inner nodes, then of its leaves, then the proposal
    and acceptance draws of that level's median sub-steps in attribute order.

    Args:
        hist: the histogram as a ``shape``-dimensional int64 array (raw data).
        plan: public tree plan.
        budget: exact ε of each count level and median sub-step.
        sensitivity: Δ, the per-person L1 contribution bound.
        noise: the only source of randomness.
    """
    if hist.shape != plan.shape:
        raise MechanismError(f"histogram shape {hist.shape} does not match the plan {plan.shape}")
    d = hist.ndim
    table = prefix_table(hist)
    shape = np.asarray(plan.shape, dtype=np.int64)
    lo = np.zeros((d, 1), dtype=np.int64)
    hi = (shape - 1)[:, None].copy()
    parent = np.full(1, -1, dtype=np.int64)
    levels: list[NoisyLevel] = []
    delta = Fraction(sensitivity)
    for depth in range(plan.height + 1):
        single = np.all(hi == lo, axis=0)
        leaf = np.ones_like(single) if depth == plan.height else single
        true = _box_sums(table, lo, hi)
        noisy = np.empty_like(true)
        variance = np.empty(true.shape, dtype=np.float64)
        inner_scale = delta / budget.count[depth]
        leaf_scale = delta / budget.leaf(depth)
        for mask, scale in ((~leaf, inner_scale), (leaf, leaf_scale)):
            k = int(mask.sum())
            if k:
                noisy[mask] = true[mask] + noise.discrete_laplace(scale, k)
                variance[mask] = discrete_laplace_variance(scale)
        levels.append(NoisyLevel(lo, hi, parent, leaf, noisy, variance))
        if depth == plan.height or leaf.all():
            break
        inner = np.flatnonzero(~leaf)
        lo, hi, origin = _children(
            table,
            lo[:, inner],
            hi[:, inner],
            plan.levels[depth],
            budget.median_step,
            sensitivity,
            noise,
        )
        parent = inner[origin]
    return levels


def leaf_index_grid(shape: tuple[int, ...], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Flattened (row-major) array giving, for every bin, the index of the leaf box holding it.

    The leaves must partition the domain. Each box adds ``id + 1`` to a
    difference array at its ``2^d`` corners (inclusion–exclusion); prefix sums
    along every axis then give each bin the id of the one box covering it.
    All values are integers below 2^53, so float64 sums are exact.
    """
    d = len(shape)
    ext = tuple(s + 1 for s in shape)
    ids = np.arange(1, lo.shape[0] + 1, dtype=np.float64)
    flat_parts, weight_parts = [], []
    for corner in itertools.product((0, 1), repeat=d):
        idx = tuple(hi[:, a] + 1 if bit else lo[:, a] for a, bit in enumerate(corner))
        flat_parts.append(np.ravel_multi_index(idx, ext))
        weight_parts.append(-ids if sum(corner) % 2 else ids)
    diff = np.bincount(
        np.concatenate(flat_parts), weights=np.concatenate(weight_parts), minlength=math.prod(ext)
    )
    grid = diff.reshape(ext)
    for axis in range(d):
        np.cumsum(grid, axis=axis, out=grid)
    inner = grid[tuple(slice(0, s) for s in shape)]
    leaf_id = inner.astype(np.int64).ravel() - 1
    if leaf_id.size and (leaf_id.min() < 0 or leaf_id.max() >= lo.shape[0]):
        raise MechanismError("internal error: PSD leaves do not partition the domain")
    return leaf_id


@dataclass(frozen=True)
class PSDTree:
    """The released leaves of a PSD tree (post-processed; safe to publish).

    Attributes:
        shape: bins per attribute of the domain.
        lo, hi: ``(L, d)`` inclusive bin bounds of each leaf; the leaves
            partition the domain.
        count: ``(L,)`` released count of each leaf (consistent, non-negative).
        lower, upper: ``(L,)`` interval for each leaf's true count: with
            probability at least ``confidence`` over the count noise, given
            the released splits, the leaf's true count lies in it.
        confidence: the probability of the intervals.
    """

    shape: tuple[int, ...]
    lo: np.ndarray
    hi: np.ndarray
    count: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    confidence: float

    @property
    def volume(self) -> np.ndarray:
        """Number of bins of each leaf."""
        return np.prod(self.hi - self.lo + 1, axis=1)

    def leaf_of_bin(self) -> np.ndarray:
        """Index of the leaf holding each bin (flattened row-major)."""
        return leaf_index_grid(self.shape, self.lo, self.hi)

    def to_bins(self, leaf_of_bin: np.ndarray | None = None) -> np.ndarray:
        """Count vector over the bins: each leaf's count spread evenly over its bins."""
        ids = self.leaf_of_bin() if leaf_of_bin is None else leaf_of_bin
        return (self.count / self.volume)[ids]

    def describe(self) -> dict[str, object]:
        """JSON-ready description of the leaves (attribute-major columns).

        ``leaves.lo[a][i]``/``leaves.hi[a][i]`` are leaf ``i``'s inclusive bin
        range on attribute ``a``; ``count[i]`` its released count and
        ``[lower[i], upper[i]]`` the interval for its true count.
        """
        return {
            "shape": list(self.shape),
            "confidence": self.confidence,
            "leaves": {
                "lo": self.lo.T.tolist(),
                "hi": self.hi.T.tolist(),
                "count": self.count.tolist(),
                "lower": self.lower.tolist(),
                "upper": self.upper.tolist(),
            },
        }

    @classmethod
    def from_description(cls, spec: Mapping[str, Any]) -> PSDTree:
        """Rebuild a tree from :meth:`describe` output (e.g. read back from a release message).

        Raises:
            MechanismError: the description is malformed.
        """
        try:
            leaves = spec["leaves"]
            shape = tuple(int(s) for s in spec["shape"])
            tree = cls(
                shape,
                np.asarray(leaves["lo"], dtype=np.int64).reshape(len(shape), -1).T,
                np.asarray(leaves["hi"], dtype=np.int64).reshape(len(shape), -1).T,
                np.asarray(leaves["count"], dtype=np.float64),
                np.asarray(leaves["lower"], dtype=np.float64),
                np.asarray(leaves["upper"], dtype=np.float64),
                float(spec["confidence"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MechanismError(f"malformed PSD tree description: {exc}") from exc
        n = tree.count.shape[0]
        if not (
            tree.lo.shape[0] == tree.hi.shape[0] == tree.lower.shape[0] == tree.upper.shape[0] == n
        ):
            raise MechanismError("malformed PSD tree description: columns have different lengths")
        return tree
