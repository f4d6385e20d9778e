"""Charge before draw: a failure at a ledger charge never leaves a draw it should have paid for.

Every method's engine runs a stream with an instrumented accountant and noise
drawer that log, in order, each charge (``spend``/``extend``) and each draw.
Then, for every charge of every timestep, the step is re-run (it is pure) with
that charge failing. The property: when a charge fails, no draw of the kind it
pays for has happened in the step yet —

* a failing ``publication`` charge: no release-sized draw (``bins`` values);
* a failing decision charge (``test``, ``svt``, an ``extend``): no draw at all
  since the step's previous successful charge.

A draw made before its charge would already have influenced what the process
holds when the charge fails (a crash there leaves an uncharged draw). The
reverse-order engine below (release noise drawn, then the publication
charged) is the broken variant this test must catch.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

from controller.policies.kellaris import BudgetDistribution
from controller.step import Engine, EngineState, LastRelease, Release
from controller.units import WEvent
from histogram.lpa import LaplaceMechanism
from histogram.noise import Randomness
from tests.engine_helpers import BINS, all_engines, stream


class InjectedFailure(RuntimeError):
    """The failure injected at a ledger charge."""


class _Log:
    def __init__(self, fail_at: int | None = None) -> None:
        self.events: list[tuple[str, str]] = []  # ("charge", purpose) | ("draw", "release"/"decision")
        self.charges = 0
        self.fail_at = fail_at

    def charge(self, purpose: str) -> None:
        if self.fail_at is not None and self.charges == self.fail_at:
            self.events.append(("fail", purpose))
            raise InjectedFailure(f"charge {self.charges} ({purpose})")
        self.charges += 1
        self.events.append(("charge", purpose))


def _instrument(acct, log: _Log):  # type: ignore[no-untyped-def]
    base = type(acct)

    class Instrumented(base):  # type: ignore[valid-type,misc]
        def spend(self, timestep, epsilon, purpose):  # type: ignore[no-untyped-def]
            log.charge(purpose)
            return super().spend(timestep, epsilon, purpose)

        def extend(self, seq, timestep):  # type: ignore[no-untyped-def]
            log.charge("extend")
            return super().extend(seq, timestep)

        def copy(self):  # type: ignore[no-untyped-def]
            return _instrument(base.copy(self), log)

    acct.__class__ = Instrumented
    return acct


class _Drawer:
    def __init__(self, inner, log: _Log) -> None:  # type: ignore[no-untyped-def]
        self._inner, self._log = inner, log

    def discrete_laplace(self, scale, size=None):  # type: ignore[no-untyped-def]
        self._log.events.append(("draw", "release" if size == BINS else "decision"))
        return self._inner.discrete_laplace(scale, size)

    def uniform_int(self, high):  # type: ignore[no-untyped-def]
        self._log.events.append(("draw", "release"))
        return self._inner.uniform_int(high)

    def bernoulli_exp(self, numerator, denominator):  # type: ignore[no-untyped-def]
        self._log.events.append(("draw", "release"))
        return self._inner.bernoulli_exp(numerator, denominator)


def _step(engine: Engine, state: EngineState, counts, t: int, log: _Log):  # type: ignore[no-untyped-def]
    acct = _instrument(state.accountant.copy(), log)
    s = EngineState(state.timestep, state.fresh_count, acct, state.policy, state.last)
    return engine.step(s, counts, _Drawer(Randomness.seeded(5).drawer("cbd", t), log))


def violations(engine: Engine, timesteps: int = 30) -> list[str]:
    """Every (timestep, charge) at which a failure would leave a draw it should have paid for."""
    out: list[str] = []
    state = engine.initial_state()
    for t, counts in enumerate(stream(timesteps, seed=2)):
        normal = _Log()
        _, next_state = _step(engine, state, counts, t, normal)
        for n in range(normal.charges):
            log = _Log(fail_at=n)
            with pytest.raises(InjectedFailure):
                _step(engine, state, counts, t, log)
            purpose = log.events[-1][1]
            prior = log.events[:-1]
            since_charge = prior[max((i for i, e in enumerate(prior) if e[0] == "charge"), default=-1) + 1:]
            # a decision charge pays for the draw right after it, which may be bins-sized (AdaPub's
            # per-bin tests); any other bins-sized draw before the publication charge is release noise
            paid = [i + 1 for i, e in enumerate(prior) if e[0] == "charge" and e[1] != "publication"]
            early = [i for i, e in enumerate(prior) if e == ("draw", "release") and i not in paid]
            if purpose == "publication" and early:
                out.append(f"t={t}: release noise drawn before the failing publication charge")
            if purpose != "publication" and any(e[0] == "draw" for e in since_charge):
                out.append(f"t={t}: decision noise drawn before the failing {purpose} charge")
        state = next_state
    return out


CASES = [(u, m, e) for u in ("user-level", "w-event") for m, e in all_engines(u)]


@pytest.mark.parametrize(("unit", "name", "engine"), CASES, ids=[f"{u}-{m}" for u, m, _ in CASES])
def test_no_draw_before_its_charge(unit, name, engine):
    assert violations(engine) == []


@dataclass(frozen=True)
class DrawThenCharge(Engine):
    """Broken: draws the release noise, then charges the publication (the reverse order)."""

    def step(self, state, counts, noise):  # type: ignore[no-untyped-def]
        counts = np.asarray(counts)
        acct = state.accountant.copy()
        from controller.policies.base import DecisionContext

        ctx = DecisionContext(state.timestep, counts, state.last.counts, state.fresh_count, acct, noise,
                              self.mechanism, state.last.epsilon)
        decision, policy_state = self.policy.decide(state.policy, ctx)
        last, fresh_count = state.last, state.fresh_count
        if decision.fresh:
            noisy = self.mechanism.release(counts, decision.epsilon, noise)
            acct.spend(state.timestep, decision.epsilon, "publication")
            last = LastRelease(noisy.counts, noisy.half_width, noisy.confidence, state.timestep, decision.epsilon)
            fresh_count += 1
            policy_state = self.policy.on_fresh(policy_state, state.timestep)
        rel = Release(state.timestep, "fresh" if decision.fresh else "republished", last.counts, last.half_width,
                      last.confidence, last.timestep, last.epsilon, acct.spent, None, acct.remaining(state.timestep),
                      fresh_count, self.method)
        return rel, EngineState(state.timestep + 1, fresh_count, acct, policy_state, last)


@pytest.mark.parametrize(("unit", "name"), [(u, m) for u, m, _ in CASES], ids=[f"{u}-{m}" for u, m, _ in CASES])
def test_reverse_order_is_caught(unit, name):
    engine = dict(all_engines(unit))[name]
    broken = DrawThenCharge(engine.policy, engine.mechanism, engine.bins)
    assert any("before the failing publication" in v for v in violations(broken))


@dataclass(frozen=True)
class _TestDrawnFirst(BudgetDistribution):
    """Broken BD: draws the dissimilarity noise, then charges the test."""

    def _dissimilar_runs(self, state, ctx, rows, error):  # type: ignore[no-untyped-def]
        noise = ctx.noise.laplace(rows, Fraction(self.sensitivity) / self.test_epsilon, None)
        ctx.ledger.spend(ctx.timestep, rows, ctx.ledger.amount(self.test_epsilon), "test")
        return ctx.l1(rows) + noise > error


def test_decision_drawn_before_its_charge_is_caught():
    policy = _TestDrawnFirst(WEvent(1, 8))
    broken = Engine(policy, LaplaceMechanism(), BINS)
    assert any("before the failing test charge" in v for v in violations(broken))
