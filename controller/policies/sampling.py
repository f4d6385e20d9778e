"""Distance-based sampling: DSFT and DSAT (thesis Alg. 7, 8, 9), made sound.

Each timestep after the first, the policy compares a noisy count-space L1
distance between the true histogram and the last release with a threshold,
using the sparse vector technique (:mod:`controller.svt`):

    fresh  ⇔  d(H_t, R_last) + ν_t  >=  T_t·n + ρ

* ``ρ`` is secret threshold noise, drawn once per SVT instance and never
  clamped or published;
* ``T_t`` is public: fixed (DSFT) or moved by the PID controller from the
  published fresh/republished sequence only (DSAT), clamped to [0, 2] in the
  thesis's normalised units; ``n`` is the declared public population that
  converts it to counts;
* ``ν_t`` is query noise of scale ``2cΔ/ε_q``.

User-level (:class:`DistanceSamplingPolicy`): ε₁ = kε pays for one SVT
instance with cutoff ``c = C − 1`` (the first release is not an SVT answer);
ε₂ = ε − ε₁ pays for C fresh releases of ε₂/C; in finite-horizon mode the
last timestep gets whatever budget remains.

w-event (:class:`WEventSamplingPolicy`): the SVT is restarted after every
positive (AboveThreshold, c = 1, fresh ρ). Each instance costs ``kε/(C+1)``
and is charged in every window it touches (its ledger entry's span grows
with each query); each fresh release costs ``(1−k)ε/C``; at most C fresh
releases per window. So any window holds at most ``C+1`` instances and ``C``
releases: ``(C+1)·kε/(C+1) + C·(1−k)ε/C = ε``. The window accountant checks
every charge before any noise is drawn (``docs/privacy.md`` §4).

Both rules are written once, over a runs axis (:meth:`DistanceSamplingPolicy.decide_runs`,
:meth:`WEventSamplingPolicy.decide_runs`, state :class:`SamplingRuns`), and share the SVT step
(:meth:`_SamplingPolicyBase._svt_query`: the draws, the public threshold in counts and the one noisy
comparison): the lab steps R runs with them, and the service's ``decide`` / ``on_fresh`` run them
with R = 1 on the engine's own accountant, converting the journaled :class:`SamplingState` to one
run and back (its JSON is unchanged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from controller.accountant import Accountant, UserLevelAccountant, WindowAccountant
from controller.errors import ConfigurationError, StateError
from controller.ledger import RENEW_EXTENDED, RENEW_STARTED
from controller.pid import PIDController, PIDState
from controller.policies.base import (
    Decision,
    DecisionContext,
    RunsContext,
    RunsDecision,
    amounts_for,
    decide_one,
)
from controller.svt import Split, SVTCalibration
from controller.units import UserLevel, WEvent

__all__ = ["SVTInstance", "SamplingState", "SamplingRuns", "DistanceSamplingPolicy", "WEventSamplingPolicy"]


@dataclass(frozen=True)
class SVTInstance:
    """A live SVT instance: its secret threshold noise and the entry paying for it."""

    rho: int
    seq: int
    positives: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"rho": self.rho, "seq": self.seq, "positives": self.positives}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> SVTInstance | None:
        if data is None:
            return None
        return cls(int(data["rho"]), int(data["seq"]), int(data["positives"]))


@dataclass(frozen=True)
class SamplingState:
    """State of a sampling policy. ``instance.rho`` is secret."""

    instance: SVTInstance | None = None
    pid: PIDState | None = None
    recent_fresh: tuple[int, ...] = ()
    queries: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "instance": None if self.instance is None else self.instance.to_json(),
            "pid": None if self.pid is None else self.pid.to_json(),
            "recent_fresh": list(self.recent_fresh),
            "queries": self.queries,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SamplingState:
        try:
            return cls(
                SVTInstance.from_json(data.get("instance")),
                None if data.get("pid") is None else PIDState.from_json(data["pid"]),
                tuple(int(t) for t in data.get("recent_fresh", [])),
                int(data.get("queries", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed sampling-policy state: {exc}") from exc


@dataclass
class SamplingRuns:
    """R runs of :class:`WEventSamplingPolicy`: one row per run (the policy updates them in place).

    ``rho`` is secret (each run's SVT threshold noise); everything else is public. The service's
    one run is converted from and back to :class:`SamplingState` every call (the journal's form).

    Attributes:
        handle: ``(R,)`` ledger handle of each run's live AboveThreshold instance's entry (-1: none;
            :meth:`controller.ledger.RunsLedger.renew`).
        rho: ``(R,)`` the instance's threshold noise (secret).
        positives: ``(R,)`` the instance's positives (0: a w-event instance halts at its first).
        queries: ``(R,)`` SVT queries asked so far.
        fresh: ``(R, w)`` fresh release at timestep ``s`` in column ``s % w`` (the last w timesteps;
            w-event only: ``(R, 0)`` under user-level privacy, whose rule reads the total count).
        floor: ``(R,)`` public noise floor of each run's last release, in counts (0 before any, or
            when ``noise_floor`` is off).
        threshold, errors, last_error, last_time, updates: DSAT's PID state per run
            (:meth:`controller.pid.PIDController.update_runs`); DSFT leaves them unused.
        threshold_scale, query_scale: the SVT's noise scales (the same objects every timestep; None
            for user-level C = 1, which asks no query).
        per_instance, per_release: the charges (``Fraction``; user-level: ε₁ and ε₂/C).
        fixed_threshold: DSFT's threshold in counts, rounded up.
    """

    handle: np.ndarray
    rho: np.ndarray
    positives: np.ndarray
    queries: np.ndarray
    fresh: np.ndarray
    floor: np.ndarray
    threshold: np.ndarray
    errors: list[np.ndarray]
    last_error: np.ndarray
    last_time: np.ndarray
    updates: int
    threshold_scale: Fraction | None
    query_scale: Fraction | None
    per_instance: Fraction
    per_release: Fraction
    fixed_threshold: int
    ceil_cache: dict[float, int] = field(default_factory=dict)
    floor_value: int | None = None
    ledger: Any = None  # the ledger the two amounts below are in (the lab's stays the same)
    e_instance: Any = None
    e_release: Any = None
    e_releases: np.ndarray | None = None  # e_release per run (read-only; RunsDecision.amounts slices it)

    def amounts(self, ledger: Any) -> None:
        """The charges in ``ledger``'s representation (converted once per ledger)."""
        if ledger is not self.ledger:
            self.ledger = ledger
            self.e_instance, self.e_release = ledger.amount(self.per_instance), ledger.amount(self.per_release)
            self.e_releases = amounts_for(self.e_release, self.handle)
            self.e_releases.flags.writeable = False


