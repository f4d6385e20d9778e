"""Audits of the w-event mechanisms of :mod:`controller.policies.wevent`.

Each mechanism runs through the production :class:`~controller.step.Engine`
with a :class:`~histogram.testing.RecordingDrawer`, so the audit sees every
noise call (kind, scale, size) and every ledger entry of every timestep.
Three checks, each shown to catch the broken variants below:

* **Draws vs charges (exact).** Every discrete Laplace draw in these
  mechanisms answers a query of L1 sensitivity Δ (the histogram, or a
  1-Lipschitz function of it such as an L1 distance), so a draw at scale
  ``b`` provides ``Δ/b`` of ε. At every timestep the ε the draws provide,
  purpose by purpose, must equal what the ledger charged at that timestep.
* **Window sums (exact).** Summed from the ledger entries (not by the
  accountant), every window of ``w`` timesteps spends at most ε; plus each
  mechanism's own schedule (Sample: fresh exactly at ``0, w, 2w, …``).
* **Release loss (statistical).** One released count between neighbours
  ``c`` and ``c + Δ`` at the scale production drew for it: the
  Clopper–Pearson lower bound on the loss (α = 1e-6) must not exceed the ε
  charged for that release.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

from controller.accountant import Accountant, WindowAccountant
from controller.policies.base import REPUBLISH, DecisionContext, fresh
from controller.policies.wevent import (
    FastPolicy,
    PegasusPolicy,
    PegasusRuns,
    PegasusState,
    SamplePolicy,
)
from controller.step import Engine, Release
from controller.units import WEvent
from histogram.lpa import LaplaceMechanism
from histogram.mechanism import NoisyHistogram
from histogram.noise import Randomness
from histogram.testing import Draw, RecordingDrawer
from tests.dp_audit import audit, lpa_sampler

EPS = Fraction(1)
W = 4
BINS = 6

# ---------------------------------------------------------------------------
# Broken variants of Sample


@dataclass(frozen=True)
class _SampleTwiceLenient(SamplePolicy):
    """Samples every w−1 timesteps (twice in some windows), behind a ledger with twice the cap."""

    def new_accountant(self) -> Accountant:
        return WindowAccountant(2 * self.unit.epsilon, self.unit.w)

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        if ctx.timestep % (self.unit.w - 1) != 0:
            return REPUBLISH, None
        return fresh(self.per_release), None


@dataclass(frozen=True)
class _SampleOffSchedule(SamplePolicy):
    """Samples every w−1 timesteps; the true ledger refuses the second sample of a window (republishes)."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        if ctx.timestep % (self.unit.w - 1) != 0 or not ctx.accountant.can_spend(ctx.timestep, self.per_release):
            return REPUBLISH, None
        return fresh(self.per_release), None


@dataclass(frozen=True)
class _ChargesShareMechanism(LaplaceMechanism):
    """Draws the release noise for w·ε: the ledger says ε/w while the noise is that of ε."""

    w: int = W

    def release(self, counts, epsilon, noise):  # type: ignore[no-untyped-def]
        return super().release(counts, epsilon * self.w, noise)


@dataclass(frozen=True)
class _SampleChargesShare(SamplePolicy):
    """Charges ε/w per sample (paired with the w·ε mechanism above: noise for ε, ledger ε/w)."""

    @property
    def per_release(self) -> Fraction:
        return self.unit.epsilon / self.unit.w


SAMPLE_VARIANTS: dict[str, tuple[type, type]] = {
    "samples twice in a window (lenient ledger)": (_SampleTwiceLenient, LaplaceMechanism),
    "samples off schedule": (_SampleOffSchedule, LaplaceMechanism),
    "charges eps/w, draws noise for eps": (_SampleChargesShare, _ChargesShareMechanism),
}

# ---------------------------------------------------------------------------
# The harness


@dataclass(frozen=True)
class Step:
    release: Release
    draws: tuple[Draw, ...]


def adversarial_stream(timesteps: int = 120, seed: int = 5, bins: int = BINS) -> np.ndarray:
    """Quiet stretches of random length between jumps, so adaptive methods group and regroup."""
    rng = np.random.default_rng(seed)
    out, base = [], rng.integers(0, 50, bins)
    while len(out) < timesteps:
        base = rng.integers(0, 400, bins) if rng.random() < 0.5 else base
        out.extend([base.copy()] * int(rng.integers(1, 3 * W)))
    return np.asarray(out[:timesteps], dtype=np.int64)


