"""w-event mechanisms users compare against (Schäler et al., PVLDB 16(8), 2023).

* :class:`SamplePolicy` — **Sample**: the whole window budget ε at one
  timestep in every ``w`` (timesteps ``0, w, 2w, …``), the last release
  republished in between. Reads no data to decide; any ``w`` consecutive
  timesteps contain exactly one sampled timestep, so every window spends ε
  (``docs/privacy.md`` §4.3).

Each policy is w-event only (its budget rule is per window) and charges
``ctx.accountant`` (a :class:`~controller.accountant.WindowAccountant`)
before any noise is drawn; the ledger refuses a step that would take any
window of ``w`` past ε.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from controller.accountant import Accountant, WindowAccountant
from controller.errors import ConfigurationError
from controller.policies.base import REPUBLISH, Decision, DecisionContext, fresh
from controller.units import WEvent

__all__ = ["SamplePolicy", "W_EVENT_ONLY"]


def _require_w_event(unit: object, name: str) -> None:
    if not isinstance(unit, WEvent):
        raise ConfigurationError(f"{name} is a w-event mechanism: set privacy.unit: w-event and privacy.w")


@dataclass(frozen=True)
class SamplePolicy:
    """Sample: ε at timesteps ``0, w, 2w, …``; republish in between.

    Attributes:
        unit: the w-event unit (ε per window of ``w``); ``unit.cutoff`` is not
            used (Sample always spends the whole window budget at once).
    """

    unit: WEvent
    name: str = "sample"

    def __post_init__(self) -> None:
        _require_w_event(self.unit, self.name)

    @property
    def per_release(self) -> Fraction:
        """ε of each sampled release: the whole window budget."""
        return self.unit.epsilon

    def new_accountant(self) -> Accountant:
        return WindowAccountant(self.unit.epsilon, self.unit.w)

    def reset(self) -> None:
        return None

    def decide(self, state: None, ctx: DecisionContext) -> tuple[Decision, None]:
        if ctx.timestep % self.unit.w != 0:
            return REPUBLISH, None
        if not ctx.accountant.can_spend(ctx.timestep, self.per_release):
            return REPUBLISH, None  # cannot happen with a fresh ledger; never overspend if it does
        return fresh(self.per_release, "sample"), None

    def on_fresh(self, state: None, timestep: int) -> None:
        return None

    def state_to_json(self, state: None) -> dict[str, Any]:
        return {}

    def state_from_json(self, data: dict[str, Any]) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "interval": self.unit.w, "per_release_epsilon": str(self.per_release)}


W_EVENT_ONLY = frozenset({"sample"})
"""Methods of this module (they refuse a user-level unit)."""
