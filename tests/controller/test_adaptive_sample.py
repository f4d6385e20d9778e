"""Adaptive Sample (``decision: adaptive-sample``): its audit with broken variants, the estimate and
the choice it drives, and the service's journaled state.

The audit's checks are those of the other w-event mechanisms (:mod:`tests.controller.test_wevent_audit`):
draws vs charges and window sums (exact, from the ledger), every fresh release charged ``ε/c`` for
a divisor ``c`` of ``w``, locality by exact coupling (a neighbour at ``s`` with the release noise of
``s`` shifted so the release is the same: every later release must be identical, i.e. the interval
is chosen from releases only), and one released count's loss (Clopper–Pearson, statistical).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np
import pytest

from controller.accountant import Accountant, WindowAccountant
from controller.errors import ConfigurationError, StateError
from controller.method import MethodSpec, build_engine
from controller.policies.adaptive import (
    AdaptiveRuns,
    AdaptiveSamplePolicy,
    AdaptiveState,
    divisors,
    predicted_errors,
)
from controller.step import Engine
from controller.units import WEvent
from histogram.lpa import LaplaceMechanism
from histogram.noise import Randomness
from tests.controller.test_wevent_audit import (
    BINS,
    EPS,
    W,
    _ChargesShareMechanism,
    adversarial_stream,
    draw_charge_violations,
    run_recorded,
    sampled_locality_and_loss,
    window_violations,
)

# ---------------------------------------------------------------------------
# Broken variants


@dataclass(frozen=True)
class _ReadsTruth(AdaptiveSamplePolicy):
    """Estimates the drift from the true histograms instead of the releases (the decision reads raw data)."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        return super().decide(state, replace(ctx, last_counts=np.asarray(ctx.counts)))


@dataclass(frozen=True)
class _NoLedgerCheck(AdaptiveSamplePolicy):
    """Publishes whenever due, behind a lenient (2ε) ledger: a move to a larger ``c`` overspends a window."""

    def new_accountant(self) -> Accountant:
        return WindowAccountant(2 * self.unit.epsilon, self.unit.w)


@dataclass(frozen=True)
class _ChargesShare(AdaptiveSamplePolicy):
    """Charges ε/w per release whatever ``c`` is (paired with a mechanism drawing for w times that)."""

    def per_release(self, level: int) -> Fraction:
        return self.unit.epsilon / self.unit.w


VARIANTS: dict[str, tuple[type, type]] = {
    "interval chosen from the true counts": (_ReadsTruth, LaplaceMechanism),
    "moves without asking the window (lenient ledger)": (_NoLedgerCheck, LaplaceMechanism),
    "charges eps/w, draws noise for eps/c": (_ChargesShare, _ChargesShareMechanism),
}

# the audit's stream: quiet stretches, then a busy one, so the level moves both ways
_rng = np.random.default_rng(3)
_QUIET_THEN_BUSY = np.concatenate([
    np.repeat(_rng.integers(0, 400, (1, BINS)), 60, axis=0),
    _rng.integers(0, 400, (60, BINS)),
    np.repeat(_rng.integers(0, 400, (1, BINS)), 40, axis=0),
    adversarial_stream(40, seed=6),
]).astype(np.int64)


def _engine(cls: type = AdaptiveSamplePolicy, mech: type = LaplaceMechanism, **kw) -> Engine:  # type: ignore[no-untyped-def]
    return Engine(cls(WEvent(EPS, W, W), min_pairs=2, memory=20.0, **kw), mech(), BINS)


def state_locality_violations(engine: Engine, counts: np.ndarray, changed: list[tuple[int, int]],
                              seed: int = 11) -> list[str]:
    """A neighbour at a timestep ``s`` that publishes nothing fresh (the step after a release, where the
    policy reads that release back): with the same noise, the policy's whole state (public, journaled)
    must be identical at every later step; a policy that read ``x_s`` would differ."""
    from histogram.testing import ReplayDrawer

    base = run_recorded(engine, counts, seed)
    errors = []
    for s, b in changed:
        if s >= len(counts) or base[s].release.kind == "fresh":
            continue
        other = counts.copy()
        other[s, b] += engine.mechanism.sensitivity
        mine, theirs = engine.initial_state(), engine.initial_state()
        for t in range(len(counts)):
            _, mine = engine.step(mine, counts[t], ReplayDrawer(base[t].draws))
            _, theirs = engine.step(theirs, other[t], ReplayDrawer(base[t].draws))
            if t >= s and engine.snapshot(mine) != engine.snapshot(theirs):
                errors.append(f"neighbour at (t={s}, bin {b}): the state at t={t} differs (it reads x_{s})")
                break
    return errors


