"""The simple baselines the thesis (§4.1.4, §4.5) and Schäler et al. compare with.

* :class:`UniformPolicy` — a fresh release every timestep: ε/N each under
  user-level privacy (for the first N timesteps), ε/w each under w-event.
* :class:`FixedPolicy` — fixed sampling: under user-level privacy a fresh
  release every ``N // C`` timesteps with ε/C each; under w-event privacy
  ("Sample") the window's budget at one timestep in ``ceil(w / C)`` (with
  C = 1: all of ε once every w timesteps), so any window holds at most C.

Neither reads data to decide, so they spend only on publications. Both decide over a runs axis
(:meth:`decide_runs`); the service's one run goes through :func:`controller.policies.base.decide_one`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from controller.accountant import Accountant, UserLevelAccountant, WindowAccountant
from controller.policies.base import (
    Decision,
    DecisionContext,
    RunsContext,
    RunsDecision,
    amounts_for,
    decide_one,
)
from controller.units import PrivacyUnit, UserLevel, WEvent

__all__ = ["UniformPolicy", "FixedPolicy", "accountant_for", "schedule_runs", "NO_RUNS"]


def accountant_for(unit: PrivacyUnit) -> Accountant:
    """The accountant that enforces ``unit``."""
    if isinstance(unit, UserLevel):
        return UserLevelAccountant(unit.epsilon)
    return WindowAccountant(unit.epsilon, unit.w)


#: no run publishes fresh (read-only)
NO_RUNS = np.zeros(0, dtype=np.int64)
NO_RUNS.setflags(write=False)


def schedule_runs(ctx: RunsContext, epsilon: Fraction, reason: str, allowed: np.ndarray | None = None) -> RunsDecision:
    """A scheduled release of ``epsilon`` at this timestep: fresh in every run (among ``allowed``)
    whose ledger can take it; the others republish (a data-independent decision: no charge)."""
    amount = ctx.ledger.amount(epsilon)
    ok = ctx.ledger.can_spend(ctx.timestep, amount)
    rows = np.flatnonzero(ok if allowed is None else ok & allowed)
    return RunsDecision(rows, amounts_for(amount, rows), reason)


class _Stateless:
    """State handling for policies whose decisions need no memory."""

    unit: PrivacyUnit

    def new_accountant(self) -> Accountant:
        return accountant_for(self.unit)

    def reset(self) -> None:
        return None

    def on_fresh(self, state: None, timestep: int) -> None:
        return None

    def state_to_json(self, state: None) -> dict[str, Any]:
        return {}

    def state_from_json(self, data: dict[str, Any]) -> None:
        return None


@dataclass(frozen=True)
class UniformPolicy(_Stateless):
    """LPA at every timestep with an equal share of the budget."""

    unit: PrivacyUnit
    name: str = "uniform"

    @property
    def per_timestep(self) -> Fraction:
        if isinstance(self.unit, UserLevel):
            return self.unit.epsilon / self.unit.horizon
        return self.unit.epsilon / self.unit.w

    def decide(self, state: None, ctx: DecisionContext) -> tuple[Decision, None]:
        return decide_one(self, state, ctx)

    def decide_runs(self, state: None, ctx: RunsContext) -> tuple[RunsDecision, None]:
        if isinstance(self.unit, UserLevel) and ctx.timestep >= self.unit.horizon:
            return RunsDecision(NO_RUNS, NO_RUNS), None  # past the horizon the budget is spent
        return schedule_runs(ctx, self.per_timestep, "uniform"), None

    def charges(self) -> tuple[Fraction, ...]:
        return (self.per_timestep,)

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "per_timestep_epsilon": str(self.per_timestep)}


@dataclass(frozen=True)
class FixedPolicy(_Stateless):
    """Fixed sampling (user-level) / Sample (w-event)."""

    unit: PrivacyUnit
    name: str = "fixed"

    @property
    def interval(self) -> int:
        if isinstance(self.unit, UserLevel):
            return max(1, self.unit.horizon // self.unit.cutoff)
        return -(-self.unit.w // self.unit.cutoff)  # ceil(w / C)

    @property
    def per_release(self) -> Fraction:
        return self.unit.epsilon / self.unit.cutoff

    def decide(self, state: None, ctx: DecisionContext) -> tuple[Decision, None]:
        return decide_one(self, state, ctx)

    def decide_runs(self, state: None, ctx: RunsContext) -> tuple[RunsDecision, None]:
        if ctx.timestep % self.interval != 0:
            return RunsDecision(NO_RUNS, NO_RUNS), None
        allowed = ctx.fresh_count < self.unit.cutoff if isinstance(self.unit, UserLevel) else None
        return schedule_runs(ctx, self.per_release, "schedule", allowed), None

    def charges(self) -> tuple[Fraction, ...]:
        return (self.per_release,)

    def describe(self) -> dict[str, Any]:
        return {
            "decision": self.name,
            "interval": self.interval,
            "per_release_epsilon": str(self.per_release),
            "variant": "sample" if isinstance(self.unit, WEvent) else "fixed-sampling",
        }
