"""Box and marginal queries answered from what a release published (post-processing only).

A dashboard asks "how many records in this box of attribute ranges?" or "what is the table of
these two attributes?". On a domain of 10⁹ cells nobody holds the histogram, so the answer
comes from the released model; on a histogram release, from the released counts. Each answerer
here reads only released values (noisy tables, the copula's correlation matrix and DP total, a
synthetic sample drawn from the release): no privacy cost, and it never sees a true count.

* :class:`CountsAnswers` — a histogram release (LPA, PSD): sums of the released counts.
* :class:`CopulaAnswers` — a Gaussian copula: exact model probabilities for boxes over ≤ 2
  constrained attributes, Gauss–Legendre quadrature for 3; wider boxes and marginals over
  more than 2 attributes from the release's synthetic sample, when it carries one.
* :class:`TablesAnswers` — k-way marginals: the smallest released table covering the box's
  attributes; wider ones from the synthetic sample, when the release carries one.

A query that the release cannot answer (a box over more attributes than any released table,
and no synthetic sample) raises :class:`~histogram.errors.MechanismError` saying what to
configure. Every answer says where it came from (:attr:`Answer.source`).

Boxes are inclusive level bounds ``lo[j] ≤ x_j ≤ hi[j]`` per attribute (level indexes of
the public domain, row-major order of attributes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from histogram.copula.model import GaussianCopula
from histogram.errors import MechanismError

__all__ = ["Answer", "CountsAnswers", "CopulaAnswers", "TablesAnswers", "check_box"]

Subset = tuple[int, ...]

#: where an answer comes from when attributes wider than the released tables are taken as independent
INDEPENDENT_SOURCE = "released one-way tables, attributes taken as independent"


@dataclass(frozen=True)
class Answer:
    """A query's answer and where it came from.

    Attributes:
        value: the estimated count (float) or table (array shaped over the attributes' levels).
        source: how it was computed from the release (e.g. ``"released table a×b"``).
    """

    value: float | np.ndarray
    source: str


def check_box(levels: tuple[int, ...], lo, hi) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """``(lo, hi, constrained attributes)`` of a box, checked against ``levels``.

    Raises:
        MechanismError: a bound outside its attribute's levels, or ``lo > hi``.
    """
    lo = np.asarray(lo, dtype=np.int64).reshape(-1)
    hi = np.asarray(hi, dtype=np.int64).reshape(-1)
    top = np.asarray(levels, dtype=np.int64) - 1
    if lo.size != len(levels) or hi.size != len(levels):
        raise MechanismError(f"a box needs a low and a high level for each of the {len(levels)} attributes")
    if (lo < 0).any() or (hi > top).any() or (lo > hi).any():
        raise MechanismError("box bounds must satisfy 0 <= low <= high <= the attribute's last level")
    active = tuple(int(j) for j in np.flatnonzero((lo > 0) | (hi < top)))
    return lo, hi, active


def _check_attrs(levels: tuple[int, ...], attributes) -> Subset:
    attrs = tuple(int(a) for a in attributes)
    if not attrs or len(set(attrs)) != len(attrs) or not all(0 <= a < len(levels) for a in attrs):
        raise MechanismError(f"marginal attributes must be distinct indexes in 0..{len(levels) - 1}")
    return attrs


def _sample_box(sample: np.ndarray, lo: np.ndarray, hi: np.ndarray, active: Subset) -> float:
    inside = np.ones(sample.shape[0], dtype=bool)
    for j in active:
        inside &= (sample[:, j] >= lo[j]) & (sample[:, j] <= hi[j])
    return float(inside.mean()) if sample.shape[0] else 0.0


def _sample_table(sample: np.ndarray, levels: tuple[int, ...], attrs: Subset) -> np.ndarray:
    shape = tuple(levels[a] for a in attrs)
    if not sample.shape[0]:
        return np.zeros(shape)
    key = np.ravel_multi_index(tuple(sample[:, a] for a in attrs), shape)
    return np.bincount(key, minlength=int(np.prod(shape))).reshape(shape) / sample.shape[0]


def _synthetic(sample: np.ndarray | None, levels: tuple[int, ...]) -> np.ndarray | None:
    if sample is None:
        return None
    s = np.asarray(sample, dtype=np.int64)
    if s.ndim != 2 or s.shape[1] != len(levels):
        raise MechanismError(f"a synthetic sample has one column per attribute ({len(levels)}), got shape {s.shape}")
    if s.size and ((s < 0).any() or (s >= np.asarray(levels)).any()):
        raise MechanismError("a synthetic record's level lies outside its attribute's levels")
    return s


def _needs_sample(what: str, order: int, setting: str) -> MechanismError:
    return MechanismError(f"{what} over {order} attributes is not answered by this release: configure "
                          f"{setting} > 0 so that each fresh release carries a synthetic sample to answer it from")


@dataclass(frozen=True)
class CountsAnswers:
    """A histogram release's counts (row-major over ``levels``)."""

    counts: np.ndarray
    levels: tuple[int, ...]

    def __post_init__(self) -> None:
        c = np.asarray(self.counts, dtype=np.float64)
        if c.size != int(np.prod(self.levels)):
            raise MechanismError(f"{c.size} counts for a domain of {int(np.prod(self.levels))} cells")
        object.__setattr__(self, "counts", c.reshape(self.levels))

    def box(self, lo, hi) -> Answer:
        lo, hi, _ = check_box(self.levels, lo, hi)
        cells = tuple(slice(int(a), int(b) + 1) for a, b in zip(lo, hi, strict=True))
        return Answer(float(self.counts[cells].sum()), "released counts")

    def marginal(self, attributes) -> Answer:
        attrs = _check_attrs(self.levels, attributes)
        other = tuple(i for i in range(len(self.levels)) if i not in attrs)
        t = self.counts.sum(axis=other)
        order = sorted(attrs)
        return Answer(np.transpose(t, [order.index(a) for a in attrs]), "released counts")


@dataclass(frozen=True)
class CopulaAnswers:
    """A released Gaussian copula, and its synthetic sample when the release carries one."""

    model: GaussianCopula
    synthetic: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "synthetic", _synthetic(self.synthetic, self.model.levels))

    def box(self, lo, hi) -> Answer:
        levels = self.model.levels
        lo, hi, active = check_box(levels, lo, hi)
        if len(active) <= 2:
            return Answer(self.model.range_count(lo, hi), "copula probability (exact)")
        if len(active) == 3:
            return Answer(self.model.range_count(lo, hi), "copula probability (quadrature)")
        if self.synthetic is None:
            raise _needs_sample("a box", len(active), "release.copula.synthetic_size")
        share = _sample_box(self.synthetic, lo, hi, active)
        return Answer(self.model.total * share, f"synthetic sample of {self.synthetic.shape[0]} records")

    def marginal(self, attributes) -> Answer:
        attrs = _check_attrs(self.model.levels, attributes)
        if len(attrs) <= 2:
            return Answer(self.model.marginal(attrs), "copula probability (exact)")
        if self.synthetic is None:
            raise _needs_sample("a marginal", len(attrs), "release.copula.synthetic_size")
        table = _sample_table(self.synthetic, self.model.levels, attrs) * self.model.total
        return Answer(table, f"synthetic sample of {self.synthetic.shape[0]} records")


