"""The records scale-out workers hand the releaser (``kafka.shuffle_topic``).

One record per input partition per worker transaction (and as many row records as the rows
need to fit ``kafka.max_request_size``): rows the worker accepted, grouped by timestep cell, and
the partition's completeness frontier (the record time it is known to be past). Key: the
partition number. MessagePack (msgspec) with the columns as raw little-endian buffers, so the
releaser reads them without a Python object per row:

``{"p": 3, "frontier": 1704067321.5 | null, "cells": [[cell, flat int64 LE bytes, event time
float64 LE bytes, person offsets int32 LE bytes, person UTF-8 bytes], …]}``

Raw per-person rows: the shuffle topic is internal and must be protected like the input topic
(``docs/privacy.md`` §9). Inclusion was decided by the worker from each event's own fields
(:meth:`stream.ingest.windowing.Grid.inclusion`); the releaser only merges, bounds each person
to one record per timestep (so a row handed over twice after a crash counts once) and seals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import msgspec
import numpy as np
import pyarrow as pa

from stream.ingest.windowing import TimestepData
from stream.service.journal import JournalError

__all__ = ["ShuffleRecord", "ShuffleTopicRefused", "check_shuffle_partitions", "decode", "encode", "shuffle_topic"]


def shuffle_topic(settings: object) -> str:
    """The configured ``kafka.shuffle_topic``, or ``<input_topic>.<stream id>.shuffle``."""
    k = settings.kafka  # type: ignore[attr-defined]
    return k.shuffle_topic or f"{k.input_topic}.{settings.stream.id}.shuffle"  # type: ignore[attr-defined]


class ShuffleTopicRefused(JournalError):
    """The shuffle topic does not have exactly one partition: refuse to start (fail closed)."""


def check_shuffle_partitions(topic: str, partitions: object) -> None:
    """Refuse a shuffle topic with other than exactly one partition.

    The releaser relies on order across workers: a partition's frontier is read after the rows it
    covers (each worker sends its rows first, then its frontiers, in one transaction), which only
    one partition guarantees. On two partitions a frontier could overtake rows and a timestep be
    released without them. ``partitions``: the topic's partition ids (None/empty: not created yet,
    nothing to check).

    Raises:
        ShuffleTopicRefused: more than one partition.
    """
    parts = sorted(partitions or ())  # type: ignore[call-overload]
    if len(parts) > 1:
        raise ShuffleTopicRefused(
            f"the shuffle topic {topic!r} has {len(parts)} partitions; scale-out needs exactly one (rows and "
            "frontiers are ordered on it: on several, a frontier can overtake the rows it covers and a "
            "timestep be released without them). Fix: delete and recreate it with one partition (it holds "
            "only data not yet released; stop workers and releaser first), or set kafka.shuffle_topic to a "
            "new one-partition topic")


class _Wire(msgspec.Struct, forbid_unknown_fields=True, array_like=True):
    p: int
    frontier: float | None
    cells: list[tuple[int, bytes, bytes, bytes, bytes]]


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_Wire)
_I8, _F8, _I4 = np.dtype("<i8"), np.dtype("<f8"), np.dtype("<i4")


@dataclass(frozen=True)
class ShuffleRecord:
    """What one shuffle record says: partition ``partition`` of the input is complete up to
    record time ``frontier`` (None: nothing known yet), and these rows were accepted from it."""

    partition: int
    frontier: float | None
    cells: tuple[TimestepData, ...]


def _strings(users: pa.Array) -> tuple[bytes, bytes]:
    """(int32 offsets from 0, UTF-8 data) of a string array (no nulls: person keys are valid)."""
    arr = users.cast(pa.string()) if users.type != pa.string() else users
    if arr.null_count:
        raise ValueError("a shuffle row without a person key")
    offsets = np.frombuffer(arr.buffers()[1], dtype=_I4)[arr.offset:arr.offset + len(arr) + 1]
    data = arr.buffers()[2]
    start, end = int(offsets[0]), int(offsets[-1])
    body = b"" if data is None else data.to_pybytes()[start:end]
    return (offsets - start).astype(_I4).tobytes(), body


def encode(record: ShuffleRecord) -> bytes:
    f = record.frontier
    cells = []
    for d in record.cells:
        offsets, body = _strings(d.user_id)
        cells.append((int(d.cell), np.ascontiguousarray(d.flat, dtype=_I8).tobytes(),
                      np.ascontiguousarray(d.time, dtype=_F8).tobytes(), offsets, body))
    return _ENCODER.encode(_Wire(record.partition, None if f is None or not math.isfinite(f) else float(f), cells))


def decode(value: bytes) -> ShuffleRecord:
    """Raises ``msgspec.DecodeError`` or ValueError on anything that is not a well-formed shuffle record."""
    w = _DECODER.decode(value)
    cells = []
    for cell, flat_b, time_b, off_b, body in w.cells:
        flat = np.frombuffer(flat_b, dtype=_I8).astype(np.int64)
        time = np.frombuffer(time_b, dtype=_F8).astype(np.float64)
        offsets = np.frombuffer(off_b, dtype=_I4)
        n = flat.size
        if time.size != n or offsets.size != n + 1 or (n and (offsets[0] != 0 or offsets[-1] != len(body)
                                                          or np.any(np.diff(offsets) < 0))):
            raise ValueError(f"shuffle cell {cell} has inconsistent columns")
        users = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(body)])
        users.validate(full=True)  # UTF-8 checked: a corrupt record is refused, not half-read
        cells.append(TimestepData(int(cell), flat, time, users))
    return ShuffleRecord(w.p, w.frontier, tuple(cells))
