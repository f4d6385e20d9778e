"""``privacy.*``: the promise: unit, ε, population, shared populations, personal budgets."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from controller.units import parse_epsilon
from stream.config.values import Exact, Section


class SharedPopulation(Section):
    """``privacy.shared_population``: this stream is one of several over the same people.

    ``name`` identifies the population; ``cap`` is the most ε its people may lose over all its
    streams together (user-level: in total; w-event: per window, all streams with the same ``w``).
    The population ledger (``service.population_ledger``) refuses a stream that would exceed it
    (docs/privacy.md §10).
    """

    name: str = Field(min_length=1)
    cap: Exact

    @field_validator("cap", mode="before")
    @classmethod
    def _cap(cls, v: object) -> Fraction:
        return parse_epsilon(v)


PERSONAL_MECHANISMS = ("minimum", "threshold", "sampling", "privacy_aware", "utility_based")
#: the tier every person without a declared budget is in (ε = ``privacy.epsilon``)
DEFAULT_TIER = "default"


class PersonalSection(Section):
    """``privacy.personal``: personalized DP (per-person budgets; ``docs/privacy.md`` §12).

    Each person's ε comes from a *public* declaration fixed for the stream's lifetime, never
    from the counted attributes: either ``attribute`` (a consent field every event carries,
    stamped by the operator's gateway from the person's registration) or ``table`` (a CSV file
    ``person id,tier`` with a header line, read at start-up). ``tiers`` maps tier names to ε;
    a person with no declared tier (not in the table, or no/unknown consent value) gets
    ``privacy.epsilon``. ``persons`` declares public head counts per tier (``default``
    included) for planning partitions and scaling estimates; with a table, a tier's count
    defaults to its rows. Changing any of it changes the stream's fingerprint: a restart
    under a changed declaration is refused like any other budget change.
    """

    mechanism: Literal["minimum", "threshold", "sampling", "privacy_aware", "utility_based"]
    tiers: dict[str, Exact]
    attribute: str | None = None
    table: str | None = None
    persons: dict[str, int] = Field(default_factory=dict)
    threshold: Exact | None = None
    min_size: int = Field(default=1, ge=1)
    #: how a partition's parts combine into the published estimate (docs/privacy.md §12.5): ``sum``
    #: (weights ∝ expected members: the plain sum of the parts, unbiased whatever the link between
    #: budgets and data) or ``utility`` (inverse-variance weights of thesis §5.2.4: each part stands in
    #: for everyone, accurate when budgets are unrelated to the counted attributes). Default: ``sum``
    #: for privacy_aware, ``utility`` for utility_based (whose partition is chosen by that utility).
    weights: Literal["sum", "utility"] | None = None

    @field_validator("tiers", mode="before")
    @classmethod
    def _tier_budgets(cls, v: object) -> object:
        if isinstance(v, Mapping):
            return {k: parse_epsilon(e) for k, e in v.items()}
        return v

    @field_validator("threshold", mode="before")
    @classmethod
    def _threshold(cls, v: object) -> object:
        return None if v is None else parse_epsilon(v)

    @model_validator(mode="after")
    def _declaration(self) -> PersonalSection:
        if (self.attribute is None) == (self.table is None):
            raise ValueError(
                "privacy.personal needs exactly one budget source: attribute (a public consent field of every "
                "event) or table (a CSV file of person id,tier); set one of them")
        if not self.tiers:
            raise ValueError("privacy.personal.tiers is empty; declare at least one tier, e.g. research: 0.5")
        if DEFAULT_TIER in self.tiers:
            raise ValueError(f"{DEFAULT_TIER!r} is the tier of persons without a declared budget (ε = "
                             "privacy.epsilon); name the tier differently")
        unknown = sorted(set(self.persons) - set(self.tiers) - {DEFAULT_TIER})
        if unknown:
            raise ValueError(f"privacy.personal.persons names {unknown}, which are not tiers; use tier names "
                             f"or {DEFAULT_TIER!r}")
        if any(n < 0 for n in self.persons.values()):
            raise ValueError("privacy.personal.persons: head counts must be >= 0")
        needs_t = self.mechanism in ("threshold", "sampling")
        if needs_t and self.threshold is None:
            raise ValueError(f"privacy.personal.mechanism {self.mechanism} needs privacy.personal.threshold (ε_t)")
        if not needs_t and self.threshold is not None:
            raise ValueError(f"privacy.personal.threshold is only used by threshold and sampling, not "
                             f"{self.mechanism}: remove it")
        if self.weights is not None and self.mechanism not in ("privacy_aware", "utility_based"):
            raise ValueError(f"privacy.personal.weights combines the parts of a partition; {self.mechanism} has one "
                             "part: remove it")
        return self


class PrivacySection(Section):
    """``privacy.*``: the promise."""

    unit: Literal["user-level", "w-event"] = "user-level"
    epsilon: Exact = Fraction(1)
    horizon: int | None = None
    cutoff: int = 1
    w: int | None = None
    population: int | None = None
    contribution_bound: int = 1
    #: several streams over the same people add up: see :class:`SharedPopulation`
    shared_population: SharedPopulation | None = None
    #: per-person budgets (personalized DP): see :class:`PersonalSection`
    personal: PersonalSection | None = None

    @field_validator("epsilon", mode="before")
    @classmethod
    def _eps(cls, v: object) -> Fraction:
        return parse_epsilon(v)

    @model_validator(mode="after")
    def _unit_fields(self) -> PrivacySection:
        if self.unit == "user-level" and self.horizon is None:
            raise ValueError("user-level privacy needs privacy.horizon (N, the number of timesteps covered)")
        if self.unit == "w-event" and self.w is None:
            raise ValueError("w-event privacy needs privacy.w (the window length in timesteps)")
        if self.contribution_bound < 1:
            raise ValueError("privacy.contribution_bound must be >= 1")
        return self