@dataclass(frozen=True)
class TablesAnswers:
    """Released marginal tables (k-way marginals), keyed by attribute tuple (increasing).

    ``independent``: a query wider than every released table, with no synthetic sample, is
    answered as if its attributes were independent (the total times the product of the one-way
    shares; :attr:`Answer.source` says so) instead of raising. Off by default: the query API
    asks the operator to configure a sample; the lab's evaluation of R = 1 turns it on.
    """

    levels: tuple[int, ...]
    tables: Mapping[Subset, np.ndarray]
    synthetic: np.ndarray | None = None
    independent: bool = False

    def __post_init__(self) -> None:
        tables = {}
        for key, t in self.tables.items():
            key = tuple(int(a) for a in key)
            arr = np.asarray(t, dtype=np.float64)  # as released: negative cells kept (see box)
            if key != tuple(sorted(set(key))) or arr.size != int(np.prod([self.levels[a] for a in key])):
                raise MechanismError(f"released table over {key} does not fit the domain")
            tables[key] = arr.reshape(tuple(self.levels[a] for a in key))
        if not tables:
            raise MechanismError("a marginals release has at least one table")
        object.__setattr__(self, "tables", tables)
        object.__setattr__(self, "synthetic", _synthetic(self.synthetic, self.levels))

    @property
    def total(self) -> float:
        one_way = [float(t.sum()) for k, t in self.tables.items() if len(k) == 1]
        return max(0.0, float(np.mean(one_way)) if one_way else float(next(iter(self.tables.values())).sum()))

    def _covering(self, attrs: Subset) -> Subset | None:
        need = set(attrs)
        fits = [k for k in self.tables if need <= set(k)]
        return min(fits, key=lambda k: (len(k), k)) if fits else None

    def box(self, lo, hi) -> Answer:
        lo, hi, active = check_box(self.levels, lo, hi)
        if not active:
            return Answer(self.total, "released one-way tables (total)")
        key = self._covering(active)
        if key is not None:
            # the released cells summed as they are (their noise has mean 0), then the answer clamped
            # at 0: clamping each cell first would add the positive part of every empty cell's noise
            cells = tuple(slice(int(lo[a]), int(hi[a]) + 1) for a in key)
            return Answer(max(0.0, float(self.tables[key][cells].sum())), f"released table {'×'.join(map(str, key))}")
        if self.synthetic is None:
            if self.independent and all((a,) in self.tables for a in active):
                share = float(np.prod([self._share(a)[lo[a]:hi[a] + 1].sum() for a in active]))
                return Answer(self.total * share, INDEPENDENT_SOURCE)
            raise _needs_sample("a box", len(active), "release.marginals.synthetic_size")
        share = _sample_box(self.synthetic, lo, hi, active)
        return Answer(self.total * share, f"synthetic sample of {self.synthetic.shape[0]} records")

    def _share(self, a: int) -> np.ndarray:
        """Attribute ``a``'s released one-way table as shares (uniform when it sums to 0)."""
        t = np.maximum(self.tables[(a,)], 0.0)
        total = float(t.sum())
        return t / total if total > 0 else np.full(t.size, 1.0 / t.size)

    def marginal(self, attributes) -> Answer:
        attrs = _check_attrs(self.levels, attributes)
        key = self._covering(attrs)
        if key is not None:
            t = np.maximum(self.tables[key].sum(axis=tuple(i for i, a in enumerate(key) if a not in attrs)), 0.0)
            kept = [a for a in key if a in attrs]
            return Answer(np.transpose(t, [kept.index(a) for a in attrs]), f"released table {'×'.join(map(str, key))}")
        if self.synthetic is None:
            if self.independent and all((a,) in self.tables for a in attrs):
                out = np.asarray(self.total)
                for a in attrs:
                    out = np.multiply.outer(out, self._share(a))
                return Answer(out, INDEPENDENT_SOURCE)
            raise _needs_sample("a marginal", len(attrs), "release.marginals.synthetic_size")
        table = _sample_table(self.synthetic, self.levels, attrs) * self.total
        return Answer(table, f"synthetic sample of {self.synthetic.shape[0]} records")
