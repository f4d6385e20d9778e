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
from controller.policies.adaptive import AdaptiveRuns, AdaptiveSamplePolicy, AdaptiveState, divisors
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


def _run_levels(series: np.ndarray, epsilon: Fraction, w: int, cutoff: int, seed: int = 1) -> list[int]:
    """The releases per window (``c``) in force at each timestep of one seeded engine run."""
    engine = build_engine(MethodSpec("adaptive-sample", WEvent(epsilon, w, cutoff)), LaplaceMechanism(), series.shape[1])
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


def test_a_fast_stream_keeps_releasing_every_timestep():
    """Independent draws with a spread far above the noise: republishing costs more than noise (c = w)."""
    series = np.random.default_rng(4).integers(0, 2000, (400, 1))
    levels = _run_levels(series, Fraction(1), 10, 10)
    assert set(levels[100:]) == {10}


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
    policy = AdaptiveSamplePolicy(WEvent(Fraction(1), 4, 4))
    state = AdaptiveState(level=1, next_due=7, pending=-1, pending_level=2, prev=np.array([1.5, -2.0]),
                          prev_time=6, prev_var=8.0, excess=3.25, lag=12.0, pairs=5)
    back = policy.state_from_json(json.loads(json.dumps(policy.state_to_json(state))))
    assert back.to_json() == state.to_json()
    with pytest.raises(StateError, match="privacy.w"):
        policy.state_from_json({**state.to_json(), "level": 9})
    with pytest.raises(StateError, match="malformed"):
        policy.state_from_json({k: v for k, v in state.to_json().items() if k != "excess"})


def test_runs_and_one_run_agree():
    """The runs state and the journaled one-run state convert both ways without loss."""
    policy = AdaptiveSamplePolicy(WEvent(Fraction(1), 4, 4))
    runs = policy.reset_runs(1)
    assert isinstance(runs, AdaptiveRuns)
    assert policy.from_runs(runs).to_json() == policy.reset().to_json()