def run_recorded(engine: Engine, counts: np.ndarray, seed: int = 11) -> list[Step]:
    state, rnd, out = engine.initial_state(), Randomness.seeded(seed), []
    for t, h in enumerate(counts):
        drawer = RecordingDrawer(rnd.drawer("audit", t))
        rel, state = engine.step(state, h, drawer)
        out.append(Step(rel, tuple(drawer.tape)))
    return out


def draw_charge_violations(steps: list[Step], sensitivity: int, purposes: Callable[[Step], list[str]]) -> list[str]:
    """Where the ε provided by the draws (Δ/scale each) differs from the ε charged, per purpose.

    ``purposes(step)`` names the ledger purpose of each draw of the step, in call order.
    """
    errors = []
    for s in steps:
        t = s.release.timestep
        charged: dict[str, Fraction] = {}
        for e in s.release.ledger:
            if e.start == t:
                charged[e.purpose] = charged.get(e.purpose, Fraction(0)) + e.epsilon
        provided: dict[str, Fraction] = {}
        names = purposes(s)
        lap = [d for d in s.draws if d.kind == "discrete_laplace"]
        if len(names) != len(lap):
            errors.append(f"t={t}: {len(lap)} draws, expected {len(names)} ({names})")
            continue
        for name, d in zip(names, lap, strict=True):
            provided[name] = provided.get(name, Fraction(0)) + Fraction(sensitivity) / Fraction(d.scale)
        if provided != charged:
            errors.append(f"t={t}: draws provide {_fmt(provided)}, ledger charged {_fmt(charged)}")
    return errors


def window_violations(steps: list[Step], eps: Fraction, w: int) -> list[str]:
    """Windows of w whose ledger entries (summed here, not by the accountant) exceed ε."""
    per_t: dict[int, Fraction] = {}
    for s in steps:
        for e in s.release.ledger:
            per_t[e.start] = per_t.get(e.start, Fraction(0)) + e.epsilon
    out = []
    for end in range(len(steps)):
        total = sum((per_t.get(x, Fraction(0)) for x in range(end - w + 1, end + 1)), Fraction(0))
        if total > eps:
            out.append(f"window ending {end} spends {total} > ε = {eps}")
    return out


def release_loss(steps: list[Step], sensitivity: int, seed: int) -> list[tuple[float, Fraction]]:
    """(CP lower bound on one released count's loss, ε charged for it) for each distinct release scale."""
    seen: dict[Fraction, Fraction] = {}
    for s in steps:
        pubs = [e for e in s.release.ledger if e.purpose == "publication" and e.start == s.release.timestep]
        rel = [d for d in s.draws if d.kind == "discrete_laplace" and d.size == BINS]
        if pubs and rel:
            seen.setdefault(Fraction(rel[-1].scale), sum((e.epsilon for e in pubs), Fraction(0)))
    out = []
    for scale, charged in sorted(seen.items()):
        (res,) = audit(lpa_sampler(100, sensitivity, scale), seed=seed, ordered=("released",)).values()
        out.append((res.lower_bound, charged))
    return out


def _fmt(d: dict[str, Fraction]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(d.items())) + "}"


# ---------------------------------------------------------------------------
# Sample


def sample_violations(steps: list[Step], eps: Fraction = EPS, w: int = W) -> list[str]:
    errors = window_violations(steps, eps, w)
    errors += draw_charge_violations(steps, 1, lambda s: ["publication"] if s.release.kind == "fresh" else [])
    for s in steps:
        t = s.release.timestep
        if (s.release.kind == "fresh") != (t % w == 0):
            errors.append(f"t={t}: {s.release.kind}, Sample publishes exactly at multiples of w={w}")
        pubs = [e.epsilon for e in s.release.ledger if e.start == t]
        if s.release.kind == "fresh" and pubs != [eps]:
            errors.append(f"t={t}: sample charged {pubs}, expected [{eps}]")
    for loss, charged in release_loss(steps, 1, seed=31):
        if loss > charged:
            errors.append(f"release loss lower bound {loss:.3f} > charged {charged}")
    return errors


def _sample_engine(cls: type = SamplePolicy, mech: type = LaplaceMechanism) -> Engine:
    return Engine(cls(WEvent(EPS, W)), mech(), BINS)


def test_sample_passes_its_audit():
    steps = run_recorded(_sample_engine(), adversarial_stream())
    assert sample_violations(steps) == []
    assert sum(s.release.kind == "fresh" for s in steps) == len(steps) // W


