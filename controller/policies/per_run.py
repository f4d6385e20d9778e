"""A one-run policy stepped over a runs axis, one run at a time (AdaPub, RescueDP).

Issue 29 lets the grouped-release policies start as plain per-run loops: their rule stays the
one-run ``decide`` / ``smooth`` the service runs, and :func:`decide_per_run` / :func:`smooth_per_run`
call it once per run with that run's view of the runs' ledger (:class:`RunAccountant`) and noise
(:class:`histogram.noise.RunDrawer`). No rule is copied: a policy's ``decide_runs`` is a call of
:func:`decide_per_run`, its ``after_runs`` one of :func:`smooth_per_run`.

Privacy: nothing is charged or drawn here; each run's ``decide`` charges its own row of the ledger
through :class:`RunAccountant` (before drawing, as on the engine's accountant), and the caller charges
the publications (``RunsDecision.amounts``) and draws each run's grouped release
(:func:`controller.grouped.release_groups`) before :func:`smooth_per_run` post-processes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from controller.errors import StateError
from controller.ledger import RunsLedger
from controller.policies.base import DecisionContext, RunsContext, RunsDecision
from histogram.mechanism import NoisyHistogram
from histogram.noise import RunDrawer

__all__ = ["PerRunLoop", "PerRunStates", "RunAccountant", "decide_per_run", "reset_per_run", "smooth_per_run"]


@dataclass(frozen=True)
class PerRunStates:
    """R runs of a one-run policy: each run's own state, and the ε of its last fresh release (public;
    what the engine hands ``decide`` as ``DecisionContext.last_epsilon``; 0 before any)."""

    states: tuple[Any, ...]
    last_epsilon: tuple[Fraction, ...]


class RunAccountant:
    """Run ``run`` of a :class:`~controller.ledger.RunsLedger` seen as the window accountant a
    one-run rule asks: ``can_spend``, ``spend`` (that run's row only) and ``remaining``.

    ε is given as a ``Fraction`` and converted with :meth:`RunsLedger.amount` (an amount off a unit
    ledger's grid raises there). ``remaining(t)`` is ε minus the run's live entries in the window
    ending at ``t`` (:meth:`RunsLedger.window_spent`, the sum of :meth:`RunsLedger.view`'s live
    entries), the accountant's ``remaining``."""

    def __init__(self, ledger: RunsLedger, run: int, epsilon: Fraction) -> None:
        self.ledger = ledger
        self.run = run
        self.rows = np.array([run], dtype=np.int64)
        self.epsilon = Fraction(epsilon)

    def can_spend(self, timestep: int, epsilon: Fraction) -> bool:
        return bool(self.ledger.can_spend(timestep, self.ledger.amount(epsilon))[self.run])

    def spend(self, timestep: int, epsilon: Fraction, purpose: str) -> None:
        self.ledger.spend(timestep, self.rows, self.ledger.amount(epsilon), purpose)

    def remaining(self, timestep: int) -> Fraction:
        return self.epsilon - self.ledger.window_spent(timestep, self.run)


def reset_per_run(policy: Any, runs: int) -> PerRunStates:
    """``runs`` copies of ``policy.reset()`` (its states are immutable values)."""
    return PerRunStates(tuple(policy.reset() for _ in range(runs)), (Fraction(0),) * runs)


def decide_per_run(policy: Any, state: PerRunStates, ctx: RunsContext) -> tuple[RunsDecision, PerRunStates]:
    """``policy.decide`` for each run in turn, on that run's ledger row and noise.

    Each run's context is the engine's: the shared true counts, the run's last release, fresh count
    and last ε. Fresh runs come back with their ε in the ledger's representation and, when the policy
    planned groups, their labels stacked ``(len(rows), U)``."""
    if ctx.counts is None or ctx.last is None or ctx.noise is None or ctx.mechanism is None:
        raise ValueError("a per-run policy needs the RunsContext's counts, last, noise and mechanism")
    epsilon = Fraction(policy.unit.epsilon)
    states = list(state.states)
    rows: list[int] = []
    amounts: list[Any] = []
    groups: list[np.ndarray | None] = []
    reason = ""
    for r in range(ctx.runs):
        one = DecisionContext(ctx.timestep, ctx.counts, ctx.last[r], int(ctx.fresh_count[r]),
                              RunAccountant(ctx.ledger, r, epsilon),  # type: ignore[arg-type]
                              RunDrawer(ctx.noise, r), ctx.mechanism, state.last_epsilon[r])
        decision, states[r] = policy.decide(states[r], one)
        if decision.fresh:
            rows.append(r)
            amounts.append(ctx.ledger.amount(decision.epsilon))
            groups.append(decision.groups)
            reason = reason or decision.reason
    planned = [g is not None for g in groups]
    if any(planned) and not all(planned):
        raise StateError(f"{policy.name} planned groups for some fresh runs and not others at timestep {ctx.timestep}")
    dtype = object if amounts and isinstance(amounts[0], Fraction) else np.int64
    stacked = np.stack([np.asarray(g, dtype=np.int64) for g in groups]) if groups and all(planned) else None
    decision_out = RunsDecision(np.array(rows, dtype=np.int64), np.array(amounts, dtype=dtype), reason, stacked)
    return decision_out, PerRunStates(tuple(states), state.last_epsilon)


def smooth_per_run(policy: Any, state: PerRunStates, ctx: RunsContext, rows: np.ndarray,
                   noisy: Any) -> tuple[np.ndarray, PerRunStates]:
    """What each fresh run publishes: ``policy.smooth`` then ``policy.on_fresh``, as the engine calls
    them, on that run's release (a :class:`NoisyHistogram` per row: group sums for a grouped release).
    Returns the published counts ``(len(rows), U)`` (floats) and the runs' states."""
    states, last_epsilon = list(state.states), list(state.last_epsilon)
    out = np.zeros((rows.size, 0 if ctx.counts is None else ctx.counts.size))
    for i, r in enumerate(rows.tolist()):
        release = noisy[i]
        if not isinstance(release, NoisyHistogram):
            raise StateError(f"{policy.name} smooths whole releases: give one NoisyHistogram per fresh run")
        published, states[r] = policy.smooth(states[r], ctx.timestep, release)
        states[r] = policy.on_fresh(states[r], ctx.timestep)
        out[i] = published.counts
        last_epsilon[r] = release.epsilon
    return out, PerRunStates(tuple(states), tuple(last_epsilon))


class PerRunLoop:
    """The runs-axis hooks of a policy whose rule runs once per run (AdaPub, RescueDP): its own
    ``decide`` and ``smooth`` called for each run in turn (:func:`decide_per_run`,
    :func:`smooth_per_run`); published releases are floats (a median / a filtered estimate)."""

    runs_publish_float = True

    def reset_runs(self, runs: int) -> PerRunStates:
        return reset_per_run(self, runs)

    def decide_runs(self, state: PerRunStates, ctx: RunsContext) -> tuple[RunsDecision, PerRunStates]:
        """:meth:`decide` for each run (its ledger row, its noise): a plain per-run loop."""
        return decide_per_run(self, state, ctx)

    def after_runs(self, state: PerRunStates, ctx: RunsContext, rows: np.ndarray,
                   noisy: Any) -> tuple[np.ndarray, PerRunStates]:
        """:meth:`smooth` of each fresh run's grouped release (one NoisyHistogram of group sums per row)."""
        return smooth_per_run(self, state, ctx, rows, noisy)
