"""The lab's runner (policies' own runs-axis rules over R runs) against the engine's step path.

* With :class:`EngineNoise` (each run draws from the engine's own drawers, in the engine's order) a
  run must publish, decide and charge exactly what stepping the engine does: every published
  count, every source timestep, every ε, and the metrics (to rounding of the sums).
* With :class:`PooledNoise` (the default: same exact sampler, drawn in blocks) the runs have the
  engine's distribution: means within 4 standard errors.
* Each comparison is shown to fail on a deliberately broken variant.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from benchmarks.families import settings_for
from histogram.noise import Randomness
from histogram.postprocess import postprocess
from stream.config import Settings
from stream.lab import evaluate as ev
from stream.lab import noise as lab_noise
from stream.lab import runner as vec
from stream.lab.metrics import build_workload
from stream.planning.families import family_series
from tests.histogram.test_noise_sampler import DRAWS, check_discrete_laplace
from tests.stream.lab.test_evaluate import _config, _settings, _truth

METHODS = ["uniform", "fixed", "sample", "dsat", "dsft", "bd", "ba", "pegasus", "fast", "adapub", "rescuedp",
           "adaptive-sample"]


def _small(method: str, bins: int = 10, post: str | None = None):
    base = _settings("w-event", bins=bins, w=4, cutoff=2, epsilon=1.0, population=200)
    name = method if post is None else f"{method}+{post}"
    s = ev.check_methods(base, [name])[name]
    w = build_workload(_truth(40, bins, 200, seed=1), s.domain().shape, queries=30, seed=3)
    return s, w


def _engine_run(s, w, seed):
    """The engine stepped as ``run_method`` does, keeping what it published."""
    engine, rnd = s.engine(), Randomness.seeded(seed)
    state, out = engine.initial_state(), []
    for t in range(w.timesteps):
        release, state = engine.step(state, w.truth[t], rnd.drawer(s.stream.id, t, "release"))
        out.append(np.asarray(postprocess(s.release.postprocess, release.counts), dtype=np.float64))
    return np.stack(out), ev.run_method(s, w, Randomness.seeded(seed))


def same_run(res, r: int, trace, rel: float) -> bool:
    """Run ``r`` of the runner's result decided, spent and scored as the engine's ``trace``."""
    if [-1 if x is None else x for x in trace.sources] != res.sources[r].tolist():
        return False
    if trace.epsilons != res.epsilons(r):
        return False
    return all(res.metrics[r][key] == pytest.approx(value, rel=rel, abs=1e-12, nan_ok=True)
               for key, value in trace.metrics.items())


def _same_as_engine(s, w, seed: int, runs: int, noise=None) -> bool:
    res = vec.run_many(s, w, runs, noise or lab_noise.EngineNoise(seed, s.stream.id), keep_published=True)
    for r in range(runs):
        published, trace = _engine_run(s, w, seed + r)
        if not np.array_equal(published, res.published[r]) or not same_run(res, r, trace, 1e-9):
            return False
    return True


@pytest.mark.parametrize("method", METHODS)
def test_every_kernel_equals_the_engine_bit_for_bit(method):
    s, w = _small(method)
    assert vec.runner_eligible(s)
    assert _same_as_engine(s, w, 5, 3)


@pytest.mark.parametrize("method", ["dsat", "bd", "pegasus", "fast", "adapub", "rescuedp", "adaptive-sample"])
def test_kernels_equal_the_engine_with_post_processing_and_few_bins(method):
    s, w = _small(method, bins=5, post="nonnegative")
    assert _same_as_engine(s, w, 8, 2)


@pytest.mark.parametrize("method,epsilon,w", [("dsat", 0.1, 50), ("dsft", 1.0, 10), ("bd", 0.1, 10),
                                              ("ba", 1.0, 50), ("fast", 0.1, 50), ("pegasus", 1.0, 10),
                                              ("adapub", 1.0, 10), ("rescuedp", 0.1, 50),
                                              ("adaptive-sample", 0.1, 50), ("adaptive-sample", 1.0, 10)])
def test_kernels_equal_the_engine_on_a_benchmark_family_stream(method, epsilon, w):
    """The benchmark's shape: one bin, large counts, the generated config (threshold, PID, C = w)."""
    base = settings_for("sine", epsilon, w, 1000.0)
    s = ev.check_methods(base, [method])[method]
    wl = build_workload(family_series("sine", 150, 1), s.domain().shape, queries=50, seed=3)
    assert _same_as_engine(s, wl, 7, 2)


