"""Who is who in a timestep: finding the people with more than one event, fast and exactly.

Contribution bounding needs each event's person. Hashing every user id into
a dictionary (``pyarrow.compute.dictionary_encode``) costs about 200 ns per
event when nearly every id in a timestep is distinct, which is the usual
case (most people send one event per timestep) and was the largest cost of
a replay after CSV parsing. Instead:

1. :func:`person_hashes` gives each event a 64-bit hash of its user id's
   UTF-8 bytes (vectorised over the raw Arrow buffers, eight bytes at a time);
2. :func:`histogram.grouping.shared_hash_rows` sorts the hashes: an event whose hash no other
   event has is certainly the only event of its person (equal ids have equal
   hashes), so only the events with a shared hash (people with several
   events, plus rare collisions) go through the exact dictionary encoding.

The result is exact whatever the hash does: a collision only costs time.
Nothing here is random or leaves the process; the hashes are not stored.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from histogram.grouping import MULTIPLY, finish_hashes

__all__ = ["person_hashes"]

_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def _buffers(ids: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data bytes) of a string/binary array, offsets relative to the data returned."""
    width = 8 if pa.types.is_large_string(ids.type) or pa.types.is_large_binary(ids.type) else 4
    buffers = ids.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64 if width == 8 else np.int32,
                            count=len(ids) + 1, offset=width * ids.offset)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(buffers[2], dtype=np.uint8, count=hi - lo, offset=lo) if buffers[2] is not None and hi > lo \
        else np.zeros(0, dtype=np.uint8)
    return (offsets - lo).astype(np.int64, copy=False), data


def person_hashes(ids: pa.Array) -> np.ndarray:
    """A 64-bit hash (``uint64``) of each user id's bytes; equal ids get equal hashes.

    ``ids`` is a string or binary Arrow array without nulls (user ids are
    validated before windowing). The length is part of the hash, so ids
    differing only by trailing NUL bytes still differ. Raises ``TypeError``
    for other array types.
    """
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    t = ids.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)):
        raise TypeError(f"person_hashes needs a string or binary array, got {t}")
    n = len(ids)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    offsets, data = _buffers(ids)
    lengths = np.diff(offsets)
    # the bytes as aligned little-endian words, zero-padded so that reading the word after any
    # id's last byte stays inside; an id's w-th 8 bytes are two aligned words spliced by shifts
    # (measured: a strided unaligned-view gather was 3x slower)
    padded = np.zeros((data.size // 8 + 2) * 8, dtype=np.uint8)
    padded[: data.size] = data
    words = padded.view("<u8")
    h = lengths.astype(np.uint64)
    rows: np.ndarray | None = None  # None: all rows
    longest = int(lengths.max())
    for w in range((longest + 7) // 8 or 1):
        if w:  # only the ids longer than 8·w bytes have a word here
            rows = np.flatnonzero(lengths > 8 * w) if rows is None else rows[lengths[rows] > 8 * w]
        first = offsets[:-1] + 8 * w if rows is None else offsets[rows] + 8 * w
        left = lengths - 8 * w if rows is None else lengths[rows] - 8 * w
        q = first >> 3
        r = ((first & 7) << 3).astype(np.uint64)
        x = words[q]
        x >>= r
        hi = words[q + 1]
        hi <<= np.uint64(63) - r  # two shifts: a shift by 64 (r == 0) is not defined
        hi <<= np.uint64(1)
        x |= hi
        x &= _MASKS[np.minimum(left, 8)]
        if rows is None:
            h *= MULTIPLY
            h ^= x
        else:
            h[rows] = h[rows] * MULTIPLY ^ x
    return finish_hashes(h)
