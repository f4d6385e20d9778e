"""Which rows may share a person: 64-bit hashes of user ids, and the rows whose hash repeats.

Contribution bounding only has work to do for people with several rows in a
timestep, and most people have one. A row whose id hash no other row has is
certainly its person's only row (equal ids have equal hashes), so exact
grouping (sorting or dictionary-encoding ids, the expensive part) is needed
only for the rows with a repeated hash: people with several rows, plus rare
collisions, which cost time and never correctness.

Pure numpy; :mod:`stream.ingest.people` hashes Arrow string arrays with the same word mixing.
Nothing here is random or leaves the process.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MULTIPLY", "finish_hashes", "fixed_width_hashes", "shared_hash_rows", "single_rows"]

MULTIPLY = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constants (golden ratio; murmur3 finaliser)
_FINAL = np.uint64(0xFF51AFD7ED558CCD)
_SHIFT = np.uint64(29)


def finish_hashes(h: np.ndarray) -> np.ndarray:
    """Final avalanche of accumulated word hashes (in place; returns ``h``)."""
    h *= _FINAL
    h ^= h >> _SHIFT
    return h


def fixed_width_hashes(ids: np.ndarray) -> np.ndarray:
    """A 64-bit hash (``uint64``) of each element of a fixed-width ``U`` or ``S`` array.

    numpy pads fixed-width strings with zeros and equal strings have equal
    padded bytes, so equal ids get equal hashes.
    """
    if ids.dtype.kind not in "US":
        raise TypeError(f"fixed_width_hashes needs a numpy str or bytes array, got dtype {ids.dtype}")
    n = ids.size
    width = ids.dtype.itemsize
    raw = np.ascontiguousarray(ids).reshape(n).view(np.uint8).reshape(n, width)
    words = -(-width // 8)
    if words * 8 != width:
        padded = np.zeros((n, words * 8), dtype=np.uint8)
        padded[:, :width] = raw
        raw = padded
    cols = raw.view("<u8")  # (n, words)
    h = np.zeros(n, dtype=np.uint64)
    for j in range(words):
        h *= MULTIPLY
        h ^= cols[:, j]
    return finish_hashes(h)


def shared_hash_rows(hashes: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows whose hash occurs more than once.

    A row outside the mask is the only row of its person (exactly: equal
    ids have equal hashes).
    """
    n = hashes.size
    if n < 2:
        return np.zeros(n, dtype=bool)
    s = np.sort(hashes)
    repeated = s[1:] == s[:-1]
    if not repeated.any():
        return np.zeros(n, dtype=bool)
    dup = s[1:][repeated]  # sorted: its distinct values without another sort
    shared = dup[np.concatenate(([True], dup[1:] != dup[:-1]))]
    # prefilter through a bitmap of the top bits (about 64 slots per shared hash): searchsorted
    # over every row was measured 10x slower than this bitmap and a search over the few passing
    bits = min(max(int(shared.size * 64).bit_length(), 8), 26)
    slot_shift = np.uint64(64 - bits)
    bitmap = np.zeros(1 << bits, dtype=bool)
    bitmap[(shared >> slot_shift).astype(np.intp)] = True
    maybe = np.flatnonzero(bitmap[(hashes >> slot_shift).astype(np.intp)])
    pos = np.searchsorted(shared, hashes[maybe])
    np.minimum(pos, shared.size - 1, out=pos)
    out = np.zeros(n, dtype=bool)
    out[maybe[shared[pos] == hashes[maybe]]] = True
    return out


def single_rows(user_ids: np.ndarray) -> np.ndarray:
    """Rows that are certainly the only row of their person (False where unsure).

    Integer and fixed-width string ids are hashed; other arrays (Python
    objects) give all False.
    """
    ids = np.asarray(user_ids)
    if ids.dtype.kind in "iu":  # mixed: the bitmap in shared_hash_rows reads the top bits
        return ~shared_hash_rows(finish_hashes(ids.astype(np.int64).view(np.uint64) * MULTIPLY))
    if ids.dtype.kind in "US":
        return ~shared_hash_rows(fixed_width_hashes(ids))
    return np.zeros(ids.size, dtype=bool)
