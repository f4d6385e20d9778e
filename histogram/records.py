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

from dataclasses import dataclass

import numpy as np

from histogram.errors import MechanismError

__all__ = ["RecordTable"]


@dataclass(frozen=True)
class RecordTable:
    """Bounded records of one timestep over a public domain of ``levels`` (never the count vector).

    Attributes:
        levels: levels per attribute (the domain's shape, row-major).
        rows: ``(n, m)`` int64 levels, sorted by row-major cell index, read-only.
    """

    levels: tuple[int, ...]
    rows: np.ndarray

    def __post_init__(self) -> None:
        levels = tuple(int(v) for v in self.levels)
        rows = np.asarray(self.rows)
        if not levels or min(levels) < 1:
            raise MechanismError(f"levels must be one or more positive sizes, got {self.levels!r}")
        if rows.ndim != 2 or rows.shape[1] != len(levels) or rows.dtype.kind not in "iu":
            raise MechanismError(f"rows must be an (n, {len(levels)}) integer table, got {rows.dtype} {rows.shape}")
        if rows.size and ((rows < 0).any() or (rows >= np.asarray(levels)).any()):
            raise MechanismError("a record's level lies outside its attribute's levels")
        rows = rows.astype(np.int64, copy=False)
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
        return cls(tuple(levels), np.stack(np.unravel_index(flat, tuple(levels)), axis=1))

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    @property
    def cells(self) -> int:
        """Cells of the full domain (a Python int: may exceed what any vector could hold)."""
        return _cells(self.levels)

    def table(self, attributes: tuple[int, ...]) -> np.ndarray:
        """The true marginal table over ``attributes`` (increasing indexes), row-major, int64."""
        shape = tuple(self.levels[a] for a in attributes)
        if not self.rows.shape[0]:
            return np.zeros(int(np.prod(shape)), dtype=np.int64)
        key = np.ravel_multi_index(tuple(self.rows[:, a] for a in attributes), shape)
        return np.bincount(key, minlength=int(np.prod(shape))).astype(np.int64, copy=False)


def _cells(levels: tuple[int, ...]) -> int:
    out = 1
    for v in levels:
        out *= int(v)
    return out
