"""Events: the columnar batch the pipeline eats, its validation, and the JSON decoder.

Input arrives as a CSV file (:mod:`stream.ingest.csvio`) or as Kafka payloads (the
service). Both end up as an :class:`EventBatch`: one column of user ids, one
of event times and one per attribute, plus the row number (CSV line, or event
ordinal) of every row. :func:`validate_batch` checks all rows at once with
numpy/pyarrow (no Python loop per event) and returns the valid rows as bin
indices together with the :class:`Rejections` — one reason code per rejected
row, from :data:`REASONS` (``docs/contracts.md``).

Accepted values (one grammar for CSV and JSON, implemented once here):

* user id: a non-empty string of at most :data:`MAX_USER_ID_CHARS` characters
  (JSON integers are accepted and read as their decimal string);
* event time: epoch seconds (a JSON number, or a decimal string such as
  ``1700000000`` or ``1.7e9``) or ISO-8601 as Apache Arrow parses it —
  ``YYYY-MM-DD`` with an optional ``[T ]hh[:mm[:ss[.f…]]]`` and an optional
  zone ``Z``/``±hh``/``±hhmm``/``±hh:mm``; without a zone the time is UTC;
  years 1678–2261 (nanosecond range); no surrounding spaces;
* categorical attribute: a listed value, compared as a string (``1`` and
  ``"1"`` are the same value);
* numeric attribute: a number (in CSV, a decimal string); NaN and infinities
  are ``non_finite``; outside ``[min, max]`` is clipped or ``out_of_domain``
  as configured.

The JSON decoder (:class:`EventDecoder`) takes Kafka payloads: one event
object per message, or a JSON array of events. Each event is
``{"<schema.user_id>": …, "<schema.event_time>": …, "attributes": {…}}``;
the structure is checked by msgspec (a message that fails it is re-checked
with pydantic, event by event, to name each event's reason), the values
vectorised here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Annotated, Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import (
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)
from typing_extensions import TypedDict

from histogram.domain import CategoricalAttribute, Domain
from stream.ingest.person_key import INVISIBLE_DETAIL, canonical_keys

__all__ = [
    "REASONS",
    "DEAD_LETTER_REASONS",
    "LATE_REASON",
    "LATE_REASONS",
    "WIRE_REASONS",
    "MAX_USER_ID_CHARS",
    "Rejection",
    "Rejections",
    "EventBatch",
    "ValidBatch",
    "validate_batch",
    "parse_times",
    "parse_numbers",
    "EventDecoder",
    "Decoded",
    "KEY_USER_ID",
]

#: Every reason code, in the order of ``docs/contracts.md``. Index 0 is "no reason".
REASONS: tuple[str, ...] = (
    "malformed_json",
    "not_an_object",
    "missing_field",
    "wrong_type",
    "non_finite",
    "invalid_time",
    "invalid_user_id",
    "unknown_attribute",
    "out_of_domain",
    "oversized",
    "too_many_events",
    "empty_message",
    "far_future",
    "before_start",
    "timestep_sealed",
    "arrived_after_seal",
    "tombstone",
    "empty_value",
    # input.format avro | protobuf | jsonschema (stream/ingest/formats.py)
    "not_wire_format",
    "unknown_schema",
    "schema_unavailable",
    "schema_mismatch",
    "undecodable",
)
#: Reasons only a Schema Registry wire format (``input.format`` other than json) gives.
WIRE_REASONS: tuple[str, ...] = ("not_wire_format", "unknown_schema", "schema_unavailable", "schema_mismatch",
                                 "undecodable")
LATE_REASON = "timestep_sealed"
#: Reasons that send an event to the late topic (not a dead letter): its record time is past its
#: timestep's deadline (``timestep_sealed``), or its record time is within the deadline but it
#: was read after the service had already declared that timestep complete
#: (``arrived_after_seal``: a broker clock behind the public wall clock by more than
#: ``stream.clock_skew``). Both are decided without looking at any other person's event.
LATE_REASONS: tuple[str, ...] = (LATE_REASON, "arrived_after_seal")
DEAD_LETTER_REASONS: tuple[str, ...] = tuple(r for r in REASONS if r not in LATE_REASONS)
CODE: dict[str, int] = {r: i + 1 for i, r in enumerate(REASONS)}
_LATE_CODES = np.array([CODE[r] for r in LATE_REASONS], dtype=np.int64)
MAX_USER_ID_CHARS = 256
#: Event times beyond this many seconds from the epoch are ``invalid_time`` (keeps grid cells in int64).
MAX_EPOCH_SECONDS = 1e11


# ---------------------------------------------------------------------------
# Rejections


@dataclass(frozen=True)
class Rejection:
    """One rejected event (dead letter) or late event.

    Attributes:
        reason: a code from :data:`REASONS`.
        detail: what was wrong, in words (never raw data of other rows).
        row: CSV line number (header = line 1), or the event's position in
            the batch for other sources; None for a whole message.
        payload: the original message bytes, when the event came from one.
        source: the caller's tag of that message (e.g. partition and offset).
        element: the event's position in a JSON array message (None for a
            single-event message or a whole message).
    """

    reason: str
    detail: str
    row: int | None = None
    payload: bytes | None = None
    source: Any = None
    element: int | None = None

    @property
    def late(self) -> bool:
        return self.reason in LATE_REASONS


class Rejections(Sequence[Rejection]):
    """A columnar list of rejections (a ``Sequence[Rejection]``).

    Stored as arrays so that a million late rows cost arrays, not objects;
    :class:`Rejection` objects are made only when iterated or indexed.
    """

    __slots__ = ("reason", "row", "detail", "message", "element", "_texts", "_payloads", "_sources")

    def __init__(
        self,
        reason: np.ndarray,
        row: np.ndarray,
        detail: np.ndarray,
        texts: Sequence[str],
        *,
        message: np.ndarray | None = None,
        element: np.ndarray | None = None,
        payloads: Sequence[bytes | None] = (),
        sources: Sequence[Any] = (),
    ) -> None:
        n = len(reason)
        self.reason = np.asarray(reason, dtype=np.int8)
        self.row = np.asarray(row, dtype=np.int64)
        self.detail = np.asarray(detail, dtype=np.int32)
        self.message = np.full(n, -1, np.int64) if message is None else np.asarray(message, dtype=np.int64)
        self.element = np.full(n, -1, np.int64) if element is None else np.asarray(element, dtype=np.int64)
        self._texts = tuple(texts)
        self._payloads = tuple(payloads)
        self._sources = tuple(sources)

    @classmethod
    def empty(cls) -> Rejections:
        z = np.zeros(0, np.int64)
        return cls(z, z, z, ())

    @classmethod
    def from_list(cls, items: Iterable[Rejection]) -> Rejections:
        items = list(items)
        texts: dict[str, int] = {}
        detail = [texts.setdefault(r.detail, len(texts)) for r in items]
        return cls(
            np.array([CODE[r.reason] for r in items], dtype=np.int8),
            np.array([-1 if r.row is None else r.row for r in items], dtype=np.int64),
            np.array(detail, dtype=np.int32),
            list(texts),
            message=np.arange(len(items), dtype=np.int64),
            element=np.array([-1 if r.element is None else r.element for r in items], dtype=np.int64),
            payloads=[r.payload for r in items],
            sources=[r.source for r in items],
        )

    @classmethod
    def concat(cls, parts: Iterable[Rejections]) -> Rejections:
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        texts: list[str] = []
        payloads: list[bytes | None] = []
        sources: list[Any] = []
        details, messages = [], []
        for p in parts:
            details.append(p.detail + len(texts))
            messages.append(np.where(p.message >= 0, p.message + len(payloads), -1))
            texts.extend(p._texts)
            payloads.extend(p._payloads)
            sources.extend(p._sources)
        return cls(
            np.concatenate([p.reason for p in parts]),
            np.concatenate([p.row for p in parts]),
            np.concatenate(details),
            texts,
            message=np.concatenate(messages),
            element=np.concatenate([p.element for p in parts]),
            payloads=payloads,
            sources=sources,
        )

    def __len__(self) -> int:
        return int(self.reason.size)

    def _item(self, i: int) -> Rejection:
        m = int(self.message[i])
        e = int(self.element[i])
        row = int(self.row[i])
        return Rejection(
            REASONS[int(self.reason[i]) - 1],
            self._texts[int(self.detail[i])],
            None if row < 0 else row,
            self._payloads[m] if m >= 0 and m < len(self._payloads) else None,
            self._sources[m] if m >= 0 and m < len(self._sources) else None,
            None if e < 0 else e,
        )

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self._item(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return self._item(i)

    def __iter__(self) -> Iterator[Rejection]:
        for i in range(len(self)):
            yield self._item(i)

    def __repr__(self) -> str:
        return f"Rejections({self.counts()})"

    # -- summaries (vectorised) ----------------------------------------------
    def counts(self) -> dict[str, int]:
        """Number of rejections per reason code (only reasons that occur)."""
        c = np.bincount(self.reason, minlength=len(REASONS) + 1)
        return {REASONS[i - 1]: int(c[i]) for i in range(1, len(c)) if c[i]}

    def select(self, mask: np.ndarray) -> Rejections:
        return Rejections(
            self.reason[mask],
            self.row[mask],
            self.detail[mask],
            self._texts,
            message=self.message[mask],
            element=self.element[mask],
            payloads=self._payloads,
            sources=self._sources,
        )

    @property
    def late(self) -> Rejections:
        """The late events (``timestep_sealed``)."""
        return self.select(np.isin(self.reason, _LATE_CODES))

    @property
    def dead(self) -> Rejections:
        """Everything but the late events (the dead letters)."""
        return self.select(~np.isin(self.reason, _LATE_CODES))

    def first(self) -> Rejection | None:
        """The rejection with the smallest row number (row-less ones last)."""
        if not len(self):
            return None
        key = np.where(self.row < 0, np.iinfo(np.int64).max, self.row)
        return self._item(int(np.argmin(key)))


class _RejectionBuilder:
    """Assigns at most one reason per row; the first reason marked wins."""

    def __init__(self, n: int) -> None:
        self.code = np.zeros(n, dtype=np.int8)
        self.detail = np.zeros(n, dtype=np.int32)
        self.texts: dict[str, int] = {}

    def mark(self, mask: np.ndarray, reason: str, detail: str) -> None:
        mask = np.asarray(mask, dtype=bool)
        if not mask.any():
            return
        sel = mask & (self.code == 0)
        if sel.any():
            self.code[sel] = CODE[reason]
            self.detail[sel] = self.texts.setdefault(detail, len(self.texts))

    @property
    def ok(self) -> np.ndarray:
        return self.code == 0

    def build(self, batch: EventBatch, idx: np.ndarray | None = None) -> Rejections:
        bad = np.flatnonzero(self.code) if idx is None else idx
        return Rejections(
            self.code[bad],
            batch.rows[bad],
            self.detail[bad],
            list(self.texts),
            message=None if batch.messages is None else batch.messages[bad],
            element=None if batch.elements is None else batch.elements[bad],
            payloads=batch.payloads or (),
            sources=batch.sources or (),
        )


# ---------------------------------------------------------------------------
# Parsing columns (vectorised, one grammar for every input)

_TS_NS_UTC = pa.timestamp("ns", "UTC")
_TS_NS = pa.timestamp("ns")


def _to_string_array(values: Any) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        if pa.types.is_dictionary(values.type):
            values = values.cast(values.type.value_type)
        if pa.types.is_large_string(values.type):
            values = values.cast(pa.string())
        if not pa.types.is_string(values.type):
            values = pc.cast(values, pa.string())
        return values
    arr = np.asarray(values)
    if arr.dtype.kind in "iub":
        return pc.cast(pa.array(arr), pa.string())
    return pa.array(arr.tolist() if arr.dtype.kind == "O" else arr, type=pa.string())


def _try_casts(arr: pa.Array, targets: Sequence[pa.DataType]) -> np.ndarray | None:
    """Seconds (float64) if one of ``targets`` parses every non-null value; NaN for nulls."""
    for target in targets:
        try:
            out = pc.cast(arr, target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
        if pa.types.is_timestamp(target):
            ns = np.asarray(out.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
            whole, frac = np.divmod(ns, 1_000_000_000)  # exact split: one rounding, in the sum
            values = whole.astype(np.float64) + frac.astype(np.float64) / 1e9
        else:
            values = out.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        if out.null_count:
            values = np.where(out.is_null().to_numpy(zero_copy_only=False), np.nan, values)
        return values
    return None


def _parse(arr: pa.Array, targets: Sequence[pa.DataType]) -> tuple[np.ndarray, np.ndarray]:
    """Parse a string column; returns (float64 values, parsed mask).

    Whole-column casts first (the fast path). When a column mixes forms or
    holds bad values, it is split in halves until every piece casts or is a
    single bad value: O(k log n) extra casts for k bad values, never a Python
    loop over the good ones. A value parses iff one of the casts accepts it
    on its own, so the result does not depend on the rest of the column.
    """
    n = len(arr)
    values = np.full(n, np.nan)
    parsed = np.zeros(n, dtype=bool)
    whole = _try_casts(arr, targets)
    if whole is not None:
        return whole, np.ones(n, dtype=bool)
    stack = [np.arange(n, dtype=np.int64)]
    while stack:
        idx = stack.pop()
        got = _try_casts(arr.take(pa.array(idx)), targets)
        if got is not None:
            values[idx] = got
            parsed[idx] = True
        elif idx.size > 1:
            half = idx.size // 2
            stack.append(idx[half:])
            stack.append(idx[:half])
    return values, parsed


def parse_times(values: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Event times as float seconds since the epoch.

    Returns ``(seconds, parsed, missing)``: ``parsed`` is False for
    unparsable values (``invalid_time``), ``missing`` True for nulls.
    Non-finite results (``nan``, ``inf``) are parsed but not finite.
    """
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
        secs = values.astype(np.float64, copy=False)
        return secs, np.ones(secs.size, dtype=bool), np.zeros(secs.size, dtype=bool)
    arr = _to_string_array(values)
    missing = _null_mask(arr)
    secs, parsed = _parse(arr, (pa.float64(), _TS_NS_UTC, _TS_NS))
    return secs, parsed | missing, missing


