"""Histogram domains: attributes, their bins, and the flattened bin index.

A domain is an ordered list of attributes. Each attribute maps a value to one
of its bins; the histogram of a timestep counts records over the product of
all attributes' bins, flattened row-major in attribute order (the last
attribute varies fastest, as :func:`numpy.ravel_multi_index` does).

The domain is public and fixed by configuration: it never depends on data, so
the set of released bins reveals nothing (invariant I6).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from histogram.errors import DomainError

__all__ = ["CategoricalAttribute", "NumericAttribute", "Attribute", "Domain", "Encoded"]

OutOfRange = Literal["clip", "reject"]


@dataclass(frozen=True)
class Encoded:
    """Bin indices of one column, with the rows that could not be binned.

    ``index`` holds a bin number in ``[0, bins)`` for every valid row (and 0
    where ``valid`` is False).
    """

    index: np.ndarray
    valid: np.ndarray


@dataclass(frozen=True)
class CategoricalAttribute:
    """An attribute with a fixed, public list of values; one bin per value.

    Values are compared as strings (``1`` and ``"1"`` are the same value).
    Integer columns are read as codes (0-based positions in ``values``) when
    ``codes=True`` is passed to :meth:`encode`.
    """

    name: str
    values: tuple[str, ...]
    kind: Literal["categorical"] = field(default="categorical", init=False)

    def __post_init__(self) -> None:
        _check_name(self.name)
        values = tuple(str(v) for v in self.values)
        object.__setattr__(self, "values", values)
        if not values:
            raise DomainError(f"attribute {self.name!r}: list at least one value")
        if len(set(values)) != len(values):
            dupes = sorted({v for v in values if values.count(v) > 1})
            raise DomainError(f"attribute {self.name!r}: values must be distinct, repeated: {dupes}")

    @property
    def bins(self) -> int:
        """Number of bins (one per value)."""
        return len(self.values)

    def encode(self, column: Sequence[object] | np.ndarray, *, codes: bool = False) -> Encoded:
        """Map a column of values to bin indices (vectorised).

        Args:
            column: values; strings, or anything whose ``str`` is a listed value.
            codes: the column already holds integer positions into ``values``.
        """
        if codes:
            idx = np.asarray(column, dtype=np.int64)
            valid = (idx >= 0) & (idx < self.bins)
            return Encoded(np.where(valid, idx, 0), valid)
        arr = np.asarray(column)
        if arr.dtype.kind not in "US":
            arr = arr.astype(str)
        order = np.argsort(np.asarray(self.values))
        sorted_values = np.asarray(self.values)[order]
        pos = np.searchsorted(sorted_values, arr)
        pos_clipped = np.minimum(pos, len(sorted_values) - 1)
        valid = sorted_values[pos_clipped] == arr
        idx = np.where(valid, order[pos_clipped], 0).astype(np.int64)
        return Encoded(idx, np.asarray(valid, dtype=bool))

    def describe(self) -> dict[str, object]:
        """JSON-ready description (the ``schema.attributes`` entry)."""
        return {"name": self.name, "kind": "categorical", "values": list(self.values)}


@dataclass(frozen=True)
class NumericAttribute:
    """A numeric attribute cut into ``bins`` equal-width bins over ``[min, max]``.

    Bin ``i`` holds ``min + i·width <= x < min + (i+1)·width``; ``max`` itself
    falls in the last bin. Values outside ``[min, max]`` are clipped to the end
    bins (``out_of_range="clip"``) or rejected (``"reject"``). NaN and
    infinities are always rejected.
    """

    name: str
    min: float
    max: float
    bins: int
    out_of_range: OutOfRange = "clip"
    kind: Literal["numeric"] = field(default="numeric", init=False)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if isinstance(self.bins, bool) or not isinstance(self.bins, int | np.integer) or self.bins < 1:
            raise DomainError(f"attribute {self.name!r}: bins must be an integer >= 1, got {self.bins!r}")
        for label, value in (("min", self.min), ("max", self.max)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise DomainError(f"attribute {self.name!r}: {label} must be a finite number, got {value!r}")
        if not self.min < self.max:
            raise DomainError(f"attribute {self.name!r}: min ({self.min}) must be < max ({self.max})")
        if self.out_of_range not in ("clip", "reject"):
            raise DomainError(
                f"attribute {self.name!r}: out_of_range must be 'clip' or 'reject', got {self.out_of_range!r}"
            )

    @property
    def width(self) -> float:
        """Width of one bin, in the attribute's units."""
        return (self.max - self.min) / self.bins

    def edges(self) -> np.ndarray:
        """The ``bins + 1`` bin edges."""
        return np.linspace(self.min, self.max, self.bins + 1)

    def encode(self, column: Sequence[object] | np.ndarray, *, codes: bool = False) -> Encoded:
        """Map a column of numbers to bin indices (vectorised).

        Args:
            column: numbers (anything numpy can turn into float64; unparsable
                entries make the whole call fail, so parse first).
            codes: the column already holds bin numbers.
        """
        if codes:
            idx = np.asarray(column, dtype=np.int64)
            valid = (idx >= 0) & (idx < self.bins)
            return Encoded(np.where(valid, idx, 0), valid)
        x = np.asarray(column, dtype=np.float64)
        finite = np.isfinite(x)
        scaled = np.floor((np.where(finite, x, self.min) - self.min) / self.width)
        inside = (x >= self.min) & (x <= self.max)
        idx = np.clip(scaled, 0, self.bins - 1).astype(np.int64)
        valid = finite if self.out_of_range == "clip" else finite & inside
        return Encoded(np.where(valid, idx, 0), valid)

    def describe(self) -> dict[str, object]:
        """JSON-ready description (the ``schema.attributes`` entry)."""
        return {
            "name": self.name,
            "kind": "numeric",
            "min": self.min,
            "max": self.max,
            "bins": int(self.bins),
            "out_of_range": self.out_of_range,
        }