@pytest.mark.parametrize("variant", sorted(SAMPLE_VARIANTS))
def test_sample_audit_catches(variant):
    cls, mech = SAMPLE_VARIANTS[variant]
    steps = run_recorded(_sample_engine(cls, mech), adversarial_stream())
    assert sample_violations(steps), f"{variant} not caught"


def test_sample_spends_the_window_exactly_once():
    """Every window of w, wherever it starts, holds exactly one sample of ε."""
    steps = run_recorded(_sample_engine(), adversarial_stream(40))
    fresh_at = [s.release.timestep for s in steps if s.release.kind == "fresh"]
    for start in range(len(steps) - W + 1):
        assert sum(start <= t < start + W for t in fresh_at) == 1
    assert all(s.release.window_spend == EPS for s in steps)


def test_sample_is_w_event_only():
    from controller.errors import ConfigurationError
    from controller.method import MethodSpec
    from controller.units import UserLevel

    with pytest.raises(ConfigurationError, match="w-event"):
        MethodSpec("sample", UserLevel(1, 10, 2))
    with pytest.raises(ConfigurationError, match="w-event"):
        SamplePolicy(UserLevel(1, 10, 2))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# PeGaSus
#
# Four checks: (1) draws vs charges and window sums (exact, above); (2) the
# schedule: every timestep is fresh at ε_p, with a test at ε_g unless a new
# group starts; (3) the deviation test's loss (statistical, on a twin whose
# rule equals production's on recorded noise); (4) locality (exact
# coupling): with the noise of timestep s shifted so that everything
# released at s is the same for x_s and a neighbour x_s + one person, every
# later release is byte-identical — the true histogram of s is read at s
# only, so each timestep's cost is charged at that timestep alone.


@dataclass(frozen=True)
class _PegasusTestIgnoresSplit(PegasusPolicy):
    """Draws the test noise for the whole ε/w while charging ε_g."""

    @property
    def test_scale(self) -> Fraction:
        return Fraction(self.sensitivity) * self.unit.w / self.unit.epsilon


