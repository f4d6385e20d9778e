"""stream.ingest.people: user-id hashes and the rows that may share a person; TimestepData.counts against a reference."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from histogram.build import build_histogram
from histogram.grouping import shared_hash_rows
from stream.ingest.people import person_hashes
from stream.ingest.windowing import TimestepData
from stream.service.allocator import tune_allocator


def reference_hashes_equal(ids: list[str]) -> np.ndarray:
    """Pairwise: hash equality must follow id equality (equal ids → equal hashes)."""
    h = person_hashes(pa.array(ids, pa.string()))
    for i, a in enumerate(ids):
        for j, b in enumerate(ids):
            if a == b:
                assert h[i] == h[j]
    return h


def test_equal_ids_hash_equal_and_typical_ids_do_not_collide():
    ids = [f"p{i}" for i in range(20_000)] + ["é", "é" * 9, "x" * 17, "x" * 16, "", "a\x00", "a"]
    h = person_hashes(pa.array(ids + ids, pa.string()))
    n = len(ids)
    assert np.array_equal(h[:n], h[n:])
    assert np.unique(h[:n]).size == n  # not required for exactness, but a bad hash would be slow


def test_trailing_nul_bytes_and_lengths_are_part_of_the_hash():
    h = person_hashes(pa.array(["ab", "ab\x00", "ab\x00\x00\x00\x00\x00\x00", "ab\x00" * 4], pa.string()))
    assert np.unique(h).size == 4


def test_sliced_chunked_large_and_binary_arrays():
    base = pa.array([f"user-{i:05d}-" + "z" * (i % 23) for i in range(1000)], pa.string())
    whole = person_hashes(base)
    assert np.array_equal(person_hashes(base.slice(100, 300)), whole[100:400])
    assert np.array_equal(person_hashes(pa.chunked_array([base.slice(0, 10), base.slice(10)])), whole)
    assert np.array_equal(person_hashes(base.cast(pa.large_string())), whole)
    assert np.array_equal(person_hashes(base.cast(pa.binary())), whole)
    assert person_hashes(pa.array([], pa.string())).size == 0
    with pytest.raises(TypeError, match="string or binary"):
        person_hashes(pa.array([1, 2]))


def test_shared_rows_are_exactly_the_repeated_hashes():
    h = np.array([5, 3, 5, 9, 1, 3, 3, 7], dtype=np.uint64)
    assert shared_hash_rows(h).tolist() == [True, True, True, False, False, True, True, False]
    assert not shared_hash_rows(np.array([4, 2, 8], dtype=np.uint64)).any()
    assert shared_hash_rows(np.zeros(0, dtype=np.uint64)).size == 0
    big = np.random.default_rng(1).integers(0, 2**63, 50_000, dtype=np.uint64)
    big[7] = big[40_000]
    assert np.flatnonzero(shared_hash_rows(big)).tolist() == [7, 40_000]


def test_a_collision_costs_time_not_correctness(monkeypatch):
    # every id hashes alike: the exact grouping must still count each person once
    import stream.ingest.windowing as windowing

    monkeypatch.setattr(windowing, "person_hashes", lambda ids: np.zeros(len(ids), dtype=np.uint64))
    data = TimestepData(0, np.array([0, 1, 2, 1]), np.array([1.0, 2.0, 3.0, 0.5]),
                        pa.array(["a", "b", "c", "a"], pa.string()))
    assert data.counts(3).tolist() == [0, 2, 1]  # a keeps its earliest record (bin 1), b and c theirs


@settings(max_examples=60, deadline=None)
@given(
    people=st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=12, unique=True),
    rows=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=80),
    per_person=st.integers(1, 3),
)
def test_counts_equal_the_reference_bounding(people, rows, per_person):
    uid = [people[p % len(people)] for p, _, _ in rows]
    flat = np.array([b for _, b, _ in rows], dtype=np.int64)
    time = np.array([t for _, _, t in rows], dtype=np.float64)
    got = TimestepData(0, flat, time, pa.array(uid, pa.string())).counts(6, per_person)
    codes = np.unique(np.array(uid, dtype=object), return_inverse=True)[1]
    ref = build_histogram_reference(codes, flat, time, per_person)
    assert got.tolist() == ref.tolist()


def build_histogram_reference(codes: np.ndarray, flat: np.ndarray, time: np.ndarray, per_person: int) -> np.ndarray:
    """Plain Python: each person's ``per_person`` smallest (time, bin) rows, ties by input order."""
    out = np.zeros(6, dtype=np.int64)
    for person in set(codes.tolist()):
        mine = sorted((time[i], flat[i], i) for i in np.flatnonzero(codes == person))
        for _, b, _ in mine[:per_person]:
            out[b] += 1
    return out


