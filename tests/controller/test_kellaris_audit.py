"""Audits of BD and BA (Kellaris et al., VLDB 2014): the dissimilarity test and the budget rules.

Two audits, each run against the shipped policies and against deliberately
broken variants (subclasses below) that it must catch:

* **Dissimilarity test (statistical).** The test's output, publish or not, is
  one ε_test-DP answer on the count-space L1 distance (sensitivity Δ). The
  twin takes everything from the production policy: the noise scale it asks
  the drawer for, the ε it charges the ledger, the error bar it compares with;
  its decision rule is checked against ``decide`` on recorded noise. On the
  neighbouring distances ``d`` and ``d + Δ`` (placed in the noise's upper tail
  so the ratio is the worst case), ``RUNS`` draws per side give a
  Clopper–Pearson lower bound (α = 1e-6) on the privacy loss of the event
  "publish" (and of "do not publish"); it must not exceed the charged ε.
* **Budget rules (exact).** The ledger of a production engine over an
  adversarial stream (bursts of change and quiet stretches) is replayed
  against an independent reference of the paper's rules: which timesteps
  are tested (BA: never a nullified one), at which ε each publication is made
  (BD: half of what the window has left; BA: the shares of the timesteps
  since the last nullified stretch, at most w), and that every window of w
  timesteps spends at most ε, summed from the ledger, not by the accountant.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np
import pytest

from controller.accountant import Accountant, WindowAccountant
from controller.policies.base import DecisionContext
from controller.policies.kellaris import (
    GRID_STEPS,
    BudgetAbsorption,
    BudgetDistribution,
    bd_publication_epsilon,
)
from controller.step import Engine
from controller.units import WEvent
from histogram.distance import l1_distance
from histogram.lpa import LaplaceMechanism
from histogram.noise import Randomness
from histogram.testing import RecordingDrawer
from tests.dp_audit import RUNS, GeneratorSource, loss_lower_bound

EPS = Fraction(2)
W = 2
BINS = 4

# ---------------------------------------------------------------------------
# Broken variants (each must be caught)


class _ScaleIgnoresW:
    """Draws the test noise at Δ/(ε/2): forgets that each timestep's test has only ε/(2w)."""

    def _dissimilar_runs(self, state, ctx, rows, error):  # type: ignore[no-untyped-def]
        ctx.ledger.spend(ctx.timestep, rows, ctx.ledger.amount(self.test_epsilon), "test")
        scale = Fraction(self.sensitivity) / (self.unit.epsilon / 2)
        return ctx.l1(rows) + ctx.noise.laplace(rows, scale, None) > error


class _ScaleIgnoresSensitivity:
    """Scale 1/ε_test: ignores the contribution bound Δ (broken whenever Δ > 1)."""

    def _dissimilar_runs(self, state, ctx, rows, error):  # type: ignore[no-untyped-def]
        ctx.ledger.spend(ctx.timestep, rows, ctx.ledger.amount(self.test_epsilon), "test")
        scale = 1 / self.test_epsilon
        return ctx.l1(rows) + ctx.noise.laplace(rows, scale, None) > error


class _ChargesHalf:
    """Draws the right noise but charges the ledger only half of ε_test."""

    def _dissimilar_runs(self, state, ctx, rows, error):  # type: ignore[no-untyped-def]
        ctx.ledger.spend(ctx.timestep, rows, ctx.ledger.amount(self.test_epsilon / 2), "test")
        scale = Fraction(self.sensitivity) / self.test_epsilon
        return ctx.l1(rows) + ctx.noise.laplace(rows, scale, None) > error


def _variant(base: type, mixin: type, name: str) -> type:
    return dataclass(frozen=True)(type(name, (mixin, base), {}))


TEST_VARIANTS = {
    "scale ignores w": _ScaleIgnoresW,
    "scale ignores sensitivity": _ScaleIgnoresSensitivity,
    "charges half of the test": _ChargesHalf,
}


