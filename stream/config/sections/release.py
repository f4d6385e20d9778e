"""``release.*`` and ``randomness.*``: the decision method, the mechanism and their options, the noise source."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from controller.method import METHODS
from histogram.postprocess import MODELS, STATEFUL, chain_text, parse_chain
from stream.config.values import Exact, Section


class PIDSection(Section):
    theta_p: float = 1.0
    theta_i: float = 0.0
    theta_d: float = 0.0
    theta: float = 0.5
    delta: float = 0.05
    integral_window: int = Field(default=10, ge=1)


#: mechanisms that publish a model (model-release messages, ``docs/api.md``) instead of a count per bin
MODEL_MECHANISMS = ("copula", "marginals")
#: decisions that rewrite histogram counts themselves, so they cannot drive a model release
HISTOGRAM_ONLY_DECISIONS = ("pegasus", "fast")
MAX_SYNTHETIC = 10_000  # histogram.model_release.MAX_SYNTHETIC (checked equal in tests)


class CopulaSection(Section):
    """``release.copula.*`` (``release.mechanism: copula``): DPCopula, ``docs/privacy.md`` §11.1.

    ``correlation``: the DP correlation estimator (``kendall``: Kendall's τ with the public floor;
    ``mle``: subsample-and-aggregate pseudo-MLE; ``median``: seed 001's median-split tables).
    ``budget_split``: the paper's k = ε₁/ε₂ (marginals : correlations), exact. ``min_records``: the
    public floor n₀ on the records per timestep in Kendall's sensitivity 4/(n₀+1) (default: the
    declared ``privacy.population``; never the data's n). ``synthetic_size``: records sampled from
    the released copula into each fresh message (0 = none). ``partitions``: the ``mle`` estimator's parts.
    ``decision_space``: what DSAT/DSFT compare (§11.4): ``pairwise`` (default) every one-way and
    two-way table, so a change of correlation alone triggers a fresh release; ``one-way`` the
    one-way tables only (the behaviour, and the fingerprint, of streams from before the setting).
    """

    correlation: Literal["kendall", "mle", "median"] = "kendall"
    decision_space: Literal["pairwise", "one-way"] = "pairwise"
    budget_split: Exact = Fraction(8)
    min_records: int | None = Field(default=None, ge=2)
    synthetic_size: int = Field(default=0, ge=0, le=MAX_SYNTHETIC)
    partitions: int = Field(default=20, ge=1)

    @field_validator("budget_split")
    @classmethod
    def _split(cls, v: Fraction) -> Fraction:
        if v <= 0:
            raise ValueError(f"must be > 0 (ε for marginals ÷ ε for correlations, e.g. 8), got {v}")
        return v


class MarginalsSection(Section):
    """``release.marginals.*`` (``release.mechanism: marginals``): DP k-way marginals, §11.2.

    ``k``: every attribute set of size 1..k gets its table (equal ε shares per order).
    ``consistency``: make overlapping tables agree (free post-processing; the counts become floats
    without an interval). ``synthetic_size``: records synthesised from the tables into each fresh
    message (0 = none; needs k >= 2).
    """

    k: int = Field(default=2, ge=1)
    consistency: bool = True
    synthetic_size: int = Field(default=0, ge=0, le=MAX_SYNTHETIC)


class OnlineSection(Section):
    """``release.planner.online``: re-plan from the stream's own releases (:mod:`controller.online`).

    ``every``: re-plan at every timestep ``t > 0`` that is a multiple of it (timesteps; public).
    ``min_releases``: re-plan only once this many fresh releases were published. The re-plan reads
    the published series of the last ``release.planner.timesteps`` timesteps (post-processing:
    no ε); the switch keeps every window ≤ ε (``docs/privacy.md`` §13.1). w-event only.
    """

    every: int = Field(ge=1)
    min_releases: int = Field(default=5, ge=1)


class PlannerSection(Section):
    """``release.planner``: options of ``decision: auto`` (:mod:`stream.planning.planner`).

    ``public_history``: a counts file the user **declares public** (read by the planner instead of
    synthetic streams; never the stream's own input). ``runs``: seeded simulation runs on the public
    history (and on each online re-plan's releases); ``realisations``: draws of each synthetic family
    (each its own seeded series, simulated once: a family is a distribution of streams, and a
    schedule that learns can win on one draw and lose on the next); ``timesteps``: length of each
    synthetic stream (more: slower start-up, steadier choice).
    ``online``: re-plan from the stream's own releases as they accumulate (:class:`OnlineSection`).
    """

    public_history: str | None = None
    runs: int = Field(default=2, ge=1, le=50)
    realisations: int = Field(default=4, ge=1, le=50)
    timesteps: int = Field(default=200, ge=10, le=5000)
    online: OnlineSection | None = None


class ReleaseSection(Section):
    """``release.*``: decision method and mechanism (``decision: auto``: the planner chooses)."""

    decision: str = "dsat"
    mechanism: Literal["lpa", "psd", "copula", "marginals"] = "lpa"
    threshold: float = 0.025
    k: Exact | None = None
    svt_split: Literal["lyu", "even"] = "lyu"
    burn_in: int = Field(default=0, ge=0)
    noise_floor: bool = False
    #: Adaptive Sample's fewest fresh releases per window of ``w`` (its longest interval is ``w``
    #: over the smallest divisor of ``w`` not below this); unset: no floor. Public; no ε
    min_per_window: int | None = Field(default=None, ge=1)
    #: free post-processing of the published counts (:mod:`histogram.postprocess`; no ε): a chain
    #: of ``nonnegative``, ``integer``, ``kalman``/``ewma`` applied left to right, written
    #: ``kalman+nonnegative`` or as a list; stored in that canonical text (``none``: as drawn)
    postprocess: str = "none"
    #: ``k`` timesteps of publication delay: with a ``model`` step in ``postprocess`` the value of
    #: timestep ``t`` is a fixed-lag smoother's, from the releases up to ``t + k`` (no ε;
    #: evaluated by ``dpstream evaluate``; the service refuses it until it publishes late timesteps)
    delay: int = Field(default=0, ge=0, le=64)
    pid: PIDSection = Field(default_factory=PIDSection)
    confidence: float = 0.95
    psd: dict[str, Any] = Field(default_factory=dict)
    copula: CopulaSection | None = None
    marginals: MarginalsSection | None = None
    planner: PlannerSection | None = None

    @field_validator("decision")
    @classmethod
    def _decision(cls, v: str) -> str:
        if v not in (*METHODS, "auto"):
            raise ValueError(f"unknown decision method {v!r}: choose one of {', '.join(METHODS)}, auto")
        return v

    @field_validator("confidence")
    @classmethod
    def _confidence(cls, v: float) -> float:
        if not 0 < v < 1:
            raise ValueError("release.confidence must lie strictly between 0 and 1")
        return v

    @field_validator("postprocess", mode="before")
    @classmethod
    def _postprocess(cls, v: object) -> str:
        if not isinstance(v, str | list | tuple):
            raise ValueError("release.postprocess is a chain like kalman+nonnegative (or a list of steps)")
        try:
            return chain_text(parse_chain(v))  # type: ignore[arg-type]
        except ValueError as exc:
            raise ValueError(f"release.postprocess: {exc}") from None

    @model_validator(mode="after")
    def _smoother_needs_intervals(self) -> ReleaseSection:
        smoothers = [s for s in parse_chain(self.postprocess) if s in STATEFUL]
        if smoothers and self.decision in ("fast", "pegasus"):
            raise ValueError(
                f"release.postprocess {smoothers[0]} smooths releases by their published noise, but "
                f"release.decision {self.decision} already publishes filtered counts with no interval: "
                "drop the smoother, or choose another decision method")
        if self.delay and not any(s in MODELS for s in parse_chain(self.postprocess)):
            raise ValueError(f"release.delay {self.delay} is the fixed-lag smoother of a model step: set "
                             f"release.postprocess to model, model-perbin or model-trend (now {self.postprocess}), or delay 0")
        return self


class RandomnessSection(Section):
    """``randomness.*``: production noise is always from the OS CSPRNG.

    A seed makes noise reproducible (tests, evaluation, replay comparisons)
    and is refused unless ``allow_seeded_noise`` is also set: seeded noise
    must never protect real people.
    """

    seed: int | None = None
    allow_seeded_noise: bool = False

    @model_validator(mode="after")
    def _gate(self) -> RandomnessSection:
        if self.seed is not None and not self.allow_seeded_noise:
            raise ValueError(
                "randomness.seed makes the noise predictable; it is only for tests and evaluation. "
                "Set randomness.allow_seeded_noise: true to confirm, or remove the seed"
            )
        if self.seed is not None and self.seed < 0:
            raise ValueError("randomness.seed must be >= 0")
        return self
