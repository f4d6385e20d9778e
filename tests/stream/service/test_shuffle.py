"""The shuffle record codec: exact round trips (sliced arrays, non-ASCII keys, empty cells), and
anything malformed is refused whole, never half-read."""

from __future__ import annotations

import msgspec
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream.ingest.windowing import TimestepData
from stream.service.shuffle import ShuffleRecord, decode, encode


@given(rows=st.lists(st.tuples(st.integers(0, 2**40), st.floats(allow_nan=False, allow_infinity=False),
                               st.text(min_size=1, max_size=8)), max_size=40),
       cut=st.integers(0, 5), frontier=st.one_of(st.none(), st.floats(0, 2e9)))
def test_round_trip(rows, cut, frontier) -> None:
    flat = np.array([r[0] for r in rows] + [0] * cut, dtype=np.int64)
    time = np.array([r[1] for r in rows] + [0.0] * cut, dtype=np.float64)
    users = pa.array([r[2] for r in rows] + ["x"] * cut, type=pa.string())
    n = len(rows)
    data = TimestepData(3, flat[:n], time[:n], users.slice(0, n))  # a slice of larger arrays
    back = decode(encode(ShuffleRecord(7, frontier, (data, TimestepData(4, flat[:0], time[:0], users.slice(0, 0))))))
    assert back.partition == 7 and back.frontier == frontier
    got = back.cells[0]
    assert got.cell == 3 and np.array_equal(got.flat, flat[:n]) and got.user_id.to_pylist() == [r[2] for r in rows]
    assert np.array_equal(got.time, time[:n])
    assert back.cells[1].cell == 4 and len(back.cells[1]) == 0


def _one() -> bytes:
    d = TimestepData(1, np.array([5, 6]), np.array([1.5, 2.5]), pa.array(["ab", "c"]))
    return encode(ShuffleRecord(0, 1.0, (d,)))


def test_malformed_records_are_refused() -> None:
    good = msgspec.msgpack.decode(_one())
    bad_offsets = [good[0], good[1], [[1, good[2][0][1], good[2][0][2], np.array([0, 9, 3], "<i4").tobytes(),
                                       good[2][0][4]]]]
    bad_utf8 = [good[0], good[1], [[1, *good[2][0][1:4], b"\xff\xfe\xfd"]]]
    short_time = [good[0], good[1], [[1, good[2][0][1], good[2][0][2][:8], *good[2][0][3:]]]]
    for doc in (bad_offsets, bad_utf8, short_time):
        with pytest.raises(ValueError):
            decode(msgspec.msgpack.encode(doc))
    with pytest.raises(ValueError):
        decode(b"{not a record")
