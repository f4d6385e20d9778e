"""The structural filter (issue 30 items 1-3): ``model``/``model-perbin`` follow a seasonal
series and a level shift from noisy releases better than the releases themselves, the fixed-lag
smoother (``release.delay``) helps, the state continues bit for bit from its JSON snapshot
(restart = same bytes), and republished timesteps add no information."""

from __future__ import annotations

import json

import numpy as np
import pytest

from histogram.postprocess import PostProcessor, noise_variance

CONF = 0.95
B = 60.0  # Laplace scale of the test releases
H = B * np.log(1 / (1 - CONF))


def _run(pp: PostProcessor, truth: np.ndarray, seed: int = 0, every: int = 1) -> np.ndarray:
    """Published counts per timestep (aligned to the timestep they are for)."""
    rng = np.random.default_rng(seed)
    state, outs, last = pp.initial(), [], None
    for t in range(truth.shape[0]):
        fresh = t % every == 0
        if fresh:
            last = truth[t] + rng.laplace(0, B, truth.shape[1:])
        out, state = pp.apply(state, last, np.full(truth.shape[1:], H), CONF, fresh)
        outs.append(out.counts)
    res = np.asarray(outs)
    if pp.delay:
        res = np.concatenate([res[pp.delay:], pp.pending(state, truth.shape[1:])])
    return res