@dataclass(frozen=True)
class _BAAbsorbsExtra(BudgetAbsorption):
    """Absorbs one share more than the timesteps skipped since the last nullified stretch."""

    def _potential(self, state, ctx, step, budget):  # type: ignore[no-untyped-def]
        shares = super()._potential(state, ctx, step, budget)
        return np.where(shares > 0, shares + 1, 0)


@dataclass(frozen=True)
class _BANoNullify(BudgetAbsorption):
    """Absorbs correctly but never nullifies the timesteps after a publication."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        decision, new = super().decide(state, ctx)
        return decision, replace(new, nullified=0)


@dataclass(frozen=True)
class _BANullifyTooShort(BudgetAbsorption):
    """Nullifies one timestep fewer than it absorbed."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        decision, new = super().decide(state, ctx)
        if decision.fresh:
            new = replace(new, nullified=max(0, new.nullified - 1))
        return decision, new


@dataclass(frozen=True)
class _BDWholeRemainder(BudgetDistribution):
    """Publishes with everything the window has left instead of half of it."""

    def _potential(self, state, ctx, step, budget):  # type: ignore[no-untyped-def]
        super()._potential(state, ctx, step, budget)  # moves the window on
        remaining = budget - state.window.sum(axis=1)
        return np.where(remaining > 0, remaining // step, 0)


@dataclass(frozen=True)
class _BDForgetsSpend(BudgetDistribution):
    """Does not record its publications, so every window looks unspent."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        decision, new = super().decide(state, ctx)
        return decision, replace(new, publications=())


BUDGET_VARIANTS = {
    "ba absorbs one share too many": _BAAbsorbsExtra,
    "ba does not nullify": _BANoNullify,
    "ba nullifies too short": _BANullifyTooShort,
    "bd spends the whole remainder": _BDWholeRemainder,
    "bd forgets its publications": _BDForgetsSpend,
}


# ---------------------------------------------------------------------------
# Dissimilarity test: statistical audit


@dataclass(frozen=True)
class _Probe:
    """What the production policy does in one tested timestep."""

    scale: Fraction
    charged: Fraction
    error: float
    published: bool
    distance: int
    noise: int


def _probe(policy, counts: np.ndarray, seed: int) -> _Probe:  # type: ignore[no-untyped-def]
    mech = LaplaceMechanism(sensitivity=policy.sensitivity)
    acct = policy.new_accountant()
    drawer = RecordingDrawer(Randomness.seeded(seed).drawer("audit", 0))
    last = np.zeros(BINS, dtype=np.int64)
    ctx = DecisionContext(0, counts, last, 0, acct, drawer, mech)
    state = policy.reset()
    # the potential publication ε the policy compares with (first timestep: nothing spent)
    potential = policy.publication_budget / 2 if isinstance(policy, BudgetDistribution) else policy.share
    decision, _ = policy.decide(state, ctx)
    (draw,) = drawer.tape
    charged = sum((e.epsilon for e in acct.entries if e.purpose == "test"), Fraction(0))
    error = mech.expected_abs_error(potential, BINS) * BINS
    return _Probe(Fraction(draw.scale), charged, error, decision.fresh, l1_distance(counts, last), int(np.asarray(draw.values).reshape(-1)[0]))


def _twin_decision(distance: np.ndarray | int, noise: np.ndarray | int, error: float):  # type: ignore[no-untyped-def]
    return np.asarray(distance) + np.asarray(noise) > error


def dissimilarity_loss(policy, seed: int = 7) -> tuple[float, Fraction]:  # type: ignore[no-untyped-def]
    """(lower bound on the test's privacy loss, ε the policy charged for it)."""
    probe = _probe(policy, np.zeros(BINS, dtype=np.int64), seed)
    # the neighbouring distances sit about one scale above the error bar: the tail, where the ratio is worst
    d0 = max(0, int(np.floor(probe.error + float(probe.scale))))
    d1 = d0 + policy.sensitivity
    noise0 = GeneratorSource(np.random.SeedSequence([seed, 0])).dlap(probe.scale, RUNS)
    noise1 = GeneratorSource(np.random.SeedSequence([seed, 1])).dlap(probe.scale, RUNS)
    k0 = int(_twin_decision(d0, noise0, probe.error).sum())
    k1 = int(_twin_decision(d1, noise1, probe.error).sum())
    pub = loss_lower_bound(np.array([k1]), np.array([k0]), RUNS)[0]
    nopub = loss_lower_bound(np.array([RUNS - k0]), np.array([RUNS - k1]), RUNS)[0]
    return float(max(pub, nopub)), probe.charged


def _policies(sensitivity: int = 1):  # type: ignore[no-untyped-def]
    unit = WEvent(EPS, W)
    return {"bd": BudgetDistribution(unit, sensitivity), "ba": BudgetAbsorption(unit, sensitivity)}


@pytest.mark.parametrize("name", ["bd", "ba"])
@pytest.mark.parametrize("sensitivity", [1, 2])
def test_twin_takes_production_decisions(name, sensitivity):
    """The twin's rule ``d + ν > error`` is the production decision on the same recorded ν."""
    policy = _policies(sensitivity)[name]
    rng = np.random.default_rng(3)
    for seed in range(40):
        counts = rng.integers(0, 30, BINS).astype(np.int64)
        probe = _probe(policy, counts, seed)
        assert probe.scale == Fraction(sensitivity) / policy.test_epsilon
        assert bool(_twin_decision(probe.distance, probe.noise, probe.error)) == probe.published


@pytest.mark.parametrize("name", ["bd", "ba"])
@pytest.mark.parametrize("sensitivity", [1, 2])
def test_dissimilarity_test_within_its_charge(name, sensitivity):
    loss, charged = dissimilarity_loss(_policies(sensitivity)[name])
    assert charged == EPS / (2 * W)
    assert loss <= float(charged), f"{name}: loss lower bound {loss:.3f} > charged ε {float(charged):.3f}"


@pytest.mark.parametrize("name", ["bd", "ba"])
@pytest.mark.parametrize("variant", sorted(TEST_VARIANTS))
def test_dissimilarity_audit_catches(name, variant):
    base = {"bd": BudgetDistribution, "ba": BudgetAbsorption}[name]
    cls = _variant(base, TEST_VARIANTS[variant], f"Broken{name}")
    sensitivity = 2 if variant == "scale ignores sensitivity" else 1
    loss, charged = dissimilarity_loss(cls(WEvent(EPS, W), sensitivity))
    assert loss > float(charged), f"{variant} not caught: loss {loss:.3f} <= charged {float(charged):.3f}"


# ---------------------------------------------------------------------------
# Budget rules: exact replay of the ledger against the paper's rules


def adversarial_stream(timesteps: int = 240, seed: int = 5) -> np.ndarray:
    """Quiet stretches of random length between bursts of change, so BA absorbs 1..w shares."""
    rng = np.random.default_rng(seed)
    out, base = [], rng.integers(0, 50, BINS)
    while len(out) < timesteps:
        base = rng.integers(0, 400, BINS) if rng.random() < 0.6 else base
        out.extend([base.copy()] * int(rng.integers(1, 2 * W + 2)))
    return np.asarray(out[:timesteps], dtype=np.int64)


def run_engine(policy, counts: np.ndarray, seed: int = 11):  # type: ignore[no-untyped-def]
    engine = Engine(policy, LaplaceMechanism(sensitivity=policy.sensitivity), BINS)
    state, rnd, out = engine.initial_state(), Randomness.seeded(seed), []
    for t, h in enumerate(counts):
        rel, state = engine.step(state, h, rnd.drawer("audit", t))
        out.append(rel)
    return out


def budget_violations(policy, releases, eps: Fraction = EPS, w: int = W) -> list[str]:  # type: ignore[no-untyped-def]
    """Every departure of the ledger from Kellaris's rules (empty for a correct BD/BA)."""
    errors: list[str] = []
    test_eps, share, half = eps / (2 * w), eps / (2 * w), eps / 2
    per_t: dict[int, Fraction] = {}
    pubs: list[tuple[int, Fraction]] = []
    last_pub, nullified = -1, 0
    for rel in releases:
        t = rel.timestep
        tests = [e for e in rel.ledger if e.purpose == "test"]
        pub = [e for e in rel.ledger if e.purpose == "publication"]
        for e in rel.ledger:
            per_t[e.start] = per_t.get(e.start, Fraction(0)) + e.epsilon
        if isinstance(policy, BudgetAbsorption):
            if t - last_pub <= nullified:
                if tests or pub or rel.kind != "republished":
                    errors.append(f"t={t}: nullified timestep was tested or published")
                continue
            available = min(t - last_pub - nullified, w)
            expected = share * available
        else:
            spent = sum((e for s, e in pubs if s > t - w), Fraction(0))
            expected = bd_publication_epsilon(half - spent, half / GRID_STEPS)
            assert expected <= (half - spent) / 2  # the paper's rule, rounded down to a public grid
            if expected <= 0:
                if tests or pub:
                    errors.append(f"t={t}: window exhausted but tested or published")
                continue
        if [e.epsilon for e in tests] != [test_eps]:
            errors.append(f"t={t}: test charges {[str(e.epsilon) for e in tests]}, expected [{test_eps}]")
        if rel.kind == "fresh":
            if [e.epsilon for e in pub] != [expected]:
                errors.append(f"t={t}: publication ε {[str(e.epsilon) for e in pub]}, expected {expected}")
            pubs.append((t, pub[0].epsilon if pub else Fraction(0)))
            if isinstance(policy, BudgetAbsorption):
                last_pub, nullified = t, available - 1
    horizon = max(per_t, default=0)
    for end in range(horizon + 1):
        total = sum((per_t.get(s, Fraction(0)) for s in range(end - w + 1, end + 1)), Fraction(0))
        if total > eps:
            errors.append(f"window ending {end} spends {total} > ε = {eps}")
    return errors


@pytest.mark.parametrize("name", ["bd", "ba"])
def test_budget_rules_hold(name):
    policy = _policies()[name]
    releases = run_engine(policy, adversarial_stream())
    assert budget_violations(policy, releases) == []
    fresh_eps = {e.epsilon for r in releases for e in r.ledger if e.purpose == "publication"}
    if name == "ba":  # the stream exercises every absorption size 1..w
        assert fresh_eps == {EPS / (2 * W) * a for a in range(1, W + 1)}
    assert sum(r.kind == "fresh" for r in releases) >= 30


@pytest.mark.parametrize("variant", sorted(BUDGET_VARIANTS))
def test_budget_audit_catches(variant):
    policy = BUDGET_VARIANTS[variant](WEvent(EPS, W))
    releases = run_engine(policy, adversarial_stream())
    assert budget_violations(policy, releases), f"{variant} not caught"


@dataclass(frozen=True)
class _LenientLedger(BudgetAbsorption):
    """The no-nullification bug behind a ledger with twice the cap: overspends for real."""

    def new_accountant(self) -> Accountant:
        return WindowAccountant(2 * self.unit.epsilon, self.unit.w)

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        decision, new = super().decide(state, ctx)
        return decision, replace(new, nullified=0)


def test_window_sum_is_independent_of_the_accountant():
    """With the accountant's cap doubled, the audit's own window sums see the overspend."""
    policy = _LenientLedger(WEvent(EPS, W))
    errors = budget_violations(policy, run_engine(policy, adversarial_stream()))
    assert any(e.startswith("window ending") for e in errors)

