"""What every decision policy implements, and what it is given each timestep.

A policy decides, for one timestep, between a fresh release (and its ε) and
republishing the last release. It may charge the accountant for what its
decision reads (a noisy distance, a threshold), always *before* drawing that
noise. It never draws the release noise itself: the step function does, after
charging the publication.

Runs axis. A policy may decide for R independent runs at once (:meth:`RunsPolicy.decide_runs`):
its state is then arrays with a leading runs axis, it asks a :class:`controller.ledger.RunsLedger`
per run (``ledger.can_spend(t, amount)`` is a mask) and answers which runs publish fresh and at
what ε. The service runs one run: :func:`decide_one` wraps the engine's exact accountant in an
:class:`~controller.ledger.AccountantLedger` and calls the same ``decide_runs``, so a policy that
has it keeps its decision rule in one place for the service and the lab.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

import numpy as np

from controller.accountant import Accountant
from controller.ledger import AccountantLedger, RunsLedger
from controller.units import PrivacyUnit
from histogram.distance import l1_distance_rows
from histogram.mechanism import Mechanism
from histogram.noise import DrawerNoise, NoiseDrawer, RunsNoise

__all__ = ["Decision", "DecisionContext", "DecisionPolicy", "REPUBLISH", "fresh", "RunsContext", "RunsDecision",
           "RunsPolicy", "amounts_for", "decide_one"]


@dataclass(frozen=True)
class Decision:
    """Fresh release at ``epsilon``, or republish (``fresh=False``).

    ``groups`` (optional, fresh only): one label per bin, a group number or −1, computed from
    public values only; the engine then releases noisy group sums at ``epsilon`` instead of the
    mechanism's histogram (:mod:`controller.grouped`), for the policy's ``smooth`` to publish.
    """

    fresh: bool
    epsilon: Fraction = Fraction(0)
    reason: str = ""
    groups: np.ndarray | None = field(default=None, compare=False)


REPUBLISH = Decision(False)


def fresh(epsilon: Fraction, reason: str = "", groups: np.ndarray | None = None) -> Decision:
    return Decision(True, Fraction(epsilon), reason, groups)


@dataclass
class DecisionContext:
    """Everything a policy may use at one timestep.

    Attributes:
        timestep: 0-based index of this timestep in the stream.
        counts: the true histogram (private: read only through charged noise).
        last_counts: the last release's counts (public).
        last_epsilon: the ε of the fresh release behind ``last_counts`` (public; 0 before any).
        fresh_count: fresh releases published so far (public).
        accountant: the working accountant; charge before drawing.
        noise: this timestep's noise drawer.
        mechanism: the release mechanism (for its public error model).
    """

    timestep: int
    counts: np.ndarray
    last_counts: np.ndarray
    fresh_count: int
    accountant: Accountant
    noise: NoiseDrawer
    mechanism: Mechanism
    last_epsilon: Fraction = Fraction(0)

    @property
    def bins(self) -> int:
        return int(self.counts.size)


@runtime_checkable
class DecisionPolicy(Protocol):
    """A decision method (DSFT, DSAT, uniform, fixed, BD, BA, …)."""

    name: str
    unit: PrivacyUnit

    def new_accountant(self) -> Accountant:
        """A fresh accountant of the right kind for this policy's privacy unit."""
        ...

    def reset(self) -> Any:
        """The policy's state before the first timestep."""
        ...

    def decide(self, state: Any, ctx: DecisionContext) -> tuple[Decision, Any]:
        """Decide this timestep; may charge ``ctx.accountant`` and draw from ``ctx.noise``."""
        ...

    def on_fresh(self, state: Any, timestep: int) -> Any:
        """Update the state after a fresh release was drawn at ``timestep``."""
        ...

    def charges(self) -> tuple[Fraction, ...]:
        """The policy's privacy map: public ε amounts of which every charge it makes (decision
        noise, tests, publications) is a whole-number combination, together with ``unit.epsilon``.

        A lab ledger counts ε in whole multiples of their rational gcd
        (:class:`controller.ledger.UnitLedger`), so a charge off this grid is refused, not rounded;
        the policy conformance suite checks every charge the engine makes against it.
        """
        ...

    def state_to_json(self, state: Any) -> dict[str, Any]: ...

    def state_from_json(self, data: dict[str, Any]) -> Any: ...

    def describe(self) -> dict[str, Any]:
        """Public parameters (for the release message and the config hash)."""
        ...