@dataclass(frozen=True)
class _PegasusTestUncharged(PegasusPolicy):
    """Runs the deviation test without charging the ledger."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        class _Free:
            def __init__(self, inner):  # type: ignore[no-untyped-def]
                self.inner = inner

            def spend(self, t, eps, purpose):  # type: ignore[no-untyped-def]
                return SimpleNamespace(seq=-1) if purpose == "test" else self.inner.spend(t, eps, purpose)

            def __getattr__(self, name):  # type: ignore[no-untyped-def]
                return getattr(self.inner, name)

        real = ctx.accountant
        ctx.accountant = _Free(real)
        try:
            return super().decide(state, ctx)
        finally:
            ctx.accountant = real


@dataclass(frozen=True)
class _TrueState(PegasusState):
    true_total: np.ndarray | None = None


@dataclass
class _TrueRuns(PegasusRuns):
    true_total: np.ndarray | None = None


@dataclass(frozen=True)
class _PegasusTrueGroup(PegasusPolicy):
    """The paper's grouper: the deviation is taken from the group's *true* mean (reads past timesteps)."""

    def to_runs(self, state):  # type: ignore[no-untyped-def]
        runs = super().to_runs(state)
        return _TrueRuns(runs.size, runs.total, runs.joined, true_total=getattr(state, "true_total", None))

    def deviations(self, counts, state, rows):  # type: ignore[no-untyped-def]
        tt = getattr(state, "true_total", None)
        if tt is None:
            return super().deviations(counts, state, rows)
        n = int(state.size[0])
        m = (2 * tt + n) // (2 * n)
        return np.array([np.abs(counts.astype(np.int64) - m).sum()])

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        decision, new = super().decide(state, ctx)
        tt = getattr(state, "true_total", None)
        joined = new.joined and tt is not None
        total = tt + ctx.counts if joined else ctx.counts.astype(np.int64)
        return decision, _TrueState(new.size, new.total, new.joined, total)

    def smooth(self, state, timestep, noisy):  # type: ignore[no-untyped-def]
        out, new = super().smooth(state, timestep, noisy)
        return out, _TrueState(new.size, new.total, new.joined, getattr(state, "true_total", None))


@dataclass(frozen=True)
class _PegasusPerturbsWhole(PegasusPolicy):
    """Charges ε_p but asks the mechanism for the whole ε/w (paired with a mechanism that draws at ε·w/ε_p)."""


@dataclass(frozen=True)
class _WholeBudgetLaplace(LaplaceMechanism):
    """Draws release noise for ε/w when asked for ε_p = (4/5)·ε/w."""

    def release(self, counts, epsilon, noise):  # type: ignore[no-untyped-def]
        return super().release(counts, epsilon * Fraction(5, 4), noise)


PEGASUS_VARIANTS: dict[str, tuple[type, type]] = {
    "test noise for the whole eps/w": (_PegasusTestIgnoresSplit, LaplaceMechanism),
    "test uncharged": (_PegasusTestUncharged, LaplaceMechanism),
    "deviation from the group's true values": (_PegasusTrueGroup, LaplaceMechanism),
    "perturbation noise for eps/w, charged eps_p": (_PegasusPerturbsWhole, _WholeBudgetLaplace),
}


def _pegasus_engine(cls: type = PegasusPolicy, mech: type = LaplaceMechanism, sensitivity: int = 1) -> Engine:
    return Engine(cls(WEvent(EPS, W), sensitivity), mech(sensitivity=sensitivity), BINS)


def _pegasus_purposes(step: Step) -> list[str]:
    """The test draw is a scalar (size None), the perturbation one value per bin."""
    return ["test" if d.size is None else "publication" for d in step.draws if d.kind == "discrete_laplace"]


def pegasus_schedule_violations(policy: PegasusPolicy, steps: list[Step]) -> list[str]:
    errors = []
    for s in steps:
        t = s.release.timestep
        charges = sorted((e.purpose, e.epsilon) for e in s.release.ledger if e.start == t)
        tested = [d for d in s.draws if d.kind == "discrete_laplace" and d.size is None]
        expected = [("publication", policy.epsilon_p)] + ([("test", policy.epsilon_g)] if tested else [])
        if s.release.kind != "fresh" or charges != sorted(expected):
            errors.append(f"t={t}: {s.release.kind} with charges {charges}, expected fresh with {sorted(expected)}")
    return errors


def coupled_locality_violations(engine: Engine, counts: np.ndarray, changed: list[tuple[int, int]],
                                seed: int = 11) -> list[str]:
    """Neighbour x_s + one person in bin b, noise of s shifted so s releases the same: later releases must match."""
    from histogram.testing import ReplayDrawer

    base = run_recorded(engine, counts, seed)
    states = [engine.initial_state()]
    for t in range(len(counts)):
        states.append(engine.step(states[-1], counts[t], ReplayDrawer(base[t].draws))[1])
    policy = engine.policy
    errors = []
    for s, b in changed:
        other = counts.copy()
        other[s, b] += engine.mechanism.sensitivity
        state = states[s]
        for t in range(s, len(counts)):
            tape = list(base[t].draws)
            if t == s:
                tape = _shift_tape(policy, state, counts[t], other[t], tape)
            elif t <= s + 2 * W and _flip_point(engine, state, other[t], tape) != _flip_point(
                engine, states[t], counts[t], tape
            ):
                errors.append(f"neighbour at (t={s}, bin {b}): the test at t={t} moved (it reads x_{s})")
                break
            rel, state = engine.step(state, other[t], ReplayDrawer(tape))
            ref = base[t].release
            same = rel.kind == ref.kind and np.array_equal(rel.counts, ref.counts) and \
                [(e.purpose, e.epsilon) for e in rel.ledger] == [(e.purpose, e.epsilon) for e in ref.ledger]
            if not same:
                errors.append(f"neighbour at (t={s}, bin {b}): release at t={t} differs")
                break
    return errors


def _flip_point(engine: Engine, state, counts: np.ndarray, tape: list[Draw]) -> int | None:  # type: ignore[no-untyped-def]
    """The smallest test-noise value at which the step opens a new group (black box, by bisection).

    The join rule is monotone in the test noise, so this locates the noisy
    comparison's data term exactly from public outputs alone; None if the
    step runs no test.
    """
    from histogram.testing import ReplayDrawer

    if not tape or tape[0].size is not None or tape[0].kind != "discrete_laplace":
        return None

    def closes(z: int) -> bool:
        rel, _ = engine.step(state, counts, ReplayDrawer([Draw(tape[0].kind, tape[0].scale, None, np.asarray([z]))]
                                                          + list(tape[1:])))
        return rel.details.get("smoothed_over", 1) == 1

    lo, hi = -(10**5), 10**5  # closes(hi) holds, closes(lo) does not, for any bounded stream
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if closes(mid) else (mid, hi)
    return hi


def _shift_tape(policy, state, x, x2, tape):  # type: ignore[no-untyped-def]
    """Shift timestep s's draws so the noisy deviation and the perturbed histogram are unchanged."""
    out = []
    for d in tape:
        if d.kind != "discrete_laplace":
            out.append(d)
        elif d.size is None:  # the deviation test: same noisy deviation under the production query
            shift = PegasusPolicy.deviation(policy, x, state.policy) - PegasusPolicy.deviation(policy, x2, state.policy)
            out.append(Draw(d.kind, d.scale, d.size, np.asarray(d.values) + shift))
        else:  # the perturbation: same perturbed histogram
            out.append(Draw(d.kind, d.scale, d.size, np.asarray(d.values) + (x - x2)))
    return out