Attribute = CategoricalAttribute | NumericAttribute


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name.strip():
        raise DomainError(f"attribute names must be non-empty strings, got {name!r}")


@dataclass(frozen=True)
class Domain:
    """An ordered, non-empty list of attributes with distinct names.

    ``shape`` is the tuple of bins per attribute; ``size`` the number of bins of
    the flattened histogram.
    """

    attributes: tuple[Attribute, ...]

    def __post_init__(self) -> None:
        attrs = tuple(self.attributes)
        object.__setattr__(self, "attributes", attrs)
        if not attrs:
            raise DomainError("the domain is empty: list at least one attribute under schema.attributes")
        names = [a.name for a in attrs]
        if len(set(names)) != len(names):
            raise DomainError(f"attribute names must be distinct, got {names}")
        for a in attrs:
            if not isinstance(a, CategoricalAttribute | NumericAttribute):
                raise DomainError(f"unknown attribute type {type(a).__name__}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(a.bins) for a in self.attributes)

    @property
    def size(self) -> int:
        """Number of bins in the flattened histogram."""
        return int(math.prod(self.shape))

    def attribute(self, name: str) -> Attribute:
        for a in self.attributes:
            if a.name == name:
                return a
        raise DomainError(f"no attribute named {name!r}; the domain has {list(self.names)}")

    def encode(
        self,
        columns: Mapping[str, Sequence[object] | np.ndarray],
        *,
        codes: bool | Mapping[str, bool] = False,
    ) -> Encoded:
        """Flattened bin index of every row (vectorised over rows).

        Args:
            columns: one column per attribute name, all of the same length.
                Extra columns are an error (a typo would otherwise go unnoticed).
            codes: per attribute (or for all), whether the column holds bin
                codes rather than raw values.

        Raises:
            DomainError: a column is missing or unknown, or lengths differ.
        """
        missing = [n for n in self.names if n not in columns]
        extra = [n for n in columns if n not in self.names]
        if missing or extra:
            raise DomainError(
                f"columns must match the domain's attributes {list(self.names)}: "
                f"missing {missing}, unknown {extra}"
            )
        lengths = {len(columns[n]) for n in self.names}
        if len(lengths) > 1:
            raise DomainError(f"all columns must have the same length, got lengths {sorted(lengths)}")
        n_rows = lengths.pop()
        flat = np.zeros(n_rows, dtype=np.int64)
        valid = np.ones(n_rows, dtype=bool)
        for attr in self.attributes:
            use_codes = codes.get(attr.name, False) if isinstance(codes, Mapping) else bool(codes)
            enc = attr.encode(columns[attr.name], codes=use_codes)
            flat *= attr.bins
            flat += enc.index
            valid &= enc.valid
        return Encoded(np.where(valid, flat, 0), valid)

    def unravel(self, flat_index: np.ndarray | int) -> tuple[np.ndarray, ...]:
        """Per-attribute bin indices of flattened indices."""
        return np.unravel_index(flat_index, self.shape)

    def describe(self) -> dict[str, object]:
        """JSON-ready description: what each released count position means."""
        return {
            "attributes": [a.describe() for a in self.attributes],
            "shape": list(self.shape),
            "size": self.size,
            "order": "row-major",
        }

    @classmethod
    def from_description(cls, spec: Mapping[str, object] | Sequence[Mapping[str, object]]) -> Domain:
        """Build a domain from :meth:`describe` output or a list of attribute dicts."""
        items = spec["attributes"] if isinstance(spec, Mapping) else spec
        attrs: list[Attribute] = []
        for item in items:  # type: ignore[union-attr]
            kind = item.get("kind")
            if kind == "categorical":
                attrs.append(CategoricalAttribute(str(item["name"]), tuple(item["values"])))
            elif kind == "numeric":
                attrs.append(
                    NumericAttribute(
                        str(item["name"]),
                        item["min"],
                        item["max"],
                        item["bins"],
                        item.get("out_of_range", "clip"),
                    )
                )
            else:
                raise DomainError(f"attribute kind must be 'categorical' or 'numeric', got {kind!r}")
        return cls(tuple(attrs))
