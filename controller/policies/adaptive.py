"""Adaptive Sample (``decision: adaptive-sample``): fixed sampling whose interval is learned from
the stream's own releases (issue 30, item 4).

Sample, fixed sampling and Uniform are one schedule with different intervals: ``c`` fresh releases
in every window of ``w`` timesteps, one every ``k = w / c`` timesteps at ``ε / c`` each (``c`` a
divisor of ``w``). Which ``c`` is best depends on the stream: a slow stream wants few, precise
releases (Sample, ``c = 1``), a fast one many, noisy ones (Uniform, ``c = w``). No choice made from
the configuration alone is good on both (``docs/results.md``, the planner's table).

This policy learns the choice from what it has already published, which is post-processing
(``docs/privacy.md`` §4.8). After each fresh release ``y`` at timestep ``t`` (noise variance
``r`` per bin, public: ``2·E|Z|²`` of the mechanism at its ε), with the previous fresh release
``y'`` at ``t'`` (variance ``r'``), the squared change per bin

    E[Σ(y − y')² / U] = q·(t − t') + r + r'       (a random walk of variance q per timestep)

gives a moment estimate of the stream's drift ``q``: the excess ``Σ(y − y')²/U − r − r'`` and the
lag ``t − t'`` are summed over past pairs (each forgotten at ``exp(−1/memory)`` per timestep) and
``q̂ = max(0, excess / lag)``. Republishing a release ``j`` timesteps old errs by the release noise
and ``j`` timesteps of drift, so the expected squared error per bin of interval ``k`` is

    r(c) + q̂·(k − 1)/2,

and the policy moves to the ``c`` that minimises it once ``min_pairs`` pairs are in, when that is
at least ``hysteresis`` (relative) better than its current choice. It starts at the largest divisor
of ``w`` not above ``privacy.cutoff``.

Budget: every release asks the window ledger for ``ε / c`` before any noise is drawn and waits
(republishes) while the window cannot take it, so any window of ``w`` spends at most ε however the
interval moves (the ledger's invariant, ``docs/privacy.md`` §4). The decision reads no raw data.
The rule is written once over a runs axis (:meth:`AdaptiveSamplePolicy.decide_runs`); the service
runs it with one run on the journaled :class:`AdaptiveState`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from controller.accountant import Accountant, WindowAccountant
from controller.errors import ConfigurationError, StateError
from controller.policies.base import (
    Decision,
    DecisionContext,
    RunsContext,
    RunsDecision,
    amounts_for,
    decide_one,
)
from controller.policies.baselines import NO_RUNS
from controller.policies.wevent import _require_w_event
from controller.step import decode_array, encode_array
from controller.units import WEvent

__all__ = ["AdaptiveSamplePolicy", "AdaptiveRuns", "AdaptiveState", "divisors"]


def divisors(w: int) -> tuple[int, ...]:
    """The divisors of ``w``, ascending: the releases per window the policy can choose among."""
    return tuple(c for c in range(1, w + 1) if w % c == 0)


@lru_cache(maxsize=64)
def _level_variances(mechanism: Any, charges: tuple[Fraction, ...], bins: int) -> np.ndarray:
    """``2·E|Z|²`` per bin of a release at each charge (the mechanism's public error model), read-only:
    computed once per mechanism, levels and domain size, not at every read-back."""
    errs = [mechanism.expected_abs_error(eps, bins) for eps in charges]
    out = 2.0 * np.square(np.array(errs, dtype=np.float64))
    out.setflags(write=False)
    return out


@dataclass
class AdaptiveRuns:
    """R runs of :class:`AdaptiveSamplePolicy` (one row per run; updated in place). All public:
    functions of the runs' own releases and of the configuration.

    Attributes:
        level: ``(R,)`` index into :attr:`AdaptiveSamplePolicy.levels` (the current ``c``).
        next_due: ``(R,)`` the timestep from which the next fresh release is due.
        pending: ``(R,)`` timestep of the fresh release decided last and not yet read back (-1: none).
        pending_level: ``(R,)`` the level that release was charged at.
        prev: ``(R, U)`` float64 the last fresh release read back (None before U is known).
        prev_time: ``(R,)`` its timestep (-1: none yet).
        prev_var: ``(R,)`` its noise variance per bin.
        excess, lag: ``(R,)`` the forgotten sums of ``Σ(y − y')²/U − r − r'`` and of ``t − t'``.
        pairs: ``(R,)`` how many pairs of fresh releases went into them.
    """

    level: np.ndarray
    next_due: np.ndarray
    pending: np.ndarray
    pending_level: np.ndarray
    prev: np.ndarray | None
    prev_time: np.ndarray
    prev_var: np.ndarray
    excess: np.ndarray
    lag: np.ndarray
    pairs: np.ndarray


_INT_FIELDS = ("level", "next_due", "pending", "pending_level", "prev_time", "pairs")
_FLOAT_FIELDS = ("prev_var", "excess", "lag")


@dataclass(frozen=True)
class AdaptiveState:
    """The service's one run (journaled): the fields of :class:`AdaptiveRuns` with R = 1."""

    level: int
    next_due: int = 0
    pending: int = -1
    pending_level: int = 0
    prev: np.ndarray | None = None
    prev_time: int = -1
    prev_var: float = 0.0
    excess: float = 0.0
    lag: float = 0.0
    pairs: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f: getattr(self, f) for f in _INT_FIELDS}
        out.update({f: repr(float(getattr(self, f))) for f in _FLOAT_FIELDS})
        out["prev"] = None if self.prev is None else encode_array(np.asarray(self.prev, dtype=np.float64))
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AdaptiveState:
        try:
            prev = None if data["prev"] is None else decode_array(data["prev"])
            out = cls(prev=prev, **{f: int(data[f]) for f in _INT_FIELDS},
                      **{f: float(data[f]) for f in _FLOAT_FIELDS})
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed adaptive-sample state: {exc}") from exc
        if not all(math.isfinite(getattr(out, f)) for f in _FLOAT_FIELDS) or out.level < 0 or out.pairs < 0:
            raise StateError("malformed adaptive-sample state: a level, count or sum out of range")
        return out


@dataclass(frozen=True)
class AdaptiveSamplePolicy:
    """Sampling at ``c`` releases per window of ``w``, ``c`` learned from the releases (module doc).

    Attributes:
        unit: the w-event unit; ``unit.cutoff`` sets the starting ``c`` (the largest divisor of
            ``w`` not above it).
        sensitivity: per-person per-timestep contribution bound Δ (the mechanism's).
        memory: timesteps over which a pair's weight falls by ``e`` (the estimate's forgetting).
        min_pairs: pairs of fresh releases read before the first move.
        hysteresis: a move needs a predicted error at least this much (relative) below the current's.
    """

    unit: WEvent
    sensitivity: int = 1
    memory: float = 200.0
    min_pairs: int = 4
    hysteresis: float = 0.1
    name: str = "adaptive-sample"

    def __post_init__(self) -> None:
        _require_w_event(self.unit, self.name)
        if not (isinstance(self.memory, int | float) and math.isfinite(self.memory) and self.memory > 0):
            raise ConfigurationError(f"{self.name} memory must be a positive number of timesteps, got {self.memory!r}")
        if not isinstance(self.min_pairs, int) or self.min_pairs < 1:
            raise ConfigurationError(f"{self.name} min_pairs must be a whole number >= 1, got {self.min_pairs!r}")
        if not 0 <= self.hysteresis < 1:
            raise ConfigurationError(f"{self.name} hysteresis must lie in [0, 1), got {self.hysteresis!r}")

    @cached_property
    def levels(self) -> tuple[int, ...]:
        """The choices of ``c`` (releases per window): the divisors of ``w``, ascending."""
        return divisors(self.unit.w)

    @cached_property
    def start_level(self) -> int:
        """Index of the starting ``c``: the largest divisor of ``w`` not above ``privacy.cutoff``."""
        return max(i for i, c in enumerate(self.levels) if c <= self.unit.cutoff)

    @cached_property
    def intervals(self) -> np.ndarray:
        """``k = w / c`` per level (read-only int64)."""
        out = np.array([self.unit.w // c for c in self.levels], dtype=np.int64)
        out.setflags(write=False)
        return out

    def per_release(self, level: int) -> Fraction:
        """ε of one release at ``levels[level]`` releases per window."""
        return self.unit.epsilon / self.levels[level]

    @cached_property
    def _charges(self) -> tuple[Fraction, ...]:
        return tuple(self.per_release(i) for i in range(len(self.levels)))

    def charges(self) -> tuple[Fraction, ...]:
        return self._charges

    def new_accountant(self) -> Accountant:
        return WindowAccountant(self.unit.epsilon, self.unit.w)

    # -- the runs axis -------------------------------------------------------------------------
    def reset_runs(self, runs: int) -> AdaptiveRuns:
        def ints(v: int) -> np.ndarray:
            return np.full(runs, v, dtype=np.int64)
        return AdaptiveRuns(ints(self.start_level), ints(0), ints(-1), ints(0), None, ints(-1),
                            np.zeros(runs), np.zeros(runs), np.zeros(runs), ints(0))

    def _variances(self, ctx: RunsContext, bins: int) -> np.ndarray:
        """Noise variance per bin of a release at each level: ``2·E|Z|²`` (public; read-only)."""
        assert ctx.mechanism is not None
        try:
            hash(ctx.mechanism)
        except TypeError:  # a mechanism with unhashable parameters: no memo
            return _level_variances.__wrapped__(ctx.mechanism, self._charges, bins)
        return _level_variances(ctx.mechanism, self._charges, bins)

    def decide_runs(self, state: AdaptiveRuns, ctx: RunsContext) -> tuple[RunsDecision, AdaptiveRuns]:
        """Read back last timestep's fresh releases, move the level where the estimate says so, then
        publish fresh in every due run whose window can take ``ε / c``. Reads no raw data."""
        t = ctx.timestep
        if (state.pending >= 0).any():
            self._read_back(state, ctx)
        due = t >= state.next_due
        if not due.any():
            return RunsDecision(NO_RUNS, NO_RUNS, "adaptive schedule"), state
        rows_parts, amount_parts = [], []
        for level in np.unique(state.level[due]).tolist():
            amount = ctx.ledger.amount(self.per_release(level))
            rows = np.flatnonzero(due & (state.level == level) & ctx.ledger.can_spend(t, amount))
            rows_parts.append(rows)
            amount_parts.append(amounts_for(amount, rows))
        rows = np.concatenate(rows_parts)
        order = np.argsort(rows, kind="stable")
        rows, amounts = rows[order], np.concatenate(amount_parts)[order]
        state.pending[rows] = t
        state.pending_level[rows] = state.level[rows]
        state.next_due[rows] = t + self.intervals[state.level[rows]]
        return RunsDecision(rows, amounts, "adaptive schedule"), state

    def _read_back(self, state: AdaptiveRuns, ctx: RunsContext) -> None:
        """Fold the fresh releases decided last into the drift estimate (post-processing)."""
        assert ctx.last is not None
        rows = np.flatnonzero(state.pending >= 0)
        bins = int(ctx.last.shape[1])
        var = self._variances(ctx, bins)
        y = ctx.last[rows].astype(np.float64)
        v = var[state.pending_level[rows]]
        t_new = state.pending[rows]
        if state.prev is None:
            state.prev = np.zeros((state.level.size, bins))
        paired = state.prev_time[rows] >= 0
        if paired.any():
            p = rows[paired]
            lag = (t_new[paired] - state.prev_time[p]).astype(np.float64)
            change = np.square(y[paired] - state.prev[p]).sum(axis=1) / bins
            keep = np.exp(-lag / self.memory)
            state.excess[p] = keep * state.excess[p] + (change - v[paired] - state.prev_var[p])
            state.lag[p] = keep * state.lag[p] + lag
            state.pairs[p] += 1
        state.prev[rows] = y
        state.prev_time[rows] = t_new
        state.prev_var[rows] = v
        state.pending[rows] = -1
        ready = rows[state.pairs[rows] >= self.min_pairs]
        if ready.size:
            self._choose(state, ready, var)

    def _choose(self, state: AdaptiveRuns, rows: np.ndarray, var: np.ndarray) -> None:
        """Move each run in ``rows`` to the level of least predicted error ``r(c) + q̂(k − 1)/2``
        if it beats the current level's by the hysteresis; the next release is then due ``k`` after
        the last one."""
        q = np.maximum(state.excess[rows] / np.maximum(state.lag[rows], 1e-300), 0.0)
        k = self.intervals[None, :].astype(np.float64)
        predicted = var[None, :] + q[:, None] * (k - 1) / 2.0
        best = predicted.argmin(axis=1)
        current = state.level[rows]
        ix = np.arange(rows.size)
        move = (best != current) & (predicted[ix, best] < (1.0 - self.hysteresis) * predicted[ix, current])
        if move.any():
            m = rows[move]
            state.level[m] = best[move]
            state.next_due[m] = state.prev_time[m] + self.intervals[best[move]]

    # -- the service's one run -------------------------------------------------------------------
    def reset(self) -> AdaptiveState:
        return AdaptiveState(level=self.start_level)

    def to_runs(self, state: AdaptiveState) -> AdaptiveRuns:
        prev = None if state.prev is None else np.array(state.prev, dtype=np.float64)[None, :]
        return AdaptiveRuns(*(np.array([getattr(state, f)], dtype=np.int64) for f in _INT_FIELDS[:4]), prev,
                            np.array([state.prev_time], dtype=np.int64), np.array([state.prev_var]),
                            np.array([state.excess]), np.array([state.lag]),
                            np.array([state.pairs], dtype=np.int64))

    def from_runs(self, runs: AdaptiveRuns) -> AdaptiveState:
        prev = None
        if runs.prev is not None:
            prev = runs.prev[0].copy()
            prev.setflags(write=False)
        return AdaptiveState(int(runs.level[0]), int(runs.next_due[0]), int(runs.pending[0]),
                             int(runs.pending_level[0]), prev, int(runs.prev_time[0]), float(runs.prev_var[0]),
                             float(runs.excess[0]), float(runs.lag[0]), int(runs.pairs[0]))

    def decide(self, state: AdaptiveState, ctx: DecisionContext) -> tuple[Decision, AdaptiveState]:
        runs = self.to_runs(state)
        decision, runs = decide_one(self, runs, ctx)
        return decision, self.from_runs(runs)

    def on_fresh(self, state: AdaptiveState, timestep: int) -> AdaptiveState:
        return state

    def state_to_json(self, state: AdaptiveState) -> dict[str, Any]:
        return state.to_json()

    def state_from_json(self, data: dict[str, Any]) -> AdaptiveState:
        out = AdaptiveState.from_json(data)
        if out.level >= len(self.levels) or out.pending_level >= len(self.levels):
            raise StateError(f"adaptive-sample state names level {out.level} of {len(self.levels)}: "
                             "was privacy.w changed? restore the w it was journaled with")
        return out

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "releases_per_window": list(self.levels),
                "start": self.levels[self.start_level], "memory": self.memory, "min_pairs": self.min_pairs,
                "hysteresis": self.hysteresis}