def pegasus_violations(engine: Engine, steps: list[Step], counts: np.ndarray) -> list[str]:
    policy = engine.policy
    errors = window_violations(steps, EPS, W)
    errors += draw_charge_violations(steps, engine.mechanism.sensitivity, _pegasus_purposes)
    errors += pegasus_schedule_violations(policy, steps)
    rng = np.random.default_rng(2)
    changed = [(int(s), int(rng.integers(BINS))) for s in rng.choice(np.arange(2, len(counts) - 5), 12, replace=False)]
    errors += coupled_locality_violations(engine, counts, changed)
    return errors


def test_pegasus_passes_its_audit():
    engine, counts = _pegasus_engine(), adversarial_stream()
    steps = run_recorded(engine, counts)
    assert pegasus_violations(engine, steps, counts) == []
    sizes = {s.release.details.get("smoothed_over", 1) for s in steps}
    assert max(sizes) >= 4 and 1 in sizes  # groups form and close on this stream
    assert any(e.purpose == "test" for s in steps for e in s.release.ledger)


@pytest.mark.parametrize("variant", sorted(PEGASUS_VARIANTS))
def test_pegasus_audit_catches(variant):
    cls, mech = PEGASUS_VARIANTS[variant]
    engine, counts = _pegasus_engine(cls, mech), adversarial_stream()
    steps = run_recorded(engine, counts)
    errors = pegasus_violations(engine, steps, counts)
    if variant == "test noise for the whole eps/w":  # also caught statistically
        loss, charged = deviation_test_loss(engine.policy)
        assert loss > float(charged), (loss, charged)
    assert errors, f"{variant} not caught"


def _probe_test(policy: PegasusPolicy, counts: np.ndarray, seed: int, size: int = 3):  # type: ignore[no-untyped-def]
    """One production deviation test on a group of ``size`` perturbed copies of 10 per bin."""
    mech = LaplaceMechanism(sensitivity=policy.sensitivity)
    total = np.full(BINS, 10 * size, dtype=np.int64)
    state = PegasusState(size, total, False)
    acct = policy.new_accountant()
    drawer = RecordingDrawer(Randomness.seeded(seed).drawer("audit", 0))
    ctx = DecisionContext(0, counts, np.zeros(BINS, dtype=np.int64), 0, acct, drawer, mech)
    _, new = policy.decide(state, ctx)
    (draw,) = drawer.tape
    charged = sum((e.epsilon for e in acct.entries if e.purpose == "test"), Fraction(0))
    theta = policy.threshold(size, BINS, mech.expected_abs_error(policy.epsilon_p, BINS))
    z = int(np.asarray(draw.values).reshape(-1)[0])
    return Fraction(draw.scale), charged, theta, new.joined, policy.deviation(counts, state), z


def deviation_test_loss(policy: PegasusPolicy, seed: int = 7) -> tuple[float, Fraction]:
    """(CP lower bound on the loss of 'join' / 'close' between deviations d and d + Δ, ε charged)."""
    from tests.dp_audit import RUNS, GeneratorSource, loss_lower_bound

    scale, charged, theta, *_ = _probe_test(policy, np.full(BINS, 10, dtype=np.int64), seed)
    d0 = int(np.ceil(theta + float(scale)))  # one scale above θ: "join" needs z <= θ − d, the lower tail
    d1 = d0 + policy.sensitivity
    k0 = int((d0 + GeneratorSource(np.random.SeedSequence([seed, 0])).dlap(scale, RUNS) <= theta).sum())
    k1 = int((d1 + GeneratorSource(np.random.SeedSequence([seed, 1])).dlap(scale, RUNS) <= theta).sum())
    join = loss_lower_bound(np.array([k0]), np.array([k1]), RUNS)[0]
    close = loss_lower_bound(np.array([RUNS - k1]), np.array([RUNS - k0]), RUNS)[0]
    return float(max(join, close)), charged


