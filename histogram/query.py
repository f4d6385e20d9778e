"""Range-count queries over a histogram (post-processing; no privacy cost).

A range query gives an inclusive bin interval ``[lo_a, hi_a]`` on every
attribute ``a``; its answer is the sum of the counts in that hyper-rectangle
(the thesis's "Select COUNT(*) Where A1 ∈ I1 and …"). Answers for many queries
are computed at once from an N-dimensional prefix-sum table by
inclusion–exclusion over the ``2^d`` corners.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from histogram.errors import DomainError

__all__ = ["RangeQueries", "random_range_queries", "sized_range_queries", "answer_range_queries"]


@dataclass(frozen=True)
class RangeQueries:
    """``m`` queries as two ``(m, d)`` int arrays of inclusive bin bounds."""

    lo: np.ndarray
    hi: np.ndarray

    def __post_init__(self) -> None:
        if self.lo.shape != self.hi.shape or self.lo.ndim != 2:
            raise DomainError("lo and hi must both have shape (queries, attributes)")
        if np.any(self.lo > self.hi):
            raise DomainError("every query needs lo <= hi on every attribute")

    @property
    def size(self) -> np.ndarray:
        """Number of bins each query covers."""
        return np.prod(self.hi - self.lo + 1, axis=1)


def random_range_queries(shape: tuple[int, ...], m: int, rng: np.random.Generator) -> RangeQueries:
    """``m`` queries, each a uniformly random interval on every attribute.

    ``rng`` is the caller's (evaluation) generator: queries are public workload,
    not noise.
    """
    shape_arr = np.asarray(shape, dtype=np.int64)
    a = rng.integers(0, shape_arr, size=(m, len(shape)))
    b = rng.integers(0, shape_arr, size=(m, len(shape)))
    return RangeQueries(np.minimum(a, b), np.maximum(a, b))


def sized_range_queries(
    shape: tuple[int, ...], size: int, m: int, rng: np.random.Generator
) -> RangeQueries:
    """``m`` random range queries each covering about ``size`` bins.

    Each query's side lengths are drawn so that their product is close to
    ``size``: the dimensions are visited in random order, each takes a side
    length that spreads the remaining log-size over the remaining dimensions
    (with random jitter), capped by the dimension's number of bins; the last
    dimension takes what is left. Positions are uniform where the side fits.

    ``rng`` is the caller's (evaluation) generator: queries are public workload, not noise.
    """
    d = len(shape)
    total = int(np.prod(shape))
    if not 1 <= size <= total:
        raise DomainError(f"query size must lie in [1, {total}], got {size}")
    dims = np.asarray(shape, dtype=np.int64)
    lengths = np.ones((m, d), dtype=np.int64)
    for q in range(m):
        order = rng.permutation(d)
        remaining = float(size)
        for pos, a in enumerate(order):
            left = d - pos
            cap = int(dims[a])
            if left == 1:
                want = remaining
            else:
                share = math.log(max(remaining, 1.0)) / left
                want = math.exp(share * rng.uniform(0.3, 1.7))
            length = int(min(cap, max(1, round(want))))
            lengths[q, a] = length
            remaining = max(1.0, remaining / length)
        # a second pass grows sides to absorb what capped dimensions left over
        for a in rng.permutation(d):
            if remaining <= 1.0:
                break
            grow = min(int(dims[a]) // lengths[q, a], max(1, round(remaining)))
            if grow > 1:
                new = min(int(dims[a]), lengths[q, a] * grow)
                remaining = max(1.0, remaining * lengths[q, a] / new)
                lengths[q, a] = new
    lo = (rng.random((m, d)) * (dims - lengths + 1)).astype(np.int64)
    return RangeQueries(lo, lo + lengths - 1)


def _prefix(hist: np.ndarray) -> np.ndarray:
    table = np.zeros(tuple(s + 1 for s in hist.shape), dtype=np.float64)
    table[tuple(slice(1, None) for _ in hist.shape)] = hist
    for axis in range(hist.ndim):
        np.cumsum(table, axis=axis, out=table)
    return table


def answer_range_queries(counts: np.ndarray, shape: tuple[int, ...], queries: RangeQueries) -> np.ndarray:
    """Answers of all ``queries`` on the flattened histogram ``counts`` (float64).

    ``counts`` may be a ``(T, size)`` stack of histograms; the result is then
    ``(T, m)``.
    """
    counts = np.asarray(counts, dtype=np.float64)
    stacked = counts.ndim == 2
    rows = counts if stacked else counts[None, :]
    d = len(shape)
    if queries.lo.shape[1] != d:
        raise DomainError(f"queries have {queries.lo.shape[1]} attributes, the domain {d}")
    out = np.empty((rows.shape[0], queries.lo.shape[0]), dtype=np.float64)
    corners = list(itertools.product((0, 1), repeat=d))
    for r, row in enumerate(rows):
        table = _prefix(row.reshape(shape))
        total = np.zeros(queries.lo.shape[0], dtype=np.float64)
        for corner in corners:
            idx = tuple(
                np.where(bit, queries.hi[:, a] + 1, queries.lo[:, a]) for a, bit in enumerate(corner)
            )
            sign = -1.0 if (d - sum(corner)) % 2 else 1.0
            total += sign * table[idx]
        out[r] = total
    return out if stacked else out[0]
