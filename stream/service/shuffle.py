"""The records scale-out workers hand the releaser (``kafka.shuffle_topic``).

One record per input partition per worker transaction: the rows the worker accepted from that
partition since its last transaction, grouped by timestep cell, and the partition's completeness
frontier (the record time it is known to be past). Key: the partition number. JSON (msgspec):

``{"p": 3, "frontier": 1704067321.5, "cells": [[cell, [bin, …], [event time, …], [person, …]], …]}``

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

__all__ = ["ShuffleRecord", "decode", "encode", "shuffle_topic"]


def shuffle_topic(settings: object) -> str:
    """The configured ``kafka.shuffle_topic``, or ``<input_topic>.<stream id>.shuffle``."""
    k = settings.kafka  # type: ignore[attr-defined]
    return k.shuffle_topic or f"{k.input_topic}.{settings.stream.id}.shuffle"  # type: ignore[attr-defined]


class _Wire(msgspec.Struct, forbid_unknown_fields=True):
    p: int
    frontier: float | None
    cells: list[tuple[int, list[int], list[float], list[str]]]


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(_Wire)


@dataclass(frozen=True)
class ShuffleRecord:
    """What one shuffle record says: partition ``partition`` of the input is complete up to
    record time ``frontier`` (None: nothing known yet), and these rows were accepted from it."""

    partition: int
    frontier: float | None
    cells: tuple[TimestepData, ...]


def encode(record: ShuffleRecord) -> bytes:
    f = record.frontier
    wire = _Wire(record.partition, None if f is None or not math.isfinite(f) else float(f),
                 [(d.cell, d.flat.tolist(), d.time.tolist(), d.user_id.to_pylist()) for d in record.cells])
    return _ENCODER.encode(wire)


def decode(value: bytes) -> ShuffleRecord:
    """Raises ``msgspec.DecodeError`` (a ValueError) on anything that is not a shuffle record."""
    w = _DECODER.decode(value)
    cells = []
    for cell, flat, time, users in w.cells:
        if not len(flat) == len(time) == len(users):
            raise msgspec.ValidationError(f"shuffle cell {cell} has columns of different lengths")
        cells.append(TimestepData(int(cell), np.asarray(flat, dtype=np.int64), np.asarray(time, dtype=np.float64),
                                  pa.array(users, type=pa.string())))
    return ShuffleRecord(w.p, w.frontier, tuple(cells))