_NO_RUNS = np.zeros(0, dtype=np.int64)
_NO_RUNS.flags.writeable = False
_ONE_RUN = np.zeros(1, dtype=np.int64)
_ONE_RUN.flags.writeable = False


def _threshold_counts(threshold: float, population: int) -> Fraction:
    """Public threshold in counts: T (normalised) × n (declared population)."""
    return Fraction(repr(float(threshold))) * population


def _ceil_thresholds(x: np.ndarray, population: int, cache: dict[float, int]) -> np.ndarray:
    """``ceil(Fraction(repr(x)) · population)`` per entry: :func:`_threshold_counts` rounded up (exact).

    The test compares an integer with the threshold, and an integer ``d ≥ q`` iff ``d ≥ ceil(q)``.
    The float product ``x · population`` is within about one ulp of the exact rational, so its
    ceiling is the exact one unless it lies within 1e-9 (relative) of a whole number; there the
    exact rational is computed (and cached by ``x``)."""
    p = x * population
    out = np.ceil(p).astype(np.int64)
    near = np.abs(p - np.rint(p)) <= 1e-9 * np.maximum(1.0, np.abs(p))
    for i in np.flatnonzero(near).tolist():
        v = float(x[i])
        hit = cache.get(v)
        if hit is None:
            hit = cache[v] = math.ceil(_threshold_counts(v, population))
        out[i] = hit
    return out


