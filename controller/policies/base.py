"""What every decision policy implements, and what it is given each timestep.

A policy decides, for one timestep, between a fresh release (and its ε) and
republishing the last release. It may charge the accountant for what its
decision reads (a noisy distance, a threshold), always *before* drawing that
noise. It never draws the release noise itself: the step function does, after
charging the publication.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

import numpy as np

from controller.accountant import Accountant
from controller.units import PrivacyUnit
from histogram.mechanism import Mechanism
from histogram.noise import NoiseDrawer

__all__ = ["Decision", "DecisionContext", "DecisionPolicy", "REPUBLISH", "fresh"]


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
