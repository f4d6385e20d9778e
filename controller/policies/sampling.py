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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, ClassVar

from controller.accountant import Accountant, UserLevelAccountant, WindowAccountant
from controller.errors import ConfigurationError, StateError
from controller.pid import PIDController, PIDState
from controller.policies.base import REPUBLISH, Decision, DecisionContext, fresh
from controller.svt import Split, SVTCalibration
from controller.units import UserLevel, WEvent
from histogram.distance import l1_distance

__all__ = ["SVTInstance", "SamplingState", "DistanceSamplingPolicy", "WEventSamplingPolicy"]


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


def _threshold_counts(threshold: float, population: int) -> Fraction:
    """Public threshold in counts: T (normalised) × n (declared population)."""
    return Fraction(repr(float(threshold))) * population


def _noise_floor(ctx: DecisionContext) -> int:
    """Expected L1 distance between a release and the histogram it was drawn from.

    ``U × E|noise per bin|`` at the last release's ε: a function of public
    parameters only, so adding it to the public threshold costs nothing.
    """
    if ctx.last_epsilon <= 0:
        return 0
    return math.ceil(ctx.mechanism.expected_abs_error(ctx.last_epsilon, ctx.bins) * ctx.bins)


def _noisy_above(
    ctx: DecisionContext, calibration: SVTCalibration, rho: int, threshold_counts: Fraction
) -> bool:
    """One SVT query: ``d + ν >= T + ρ``. Draws ν; reveals only the boolean."""
    d = l1_distance(ctx.counts, ctx.last_counts)
    nu = int(ctx.noise.discrete_laplace(calibration.query_scale))
    return d + nu - rho >= threshold_counts


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

    def _threshold_with_floor(self, state: SamplingState, ctx: DecisionContext) -> Fraction:
        """The public threshold in counts (plus the public noise floor when enabled)."""
        threshold = _threshold_counts(self.public_threshold(state), self.population)
        if self.noise_floor:
            threshold += _noise_floor(ctx)
        return threshold

    def _record_fresh(self, state: SamplingState, timestep: int) -> SamplingState:
        if self.adaptive and state.pid is not None:
            return replace(state, pid=self.pid.sampled(state.pid, timestep + 1))
        return state

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

    def decide(self, state: SamplingState, ctx: DecisionContext) -> tuple[Decision, SamplingState]:
        t, horizon, cutoff = ctx.timestep, self.unit.horizon, self.unit.cutoff
        if t == 0:
            return fresh(self.per_release, "first timestep"), state
        if ctx.fresh_count >= cutoff or t >= horizon:
            return REPUBLISH, state
        if t == horizon - 1:
            rest = ctx.accountant.remaining(t)
            return (fresh(rest, "last timestep of the horizon"), state) if rest > 0 else (REPUBLISH, state)
        if self.adaptive and t <= self.burn_in:
            return REPUBLISH, state
        calibration = self.calibration
        if calibration is None:  # C == 1 and the first release is done
            return REPUBLISH, state
        if self.adaptive:
            assert state.pid is not None
            pid_state = self.pid.update(
                state.pid, fresh_so_far=ctx.fresh_count, timestep=t + 1, target_rate=cutoff / horizon
            )
            state = replace(state, pid=pid_state)
        instance = state.instance
        if instance is None:
            entry = ctx.accountant.spend(t, calibration.epsilon, "decision")
            rho = int(ctx.noise.discrete_laplace(calibration.threshold_scale))
            instance = SVTInstance(rho, entry.seq)
        else:
            ctx.accountant.extend(instance.seq, t)
        above = _noisy_above(ctx, calibration, instance.rho, self._threshold_with_floor(state, ctx))
        state = replace(state, queries=state.queries + 1)
        if above:
            instance = replace(instance, positives=instance.positives + 1)
            return fresh(self.per_release, "distance above threshold"), replace(state, instance=instance)
        return REPUBLISH, replace(state, instance=instance)

    def on_fresh(self, state: SamplingState, timestep: int) -> SamplingState:
        return self._record_fresh(state, timestep)

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

    def _window_fresh(self, state: SamplingState, t: int) -> tuple[int, ...]:
        return tuple(s for s in state.recent_fresh if s > t - self.unit.w)

    def decide(self, state: SamplingState, ctx: DecisionContext) -> tuple[Decision, SamplingState]:
        t, w, cutoff = ctx.timestep, self.unit.w, self.unit.cutoff
        acct = ctx.accountant
        assert isinstance(acct, WindowAccountant)
        state = replace(state, recent_fresh=self._window_fresh(state, t))
        if t == 0:
            ok = acct.can_spend(t, self.per_release)
            return (fresh(self.per_release, "first timestep") if ok else REPUBLISH), state
        if self.adaptive and t <= self.burn_in:
            return REPUBLISH, state
        in_window = len(state.recent_fresh)
        if self.adaptive:
            assert state.pid is not None
            state = replace(
                state,
                pid=self.pid.update(
                    state.pid,
                    fresh_so_far=in_window,
                    timestep=t + 1,
                    target_rate=cutoff / w,
                    rate_over=min(t + 1, w),
                ),
            )
        if in_window >= cutoff:
            return REPUBLISH, state
        calibration = self.calibration
        instance = state.instance
        live = instance is not None and any(e.seq == instance.seq for e in acct.entries)
        if instance is not None and live and acct.can_extend(instance.seq, t):
            probe = acct.copy()
            probe.extend(instance.seq, t)
            if not probe.can_spend(t, self.per_release):
                return REPUBLISH, state  # no room for the release a positive would need
            acct.extend(instance.seq, t)
        else:
            # start a new instance (the old one, if any, is abandoned: it stops reading data)
            if not acct.can_spend(t, self.per_instance + self.per_release):
                return REPUBLISH, replace(state, instance=None)
            entry = acct.spend(t, self.per_instance, "decision")
            instance = SVTInstance(int(ctx.noise.discrete_laplace(calibration.threshold_scale)), entry.seq)
        assert instance is not None
        above = _noisy_above(ctx, calibration, instance.rho, self._threshold_with_floor(state, ctx))
        state = replace(state, queries=state.queries + 1)
        if above:  # AboveThreshold halts: the next query starts a new instance
            return fresh(self.per_release, "distance above threshold"), replace(state, instance=None)
        return REPUBLISH, replace(state, instance=instance)

    def on_fresh(self, state: SamplingState, timestep: int) -> SamplingState:
        state = replace(state, recent_fresh=self._window_fresh(state, timestep) + (timestep,))
        return self._record_fresh(state, timestep)

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