def _noise_floor(ctx: DecisionContext) -> int:
    """Expected L1 distance between a release and the histogram it was drawn from.

    ``U × E|noise per bin|`` at the last release's ε: a function of public
    parameters only, so adding it to the public threshold costs nothing.
    """
    if ctx.last_epsilon <= 0:
        return 0
    return math.ceil(ctx.mechanism.expected_abs_error(ctx.last_epsilon, ctx.bins) * ctx.bins)


@dataclass(frozen=True)
class _SamplingPolicyBase:
    """What DSFT/DSAT share under both privacy units: parameters, their checks, the PID plumbing."""

    unit: UserLevel | WEvent
    population: int
    threshold: float
    k: Fraction
    split: Split = "lyu"
    sensitivity: int = 1
    adaptive: bool = False
    pid: PIDController = field(default_factory=PIDController)
    burn_in: int = 0
    noise_floor: bool = False

    _unit_type: ClassVar[type] = UserLevel
    _unit_name: ClassVar[str] = "user-level"

    def __post_init__(self) -> None:
        if not isinstance(self.unit, self._unit_type):
            raise ConfigurationError(f"{type(self).__name__} needs privacy.unit = {self._unit_name}")
        if not 0 < self.k < 1:
            raise ConfigurationError(f"k (decision share) must lie strictly between 0 and 1, got {self.k}")
        if self.population < 1:
            raise ConfigurationError(f"population must be >= 1, got {self.population}")
        if not 0 <= self.threshold <= 2:
            raise ConfigurationError(f"threshold T must lie in [0, 2] (normalised L1), got {self.threshold}")
        if self.burn_in < 0:
            raise ConfigurationError(f"burn_in must be >= 0, got {self.burn_in}")

    @property
    def name(self) -> str:
        return "dsat" if self.adaptive else "dsft"

    def reset(self) -> SamplingState:
        return SamplingState(pid=self.pid.reset() if self.adaptive else None)

    def public_threshold(self, state: SamplingState) -> float:
        return state.pid.threshold if (self.adaptive and state.pid is not None) else self.threshold

    # -- the runs axis, shared by both privacy units -----------------------------------------------
    _window: ClassVar[bool] = False  # whether the rule reads the last w timesteps' fresh releases
    _accountant: ClassVar[type] = UserLevelAccountant

    @property
    def per_instance(self) -> Fraction:
        raise NotImplementedError

    @property
    def calibration(self) -> SVTCalibration | None:
        raise NotImplementedError

    def reset_runs(self, runs: int) -> SamplingRuns:
        """The state of ``runs`` runs before the first timestep."""
        return self._runs(runs, self.pid.reset() if self.adaptive else None)

    @cached_property
    def _constants(self) -> tuple[Fraction | None, Fraction | None, Fraction, Fraction, int]:
        """The SVT's two noise scales (None without an SVT), the two charges and DSFT's threshold in
        counts (computed once per policy: the service converts its one run every timestep)."""
        cal = self.calibration
        return (None if cal is None else cal.threshold_scale, None if cal is None else cal.query_scale,
                self.per_instance, self.per_release, math.ceil(_threshold_counts(self.threshold, self.population)))

    def _runs(self, runs: int, pid: PIDState | None) -> SamplingRuns:
        threshold_scale, query_scale, per_instance, per_release, fixed_threshold = self._constants
        zeros = np.zeros(runs, dtype=np.int64)
        if pid is None:
            pid = PIDState(float(self.threshold))
        w = self.unit.w if self._window else 0  # type: ignore[union-attr]
        return SamplingRuns(
            handle=np.full(runs, -1, dtype=np.int64), rho=zeros.copy(), positives=zeros.copy(), queries=zeros.copy(),
            fresh=np.zeros((runs, w), dtype=bool), floor=zeros.copy(),
            threshold=np.full(runs, pid.threshold),
            errors=list(np.array(pid.errors, dtype=np.float64).reshape(-1, 1).repeat(runs, axis=1)),
            last_error=np.full(runs, pid.last_sample_error), last_time=np.full(runs, pid.last_sample_time),
            updates=pid.updates, threshold_scale=threshold_scale, query_scale=query_scale,
            per_instance=per_instance, per_release=per_release, fixed_threshold=fixed_threshold)

    def _svt_query(self, state: SamplingRuns, ctx: RunsContext, rows: np.ndarray, started: np.ndarray) -> np.ndarray:
        """The SVT step, once for both units: the runs ``rows`` (each with an instance whose ledger
        entry already covers ``ctx.timestep``; ``started`` ⊆ ``rows`` are the new ones) ask

            d(H_t, R_last) + ν  >=  T_t·n + floor + ρ

        Draws ρ for the new instances (each run's before its ν), then ν for every row; computes the
        exact integer distance; compares with the public threshold in counts rounded up (an integer
        is >= q iff it is >= ceil(q); :func:`_ceil_thresholds` for DSAT's per-run thresholds) plus
        the public noise floor of the run's last release. Returns the boolean per row (the only
        thing the query reveals) and counts the queries; ρ, ν and d are never kept or shown."""
        if started.size:
            state.rho[started] = ctx.noise.laplace(started, state.threshold_scale, None)
            state.positives[started] = 0
        nu = ctx.noise.laplace(rows, state.query_scale, None)
        d = ctx.l1(rows)
        if self.adaptive:
            threshold = _ceil_thresholds(state.threshold[rows], self.population, state.ceil_cache)
        else:
            threshold = state.fixed_threshold
        if self.noise_floor:
            threshold = threshold + state.floor[rows]
        above = d + nu - state.rho[rows] >= threshold
        state.queries[rows] += 1
        return above

    def after_runs(self, state: SamplingRuns, ctx: RunsContext, rows: np.ndarray,
                   noisy: np.ndarray) -> tuple[np.ndarray, SamplingRuns]:
        """The runs ``rows`` published a fresh release at ``ctx.timestep`` (published as drawn)."""
        if self.noise_floor and state.floor_value is None:
            # the floor a query reads is that of a release at per_release: under user-level privacy
            # the only other release (the horizon's last, at the rest) is followed by no query
            assert ctx.mechanism is not None and ctx.counts is not None
            bins = int(ctx.counts.size)
            state.floor_value = math.ceil(ctx.mechanism.expected_abs_error(state.per_release, bins) * bins)
        self._fresh_runs(state, ctx.timestep, rows, state.floor_value or 0)
        return noisy, state

    def _fresh_runs(self, state: SamplingRuns, t: int, rows: np.ndarray, floor: int) -> None:
        if self._window:
            state.fresh[rows, t % self.unit.w] = True  # type: ignore[union-attr]
        state.floor[rows] = floor
        if self.adaptive:  # PIDController.sampled(state, t + 1): the error of the latest update
            state.last_error[rows] = state.errors[-1][rows] if state.errors else 0.0
            state.last_time[rows] = t + 1

    # -- the service's one run: the same rule, R = 1 -------------------------------------------
    def _one_run(self, state: SamplingState, t: int, floor: int) -> SamplingRuns:
        """:class:`SamplingState` (the journal's form) at timestep ``t`` as one run."""
        runs = self._runs(1, state.pid)
        if self._window:
            w = self.unit.w  # type: ignore[union-attr]
            for s in state.recent_fresh:
                if s > t - w:
                    runs.fresh[0, s % w] = True
        if state.instance is not None:
            runs.handle[0], runs.rho[0], runs.positives[0] = state.instance.seq, state.instance.rho, \
                state.instance.positives
        runs.queries[0] = state.queries
        runs.floor[0] = floor
        return runs

    def _from_one_run(self, runs: SamplingRuns, t: int, state: SamplingState) -> SamplingState:
        """One run back to :class:`SamplingState` at timestep ``t`` (w-event: fresh timesteps in ``(t−w, t]``)."""
        recent = state.recent_fresh
        if self._window:
            w = self.unit.w  # type: ignore[union-attr]
            recent = tuple(sorted(t - (t - int(j)) % w for j in np.flatnonzero(runs.fresh[0])))
        handle = int(runs.handle[0])
        instance = None if handle < 0 else SVTInstance(int(runs.rho[0]), handle, int(runs.positives[0]))
        pid = state.pid
        if self.adaptive and pid is not None:
            pid = PIDState(float(runs.threshold[0]), tuple(float(e[0]) for e in runs.errors),
                           float(runs.last_error[0]), int(runs.last_time[0]), runs.updates)
        return SamplingState(instance, pid, recent, int(runs.queries[0]))

    def decide_runs(self, state: SamplingRuns, ctx: RunsContext) -> tuple[RunsDecision, SamplingRuns]:
        raise NotImplementedError

    def decide(self, state: SamplingState, ctx: DecisionContext) -> tuple[Decision, SamplingState]:
        assert isinstance(ctx.accountant, self._accountant)
        runs = self._one_run(state, ctx.timestep, _noise_floor(ctx) if self.noise_floor else 0)
        decision, runs = decide_one(self, runs, ctx)
        return decision, self._from_one_run(runs, ctx.timestep, state)

    def on_fresh(self, state: SamplingState, timestep: int) -> SamplingState:
        runs = self._one_run(state, timestep, 0)
        self._fresh_runs(runs, timestep, _ONE_RUN, 0)
        return self._from_one_run(runs, timestep, state)

    def state_to_json(self, state: SamplingState) -> dict[str, Any]:
        return state.to_json()

    def state_from_json(self, data: dict[str, Any]) -> SamplingState:
        return SamplingState.from_json(data)