@pytest.mark.parametrize("sensitivity", [1, 2])
def test_pegasus_twin_takes_production_decisions(sensitivity):
    policy = PegasusPolicy(WEvent(EPS, W), sensitivity)
    rng = np.random.default_rng(3)
    for seed in range(40):
        counts = rng.integers(0, 30, BINS).astype(np.int64)
        scale, _, theta, joined, d, z = _probe_test(policy, counts, seed)
        assert scale == Fraction(sensitivity) / policy.epsilon_g
        assert (d + z <= theta) == joined


@pytest.mark.parametrize("sensitivity", [1, 2])
def test_pegasus_deviation_test_within_its_charge(sensitivity):
    policy = PegasusPolicy(WEvent(EPS, W), sensitivity)
    loss, charged = deviation_test_loss(policy)
    assert charged == policy.epsilon_g == EPS / W / 5
    assert loss <= float(charged), (loss, charged)


def test_pegasus_deviation_reads_only_this_timestep():
    """The query is 1-Lipschitz in this timestep's counts: one person moves it by at most Δ."""
    policy = PegasusPolicy(WEvent(EPS, W), 2)
    rng = np.random.default_rng(4)
    for _ in range(200):
        state = PegasusState(int(rng.integers(1, 9)), rng.integers(-50, 500, BINS).astype(np.int64), False)
        x = rng.integers(0, 60, BINS).astype(np.int64)
        y = x.copy()
        y[rng.integers(BINS)] += 2
        assert abs(policy.deviation(x, state) - policy.deviation(y, state)) <= 2


