"""histogram.accuracy.RunErrors, the one implementation of the evaluation's error figures: a stack
of runs gives each run's own figures, blocks give the per-step floats, and the figures are the
thesis's definitions (checked against a direct formula)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from histogram.accuracy import RunErrors, Workload, stream_errors
from stream.lab.metrics import build_workload
from tests.stream.lab.test_evaluate import _settings, _truth


@pytest.fixture(scope="module")
def workload():
    s = _settings("w-event", bins=50, w=4, cutoff=2)
    return build_workload(_truth(25, 50, 300), s.domain().shape, queries=64, seed=3)


def _published(w: Workload, runs: int, seed: int = 0) -> np.ndarray:
    """``(runs, T, U)``: each run republishes a noisy release for a few steps (zeros first)."""
    rng = np.random.default_rng(seed)
    out = np.zeros((runs, w.timesteps, w.bins))
    for r in range(runs):
        src = -1
        for t in range(w.timesteps):
            if t >= 2 and rng.random() < 0.4:
                src = t
            if src >= 0:
                out[r, t] = out[r, t - 1] if src != t else w.truth[t] + rng.normal(0, 3, w.bins)
    return out


def _direct(w: Workload, pub: np.ndarray) -> dict[str, float]:
    """The thesis's averages written out: mean |R − H| and |R − H| / max(s, H), bins and queries."""
    err = np.abs(pub - w.truth)
    answers = np.stack([w.queries.answer(row) for row in pub])
    qerr = np.abs(answers - w.truth_answers)
    return {"mae": err.mean(), "mre": (err / np.maximum(w.sanity, w.truth)).mean(),
            "query_abs_error": qerr.mean(), "query_rel_error": (qerr / np.maximum(w.sanity, w.truth_answers)).mean()}


def test_a_stack_of_runs_gives_each_runs_own_figures(workload):
    w = workload
    pub = _published(w, 5)
    acc = RunErrors(w, 5)
    for t in range(w.timesteps):
        acc.add(t, pub[:, t])
    stacked = acc.metrics()
    for r in range(5):
        alone = RunErrors(w)
        for t in range(w.timesteps):
            alone.add(t, pub[r, t])
        assert alone.metrics()[0] == stacked[r]  # the same floats, whatever the stack
        assert stacked[r] == pytest.approx(_direct(w, pub[r]), rel=1e-12)
    # whole runs at once, and in uneven blocks: the same floats again
    assert stream_errors(w, pub) == stacked
    blocks = RunErrors(w, 5)
    for lo, hi in ((0, 1), (1, 9), (9, 10), (10, 25)):
        blocks.add_block(lo, pub[:, lo:hi])
    assert blocks.metrics() == stacked


def test_republished_counts_reuse_their_answers_and_changed_ones_do_not(workload, monkeypatch):
    w = workload
    pub = _published(w, 3, seed=1)
    answered = []
    real = type(w.queries).answer_batch
    monkeypatch.setattr(type(w.queries), "answer_batch", lambda self, c: answered.append(len(c)) or real(self, c))
    stream_errors(w, pub)
    changes = 3 + int(np.any(pub[:, 1:] != pub[:, :-1], axis=2).sum())
    assert sum(answered) == changes < 3 * w.timesteps


def test_without_queries_the_query_figures_are_nan_and_shapes_are_checked(workload):
    w = Workload(workload.truth, workload.shape, None, None)
    m = stream_errors(w, np.zeros_like(w.truth))[0]
    assert m["mae"] == pytest.approx(w.truth.mean()) and math.isnan(m["query_abs_error"])
    acc = RunErrors(w, 2)
    with pytest.raises(ValueError, match=r"expected \(runs=2, bins=50\)"):
        acc.add(0, np.zeros(50))
    with pytest.raises(ValueError, match=r"expected \(runs=2, timesteps, bins=50\)"):
        acc.add_block(0, np.zeros((3, 50)))
    with pytest.raises(ValueError, match="outside the workload"):
        acc.add_block(24, np.zeros((2, 2, 50)))