@dataclass(frozen=True)
class DistanceSamplingPolicy(_SamplingPolicyBase):
    """DSFT (``adaptive=False``) or DSAT (``adaptive=True``) under user-level privacy.

    Attributes:
        unit: the user-level budget (ε, N, C).
        population: declared public population n (threshold scale); never
            computed from data.
        threshold: T in the thesis's normalised units (fixed for DSFT, the
            initial value for DSAT).
        k: share of ε for the decision stage (ε₁ = kε); unused when C = 1.
        split: SVT split between threshold and query noise.
        sensitivity: Δ, the per-person per-timestep contribution bound.
        adaptive: DSAT's PID threshold.
        pid: the controller (DSAT).
        burn_in: M timesteps after the first that only republish (DSAT).
    """

    unit: UserLevel

    @property
    def epsilon_decision(self) -> Fraction:
        """ε₁: the SVT instance's cost (0 when C = 1: no decisions are needed)."""
        return self.k * self.unit.epsilon if self.unit.cutoff > 1 else Fraction(0)

    @property
    def epsilon_publication(self) -> Fraction:
        """ε₂ = ε − ε₁, shared by the C fresh releases."""
        return self.unit.epsilon - self.epsilon_decision

    @property
    def per_release(self) -> Fraction:
        return self.epsilon_publication / self.unit.cutoff

    @property
    def calibration(self) -> SVTCalibration | None:
        if self.unit.cutoff == 1:
            return None
        return SVTCalibration.build(self.epsilon_decision, self.unit.cutoff - 1, self.sensitivity, self.split)

    def new_accountant(self) -> Accountant:
        return UserLevelAccountant(self.unit.epsilon)

    @property
    def per_instance(self) -> Fraction:
        """The one SVT instance's cost: ε₁ (charged at its first query, stretched over the later ones)."""
        return self.epsilon_decision

    def decide_runs(self, state: SamplingRuns, ctx: RunsContext) -> tuple[RunsDecision, SamplingRuns]:
        """Thesis Alg. 7/8, made sound, for every run. Per run, in this order: the first timestep is
        fresh at ε₂/C; a run with C fresh releases, or past the horizon, republishes; the horizon's
        last timestep is fresh at whatever the run's budget has left (:meth:`~controller.ledger.
        RunsLedger.remaining`), if anything; during DSAT's burn-in every run republishes; else the
        PID update (public), the run's one SVT instance charged ε₁ at its first query (stretched to
        ``t`` at the later ones), then ρ (first query only), ν and the comparison
        (:meth:`_svt_query`). A run that republishes for any of these reasons reads no data and
        draws nothing.

        DSAT's PID is updated for every run once any run still queries (one array operation): the
        state of a run with its C releases moves on, but that run never reads it again (it queries
        and releases no more), and the service's one run is updated only while it queries, as the
        one-run rule did.
        """
        t, horizon, cutoff = ctx.timestep, self.unit.horizon, self.unit.cutoff
        ledger = ctx.ledger
        state.amounts(ledger)
        if t == 0:
            return RunsDecision(np.arange(ctx.runs), state.e_releases, "first timestep"), state
        if t >= horizon:
            return RunsDecision(_NO_RUNS, _NO_RUNS), state
        active = (ctx.fresh_count < cutoff).nonzero()[0]  # the others have their C releases
        if t == horizon - 1:
            rest = ledger.remaining(t)[active]
            left = (rest > 0).astype(bool)
            return RunsDecision(active[left], rest[left], "last timestep of the horizon"), state
        if not active.size or (self.adaptive and t <= self.burn_in) or state.query_scale is None:
            return RunsDecision(_NO_RUNS, _NO_RUNS), state  # (no query scale: C = 1, its one release done)
        if self.adaptive:
            state.threshold, state.errors = self.pid.update_runs(
                state.threshold, state.errors, state.last_error, state.last_time, fresh_so_far=ctx.fresh_count,
                timestep=t + 1, target_rate=cutoff / horizon)
            state.updates += 1
        live = state.handle[active] >= 0
        started, held = active[~live], active[live]
        if started.size:
            state.handle[started] = ledger.spend(t, started, state.e_instance, "decision")
        if held.size:
            state.handle[held] = ledger.extend(t, held, state.handle[held], state.e_instance)
        above = self._svt_query(state, ctx, active, started)
        fresh_rows = active[above]
        state.positives[fresh_rows] += 1
        return RunsDecision(fresh_rows, state.e_releases[:fresh_rows.size], "distance above threshold"), state

    def charges(self) -> tuple[Fraction, ...]:
        """ε₁ (the SVT instance), ε₂/C per release; the last timestep's rest is ε minus these."""
        return tuple(e for e in (self.epsilon_decision, self.per_release) if e)

    def describe(self) -> dict[str, Any]:
        cal = self.calibration
        return {
            "decision": self.name,
            "population": self.population,
            "threshold": repr(float(self.threshold)),
            "k": str(self.k),
            "epsilon_decision": str(self.epsilon_decision),
            "epsilon_per_release": str(self.per_release),
            "svt_split": self.split,
            "threshold_noise_scale": None if cal is None else str(cal.threshold_scale),
            "query_noise_scale": None if cal is None else str(cal.query_scale),
            "burn_in": self.burn_in if self.adaptive else None,
            "noise_floor": self.noise_floor,
            "pid": None if not self.adaptive else vars(self.pid.gains),
        }