def violations(engine: Engine, steps, counts: np.ndarray) -> list[str]:  # type: ignore[no-untyped-def]
    errors = window_violations(steps, EPS, W)
    errors += draw_charge_violations(steps, 1, lambda s: ["publication"] if s.release.kind == "fresh" else [])
    allowed = {EPS / c for c in divisors(W)}
    for s in steps:
        pubs = [e.epsilon for e in s.release.ledger if e.start == s.release.timestep]
        if s.release.kind == "fresh" and (len(pubs) != 1 or pubs[0] not in allowed):
            errors.append(f"t={s.release.timestep}: charged {pubs}, expected one of ε/c for c | w")
    changed, more = sampled_locality_and_loss(engine, steps, counts, seed=41)
    errors += more
    errors += state_locality_violations(engine, counts, [(t + 1, b) for t, b in changed])
    return errors


def test_adaptive_sample_passes_its_audit():
    engine, counts = _engine(), _QUIET_THEN_BUSY
    steps = run_recorded(engine, counts)
    assert violations(engine, steps, counts) == []
    charged = {e.epsilon for s in steps for e in s.release.ledger if s.release.kind == "fresh"}
    assert len(charged) >= 2, "the level never moved on the audit's stream: the audit would test one schedule only"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_adaptive_sample_audit_catches(variant):
    cls, mech = VARIANTS[variant]
    engine, counts = _engine(cls, mech), _QUIET_THEN_BUSY
    steps = run_recorded(engine, counts)
    assert violations(engine, steps, counts), f"{variant} not caught"


# ---------------------------------------------------------------------------
# The estimate and the choice


def _run_levels(series: np.ndarray, epsilon: Fraction, w: int, cutoff: int, seed: int = 1,
                floor: int | None = None) -> list[int]:
    """The releases per window (``c``) in force at each timestep of one seeded engine run."""
    spec = MethodSpec("adaptive-sample", WEvent(epsilon, w, cutoff), min_per_window=floor)
    engine = build_engine(spec, LaplaceMechanism(), series.shape[1])
    policy = engine.policy
    state, rnd, out = engine.initial_state(), Randomness.seeded(seed), []
    for t, h in enumerate(series):
        _, state = engine.step(state, h, rnd.drawer("s", t, "release"))
        out.append(policy.levels[state.policy.level])
    return out


def test_a_still_stream_moves_to_sample():
    """Nothing changes: the drift estimate is about 0, so one precise release per window (c = 1) wins."""
    series = np.full((400, 1), 500, dtype=np.int64)
    levels = _run_levels(series, Fraction(1, 10), 10, 10)
    assert levels[0] == 10 and levels[-1] == 1


def test_a_floor_holds_a_still_stream_at_its_releases_per_window():
    """``release.min_per_window``: the still stream that moves to Sample without a floor stays at the
    floor (the smallest divisor of w not below it), and starts there if the cutoff is below it."""
    series = np.full((400, 1), 500, dtype=np.int64)
    assert set(_run_levels(series, Fraction(1, 10), 10, 10, floor=5)[100:]) == {5}
    assert set(_run_levels(series, Fraction(1, 10), 10, 10, floor=3)[100:]) == {5}  # 3 ∤ 10: the next divisor
    levels = _run_levels(series, Fraction(1, 10), 10, 2, floor=5)
    assert levels[0] == 5 and min(levels) == 5
    # a fast stream still moves above the floor
    fast = np.random.default_rng(4).integers(0, 2000, (400, 1))
    assert set(_run_levels(fast, Fraction(1), 10, 10, floor=5)[100:]) == {10}


