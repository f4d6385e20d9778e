"""Adaptive Sample (``decision: adaptive-sample``): fixed sampling whose interval is learned from
the stream's own releases (issue 30, item 4).

Sample, fixed sampling and Uniform are one schedule with different intervals: ``c`` fresh releases
in every window of ``w`` timesteps, one every ``k = w / c`` timesteps at ``ε / c`` each (``c`` a
divisor of ``w``). Which ``c`` is best depends on the stream: a slow stream wants few, precise
releases (Sample, ``c = 1``), a fast one many, noisy ones (Uniform, ``c = w``). No choice made from
the configuration alone is good on both (``docs/results.md``, the planner's table).

This policy learns the choice from what it has already published, which is post-processing
(``docs/privacy.md`` §4.8), and chooses for the error users read: the mean absolute error per bin.
After each fresh release ``y`` at timestep ``t`` (noise ``E|Z| = e`` per bin, public: the
mechanism's error model at its ε), with the previous fresh release ``y'`` at ``t'`` (``e'``), it
records the mean absolute change per bin ``a = Σ|y − y'| / U``, the lag ``t − t'`` and the noise's
share of the change, ``m = E|Z − Z'| = (e² + e·e' + e'²)/(e + e')`` (exact for Laplace noise). For a
stream that fluctuates by ``s`` (variance per bin, independent from one timestep to the next) about a
random walk of variance ``q`` per timestep, the change is about Gaussian with ``E|y − y'|² ≈ m² +
(2/π)·(s + q·(t − t'))``. Pairs are summed in the column of the level the later release was charged
at, so each column's forgotten means ``ā``, ``m̄``, ``L̄`` (each pair forgotten at ``exp(−1/memory)``
per timestep) give the excess ``X = (ā² − m̄²)/(2/π)`` at one lag ``L̄``, and ``X = s + q·L`` fitted
over the columns (weighted least squares, ``ŝ, q̂ ≥ 0``; a single lag is read as drift alone) gives
``ŝ`` and ``q̂``. Republishing a release ``j`` timesteps old errs by its noise, the fluctuation (for
``j > 0``) and ``j`` timesteps of drift, so the expected absolute error per bin of interval ``k`` is

    mean over j < k of sqrt(e(c)² + (2/π)·(ŝ·[j > 0] + q̂·j)),

and the policy moves towards the ``c`` that minimises it once ``min_pairs`` pairs are in, when that
is at least ``hysteresis`` (relative) better than its current choice: to more releases per window
at once, to fewer one divisor at a time, each step after ``min_pairs`` pairs read at the current
interval (the estimate is read at one lag and extrapolated to a longer one; a stream with rare
large changes shows none in a few short pairs). It starts at the largest divisor of ``w`` not above
``privacy.cutoff``.

Why absolute changes (``docs/results.md``, "Adaptive Sample reads jumps for what they cost"): a
stream with rare level shifts (``sudden``) changes by nothing most of the time and by a lot at a
jump. A squared-change estimate weighs a jump by its square and reads the stream as a fast random
walk, so on ``sudden`` at ε = 1, w = 50 it settled at ``c = 25`` where ``c = 10`` errs least (its
test); the absolute-change estimate weighs a jump by its size, as the error does, and agrees with
the squared one on a random walk.
The squared-change rule also moved from ``c = 10`` straight to Sample after four quiet pairs and
then missed the next jump for up to ``w`` timesteps; hence the one-divisor steps.

Why the lags are kept apart (``docs/results.md``, "Adaptive Sample keeps its lags apart"): pooled over
all pairs, the change read at a short lag after a move to more releases was divided by a mean lag the
earlier, longer pairs still held up, so on independent draws (``lognormal``) at w = 50 the policy
stayed at ``c = 25`` for 46–146 timesteps before reaching ``c = w``. A fluctuation shows the same
change at every lag, a drift one that grows with it; two columns tell them apart.

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

__all__ = ["AdaptiveSamplePolicy", "AdaptiveRuns", "AdaptiveState", "divisors", "predicted_errors"]


def divisors(w: int) -> tuple[int, ...]:
    """The divisors of ``w``, ascending: the releases per window the policy can choose among."""
    return tuple(c for c in range(1, w + 1) if w % c == 0)


#: ``(E|G| / sd G)²`` for a Gaussian ``G``: ``E|G|² = (2/π)·Var G``
_TWO_OVER_PI = 2.0 / math.pi


@lru_cache(maxsize=64)
def _level_errors(mechanism: Any, charges: tuple[Fraction, ...], bins: int) -> np.ndarray:
    """``E|Z|`` per bin of a release at each charge (the mechanism's public error model), read-only:
    computed once per mechanism, levels and domain size, not at every read-back."""
    out = np.array([mechanism.expected_abs_error(eps, bins) for eps in charges], dtype=np.float64)
    out.setflags(write=False)
    return out


def _noise_change(e: np.ndarray, e_prev: np.ndarray) -> np.ndarray:
    """``E|Z − Z'|`` per bin of two independent releases with ``E|Z| = e``, ``E|Z'| = e_prev``: exact for
    Laplace noise (scales ``e``, ``e_prev``), ``1.5·e`` at equal scales; 0 where both are 0."""
    total = e + e_prev
    return np.where(total > 0, (e * e + e * e_prev + e_prev * e_prev) / np.where(total > 0, total, 1.0), 0.0)


def predicted_errors(errors: np.ndarray, intervals: np.ndarray, q: np.ndarray,
                     s: np.ndarray | None = None) -> np.ndarray:
    """``(len(q), levels)`` expected absolute error per bin of each level for drifts ``q`` (per timestep)
    and fluctuations ``s`` (per bin, independent from one timestep to the next; 0 if omitted): the mean
    over ``j < k`` of ``sqrt(e(c)² + (2/π)·(s·[j > 0] + q·j))``, with ``e(c) = errors`` and ``k = intervals``."""
    out = np.empty((q.size, errors.size))
    j = np.arange(int(intervals.max()), dtype=np.float64)
    white = np.zeros_like(q) if s is None else s
    excess = white[:, None] * (j > 0)[None, :] + q[:, None] * j[None, :]
    for i, k in enumerate(intervals.tolist()):
        out[:, i] = np.sqrt(errors[i] ** 2 + _TWO_OVER_PI * excess[:, :k]).mean(axis=1)
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
        prev_error: ``(R,)`` its noise ``E|Z|`` per bin.
        spread, noise_spread, lag, weight: ``(R, levels)`` the forgotten sums over pairs of
            ``Σ|y − y'|/U``, of ``E|Z − Z'|``, of ``t − t'`` and of the pairs' weights (their count,
            forgotten), each pair in the column of the level its later release was charged at (so
            that pairs read at different lags stay apart: :meth:`AdaptiveSamplePolicy.drift`).
        pairs: ``(R,)`` how many pairs of fresh releases went into them.
        settled: ``(R,)`` how many of them were read since the level last moved.
    """

    level: np.ndarray
    next_due: np.ndarray
    pending: np.ndarray
    pending_level: np.ndarray
    prev: np.ndarray | None
    prev_time: np.ndarray
    prev_error: np.ndarray
    spread: np.ndarray
    noise_spread: np.ndarray
    lag: np.ndarray
    weight: np.ndarray
    pairs: np.ndarray
    settled: np.ndarray


_INT_FIELDS = ("level", "next_due", "pending", "pending_level", "prev_time", "pairs", "settled")
#: the per-level forgotten sums (one float per level)
_SUM_FIELDS = ("spread", "noise_spread", "lag", "weight")
#: the fields of the squared-change estimate this policy kept before (a journal written then)
_OLD_FIELDS = ("prev_var", "excess")


@dataclass(frozen=True)
class AdaptiveState:
    """The service's one run (journaled): the fields of :class:`AdaptiveRuns` with R = 1."""

    level: int
    next_due: int = 0
    pending: int = -1
    pending_level: int = 0
    prev: np.ndarray | None = None
    prev_time: int = -1
    prev_error: float = 0.0
    spread: tuple[float, ...] = ()
    noise_spread: tuple[float, ...] = ()
    lag: tuple[float, ...] = ()
    weight: tuple[float, ...] = ()
    pairs: int = 0
    settled: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f: getattr(self, f) for f in _INT_FIELDS}
        out["prev_error"] = repr(float(self.prev_error))
        out.update({f: [repr(float(v)) for v in getattr(self, f)] for f in _SUM_FIELDS})
        out["prev"] = None if self.prev is None else encode_array(np.asarray(self.prev, dtype=np.float64))
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], levels: int) -> AdaptiveState:
        """The state journaled by :meth:`to_json`, for a policy with ``levels`` choices of ``c``. A state
        journaled with one pooled sum per field (before pairs were kept apart by level) continues with
        that sum in the column of its current level: the estimate reads it as pairs at one lag."""
        if isinstance(data, dict) and all(f in data for f in _OLD_FIELDS) and "spread" not in data:
            raise StateError("adaptive-sample state was written by another version of the policy (its drift "
                             "estimate from squared changes): continue the stream with the version that wrote it, "
                             "or start it afresh under a new stream.id")
        try:
            prev = None if data["prev"] is None else decode_array(data["prev"])
            ints = {f: int(data[f]) for f in _INT_FIELDS}
            sums = {}
            for f in _SUM_FIELDS:
                value = data[f]
                if isinstance(value, list):
                    sums[f] = tuple(float(v) for v in value)
                else:  # one pooled sum (the journal of the version before)
                    column = [0.0] * levels
                    column[min(max(ints["level"], 0), levels - 1)] = float(value)
                    sums[f] = tuple(column)
            out = cls(prev=prev, prev_error=float(data["prev_error"]), **ints, **sums)
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed adaptive-sample state: {exc}") from exc
        finite = math.isfinite(out.prev_error) and all(math.isfinite(v) for f in _SUM_FIELDS for v in getattr(out, f))
        if not finite or out.level < 0 or out.pairs < 0 or out.settled < 0 \
                or any(len(getattr(out, f)) != levels for f in _SUM_FIELDS):
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
        min_releases: the fewest fresh releases per window it may choose (``release.min_per_window``;
            the smallest divisor of ``w`` not below it): its longest interval is ``w`` over that. A
            floor bounds how stale a release can get before the next, whatever calm the releases
            have shown so far (a stream with rare level shifts shows none for a while; the planner
            weighs the floor against the freedom to coarsen: ``docs/results.md``, "A floor under
            Adaptive Sample"). 1: no floor.
    """

    unit: WEvent
    sensitivity: int = 1
    memory: float = 200.0
    min_pairs: int = 4
    hysteresis: float = 0.1
    min_releases: int = 1
    name: str = "adaptive-sample"

    def __post_init__(self) -> None:
        _require_w_event(self.unit, self.name)
        if not (isinstance(self.memory, int | float) and math.isfinite(self.memory) and self.memory > 0):
            raise ConfigurationError(f"{self.name} memory must be a positive number of timesteps, got {self.memory!r}")
        if not isinstance(self.min_pairs, int) or self.min_pairs < 1:
            raise ConfigurationError(f"{self.name} min_pairs must be a whole number >= 1, got {self.min_pairs!r}")
        if not 0 <= self.hysteresis < 1:
            raise ConfigurationError(f"{self.name} hysteresis must lie in [0, 1), got {self.hysteresis!r}")
        if isinstance(self.min_releases, bool) or not isinstance(self.min_releases, int) \
                or not 1 <= self.min_releases <= self.unit.w:
            raise ConfigurationError(f"release.min_per_window must be a whole number of fresh releases per window "
                                     f"between 1 and privacy.w = {self.unit.w}, got {self.min_releases!r}")

    @cached_property
    def levels(self) -> tuple[int, ...]:
        """The choices of ``c`` (releases per window): the divisors of ``w``, ascending."""
        return divisors(self.unit.w)

    @cached_property
    def floor_level(self) -> int:
        """Index of the fewest releases per window allowed: the smallest divisor of ``w`` not below
        :attr:`min_releases`."""
        return min(i for i, c in enumerate(self.levels) if c >= self.min_releases)

    @cached_property
    def start_level(self) -> int:
        """Index of the starting ``c``: the largest divisor of ``w`` not above ``privacy.cutoff``, or
        the floor if that is above it."""
        return max(self.floor_level, max(i for i, c in enumerate(self.levels) if c <= self.unit.cutoff))

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
        levels = len(self.levels)
        return AdaptiveRuns(ints(self.start_level), ints(0), ints(-1), ints(0), None, ints(-1), np.zeros(runs),
                            *(np.zeros((runs, levels)) for _ in _SUM_FIELDS), ints(0), ints(0))

    def _errors(self, ctx: RunsContext, bins: int) -> np.ndarray:
        """Noise ``E|Z|`` per bin of a release at each level (public; read-only)."""
        assert ctx.mechanism is not None
        try:
            hash(ctx.mechanism)
        except TypeError:  # a mechanism with unhashable parameters: no memo
            return _level_errors.__wrapped__(ctx.mechanism, self._charges, bins)
        return _level_errors(ctx.mechanism, self._charges, bins)

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
        errors = self._errors(ctx, bins)
        y = ctx.last[rows].astype(np.float64)
        e = errors[state.pending_level[rows]]
        t_new = state.pending[rows]
        if state.prev is None:
            state.prev = np.zeros((state.level.size, bins))
        paired = state.prev_time[rows] >= 0
        if paired.any():
            p = rows[paired]
            lag = (t_new[paired] - state.prev_time[p]).astype(np.float64)
            change = np.abs(y[paired] - state.prev[p]).sum(axis=1) / bins
            keep = np.exp(-lag / self.memory)[:, None]
            at = state.pending_level[p]
            for name, value in (("spread", change), ("noise_spread", _noise_change(e[paired], state.prev_error[p])),
                                ("lag", lag), ("weight", 1.0)):
                sums = getattr(state, name)
                sums[p] *= keep
                sums[p, at] += value
            state.pairs[p] += 1
            state.settled[p] += 1
        state.prev[rows] = y
        state.prev_time[rows] = t_new
        state.prev_error[rows] = e
        state.pending[rows] = -1
        ready = rows[state.pairs[rows] >= self.min_pairs]
        if ready.size:
            self._choose(state, ready, errors)

    def drift(self, state: AdaptiveRuns, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ŝ, q̂)`` per run in ``rows``: the fluctuation ``s`` and the drift ``q`` per timestep the
        releases imply (module doc). Each level's pairs give the excess ``X = (ā² − m̄²)/(2/π)`` at their
        mean lag ``L``; ``X = s + q·L`` is fitted by weighted least squares with ``s, q ≥ 0``. Pairs at
        one lag alone cannot tell the two apart and are read as drift (``s = 0``)."""
        weight = state.weight[rows]
        seen = weight > 0
        safe = np.where(seen, weight, 1.0)
        a, m, lag = state.spread[rows] / safe, state.noise_spread[rows] / safe, state.lag[rows] / safe
        x = np.where(seen, (a * a - m * m) / _TWO_OVER_PI, 0.0)
        w = np.where(seen, weight, 0.0)
        sw = w.sum(axis=1)
        mean_l = (w * lag).sum(axis=1) / np.maximum(sw, 1e-300)
        mean_x = (w * x).sum(axis=1) / np.maximum(sw, 1e-300)
        dl = np.where(seen, lag - mean_l[:, None], 0.0)
        sll = (w * dl * dl).sum(axis=1)
        spread_lags = sll > 1e-9 * np.maximum(mean_l * mean_l * sw, 1e-300)
        slope = (w * dl * (x - mean_x[:, None])).sum(axis=1) / np.where(spread_lags, sll, 1.0)
        q = np.where(spread_lags, slope, 0.0)
        s = mean_x - q * mean_l
        # the constrained corners: no drift (s = mean X), or no fluctuation (q through the origin)
        through_origin = np.maximum((w * x * lag).sum(axis=1) / np.maximum((w * lag * lag).sum(axis=1), 1e-300), 0.0)
        no_drift = spread_lags & (q < 0)
        no_white = ~spread_lags | (s < 0)
        q = np.where(no_drift, 0.0, np.where(no_white, through_origin, q))
        s = np.where(no_drift, np.maximum(mean_x, 0.0), np.where(no_white, 0.0, s))
        return np.maximum(s, 0.0), np.maximum(q, 0.0)

    def _choose(self, state: AdaptiveRuns, rows: np.ndarray, errors: np.ndarray) -> None:
        """Move each run in ``rows`` towards the level of least predicted absolute error
        (:func:`predicted_errors`) if that beats the current level's by the hysteresis: at once to more
        releases per window, one divisor at a time (after ``min_pairs`` pairs at the level) to fewer.
        The next release is then due ``k`` after the last one.

        Why fewer only step by step: the estimate is read at the current interval's lag and
        extrapolated to the longer one, and a stream with rare large changes shows none in a few
        short pairs; each step lengthens the lag the estimate reads before the next step is taken.
        More releases per window never miss a change, so that direction needs no such care."""
        s, q = self.drift(state, rows)
        predicted = predicted_errors(errors, self.intervals, q, s)
        predicted[:, :self.floor_level] = np.inf  # below the floor: never chosen
        best = predicted.argmin(axis=1)
        current = state.level[rows]
        ix = np.arange(rows.size)
        better = predicted[ix, best] < (1.0 - self.hysteresis) * predicted[ix, current]
        coarser = better & (best < current) & (state.settled[rows] >= self.min_pairs)
        target = np.where(best > current, best, current - 1)
        move = better & ((best > current) | coarser)
        if move.any():
            m = rows[move]
            state.level[m] = target[move]
            state.settled[m] = 0
            state.next_due[m] = state.prev_time[m] + self.intervals[target[move]]

    # -- the service's one run -------------------------------------------------------------------
    def reset(self) -> AdaptiveState:
        zeros = (0.0,) * len(self.levels)
        return AdaptiveState(level=self.start_level, **{f: zeros for f in _SUM_FIELDS})

    def to_runs(self, state: AdaptiveState) -> AdaptiveRuns:
        prev = None if state.prev is None else np.array(state.prev, dtype=np.float64)[None, :]
        levels = len(self.levels)

        def sums(f: str) -> np.ndarray:
            values = getattr(state, f)
            return np.array([values or (0.0,) * levels], dtype=np.float64).reshape(1, levels)
        return AdaptiveRuns(*(np.array([getattr(state, f)], dtype=np.int64) for f in _INT_FIELDS[:4]), prev,
                            np.array([state.prev_time], dtype=np.int64), np.array([state.prev_error]),
                            *(sums(f) for f in _SUM_FIELDS),
                            np.array([state.pairs], dtype=np.int64), np.array([state.settled], dtype=np.int64))

    def from_runs(self, runs: AdaptiveRuns) -> AdaptiveState:
        prev = None
        if runs.prev is not None:
            prev = runs.prev[0].copy()
            prev.setflags(write=False)
        return AdaptiveState(int(runs.level[0]), int(runs.next_due[0]), int(runs.pending[0]),
                             int(runs.pending_level[0]), prev, int(runs.prev_time[0]), float(runs.prev_error[0]),
                             *(tuple(float(v) for v in getattr(runs, f)[0]) for f in _SUM_FIELDS),
                             int(runs.pairs[0]), int(runs.settled[0]))

    def decide(self, state: AdaptiveState, ctx: DecisionContext) -> tuple[Decision, AdaptiveState]:
        runs = self.to_runs(state)
        decision, runs = decide_one(self, runs, ctx)
        return decision, self.from_runs(runs)

    def on_fresh(self, state: AdaptiveState, timestep: int) -> AdaptiveState:
        return state

    def state_to_json(self, state: AdaptiveState) -> dict[str, Any]:
        return state.to_json()

    def state_from_json(self, data: dict[str, Any]) -> AdaptiveState:
        out = AdaptiveState.from_json(data, len(self.levels))
        if out.level >= len(self.levels) or out.pending_level >= len(self.levels):
            raise StateError(f"adaptive-sample state names level {out.level} of {len(self.levels)}: "
                             "was privacy.w changed? restore the w it was journaled with")
        return out

    def describe(self) -> dict[str, Any]:
        out = {"decision": self.name, "releases_per_window": list(self.levels),
               "start": self.levels[self.start_level], "memory": self.memory, "min_pairs": self.min_pairs,
               "hysteresis": self.hysteresis}
        if self.floor_level:  # a floor is set (release.min_per_window)
            out["min_releases"] = self.levels[self.floor_level]
        return out
