"""Identical range queries are answered once (issue 13 item 6: with one bin every query of the
workload is the same one) and the answers are the per-query ones, bit for bit."""

from __future__ import annotations

import numpy as np

from histogram.accuracy import QueryIndex, Workload
from histogram.query import RangeQueries
from stream.lab.metrics import build_workload


def _index(lo, hi, shape):
    return QueryIndex.compile(RangeQueries(np.asarray(lo), np.asarray(hi)), shape)


def _repeated(shape=(4, 3), distinct=5, total=40, seed=0):
    rng = np.random.default_rng(seed)
    lo = np.stack([rng.integers(0, s, distinct) for s in shape], axis=1)
    hi = np.stack([rng.integers(lo[:, a], s) for a, s in enumerate(shape)], axis=1)
    pick = rng.integers(0, distinct, total)
    return _index(lo[pick], hi[pick], shape)


def _counts(shape, k=7, seed=1):
    return np.random.default_rng(seed).integers(-50, 500, (k, int(np.prod(shape)))).astype(np.float64) / 4


def test_repeated_queries_take_the_distinct_path_and_give_every_querys_own_answer():
    q = _repeated()
    assert q._distinct is not None and q._distinct[0].shape[0] <= 5
    counts = _counts((4, 3))
    assert np.array_equal(q.answer_batch(counts), q.answer_many(counts))


def test_distinct_queries_keep_the_plain_path():
    shape = (6,)
    lo = np.arange(6)[:, None]
    q = _index(lo, lo, shape)
    assert q._distinct is None
    counts = _counts(shape)
    assert np.array_equal(q.answer_batch(counts), q.answer_many(counts))


def test_one_bin_workload_answers_equal_the_per_query_answers():
    truth = np.random.default_rng(2).integers(0, 1000, (50, 1))
    w = build_workload(truth, (1,), queries=200, seed=0)
    assert w.queries._distinct is not None and w.queries._distinct[0].shape[0] == 1
    assert np.array_equal(w.truth_answers, w.queries.answer_many(truth))


def test_the_check_catches_answers_copied_to_the_wrong_queries():
    q = _repeated()
    uniq, inverse = q._distinct
    q.__dict__["_distinct"] = (uniq, inverse[::-1].copy())  # deliberately wrong: answers land on other queries
    counts = _counts((4, 3))
    assert not np.array_equal(q.answer_batch(counts), q.answer_many(counts))


def test_a_pickled_workload_is_compact_and_unpickles_to_the_same_arrays():
    import pickle

    truth = np.random.default_rng(3).integers(0, 1000, (300, 1))
    w = build_workload(truth, (1,), queries=500, seed=0)
    data = pickle.dumps(w)
    assert len(data) < w.truth_answers.nbytes // 10  # each distinct query's answers once
    back = pickle.loads(data)
    assert np.array_equal(back.truth_answers, w.truth_answers) and back.truth_answers.flags["C_CONTIGUOUS"]
    assert np.array_equal(back.truth, w.truth) and back.shape == w.shape and back.sanity == w.sanity


def test_a_hand_made_workload_whose_copies_differ_is_pickled_whole():
    import pickle

    truth = np.random.default_rng(4).integers(0, 1000, (20, 1))
    w = build_workload(truth, (1,), queries=30, seed=0)
    answers = w.truth_answers.copy()
    answers[5, 7] += 1  # deliberately not a copy of its query's column
    odd = Workload(w.truth, w.shape, w.queries, answers, w.sanity)
    assert np.array_equal(pickle.loads(pickle.dumps(odd)).truth_answers, answers)
