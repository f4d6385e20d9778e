"""The Schema Registry wire format: how a record names its writer schema.

A record's value is ``0x00`` (the magic byte), the writer schema's id as 4 bytes big-endian,
then — Protobuf only — the *message indexes* (which message of the schema's .proto file: a
zigzag varint count, then that many zigzag varints, each an index among the file's top-level
messages and then among the nested ones; a count of 0, a single ``0x00`` byte, means ``[0]``, the
file's first message), then the body in the format's own binary encoding.
"""

from __future__ import annotations

__all__ = ["MAGIC", "HEADER", "frame", "message_indexes", "encode_indexes"]

MAGIC = 0
HEADER = 5
#: more message indexes than this is not a real nesting depth: the record is refused
MAX_INDEXES = 64


def frame(schema_id: int, body: bytes, indexes: bytes = b"") -> bytes:
    """A wire-format record (tests and benchmarks; producers use their client's serializer)."""
    return bytes([MAGIC]) + int(schema_id).to_bytes(4, "big") + indexes + body


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("the message indexes end before the record does")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
        if shift > 63:
            raise ValueError("a message index varint is longer than 64 bits")
    return (value >> 1) ^ -(value & 1), pos


def message_indexes(data: bytes, pos: int = HEADER) -> tuple[tuple[int, ...], int]:
    """``(indexes, body start)`` of a Protobuf record whose indexes start at ``pos``.

    Raises:
        ValueError: truncated, negative or absurdly many indexes.
    """
    if pos < len(data) and data[pos] == 0:  # the common case: the first message
        return (0,), pos + 1
    count, pos = _varint(data, pos)
    if not 0 < count <= MAX_INDEXES:
        raise ValueError(f"{count} message indexes")
    out = []
    for _ in range(count):
        i, pos = _varint(data, pos)
        if i < 0:
            raise ValueError("a negative message index")
        out.append(i)
    return tuple(out), pos


def encode_indexes(indexes: tuple[int, ...]) -> bytes:
    """The message indexes as they go on the wire (``(0,)`` is the single byte 0)."""
    if tuple(indexes) == (0,):
        return b"\x00"
    out = bytearray()
    for v in (len(indexes), *indexes):
        z = (v << 1) ^ (v >> 63)
        while z & ~0x7F:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        out.append(z)
    return bytes(out)