def test_counts_match_build_histogram_on_many_people():
    rng = np.random.default_rng(3)
    n = 30_000
    uid = np.char.add("u", rng.integers(0, 20_000, n).astype(str))
    flat = rng.integers(0, 50, n)
    time = rng.integers(0, 100, n).astype(np.float64)
    got = TimestepData(0, flat, time, pa.array(uid.tolist(), pa.string())).counts(50)
    ref = build_histogram  # the engine's reference path: codes, user ids, order key
    from histogram.domain import CategoricalAttribute, Domain

    dom = Domain([CategoricalAttribute("b", tuple(str(i) for i in range(50)))])
    assert got.tolist() == ref(dom, {"b": flat}, user_ids=uid, order_key=time, codes=True).counts.tolist()


def test_tune_allocator_applies_on_glibc_and_defers_to_the_environment(monkeypatch):
    import sys

    monkeypatch.setenv("MALLOC_TOP_PAD_", "0")
    assert not tune_allocator().applied
    monkeypatch.delenv("MALLOC_TOP_PAD_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0")
    assert not tune_allocator().applied
    monkeypatch.delenv("GLIBC_TUNABLES")
    result = tune_allocator()
    if sys.platform.startswith("linux"):
        assert result.applied, result.reason
        assert result.mmap_threshold == 32 << 20


def test_fixed_width_hashes_and_single_rows_on_numpy_ids():
    from histogram.grouping import fixed_width_hashes, single_rows

    ids = np.array(["a", "bb", "a", "ccc" * 5, "é", "bb"])
    h = fixed_width_hashes(ids)
    assert h[0] == h[2] and h[1] == h[5] and np.unique(h).size == 4
    b = fixed_width_hashes(np.array([b"ab", b"abc", b"ab", b"x" * 20]))
    assert b[0] == b[2] and np.unique(b).size == 3
    assert single_rows(ids).tolist() == [False, False, False, True, True, False]
    assert single_rows(np.array([3, 1, 3, 2**40])).tolist() == [False, True, False, True]
    assert not single_rows(np.array(["x", "y"], dtype=object)).any()  # objects: unsure, never wrong
    with pytest.raises(TypeError, match="numpy str or bytes"):
        fixed_width_hashes(np.array([1.0]))


@settings(max_examples=60, deadline=None)
@given(
    people=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=10, unique=True),
    rows=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=60),
    per_person=st.integers(1, 3),
    kind=st.sampled_from(["U", "O", "int"]),
)
def test_bound_contributions_equals_the_reference_for_every_id_kind(people, rows, per_person, kind):
    from histogram.build import bound_contributions

    uid = [people[p % len(people)] for p, _, _ in rows]
    ids = {"U": np.array(uid), "O": np.array(uid, dtype=object),
           "int": np.array([people.index(u) * 7919 for u in uid])}[kind]
    flat = np.array([b for _, b, _ in rows], dtype=np.int64)
    time = np.array([t for _, _, t in rows], dtype=np.float64)
    keep = bound_contributions(ids, flat, time, per_person)
    got = np.bincount(flat[keep], minlength=6)
    codes = np.unique(np.array(uid, dtype=object), return_inverse=True)[1]
    assert got.tolist() == build_histogram_reference(codes, flat, time, per_person).tolist()