def test_a_floor_is_checked_and_only_adaptive_sample_takes_it():
    with pytest.raises(ConfigurationError, match="min_per_window"):
        AdaptiveSamplePolicy(WEvent(Fraction(1), 10, 10), min_releases=11)
    with pytest.raises(ConfigurationError, match="min_per_window"):
        AdaptiveSamplePolicy(WEvent(Fraction(1), 10, 10), min_releases=0)
    with pytest.raises(ConfigurationError, match="min_per_window"):
        MethodSpec("uniform", WEvent(Fraction(1), 10, 10), min_per_window=5)
    p = AdaptiveSamplePolicy(WEvent(Fraction(1), 50, 10), min_releases=10)
    assert p.describe()["min_releases"] == 10
    assert "min_releases" not in AdaptiveSamplePolicy(WEvent(Fraction(1), 50, 10)).describe()


def test_a_fast_stream_keeps_releasing_every_timestep():
    """Independent draws with a spread far above the noise: republishing costs more than noise (c = w)."""
    series = np.random.default_rng(4).integers(0, 2000, (400, 1))
    levels = _run_levels(series, Fraction(1), 10, 10)
    assert set(levels[100:]) == {10}


def _runs_with_pairs(policy: AdaptiveSamplePolicy, pairs: dict[int, tuple[float, float, float]]) -> AdaptiveRuns:
    """One run whose level columns hold ``n`` pairs each of mean absolute change ``a``, noise change ``m``
    at the level's interval: ``pairs = {level: (n, a, m)}``."""
    runs = policy.reset_runs(1)
    for level, (n, a, m) in pairs.items():
        runs.weight[0, level], runs.spread[0, level], runs.noise_spread[0, level] = n, n * a, n * m
        runs.lag[0, level] = n * policy.intervals[level]
    return runs


def test_pairs_at_two_lags_tell_fluctuation_from_drift():
    """The excess ``X = (ā² − m̄²)/(2/π)`` of each level's pairs against its lag ``L``: the same excess at
    lags 1 and 5 is a fluctuation (independent draws: ``s = X``, ``q = 0``); an excess growing as the lag
    is a drift (``s = 0``, ``q = X/L``); one lag alone is read as drift, as before pairs were kept apart."""
    policy = AdaptiveSamplePolicy(WEvent(Fraction(1), 10, 10))  # levels c = 1, 2, 5, 10: k = 10, 5, 2, 1
    g = 2 / np.pi
    x = lambda a, m: (a * a - m * m) / g  # noqa: E731
    runs = _runs_with_pairs(policy, {3: (6, 5.0, 3.0), 1: (6, 5.0, 3.0)})  # lags 1 and 5, same changes
    s, q = policy.drift(runs, np.array([0]))
    assert s[0] == pytest.approx(x(5.0, 3.0)) and q[0] == 0.0
    a5 = np.sqrt(9.0 + 5 * g * 4.0)  # q = 4 per timestep: E|Δ|² = m² + (2/π)·q·L
    runs = _runs_with_pairs(policy, {3: (6, np.sqrt(9.0 + g * 4.0), 3.0), 1: (6, a5, 3.0)})
    s, q = policy.drift(runs, np.array([0]))
    assert s[0] == pytest.approx(0.0, abs=1e-9) and q[0] == pytest.approx(4.0)
    runs = _runs_with_pairs(policy, {1: (6, a5, 3.0)})
    s, q = policy.drift(runs, np.array([0]))
    assert s[0] == 0.0 and q[0] == pytest.approx(4.0)
    # a fluctuation makes republishing cost its full size from the first timestep on: predicted errors
    e = np.array([1.0, 2.0, 5.0, 10.0])
    white = predicted_errors(e, policy.intervals, np.array([0.0]), np.array([100.0]))[0]
    walk = predicted_errors(e, policy.intervals, np.array([100.0 / 5]))[0]
    assert white[3] == walk[3] == 10.0  # c = w republishes nothing
    assert white[2] > walk[2]  # at k = 2, the walk has drifted a fifth of its 5-step size


def test_independent_draws_reach_a_release_every_timestep_within_a_window():
    """Independent draws at w = 50, ε = 1, starting at c = 10: the pairs read at k = 5 and then at
    k = 2 show the same change, a fluctuation, so the policy goes on to c = 50 within 30 timesteps.
    With the pairs pooled over lags, the change was divided by the pooled mean lag, which the early
    pairs at k = 5 kept long until forgotten: it reached c = 50 after 33–57 timesteps here."""
    rng = np.random.default_rng(21)
    series = rng.lognormal(5.0, 1.0, (300, 1)).round().astype(np.int64)
    for seed in (1, 2, 3, 4, 5):
        levels = _run_levels(series, Fraction(1), 50, 10, seed=seed)
        assert set(levels[30:]) == {50}, (seed, {c: levels.count(c) for c in set(levels)})