@dataclass
class RunsContext:
    """One timestep of R runs of a policy (the runs share the true histogram, not their state).

    Attributes:
        timestep: 0-based index of this timestep.
        runs: R.
        ledger: the runs' window ledgers (charge before drawing); amounts in its representation.
        fresh_count: ``(R,)`` fresh releases published so far in each run (public).
        counts: the true histogram, ``(U,)``, shared by the runs (private: read only through
            charged noise, e.g. :meth:`l1`).
        last: ``(R, U)`` each run's last release (public; zeros before a run's first release).
        has_last: ``(R,)`` whether a run has released anything yet (public).
        noise: where the runs' decision noise comes from (:class:`histogram.noise.RunsNoise`):
            the timestep's own drawer for the service's one run, a lab source for R runs.
        mechanism: the release mechanism (its public error model and noise scale).
    """

    timestep: int
    runs: int
    ledger: RunsLedger
    fresh_count: np.ndarray
    counts: np.ndarray | None = None
    last: np.ndarray | None = None
    has_last: np.ndarray | None = None
    noise: RunsNoise | None = None
    mechanism: Mechanism | None = None

    def l1(self, rows: np.ndarray) -> np.ndarray:
        """Exact ``floor(Σ|counts − last[r]|)`` for each run in ``rows`` (int64; raw-data derived:
        use only inside a charged query, as :func:`histogram.distance.l1_distance`)."""
        if self.counts is None or self.last is None:
            raise ValueError("this RunsContext carries no histogram: the caller must pass counts and last")
        return l1_distance_rows(self.counts, self.last[rows])


def amounts_for(amount: Any, rows: np.ndarray) -> np.ndarray:
    """One ``amount`` (a ledger amount) per row: int64 for a unit ledger, objects for Fractions."""
    return np.full(rows.size, amount, dtype=object if isinstance(amount, Fraction) else np.int64)


@dataclass(frozen=True)
class RunsDecision:
    """The runs (``rows``, ascending) that publish fresh at this timestep, and the ε of each
    (``amounts``, in the ledger's representation; one value per row). The others republish.

    ``groups`` (optional): ``(len(rows), U)`` int64, each fresh run's group labels as
    :attr:`Decision.groups` (public values only); the caller then releases each run's noisy group
    sums (:func:`controller.grouped.release_groups`) for the policy's ``after_runs`` to publish."""

    rows: np.ndarray
    amounts: np.ndarray
    reason: str = ""
    groups: np.ndarray | None = field(default=None, compare=False)


@runtime_checkable
class RunsPolicy(Protocol):
    """A policy whose decision rule is written over a runs axis (uniform, fixed, Sample, …).

    Optional, for policies with state or a smoother (the lab's one runner,
    ``stream.lab.runner.run_many``, calls them when present):

    * ``reset_runs(runs: int) -> state`` — the state of R runs before the first timestep
      (arrays with a leading runs axis; default ``None``);
    * ``after_runs(state, ctx, rows, noisy) -> (published, state)`` — called after the fresh runs
      ``rows`` were charged and drew their release ``noisy`` (``(len(rows), U)``; for a decision with
      ``groups``, one :class:`~histogram.mechanism.NoisyHistogram` of group sums per row); returns what
      they publish (a smoother or filter of public values; default ``noisy``);
    * ``runs_publish_float: bool`` — whether published releases are floats (a filter).
    """

    def decide_runs(self, state: Any, ctx: RunsContext) -> tuple[RunsDecision, Any]:
        """Decide this timestep for every run; may charge ``ctx.ledger`` (before drawing)."""
        ...


def decide_one(policy: RunsPolicy, state: Any, ctx: DecisionContext) -> tuple[Decision, Any]:
    """The service's single run: ``policy.decide_runs`` on the engine's own exact accountant."""
    ledger = AccountantLedger([ctx.accountant])  # type: ignore[list-item]
    runs_ctx = RunsContext(ctx.timestep, 1, ledger, np.array([ctx.fresh_count], dtype=np.int64),
                           counts=ctx.counts, last=ctx.last_counts[None, :],
                           has_last=np.array([ctx.fresh_count > 0]), noise=DrawerNoise(ctx.noise),
                           mechanism=ctx.mechanism)
    decision, state = policy.decide_runs(state, runs_ctx)
    if decision.rows.size:
        groups = None if decision.groups is None else decision.groups[0]
        return fresh(Fraction(decision.amounts[0]), decision.reason, groups), state
    return REPUBLISH, state