def parse_numbers(values: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Numbers as float64: ``(values, parsed, missing)`` like :func:`parse_times`."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
        v = values.astype(np.float64, copy=False)
        return v, np.ones(v.size, dtype=bool), np.zeros(v.size, dtype=bool)
    if isinstance(values, pa.Array) and (pa.types.is_floating(values.type) or pa.types.is_integer(values.type)):
        missing = values.is_null().to_numpy(zero_copy_only=False)
        v = np.asarray(values.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False))
        return v, np.ones(v.size, dtype=bool), missing
    arr = _to_string_array(values)
    missing = _null_mask(arr)
    v, parsed = _parse(arr, (pa.float64(),))
    return v, parsed | missing, missing


# ---------------------------------------------------------------------------
# The batch


@dataclass(frozen=True, eq=False)
class EventBatch:
    """Columnar events, in arrival order.

    Attributes:
        user_id: utf-8 string array (nulls are missing ids).
        event_time: float64 seconds since the epoch, or a string array of
            epoch seconds / ISO-8601 (parsed in :func:`validate_batch`).
        attributes: one column per attribute name: numbers, strings (parsed
            for numeric attributes) or, for names in ``codes``, bin codes.
            A column whose name is not in the domain makes every row with a
            non-null value in it ``unknown_attribute``.
        rows: int64 row number of every event, used in rejections (CSV line
            numbers; event ordinals otherwise).
        codes: attribute names whose columns hold 0-based bin codes.
        messages, elements, payloads, sources: where each event came from
            (index into ``payloads``/``sources``, position in a JSON array
            message), so a dead letter carries the original bytes.
    """

    user_id: pa.Array
    event_time: Any
    attributes: Mapping[str, Any]
    rows: np.ndarray
    codes: frozenset[str] = frozenset()
    messages: np.ndarray | None = None
    elements: np.ndarray | None = None
    payloads: Sequence[bytes] | None = None
    sources: Sequence[Any] | None = None

    def __len__(self) -> int:
        return int(self.rows.size)

    @classmethod
    def from_columns(
        cls,
        user_id: Any,
        event_time: Any,
        attributes: Mapping[str, Any],
        *,
        rows: Any = None,
        codes: Iterable[str] = (),
        first_row: int = 0,
    ) -> EventBatch:
        """Build a batch from arrays or lists (user ids are read as strings)."""
        uid = _to_string_array(user_id)
        n = len(uid)
        times = event_time
        if not isinstance(times, pa.Array | pa.ChunkedArray):
            arr = np.asarray(times)
            times = arr.astype(np.float64) if arr.dtype.kind in "fiu" else _to_string_array(arr)
        if len(times) != n:
            raise ValueError(f"event_time has {len(times)} rows, user_id has {n}")
        cols = {}
        for name, col in attributes.items():
            if not isinstance(col, pa.Array | pa.ChunkedArray):
                col = np.asarray(col)
            if len(col) != n:
                raise ValueError(f"attribute {name!r} has {len(col)} rows, user_id has {n}")
            cols[name] = col
        r = np.arange(first_row, first_row + n, dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
        return cls(uid, times, cols, r, frozenset(codes))

    @classmethod
    def from_records(
        cls,
        records: Sequence[Mapping[str, Any]],
        *,
        user_id: str = "user_id",
        event_time: str = "event_time",
        first_row: int = 0,
    ) -> EventBatch:
        """From dicts ``{user_id, event_time, attributes: {…}}`` (or attributes at top level).

        For tests and small inputs; values must already be well formed
        (missing keys become nulls and are rejected as ``missing_field``).
        """
        names: dict[str, None] = {}
        for r in records:
            attrs = r.get("attributes", {k: v for k, v in r.items() if k not in (user_id, event_time)})
            names.update(dict.fromkeys(attrs))
        uids = [None if r.get(user_id) is None else str(r.get(user_id)) for r in records]
        raw_times = [r.get(event_time) for r in records]
        if all(isinstance(t, int | float) and not isinstance(t, bool) for t in raw_times):
            times: Any = np.asarray(raw_times, dtype=np.float64)
        else:
            times = pa.array([None if t is None else (t if isinstance(t, str) else repr(t)) for t in raw_times],
                             type=pa.string())
        cols: dict[str, Any] = {}
        for name in names:
            vals = []
            for r in records:
                attrs = r.get("attributes", r)
                vals.append(attrs.get(name))
            if all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals):
                cols[name] = np.asarray(vals, dtype=np.float64)
            else:
                cols[name] = pa.array([None if v is None else (v if isinstance(v, str) else repr(v)) for v in vals],
                                      type=pa.string())
        return cls.from_columns(pa.array(uids, type=pa.string()), times, cols, first_row=first_row)


