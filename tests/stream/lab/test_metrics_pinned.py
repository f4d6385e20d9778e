"""The evaluation's error figures pinned on a small stream (issue 29: one error-metrics module).

Written before the metrics were merged into one implementation (now histogram.accuracy.RunErrors),
with the values the engine path (``run_method``), the non-private ``-true`` versions, the fast
path for data-independent methods (``run_fast``, now deleted: the runner takes user-level uniform) and
the reference rows gave then. The engine
path's figures on integer counts are pinned bit for bit (its sums keep their order); a smoothed
(non-integer) series' query answers are now computed in one pass over the stack
(``QueryIndex.answer_batch``), which may round the last bit differently from the per-histogram
``answer``, and the other paths summed the whole array at once: those are pinned to 1e-12 relative."""

from __future__ import annotations

import pytest

from histogram.noise import Randomness
from stream.lab import evaluate as ev
from stream.lab.metrics import build_workload
from tests.stream.lab.test_evaluate import _settings, _truth

KEYS = ("mae", "mre", "query_abs_error", "query_rel_error")

ENGINE = {
    "dsat": [8.120833333333334, 2.14713634895062, 16.245, 0.5185008323233559],
    "dsat-true": [1.9333333333333333, 0.4846003870856812, 3.1125, 0.10820820317995386],
    "uniform": [15.0625, 4.441187310191934, 33.9225, 1.2911187697495345],
    "uniform-true": [0.0, 0.0, 0.0, 0.0],
    "dsat+kalman": [7.761121070203042, 1.962888941347151, 14.493181138354835, 0.45953299035006595],
    "dsat+kalman-true": [1.9333333333333333, 0.4846003870856812, 3.1125, 0.10820820317995386],
    "uniform+nonnegative": [10.658333333333333, 2.6916330295926136, 30.67, 1.0593097906966225],
    "uniform+nonnegative-true": [0.0, 0.0, 0.0, 0.0],
}
#: user-level uniform, three runs with the engine's drawers (seeds 7, 8, 9). Run 0 is what run_fast's
#: run 0 (the engine's own run) gave; run_fast drew runs 1 and 2 from a drawer of its own
#: ([14.6625, 4.404123789381538, 37.85, 1.286379223491718] and [16.208333333333332,
#: 5.607351536471702, 37.955, 1.5141431201090547]); the runner with EngineNoise draws the engine's.
FAST = [[15.0625, 4.441187310191934, 33.9225, 1.2911187697495345],
        [17.791666666666668, 5.699726201873724, 40.5825, 1.6044607727191555],
        [17.558333333333334, 5.194888320773, 40.24, 1.9233251332148842]]
REFERENCES = {"zero-release": [10.0, 0.8916666666666667, 51.805, 1.0],
              "previous-true": [2.558333333333333, 0.5429337204190146, 6.5125, 0.1707082031799539]}


@pytest.fixture(scope="module")
def stream():
    base = _settings("user-level", bins=15, horizon=16, cutoff=4, epsilon=1.0)
    truth = _truth(16, 15, 150, seed=4)
    w = build_workload(truth, base.domain().shape, queries=25, seed=5)
    return ev.check_methods(base, ["dsat", "uniform", "dsat+kalman", "uniform+nonnegative"]), w


def test_engine_path_and_true_versions_are_pinned_bit_for_bit(stream):
    per, w = stream
    got = {}
    for name, s in per.items():
        tr = ev.run_method(s, w, Randomness.seeded(7))
        got[name] = [tr.metrics[k] for k in KEYS]
        got[f"{name}-true"] = [ev.true_version(w, tr.sources)[k] for k in KEYS]
    smoothed = {name for name in ENGINE if "+kalman" in name and not name.endswith("-true")}
    assert {k: v for k, v in got.items() if k not in smoothed} == {k: v for k, v in ENGINE.items() if k not in smoothed}
    assert {k: got[k] for k in smoothed} == {k: pytest.approx(ENGINE[k], rel=1e-12) for k in smoothed}


def test_runner_and_reference_rows_are_pinned(stream):
    from stream.lab.noise import EngineNoise
    from stream.lab.runner import run_many

    per, w = stream
    fast = run_many(per["uniform"], w, 3, EngineNoise(7, per["uniform"].stream.id))
    assert [[m[k] for k in KEYS] for m in fast.metrics] == [pytest.approx(row, rel=1e-12) for row in FAST]
    refs = ev.reference_rows(w)
    assert {n: [refs[n][k] for k in KEYS] for n in REFERENCES} == {
        n: pytest.approx(row, rel=1e-12) for n, row in REFERENCES.items()}
