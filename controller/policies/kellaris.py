"""BD and BA: Kellaris et al.'s w-event mechanisms (VLDB 2014), as baselines.

Both split the window budget ε in half. Every timestep pays ε/(2w) for a
private dissimilarity test — the count-space L1 distance between the true
histogram and the last release plus discrete Laplace noise of scale
Δ/(ε/(2w)) — so the tests of any window cost ε/2. The other ε/2 pays for
publications:

* **BD** (budget distribution): a publication at ``t`` may use half of what
  the window ``[t−w+1, t−1]`` has left, ``ε_rm/2``; budget spent leaves the
  window ``w`` timesteps later. We round that ε down to a multiple of
  (ε/2)/2³² (``bd_publication_epsilon``): never more than the paper spends,
  and the exact fractions in the ledger and journal stay bounded in size.
* **BA** (budget absorption): each timestep owns ε/(2w); a publication
  absorbs the unused shares of the timesteps since the last nullified
  stretch (up to ``w``), and the timesteps after it are nullified (skipped)
  until the absorbed shares are paid back.

A timestep publishes when the noisy dissimilarity exceeds the error the
publication would add (the mechanism's expected absolute error per bin times
the number of bins, the count-space form of Kellaris's ``dis > 1/ε``).

Both rules are written once, over a runs axis (:meth:`_Kellaris.decide_runs`, state
:class:`KellarisRuns`): the lab steps R runs with it, and the service's one run goes through the
same code with R = 1 (:meth:`_Kellaris.decide` converts the journaled :class:`KellarisState` to
one run's arrays and back, so journals keep their format).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np

from controller.accountant import Accountant, WindowAccountant
from controller.errors import ConfigurationError, StateError
from controller.policies.base import (
    Decision,
    DecisionContext,
    RunsContext,
    RunsDecision,
    decide_one,
)
from controller.units import WEvent

__all__ = ["KellarisState", "KellarisRuns", "BudgetDistribution", "BudgetAbsorption", "bd_publication_epsilon",
           "bd_publication_steps", "GRID_STEPS"]

#: BD's publication ε is a whole multiple of (ε/2) / GRID_STEPS (see ``BudgetDistribution.grid``).
GRID_STEPS = 2**32


def bd_publication_steps(remaining: Any, grid: Any) -> Any:
    r"""BD's publication ε in whole ``grid`` steps: half of what the window has ``remaining``,
    rounded down to the grid (0 when nothing remains). Element-wise on arrays (one value per run),
    in any exact representation: ``Fraction``\ s, or int64 units of a ledger (``grid`` in the same).

    Never more than ``remaining / 2`` (the paper's rule), so the window's bound is unchanged;
    equal to it whenever that is already on the grid, e.g. for the first 32 halvings of a window.
    """
    return np.where(remaining > 0, remaining // (2 * grid), 0)


def bd_publication_epsilon(remaining: Fraction, grid: Fraction) -> Fraction:
    """BD's publication ε: half of what the window has ``remaining``, rounded down to ``grid``
    (:func:`bd_publication_steps` of one window, as a ``Fraction``)."""
    return int(bd_publication_steps(remaining, grid)) * grid


@dataclass(frozen=True)
class KellarisState:
    """Public state: recent publications ``(timestep, ε)`` and BA's nullification."""

    publications: tuple[tuple[int, Fraction], ...] = ()
    last_publication: int = -1
    nullified: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "publications": [[t, str(e)] for t, e in self.publications],
            "last_publication": self.last_publication,
            "nullified": self.nullified,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KellarisState:
        try:
            return cls(
                tuple((int(t), Fraction(str(e))) for t, e in data.get("publications", [])),
                int(data.get("last_publication", -1)),
                int(data.get("nullified", 0)),
            )
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise StateError(f"malformed BD/BA state: {exc}") from exc


@dataclass(eq=False)
class KellarisRuns:
    """Public state of R runs of BD or BA, arrays with a leading runs axis (mutated in place by
    :meth:`_Kellaris.decide_runs`; the service's one run is converted from and to
    :class:`KellarisState` at each timestep, so the journaled state is never mutated).

    Attributes:
        t: the last timestep decided (−1 before the first); every timestep is decided, in order.
        last_publication: ``(R,)`` each run's last fresh timestep (−1: none).
        nullified: ``(R,)`` BA: timesteps after ``last_publication`` that are nullified (skipped).
        window: ``(R, w)`` BD: the publication ε of timestep ``s`` at column ``s mod w`` while ``s`` is
            in the window, in the ledger's representation (int64 units or ``Fraction`` objects);
            None until the first decision (BA: always None).
        errors: the publication error (``mechanism.expected_abs_error(ε, bins) · bins``, public) of
            each potential ε seen, keyed by ε in steps (BD's grid, BA's share).
        amounts: ``(ledger, test ε, step ε, BD's budget ε)`` in that ledger's representation.
        test_scale: the test's noise scale Δ/ε_test (one object for the whole run: lab noise
            sources key their blocks by it).
        step: the ε every publication is a whole number of (:attr:`_Kellaris.step`).
    """

    t: int
    last_publication: np.ndarray
    nullified: np.ndarray
    test_scale: Fraction
    step: Fraction
    window: np.ndarray | None = None
    errors: dict[int, float] = field(default_factory=dict)
    amounts: tuple[Any, Any, Any, Any] | None = None


class _Kellaris:
    unit: WEvent
    sensitivity: int
    name: str

    def _check(self) -> None:
        if not isinstance(self.unit, WEvent):
            raise ConfigurationError(
                f"{self.name} is a w-event mechanism: set privacy.unit to w-event (and privacy.w)"
            )

    @property
    def test_epsilon(self) -> Fraction:
        """ε of each timestep's dissimilarity test: ε/(2w)."""
        return self.unit.epsilon / (2 * self.unit.w)

    @property
    def test_scale(self) -> Fraction:
        """The test's discrete Laplace scale Δ/ε_test (count space)."""
        return Fraction(self.sensitivity) / self.test_epsilon

    @property
    def publication_budget(self) -> Fraction:
        """ε/2: what publications in any window may spend together."""
        return self.unit.epsilon / 2

    @property
    def step(self) -> Fraction:
        """The ε every publication is a whole number of (BD's grid, BA's share)."""
        raise NotImplementedError

    def new_accountant(self) -> Accountant:
        return WindowAccountant(self.unit.epsilon, self.unit.w)

    def reset(self) -> KellarisState:
        return KellarisState()

    def reset_runs(self, runs: int) -> KellarisRuns:
        """R runs before the first timestep."""
        return KellarisRuns(-1, np.full(runs, -1, dtype=np.int64), np.zeros(runs, dtype=np.int64), self.test_scale,
                            self.step)

    def _recent(self, state: KellarisState, t: int) -> tuple[tuple[int, Fraction], ...]:
        return tuple(p for p in state.publications if p[0] > t - self.unit.w)

    # -- the rule, over runs ---------------------------------------------------
    def _amounts(self, state: KellarisRuns, ctx: RunsContext) -> tuple[Any, Any, Any, Any]:
        amounts = state.amounts
        if amounts is None or amounts[0] is not ctx.ledger:
            amount = ctx.ledger.amount
            amounts = state.amounts = (ctx.ledger, amount(self.test_epsilon), amount(self.step),
                                       amount(self.publication_budget))
        return amounts

    def _potential(self, state: KellarisRuns, ctx: RunsContext, step: Any, budget: Any) -> np.ndarray:
        """``(R,)`` the ε each run could publish at this timestep, in whole steps (0: none)."""
        raise NotImplementedError

    def _errors(self, state: KellarisRuns, ctx: RunsContext, steps: np.ndarray) -> np.ndarray:
        """The error a publication of ``steps`` steps would add, per row: the mechanism's expected
        absolute error per bin times the bins (its public error model; cached per ε). A mechanism
        that also states the model for ε in whole units (LPA's ``expected_abs_error_in_units``, bit
        for bit the same float) is asked that way, without ``Fraction`` arithmetic per ε."""
        errors, bins, mech = state.errors, int(ctx.counts.size), ctx.mechanism  # type: ignore[union-attr]
        keys = steps.tolist()
        missing = set(keys).difference(errors)
        if missing:
            step = state.step
            in_units = getattr(mech, "expected_abs_error_in_units", None)
            for k in missing:
                per_bin = in_units(k, step) if in_units is not None else mech.expected_abs_error(k * step, bins)  # type: ignore[union-attr]
                errors[k] = per_bin * bins
        return np.array([errors[k] for k in keys], dtype=np.float64)

    def _dissimilar_runs(self, state: KellarisRuns, ctx: RunsContext, rows: np.ndarray,
                         error: np.ndarray) -> np.ndarray:
        """Charge and run the private test for ``rows``: is the change larger than a release's error?

        Each row's test charges ε/(2w), then compares the count-space L1 distance plus discrete
        Laplace noise of scale Δ/(ε/(2w)) with ``error`` (per row, public)."""
        ctx.ledger.spend(ctx.timestep, rows, state.amounts[1], "test")  # type: ignore[index]
        return ctx.l1(rows) + ctx.noise.laplace(rows, state.test_scale, None) > error  # type: ignore[union-attr]

    def decide_runs(self, state: KellarisRuns, ctx: RunsContext) -> tuple[RunsDecision, KellarisRuns]:
        """Every run: test (and pay ε/(2w)) where a publication could be made, publish where the
        noisy dissimilarity exceeds that publication's error. ``state`` is updated in place."""
        t = ctx.timestep
        if t != state.t + 1:
            raise StateError(f"{self.name}: timestep {t} decided after {state.t}: the runs' state is "
                             "stepped every timestep, in order (convert a journaled state with decide)")
        test, step, budget = self._amounts(state, ctx)[1:]
        steps = self._potential(state, ctx, step, budget)
        state.t = t
        ok = (steps > 0) & ctx.ledger.can_spend(t, test + steps * step)
        rows = ok.nonzero()[0]
        if not rows.size:
            return RunsDecision(rows, rows), state
        steps = steps[rows]
        fresh = self._dissimilar_runs(state, ctx, rows, self._errors(state, ctx, steps))
        fresh_rows = rows[fresh]
        fresh_steps = steps[fresh]
        amounts = fresh_steps * step
        if state.window is not None:
            state.window[fresh_rows, t % self.unit.w] = amounts
        state.last_publication[fresh_rows] = t
        self._published(state, fresh_rows, fresh_steps)
        return RunsDecision(fresh_rows, amounts, "dissimilarity above error"), state

    def _published(self, state: KellarisRuns, rows: np.ndarray, steps: np.ndarray) -> None:
        return None

    # -- the service's one run -------------------------------------------------
    def _one_run(self, state: KellarisState, t: int) -> KellarisRuns:
        r"""The journaled state as one run's arrays, before timestep ``t`` (exact ``Fraction``\ s)."""
        raise NotImplementedError

    def decide(self, state: KellarisState, ctx: DecisionContext) -> tuple[Decision, KellarisState]:
        """The service's run: :meth:`decide_runs` with R = 1 on the engine's accountant."""
        t = ctx.timestep
        recent = self._recent(state, t)
        decision, runs = decide_one(self, self._one_run(replace(state, publications=recent), t), ctx)
        if not decision.fresh:
            return decision, replace(state, publications=recent)
        return decision, KellarisState(recent + ((t, decision.epsilon),), t, int(runs.nullified[0]))

    def on_fresh(self, state: KellarisState, timestep: int) -> KellarisState:
        return state

    def charges(self) -> tuple[Fraction, ...]:
        """Tests of ε/(2w); BD's publications on its grid, BA's in whole shares ε/(2w)."""
        return (self.test_epsilon, self.grid, self.publication_budget)

    @property
    def grid(self) -> Fraction:
        """The unit BD's publication ε is a whole multiple of: (ε/2) / 2³², a public constant.

        Rounding down to it spends at most what the paper's rule would, and keeps every ε in the
        ledger and the journal on one grid, so their exact fractions stay a bounded size however
        long the stream runs (without it, halving what is left after budget slid out of the
        window adds a power of two to the denominators every few timesteps).
        """
        return self.publication_budget / GRID_STEPS

    def state_to_json(self, state: KellarisState) -> dict[str, Any]:
        return state.to_json()

    def state_from_json(self, data: dict[str, Any]) -> KellarisState:
        return KellarisState.from_json(data)


@dataclass(frozen=True)
class BudgetDistribution(_Kellaris):
    """BD: exponentially decreasing publication budgets within a window."""

    unit: WEvent
    sensitivity: int = 1
    name: str = "bd"

    def __post_init__(self) -> None:
        self._check()

    @property
    def step(self) -> Fraction:
        return self.grid

    def _potential(self, state: KellarisRuns, ctx: RunsContext, step: Any, budget: Any) -> np.ndarray:
        """Half of what the window ``[t−w+1, t−1]`` has left, rounded down to the grid
        (:func:`bd_publication_steps`)."""
        t, w = ctx.timestep, self.unit.w
        window = state.window
        if window is None:
            dtype = object if isinstance(step, Fraction) else np.int64
            window = state.window = np.zeros((ctx.runs, w), dtype=dtype)
        window[:, t % w] = 0  # the publication of t − w leaves the window
        return bd_publication_steps(budget - window.sum(axis=1), step)

    def _one_run(self, state: KellarisState, t: int) -> KellarisRuns:
        runs = self.reset_runs(1)
        runs.t = t - 1
        runs.last_publication[0] = state.last_publication
        runs.nullified[0] = state.nullified
        runs.window = np.zeros((1, self.unit.w), dtype=object)
        for s, eps in state.publications:  # the recent ones: t − w < s < t
            runs.window[0, s % self.unit.w] += eps
        return runs

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "test_epsilon": str(self.test_epsilon)}


