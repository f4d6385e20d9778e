"""Declared queries: named product-set counts answered from a release, with their accuracy.

A monitoring team watches a few counts ("admissions with syndrome flu in region north"), not a
histogram. A declared query names, per attribute, the set of levels it keeps (a range of bins,
a set of categorical values; every level when the attribute is not named); its answer is the
number of records in that product set, computed from what a release published (post-processing:
no privacy cost, never a true count).

Accuracy of the answer, from public facts only (the release's ε and the public sensitivity):
when every bin carries independent discrete Laplace noise of scale ``b`` (LPA, counts published
as drawn), the answer over ``k`` bins has noise ``S = Z_1 + … + Z_k`` with known variance
``k · 2a/(1-a)²`` (``a = e^{-1/b}``), and :func:`sum_half_width` gives an ``h`` with
``P(|S| <= h) >= confidence``: the exact discrete Laplace interval for ``k = 1``, else the
smaller of Chebyshev's and a Chernoff bound on the discrete Laplace moment generating function.
Both are valid bounds (never an approximation), so the interval is conservative. For other
releases (PSD's tree, a model, smoothed counts) no interval is claimed (``None``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from histogram.errors import MechanismError
from histogram.noise import discrete_laplace_half_width, discrete_laplace_variance

__all__ = ["DeclaredQuery", "discrete_laplace_variance", "sum_half_width", "answer_counts", "runs"]


@dataclass(frozen=True)
class DeclaredQuery:
    """One declared query: ``levels[j]`` are the kept level indexes of attribute ``j`` (sorted, distinct).

    Attributes:
        name: the query's public name (a metric label value: bounded, from configuration).
        levels: per attribute of the domain (row-major order), the kept levels.
        shape: the domain's levels per attribute.
    """

    name: str
    levels: tuple[tuple[int, ...], ...]
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.levels) != len(self.shape):
            raise MechanismError(f"query {self.name!r}: one level set per attribute ({len(self.shape)}) needed")
        for kept, size in zip(self.levels, self.shape, strict=True):
            if not kept or tuple(sorted(set(kept))) != tuple(kept) or kept[0] < 0 or kept[-1] >= size:
                raise MechanismError(f"query {self.name!r}: each attribute keeps a non-empty sorted set of "
                                     f"distinct levels in 0..size-1")

    @property
    def bins(self) -> int:
        """How many histogram bins the query sums."""
        return int(np.prod([len(k) for k in self.levels]))

    def boxes(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The product set as disjoint boxes of contiguous runs (inclusive ``lo``, ``hi`` per attribute)."""
        out = [(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))]
        for kept in self.levels:
            out = [(np.append(lo, a), np.append(hi, b)) for lo, hi in out for a, b in runs(kept)]
        return out


def runs(levels: Sequence[int]) -> list[tuple[int, int]]:
    """Maximal runs of consecutive integers in sorted ``levels`` as ``(first, last)`` pairs."""
    out: list[tuple[int, int]] = []
    for v in levels:
        if out and v == out[-1][1] + 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


def answer_counts(counts: np.ndarray, query: DeclaredQuery) -> float:
    """The query's answer on a (released) count vector in row-major bin order."""
    c = np.asarray(counts, dtype=np.float64).reshape(query.shape)
    return float(c[np.ix_(*[np.asarray(k) for k in query.levels])].sum())


def _chernoff(scale: float, k: int, beta: float) -> float:
    """Smallest ``t`` with ``2·min_λ e^{-λt} M(λ)^k <= beta`` for the discrete Laplace MGF ``M``."""
    a = math.exp(-1.0 / scale)
    lam = np.linspace(1e-4, -math.log(a), 400, endpoint=False)[1:]
    log_m = 2 * math.log1p(-a) - np.log1p(-a * np.exp(lam)) - np.log1p(-a * np.exp(-lam))
    target = math.log(beta / 2.0)
    # for each λ the bound is satisfied once t >= (k·log M(λ) - target)/λ: take the best λ
    return float(np.min((k * log_m - target) / lam))


def sum_half_width(scale: Fraction | float, bins: int, confidence: float) -> float:
    """Half-width ``h`` with ``P(|Z_1+…+Z_bins| <= h) >= confidence`` for i.i.d. discrete Laplace(scale).

    Raises:
        MechanismError: ``bins < 1`` or a confidence outside (0, 1).
    """
    if bins < 1 or not 0.0 < confidence < 1.0:
        raise MechanismError("a sum half-width needs bins >= 1 and a confidence in (0, 1)")
    if bins == 1:
        return float(discrete_laplace_half_width(scale, confidence))
    beta = 1.0 - confidence
    chebyshev = math.sqrt(bins * discrete_laplace_variance(scale) / beta)
    return min(chebyshev, _chernoff(float(scale), bins, beta))