class _DoubledQueryNoise(lab_noise.EngineNoise):
    """Deliberately wrong: the SVT query noise / dissimilarity test at twice its scale."""

    def __init__(self, seed, stream, target):
        super().__init__(seed, stream)
        self.target = target

    def laplace(self, runs, scale, size):
        return super().laplace(runs, scale * 2 if scale == self.target else scale, size)


@pytest.mark.parametrize("method", ["dsat", "bd"])
def test_the_equality_check_catches_a_kernel_with_the_wrong_decision_noise(method):
    s, w = _small(method)
    policy = s.engine().policy
    target = policy.calibration.query_scale if method == "dsat" else Fraction(1) / policy.test_epsilon
    assert not _same_as_engine(s, w, 5, 3, _DoubledQueryNoise(5, s.stream.id, target))


def test_the_equality_check_catches_a_ledger_that_does_not_bound_the_window(monkeypatch):
    s, w = _small("dsat")
    monkeypatch.setattr(vec.UnitLedger, "can_spend", lambda self, t, amount: np.ones(self.runs, dtype=bool))
    monkeypatch.setattr(vec.UnitLedger, "used", lambda self, t: np.zeros(self.runs, dtype=np.int64))
    assert not _same_as_engine(s, w, 5, 3)


def _within(a: list[float], b: list[float]) -> bool:
    x, y = np.asarray(a), np.asarray(b)
    se = np.sqrt(x.var(ddof=1) / x.size + y.var(ddof=1) / y.size)
    return bool(abs(x.mean() - y.mean()) <= 4 * se + 1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_pooled_noise_runs_have_the_engines_distribution(method):
    s, w = _small(method)
    runs = 40
    fast = vec.run_many(s, w, runs, lab_noise.PooledNoise(3, s.stream.id, method))
    slow = [ev.run_method(s, w, Randomness.seeded(100 + r)) for r in range(runs)]
    for key in ("mae", "query_abs_error", "fresh_releases", "epsilon_spent", "max_window_spend"):
        assert _within([m[key] for m in fast.metrics], [t.metrics[key] for t in slow]), key
    assert max(m["max_window_spend"] for m in fast.metrics) <= 1.0


def test_the_distribution_check_catches_release_noise_at_twice_the_scale(monkeypatch):
    s, w = _small("bd")
    runs = 40
    slow = [ev.run_method(s, w, Randomness.seeded(100 + r)) for r in range(runs)]
    real = lab_noise.PooledNoise.laplace_each

    def doubled(self, rows, num, den, size):
        return real(self, rows, num * 2, den, size)

    monkeypatch.setattr(lab_noise.PooledNoise, "laplace_each", doubled)
    fast = vec.run_many(s, w, runs, lab_noise.PooledNoise(3, s.stream.id, "bd"))
    assert not _within([m["mae"] for m in fast.metrics], [t.metrics["mae"] for t in slow])


SCALES = [Fraction(1, 2), Fraction(1), Fraction(7, 3), Fraction(20)]


def _assembled(scale: Fraction, *, reject_negative_zero: bool = True) -> np.ndarray:
    """``scale`` interleaved with other scales, every scale rare (the assembled path)."""
    noise = lab_noise.PooledNoise(11, "s", "pmf")
    noise.POOL_AFTER = 10**9  # never give a scale its own block
    others = [Fraction(1, 3), Fraction(9), Fraction(50, 7)]
    scales = [scale if i % 4 == 0 else others[i % 4 - 1] for i in range(4 * DRAWS)]
    num = np.array([x.numerator for x in scales], dtype=np.int64)
    den = np.array([x.denominator for x in scales], dtype=np.int64)
    if not reject_negative_zero:

        def sloppy(t, s):  # deliberately wrong: keeps (−, 0) as a second 0
            x = np.concatenate([noise._block("x", int(v), 1).take(1) for v in t])
            neg = noise._block("sign", 0, 1).take(t.size).astype(bool)
            y = x // s
            return np.where(neg, -y, y)

        noise._assembled = sloppy  # type: ignore[method-assign]
    return noise.laplace_each(np.arange(num.size), num, den, 1)[::4, 0]


@pytest.mark.parametrize("scale", SCALES, ids=str)
def test_assembled_rare_scales_have_the_exact_pmf(scale):
    report = check_discrete_laplace(_assembled(scale), scale)
    assert report.ok, (report.failures, report.stats)


def test_the_pmf_check_catches_an_assembly_that_keeps_negative_zero():
    report = check_discrete_laplace(_assembled(Fraction(1, 2), reject_negative_zero=False), Fraction(1, 2))
    assert not report.ok


def test_evaluate_uses_the_kernels_and_replayable_steps_the_engine():
    s, w = _small("dsat")
    truth = w.truth
    fast = ev.evaluate(s, truth, ["dsat", "bd"], runs=3, queries=10, seed=2, progress=False)
    slow = ev.evaluate(s, truth, ["dsat", "bd"], runs=3, queries=10, seed=2, progress=False, replayable=True)
    first = ev.run_method(ev.check_methods(s, ["dsat"])["dsat"],
                          build_workload(truth, s.domain().shape, queries=10, seed=2), Randomness.seeded(2))
    # --replayable: run 0 is what replay --seed 2 publishes; the default: other draws, same law
    assert slow["methods"]["dsat"]["mae"] != fast["methods"]["dsat"]["mae"]
    per_run = ev.evaluate(s, truth, ["dsat"], runs=1, queries=10, seed=2, progress=False, replayable=True)
    assert per_run["methods"]["dsat"]["mae"] == pytest.approx(first.metrics["mae"])
    assert set(fast["methods"]) == {"dsat", "bd"}


def test_ineligible_configurations_take_the_engine_path():
    # a stateful post-processor behind a data-dependent method: its runs release at other timesteps
    config = _config("user-level", bins=10)
    config["release"].update(decision="dsat", postprocess="kalman")
    user = Settings(**config).validate_all()
    assert not vec.runner_eligible(user)
    with pytest.raises(ValueError, match="does not take"):
        vec.run_many(user, build_workload(_truth(5, 10), user.domain().shape, queries=0, seed=0), 2,
                           lab_noise.PooledNoise(0, "t", "x"))


def test_fast_w_survives_an_error_that_overflows_exp():
    """The sine family at ε = 0.1, w = 50 crashed FAST_w's controller: exp((control − ξ)/ξ) overflowed.
    The capped exponent gives the interval the uncapped maths would (1), in the engine and the kernel."""
    import math

    from controller.policies.wevent import FAST_MAX_EXPONENT, FastState
    from histogram.mechanism import NoisyHistogram

    s = ev.check_methods(settings_for("sine", 0.1, 50, 1000.0), ["fast"])["fast"]
    policy = s.engine().policy
    state = FastState(np.array([1.0]), 1.0, 3, 4, 4, (1e4,) * 4)
    noisy = NoisyHistogram(np.array([10**6]), policy.per_sample, np.array([np.inf]), 0.95)
    control = policy.cp * 1e4  # far beyond where exp overflows
    with pytest.raises(OverflowError):
        math.exp((control - policy.xi) / policy.xi)  # what the uncapped controller computed
    out, new = policy.smooth(state, 4, noisy)
    assert new.interval == 1 and new.next_sample == 5
    assert FAST_MAX_EXPONENT < math.log(np.finfo(np.float64).max)
    wl = build_workload(family_series("sine", 200, 1), s.domain().shape, queries=0, seed=3)
    assert _same_as_engine(s, wl, 7, 2)


def test_the_t_quantile_equals_scipys():
    """``t_quantile`` (closed form, no scipy import) against ``scipy.special.stdtrit``."""
    from scipy.special import stdtrit

    from stream.lab.metrics import t_quantile

    for df in [*range(1, 60), 99, 100, 999]:
        for confidence in (0.5, 0.9, 0.95, 0.99):
            assert t_quantile(df, confidence) == pytest.approx(float(stdtrit(df, 0.5 + confidence / 2)), rel=1e-10)
    with pytest.raises(ValueError):
        t_quantile(0, 0.95)


def test_post_processed_variants_share_the_runs_decisions():
    """``m`` and ``m+nonnegative`` draw the same noise (post-processing cannot change a decision), so
    the clamped variant has the same releases, clamped: never more error, and less on a sparse stream."""
    s = _settings("w-event", bins=10, w=4, cutoff=2, epsilon=1.0, population=200)
    truth = _truth(40, 10, 20, seed=1)  # two people per bin: noise often goes below zero
    res = ev.evaluate(s, truth, ["bd", "bd+nonnegative", "dsat", "dsat+nonnegative"], runs=4, queries=10,
                      seed=5, progress=False)
    m = res["methods"]
    for base in ("bd", "dsat"):
        assert m[f"{base}+nonnegative"]["fresh_releases"] == m[base]["fresh_releases"]
        assert m[f"{base}+nonnegative"]["epsilon_spent"] == m[base]["epsilon_spent"]
        assert m[f"{base}+nonnegative"]["mae"] < m[base]["mae"]


@pytest.mark.parametrize("method", ["uniform", "fixed", "sample"])
def test_schedule_path_makes_the_generic_kernels_decisions(method):
    """Uniform, fixed and Sample with block draws take one ledger row for every run: the same
    decisions, ε and window figures as the per-run kernel (which the engine comparison covers)."""
    s, w = _small(method)
    fast = vec.run_many(s, w, 6, lab_noise.PooledNoise(3, s.stream.id, method))
    generic = vec.run_many(s, w, 6, lab_noise.PooledNoise(3, s.stream.id, method), keep_published=True)
    assert np.array_equal(fast.sources, generic.sources)
    assert np.array_equal(fast.fresh_units, generic.fresh_units)
    for key in ("fresh_releases", "epsilon_spent", "max_window_spend"):
        assert [m[key] for m in fast.metrics] == [m[key] for m in generic.metrics]


def test_replayable_is_a_noise_source_of_the_one_run_path(monkeypatch):
    """--replayable runs the same lab path with the engine's drawers: each run equals stepping the
    engine with seed + r (what replay --seed seed+r publishes); the engine-stepping path is not used."""
    s, w = _small("dsat")
    workload = build_workload(w.truth, s.domain().shape, queries=10, seed=2)
    per_run = [ev.run_method(ev.check_methods(s, ["dsat"])["dsat"], workload, Randomness.seeded(2 + r)).metrics
               for r in range(3)]

    def engine_path(*args, **kwargs):
        raise AssertionError("replayable evaluation stepped the engine path")

    monkeypatch.setattr(ev, "run_method", engine_path)
    got = ev.evaluate(s, w.truth, ["dsat"], runs=3, queries=10, seed=2, progress=False, replayable=True, jobs=1)
    for key in ("mae", "fresh_releases", "epsilon_spent", "max_window_spend"):
        assert got["methods"]["dsat"][key] == pytest.approx(np.mean([m[key] for m in per_run]), rel=1e-12), key
