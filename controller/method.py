"""Building an engine from a method specification, with clear errors.

:class:`MethodSpec` is the controller-level view of the configuration: the
decision method, the privacy unit and the method's public parameters. Bad
values raise :class:`~controller.errors.ConfigurationError` before any state
exists, so nothing can be released under a broken configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from controller.errors import ConfigurationError
from controller.pid import PIDController, PIDGains
from controller.policies.adaptive import AdaptiveSamplePolicy
from controller.policies.base import DecisionPolicy
from controller.policies.baselines import FixedPolicy, UniformPolicy
from controller.policies.grouping import AdaPubPolicy, RescueDPPolicy
from controller.policies.kellaris import BudgetAbsorption, BudgetDistribution
from controller.policies.sampling import DistanceSamplingPolicy, WEventSamplingPolicy
from controller.policies.wevent import FastPolicy, PegasusPolicy, SamplePolicy
from controller.step import Engine
from controller.svt import user_level_k, w_event_k
from controller.units import PrivacyUnit, UserLevel, WEvent
from histogram.exact import to_fraction
from histogram.mechanism import Mechanism

__all__ = ["METHODS", "W_EVENT_METHODS", "GROUPED_METHODS", "MethodSpec", "build_policy", "build_engine"]

METHODS = ("dsat", "dsft", "uniform", "fixed", "bd", "ba", "sample", "pegasus", "fast", "adapub", "rescuedp",
           "adaptive-sample")

#: methods defined only under w-event privacy (they refuse a user-level unit)
W_EVENT_METHODS = frozenset({"bd", "ba", "sample", "pegasus", "fast", "adapub", "rescuedp", "adaptive-sample"})

#: methods that release noisy sums over groups of bins (controller/grouped.py): LPA noise only
GROUPED_METHODS = frozenset({"adapub", "rescuedp"})


@dataclass(frozen=True)
class MethodSpec:
    """A decision method and its public parameters.

    Attributes:
        decision: one of :data:`METHODS`.
        unit: the privacy unit and budget.
        threshold: T in normalised L1 units (DSFT: fixed; DSAT: initial).
        population: declared public population n (DSFT/DSAT threshold scale).
        k: decision share ε₁ = kε; None derives it (see :mod:`controller.svt`).
        svt_split: ``lyu`` (default) or ``even``.
        pid: DSAT's controller gains.
        burn_in: DSAT's M.
        sensitivity: per-person per-timestep contribution bound Δ.
        noise_floor: add the last release's expected L1 noise (public) to the
            threshold, so T measures change in the data rather than noise.
        min_per_window: Adaptive Sample's fewest fresh releases per window (None: no floor).
    """

    decision: str
    unit: PrivacyUnit
    threshold: float = 0.025
    population: int | None = None
    k: Fraction | None = None
    svt_split: str = "lyu"
    pid: PIDGains = field(default_factory=PIDGains)
    burn_in: int = 0
    sensitivity: int = 1
    noise_floor: bool = False
    min_per_window: int | None = None

    def __post_init__(self) -> None:
        if self.decision not in METHODS:
            raise ConfigurationError(
                f"unknown decision method {self.decision!r}: choose one of {', '.join(METHODS)}"
            )
        if not isinstance(self.unit, UserLevel | WEvent):
            raise ConfigurationError("unit must be UserLevel or WEvent")
        if self.k is not None:
            try:
                k = to_fraction(self.k, name="release.k")
            except ValueError as exc:
                raise ConfigurationError(str(exc)) from exc
            if not 0 < k < 1:
                raise ConfigurationError(f"release.k must lie strictly between 0 and 1, got {k}")
            object.__setattr__(self, "k", k)
        if self.svt_split not in ("lyu", "even"):
            raise ConfigurationError(f"svt_split must be 'lyu' or 'even', got {self.svt_split!r}")
        if isinstance(self.sensitivity, bool) or not isinstance(self.sensitivity, int) or self.sensitivity < 1:
            raise ConfigurationError(f"sensitivity (contribution bound) must be an integer >= 1, got {self.sensitivity!r}")
        if self.decision in W_EVENT_METHODS and not isinstance(self.unit, WEvent):
            raise ConfigurationError(
                f"{self.decision} is a w-event mechanism: set privacy.unit: w-event and privacy.w"
            )
        if self.decision in ("dsat", "dsft") and self.population is None:
            raise ConfigurationError(
                f"{self.decision} needs privacy.population: a declared, public estimate of the number of "
                "people per timestep; it converts the threshold T from the thesis's normalised units to "
                "counts and is never computed from the data"
            )
        if self.population is not None and (
            isinstance(self.population, bool) or not isinstance(self.population, int) or self.population < 1
        ):
            raise ConfigurationError(f"privacy.population must be a whole number >= 1, got {self.population!r}")
        if self.min_per_window is not None and self.decision != "adaptive-sample":
            raise ConfigurationError(f"release.min_per_window is Adaptive Sample's floor on its fresh releases per "
                                     f"window; release.decision {self.decision} does not read it: remove it or set "
                                     "release.decision: adaptive-sample")
        if not isinstance(self.threshold, int | float) or not 0 <= float(self.threshold) <= 2:
            raise ConfigurationError(f"release.threshold must lie in [0, 2] (normalised L1 distance), got {self.threshold!r}")

    def describe(self) -> dict[str, Any]:
        return {"decision": self.decision, **self.unit.describe()}


def _k(spec: MethodSpec, bins: int) -> Fraction:
    if spec.k is not None:
        return Fraction(spec.k)
    if isinstance(spec.unit, UserLevel):
        return user_level_k(bins, spec.unit.cutoff, spec.unit.horizon, spec.sensitivity, spec.svt_split)  # type: ignore[arg-type]
    return w_event_k(bins, spec.unit.cutoff, spec.unit.w, spec.sensitivity, spec.svt_split)  # type: ignore[arg-type]


def build_policy(spec: MethodSpec, bins: int) -> DecisionPolicy:
    """The decision policy for ``spec`` over a histogram of ``bins`` bins."""
    if bins < 1:
        raise ConfigurationError("the domain is empty: a histogram needs at least one bin")
    unit = spec.unit
    if spec.decision == "uniform":
        return UniformPolicy(unit)
    if spec.decision == "fixed":
        return FixedPolicy(unit)
    if spec.decision == "bd":
        return BudgetDistribution(unit, spec.sensitivity)  # type: ignore[arg-type]
    if spec.decision == "ba":
        return BudgetAbsorption(unit, spec.sensitivity)  # type: ignore[arg-type]
    if spec.decision == "sample":
        return SamplePolicy(unit)  # type: ignore[arg-type]
    if spec.decision == "pegasus":
        return PegasusPolicy(unit, spec.sensitivity)  # type: ignore[arg-type]
    if spec.decision == "fast":
        return FastPolicy(unit, spec.sensitivity)  # type: ignore[arg-type]
    if spec.decision == "adapub":
        return AdaPubPolicy(unit, spec.sensitivity)  # type: ignore[arg-type]
    if spec.decision == "adaptive-sample":
        return AdaptiveSamplePolicy(unit, spec.sensitivity,  # type: ignore[arg-type]
                                    min_releases=1 if spec.min_per_window is None else spec.min_per_window)
    if spec.decision == "rescuedp":
        return RescueDPPolicy(unit, spec.sensitivity)  # type: ignore[arg-type]
    adaptive = spec.decision == "dsat"
    pid = PIDController(spec.pid, initial=float(spec.threshold))
    assert spec.population is not None
    cls = DistanceSamplingPolicy if isinstance(unit, UserLevel) else WEventSamplingPolicy
    return cls(
        unit,  # type: ignore[arg-type]
        spec.population,
        float(spec.threshold),
        _k(spec, bins),
        spec.svt_split,  # type: ignore[arg-type]
        spec.sensitivity,
        adaptive,
        pid,
        spec.burn_in,
        spec.noise_floor,
    )


def build_engine(spec: MethodSpec, mechanism: Mechanism, bins: int) -> Engine:
    """Policy + mechanism + bins. The mechanism's sensitivity must match the spec's."""
    if mechanism.sensitivity != spec.sensitivity:
        raise ConfigurationError(
            f"mechanism sensitivity {mechanism.sensitivity} differs from the contribution bound {spec.sensitivity}"
        )
    if spec.decision in GROUPED_METHODS and mechanism.name != "lpa":
        raise ConfigurationError(
            f"{spec.decision} releases noisy sums over groups of bins with discrete Laplace noise (LPA); "
            f"release.mechanism: {mechanism.name} cannot be used with it: set release.mechanism: lpa"
        )
    view = getattr(mechanism, "view", None)  # a model release decides over its released tables (§11.4)
    return Engine(build_policy(spec, bins if view is None else int(view.size)), mechanism, bins)
