"""One timestep's bounded records as attribute levels: the input of a model release on huge domains.

A model release (DPCopula, k-way marginals: :mod:`histogram.model_release`) reads only
statistics of the records — one-way and two-way tables, k-way tables, rank statistics —
never the full count vector, whose length is the domain's cell count (10⁹ and more for ten
attributes). :class:`RecordTable` carries the records themselves: ``rows[i]`` is one
record's level per attribute, after contribution bounding. Its memory is ``8 · n · m``
bytes whatever the domain's size.

The rows are in increasing order of their row-major cell index, which is the order in which
:func:`histogram.copula.histogram_release.records_of_counts` lists the records of the count
vector they make: a release from the table and a release from the vector read the same rows
in the same order, so with the same noise they publish the same bytes (tested). Raw data:
never published; only the mechanisms' noisy outputs leave the process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from histogram.errors import MechanismError

__all__ = ["RecordTable", "rows_and_tables"]


@dataclass(frozen=True)
class RecordTable:
    """Bounded records of one timestep over a public domain of ``levels`` (never the count vector).

    Attributes:
        levels: levels per attribute (the domain's shape, row-major).
        rows: ``(n, m)`` int64 levels, sorted by row-major cell index, read-only, column-major
            (each attribute's levels are one contiguous column).
    """

    levels: tuple[int, ...]
    rows: np.ndarray
    _tables: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        levels = tuple(int(v) for v in self.levels)
        rows = np.asarray(self.rows)
        if not levels or min(levels) < 1:
            raise MechanismError(f"levels must be one or more positive sizes, got {self.levels!r}")
        if rows.ndim != 2 or rows.shape[1] != len(levels) or rows.dtype.kind not in "iu":
            raise MechanismError(f"rows must be an (n, {len(levels)}) integer table, got {rows.dtype} {rows.shape}")
        if rows.size and ((rows < 0).any() or (rows >= np.asarray(levels)).any()):
            raise MechanismError("a record's level lies outside its attribute's levels")
        if rows.dtype != np.int64:
            rows = rows.astype(np.int64)
        if rows.shape[0] > 1 and not rows.flags.f_contiguous:
            rows = np.asfortranarray(rows)  # column-major: every statistic reads whole columns
        rows.setflags(write=False)
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "rows", rows)

    @classmethod
    def from_cells(cls, cells: np.ndarray, levels: tuple[int, ...]) -> RecordTable:
        """The records of row-major cell indexes ``cells`` (one per record), in cell order."""
        flat = np.sort(np.asarray(cells, dtype=np.int64))
        if flat.size and (flat[0] < 0 or flat[-1] >= _cells(levels)):
            raise MechanismError(f"cell indexes must lie in [0, {_cells(levels)})")
        if not flat.size:
            return cls(tuple(levels), np.zeros((0, len(levels)), dtype=np.int64))
        # one contiguous column per attribute (an (m, n) block seen as (n, m) in column-major order),
        # the digits of the row-major index written in place (4x faster than unravel_index + stack)
        cols = np.empty((len(levels), flat.size), dtype=np.int64)
        rest = flat.copy()
        for j in reversed(range(len(levels))):
            np.divmod(rest, int(levels[j]), out=(rest, cols[j]))
        return cls(tuple(levels), cols.T)

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    @property
    def cells(self) -> int:
        """Cells of the full domain (a Python int: may exceed what any vector could hold)."""
        return _cells(self.levels)

    def table(self, attributes: tuple[int, ...]) -> np.ndarray:
        """The true marginal table over ``attributes`` (increasing indexes), flat row-major, int64,
        read-only. Counted once per table: the decision's view and the mechanism share it."""
        attributes = tuple(int(a) for a in attributes)
        known = self._tables.get(attributes)
        if known is None:
            known = self._from_superset(attributes)
        if known is None:
            known = self._count(attributes)
            known.setflags(write=False)
            self._tables[attributes] = known
        return known

    def _from_superset(self, attributes: tuple[int, ...]) -> np.ndarray | None:
        """The table summed out of a table already counted over more attributes (exact integer
        sums, the same counts as counting the records again, without another pass over them)."""
        if list(attributes) != sorted(set(attributes)):
            return None  # the summed axes keep the wider table's (increasing) order
        for wider, table in self._tables.items():
            if len(wider) > len(attributes) and set(attributes) <= set(wider):
                shaped = table.reshape(tuple(self.levels[a] for a in wider))
                drop = tuple(i for i, a in enumerate(wider) if a not in attributes)
                return np.ascontiguousarray(shaped.sum(axis=drop, dtype=np.int64).ravel())
        return None

    def _count(self, attributes: tuple[int, ...]) -> np.ndarray:
        shape = tuple(self.levels[a] for a in attributes)
        if not self.rows.shape[0]:
            return np.zeros(int(np.prod(shape)), dtype=np.int64)
        key = self.rows[:, attributes[0]]
        for a in attributes[1:]:
            key = key * self.levels[a] + self.rows[:, a]
        return np.bincount(key, minlength=int(np.prod(shape))).astype(np.int64, copy=False)


def rows_and_tables(records: np.ndarray | RecordTable, levels: tuple[int, ...],
                    check: Callable[[np.ndarray, tuple[int, ...]], np.ndarray]
                    ) -> tuple[np.ndarray, Callable[[tuple[int, ...]], np.ndarray]]:
    """A mechanism's input as ``(rows, table)``: the ``(n, m)`` records and a function giving the
    true table over a set of attributes (shaped over their levels). A :class:`RecordTable` counts
    each table once (shared with the decision's view); a plain array is checked with ``check``."""
    if isinstance(records, RecordTable):
        if records.levels != tuple(levels):
            raise MechanismError(f"records over levels {records.levels} for a mechanism over {tuple(levels)}")
        return records.rows, lambda attrs: records.table(attrs).reshape(tuple(levels[a] for a in attrs))
    x = check(records, levels)

    def table(attrs: tuple[int, ...]) -> np.ndarray:
        shape = tuple(levels[a] for a in attrs)
        if not x.shape[0]:
            return np.zeros(shape, dtype=np.int64)
        key = x[:, attrs[0]]
        for a in attrs[1:]:
            key = key * levels[a] + x[:, a]
        return np.bincount(key, minlength=int(np.prod(shape))).astype(np.int64).reshape(shape)

    return x, table


def _cells(levels: tuple[int, ...]) -> int:
    out = 1
    for v in levels:
        out *= int(v)
    return out