@dataclass(frozen=True, eq=False)
class ValidBatch:
    """The rows of a batch that passed validation, ready for windowing.

    ``flat`` is each row's flattened bin index, ``time`` its event time,
    ``user_id`` its person, ``position`` its index in the original batch.
    """

    flat: np.ndarray
    time: np.ndarray
    user_id: pa.Array
    position: np.ndarray

    def __len__(self) -> int:
        return int(self.position.size)


def _null_mask(col: Any) -> np.ndarray:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if isinstance(col, pa.Array):
        if not col.null_count:
            return np.zeros(len(col), dtype=bool)
        return col.is_null().to_numpy(zero_copy_only=False)
    arr = np.asarray(col)
    if arr.dtype.kind == "O":
        return np.fromiter((v is None for v in arr), dtype=bool, count=arr.size)
    return np.zeros(arr.size, dtype=bool)


def _categorical_codes(attr: CategoricalAttribute, col: Any) -> tuple[np.ndarray, np.ndarray]:
    """(codes, valid) of a categorical column via dictionary encoding (values compared as strings)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if isinstance(col, pa.Array):
        if pa.types.is_dictionary(col.type):
            dictionary = col.dictionary
            if not pa.types.is_string(dictionary.type):
                dictionary = pc.cast(dictionary, pa.string())
            indices = col.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            lookup = {v: i for i, v in enumerate(attr.values)}
            mapping = np.array([lookup.get(v, -1) for v in dictionary.to_pylist()] + [-1], dtype=np.int64)
            codes = mapping[indices] if len(dictionary) else np.full(indices.size, -1, np.int64)
            return np.maximum(codes, 0), codes >= 0
        if pa.types.is_floating(col.type):  # read as Python would print them (1.0 → "1.0")
            col = pa.array([None if v is None else repr(v) for v in col.to_pylist()], type=pa.string())
        elif not pa.types.is_string(col.type):
            col = pc.cast(col, pa.string())
        found = pc.index_in(col, value_set=pa.array(attr.values, type=pa.string()))
        if not found.null_count:  # the usual case: every value listed (int32 codes, no copy)
            return found.to_numpy(zero_copy_only=False), np.ones(len(found), dtype=bool)
        codes = found.fill_null(-1).to_numpy(zero_copy_only=False)
        return np.maximum(codes, 0), codes >= 0
    arr = np.asarray(col)
    if arr.dtype.kind == "O":
        arr = np.array(["" if v is None else str(v) for v in arr])
    enc = attr.encode(arr)
    return enc.index, enc.valid


def validate_batch(
    batch: EventBatch, domain: Domain, *, max_user_id_chars: int = MAX_USER_ID_CHARS, numeric_user_ids: bool = True
) -> tuple[ValidBatch, Rejections]:
    """Check every row of ``batch`` at once; bin the valid ones.

    Reasons, first match wins per row: ``missing_field``, ``wrong_type``
    (unparsable number), ``invalid_user_id``, ``invalid_time``,
    ``non_finite``, ``unknown_attribute``, ``out_of_domain``. The user ids
    of the valid rows come out as canonical person keys
    (:mod:`stream.ingest.person_key`; ``numeric_user_ids`` is ``schema.numeric_user_ids``).

    Raises:
        ValueError: the batch lacks a column for some attribute (a
            programming error of the caller, not bad data).
    """
    n = len(batch)
    rb = _RejectionBuilder(n)
    missing_cols = [a for a in domain.names if a not in batch.attributes]
    if missing_cols:
        raise ValueError(f"the batch has no column for attribute(s) {missing_cols}")
    # missing values
    rb.mark(_null_mask(batch.user_id), "missing_field", "the user id is missing")
    times, t_parsed, t_missing = parse_times(batch.event_time)
    rb.mark(t_missing, "missing_field", "the event time is missing")
    for name in domain.names:
        rb.mark(_null_mask(batch.attributes[name]), "missing_field", f"attribute {name!r} is missing")
    # parse numeric attributes
    numeric: dict[str, np.ndarray] = {}
    for attr in domain.attributes:
        col = batch.attributes[attr.name]
        if attr.kind == "numeric" and attr.name not in batch.codes:
            v, parsed, _ = parse_numbers(col)
            rb.mark(~parsed, "wrong_type", f"attribute {attr.name!r} is not a number")
            numeric[attr.name] = v
    # user ids
    uid = batch.user_id
    if len(uid):
        lengths = pc.binary_length(uid)
        nbytes = (lengths.fill_null(1) if lengths.null_count else lengths).to_numpy(zero_copy_only=False)
        bad = nbytes < 1
        long = np.flatnonzero(nbytes > max_user_id_chars)  # bytes >= characters: count characters only here
        if long.size:
            chars = pc.utf8_length(uid.take(pa.array(long))).to_numpy(zero_copy_only=False)
            bad[long[chars > max_user_id_chars]] = True
        rb.mark(bad, "invalid_user_id", f"the user id must be 1 to {max_user_id_chars} characters")
        uid, invisible = canonical_keys(uid, numeric=numeric_user_ids)  # one key per person (docs/privacy.md §1.2)
        rb.mark(invisible, "invalid_user_id", INVISIBLE_DETAIL)
    rb.mark(~t_parsed, "invalid_time", "the event time is neither epoch seconds nor ISO-8601")
    rb.mark(~np.isfinite(times), "non_finite", "the event time is not finite")
    with np.errstate(invalid="ignore"):
        rb.mark(np.abs(times) > MAX_EPOCH_SECONDS, "invalid_time",
                f"the event time is more than {MAX_EPOCH_SECONDS:.0e} s from 1970")
    for name, v in numeric.items():
        rb.mark(~np.isfinite(v), "non_finite", f"attribute {name!r} is not finite")
    for name, col in batch.attributes.items():
        if name not in domain.names:
            rb.mark(~_null_mask(col), "unknown_attribute", f"{name!r} is not an attribute of the domain")
    # bin
    flat = np.zeros(n, dtype=np.int64)
    for attr in domain.attributes:
        col = batch.attributes[attr.name]
        if attr.name in batch.codes:
            codes = np.asarray(col.to_numpy(zero_copy_only=False) if isinstance(col, pa.Array) else col)
            codes = np.where(np.isfinite(codes), codes, -1).astype(np.int64) if codes.dtype.kind == "f" \
                else codes.astype(np.int64)
            valid = (codes >= 0) & (codes < attr.bins)
            idx = np.where(valid, codes, 0)
            rb.mark(~valid, "out_of_domain", f"attribute {attr.name!r}: bin code outside [0, {attr.bins})")
        elif attr.kind == "numeric":
            enc = attr.encode(numeric[attr.name])
            idx, valid = enc.index, enc.valid
            rb.mark(~valid, "out_of_domain", f"attribute {attr.name!r} is outside [{attr.min:g}, {attr.max:g}]")
        else:
            idx, valid = _categorical_codes(attr, col)
            rb.mark(~valid, "out_of_domain", f"attribute {attr.name!r} is not one of its listed values")
        flat *= attr.bins
        flat += idx
    ok = rb.ok
    pos = np.flatnonzero(ok)
    all_ok = pos.size == n
    valid_batch = ValidBatch(
        flat if all_ok else flat[pos],
        times if all_ok else times[pos],
        uid if all_ok else uid.take(pa.array(pos)),
        pos,
    )
    return valid_batch, rb.build(batch)


# ---------------------------------------------------------------------------
# JSON payloads (the service)


def _first_match(tp: Any) -> Any:
    """A union validated left to right (measured: ~20 % faster than pydantic's smart mode here)."""
    return Annotated[tp, Field(union_mode="left_to_right")]


# What pydantic returns per field (the columns below rely on it):
# * user id: str, or int (read later as its decimal string);
# * event time and numeric attributes: float — strict floats take JSON integers too, converted
#   like float() (beyond the float range: ±inf, later ``non_finite``) — or str (for a time:
#   parsed later; for a numeric attribute: ``wrong_type`` later); numeric attributes may be None;
# * categorical attributes: str, int or float (compared as their text later), or None.
_USER_ID = _first_match(StrictStr | StrictInt)
_TIME = _first_match(StrictFloat | StrictStr)
_NUMBER = _first_match(StrictFloat | StrictStr | None)
_SCALAR = _first_match(StrictStr | StrictInt | StrictFloat | None)


def _event_type(domain: Domain, user_field: str | None, time_field: str) -> Any:
    """The pydantic-validated structure of one event: TypedDicts (about twice as fast as models).

    ``attributes`` has one optional key per domain attribute and forbids
    others, so an unknown attribute is an error located at
    ``("attributes", name)``; a missing one is None (→ ``missing_field`` later).
    ``user_field`` None: the person comes from the record key, events carry no id.
    """
    fields = {a.name: _NUMBER if a.kind == "numeric" else _SCALAR for a in domain.attributes}
    attributes = TypedDict("EventAttributes", fields, total=False)  # type: ignore[misc]
    attributes.__pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[attr-defined]
    fields_ = {time_field: _TIME, "attributes": attributes}
    if user_field is not None:
        fields_ = {user_field: _USER_ID, **fields_}
    event = TypedDict("Event", fields_)  # type: ignore[misc]
    event.__pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[attr-defined]
    return event


def _struct_types(domain: Domain, user_field: str | None, time_field: str) -> tuple[type, type]:
    """The same structure as :func:`_event_type`, as msgspec Structs: ``(Event, Attributes)``.

    Each field takes the same JSON values and yields the same Python values as the pydantic
    type (strict: a JSON integer in a float field becomes that float, bools are no numbers;
    the first of a duplicated key loses, as in pydantic), so a message both accept becomes the
    same columns (``tests/stream/ingest/test_decoder_paths.py`` checks this over generated
    messages). A message msgspec refuses (including the few it is stricter about: numbers
    beyond the float range, lone surrogates) goes to the pydantic path. Fields are positional
    (``a0``, ``a1``, … renamed to the configured names); ``gc=False``: no cycles, less GC work.
    """
    numeric = float | str | None
    scalar = str | int | float | None
    attrs = msgspec.defstruct(
        "EventAttributes",
        [(f"a{i}", numeric if a.kind == "numeric" else scalar, None) for i, a in enumerate(domain.attributes)],
        rename={f"a{i}": a.name for i, a in enumerate(domain.attributes)},
        forbid_unknown_fields=True, gc=False,
    )
    fields: list[tuple[str, Any]] = [("t", float | str), ("attributes", attrs)]
    rename = {"t": time_field, "attributes": "attributes"}
    if user_field is not None:
        fields.insert(0, ("u", str | int))
        rename["u"] = user_field
    event = msgspec.defstruct("Event", fields, rename=rename, forbid_unknown_fields=True, gc=False)
    return event, attrs


_PYDANTIC_REASON = {
    "missing": "missing_field",
    "extra_forbidden": "unknown_attribute",
}
#: What pyarrow raises when a Python list does not convert to the requested type.
_ARROW_ERRORS = (pa.ArrowException, OverflowError, TypeError, ValueError)


@dataclass(frozen=True, eq=False)
class Decoded:
    """Result of :meth:`EventDecoder.decode`: the events and what was refused before validation."""

    batch: EventBatch
    rejections: Rejections = field(default_factory=Rejections.empty)


_CONSTANTS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _constant(name: str) -> float:
    """``json.loads`` hook for the non-standard ``NaN``/``Infinity`` tokens (→ ``non_finite`` later)."""
    return _CONSTANTS[name]


def _text(v: Any) -> str:
    """A non-string JSON scalar as text (``1`` → ``"1"``, ``1.0`` → ``"1.0"``)."""
    return v if isinstance(v, str) else repr(v)


def _utf8(v: Any) -> Any:
    """A JSON string that is not valid Unicode text (a lone surrogate such as ``"\\ud800"``)
    becomes ``"\\x00"``, which every column refuses by its own rule: ``invalid_user_id``,
    ``invalid_time``, ``wrong_type`` or ``out_of_domain``. Anything else passes unchanged."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return "\x00"
    return v


def _user_id_column(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values, type=pa.string())
    except _ARROW_ERRORS:  # integer ids: their decimal strings
        return pa.array([u if isinstance(u, str) else str(u) for u in values], type=pa.string())


def _time_column(values: list[Any]) -> pa.Array:
    """float64 when every time is a number, else strings (parsed by :func:`parse_times`)."""
    try:
        return pa.array(values, type=pa.float64())
    except _ARROW_ERRORS:
        pass
    try:
        return pa.array(values, type=pa.string())
    except _ARROW_ERRORS:  # numbers and strings mixed
        return pa.array([_text(t) for t in values], type=pa.string())


def _number_column(values: list[Any]) -> pa.Array:
    """A numeric attribute: float64 (nulls: missing) or, when some value is a string, strings in
    which those cannot parse (``wrong_type``)."""
    try:
        return pa.array(values, type=pa.float64())
    except _ARROW_ERRORS:
        return pa.array([None if v is None else ("\x00" if isinstance(v, str) else repr(v)) for v in values],
                        type=pa.string())


def _category_column(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values, type=pa.string())
    except _ARROW_ERRORS:
        return pa.array([None if v is None else _text(v) for v in values], type=pa.string())


def _join(pieces: list[pa.Array], *, numbers_as_numpy: bool) -> Any:
    """One column from per-chunk pieces. All float64: float64 (numpy when there is no null and
    ``numbers_as_numpy``); otherwise strings, the numbers formatted by Arrow (shortest text
    that parses back to the same double, so values are unchanged)."""
    if all(p.type == pa.float64() for p in pieces):
        arr = pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)
        return arr.to_numpy(zero_copy_only=False) if numbers_as_numpy and not arr.null_count else arr
    strings = [p if p.type == pa.string() else pc.cast(p, pa.string()) for p in pieces]
    return strings[0] if len(strings) == 1 else pa.concat_arrays(strings)


#: Validated events become columns in chunks of about this many, right after pydantic made them
#: (while they are in the CPU cache; then they are freed, so a poll's events never all live as
#: Python dicts at once). Measured: ~0.9 µs per event less than converting a 50,000-event poll at once.
_CHUNK_EVENTS = 1024


class EventDecoder:
    """JSON payloads → :class:`EventBatch` (+ message-level rejections).

    Message-level reasons: ``oversized`` (more than ``service.max_message_bytes``
    bytes; not parsed), ``malformed_json`` (not UTF-8 JSON), ``not_an_object``
    (neither an object nor an array; or an array element that is not an
    object), ``empty_message`` (an empty array: no event, but the message is
    not dropped silently), ``too_many_events`` (an array longer than
    ``service.max_events_per_message``). Event-level structure (pydantic):
    ``missing_field``, ``unknown_attribute`` (a top-level key or attribute the
    config does not know), ``wrong_type``. Values are checked later, by
    :func:`validate_batch`, exactly as for CSV input. So every message either
    yields events (each accepted or rejected later) or one message-level
    rejection.

    Speed: a well-formed message is parsed and checked by msgspec in one call
    (in C) into small Structs; every :data:`_CHUNK_EVENTS` events become
    Arrow columns, one pyarrow conversion per column (a column whose values
    are not all of its usual type takes a Python pass for that chunk). A
    message msgspec refuses is tried with pydantic (``validate_json``), and
    only a message with an error goes through the per-event Python path that
    finds each event's reason. Measured on one core (``benchmarks/
    bench_throughput.py`` profiles): ~0.5 µs per event in 500-event messages,
    against ~1.5 µs with pydantic as the first parser.
    """

    def __init__(
        self,
        domain: Domain,
        *,
        user_id: str = "user_id",
        event_time: str = "event_time",
        max_message_bytes: int = 1_048_576,
        max_events_per_message: int = 10_000,
    ) -> None:
        self.domain = domain
        #: ``schema.user_id: "@key"``: the person is the Kafka record key, and events carry no id field
        self.from_key = user_id == KEY_USER_ID
        self.user_field: str | None = None if self.from_key else user_id
        self.time_field = event_time
        self.max_message_bytes = int(max_message_bytes)
        self.max_events = int(max_events_per_message)
        self._names = tuple(domain.names)
        self._numeric = tuple(a.kind == "numeric" for a in domain.attributes)
        event = _event_type(domain, self.user_field, event_time)
        self._one = TypeAdapter(event)
        self._many = TypeAdapter(list[event])  # type: ignore[valid-type]
        self._Event, self._Attributes = _struct_types(domain, self.user_field, event_time)
        self._fast = msgspec.json.Decoder(self._Event | list[self._Event]).decode  # type: ignore[name-defined]
        self._attr_getters = tuple(attrgetter(f"a{i}") for i in range(len(self._names)))

    @classmethod
    def from_settings(cls, settings: Any) -> EventDecoder:
        # ingest_domain: the counted attributes plus a consent attribute that routes, never counts
        return cls(
            settings.ingest_domain(),
            user_id=settings.schema_.user_id,
            event_time=settings.schema_.event_time,
            max_message_bytes=settings.service.max_message_bytes,
            max_events_per_message=settings.service.max_events_per_message,
        )

    def _event(self, obj: Any) -> tuple[Any, str, str]:
        if not isinstance(obj, dict):
            return None, "not_an_object", f"an event must be a JSON object, got {type(obj).__name__}"
        try:
            return self._one.validate_python(obj), "", ""
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = [str(p) for p in err.get("loc", ())]
            # a field, or attributes.<name> (not the union member pydantic tried last)
            name = ".".join(loc[:2]) if loc[:1] == ["attributes"] else (loc[0] if loc else "event")
            reason = _PYDANTIC_REASON.get(err.get("type", ""), "wrong_type")
            what = {"missing_field": "is missing", "unknown_attribute": "is not a known field",
                    "wrong_type": "has the wrong type"}[reason]
            return None, reason, f"{name} {what}"

    def _slow(self, payload: bytes, m: int, reject: Any, row: int) -> tuple[list[tuple[int | None, Any, int]], int]:
        """Per-event path: ``([(element, event, row)], next row)``; rejections go to ``reject``."""
        try:
            doc = json.loads(payload, parse_constant=_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            reject("malformed_json", f"not valid JSON: {type(exc).__name__}", m, None, None)
            return [], row
        if isinstance(doc, list):
            if not doc:
                reject("empty_message", _EMPTY, m, None, None)
                return [], row
            if len(doc) > self.max_events:
                reject("too_many_events", f"{len(doc)} events exceed the limit of {self.max_events}", m, None, None)
                return [], row
            items, single = doc, False
        elif isinstance(doc, dict):
            items, single = [doc], True
        else:
            reject("not_an_object", f"a message must be an object or an array, got {type(doc).__name__}",
                   m, None, None)
            return [], row
        out = []
        for e, obj in enumerate(items):
            ev, reason, detail = self._event(obj)
            element = None if single else e
            if ev is None:
                reject(reason, detail, m, element, row)
            else:
                out.append((element, ev, row))
            row += 1
        return out, row

    def decode(self, payloads: Sequence[bytes | None], sources: Sequence[Any] | None = None,
               *, first_row: int = 0, keys: Sequence[bytes | None] | None = None) -> Decoded:
        """Decode many messages into one batch (rows numbered from ``first_row``).

        ``sources`` (parallel to ``payloads``) is carried into every rejection
        of that message, e.g. ``(partition, offset)``. A ``None`` payload is a
        Kafka tombstone (``tombstone``); an empty or all-white-space one is
        ``empty_value``. ``keys`` (parallel, the Kafka record keys) are the
        person ids when the decoder was built with ``user_id="@key"``.
        """
        rejected: list[Rejection] = []
        payloads = [p if type(p) is bytes or p is None else bytes(p) for p in payloads]
        src = list(sources) if sources is not None else [None] * len(payloads)
        fast, to_struct = self._fast, self._to_struct
        one, many = self._one.validator.validate_json, self._many.validator.validate_json
        max_bytes, max_events = self.max_message_bytes, self.max_events
        pending: list[Any] = []  # validated events not yet turned into columns
        pieces: list[list[pa.Array]] = []  # per chunk: user id, time, then one per attribute
        # runs of consecutive events of one message: message, length, first element (-1: a
        # single-event message), first row (four lists: ~10x cheaper to array than tuples)
        run_msg: list[int] = []
        run_len: list[int] = []
        run_elem: list[int] = []
        run_row: list[int] = []
        row = first_row

        def reject(reason: str, detail: str, m: int, element: int | None, r: int | None) -> None:
            rejected.append(Rejection(reason, detail, r, payloads[m], src[m], element))

        for m, payload in enumerate(payloads):
            if payload is None:
                reject("tombstone", "the record has no value (a tombstone): it holds no event", m, None, None)
                continue
            if not payload.strip():
                reject("empty_value", "the record's value is empty: it holds no event", m, None, None)
                continue
            if len(payload) > max_bytes:
                reject("oversized", f"message of {len(payload)} bytes exceeds {max_bytes}", m, None, None)
                continue
            # the fast path: the whole message checked by msgspec (then pydantic) in one call
            head = payload[:1]
            if head != b"{" and head != b"[":
                head = payload[:64].lstrip()[:1]
            k = -1
            if head == b"{" or head == b"[":
                try:
                    doc = fast(payload)
                except (msgspec.DecodeError, ValueError, RecursionError):  # invalid UTF-8 included:
                    # whatever msgspec refuses, pydantic (then the per-event path) has the last word
                    doc = None
                    try:
                        doc = one(payload) if head == b"{" else many(payload)
                    except ValidationError:
                        pass
                    else:
                        doc = to_struct(doc) if head == b"{" else [to_struct(e) for e in doc]
                if doc is not None:
                    if head == b"{":
                        pending.append(doc)
                        k = 1
                    elif not doc:
                        reject("empty_message", _EMPTY, m, None, None)
                        continue
                    elif len(doc) <= max_events:
                        pending.extend(doc)
                        k = len(doc)
            if k > 0:
                run_msg.append(m)
                run_len.append(k)
                run_elem.append(-1 if head == b"{" else 0)
                run_row.append(row)
                row += k
            else:  # the per-event path says what is wrong
                found, row = self._slow(payload, m, reject, row)
                for element, ev, r in found:
                    pending.append(to_struct(ev))
                    run_msg.append(m)
                    run_len.append(1)
                    run_elem.append(-1 if element is None else element)
                    run_row.append(r)
            if len(pending) >= _CHUNK_EVENTS:
                pieces.append(self._chunk(pending))
                pending = []
        if pending or not pieces:
            pieces.append(self._chunk(pending))
        lengths = np.asarray(run_len, dtype=np.int64)
        starts = np.cumsum(lengths) - lengths
        within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts, lengths)
        first_element = np.repeat(np.asarray(run_elem, dtype=np.int64), lengths)
        columns = [list(c) for c in zip(*pieces, strict=True)]
        messages = np.repeat(np.asarray(run_msg, dtype=np.int64), lengths)
        user_ids = _join(columns[0], numbers_as_numpy=False)
        if self.from_key:
            user_ids = _key_column(keys, messages, len(payloads))
        batch = EventBatch(
            user_ids,
            _join(columns[1], numbers_as_numpy=True),
            {name: _join(col, numbers_as_numpy=True) for name, col in zip(self._names, columns[2:], strict=True)},
            np.repeat(np.asarray(run_row, dtype=np.int64), lengths) + within,
            frozenset(),
            messages,
            np.where(first_element < 0, -1, first_element + within),
            payloads,
            src,
        )
        return Decoded(batch, Rejections.from_list(rejected))

    def _to_struct(self, ev: Mapping[str, Any]) -> Any:
        """An event pydantic validated (a dict) as the Struct msgspec would have made of it."""
        attrs = ev["attributes"]
        a = self._Attributes(*(attrs.get(name) for name in self._names))
        if self.user_field is None:
            return self._Event(ev[self.time_field], a)
        return self._Event(ev[self.user_field], ev[self.time_field], a)

    def _chunk(self, events: list[Any]) -> list[pa.Array]:
        """Event Structs → Arrow columns: user id, event time, then one per attribute.

        The usual case is one C++ conversion per column; a column whose values are not all of
        its usual type (integer user ids, ISO-8601 times, a string in a numeric attribute, a
        lone surrogate, …) takes a Python pass (see the type notes above :data:`_USER_ID`).
        """
        n = len(events)
        attributes = [e.attributes for e in events]
        if self.user_field is None:  # ids from the record keys, filled in by decode()
            columns = [pa.nulls(n, pa.string())]
        else:
            columns = [_column([e.u for e in events], pa.string(), _user_id_column)]
        columns.append(_column([e.t for e in events], pa.float64(), _time_column))
        for get, numeric in zip(self._attr_getters, self._numeric, strict=True):
            values = list(map(get, attributes))
            columns.append(_column(values, pa.float64(), _number_column) if numeric
                           else _column(values, pa.string(), _category_column))
        return columns


def _column(values: list[Any], usual: pa.DataType, fallback: Any) -> pa.Array:
    """``values`` as one Arrow array of their usual type, else by ``fallback`` (a Python pass
    over the values, invalid Unicode made ``"\\x00"`` first: :func:`_utf8`)."""
    try:
        return pa.array(values, type=usual)
    except _ARROW_ERRORS:
        return fallback([_utf8(v) for v in values])


_EMPTY = "the message is an empty JSON array: it holds no event"

#: ``schema.user_id`` value that takes each event's person from its Kafka record key
KEY_USER_ID = "@key"


def _key_column(keys: Sequence[bytes | None] | None, messages: np.ndarray, count: int) -> pa.Array:
    """Each event's person id from its message's record key: UTF-8 text; no key is a missing id
    (``missing_field``), a key that is not UTF-8 becomes ``"\\x00"`` (``invalid_user_id``)."""
    if keys is None or len(keys) != count:
        raise ValueError("schema.user_id is '@key' but the record keys were not passed to decode()")
    texts: list[str | None] = []
    for k in keys:
        if k is None:
            texts.append(None)
            continue
        try:
            texts.append(bytes(k).decode("utf-8"))
        except UnicodeDecodeError:
            texts.append("\x00")
    per_message = pa.array(texts, type=pa.string())
    return per_message.take(pa.array(messages, type=pa.int64())) if len(messages) else pa.array([], pa.string())
