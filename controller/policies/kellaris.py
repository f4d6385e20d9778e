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
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from controller.accountant import Accountant, WindowAccountant
from controller.errors import ConfigurationError, StateError
from controller.policies.base import REPUBLISH, Decision, DecisionContext, fresh
from controller.units import WEvent
from histogram.distance import l1_distance

__all__ = ["KellarisState", "BudgetDistribution", "BudgetAbsorption", "bd_publication_epsilon", "GRID_STEPS"]

#: BD's publication ε is a whole multiple of (ε/2) / GRID_STEPS (see ``_Kellaris.grid``).
GRID_STEPS = 2**32


def bd_publication_epsilon(remaining: Fraction, grid: Fraction) -> Fraction:
    """BD's publication ε: half of what the window has ``remaining``, rounded down to ``grid``.

    Never more than ``remaining / 2`` (the paper's rule), so the window's bound is unchanged;
    equal to it whenever that is already on the grid, e.g. for the first 32 halvings of a window.
    """
    if remaining <= 0:
        return Fraction(0)
    return (remaining / 2 // grid) * grid


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
    def publication_budget(self) -> Fraction:
        """ε/2: what publications in any window may spend together."""
        return self.unit.epsilon / 2

    @property
    def grid(self) -> Fraction:
        """The unit BD's publication ε is a whole multiple of: (ε/2) / 2³², a public constant.

        Rounding down to it spends at most what the paper's rule would, and keeps every ε in the
        ledger and the journal on one grid, so their exact fractions stay a bounded size however
        long the stream runs (without it, halving what is left after budget slid out of the
        window adds a power of two to the denominators every few timesteps).
        """
        return self.publication_budget / GRID_STEPS

    def new_accountant(self) -> Accountant:
        return WindowAccountant(self.unit.epsilon, self.unit.w)

    def reset(self) -> KellarisState:
        return KellarisState()

    def _recent(self, state: KellarisState, t: int) -> tuple[tuple[int, Fraction], ...]:
        return tuple(p for p in state.publications if p[0] > t - self.unit.w)

    def _dissimilar(self, ctx: DecisionContext, potential: Fraction) -> bool:
        """Charge and run the private test: is the change larger than a release's error?"""
        t = ctx.timestep
        ctx.accountant.spend(t, self.test_epsilon, "test")
        scale = Fraction(self.sensitivity) / self.test_epsilon
        noisy = l1_distance(ctx.counts, ctx.last_counts) + int(ctx.noise.discrete_laplace(scale))
        error = ctx.mechanism.expected_abs_error(potential, ctx.bins) * ctx.bins
        return noisy > error

    def on_fresh(self, state: KellarisState, timestep: int) -> KellarisState:
        return state

    def charges(self) -> tuple[Fraction, ...]:
        """Tests of ε/(2w); BD's publications on its grid, BA's in whole shares ε/(2w)."""
        return (self.test_epsilon, self.grid, self.publication_budget)

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

    def decide(self, state: KellarisState, ctx: DecisionContext) -> tuple[Decision, KellarisState]:
        t = ctx.timestep
        recent = self._recent(state, t)
        state = replace(state, publications=recent)
        remaining = self.publication_budget - sum((e for _, e in recent), Fraction(0))
        potential = bd_publication_epsilon(remaining, self.grid)
        if potential <= 0 or not ctx.accountant.can_spend(t, self.test_epsilon + potential):
            return REPUBLISH, state  # nothing could be published: skip the test, spend nothing
        if self._dissimilar(ctx, potential):
            return fresh(potential, "dissimilarity above error"), replace(
                state, publications=recent + ((t, potential),), last_publication=t
            )
        return REPUBLISH, state

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

    def decide(self, state: KellarisState, ctx: DecisionContext) -> tuple[Decision, KellarisState]:
        t = ctx.timestep
        state = replace(state, publications=self._recent(state, t))
        if t - state.last_publication <= state.nullified:
            return REPUBLISH, state  # nullified: pays back absorbed shares, reads no data
        available = min(t - (state.last_publication + state.nullified), self.unit.w)
        potential = self.share * available
        if not ctx.accountant.can_spend(t, self.test_epsilon + potential):
            return REPUBLISH, state
        if self._dissimilar(ctx, potential):
            return fresh(potential, "dissimilarity above error"), replace(
                state,
                publications=state.publications + ((t, potential),),
                last_publication=t,
                nullified=available - 1,
            )
        return REPUBLISH, state

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "test_epsilon": str(self.test_epsilon), "share": str(self.share)}