@dataclass(frozen=True)
class BudgetAbsorption(_Kellaris):
    """BA: uniform shares absorbed by publications, repaid by nullified timesteps."""

    unit: WEvent
    sensitivity: int = 1
    name: str = "ba"

    def __post_init__(self) -> None:
        self._check()

    @property
    def share(self) -> Fraction:
        """Each timestep's publication share ε/(2w)."""
        return self.publication_budget / self.unit.w

    @property
    def step(self) -> Fraction:
        return self.share

    def _potential(self, state: KellarisRuns, ctx: RunsContext, step: Any, budget: Any) -> np.ndarray:
        """The shares since the last nullified stretch, at most w; 0 while nullified (a nullified
        timestep pays back absorbed shares and reads no data)."""
        t = ctx.timestep
        since = t - (state.last_publication + state.nullified)
        return np.where(since > 0, np.minimum(since, self.unit.w), 0)

    def _published(self, state: KellarisRuns, rows: np.ndarray, steps: np.ndarray) -> None:
        state.nullified[rows] = steps - 1  # the absorbed shares are paid back by skipping

    def _one_run(self, state: KellarisState, t: int) -> KellarisRuns:
        runs = self.reset_runs(1)
        runs.t = t - 1
        runs.last_publication[0] = state.last_publication
        runs.nullified[0] = state.nullified
        return runs

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "test_epsilon": str(self.test_epsilon), "share": str(self.share)}
