"""The lab's runner (:func:`stream.lab.runner.run_many`) where ``run_fast`` used to go:
user-level uniform and fixed (a unit ledger whose window spans the stream), user-level DSAT and DSFT
(their own ``decide_runs``, the horizon's last timestep at each run's rest), and stateful or delayed
post-processing (``kalman``, ``ewma``, ``model``, ``release.delay``) over the stack of runs.

* With :class:`EngineNoise` (each run draws from the engine's own drawers) every run's decisions and
  ε equal stepping the engine (:func:`stream.lab.runs.run_method`) and its error figures agree to
  1e-12 relative (the delayed timesteps are summed in another order);
* with :class:`PooledNoise` (block draws) the runs have the engine's distribution (means within 4
  standard errors);
* each comparison is shown to fail on a deliberately broken variant.
Also: batched query answers, parallel methods, the t quantile and the progress bar."""

from __future__ import annotations

import json

import numpy as np
import pytest

from histogram.accuracy import QueryIndex
from histogram.noise import Randomness
from histogram.postprocess import PostProcessor
from stream.config import Settings
from stream.lab import evaluate as ev
from stream.lab import noise as lab_noise
from stream.lab import runner as vec
from stream.lab.metrics import build_workload, summarise
from tests.stream.lab.test_evaluate import _config, _settings, _truth
from tests.stream.lab.test_runner import same_run

KEYS = ("mae", "mre", "query_abs_error", "query_rel_error")

#: (privacy unit, method, release.postprocess, release.delay)
CASES = [
    ("user-level", "uniform", "none", 0),
    ("user-level", "fixed", "nonnegative", 0),
    ("user-level", "fixed", "kalman", 0),
    ("user-level", "uniform", "model", 2),
    ("w-event", "uniform", "kalman", 0),
    ("w-event", "fixed", "nonnegative+ewma+integer", 0),
    ("w-event", "sample", "model", 0),
    ("w-event", "fixed", "model-perbin", 3),
]


def _case(unit: str, method: str, post: str, delay: int, timesteps: int = 30):
    config = _config(unit, bins=10, horizon=timesteps, cutoff=3, w=4, epsilon=1.0, population=200)
    config["release"].update(decision=method, postprocess=post, delay=delay)
    s = Settings(**config).validate_all()
    w = build_workload(_truth(timesteps, 10, 200, seed=1), s.domain().shape, queries=30, seed=3)
    return s, w


def _workload(truth, settings, queries=40):
    return build_workload(truth, settings.domain().shape, queries=queries, seed=3)


def _engine_runs(s, w, seed, runs):
    return [ev.run_method(s, w, Randomness.seeded(seed + r)) for r in range(runs)]


def _same_as_engine(s, w, seed: int, runs: int) -> bool:
    res = vec.run_many(s, w, runs, lab_noise.EngineNoise(seed, s.stream.id))
    return all(same_run(res, r, trace, 1e-12) for r, trace in enumerate(_engine_runs(s, w, seed, runs)))