@dataclass(frozen=True)
class WEventSamplingPolicy(_SamplingPolicyBase):
    """DSAT (or DSFT with ``adaptive=False``) under w-event privacy (Alg. 9, made sound)."""

    unit: WEvent
    adaptive: bool = True

    _unit_type: ClassVar[type] = WEvent
    _unit_name: ClassVar[str] = "w-event"
    _window: ClassVar[bool] = True
    _accountant: ClassVar[type] = WindowAccountant

    @property
    def per_instance(self) -> Fraction:
        """Cost of one AboveThreshold instance: kε/(C+1)."""
        return self.k * self.unit.epsilon / (self.unit.cutoff + 1)

    @property
    def per_release(self) -> Fraction:
        """Cost of one fresh release: (1−k)ε/C."""
        return (1 - self.k) * self.unit.epsilon / self.unit.cutoff

    @property
    def calibration(self) -> SVTCalibration:
        return SVTCalibration.build(self.per_instance, 1, self.sensitivity, self.split)

    def new_accountant(self) -> Accountant:
        return WindowAccountant(self.unit.epsilon, self.unit.w)

    def decide_runs(self, state: SamplingRuns, ctx: RunsContext) -> tuple[RunsDecision, SamplingRuns]:
        """Alg. 9, made sound, for every run: each run in its window asks its live AboveThreshold
        instance (or a new one) whether the distance to its last release exceeds the threshold.

        Order per run, as ``docs/privacy.md`` §4 states it: PID update (public), then the ledger
        (:meth:`~controller.ledger.RunsLedger.renew`: the instance's entry stretched to ``t`` or a new
        instance charged, only if the release a positive needs could still be paid), then the
        draws (ρ for new instances, then ν), then the one comparison. A run that cannot pay, or has
        ``C`` fresh releases in its window, republishes without reading data.
        """
        t, w, cutoff = ctx.timestep, self.unit.w, self.unit.cutoff
        ledger = ctx.ledger
        state.fresh[:, t % w] = False  # timestep t − w leaves the window
        state.amounts(ledger)
        e_rel = state.e_release
        if t == 0:
            rows = ledger.can_spend(t, e_rel).nonzero()[0]
            return RunsDecision(rows, state.e_releases[:rows.size], "first timestep"), state
        if self.adaptive and t <= self.burn_in:
            return RunsDecision(_NO_RUNS, _NO_RUNS), state
        in_window = state.fresh.sum(axis=1)
        if self.adaptive:
            state.threshold, state.errors = self.pid.update_runs(
                state.threshold, state.errors, state.last_error, state.last_time, fresh_so_far=in_window,
                timestep=t + 1, target_rate=cutoff / w, rate_over=min(t + 1, w))
            state.updates += 1
        active = (in_window < cutoff).nonzero()[0]
        # An instance whose entry has left the window ending at t is not stretched back into it: a
        # new instance (new ρ, charged anew) is started instead, so every query of an instance lies
        # in a span its entry covers in full (§4). It never happens in a run of this rule: an
        # instance is only left unqueried while the release a positive needs does not fit, and by
        # w − 1 timesteps after its last query the window holds its entry and nothing else.
        outcome, handles = ledger.renew(t, active, state.handle[active], state.e_instance, e_rel, "decision")
        state.handle[active] = handles
        rows = active[outcome >= RENEW_EXTENDED]  # the instance's entry covers t: it may be queried
        if not rows.size:
            return RunsDecision(_NO_RUNS, _NO_RUNS), state
        above = self._svt_query(state, ctx, rows, active[outcome == RENEW_STARTED])
        fresh_rows = rows[above]
        state.handle[fresh_rows] = -1  # AboveThreshold halts: the next query starts a new instance
        return RunsDecision(fresh_rows, state.e_releases[:fresh_rows.size], "distance above threshold"), state

    def charges(self) -> tuple[Fraction, ...]:
        """kε/(C+1) per SVT instance, (1−k)ε/C per release."""
        return (self.per_instance, self.per_release)

    def describe(self) -> dict[str, Any]:
        cal = self.calibration
        return {
            "decision": self.name,
            "population": self.population,
            "threshold": repr(float(self.threshold)),
            "k": str(self.k),
            "epsilon_per_instance": str(self.per_instance),
            "epsilon_per_release": str(self.per_release),
            "svt_split": self.split,
            "threshold_noise_scale": str(cal.threshold_scale),
            "query_noise_scale": str(cal.query_scale),
            "burn_in": self.burn_in if self.adaptive else None,
            "noise_floor": self.noise_floor,
            "pid": None if not self.adaptive else vars(self.pid.gains),
        }
