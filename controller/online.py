"""A decision policy that re-plans from its own releases (issue 30 item 4).

:class:`OnlinePolicy` wraps a fixed, public list of candidate decision policies (the planner's
w-event candidates, e.g. ``sample``, ``uniform``, ``dsat`` with and without the noise floor), all
built for the same privacy unit, mechanism and bins. One of them — the *current* choice — decides
each timestep, exactly as it would alone. Every ``every`` timesteps (public configuration), once at
least ``min_releases`` fresh releases exist, the wrapper calls ``replan`` on the **released series
only** and switches to the candidate it names.

What the re-plan reads (``docs/privacy.md`` §13.1): the counts of every fresh release, the timestep
it was drawn for and its ε (its declared noise scale), all taken from the public
:class:`~controller.policies.base.DecisionContext` fields ``last_counts``, ``last_epsilon`` and
``fresh_count`` — never ``ctx.counts``. So the choice is post-processing of published values and
costs no ε; its computation draws no noise from ``ctx.noise`` (``replan`` is deterministic).

What carries across a switch: the ONE accountant the engine holds (this wrapper has no ledger of
its own, and no entry is dropped or rewritten at a switch: the old method's charges stay in every
window they touch); the published series. What does not: the old candidate's state (its SVT
threshold noise ρ, PID state, schedule) is discarded, and the new candidate starts from its
``reset()`` state. Every candidate checks ``ctx.accountant.can_spend`` / ``can_extend`` against
that shared ledger before it charges, so in the windows that straddle a switch the new method
republishes until the old method's charges have left the window: every window stays ≤ ε whatever
the sequence of methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from controller.accountant import Accountant, WindowAccountant
from controller.errors import ConfigurationError, StateError
from controller.policies.base import Decision, DecisionContext, DecisionPolicy
from controller.units import WEvent

__all__ = ["OnlinePolicy", "OnlineState", "FreshRelease", "released_series"]

#: ``replan(series, epsilons, current)``: the candidate index to use from now on. ``series`` is the
#: ``(timesteps, bins)`` published counts (float), ``epsilons`` the ε of the fresh release behind
#: each row (its declared noise scale), ``current`` the index in use. Must be deterministic
#: (restart = same bytes).
Replan = Callable[[np.ndarray, tuple[Fraction, ...], int], int]


@dataclass(frozen=True)
class FreshRelease:
    """One published fresh release: the timestep it was drawn for, its counts and its ε (public)."""

    timestep: int
    counts: tuple[float, ...]
    epsilon: Fraction

    def to_json(self) -> dict[str, Any]:
        return {"timestep": self.timestep, "counts": [_num(c) for c in self.counts], "epsilon": str(self.epsilon)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FreshRelease:
        return cls(int(data["timestep"]), tuple(float(c) for c in data["counts"]), Fraction(data["epsilon"]))


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


@dataclass(frozen=True)
class OnlineState:
    """The wrapper's state (journaled in the engine snapshot).

    Attributes:
        choice: index of the current candidate.
        inner: the current candidate's own state (secret: may hold SVT threshold noise).
        releases: the fresh releases the re-plan may read (the last ``history`` timesteps' worth,
            plus the one still published at their start), oldest first.
        seen_fresh: fresh releases already recorded (``ctx.fresh_count`` when last looked).
        last_fresh: timestep of the newest fresh release (None before any).
        switches: ``(timestep, candidate index)`` of every re-plan that changed the choice (public).
    """

    choice: int
    inner: Any
    releases: tuple[FreshRelease, ...] = ()
    seen_fresh: int = 0
    last_fresh: int | None = None
    switches: tuple[tuple[int, int], ...] = ()


def released_series(releases: Sequence[FreshRelease], start: int, stop: int) -> tuple[np.ndarray, tuple[Fraction, ...]]:
    """The published counts at timesteps ``start .. stop-1`` (each the newest fresh release drawn at
    or before it: what a republished timestep repeats), and the ε behind each row; rows before the
    first release are left out."""
    rows: list[tuple[float, ...]] = []
    eps: list[Fraction] = []
    i = -1
    for t in range(start, stop):
        while i + 1 < len(releases) and releases[i + 1].timestep <= t:
            i += 1
        if i >= 0:
            rows.append(releases[i].counts)
            eps.append(releases[i].epsilon)
    if not rows:
        return np.zeros((0, 0)), ()
    return np.asarray(rows, dtype=np.float64), tuple(eps)


@dataclass
class OnlinePolicy:
    """The current candidate decides; every ``every`` timesteps ``replan`` may switch it (see the module).

    Attributes:
        candidates: the public candidate policies (same unit, mechanism and bins).
        labels: one public name per candidate (e.g. ``dsat(noise_floor)``).
        start: the candidate used before any re-plan (today's public plan).
        replan: deterministic function of the released series (:data:`Replan`).
        every: re-plan at timesteps ``t > 0`` with ``t % every == 0`` (public).
        min_releases: re-plan only once this many fresh releases exist (public).
        history: the re-plan reads at most the last ``history`` timesteps of releases (public).
    """

    candidates: tuple[DecisionPolicy, ...]
    labels: tuple[str, ...]
    start: int
    replan: Replan = field(compare=False)
    every: int
    min_releases: int = 1
    history: int = 200
    name: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.candidates or len(self.labels) != len(self.candidates) or not 0 <= self.start < len(self.candidates):
            raise ConfigurationError("release.planner.online needs at least one candidate, one label each, and a "
                                     "starting candidate among them")
        if self.every < 1 or self.min_releases < 1 or self.history < 1:
            raise ConfigurationError("release.planner.online: every, min_releases and the history must be >= 1")
        units = {repr(c.unit) for c in self.candidates}
        if len(units) != 1 or not isinstance(self.candidates[0].unit, WEvent):
            raise ConfigurationError("release.planner.online re-plans among w-event methods of one privacy unit "
                                     "(privacy.unit: w-event); under user-level privacy name release.decision")
        kinds = {(type(a := c.new_accountant()).__name__, a.epsilon, getattr(a, "w", None)) for c in self.candidates}
        if len(kinds) != 1:
            raise ConfigurationError("release.planner.online: the candidates do not share one window ledger")
        self.name = "online"

    @property
    def unit(self) -> WEvent:
        return self.candidates[0].unit  # type: ignore[return-value]

    def current(self, state: OnlineState) -> DecisionPolicy:
        return self.candidates[state.choice]

    def new_accountant(self) -> Accountant:
        """The ONE window ledger every candidate charges (:class:`~controller.accountant.WindowAccountant`)."""
        acct = self.candidates[0].new_accountant()
        assert isinstance(acct, WindowAccountant)
        return acct

    def reset(self) -> OnlineState:
        return OnlineState(self.start, self.candidates[self.start].reset())

    # -- the public record ----------------------------------------------------------------------
    def _record(self, state: OnlineState, ctx: DecisionContext) -> OnlineState:
        """Record the newest fresh release from the public context fields (never ``ctx.counts``)."""
        if ctx.fresh_count <= state.seen_fresh or state.last_fresh is None:
            return state
        rel = FreshRelease(state.last_fresh, tuple(float(x) for x in np.asarray(ctx.last_counts).ravel()),
                           Fraction(ctx.last_epsilon))
        kept = [r for r in state.releases if r.timestep >= ctx.timestep - self.history]
        older = [r for r in state.releases if r.timestep < ctx.timestep - self.history]
        releases = (*older[-1:], *kept, rel)  # the one still published at the window's start, then the window
        return OnlineState(state.choice, state.inner, releases, ctx.fresh_count, state.last_fresh, state.switches)

    def series(self, state: OnlineState, timestep: int) -> tuple[np.ndarray, tuple[Fraction, ...]]:
        """What the re-plan at ``timestep`` reads: the published series of the last ``history`` timesteps."""
        return released_series(state.releases, max(0, timestep - self.history), timestep)

    # -- the protocol -----------------------------------------------------------------------------
    def decide(self, state: OnlineState, ctx: DecisionContext) -> tuple[Decision, OnlineState]:
        state = self._record(state, ctx)
        t = ctx.timestep
        if t > 0 and t % self.every == 0 and state.seen_fresh >= self.min_releases:
            series, eps = self.series(state, t)
            if series.shape[0]:
                choice = int(self.replan(series, eps, state.choice))
                if not 0 <= choice < len(self.candidates):
                    raise StateError(f"re-plan chose candidate {choice} of {len(self.candidates)}")
                if choice != state.choice:  # the old state (ρ, PID) is dropped; the ledger is not
                    state = OnlineState(choice, self.candidates[choice].reset(), state.releases, state.seen_fresh,
                                        state.last_fresh, (*state.switches, (t, choice)))
        decision, inner = self.current(state).decide(state.inner, ctx)
        return decision, OnlineState(state.choice, inner, state.releases, state.seen_fresh, state.last_fresh,
                                     state.switches)

    def smooth(self, state: OnlineState, timestep: int, noisy: Any) -> tuple[Any, OnlineState]:
        """The current candidate's own smoother (PeGaSus, FAST), if it has one; else as drawn."""
        own = getattr(self.current(state), "smooth", None)
        if own is None:
            return noisy, state
        out, inner = own(state.inner, timestep, noisy)
        return out, OnlineState(state.choice, inner, state.releases, state.seen_fresh, state.last_fresh,
                                state.switches)

    def on_fresh(self, state: OnlineState, timestep: int) -> OnlineState:
        inner = self.current(state).on_fresh(state.inner, timestep)
        return OnlineState(state.choice, inner, state.releases, state.seen_fresh, timestep, state.switches)

    def state_to_json(self, state: OnlineState) -> dict[str, Any]:
        return {"choice": state.choice, "inner": self.current(state).state_to_json(state.inner),
                "releases": [r.to_json() for r in state.releases], "seen_fresh": state.seen_fresh,
                "last_fresh": state.last_fresh, "switches": [list(s) for s in state.switches]}

    def state_from_json(self, data: dict[str, Any]) -> OnlineState:
        try:
            choice = int(data["choice"])
            if not 0 <= choice < len(self.candidates):
                raise StateError(f"snapshot's online choice {choice} is not one of {len(self.candidates)} candidates")
            return OnlineState(choice, self.candidates[choice].state_from_json(data["inner"]),
                               tuple(FreshRelease.from_json(r) for r in data["releases"]), int(data["seen_fresh"]),
                               None if data["last_fresh"] is None else int(data["last_fresh"]),
                               tuple((int(a), int(b)) for a, b in data["switches"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed online-planner state: {exc}") from exc

    def describe(self) -> dict[str, Any]:
        return {"method": "online", "every": self.every, "min_releases": self.min_releases, "history": self.history,
                "start": self.labels[self.start],
                "candidates": {lab: c.describe() for lab, c in zip(self.labels, self.candidates, strict=True)}}
