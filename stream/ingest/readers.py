"""What a format's schema compiler produces (:mod:`stream.ingest.avro`, :mod:`stream.ingest.protobuf`,
:mod:`stream.ingest.json_schema`) and what :class:`stream.ingest.formats.WireDecoder` consumes: the
mapped fields (:class:`FieldPath`), the compiled reader of one writer schema (:class:`RecordReader`),
and the two ways it refuses (a schema without a mapped field, a record that cannot be read).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FieldPath", "RecordError", "RecordReader", "SchemaMismatchError"]


@dataclass(frozen=True)
class FieldPath:
    """One mapped field: ``role`` says what it is for (in error messages), ``path`` where it is.

    ``kind``: ``user_id``, ``time``, ``numeric`` or ``categorical`` (what the column must hold).
    """

    role: str
    path: tuple[str, ...]
    kind: str

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


class SchemaMismatchError(Exception):
    """A writer schema lacks (or mistypes) a mapped field: its records are ``schema_mismatch``."""


class RecordError(Exception):
    """One record cannot be read; ``reason`` is its dead-letter reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class RecordReader:
    """A writer schema compiled against the field mapping.

    ``read(payload)`` decodes one whole wire-format record (header included) into a tuple of the
    mapped values in :class:`FieldPath` order; it raises :class:`RecordError` for a reason of its
    own, anything else is ``undecodable``. ``time_scale``: seconds per unit of the event-time
    numbers it returns (``1e-3`` for Avro ``timestamp-millis``).
    """

    read: Callable[[bytes], tuple[Any, ...]]
    time_scale: float = 1.0
