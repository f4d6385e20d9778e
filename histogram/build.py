"""Building the true histogram of one timestep, with contribution bounding.

Contribution bounding happens before counting: each person keeps at most one
record per timestep (Δ records with ``per_person = Δ``), so adding or removing a person
changes the histogram of a timestep by at most Δ in L1 norm. The
record kept is chosen deterministically and independently of arrival order:
the one with the smallest ``(order_key, bin index)``, where ``order_key`` is
normally the event time. Replaying the same events in any order gives the same
histogram.

The result is raw data: it must only ever leave the process through a charged
mechanism.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from histogram.domain import Domain
from histogram.errors import DomainError
from histogram.grouping import single_rows

__all__ = ["BuiltHistogram", "build_histogram", "bound_contributions", "count_bins"]


@dataclass(frozen=True)
class BuiltHistogram:
    """The counts of one timestep and what happened to the input rows.

    Attributes:
        counts: int64 vector of length ``domain.size``; raw, private data.
        rows: rows offered.
        rejected: rows that did not fit the domain (out of range with
            ``reject``, unknown categorical value, NaN).
        bounded_out: valid rows dropped because their person already had a
            record in this timestep.
    """

    counts: np.ndarray
    rows: int
    rejected: int
    bounded_out: int

    @property
    def kept(self) -> int:
        return self.rows - self.rejected - self.bounded_out


def count_bins(flat_index: np.ndarray, size: int) -> np.ndarray:
    """Histogram of flattened bin indices (``numpy.bincount``), as int64."""
    if flat_index.size and (flat_index.min() < 0 or flat_index.max() >= size):
        raise DomainError(f"bin indices must lie in [0, {size})")
    return np.bincount(flat_index, minlength=size).astype(np.int64, copy=False)


def _user_codes(user_ids: np.ndarray) -> np.ndarray:
    """Integer codes identifying each row's person (ids themselves when already integers)."""
    if user_ids.dtype.kind in "iu":
        return user_ids.astype(np.int64, copy=False)
    return np.unique(user_ids, return_inverse=True)[1].astype(np.int64, copy=False)


def bound_contributions(
    user_ids: np.ndarray,
    flat_index: np.ndarray,
    order_key: np.ndarray | None = None,
    per_person: int = 1,
) -> np.ndarray:
    """Boolean mask keeping at most ``per_person`` rows per user (vectorised).

    With ``per_person > 1`` the kept rows are each person's ``per_person``
    smallest ``(order_key, flat_index)`` rows (ties broken by input order).
    With ``per_person == 1``: exactly one row per user, as follows.

    The kept row is the one with the smallest ``(order_key, flat_index)``; among
    rows equal on both (same person, same time, same bin — the counts do not
    depend on which) the first in input order. Rows whose person has no other
    row are found by hashing ids (:func:`histogram.grouping.single_rows`) and
    kept; the others get one sort by person, then segment minima
    (``ufunc.reduceat``).
    """
    n = len(user_ids)
    if per_person < 1:
        raise DomainError(f"per_person must be >= 1, got {per_person}")
    if n == 0:
        return np.zeros(0, dtype=bool)
    ids = np.asarray(user_ids)
    # rows that are certainly their person's only row are kept; only the others need grouping
    single = single_rows(ids)
    if single.all():
        return np.ones(n, dtype=bool)
    if single.any():
        rest = np.flatnonzero(~single)
        keep = np.ones(n, dtype=bool)
        keep[rest] = _bound(_user_codes(ids[rest]), np.asarray(flat_index)[rest],
                            None if order_key is None else np.asarray(order_key)[rest], per_person)
        return keep
    return _bound(_user_codes(ids), flat_index, order_key, per_person)


def _bound(codes: np.ndarray, flat_index: np.ndarray, order_key: np.ndarray | None, per_person: int) -> np.ndarray:
    """:func:`bound_contributions` on integer person codes (every row possibly shared)."""
    n = codes.size
    flat_index = np.asarray(flat_index)
    if per_person > 1:
        keys = [np.arange(n), flat_index]
        if order_key is not None:
            keys.append(np.asarray(order_key))
        keys.append(codes)
        order = np.lexsort(keys)  # person, then time, then bin, then input order
        sorted_codes = codes[order]
        boundary = np.empty(n, dtype=bool)
        boundary[0] = True
        np.not_equal(sorted_codes[1:], sorted_codes[:-1], out=boundary[1:])
        starts = np.flatnonzero(boundary)
        rank = np.arange(n) - starts[np.cumsum(boundary) - 1]
        keep = np.zeros(n, dtype=bool)
        keep[order[rank < per_person]] = True
        return keep
    order = np.argsort(codes)
    sorted_codes = codes[order]
    boundary = np.empty(n, dtype=bool)
    boundary[0] = True
    np.not_equal(sorted_codes[1:], sorted_codes[:-1], out=boundary[1:])
    starts = np.flatnonzero(boundary)
    group = np.cumsum(boundary) - 1  # group number of each sorted row
    candidate = np.ones(n, dtype=bool)
    if order_key is not None:
        key = np.asarray(order_key)[order]
        candidate &= key == np.minimum.reduceat(key, starts)[group]
    bins = flat_index[order]
    masked_bins = np.where(candidate, bins, np.iinfo(np.int64).max)
    candidate &= bins == np.minimum.reduceat(masked_bins, starts)[group]
    first = np.minimum.reduceat(np.where(candidate, order, n), starts)
    keep = np.zeros(n, dtype=bool)
    keep[first] = True
    return keep


def build_histogram(
    domain: Domain,
    columns: Mapping[str, Sequence[object] | np.ndarray],
    *,
    user_ids: Sequence[object] | np.ndarray | None = None,
    order_key: Sequence[object] | np.ndarray | None = None,
    codes: bool | Mapping[str, bool] = False,
    per_person: int = 1,
) -> BuiltHistogram:
    """Count the rows of one timestep over ``domain`` (vectorised).

    Args:
        domain: the public domain.
        columns: one column per attribute.
        user_ids: the person of each row; when given, each person contributes
            at most one row (Δ = 1). When ``None`` the caller promises the rows
            are already bounded (one per person).
        order_key: tie-breaker for which row of a person is kept (event time).
        codes: columns hold bin codes instead of raw values (see
            :meth:`Domain.encode`).
        per_person: the contribution bound Δ: rows kept per person.
    """
    enc = domain.encode(columns, codes=codes)
    rows = len(enc.index)
    valid_idx = enc.index[enc.valid]
    rejected = rows - len(valid_idx)
    bounded_out = 0
    if user_ids is not None:
        uids = np.asarray(user_ids)
        if len(uids) != rows:
            raise DomainError(f"user_ids has {len(uids)} rows but the columns have {rows}")
        okey = None if order_key is None else np.asarray(order_key)[enc.valid]
        keep = bound_contributions(uids[enc.valid], valid_idx, okey, per_person)
        bounded_out = int(len(valid_idx) - keep.sum())
        valid_idx = valid_idx[keep]
    return BuiltHistogram(count_bins(valid_idx, domain.size), rows, rejected, bounded_out)