def _jump(t: int = 600) -> np.ndarray:
    return np.where(np.arange(t) < t // 2, 200.0, 700.0)[:, None] * np.ones((1, 3))


def test_the_noise_variance_is_the_releases():
    assert noise_variance(np.array([H]), CONF)[0] == pytest.approx(2 * B * B)


def test_a_level_shift_is_followed_within_a_few_releases_and_the_flat_parts_are_smoothed():
    truth = _jump()
    out = _run(PostProcessor(("model",)), truth)
    err = np.abs(out - truth).mean(axis=1)
    raw = np.sqrt(2) * B  # the releases' own sd; their mean absolute error is B
    assert err[100:300].mean() < 0.4 * B
    assert err[450:].mean() < 0.4 * B
    # reaction: within 5 timesteps of the jump the error is below the jump's half (250) ...
    assert err[305] < raw and err[310:].max() < 2 * raw


def test_a_jump_far_beyond_the_noise_restarts_the_bank_although_the_fast_filters_follow_it():
    """The bank's fastest filters (Q = 1000 R₀) follow a jump at its first release, so the second
    release is no surprise to the bank's new prediction; it is to the level predicted before the
    jump, and that is what the change detector compares it with: the bank restarts (every weight
    reset) at the second release after the jump, and on a flat stream it never does."""
    from histogram.statespace import CHANGE_RUN, ModelFilter

    rng = np.random.default_rng(4)
    f = ModelFilter()
    truth = np.where(np.arange(80) < 40, 10.0, 400.0)
    r = np.full((1, 2), 2.0)
    _, state = f.start(truth[:1, None] + rng.laplace(0, 1, (1, 2)), r)
    restarts = []
    for t in range(1, 80):
        _, state = f.step(state, truth[t] + rng.laplace(0, 1, (1, 2)), r, True)
        if (state["loglik"] == 0.0).all(axis=2).any():
            restarts.append(t)
    assert restarts == [40 + CHANGE_RUN - 1]


def test_a_state_from_another_filter_bank_is_refused_with_what_to_do():
    from histogram.statespace import ModelFilter, state_arrays, state_from_arrays

    _, state = ModelFilter().start(np.ones((1, 2)), np.ones((1, 2)))
    arrays = dict(state_arrays(state))
    arrays["x"] = arrays["x"][..., :-2]  # a version whose bank had two filters fewer
    with pytest.raises(ValueError, match="holds 16 filters.*another version of the filter.*new stream.id"):
        state_from_arrays(arrays)
    older = dict(state_arrays(state))
    del older["ref"], older["ref_v"]  # a version before the change detector's reference
    with pytest.raises(ValueError, match="needs the arrays.*another version of the filter"):
        state_from_arrays(older)


@pytest.mark.parametrize("chain", ["model", "model-trend"])
def test_a_level_shift_fixes_the_delayed_values_before_it_with_the_weights_before_it(chain):
    """A sparse schedule (a fresh release every 10 timesteps) and a jump at t = 50: the bank's fast
    filters follow the release at 50, the detector restarts the level at 60 and resets the weights.
    With a delay, the values of 58 and 59 are published at 60; nothing after the shift may reach
    them, and they must keep the weights before it (which favour the filters that followed the
    jump): before this fix they were weighted by the reset, uniform weights and published a third
    of the way back to the old level (682 where the truth and the undelayed filter are 557)."""
    truth = np.where(np.arange(120) < 50, 924.0, 557.0)[:, None]
    b = 5.0  # releases far more precise than the jump (Sample at ε = 1: noise scale 10)
    rng = np.random.default_rng(3)
    released = truth + rng.laplace(0, b, truth.shape)
    outs = {}
    for delay in (0, 2):
        pp = PostProcessor((chain,), delay=delay)
        state, got, last = pp.initial(), [], None
        for t in range(truth.shape[0]):
            fresh = t % 10 == 0
            last = released[t] if fresh else last
            out, state = pp.apply(state, last, np.full(1, b * np.log(1 / (1 - CONF))), CONF, fresh)
            got.append(out.counts)
        res = np.asarray(got)
        outs[delay] = np.concatenate([res[delay:], pp.pending(state, (1,))]) if delay else res
    assert np.abs(outs[0][51:60] - 557.0).max() < 4 * b  # the filter alone follows the jump
    assert np.abs(outs[2][51:60] - 557.0).max() < 4 * b, outs[2][51:60, 0]


def test_a_journal_from_before_the_fixed_positions_loads_with_none_fixed():
    from histogram.statespace import ModelFilter, state_arrays, state_from_arrays

    f = ModelFilter(delay=2)
    _, state = f.start(np.ones((1, 2)), np.ones((1, 2)))
    for _ in range(3):
        _, state = f.step(state, np.ones((1, 2)), np.ones((1, 2)), True)
    older = dict(state_arrays(state))
    del older["lag_fixed"]
    again = state_from_arrays(older)
    assert np.isnan(again["lag_fixed"]).all() and again["lag_fixed"].shape == (1, 2, 3)
    assert f.step(again, np.ones((1, 2)), np.ones((1, 2)), True)[0].tobytes() == \
        f.step(state, np.ones((1, 2)), np.ones((1, 2)), True)[0].tobytes()


def test_a_season_shared_by_bins_is_learnt_and_helps_the_quiet_bin():
    t = np.arange(900)
    shape = 1.0 + 0.8 * np.sin(2 * np.pi * t / 24)
    truth = shape[:, None] * np.array([20.0, 400.0, 800.0])[None, :]
    shared = np.abs(_run(PostProcessor(("model",)), truth) - truth)[450:].mean(axis=0)
    alone = np.abs(_run(PostProcessor(("model-perbin",)), truth) - truth)[450:].mean(axis=0)
    assert shared.mean() < 0.7 * B
    assert shared[0] < alone[0]  # the quiet bin borrows the busy bins' shape


def test_each_step_of_delay_helps_on_a_random_walk():
    rng = np.random.default_rng(5)
    truth = 500 + np.cumsum(rng.normal(0, 4, (800, 2)), axis=0)
    errs = [np.abs(_run(PostProcessor(("model",), delay=k), truth) - truth)[100:].mean() for k in (0, 1, 2)]
    assert errs[0] < 0.6 * B
    assert errs[2] < errs[1] < errs[0]


def test_republished_timesteps_add_no_information():
    """Feeding a republished timestep's copy as fresh changes the output; as republished it must
    be what a filter that never saw the copy predicts."""
    truth = _jump(200)
    a = _run(PostProcessor(("model",)), truth, every=3)
    b = _run(PostProcessor(("model",)), truth, every=1)
    assert not np.array_equal(a, b)
    pp, rng = PostProcessor(("model",)), np.random.default_rng(1)
    state = pp.initial()
    z = 300 + rng.laplace(0, B, 3)
    _, state = pp.apply(state, z, np.full(3, H), CONF, True)
    o1, s1 = pp.apply(state, z, np.full(3, H), CONF, False)
    o2, s2 = pp.apply(state, z + 1000.0, np.full(3, H), CONF, False)  # a republished value is not read
    assert np.array_equal(o1.counts, o2.counts) and s1 == s2


@pytest.mark.parametrize("chain,delay", [("model", 0), ("model-perbin", 0), ("model+nonnegative", 2),
                                         ("model-trend", 0), ("model-trend+nonnegative", 2)])
def test_a_restored_state_continues_bit_for_bit(chain, delay):
    pp = PostProcessor.for_stream(chain, population=1000, bins=3, delay=delay)
    truth, rng = _jump(120), np.random.default_rng(2)
    state = pp.initial()
    zs = [truth[t] + rng.laplace(0, B, 3) for t in range(120)]
    outs = []
    for t in range(60):
        o, state = pp.apply(state, zs[t], np.full(3, H), CONF, t % 2 == 0)
    restored = pp.state_from_json(json.loads(json.dumps(pp.state_to_json(state))), 3)
    assert restored == state
    s_a, s_b = state, restored
    for t in range(60, 120):
        oa, s_a = pp.apply(s_a, zs[t], np.full(3, H), CONF, t % 2 == 0)
        ob, s_b = pp.apply(s_b, zs[t], np.full(3, H), CONF, t % 2 == 0)
        outs.append(oa.counts.tobytes() == ob.counts.tobytes())
    assert all(outs) and s_a == s_b


def test_delay_needs_a_model_step_and_a_sane_range():
    with pytest.raises(ValueError, match="needs a model step"):
        PostProcessor(("kalman",), delay=1)
    with pytest.raises(ValueError, match="0..64"):
        PostProcessor(("model",), delay=99)
    with pytest.raises(ValueError, match="two smoothers"):
        PostProcessor(("model", "kalman"))


@pytest.mark.parametrize("step", ["model", "model-trend"])
def test_runs_side_by_side_equal_runs_one_at_a_time(step):
    """The lab passes all runs at once (leading axis): the same numbers as one run at a time."""
    truth = _jump(150)
    rng = np.random.default_rng(3)
    z = truth[None] + rng.laplace(0, B, (4,) + truth.shape)
    pp = PostProcessor((step,), delay=1)
    s_all, singles = pp.initial(), [pp.initial() for _ in range(4)]
    for t in range(150):
        o_all, s_all = pp.apply(s_all, z[:, t], np.full((4, 3), H), CONF, True)
        for r in range(4):
            o, singles[r] = pp.apply(singles[r], z[r, t], np.full(3, H), CONF, True)
            np.testing.assert_allclose(o.counts, o_all.counts[r], rtol=1e-12, atol=1e-9)


# -- the per-phase sums: fast, and the same floats as the one-hot contraction they replaced ------


def _phase_stats_by_one_hot(y, ry, t, period, cumulative=None):
    """The straightforward per-phase statistics (the filter's code before the speed-up, kept as
    the reference): a one-hot (N, H, P) matrix of each slot's phase contracted over the slots."""
    from histogram.statespace import _moving_average

    h = y.shape[-1]
    avg, count = _moving_average(y, period)
    half = period // 2
    centre = np.full(y.shape, np.nan)
    centre[..., half: half + avg.shape[-1]] = np.where(count >= max(2, period // 2), avg, np.nan)
    good = np.isfinite(y) & np.isfinite(centre) & (centre > 0)
    ratio = np.where(good, y / np.where(good, centre, 1.0), 0.0)
    noise = np.where(good, ry / np.where(good, centre, 1.0) ** 2, 0.0)
    slots = (t[:, None] - (h - 1) + np.arange(h)[None, :]).astype(np.int64) % period
    onehot = slots[:, :, None] == np.arange(period)[None, None, :]
    n = np.einsum("nsh,nhp->nsp", good.astype(np.float64), onehot)
    mean = np.einsum("nsh,nhp->nsp", ratio, onehot) / np.maximum(n, 1)
    var = np.einsum("nsh,nhp->nsp", noise, onehot) / np.maximum(n, 1) ** 2
    return mean, var, n


@pytest.mark.parametrize("same_timestep", [True, False])
def test_the_phase_statistics_are_the_one_hot_contraction_bit_for_bit(same_timestep):
    """Values spread over eleven orders of magnitude (so any change in the order of the additions
    shows in the last bits), a third of the slots not fresh (NaN), every period the filter tries,
    rows at one timestep (the lab's runs of one schedule) and at different ones."""
    from histogram.statespace import HISTORY, PERIOD_MAX, _phase_stats

    rng = np.random.default_rng(11)
    for period in range(2, PERIOD_MAX + 1):
        rows, series = int(rng.integers(1, 9)), int(rng.choice([1, 4]))
        shape = (rows, series, HISTORY)
        y = 50.0 + rng.standard_normal(shape) * 10.0 ** rng.integers(-4, 7, size=shape)
        y[rng.random(shape) < 0.3] = np.nan
        ry = rng.random(shape) * 10.0 ** rng.integers(-4, 7, size=shape)
        t = np.full(rows, float(rng.integers(0, 5000))) if same_timestep else rng.integers(0, 5000, rows) * 1.0
        for got, want in zip(_phase_stats(y, ry, t, period), _phase_stats_by_one_hot(y, ry, t, period), strict=True):
            assert got.shape == want.shape and got.tobytes() == want.tobytes(), f"period {period}"


@pytest.mark.parametrize("chain,delay", [("model", 0), ("model-perbin", 2)])
def test_the_filter_publishes_the_same_bytes_as_with_the_one_hot_phase_statistics(chain, delay, monkeypatch):
    """The whole filter over a seasonal stream with a level shift (periods found and re-chosen,
    the multiplier in use), four runs side by side: identical bytes with the reference."""
    import histogram.statespace as ss

    t = np.arange(400)
    truth = (300.0 + 200.0 * np.sin(2 * np.pi * t / 24))[:, None] * np.array([0.2, 1.0, 3.0]) + (t >= 250)[:, None] * 400
    rng = np.random.default_rng(4)
    z = truth[None] + rng.laplace(0, B, (4,) + truth.shape)

    def run() -> bytes:
        pp = PostProcessor((chain,), delay=delay)
        state, out = pp.initial(), []
        for k in range(truth.shape[0]):
            o, state = pp.apply(state, z[:, k], np.full((4, 3), H), CONF, k % 3 != 1)
            out.append(o.counts.tobytes())
        return b"".join(out)

    fast = run()
    monkeypatch.setattr(ss, "_phase_stats", _phase_stats_by_one_hot)
    assert fast == run()


@pytest.mark.parametrize("shared,delay,trend", [(True, 0, False), (False, 2, False), (True, 2, True)])
def test_a_step_leaves_the_state_it_was_given_unchanged(shared, delay, trend):
    """States are values (journaled, restored; ``PostProcessor.apply`` is pure): stepping from one,
    level shifts included (a bin's bank restarts, and with a delay the smoother's newest variance
    is cut), must not write into its arrays."""
    from histogram.statespace import ModelFilter

    filt, rng = ModelFilter(shared=shared, delay=delay, trend=trend), np.random.default_rng(1)
    level = np.where((np.arange(400) // 80) % 2 == 0, 200.0, 700.0)  # a jump of ~6 noise sds every 80
    r = np.full((8, 3), 2 * B * B)
    _, state = filt.start(level[0] + rng.laplace(0, B, (8, 3)), r)
    shifts = 0
    for t in range(1, 400):
        before = {k: v.copy() for k, v in state.arrays.items()}
        _, new = filt.step(state, level[t] + rng.laplace(0, B, (8, 3)), r, True)
        assert all(before[k].tobytes() == state.arrays[k].tobytes() for k in before), f"timestep {t}"
        shifts += int((new["loglik"] == 0.0).all(axis=2).sum())  # a restarted bank: every filter's weight reset
        state = new
    assert shifts > 0


def _sparse(truth: np.ndarray, chain: str, every: int, delay: int = 0, runs: int = 4) -> float:
    """MAE of ``chain`` over releases drawn every ``every`` timesteps (republished in between)."""
    return float(np.mean([np.abs(_run(PostProcessor(tuple(chain.split("+")), delay=delay), truth, seed=s,
                                      every=every) - truth)[every:].mean() for s in range(runs)]))


def test_the_trend_filters_follow_a_trend_between_sparse_releases():
    """``model-trend`` (issue 30 item 1: level + trend + season): on a linear trend released every
    25 timesteps, the level-only model repeats the last level (stale by up to 25 slopes); the
    trend filters carry the slope. With a delay the smoother also looks ahead."""
    truth = (100.0 + 4.0 * np.arange(600))[:, None] * np.ones((1, 2))
    level, trend = _sparse(truth, "model", 25), _sparse(truth, "model-trend", 25)
    assert trend < 0.6 * level, (trend, level)
    assert _sparse(truth, "model-trend", 25, delay=3) < trend


def test_the_trend_filters_cost_little_where_there_is_no_trend():
    """On flat parts and a level shift, the likelihood keeps the trend filters' weight low: within
    10 % of the level-only model, and the shift is still followed."""
    truth = _jump(600)
    level, trend = _sparse(truth, "model", 1), _sparse(truth, "model-trend", 1)
    assert trend < 1.1 * level, (trend, level)
    after = np.abs(_run(PostProcessor(("model-trend",)), truth) - truth)[310:].mean()
    assert after < 0.5 * B, after