def test_pegasus_smoother_publishes_the_group_mean():
    engine, counts = _pegasus_engine(), adversarial_stream()
    steps = run_recorded(engine, counts)
    perturbed = [counts[s.release.timestep] + next(d.values for d in s.draws if d.size == BINS) for s in steps]
    start = 0
    for i, s in enumerate(steps):
        n = s.release.details.get("smoothed_over", 1)
        if n == 1:
            start = i
            assert np.array_equal(s.release.counts, perturbed[i])
            assert np.isfinite(s.release.half_width).all()
        else:
            assert i - start + 1 == n
            group = np.sum(perturbed[start:i + 1], axis=0)
            assert np.array_equal(s.release.counts, (2 * group + n) // (2 * n))
            assert np.isinf(s.release.half_width).all()


# ---------------------------------------------------------------------------
# FAST_w
#
# The only data access is the sample (a fresh release at ε/C); the Kalman
# filter, the PID controller and the schedule read only released values.
# Checks: draws vs charges and window sums (exact); at most C samples in any
# window of w, counted from the releases; every sample at ε/C; locality by
# exact coupling (a neighbour at s with the sample noise of s shifted so the
# noisy sample is the same: the release at s and every later one must be
# identical); the release loss (statistical).

C = 2


@dataclass(frozen=True)
class _FastFilterReadsTruth(FastPolicy):
    """The filter corrects with the true histogram instead of the noisy sample (stashed by decide)."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        decision, new = super().decide(state, ctx)
        object.__setattr__(self, "_raw", ctx.counts)
        return decision, new

    def smooth(self, state, timestep, noisy):  # type: ignore[no-untyped-def]
        raw = NoisyHistogram(np.asarray(self._raw), noisy.epsilon, noisy.half_width, noisy.confidence)
        return super().smooth(state, timestep, raw)


@dataclass(frozen=True)
class _FastSamplesFreely(FastPolicy):
    """Samples whenever its (lenient, 2ε) ledger allows, ignoring the schedule and M."""

    def new_accountant(self) -> Accountant:
        return WindowAccountant(2 * self.unit.epsilon, self.unit.w)

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        if not ctx.accountant.can_spend(ctx.timestep, self.per_sample):
            return REPUBLISH, state
        return fresh(self.per_sample), state


@dataclass(frozen=True)
class _FastChargesShare(FastPolicy):
    """Charges ε/w per sample (paired with a mechanism drawing for w times that)."""

    @property
    def per_sample(self) -> Fraction:
        return self.unit.epsilon / self.unit.w


FAST_VARIANTS: dict[str, tuple[type, type]] = {
    "filter corrects with the true counts": (_FastFilterReadsTruth, LaplaceMechanism),
    "samples beyond M per window (lenient ledger)": (_FastSamplesFreely, LaplaceMechanism),
    "charges eps/w per sample, draws noise for eps": (_FastChargesShare, _ChargesShareMechanism),
}


def _fast_engine(cls: type = FastPolicy, mech: type = LaplaceMechanism) -> Engine:
    return Engine(cls(WEvent(EPS, W, C)), mech(), BINS)


def fast_violations(engine: Engine, steps: list[Step], counts: np.ndarray) -> list[str]:
    policy = engine.policy
    errors = window_violations(steps, EPS, W)
    errors += draw_charge_violations(steps, 1, lambda s: ["publication"] if s.release.kind == "fresh" else [])
    fresh_at = [s.release.timestep for s in steps if s.release.kind == "fresh"]
    for start in range(len(steps)):
        n = sum(start <= t < start + W for t in fresh_at)
        if n > C:
            errors.append(f"{n} samples in the window starting at {start}, at most M = C = {C}")
    for s in steps:
        pubs = [e.epsilon for e in s.release.ledger if e.start == s.release.timestep]
        if s.release.kind == "fresh" and pubs != [EPS / C]:
            errors.append(f"t={s.release.timestep}: sample charged {pubs}, expected [{EPS / C}]")
    errors += sampled_locality_and_loss(engine, steps, counts, seed=37)[1]
    del policy
    return errors


def sampled_locality_and_loss(engine: Engine, steps: list[Step], counts: np.ndarray,
                              seed: int) -> tuple[list[tuple[int, int]], list[str]]:
    """Coupled locality at up to 12 fresh timesteps (a random bin each; the neighbours returned) and
    the release loss of each distinct release scale against its charge."""
    fresh_at = [s.release.timestep for s in steps if s.release.kind == "fresh"]
    rng = np.random.default_rng(2)
    changed = [(int(t), int(rng.integers(BINS))) for t in rng.choice(fresh_at[1:-1], min(12, len(fresh_at) - 2),
                                                                       replace=False)]
    errors = coupled_locality_violations(engine, counts, changed)
    for loss, charged in release_loss(steps, 1, seed=seed):
        if loss > charged:
            errors.append(f"release loss lower bound {loss:.3f} > charged {charged}")
    return changed, errors


def test_fast_passes_its_audit():
    engine, counts = _fast_engine(), adversarial_stream()
    steps = run_recorded(engine, counts)
    assert fast_violations(engine, steps, counts) == []
    gaps = np.diff([s.release.timestep for s in steps if s.release.kind == "fresh"])
    assert len(set(gaps.tolist())) > 1  # the PID moved the interval on this stream


@pytest.mark.parametrize("variant", sorted(FAST_VARIANTS))
def test_fast_audit_catches(variant):
    cls, mech = FAST_VARIANTS[variant]
    engine, counts = _fast_engine(cls, mech), adversarial_stream()
    steps = run_recorded(engine, counts)
    assert fast_violations(engine, steps, counts), f"{variant} not caught"


def test_fast_filter_is_a_kalman_filter_on_the_samples():
    """Posterior = prior + K (z − prior), K = P/(P+R), P grows by Q per timestep since the last sample."""
    engine, counts = _fast_engine(), adversarial_stream(60)
    steps = run_recorded(engine, counts)
    policy = engine.policy
    r = 2 * float(1 / policy.per_sample) ** 2
    estimate, p, last = None, 0.0, -1
    for s in steps:
        t = s.release.timestep
        if s.release.kind != "fresh":
            assert estimate is None or np.array_equal(s.release.counts, estimate)  # the prediction
            continue
        z = counts[t] + next(d.values for d in s.draws if d.size == BINS)
        if estimate is None:
            estimate, p = z.astype(np.float64), r
        else:
            prior_p = p + policy.process_ratio * r * (t - last)
            k = prior_p / (prior_p + r)
            estimate, p = estimate + k * (z - estimate), (1 - k) * prior_p
        last = t
        np.testing.assert_allclose(s.release.counts, estimate, rtol=1e-12)
        assert np.isinf(s.release.half_width).all() or s.release.timestep == 0