@pytest.mark.parametrize(("unit", "method", "post", "delay"), CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_the_runner_equals_the_engine_for_user_level_and_stateful_post_processing(unit, method, post, delay):
    s, w = _case(unit, method, post, delay)
    assert vec.runner_eligible(s)
    assert _same_as_engine(s, w, 11, 3)


@pytest.mark.parametrize(("method", "threshold", "floor"), [("dsat", 0.05, False), ("dsat", 0.1, True),
                                                            ("dsft", 0.3, False), ("dsft", 0.1, True)])
def test_the_runner_equals_the_engine_for_user_level_dsat_and_dsft(method, threshold, floor):
    """User-level DSAT/DSFT through the runner: horizon 24 of 30 timesteps and C = 6, so the runs
    query, stop at C releases or take their own rest at the horizon's last timestep, and republish
    past it; the runs decide apart (shown), and each equals the engine run with its seed."""
    config = _config("user-level", bins=10, horizon=24, cutoff=6, epsilon=1.0, population=200)
    config["release"].update(decision=method, threshold=threshold, noise_floor=floor)
    s = Settings(**config).validate_all()
    w = build_workload(_truth(30, 10, 200, seed=1), s.domain().shape, queries=30, seed=3)
    assert vec.runner_eligible(s)
    assert _same_as_engine(s, w, 11, 4)
    sources = {tuple(x for x in tr.sources) for tr in _engine_runs(s, w, 11, 4)}
    assert len(sources) > 1  # the runs made different decisions


def test_the_equality_check_catches_a_smoother_told_every_timestep_is_fresh(monkeypatch):
    """Not vacuous: a runner that fed the filter republished counts as new measurements differs."""
    s, w = _case("w-event", "fixed", "kalman", 0)
    real = PostProcessor.apply

    def always_fresh(self, state, counts, half_width, confidence, fresh):
        if counts.ndim == 2:  # the runner's stack, not the engine's one run
            fresh = True
        return real(self, state, counts, half_width, confidence, fresh)

    monkeypatch.setattr(PostProcessor, "apply", always_fresh)
    assert not _same_as_engine(s, w, 11, 3)


def test_the_equality_check_catches_a_delay_whose_tail_is_not_smoothed(monkeypatch):
    """Not vacuous: a runner that published the last ``delay`` timesteps as zeros (instead of the
    filter's pending estimates, as run_method does) differs."""
    s, w = _case("user-level", "uniform", "model", 2)
    monkeypatch.setattr(vec._Smoother, "finish", lambda self, timesteps, publish: [
        publish(t, np.zeros((self.runs, w.bins))) for t in range(timesteps - self.post.delay, timesteps)])
    assert not _same_as_engine(s, w, 11, 2)


def _equivalent(a: list[dict], b: list[dict], key: str) -> bool:
    """Two samples of a metric agree: means within 4 standard errors of their difference."""
    x = np.array([m[key] for m in a])
    y = np.array([m[key] for m in b])
    se = np.sqrt(x.var(ddof=1) / x.size + y.var(ddof=1) / y.size)
    return bool(abs(x.mean() - y.mean()) <= 4 * se + 1e-12)


@pytest.mark.parametrize(("unit", "method", "post", "delay"), CASES[:5], ids=["-".join(map(str, c)) for c in CASES[:5]])
def test_block_draws_have_the_engines_distribution(unit, method, post, delay):
    s, w = _case(unit, method, post, delay)
    runs = 40
    fast = vec.run_many(s, w, runs, lab_noise.PooledNoise(11, s.stream.id, method)).metrics
    slow = [t.metrics for t in _engine_runs(s, w, 11, runs)]
    for key in ("fresh_releases", "epsilon_spent", "max_window_spend"):  # shared decisions: identical
        assert {m[key] for m in fast} == {m[key] for m in slow}
    for key in ("mae", "mre", "query_abs_error"):
        assert _equivalent(fast, slow, key), key


def test_the_distribution_check_catches_block_draws_at_twice_the_scale(monkeypatch):
    s, w = _case("user-level", "uniform", "none", 0)
    slow = [t.metrics for t in _engine_runs(s, w, 5, 40)]
    real = lab_noise.PooledNoise.laplace_each
    monkeypatch.setattr(lab_noise.PooledNoise, "laplace_each",
                        lambda self, rows, num, den, size: real(self, rows, num * 2, den, size))
    broken = vec.run_many(s, w, 40, lab_noise.PooledNoise(5, s.stream.id, "uniform")).metrics
    assert not _equivalent(broken, slow, "mae")


def test_where_the_runner_cannot_go_the_engine_runs():
    """Stateful post-processing behind a data-dependent method (its runs release fresh at different
    timesteps, under either unit) and a mechanism other than LPA take the engine per run."""
    for unit, method, post in (("w-event", "dsat", "kalman"), ("user-level", "dsat", "kalman"),
                               ("user-level", "dsft", "nonnegative+ewma")):
        s, _ = _case(unit, method, post, 0)
        assert not vec.runner_eligible(s), (unit, method, post)
    psd = _config("w-event", bins=10, w=4, cutoff=3)
    psd["release"].update(decision="uniform", mechanism="psd")
    assert not vec.runner_eligible(Settings(**psd).validate_all())
    s, w = _case("w-event", "dsat", "nonnegative+integer", 0)
    assert vec.runner_eligible(s) and _same_as_engine(s, w, 4, 2)  # a stateless chain: the runner
    s, w = _case("user-level", "dsft", "nonnegative", 0)
    assert vec.runner_eligible(s) and _same_as_engine(s, w, 4, 2)


def test_a_stateful_chain_refuses_runs_that_decide_apart():
    s, w = _case("w-event", "fixed", "kalman", 0)
    smoother = vec._Smoother(s.postprocessor(), s.engine().mechanism, 3)
    with pytest.raises(RuntimeError, match="decisions must be shared"):
        smoother.step(0, None, np.array([0, 2]), np.array([1, 1]), None, lambda t, c: None)


def test_evaluate_takes_the_runner_for_user_level_and_smoothed_methods(monkeypatch):
    """No engine run per run for these any more (run_fast's run 0 was one)."""
    s, w = _case("user-level", "fixed", "none", 0)

    def engine_path(*args, **kwargs):
        raise AssertionError("stepped the engine per run")

    monkeypatch.setattr(ev, "run_method", engine_path)
    got = ev.evaluate(s, w.truth, ["uniform", "fixed+kalman", "uniform+model"], runs=3, queries=10, seed=2,
                      progress=False)
    assert set(got["methods"]) == {"uniform", "fixed+kalman", "uniform+model"}
    assert got["methods"]["fixed+kalman"]["fresh_releases"] == 3.0


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
