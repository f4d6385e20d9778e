"""The fast lab: the vectorised path for data-independent methods against the engine's step path,
the batched metrics against the per-step accumulator, and parallel methods against serial."""

from __future__ import annotations

import json

import numpy as np
import pytest

from histogram.noise import Randomness
from stream.lab import evaluate as ev
from stream.lab.metrics import QueryIndex, Workload, summarise
from tests.stream.lab.test_evaluate import _settings, _truth


def _workload(truth, settings, queries=40):
    return Workload.build(truth, settings.domain().shape, queries=queries, seed=3)


def _engine_runs(s, w, seed, runs):
    return [ev.run_method(s, w, Randomness.seeded(seed + r)) for r in range(runs)]


def _equivalent(a: list[dict], b: list[dict], key: str) -> bool:
    """Two samples of a metric agree: means within 4 standard errors of their difference."""
    x = np.array([m[key] for m in a])
    y = np.array([m[key] for m in b])
    se = np.sqrt(x.var(ddof=1) / x.size + y.var(ddof=1) / y.size)
    return bool(abs(x.mean() - y.mean()) <= 4 * se)


@pytest.mark.parametrize("unit,decision", [("w-event", "uniform"), ("w-event", "fixed"),
                                           ("user-level", "uniform"), ("user-level", "fixed")])
def test_fast_path_matches_the_engine_step_path(unit, decision):
    base = _settings(unit, bins=10, horizon=30, cutoff=3, w=4, epsilon=1.0)
    s = ev.check_methods(base, [decision])[decision]
    assert ev.fast_eligible(s)
    w = _workload(_truth(30, 10, 200), s)
    runs = 60
    fast = ev.run_fast(s, w, 11, runs)
    slow = _engine_runs(s, w, 11, runs)
    # run 0 is the engine's own run, bit for bit (what replay --seed 11 publishes)
    assert fast[0].metrics == slow[0].metrics and fast[0].sources == slow[0].sources
    # the privacy figures are the engine's, identical in every run
    for key in ("epsilon_spent", "max_window_spend", "fresh_releases"):
        assert {tr.metrics[key] for tr in fast} == {slow[0].metrics[key]}
        assert {tr.metrics[key] for tr in slow} == {slow[0].metrics[key]}
    for key in ("mae", "mre", "query_abs_error"):
        assert _equivalent([t.metrics for t in fast[1:]], [t.metrics for t in slow[1:]], key), key


def test_the_comparison_catches_a_fast_path_with_the_wrong_noise(monkeypatch):
    """Not vacuous: the same comparison fails when the fast path draws noise at twice the scale."""
    s = ev.check_methods(_settings("w-event", bins=10, w=4, cutoff=2), ["uniform"])["uniform"]
    w = _workload(_truth(30, 10, 200), s)
    real = type(Randomness.seeded(0).drawer("t", 0)).discrete_laplace

    def doubled(self, scale, size=None):
        return real(self, scale * 2, size)

    slow = _engine_runs(s, w, 5, 40)
    monkeypatch.setattr(type(Randomness.seeded(0).drawer("t", 0)), "discrete_laplace", doubled)
    broken = ev.run_fast(s, w, 5, 40)
    assert not _equivalent([t.metrics for t in broken[1:]], [t.metrics for t in slow[1:]], "mae")


def test_data_dependent_methods_take_the_engine_path():
    base = _settings("w-event", bins=10, w=4, cutoff=2)
    per = ev.check_methods(base, ["dsat", "bd", "ba", "uniform"])
    assert [m for m, s in per.items() if ev.fast_eligible(s)] == ["uniform"]


def test_batched_answers_equal_the_per_histogram_answers():
    s = _settings("w-event", bins=50, w=4, cutoff=2)
    w = _workload(_truth(25, 50, 300), s, queries=64)
    rng = np.random.default_rng(0)
    fresh = w.truth[[0, 3, 9, 20]] + rng.integers(-5, 6, (4, 50))
    q = w.queries
    assert isinstance(q, QueryIndex)
    assert np.allclose(q.answer_batch(fresh), np.stack([q.answer(r) for r in fresh]))


def test_parallel_methods_give_the_serial_result():
    s = _settings("w-event", bins=10, w=4, cutoff=2)
    truth = _truth(20, 10, 200)
    one = ev.evaluate(s, truth, ["dsat", "uniform", "bd"], runs=3, queries=20, jobs=1)
    two = ev.evaluate(s, truth, ["dsat", "uniform", "bd"], runs=3, queries=20, jobs=2)
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)
    assert list(two["methods"]) == ["dsat", "uniform", "bd"]
    with pytest.raises(ev.EvaluationError, match="--jobs"):
        ev.evaluate(s, truth, ["dsat"], runs=1, jobs=-1)


def test_summaries_use_the_t_quantile():
    out = summarise([{"x": 1.0}, {"x": 2.0}, {"x": 3.0}], 0.95)
    # mean 2, sd 1, n 3: t(2, 0.975) = 4.302653
    assert out["x_ci"] == pytest.approx([2 - 4.302653 / 3**0.5, 2 + 4.302653 / 3**0.5], rel=1e-6)


@pytest.mark.parametrize("smoother", ["kalman", "nonnegative+ewma+integer"])
def test_smoothed_fast_path_matches_the_engine_step_path(smoother):
    s = ev.check_methods(_settings("w-event", bins=10, w=4, cutoff=2), [f"uniform+{smoother}"])[f"uniform+{smoother}"]
    w = _workload(_truth(30, 10, 200), s)
    fast = ev.run_fast(s, w, 2, 50)
    slow = [ev.run_method(s, w, Randomness.seeded(2 + r)) for r in range(50)]
    assert fast[0].metrics == slow[0].metrics
    for key in ("mae", "query_abs_error"):
        assert _equivalent([t.metrics for t in fast[1:]], [t.metrics for t in slow[1:]], key), key


def test_progress_bar_only_on_a_terminal_or_when_asked():
    import io

    from stream.lab.progress import progress_bar

    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert progress_bar(10, None, "x", file=io.StringIO()) is None  # not a terminal: quiet
    assert progress_bar(10, False, "x", file=Tty()) is None
    out = Tty()
    bar = progress_bar(10, None, "evaluate", unit="timestep", file=out)
    assert bar is not None
    bar.update(10)
    assert "evaluate" in out.getvalue() and "100%" in out.getvalue() and "10/10 timestep" in out.getvalue()
    bar.close()
    assert out.getvalue().endswith("\r")
    forced = io.StringIO()
    bar = progress_bar(4, True, "read", file=forced)
    bar.update(2)
    bar.close()
    assert "2/4" in forced.getvalue()