def test_a_random_walk_settles_between_the_extremes():
    """Drift q per timestep and noise r(c) = 2(c/ε)²: the predicted error r(c) + q(w/c − 1)/2 is least
    at an inner c; the policy settles there (its estimate is unbiased for a random walk)."""
    rng = np.random.default_rng(7)
    series = (10_000 + np.cumsum(rng.normal(0, 20, (3000, 1)), axis=0)).round().astype(np.int64)
    levels = _run_levels(series, Fraction(1, 2), 50, 50)
    q, eps, w = 400.0, 0.5, 50
    predicted = {c: 2 * (c / eps) ** 2 + q * (w // c - 1) / 2 for c in divisors(w)}
    best = min(predicted, key=predicted.get)
    assert best not in (1, w)
    settled = levels[1000:]
    assert max(set(settled), key=settled.count) == best


def test_rare_jumps_are_read_for_their_size_not_their_square():
    """Level shifts every 100 timesteps on average, uniform in [0, 1000], at ε = 1, w = 50: the absolute
    error is least near c = 10 (noise E|Z| = c, a jump's cost |J|·k/2 spread over its segment); a
    drift estimate from squared changes (the rule before) weighs each jump by |J|² and settled at
    c = 25, releasing every 2 timesteps at 2.5 times the noise."""
    rng = np.random.default_rng(12)
    levels, t = [], 0
    while t < 3000:
        n = int(rng.geometric(0.01))
        levels.append(np.full(n, rng.uniform(0, 1000)))
        t += n
    series = np.concatenate(levels)[:3000, None].round().astype(np.int64)
    settled = _run_levels(series, Fraction(1), 50, 10)[1000:]
    common = max(set(settled), key=settled.count)
    assert 5 <= common <= 10


def test_fewer_releases_come_one_divisor_at_a_time_more_at_once():
    """A still stream walks down every divisor of w (c = 10, 5, 2, 1), reading ``min_pairs`` pairs at each
    interval before the next step; when it then turns into independent draws far above the noise, the
    policy goes back to c = w in one move."""
    rng = np.random.default_rng(5)
    series = np.concatenate([np.full((600, 1), 500), rng.integers(0, 4000, (200, 1))]).astype(np.int64)
    levels = _run_levels(series, Fraction(1), 10, 10)
    moves = [(a, b) for a, b in zip(levels, levels[1:], strict=False) if a != b]
    down = [m for m in moves if m[1] < m[0]]
    assert down[:3] == [(10, 5), (5, 2), (2, 1)]
    assert levels[599] == 1 and levels[-1] == 10
    up = [m for m in moves if m[1] > m[0]]
    assert up[0] == (1, 10)


def test_every_window_stays_within_epsilon_while_the_level_moves():
    series = _QUIET_THEN_BUSY
    steps = run_recorded(_engine(), series)
    assert window_violations(steps, EPS, W) == []
    assert all(s.release.window_spend <= EPS for s in steps)


# ---------------------------------------------------------------------------
# Configuration and state


def test_levels_are_the_divisors_of_w_and_the_start_follows_the_cutoff():
    p = AdaptiveSamplePolicy(WEvent(Fraction(1), 12, 5))
    assert p.levels == (1, 2, 3, 4, 6, 12)
    assert p.levels[p.start_level] == 4
    assert p.charges() == tuple(Fraction(1, c) for c in p.levels)


def test_it_is_w_event_only_and_refuses_bad_parameters():
    from controller.units import UserLevel

    with pytest.raises(ConfigurationError, match="w-event"):
        MethodSpec("adaptive-sample", UserLevel(Fraction(1), 10, 2))
    with pytest.raises(ConfigurationError, match="memory"):
        AdaptiveSamplePolicy(WEvent(Fraction(1), 4, 4), memory=0)
    with pytest.raises(ConfigurationError, match="hysteresis"):
        AdaptiveSamplePolicy(WEvent(Fraction(1), 4, 4), hysteresis=1.0)


def test_a_restart_from_the_journal_continues_bit_for_bit():
    engine, counts = _engine(), _QUIET_THEN_BUSY
    state, rnd = engine.initial_state(), Randomness.seeded(3)
    straight, resumed = [], []
    for t, h in enumerate(counts):
        rel, state = engine.step(state, h, rnd.drawer("s", t, "release"))
        straight.append(rel.counts.tobytes())
    state = engine.initial_state()
    for t, h in enumerate(counts):
        snapshot = json.loads(json.dumps(engine.snapshot(state)))
        state = engine.restore(snapshot)
        rel, state = engine.step(state, h, rnd.drawer("s", t, "release"))
        resumed.append(rel.counts.tobytes())
    assert straight == resumed


def test_state_json_round_trips_and_rejects_damage():
    policy = AdaptiveSamplePolicy(WEvent(Fraction(1), 4, 4))  # levels c = 1, 2, 4
    state = AdaptiveState(level=1, next_due=7, pending=-1, pending_level=2, prev=np.array([1.5, -2.0]),
                          prev_time=6, prev_error=8.0, spread=(0.0, 3.25, 1.0), noise_spread=(0.0, 2.5, 0.5),
                          lag=(0.0, 12.0, 1.0), weight=(0.0, 3.5, 1.0), pairs=5, settled=2)
    back = policy.state_from_json(json.loads(json.dumps(policy.state_to_json(state))))
    assert back.to_json() == state.to_json()
    with pytest.raises(StateError, match="privacy.w"):
        policy.state_from_json({**state.to_json(), "level": 9})
    with pytest.raises(StateError, match="malformed"):
        policy.state_from_json({k: v for k, v in state.to_json().items() if k != "spread"})
    with pytest.raises(StateError, match="out of range"):  # sums for another number of levels
        policy.state_from_json({**state.to_json(), "lag": ["1.0", "2.0"]})


def test_a_journal_of_pooled_sums_continues_with_them_at_its_level():
    """A state journaled when the pairs' sums were pooled over all lags (one float per field) continues:
    the pooled sums go to the column of the level in force, read as pairs at one lag, and the stream
    goes on with the same decision state otherwise."""
    policy = AdaptiveSamplePolicy(WEvent(Fraction(1), 4, 4))
    pooled = {"level": 1, "next_due": 7, "pending": -1, "pending_level": 2, "prev_time": 6, "pairs": 5,
              "settled": 2, "prev_error": "8.0", "spread": "3.25", "noise_spread": "2.5", "lag": "12.0",
              "weight": "3.5", "prev": None}
    state = policy.state_from_json(pooled)
    assert state.spread == (0.0, 3.25, 0.0) and state.weight == (0.0, 3.5, 0.0) and state.lag == (0.0, 12.0, 0.0)
    assert (state.level, state.next_due, state.pairs, state.prev_error) == (1, 7, 5, 8.0)
    runs = policy.to_runs(state)
    s, q = policy.drift(runs, np.array([0]))
    pooled_q = (3.25 ** 2 - 2.5 ** 2) / 3.5 ** 2 / (2 / np.pi * 12.0 / 3.5)  # the pooled estimate before
    assert s[0] == 0.0 and q[0] == pytest.approx(pooled_q)


def test_a_journal_of_the_squared_change_estimate_is_refused_with_what_to_do():
    """A state journaled before the absolute-change estimate (fields ``prev_var``, ``excess``) cannot be
    continued: its sums mean something else. The error names the two ways on."""
    policy = AdaptiveSamplePolicy(WEvent(Fraction(1), 4, 4))
    old = {"level": 1, "next_due": 7, "pending": -1, "pending_level": 2, "prev_time": 6, "pairs": 5,
           "prev_var": "8.0", "excess": "3.25", "lag": "12.0", "prev": None}
    with pytest.raises(StateError, match="another version.*new stream.id"):
        policy.state_from_json(old)


def test_runs_and_one_run_agree():
    """The runs state and the journaled one-run state convert both ways without loss."""
    policy = AdaptiveSamplePolicy(WEvent(Fraction(1), 4, 4))
    runs = policy.reset_runs(1)
    assert isinstance(runs, AdaptiveRuns)
    assert policy.from_runs(runs).to_json() == policy.reset().to_json()
