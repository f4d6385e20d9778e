"""Audits of AdaPub and RescueDP (:mod:`controller.policies.grouping`) and of the grouped release.

Both run through the production :class:`~controller.step.Engine` with a
recording drawer. Four checks, each shown to catch broken variants below:

* **Draws vs charges (exact).** Every discrete Laplace draw answers a query
  of L1 sensitivity Δ (AdaPub's per-bin deviations, the vector of group sums),
  so a draw at scale ``b`` provides ``Δ/b``; at every timestep that must equal
  what the ledger charged, purpose by purpose.
* **Window sums (exact).** Summed from the ledger entries here, not by the
  accountant: every window of ``w`` spends at most ε.
* **Release loss (statistical).** One group sum between neighbours ``c`` and
  ``c + Δ`` at the scale production drew: the Clopper–Pearson lower bound on
  the loss (α = 1e-6) must not exceed the ε charged.
* **Locality (exact coupling).** For a neighbour with one more person in bin
  ``b`` at timestep ``s``, the noise of ``s`` is shifted so that everything
  released at ``s`` (AdaPub's noisy deviations, the noisy group sums) is the
  same; then every release from ``s`` on must be byte-identical. It is, iff
  the groups, tests and filters read the true histogram of ``s`` at ``s``
  only and only through those noisy values, which is what §4.6–4.7 charge.
  A grouping or filter that reads raw data of other timesteps breaks it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np
import pytest

from controller.accountant import Accountant, WindowAccountant
from controller.errors import ConfigurationError, StateError
from controller.grouped import check_groups, release_groups
from controller.method import MethodSpec, build_engine
from controller.policies.base import fresh
from controller.policies.grouping import AdaPubPolicy, AdaPubState, RescueDPPolicy, RescueDPState
from controller.step import Engine
from controller.units import WEvent
from histogram.lpa import LaplaceMechanism
from histogram.noise import Randomness
from histogram.testing import Draw, ReplayDrawer, TapeMismatch
from tests.controller.test_wevent_audit import (
    Step,
    draw_charge_violations,
    run_recorded,
    window_violations,
)
from tests.dp_audit import audit, lpa_sampler

EPS = Fraction(1)
W = 4
BINS = 6


def stream(timesteps: int = 120, seed: int = 5, high: int = 400) -> np.ndarray:
    """Quiet stretches of random length between jumps, so the methods group, regroup and resample."""
    rng = np.random.default_rng(seed)
    out, base = [], rng.integers(0, high // 8 + 1, BINS)
    while len(out) < timesteps:
        base = rng.integers(0, high, BINS) if rng.random() < 0.5 else base
        out.extend([base.copy()] * int(rng.integers(1, 3 * W)))
    return np.asarray(out[:timesteps], dtype=np.int64)


# ---------------------------------------------------------------------------
# The grouped release itself


def test_grouped_release_sums_each_group_and_draws_one_value_per_group():
    from histogram.testing import RecordingDrawer

    counts = np.array([5, 7, 0, 2, 9], dtype=np.int64)
    groups = np.array([0, 0, -1, 1, 2])
    drawer = RecordingDrawer(Randomness.seeded(1).drawer("g", 0))
    out = release_groups(counts, groups, Fraction(1, 2), 3, drawer)
    (draw,) = drawer.tape
    assert (draw.kind, draw.scale, draw.size) == ("discrete_laplace", Fraction(6), 3)
    assert list(out.counts - draw.values) == [12, 2, 9]
    assert out.epsilon == Fraction(1, 2) and out.details == {"groups": 3}


@pytest.mark.parametrize("labels", [[0, 2, 2, -1, 0], [-1, -1, -1, -1, -1], [0, 1, -2, 1, 0], [0.0, 1, 1, 0, 0]])
def test_a_bad_grouping_is_refused_before_anything_is_drawn(labels):
    with pytest.raises(StateError):
        check_groups(np.asarray(labels), 5)


@dataclass(frozen=True)
class _ShortGroups(RescueDPPolicy):
    """Returns one value fewer than there are bins."""

    def smooth(self, state, timestep, noisy):  # type: ignore[no-untyped-def]
        out, new = super().smooth(state, timestep, noisy)
        return replace(out, counts=out.counts[1:]), new


def test_a_grouped_release_must_publish_every_bin():
    engine = Engine(_ShortGroups(WEvent(EPS, W)), LaplaceMechanism(), BINS)
    with pytest.raises(StateError, match="released"):
        engine.step(engine.initial_state(), stream(1)[0], Randomness.seeded(1).drawer("g", 0))


def test_grouped_methods_are_w_event_and_lpa_only():
    from types import SimpleNamespace

    from controller.units import UserLevel

    for name in ("adapub", "rescuedp"):
        with pytest.raises(ConfigurationError, match="w-event"):
            MethodSpec(name, UserLevel(1, 10, 2))
        with pytest.raises(ConfigurationError, match="lpa"):
            build_engine(MethodSpec(name, WEvent(1, 4)), SimpleNamespace(name="psd", sensitivity=1), BINS)  # type: ignore[arg-type]


@pytest.mark.parametrize("make", ["adapub", "rescuedp"])
def test_the_audit_catches_a_grouped_release_drawing_for_twice_the_charge(monkeypatch, make):
    """The engine hook itself, broken: noise for 2ε on the group sums while the ledger says ε."""
    import controller.step as step_mod

    def doubled(counts, groups, epsilon, sensitivity, noise, confidence=0.95):  # type: ignore[no-untyped-def]
        return release_groups(counts, groups, 2 * epsilon, sensitivity, noise, confidence)

    engine = _adapub() if make == "adapub" else _rescue()
    counts = stream(**({} if make == "adapub" else SMALL))
    assert violations(engine, counts) == []
    monkeypatch.setattr(step_mod, "release_groups", doubled)
    assert violations(engine, counts), "noise for 2ε not caught"


# ---------------------------------------------------------------------------
# The harness


def _purposes(step: Step) -> list[str]:
    """A ``test`` charge at t pays for the first draw (AdaPub's per-bin tests); the rest is the publication."""
    t = step.release.timestep
    tested = any(e.purpose == "test" and e.start == t for e in step.release.ledger)
    lap = [d for d in step.draws if d.kind == "discrete_laplace"]
    return [("test" if tested and i == 0 else "publication") for i in range(len(lap))]


def release_loss(steps: list[Step], sensitivity: int, seed: int) -> list[tuple[float, Fraction]]:
    """(CP lower bound on one group sum's loss, ε charged for it) for a few distinct publication scales."""
    seen: dict[Fraction, Fraction] = {}
    for s in steps:
        pubs = [e.epsilon for e in s.release.ledger if e.purpose == "publication" and e.start == s.release.timestep]
        lap = [d for d in s.draws if d.kind == "discrete_laplace"]
        if pubs and lap:
            seen.setdefault(Fraction(lap[-1].scale), sum(pubs, Fraction(0)))
    out = []
    for scale, charged in sorted(seen.items())[:3]:
        (res,) = audit(lpa_sampler(100, sensitivity, scale), seed=seed, ordered=("released",)).values()
        out.append((res.lower_bound, charged))
    return out


def violations(engine: Engine, counts: np.ndarray, statistical: bool = False) -> list[str]:
    steps = run_recorded(engine, counts)
    eps = engine.policy.unit.epsilon
    errors = window_violations(steps, eps, engine.policy.unit.w)
    errors += draw_charge_violations(steps, engine.mechanism.sensitivity, _purposes)
    if statistical:
        for loss, charged in release_loss(steps, engine.mechanism.sensitivity, seed=37):
            if loss > charged:
                errors.append(f"release loss lower bound {loss:.3f} > charged {charged}")
    return errors


class _Spy:
    """Wraps a policy and keeps the groups of its last decision."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.groups = inner, None

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        decision, new = self.inner.decide(state, ctx)
        self.groups = decision.groups
        return decision, new

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


def _shift(engine: Engine, state, x: np.ndarray, x2: np.ndarray, tape: list[Draw], step: Step) -> list[Draw]:  # type: ignore[no-untyped-def]
    """Timestep s's draws shifted so that its noisy deviations and noisy group sums are the same under x2."""
    spy = _Spy(engine.policy)
    Engine(spy, engine.mechanism, engine.bins).step(state, x, ReplayDrawer(tape))  # type: ignore[arg-type]
    groups = spy.groups
    lap = [i for i, d in enumerate(tape) if d.kind == "discrete_laplace"]
    out = list(tape)
    if "test" in _purposes(step):
        i = lap[0]
        r = np.rint(state.policy.released).astype(np.int64)
        moved = np.abs(x2.astype(np.int64) - r) - np.abs(x.astype(np.int64) - r)
        out[i] = Draw(tape[i].kind, tape[i].scale, tape[i].size, tape[i].values - moved)
    if groups is not None and step.release.kind == "fresh":
        i = lap[-1]
        sums = np.zeros(tape[i].values.size, dtype=np.int64)
        sel = groups >= 0
        np.add.at(sums, groups[sel], (x2.astype(np.int64) - x.astype(np.int64))[sel])
        out[i] = Draw(tape[i].kind, tape[i].scale, tape[i].size, tape[i].values - sums)
    return out


def coupled_violations(engine: Engine, counts: np.ndarray, pairs: list[tuple[int, int]], seed: int = 11) -> list[str]:
    """Neighbour x_s + Δ in bin b, the noise of s shifted so s releases the same: later releases must match."""
    base = run_recorded(engine, counts, seed)
    states = [engine.initial_state()]
    for t in range(len(counts)):
        states.append(engine.step(states[-1], counts[t], ReplayDrawer(base[t].draws))[1])
    errors = []
    for s, b in pairs:
        other = counts.copy()
        other[s, b] += engine.mechanism.sensitivity
        state = states[s]
        for t in range(s, len(counts)):
            tape = list(base[t].draws)
            if t == s:
                tape = _shift(engine, state, counts[s], other[s], tape, base[s])
            try:
                rel, state = engine.step(state, other[t], ReplayDrawer(tape))
            except TapeMismatch as exc:
                errors.append(f"neighbour at (t={s}, bin {b}): the draws at t={t} changed ({exc})")
                break
            ref = base[t].release
            same = rel.kind == ref.kind and np.array_equal(rel.counts, ref.counts) and \
                [(e.purpose, e.epsilon) for e in rel.ledger] == [(e.purpose, e.epsilon) for e in ref.ledger]
            if not same:
                errors.append(f"neighbour at (t={s}, bin {b}): release at t={t} differs")
                break
    return errors


PAIRS = [(s, b) for s in range(3, 100, 7) for b in (s % BINS, (s + 3) % BINS)]

# ---------------------------------------------------------------------------
# AdaPub and its broken variants


@dataclass(frozen=True)
class _AdaPubTestUncharged(AdaPubPolicy):
    """Runs the per-bin tests without charging the ledger."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        class _Free:
            def __init__(self, inner):  # type: ignore[no-untyped-def]
                self.inner = inner

            def spend(self, t, eps, purpose):  # type: ignore[no-untyped-def]
                return None if purpose == "test" else self.inner.spend(t, eps, purpose)

            def __getattr__(self, name):  # type: ignore[no-untyped-def]
                return getattr(self.inner, name)

        real = ctx.accountant
        ctx.accountant = _Free(real)
        try:
            return super().decide(state, ctx)
        finally:
            ctx.accountant = real


@dataclass(frozen=True)
class _AdaPubTestPerBinBudget(AdaPubPolicy):
    """Each bin's test noise at Δ/ε_c·(1/bins): the budget split over bins, as if the tests composed."""

    @property
    def test_scale(self) -> Fraction:
        return Fraction(self.sensitivity) / (self.epsilon_c * BINS)


@dataclass(frozen=True)
class _AdaPubOverspends(AdaPubPolicy):
    """Perturbs at the whole ε/w and tests on top, behind a ledger with twice the cap."""

    @property
    def epsilon_p(self) -> Fraction:
        return self.unit.epsilon / self.unit.w

    @property
    def epsilon_c(self) -> Fraction:
        return self.unit.epsilon / self.unit.w / 4

    def new_accountant(self) -> Accountant:
        return WindowAccountant(2 * self.unit.epsilon, self.unit.w)


@dataclass(frozen=True)
class _TrueAdaPubState(AdaPubState):
    truth: np.ndarray | None = None  # bins × max_group true values of each time group (what the paper reads)


@dataclass(frozen=True)
class _AdaPubTrueGroup(AdaPubPolicy):
    """The paper's AdaCluster: the deviation from the time group's *true* mean (reads past timesteps)."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        truth = getattr(state, "truth", None)
        if truth is not None and state.released is not None:
            mean = np.nanmean(truth, axis=1)  # the group's true mean replaces the published median
            state = replace(state, released=np.where(np.isnan(mean), state.released, mean))
        decision, new = super().decide(state, ctx)
        return decision, _TrueAdaPubState(**{**new.__dict__, "truth": _grow(truth, new, ctx.counts, self.max_group)})

    def smooth(self, state, timestep, noisy):  # type: ignore[no-untyped-def]
        out, new = super().smooth(state, timestep, noisy)
        return out, _TrueAdaPubState(**{**new.__dict__, "truth": getattr(state, "truth", None)})


def _grow(truth, new, counts, width):  # type: ignore[no-untyped-def]
    bins = counts.size
    out = np.full((bins, width), np.nan) if truth is None else truth.copy()
    joined = new.joined if new.joined is not None else np.zeros(bins, dtype=bool)
    out[~joined] = np.nan
    size = (~np.isnan(out)).sum(axis=1)
    out[np.arange(bins), np.minimum(size, width - 1)] = counts
    return out


@dataclass(frozen=True)
class _AdaPubGroupsByTruth(AdaPubPolicy):
    """DimParti on the *true* counts of the previous timestep instead of the last release."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        decision, new = super().decide(state, ctx)
        prev = getattr(state, "truth", None)
        if decision.fresh and prev is not None:
            groups = self.dimension_groups(prev.astype(np.float64), ctx)
            decision = fresh(decision.epsilon, decision.reason, groups)
            new = replace(new, labels=groups)
        return decision, _TrueAdaPubState(**{**new.__dict__, "truth": ctx.counts.copy()})

    def smooth(self, state, timestep, noisy):  # type: ignore[no-untyped-def]
        out, new = super().smooth(state, timestep, noisy)
        return out, _TrueAdaPubState(**{**new.__dict__, "truth": getattr(state, "truth", None)})


def _adapub(cls: type = AdaPubPolicy, sensitivity: int = 1, **kw) -> Engine:  # type: ignore[no-untyped-def]
    return Engine(cls(WEvent(EPS, W), sensitivity, **kw), LaplaceMechanism(sensitivity=sensitivity), BINS)


ADAPUB_VARIANTS = {
    "tests uncharged": (_AdaPubTestUncharged, "charges"),
    "test budget split over bins": (_AdaPubTestPerBinBudget, "charges"),
    "perturbs at eps/w and tests on top (lenient ledger)": (_AdaPubOverspends, "charges"),
    "deviation from the time group's true values (the paper)": (_AdaPubTrueGroup, "coupling"),
    "DimParti on the previous timestep's true counts": (_AdaPubGroupsByTruth, "coupling"),
}


def test_adapub_passes_its_audit():
    engine = _adapub()
    steps = run_recorded(engine, stream())
    assert violations(engine, stream(), statistical=True) == []
    # every timestep is fresh at ε_p; a test at ε_c whenever some bin's time group is open and not full
    for s in steps:
        charges = sorted((e.purpose, e.epsilon) for e in s.release.ledger if e.start == s.release.timestep)
        assert s.release.kind == "fresh" and ("publication", engine.policy.epsilon_p) in charges
    assert sum(any(e.purpose == "test" for e in s.release.ledger) for s in steps) >= len(steps) - 2
    # it groups, in time and over bins, on this stream
    assert max(s.release.details.get("smoothed_over", 1) for s in steps) >= 3
    assert min(s.release.details.get("dimension_groups", BINS) for s in steps) < BINS


def test_adapub_coupling_holds_with_a_larger_contribution_bound():
    assert coupled_violations(_adapub(), stream(), PAIRS) == []
    assert coupled_violations(_adapub(sensitivity=3), stream(), PAIRS[:8]) == []


@pytest.mark.parametrize("variant", sorted(ADAPUB_VARIANTS))
def test_adapub_audit_catches(variant):
    cls, check = ADAPUB_VARIANTS[variant]
    engine = _adapub(cls)
    if check == "charges":
        assert violations(engine, stream()), f"{variant} not caught"
    else:
        assert violations(engine, stream()) == []  # the accounting alone cannot see it
        assert coupled_violations(engine, stream(), PAIRS), f"{variant} not caught"


# ---------------------------------------------------------------------------
# RescueDP and its broken variants


@dataclass(frozen=True)
class _RegionState(RescueDPState):
    region_spent: tuple[tuple[int, int, Fraction], ...] = ()  # (timestep, bin, ε) of each bin's samples


@dataclass(frozen=True)
class _RescueRegionBudgets(RescueDPPolicy):
    """The paper's accounting: each bin (region) spends from its own window budget; the stream's ledger is lenient."""

    def new_accountant(self) -> Accountant:
        return WindowAccountant(BINS * self.unit.epsilon, self.unit.w)

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        t = ctx.timestep
        spent = tuple(r for r in getattr(state, "region_spent", ()) if r[0] > t - self.unit.w)
        sized = self._sized(state, ctx.bins)
        due = np.flatnonzero(sized.next_sample <= t)
        own = [self.unit.epsilon - sum((e for (_u, b, e) in spent if b == d), Fraction(0)) for d in due]
        region = max(own, default=self.unit.epsilon)

        class _Region:
            def __init__(self, inner):  # type: ignore[no-untyped-def]
                self.inner = inner

            def remaining(self, t):  # type: ignore[no-untyped-def]
                return region  # a due region's own budget, as if the other regions' spends did not count

            def __getattr__(self, name):  # type: ignore[no-untyped-def]
                return getattr(self.inner, name)

        real = ctx.accountant
        ctx.accountant = _Region(real)
        try:
            decision, new = super().decide(state, ctx)
        finally:
            ctx.accountant = real
        if decision.fresh:
            spent += tuple((t, int(b), decision.epsilon) for b in np.flatnonzero(decision.groups >= 0))
        return decision, _RegionState(**{**new.__dict__, "region_spent": spent})

    def smooth(self, state, timestep, noisy):  # type: ignore[no-untyped-def]
        out, new = super().smooth(state, timestep, noisy)
        return out, _RegionState(**{**new.__dict__, "region_spent": state.region_spent})


@dataclass(frozen=True)
class _TrueRescueState(RescueDPState):
    seen: tuple[float, float, int] = (0.0, 0.0, 0)  # running sum, sum of squares, n of the true counts


@dataclass(frozen=True)
class _RescueQFromData(RescueDPPolicy):
    """Kalman Q from the variance of the raw stream so far (what the benchmark's Java re-implementation does)."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        decision, new = super().decide(state, ctx)
        s, q, n = getattr(state, "seen", (0.0, 0.0, 0))
        x = ctx.counts.astype(np.float64)
        return decision, _TrueRescueState(**{**new.__dict__, "seen": (s + x.sum(), q + (x * x).sum(), n + x.size)})

    def smooth(self, state, timestep, noisy):  # type: ignore[no-untyped-def]
        s, q, n = state.seen
        var = max(q / n - (s / n) ** 2, 1.0) if n else 1.0
        policy = replace(self, process_ratio=var / _r_max(self))
        out, new = RescueDPPolicy.smooth(policy, state, timestep, noisy)
        return out, _TrueRescueState(**{**new.__dict__, "seen": state.seen})


def _r_max(p: RescueDPPolicy) -> float:
    from controller.policies.grouping import _dlap_variance

    return _dlap_variance(Fraction(p.sensitivity) / p.epsilon_max)


@dataclass(frozen=True)
class _RescueGroupsByTruth(RescueDPPolicy):
    """Dynamic grouping on the previous timestep's *true* counts instead of the filter's estimates."""

    def groups(self, due, estimate, scale):  # type: ignore[no-untyped-def]
        return super().groups(due, self._truth, scale)

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        object.__setattr__(self, "_truth", getattr(state, "truth", None))
        decision, new = super().decide(state, ctx)
        return decision, _TruthState(**{**new.__dict__, "truth": ctx.counts.astype(np.float64)})

    def smooth(self, state, timestep, noisy):  # type: ignore[no-untyped-def]
        out, new = super().smooth(state, timestep, noisy)
        return out, _TruthState(**{**new.__dict__, "truth": state.truth})


@dataclass(frozen=True)
class _TruthState(RescueDPState):
    truth: np.ndarray | None = None


def _rescue(cls: type = RescueDPPolicy, sensitivity: int = 1, **kw) -> Engine:  # type: ignore[no-untyped-def]
    # w = 10: with ε_max = ε/5 a window of 4 could never exceed ε, whatever the budget rule
    return Engine(cls(WEvent(EPS, W_RESCUE), sensitivity, **kw), LaplaceMechanism(sensitivity=sensitivity), BINS)


W_RESCUE = 10
SMALL = dict(high=8)  # counts near the grouping level Δ/ε_t, so grouping matters

RESCUE_VARIANTS = {
    "per-region window budgets (the paper; lenient ledger)": (_RescueRegionBudgets, "charges"),
    "Kalman Q from the raw stream's variance (the benchmark's Java)": (_RescueQFromData, "coupling"),
    "grouping on the previous timestep's true counts": (_RescueGroupsByTruth, "coupling"),
}


def sampling_pairs(engine: Engine, counts: np.ndarray) -> list[tuple[int, int]]:
    """Adversarial neighbours for RescueDP: every bin of every timestep before one that samples ≥ 2 bins
    (chosen from the public release details, so a grouping that reads the truth has a chance to move)."""
    steps = run_recorded(engine, counts)
    before = [s.release.timestep - 1 for s in steps
              if s.release.kind == "fresh" and s.release.details["sampled_bins"] >= 2 and s.release.timestep > 0]
    return [(s, b) for s in before for b in range(BINS)]


def test_rescuedp_passes_its_audit():
    engine = _rescue()
    counts = stream(**SMALL)
    steps = run_recorded(engine, counts)
    assert violations(engine, counts, statistical=True) == []
    fresh_steps = [s for s in steps if s.release.kind == "fresh"]
    assert 0 < len(fresh_steps) < len(steps)  # it samples, and it skips
    assert any(s.release.details["sampled_bins"] < BINS for s in fresh_steps)  # bins on their own schedules
    assert any(s.release.details["groups"] < s.release.details["sampled_bins"] for s in fresh_steps)  # grouping
    for s in fresh_steps:  # never more than ε_max, never more than the window had
        (e,) = [e for e in s.release.ledger if e.start == s.release.timestep]
        assert e.epsilon <= engine.policy.epsilon_max and e.epsilon <= s.release.epsilon_remaining + e.epsilon


def test_rescuedp_coupling_holds():
    counts = stream(**SMALL)
    assert coupled_violations(_rescue(), counts, PAIRS + sampling_pairs(_rescue(), counts)) == []
    assert coupled_violations(_rescue(sensitivity=3), stream(**SMALL), PAIRS[:8]) == []


@pytest.mark.parametrize("variant", sorted(RESCUE_VARIANTS))
def test_rescuedp_audit_catches(variant):
    cls, check = RESCUE_VARIANTS[variant]
    engine = _rescue(cls)
    counts = stream(**SMALL)
    if check == "charges":
        assert violations(engine, counts), f"{variant} not caught"
    else:
        assert violations(engine, counts) == []
        assert coupled_violations(engine, counts, PAIRS + sampling_pairs(engine, counts)), f"{variant} not caught"


def test_rescuedp_budget_is_exact_and_on_the_grid():
    p = RescueDPPolicy(WEvent(Fraction(1, 10), 10))
    for remaining in (Fraction(1, 10), Fraction(7, 100), Fraction(1, 10**6)):
        for interval in (1.0, 3.0, 40.0):
            e = p.budget(remaining, interval)
            assert isinstance(e, Fraction) and 0 <= e <= min(p.p_max * remaining, p.epsilon_max)
            assert (e / (p.unit.epsilon / 2**20)).denominator == 1
