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

import numpy as np
import pytest

from controller.accountant import Accountant, WindowAccountant
from controller.policies.base import REPUBLISH, fresh
from controller.policies.wevent import SamplePolicy
from controller.step import Engine, Release
from controller.units import WEvent
from histogram.lpa import LaplaceMechanism
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
