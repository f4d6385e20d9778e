"""dpstream settings: one YAML file, environment overrides, strict validation.

Precedence: explicit overrides > environment (``DPSTREAM_…``, nested with
``__``, e.g. ``DPSTREAM_PRIVACY__EPSILON=0.5``) > the YAML file > defaults.
Unknown keys are errors (a typo must not silently fall back to a default).
Every error names the setting and says what to do; a configuration that
fails here can release nothing.

The privacy-relevant part of the settings (stream id and timestep grid,
domain, privacy unit and budget, method, mechanism and their parameters) is
hashed into :meth:`Settings.fingerprint`; the service stores it with its
ledger and refuses to continue a stream whose fingerprint changed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from math import comb
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from controller.errors import ConfigurationError
from controller.method import METHODS, MethodSpec, build_engine
from controller.personal import PersonalEngine, sampling_window_refusal
from controller.pid import PIDGains
from controller.step import Engine
from controller.units import UserLevel, WEvent, parse_epsilon
from histogram.domain import CategoricalAttribute, Domain, NumericAttribute
from histogram.errors import HistogramError
from histogram.exact import to_fraction
from histogram.lpa import LaplaceMechanism
from histogram.mechanism import Mechanism
from histogram.noise import Randomness
from histogram.personalized import BudgetLevels, PersonalBudgets, PersonalizedMechanism
from histogram.postprocess import MODELS, STATEFUL, PostProcessor, chain_text, parse_chain

__all__ = [
    "ConfigError", "Settings", "load_settings", "missing_files", "parse_duration", "format_duration",
    "SECRET_SETTINGS",
]

ENV_PREFIX = "DPSTREAM_"


class ConfigError(ValueError):
    """The configuration is invalid; the message lists every problem found, one line each.

    Each line names the setting (dotted path, e.g. ``service.http_port``), the
    value found (never a secret's) and what to do. ``lines`` holds them.
    """

    def __init__(self, *lines: str) -> None:
        self.lines: tuple[str, ...] = tuple(line for text in lines for line in text.splitlines() if line.strip())
        super().__init__("\n".join(self.lines))


#: Settings whose values are secrets: ``SecretStr`` in the model, never shown in an error, a log,
#: ``repr`` or a dump; only :func:`stream.service.kafka_io.client_options` reads them in clear.
SECRET_SETTINGS: frozenset[str] = frozenset({"kafka.sasl_plain_password",
                                             "input.schema_registry.basic_auth_password"})


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


def parse_duration(value: object) -> timedelta:
    """``"300s"``, ``"5m"``, ``"1h"``, ``"1d"``, ``"250ms"``, or a number of seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"a duration must look like 300s, 5m, 1h or 1d, got {value!r}")
    if isinstance(value, int | float):
        return timedelta(seconds=float(value))
    m = _DURATION.match(str(value))
    if not m:
        raise ValueError(f"a duration must look like 300s, 5m, 1h or 1d, got {value!r}")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def format_duration(td: timedelta) -> str:
    seconds = td.total_seconds()
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{int(round(seconds * 1000))}ms"


def _parse_time(value: object) -> datetime:
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        dt = datetime.fromtimestamp(float(value), tz=UTC)
    else:
        text = str(value).strip()
        try:
            dt = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        except ValueError:
            raise ValueError(f"{value!r} is not a time; write ISO-8601 like 2026-12-01T00:00:00Z, or epoch "
                             "seconds") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


Duration = Annotated[timedelta, BeforeValidator(parse_duration), PlainSerializer(format_duration)]
Instant = Annotated[datetime, BeforeValidator(_parse_time), PlainSerializer(lambda d: d.isoformat())]
Exact = Annotated[Fraction, BeforeValidator(lambda v: to_fraction(v, name="value")), PlainSerializer(str)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


class StreamSection(_Section):
    """``stream.*``: identity and the timestep grid."""

    id: str = Field(default="dpstream", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    timestep: Duration = timedelta(hours=1)
    allowed_lateness: Duration = timedelta(0)
    #: Legacy ``kafka.record_time: watermark`` only (unset there means 30s); refused by the
    #: record-time modes, which never seal on a quiet gap (it is other people's data).
    idle_timeout: Duration | None = None
    max_future: Duration = timedelta(days=1)
    origin: Instant = datetime(1970, 1, 1, tzinfo=UTC)
    start: Instant | None = None
    #: Record-time inclusion (``kafka.record_time`` other than ``watermark``): how far the broker's
    #: clock may be behind the public wall clock. A partition read to an end offset observed at wall
    #: time τ (fresh, read_uncommitted) counts as past ``τ − clock_skew`` in record time; an event
    #: read later with an earlier record time for a released timestep goes to the late topic
    #: (``arrived_after_seal``), never into a release. A partition's record time going back by more
    #: than this stops the service (stream/service/progress.py).
    clock_skew: Duration = timedelta(seconds=5)
    #: Where the stream ends (the service releases the timesteps before it, commits and exits 0).
    #: An instant: every timestep that starts before it (``[start, end)``), a public choice.
    #: ``last-record`` (backfills; record-time modes, service.role single): the timestep holding the
    #: largest record time read before the service first caught up with its input (journaled, so
    #: restarts keep it). Its stop time reveals that timestep: docs/privacy.md §1.3. None: no end.
    end: Instant | Literal["last-record"] | None = None

    @field_validator("timestep")
    @classmethod
    def _positive_timestep(cls, v: timedelta) -> timedelta:
        if v <= timedelta(0):
            raise ValueError("stream.timestep must be > 0")
        return v

    @field_validator("allowed_lateness", "max_future", "clock_skew")
    @classmethod
    def _non_negative(cls, v: timedelta) -> timedelta:
        if v < timedelta(0):
            raise ValueError("must be >= 0")
        return v

    @field_validator("idle_timeout")
    @classmethod
    def _positive_idle(cls, v: timedelta | None) -> timedelta | None:
        if v is not None and v <= timedelta(0):
            raise ValueError("stream.idle_timeout must be > 0")
        return v

    @model_validator(mode="after")
    def _end_after_start(self) -> StreamSection:
        if isinstance(self.end, datetime) and self.start is not None and self.end <= self.start:
            raise ValueError(f"stream.end {self.end.isoformat()} is not after stream.start "
                             f"{self.start.isoformat()}: the stream would release nothing; move stream.end later")
        return self


class AttributeSpec(_Section):
    """One entry of ``schema.attributes``."""

    name: str = Field(min_length=1)
    kind: Literal["categorical", "numeric"]
    values: list[str | int | float] | None = None
    min: float | None = None
    max: float | None = None
    bins: int | None = None
    out_of_range: Literal["clip", "reject"] | None = None

    @model_validator(mode="after")
    def _fields_for_kind(self) -> AttributeSpec:
        if self.kind == "categorical":
            if not self.values:
                raise ValueError(f"categorical attribute {self.name!r} needs a non-empty 'values' list")
            if any(v is not None for v in (self.min, self.max, self.bins)):
                raise ValueError(f"categorical attribute {self.name!r} takes 'values', not min/max/bins")
        else:
            if self.min is None or self.max is None or self.bins is None:
                raise ValueError(f"numeric attribute {self.name!r} needs 'min', 'max' and 'bins'")
            if self.values is not None:
                raise ValueError(f"numeric attribute {self.name!r} takes min/max/bins, not 'values'")
        return self


class SchemaSection(_Section):
    """``schema.*``: which input field is which, and the public domain."""

    user_id: str = "user_id"
    event_time: str = "event_time"
    #: Offline replay/evaluate: the CSV column holding each event's arrival (record) time. With it
    #: the data-independent inclusion rule of ``docs/privacy.md`` §1.1 is followed exactly (rows
    #: must be in arrival order; needs ``stream.start``); without it the legacy watermark rule applies.
    arrival_time: str | None = None
    attributes: list[AttributeSpec] = Field(default_factory=list)
    out_of_domain: Literal["reject", "clip"] = "reject"
    #: ``true``: ids that are integers written with a sign, leading zeros or a zero fraction
    #: (``"007"``, ``"+7"``, ``"7.0"``) are the person of the plain decimal (``7``); people who share
    #: a key are protected as one person (docs/privacy.md §1.2). ``false``: ids are opaque strings
    #: (``"007"`` and ``"7"`` are two people); set it when ids are not numbers with variant spellings.
    numeric_user_ids: bool = True

    @model_validator(mode="after")
    def _names(self) -> SchemaSection:
        names = [a.name for a in self.attributes]
        if len(set(names)) != len(names):
            raise ValueError(f"attribute names must be distinct, got {names}")
        clash = ({self.user_id, self.event_time} | ({self.arrival_time} - {None})) & set(names)
        if clash:
            raise ValueError(f"{sorted(clash)} cannot be both an attribute and the user id / event time column")
        return self


class PIDSection(_Section):
    theta_p: float = 1.0
    theta_i: float = 0.0
    theta_d: float = 0.0
    theta: float = 0.5
    delta: float = 0.05
    integral_window: int = Field(default=10, ge=1)


class SharedPopulation(_Section):
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


class PersonalSection(_Section):
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


class PrivacySection(_Section):
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


#: mechanisms that publish a model (model-release messages, ``docs/api.md``) instead of a count per bin
MODEL_MECHANISMS = ("copula", "marginals")
#: decisions that rewrite histogram counts themselves, so they cannot drive a model release
_HISTOGRAM_ONLY_DECISIONS = ("pegasus", "fast")
MAX_SYNTHETIC = 10_000  # histogram.model_release.MAX_SYNTHETIC (checked equal in tests)


class CopulaSection(_Section):
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


class MarginalsSection(_Section):
    """``release.marginals.*`` (``release.mechanism: marginals``): DP k-way marginals, §11.2.

    ``k``: every attribute set of size 1..k gets its table (equal ε shares per order).
    ``consistency``: make overlapping tables agree (free post-processing; the counts become floats
    without an interval). ``synthetic_size``: records synthesised from the tables into each fresh
    message (0 = none; needs k >= 2).
    """

    k: int = Field(default=2, ge=1)
    consistency: bool = True
    synthetic_size: int = Field(default=0, ge=0, le=MAX_SYNTHETIC)


class PlannerSection(_Section):
    """``release.planner``: options of ``decision: auto`` (:mod:`stream.lab.planner`).

    ``public_history``: a counts file the user **declares public** (read by the planner instead of
    synthetic streams; never the stream's own input). ``runs``: seeded simulation runs per stream;
    ``timesteps``: length of each synthetic stream (more: slower start-up, steadier choice).
    """

    public_history: str | None = None
    runs: int = Field(default=2, ge=1, le=50)
    timesteps: int = Field(default=200, ge=10, le=5000)


class ReleaseSection(_Section):
    """``release.*``: decision method and mechanism (``decision: auto``: the planner chooses)."""

    decision: str = "dsat"
    mechanism: Literal["lpa", "psd", "copula", "marginals"] = "lpa"
    threshold: float = 0.025
    k: Exact | None = None
    svt_split: Literal["lyu", "even"] = "lyu"
    burn_in: int = Field(default=0, ge=0)
    noise_floor: bool = False
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
                             f"release.postprocess to model or model-perbin (now {self.postprocess}), or delay 0")
        return self


class RandomnessSection(_Section):
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


class SchemaRegistrySection(_Section):
    """``input.schema_registry.*``: a Confluent-compatible Schema Registry the writer schemas come from.

    Schemas are fetched by id (``GET /schemas/ids/{id}``) the first time a record names one and
    kept in a bounded cache (``cache_size`` ids, least recently used out). While the registry
    cannot be reached, records whose schema id is cached decode as usual; the others are
    dead-lettered as ``schema_unavailable`` (their bytes intact, to replay) and ``/readyz`` names
    the outage; the registry is asked again at most every ``retry_backoff``.
    """

    url: str = Field(min_length=1, pattern=r"^https?://")
    basic_auth_username: str | None = None
    #: a secret (:data:`SECRET_SETTINGS`): give it as DPSTREAM_INPUT__SCHEMA_REGISTRY__BASIC_AUTH_PASSWORD
    basic_auth_password: SecretStr | None = None
    #: TLS like ``kafka.ssl_*``: the CA bundle that signs the registry's certificate, and a client
    #: certificate and key for mutual TLS
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    timeout: Duration = timedelta(seconds=5)
    cache_size: int = Field(default=1000, ge=1)
    retry_backoff: Duration = timedelta(seconds=10)

    @model_validator(mode="after")
    def _pairs(self) -> SchemaRegistrySection:
        if (self.basic_auth_username is None) != (self.basic_auth_password is None):
            raise ValueError("basic auth needs both input.schema_registry.basic_auth_username and "
                             "basic_auth_password (the password as DPSTREAM_INPUT__SCHEMA_REGISTRY__BASIC_AUTH_PASSWORD)")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("mutual TLS needs both input.schema_registry.ssl_certfile and ssl_keyfile")
        if self.timeout <= timedelta(0):
            raise ValueError("input.schema_registry.timeout must be > 0")
        return self


class InputSection(_Section):
    """``input.*``: how the input topic's record values are encoded.

    ``json`` (default): the JSON events of the consumer guide. ``avro``, ``protobuf``,
    ``jsonschema``: one record per Kafka message in the Schema Registry wire format (byte 0, a
    4-byte big-endian schema id, for Protobuf the message indexes, then the body), the writer
    schema from ``schema_registry`` or from local ``schemas`` files (air-gapped). Fields are
    addressed by path from the record's root: ``schema.user_id``, ``schema.event_time`` and each
    attribute's name (or its entry in ``fields``), dots for nested records (``patient.id``).
    """

    format: Literal["json", "avro", "protobuf", "jsonschema"] = "json"
    schema_registry: SchemaRegistrySection | None = None
    #: schema id → file: ``.avsc`` (Avro), ``.desc``/``.binpb`` (a Protobuf FileDescriptorSet, as
    #: ``protoc --include_imports --descriptor_set_out`` writes), ``.proto`` (needs ``protoc`` on the
    #: PATH at start-up), ``.json`` (JSON Schema). Used instead of a registry, or before asking it.
    schemas: dict[int, str] = Field(default_factory=dict)
    #: attribute name → path of its field in the record (default: the attribute's name)
    fields: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _source(self) -> InputSection:
        if self.format == "json":
            if self.schema_registry is not None or self.schemas or self.fields:
                raise ValueError("input.schema_registry, input.schemas and input.fields apply to input.format "
                                 "avro, protobuf or jsonschema; input.format is json (the default): set the format "
                                 "or remove them")
            return self
        if self.schema_registry is None and not self.schemas:
            raise ValueError(f"input.format {self.format} needs the writer schemas: set input.schema_registry.url, "
                             "or input.schemas (schema id → file) for an air-gapped deployment")
        for sid in self.schemas:
            if not 0 <= sid < 2**32:
                raise ValueError(f"input.schemas: {sid} is not a schema id (0 to 2^32-1)")
        return self


class KafkaSection(_Section):
    """``kafka.*``: where the service reads and writes."""

    bootstrap_servers: str = "127.0.0.1:9092"
    input_topic: str = "dpstream.events"
    #: Which clock decides inclusion (``docs/privacy.md`` §1.1). ``log-append-time``: each event's
    #: own record timestamp, stamped by the broker (the input topic must have
    #: ``message.timestamp.type=LogAppendTime``; checked at start-up, the service refuses when it
    #: cannot confirm it). ``trusted-create-time``: the producer's record timestamp, for producers
    #: the operator controls (a producer that lies about time can then only misfile its own
    #: events). ``watermark``: the legacy rule (largest event time − allowed_lateness, idle
    #: sealing), whose inclusion depends on other people's events: NOT covered by the privacy
    #: proof, refused unless ``allow_data_dependent_inclusion: true``. Default ``log-append-time``.
    record_time: Literal["watermark", "log-append-time", "trusted-create-time"] = "log-append-time"
    #: The explicit opt-out that ``record_time: watermark`` needs (validation refuses it otherwise):
    #: the operator confirms that which events count may then depend on other people's events,
    #: so the per-timestep sensitivity the proofs assume does not hold (``docs/privacy.md`` §1).
    allow_data_dependent_inclusion: bool = False
    output_topic: str = "dpstream.releases"
    dead_letter_topic: str = "dpstream.dead-letters"
    late_topic: str = "dpstream.late"
    state_topic: str = "dpstream.state"
    group_id: str = "dpstream"
    #: Scale-out (``service.role`` worker/releaser): the internal topic where workers hand the
    #: releaser their accepted rows and per-partition completeness (default
    #: ``<input_topic>.<stream id>.shuffle``). Holds raw per-person rows: protect it like the input.
    shuffle_topic: str | None = None
    transactional_id: str | None = None
    client_id: str = "dpstream"
    create_topics: bool = True
    topic_partitions: int = 1
    replication_factor: int = 1
    max_poll_records: int = 2000
    #: bytes one fetch may return per partition (kafka-python's default is 1 MiB: one round trip
    #: per ~13 500-event messages, which left scale-out workers waiting on fetches; see
    #: docs/scale-out.md). Memory: up to this much buffered per assigned partition.
    max_partition_fetch_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_poll_interval_ms: int = 300_000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    request_timeout_ms: int = 30_000
    transaction_timeout_ms: int = 60_000
    max_request_size: int = Field(default=1_048_576, ge=1024)
    startup_tail_records: int = Field(default=1000, ge=1)
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    #: a secret (:data:`SECRET_SETTINGS`): give it as DPSTREAM_KAFKA__SASL_PLAIN_PASSWORD, not in the file
    sasl_plain_password: SecretStr | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @field_validator("topic_partitions", "replication_factor", "max_poll_records", "max_poll_interval_ms",
                     "session_timeout_ms", "heartbeat_interval_ms", "request_timeout_ms",
                     "transaction_timeout_ms")
    @classmethod
    def _positive_count(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"{v} is not a positive count; set a whole number >= 1")
        return v


class ServiceSection(_Section):
    """``service.*``: the process around the pipeline."""

    http_host: str = "127.0.0.1"
    #: TCP port of /metrics, /healthz, /readyz (0: any free port, printed at start-up)
    http_port: int = 8000
    #: the public port (releases, the domain message and the live page only: docs/api.md);
    #: None (the default) serves no public port, 0 any free port (tests)
    public_host: str = "127.0.0.1"
    public_port: int | None = Field(default=None, ge=0, le=65535)
    #: how many of the latest releases the public port keeps in memory (and at most
    #: ``public_history_bytes`` of them); older timesteps are read from the output topic
    public_history: int = Field(default=1000, ge=1)
    public_history_bytes: int = Field(default=64 << 20, ge=1)
    state_dir: str = "./dpstream-state"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    max_message_bytes: int = 1_048_576
    max_events_per_message: int = 10_000
    commit_interval: Duration = timedelta(seconds=1)
    poll_timeout: Duration = timedelta(milliseconds=200)
    shutdown_timeout: Duration = timedelta(seconds=30)
    max_buffered_records: int = Field(default=10_000, ge=1)
    #: at most this many releases per checkpoint (one journal frame, one transaction): a backlog of
    #: complete timesteps (a restart after downtime, a start far in the past) is released in
    #: checkpoints of this size, one after another, so memory and the journal are bounded by it and
    #: the open timesteps, not by the backlog (issue 28 measured ~24 KB of journal and ~230 KB of
    #: memory per release held, at 4,096 bins)
    max_releases_per_checkpoint: int = Field(default=100, ge=1)
    #: the population ledger file shared by the streams of a ``privacy.shared_population``
    #: (default ``<state_dir>/populations.json``; streams of one population must point at one file)
    population_ledger: str | None = None
    #: ``single``: one process reads every input partition and releases (the default).
    #: ``worker``: one of several processes in the consumer group ``kafka.group_id``; reads the
    #: partitions the group assigns it, decides inclusion and hands accepted rows to the releaser
    #: over ``kafka.shuffle_topic``. ``releaser``: exactly one per stream; merges the workers'
    #: rows, seals timesteps once every input partition is complete, releases (docs/scale-out.md).
    role: Literal["single", "worker", "releaser"] = "single"
    #: a worker's stable name (its transactional id); default: the host name
    worker_id: str | None = None
    #: compact the privacy journal once it exceeds this many bytes (default: automatic,
    #: max(1 MiB, 4 × its size right after the last compaction), so disk and restart time stay
    #: bounded by one snapshot; 0 compacts after every checkpoint)
    journal_compact_bytes: int | None = Field(default=None, ge=0)
    #: what to do when the Kafka cluster no longer holds what the stream committed (an input partition
    #: ends before the committed position, the input or output topic or the checkpoint marker is gone:
    #: a cluster restored without its data). ``stop`` (default): not ready, one ERROR line, exit 1; the
    #: next start refuses with the reason. ``wait``: not ready, read and release nothing, resume when the
    #: cluster matches again (an operator restoring it). Never a reset (stream/service/integrity.py).
    on_cluster_loss: Literal["stop", "wait"] = "stop"
    #: When a complete timestep is released (docs/privacy.md §1.3). ``on-schedule`` (the default):
    #: timestep c is released at the public wall-clock time D(c) + ``stream.clock_skew`` +
    #: ``publish_margin`` (D(c): its end + ``stream.allowed_lateness``), never earlier, and once it
    #: is complete; its output record carries that scheduled time as its timestamp, so neither
    #: reveals whether someone sent an event in the seconds after the deadline.
    #: ``when-complete``: as soon as every partition is known past D(c) (earlier on a busy stream,
    #: but the release time then depends on other people's records).
    publish: Literal["on-schedule", "when-complete"] = "on-schedule"
    #: ``publish: on-schedule``: extra wait after D(c) + clock_skew (reading a partition to its end
    #: and the workers' hand-over take a moment); a release later than its schedule is counted in
    #: ``dpstream_timesteps_behind_schedule_total``
    publish_margin: Duration = timedelta(seconds=1)

    @model_validator(mode="after")
    def _margin_needs_schedule(self) -> ServiceSection:
        if self.publish == "when-complete" and "publish_margin" in self.model_fields_set:
            raise ValueError("service.publish_margin is set but service.publish is when-complete, which never "
                             "waits for a schedule: remove service.publish_margin, or set service.publish: "
                             "on-schedule")
        return self

    @model_validator(mode="after")
    def _distinct_ports(self) -> ServiceSection:
        if self.public_port and self.public_port == self.http_port:
            raise ValueError(f"service.public_port {self.public_port} is also service.http_port: the public "
                             "port must not serve /metrics; choose another port")
        return self

    @field_validator("http_port")
    @classmethod
    def _port(cls, v: int) -> int:
        if not 0 <= v <= 65535:
            raise ValueError(f"{v} is not a valid port (1–65535, or 0 for any free port); "
                             "set service.http_port to a free port such as 8000")
        return v

    @field_validator("max_message_bytes", "max_events_per_message")
    @classmethod
    def _positive_count(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"{v} is not a positive count; set a whole number >= 1")
        return v

    @field_validator("commit_interval", "poll_timeout", "shutdown_timeout")
    @classmethod
    def _positive_service_duration(cls, v: timedelta) -> timedelta:
        if v <= timedelta(0):
            raise ValueError("must be > 0")
        return v

    @field_validator("publish_margin")
    @classmethod
    def _publish_margin(cls, v: timedelta) -> timedelta:
        if v <= timedelta(0):
            raise ValueError(f"service.publish_margin is {v.total_seconds():g}s: at exactly deadline + "
                             "stream.clock_skew a quiet partition is not yet known past the deadline, so every "
                             "release would run behind its schedule; set it above 0 (e.g. 1s, more than the "
                             "workers' service.commit_interval with scale-out)")
        return v


class _EnvSource(EnvSettingsSource):
    """``DPSTREAM_<SECTION>__<NAME>`` overrides, the ``schema`` section included.

    ``schema`` is an aliased field (its name would shadow ``BaseModel.schema``), and pydantic-settings
    reads an aliased field from the bare alias (``SCHEMA__USER_ID``, without our prefix) and returns
    it under the field's name, where it collides with the YAML's ``schema`` section. This source reads
    ``DPSTREAM_SCHEMA__*`` like every other section, never the bare names, and returns ``schema``.
    """

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = dict(super()._load_env_vars())  # case-insensitive: the keys are lower case
        prefixed = ENV_PREFIX.lower() + "schema"
        bare = {k for k in env if k == "schema" or k.startswith("schema__")}
        for k in bare:
            del env[k]
        for k, v in list(env.items()):
            if k == prefixed or k.startswith(prefixed + "__"):
                env[k[len(ENV_PREFIX):]] = v
        return env

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        if "schema_" in data:
            data["schema"] = data.pop("schema_")
        return data


class Settings(BaseSettings):
    """The whole configuration. Build with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        arbitrary_types_allowed=True,
        populate_by_name=True,
    )

    stream: StreamSection = Field(default_factory=StreamSection)
    schema_: SchemaSection = Field(default_factory=SchemaSection, alias="schema")
    privacy: PrivacySection
    release: ReleaseSection = Field(default_factory=ReleaseSection)
    randomness: RandomnessSection = Field(default_factory=RandomnessSection)
    kafka: KafkaSection = Field(default_factory=KafkaSection)
    service: ServiceSection = Field(default_factory=ServiceSection)
    input: InputSection = Field(default_factory=InputSection)
    #: the personal budget declaration, consent table included, as read once at start-up
    _personal: Any = PrivateAttr(default=None)

    #: the planner's :class:`stream.lab.planner.Plan` when ``decision: auto`` was resolved (not a setting)
    _plan: Any = PrivateAttr(default=None)

    @property
    def plan(self) -> Any:
        """Why ``decision: auto`` chose this method (None when the configuration named it)."""
        return self._plan

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, _EnvSource(settings_cls)]
        if settings_cls.model_config.get("yaml_file"):
            sources.append(YamlConfigSettingsSource(settings_cls))
        return tuple(sources)

    @model_validator(mode="after")
    def _input_fields(self) -> Settings:
        """``input.fields`` may only name attributes (or the consent attribute of ``privacy.personal``)."""
        known = {a.name for a in self.schema_.attributes}
        personal = self.privacy.personal
        if personal is not None and personal.attribute is not None:
            known.add(personal.attribute)
        unknown = sorted(set(self.input.fields) - known)
        if unknown:
            raise ValueError(f"input.fields names {unknown}, which are not attributes of schema.attributes "
                             f"({sorted(known)}): map attribute names to field paths")
        return self

    @model_validator(mode="after")
    def _inclusion_rules(self) -> Settings:
        """Refuse combinations ``docs/privacy.md`` §1.1's proof does not cover, saying what to set."""
        k, st = self.kafka, self.stream
        if k.record_time == "watermark" and self.service.role != "single":
            raise ValueError(
                f"service.role {self.service.role} (scale-out) needs record-time inclusion: with "
                "kafka.record_time: watermark which events count depends on every partition's events together, "
                "which no worker sees. Use kafka.record_time: log-append-time or trusted-create-time")
        if k.record_time == "watermark":
            if not k.allow_data_dependent_inclusion:
                raise ValueError(
                    "kafka.record_time: watermark decides which events count from other people's events (the "
                    "largest event time seen, idle gaps), so one person can move others' events out of their "
                    "timestep and the per-timestep sensitivity the privacy proof assumes does not hold. Use "
                    "kafka.record_time: log-append-time (or trusted-create-time for producers you control); to "
                    "run the legacy rule anyway, outside the proof, also set "
                    "kafka.allow_data_dependent_inclusion: true")
            return self
        if k.allow_data_dependent_inclusion:
            raise ValueError(
                f"kafka.allow_data_dependent_inclusion is set but kafka.record_time is {k.record_time}, which "
                "never uses it: remove the setting")
        if self.service.role != "single" and self.privacy.contribution_bound != 1:
            raise ValueError(
                f"service.role {self.service.role} (scale-out) needs privacy.contribution_bound: 1: the releaser "
                "keeps one record per person and timestep, which also makes a row a worker hands over twice "
                "(after a crash) harmless; with a larger bound a duplicate could count twice. Run one "
                "service.role: single process instead")
        if st.idle_timeout is not None:
            raise ValueError(
                f"stream.idle_timeout seals timesteps when no event came for a while, i.e. from other people's "
                f"events; kafka.record_time: {k.record_time} decides from each event's own record time and "
                "never uses it. Remove stream.idle_timeout: a quiet partition is complete once it is read to its "
                "end and the wall clock is past the deadline plus stream.clock_skew")
        if st.clock_skew <= timedelta(0):
            raise ValueError(
                "stream.clock_skew must be > 0 with record-time inclusion: it is how far the broker's clock may "
                "lag the wall clock before a quiet partition counts as complete; 0 sends honest events stamped a "
                "moment late to the late topic. Set it to the broker's worst clock lag (e.g. 5s)")
        return self

    # -- derived objects (validated once, here) ---------------------------------
    @property
    def schema(self) -> SchemaSection:  # type: ignore[override]
        return self.schema_

    def domain(self) -> Domain:
        """The public histogram domain."""
        attrs = []
        for a in self.schema_.attributes:
            if a.kind == "categorical":
                attrs.append(CategoricalAttribute(a.name, tuple(str(v) for v in a.values or ())))
            else:
                attrs.append(
                    NumericAttribute(
                        a.name, float(a.min), float(a.max), int(a.bins),  # type: ignore[arg-type]
                        a.out_of_range or self.schema_.out_of_domain,
                    )
                )
        return Domain(tuple(attrs))

    def unit(self) -> UserLevel | WEvent:
        p = self.privacy
        if p.unit == "user-level":
            return UserLevel(p.epsilon, p.horizon, p.cutoff)  # type: ignore[arg-type]
        return WEvent(p.epsilon, p.w, p.cutoff)  # type: ignore[arg-type]

    def model_tables(self) -> int:
        """How many marginal tables a model release publishes (1 for a histogram mechanism).

        The decision of a model release compares the released tables (``docs/privacy.md`` §11.4):
        its sensitivity is ``contribution_bound × tables`` and its threshold T applies to the mean
        normalised L1 per table, i.e. ``T × population × tables`` in counts.
        """
        r, m = self.release, len(self.schema_.attributes)
        if r.mechanism == "copula":
            pairwise = (r.copula or CopulaSection()).decision_space == "pairwise" and m >= 2
            return m + comb(m, 2) if pairwise else m
        if r.mechanism == "marginals":
            k = (r.marginals or MarginalsSection()).k
            return sum(comb(m, i) for i in range(1, min(k, m) + 1))
        return 1

    def method_spec(self, decision: str | None = None) -> MethodSpec:
        """The controller's view (``decision``: another method with the same parameters)."""
        r, p = self.release, self.privacy
        if (decision or r.decision) == "auto":
            raise ConfigurationError(
                "release.decision: auto is replaced by the planner's choice before use: load the configuration "
                "with a dpstream command (check-config, run, evaluate, replay) or stream.commands.load_resolved")
        tables = self.model_tables()
        return MethodSpec(
            decision=decision or r.decision,
            unit=self.unit(),
            threshold=r.threshold,
            population=None if p.population is None else p.population * tables,
            k=r.k,
            svt_split=r.svt_split,
            pid=PIDGains(**r.pid.model_dump()),
            burn_in=r.burn_in,
            sensitivity=p.contribution_bound * tables,
            noise_floor=r.noise_floor,
        )

    def mechanism(self) -> Mechanism:
        """The release mechanism (``release.mechanism``) over this domain."""
        bound, conf = self.privacy.contribution_bound, self.release.confidence
        self._check_model_options()
        if self.release.mechanism in MODEL_MECHANISMS:
            return self._model_mechanism()
        if self.release.mechanism == "lpa":
            if self.release.psd:
                raise ConfigurationError("release.psd options are set but release.mechanism is lpa")
            return LaplaceMechanism(bound, conf)
        from histogram.psd.mechanism import PSDMechanism  # imported lazily: optional heavy module

        return PSDMechanism.from_options(self.domain().shape, sensitivity=bound, confidence=conf, options=self.release.psd)

    def _check_model_options(self) -> None:
        """``release.copula`` / ``release.marginals`` only with their mechanism, and what a model release needs."""
        r = self.release
        for name in MODEL_MECHANISMS:
            if getattr(r, name) is not None and r.mechanism != name:
                raise ConfigurationError(
                    f"release.{name} is set but release.mechanism is {r.mechanism}; remove release.{name} or set "
                    f"release.mechanism: {name}")
        if r.mechanism not in MODEL_MECHANISMS:
            return
        if r.psd:
            raise ConfigurationError(f"release.psd options are set but release.mechanism is {r.mechanism}; remove "
                                     "release.psd")
        if r.decision in _HISTOGRAM_ONLY_DECISIONS:
            raise ConfigurationError(
                f"release.decision: {r.decision} rewrites histogram counts and cannot drive a model release "
                f"(release.mechanism: {r.mechanism}); use one of dsat, dsft, uniform, fixed, bd, ba, sample")
        post = getattr(r, "postprocess", "none")
        if isinstance(post, str) and post != "none":
            raise ConfigurationError(
                f"release.postprocess: {post} applies to histogram counts; a model release (release.mechanism: "
                f"{r.mechanism}) is published as released: set release.postprocess: none")
        m = len(self.schema_.attributes)
        if r.mechanism == "copula" and m < 2:
            raise ConfigurationError(
                f"release.mechanism: copula needs at least 2 attributes in schema.attributes (got {m}); a copula "
                "models their dependence: use lpa or psd for a single attribute")
        if r.mechanism == "marginals":
            opts = r.marginals or MarginalsSection()
            if opts.k > m:
                raise ConfigurationError(
                    f"release.marginals.k: {opts.k} exceeds the {m} attribute(s) in schema.attributes; set k "
                    f"between 1 and {m}")
            if opts.synthetic_size and opts.k < 2 and m > 1:
                raise ConfigurationError(
                    f"release.marginals.synthetic_size: {opts.synthetic_size} needs 2-way tables to synthesise "
                    "from; set release.marginals.k: 2 (or more), or synthetic_size: 0")

    def _model_mechanism(self) -> Mechanism:
        from histogram.copula.mechanism import DPCopula  # imported lazily: scipy-heavy modules
        from histogram.marginals.kway import KWayMarginals
        from histogram.model_release import CopulaModelMechanism, KWayModelMechanism

        r, p = self.release, self.privacy
        levels = self.domain().shape
        if r.mechanism == "copula":
            opts = r.copula or CopulaSection()
            floor = opts.min_records if opts.min_records is not None else p.population
            if floor is None:
                raise ConfigurationError(
                    "release.copula.min_records is not set and privacy.population is not declared; set "
                    "release.copula.min_records to a public floor on the records per timestep (Kendall's "
                    "sensitivity is 4/(n0+1) with it), e.g. the smallest population you expect")
            if floor < 2:
                raise ConfigurationError(
                    f"release.copula.min_records defaults to privacy.population ({floor}), which is below 2; set "
                    "release.copula.min_records: 2 or more")
            copula = DPCopula(levels, opts.correlation, opts.budget_split, floor, opts.partitions,
                              sensitivity=p.contribution_bound)
            return CopulaModelMechanism(copula, opts.synthetic_size, r.confidence, opts.decision_space)
        opts_m = r.marginals or MarginalsSection()
        return KWayModelMechanism(KWayMarginals(levels, opts_m.k, sensitivity=p.contribution_bound),
                                  opts_m.consistency, opts_m.synthetic_size, r.confidence)

    def postprocessor(self) -> PostProcessor:
        """``release.postprocess`` with its public parameters (:mod:`histogram.postprocess`).

        Raises:
            ConfigurationError: a smoother without ``privacy.population``.
        """
        try:
            return PostProcessor.for_stream(self.release.postprocess, population=self.privacy.population,
                                            bins=self.domain().size,
                                            contribution_bound=self.privacy.contribution_bound,
                                            delay=self.release.delay)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None

    def engine(self) -> Engine | PersonalEngine:
        """Decision policy + mechanism, ready to step (one sub-stream per part under ``privacy.personal``)."""
        if self.privacy.personal is not None:
            return self.personal_declaration().engine(self)
        return build_engine(self.method_spec(), self.mechanism(), self.domain().size)

    def personal_declaration(self) -> PersonalDeclaration:
        """The public per-person budget declaration and its PDP plan (reads the consent table once).

        Raises:
            ConfigurationError: ``privacy.personal`` is not set, or is inconsistent (one line each).
        """
        if self.privacy.personal is None:
            raise ConfigurationError("privacy.personal is not set: this stream has one budget for everyone")
        if self._personal is None:  # read once (at start-up, by validate_all): fixed for the settings' lifetime
            self._personal = _personal_declaration(self)
        return self._personal

    def ingest_domain(self) -> Domain:
        """The domain events are decoded with: the counted attributes, plus the consent attribute
        (``privacy.personal.attribute``: its tier names; never counted, only routed by)."""
        domain = self.domain()
        personal = self.privacy.personal
        if personal is None or personal.attribute is None:
            return domain
        return Domain((CategoricalAttribute(personal.attribute, tuple(personal.tiers)), *domain.attributes))

    def noise_source(self) -> Randomness:
        """Secure randomness, or seeded when (and only when) the config allows it."""
        seed = self.randomness.seed
        return Randomness.secure() if seed is None else Randomness.seeded(seed)

    def _privacy_view_exclude(self) -> dict[str, Any]:
        personal = self.privacy.personal
        if personal is None:
            return {"shared_population": True, "personal": True}
        return {"shared_population": True, **({"personal": {"weights": True}} if personal.weights is None else {})}

    def privacy_view(self) -> dict[str, Any]:
        """Everything that changes what a release means or costs (JSON-ready)."""
        s = self.stream
        return {
            "stream": {
                "id": s.id,
                "timestep": format_duration(s.timestep),
                "origin": s.origin.isoformat(),
                "start": None if s.start is None else s.start.isoformat(),
            },
            "domain": self.domain().describe(),
            # the population declaration is deployment accounting, not what a release means or costs;
            # privacy.personal appears only when set, and its weights only when set (so existing streams
            # keep their fingerprint)
            "privacy": self.privacy.model_dump(mode="json", exclude=self._privacy_view_exclude()),
            "release": self._release_view(),
            "schema_version": 1,
            # who is one person: only when numeric canonicalisation is off (so existing streams keep
            # their fingerprint); switching it under the same stream id changes who shares a bound
            **({"person_keys": "opaque"} if not self.schema_.numeric_user_ids else {}),
            # the declaration without the consent table's rows: a hash of private rows is never public
            # (docs/privacy.md §12.2); a changed table is caught on restart by the engine snapshot's
            # keyed digest (controller.personal)
            **({"personal_declaration": self.personal_declaration().budgets.public_fingerprint()}
               if self.privacy.personal is not None else {}),
            # with a table, the head counts per budget level the plan is built on (public: the plan's
            # weights are published); declared privacy.personal.persons are in "privacy" already
            **({"personal_head_counts": [[str(e), n] for e, n in zip(
                self.personal_declaration().levels.epsilons, self.personal_declaration().levels.counts, strict=True)]}
               if self.privacy.personal is not None and self.privacy.personal.table is not None else {}),
        }

    def _release_view(self) -> dict[str, Any]:
        """``release.*`` as JSON; the model mechanisms' sections only when set (unset, they change no
        existing stream's fingerprint)."""
        view = self.release.model_dump(mode="json", exclude={"planner"})  # how, not what, is chosen
        defaults = {"copula": CopulaSection, "marginals": MarginalsSection}
        for name in MODEL_MECHANISMS:
            if view.get(name) is None:
                view.pop(name, None)
                if self.release.mechanism == name:  # the effective options, defaults included
                    view[name] = defaults[name]().model_dump(mode="json")
        copula = view.get("copula")
        if copula is not None and copula.get("decision_space") == "one-way":
            # the one-way decision is what streams from before the setting ran: they keep their
            # fingerprint by setting it; left unset, the pairwise default is a changed stream (refused)
            del copula["decision_space"]
        return view

    def fingerprint(self) -> str:
        """SHA-256 of :meth:`privacy_view` in canonical JSON (hex)."""
        canon = json.dumps(self.privacy_view(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()

    def validate_all(self) -> Settings:
        """Build the domain and the method once so every cross-field error surfaces now.

        ``release.decision: auto`` is checked with a placeholder method here; the commands replace it
        with the planner's choice (:func:`stream.commands.load_resolved`)."""
        if self.release.decision == "auto":
            try:
                self.domain()
                build_engine(self.method_spec("uniform"), self.mechanism(), self.domain().size)
            except (ConfigurationError, HistogramError) as exc:
                raise ConfigError(f"invalid configuration: {exc}") from exc
            return self
        try:
            self.domain()
            self.method_spec()
            self.engine()
            self.postprocessor()
        except (ConfigurationError, HistogramError) as exc:
            raise ConfigError(f"invalid configuration: {exc}") from exc
        return self


_FIXES = {
    "int_parsing": "set a whole number",
    "int_type": "set a whole number",
    "int_from_float": "set a whole number",
    "float_parsing": "set a number",
    "float_type": "set a number",
    "bool_parsing": "set true or false",
    "bool_type": "set true or false",
    "string_type": "set a text value (quote it in YAML)",
    "list_type": "set a list, e.g. [a, b]",
    "dict_type": "set a mapping of settings (key: value lines)",
    "model_type": "set a mapping of settings (key: value lines)",
    "model_attributes_type": "set a mapping of settings (key: value lines)",
    "greater_than_equal": "set a larger value",
    "greater_than": "set a larger value",
    "less_than_equal": "set a smaller value",
    "less_than": "set a smaller value",
    "string_pattern_mismatch": "use letters, digits, '.', '_' and '-' only",
    "literal_error": "use one of the values listed",
}


def _section_fields(loc: tuple[str, ...]) -> list[str]:
    """The setting names valid at ``loc`` (a dotted path's parent), for 'did you mean'."""
    model: Any = Settings
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part) or getattr(model, "model_fields", {}).get(
            part + "_")
        if field is None:
            return []
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if model is None:
            return []
    return [f.alias or name for name, f in model.model_fields.items()]


def _shown(value: object) -> str | None:
    """A short rendering of a scalar input for an error line (None for mappings and lists)."""
    if value is None or isinstance(value, bool | int | float | str):
        text = repr(value) if isinstance(value, str) else str(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return None


def _error_line(err: Any) -> str:
    parts = [str(p) for p in err.get("loc", ())]
    parts = ["schema" if p == "schema_" else p for p in parts]
    where = ".".join(parts) or "(top level)"
    kind = err.get("type", "")
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        import difflib

        valid = _section_fields(tuple(err.get("loc", ()))[:-1])
        close = difflib.get_close_matches(parts[-1], valid, n=1) if parts else []
        parent = ".".join(parts[:-1])
        hint = (f"did you mean {parent + '.' if parent else ''}{close[0]}?" if close
                else f"valid here: {', '.join(valid)}" if valid else "check the spelling")
        return f"{where}: unknown setting; {hint} (see README 'Configuration')"
    if kind == "missing":
        env = ENV_PREFIX + "__".join(p.upper() for p in parts)
        return f"{where}: required but not set; add it to the file (or set {env})"
    shown = None if where in SECRET_SETTINGS or "password" in where else _shown(err.get("input"))
    fix = _FIXES.get(kind)
    msg = msg.replace("Input should be", "must be")
    if kind.startswith(("greater", "less")):
        fix = None
    if shown is not None and shown not in msg:
        msg = f"{msg} (got {shown})"
    return f"{where}: {msg}" + (f"; {fix}" if fix and fix not in msg else "")


def error_lines(exc: ValidationError) -> list[str]:
    """One line per pydantic error: dotted setting path, the value (never a secret's), what to do."""
    return [_error_line(err) for err in exc.errors()]


def _format_errors(exc: ValidationError) -> str:
    """``invalid configuration: <the line>``, or that header with :func:`error_lines` below it."""
    lines = error_lines(exc)
    if len(lines) == 1:
        return f"invalid configuration: {lines[0]}"
    return "invalid configuration:\n" + "\n".join(lines)


def _read_yaml(path: Path) -> None:
    """Parse the file once up front so a syntax error is reported with its line, not a traceback."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 text file ({exc.reason}); save the configuration as UTF-8 YAML") \
            from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration file ({exc.strerror or exc}); "
                          "check the path and its permissions") from None
    class _StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice in one mapping (YAML keeps the last one silently)."""

    def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if not isinstance(key, str | int | float | bool) or key is None:
                continue  # SafeLoader itself reports an unhashable key
            if key in seen:
                raise ConfigError(
                    f"{path}:{key_node.start_mark.line + 1}: the key {key!r} is given twice in one section (the "
                    f"first, on line {seen[key] + 1}, would be ignored); merge the two into one")
            seen[key] = key_node.start_mark.line
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    _StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: YAML syntax error: {problem}; fix the indentation, quotes or brackets "
                          "there") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: the file holds a {type(data).__name__}, not settings; write sections like "
                          "'privacy:' at the top level (see README 'Configuration')")


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Read, merge and validate settings (a plain function: starts nothing, creates no file).

    Args:
        path: YAML file (optional: everything can come from the environment).
        overrides: highest-precedence values, as nested dicts by section.

    Raises:
        ConfigError: with one line per problem, each naming the setting, the value and the fix.
            Files the settings point at (TLS certificates) are not checked here: see
            :func:`missing_files`.
    """
    if path is not None:
        if not Path(path).exists():
            raise ConfigError(f"configuration file {path} does not exist; check the path (--config)")
        if not Path(path).is_file():
            raise ConfigError(f"configuration file {path} is not a file; give the path of a YAML file")
        _read_yaml(Path(path))

    class _FromFile(Settings):
        model_config = SettingsConfigDict(**{**Settings.model_config, "yaml_file": str(path) if path else None})

    try:
        settings = _FromFile(**overrides)
    except ValidationError as exc:
        raise ConfigError(*error_lines(exc)) from None
    except (ConfigurationError, ValueError) as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None
    return settings.validate_all()


#: Settings naming files that must exist on the machine the service runs on.
FILE_SETTINGS: tuple[str, ...] = ("kafka.ssl_cafile", "kafka.ssl_certfile", "kafka.ssl_keyfile")


def missing_files(settings: Settings) -> list[str]:
    """One error line per file setting (:data:`FILE_SETTINGS`) whose file does not exist or is unreadable.

    Separate from :func:`load_settings` because a configuration is often checked on another machine
    than the one it runs on (a container's mounted CA); ``dpstream run`` always checks.
    """
    import os

    lines = []
    named = [(dotted, getattr(getattr(settings, dotted.split(".")[0]), dotted.split(".")[1]))
             for dotted in FILE_SETTINGS]
    reg = settings.input.schema_registry
    if reg is not None:  # input.schema_registry.ssl_*: TLS to the schema registry
        named += [(f"input.schema_registry.{n}", getattr(reg, n)) for n in ("ssl_cafile", "ssl_certfile", "ssl_keyfile")]
    named += [(f"input.schemas.{sid}", path) for sid, path in settings.input.schemas.items()]
    for dotted, value in named:
        if value is None:
            continue
        if not Path(value).is_file():
            lines.append(f"{dotted}: no such file {value!r}; mount or copy it there, or correct the path")
        elif not os.access(value, os.R_OK):
            lines.append(f"{dotted}: {value!r} is not readable by this user; fix its permissions")
    return lines


# ---------------------------------------------------------------------------
# Personalized DP: the public declaration (privacy.personal)


@dataclass(frozen=True, eq=False)
class PersonalDeclaration:
    """Who gets which ε, and the PDP plan over it: all public, fixed for the stream's lifetime.

    Attributes:
        budgets: the declaration (default ε, tiers, consent table, consent attribute).
        levels: the distinct budgets with the declared head counts.
        tier_level: tier name → level index (``default`` included).
        default_level: level of ``privacy.epsilon``.
        plan: the PDP mechanism over ``levels``.
        table_keys, table_levels: the consent table as canonical person keys and their levels.
    """

    budgets: PersonalBudgets
    levels: BudgetLevels
    tier_level: Mapping[str, int]
    default_level: int
    plan: PersonalizedMechanism
    table_keys: tuple[str, ...]
    table_levels: tuple[int, ...]
    attribute: str | None

    def engine(self, settings: Settings, randomness: Randomness | None = None) -> PersonalEngine:
        """One engine per part, each with the stream's method at the part's ε; ledgers per level.

        ``randomness`` keys the Sampling coins (default ``settings.noise_source()``, as the service);
        the lab passes ``Randomness.seeded(seed + r)`` so that run ``r`` is ``replay --seed seed+r``."""
        from dataclasses import replace as _replace

        spec = settings.method_spec()
        mechanism = settings.mechanism()
        bins = settings.domain().size
        engines = []
        for part in self.plan.parts:
            unit = spec.unit
            part_unit = (UserLevel(part.epsilon, unit.horizon, unit.cutoff) if isinstance(unit, UserLevel)
                         else WEvent(part.epsilon, unit.w, unit.cutoff))
            engines.append(build_engine(_replace(spec, unit=part_unit), mechanism, bins))
        return PersonalEngine(self.plan, engines, spec.unit, self.tier_level, self.default_level,
                              settings.noise_source() if randomness is None else randomness, settings.stream.id,
                              declaration=bytes.fromhex(self.budgets.fingerprint()) if self.table_keys else b"")


_TABLES: dict[tuple[str, int, int, tuple[str, ...], bool], tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _read_consent_table(path: str, tiers: tuple[str, ...], numeric: bool = True,
                        ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(canonical person keys, tier names)`` of a consent table CSV (header line, then ``id,tier``)."""
    import csv

    import pyarrow as pa

    from stream.ingest.person_key import canonical_keys

    where = f"privacy.personal.table: {path}"
    try:
        st = Path(path).stat()
        cache_key = (str(Path(path).resolve()), st.st_mtime_ns, st.st_size, tiers, numeric)
        if cache_key in _TABLES:
            return _TABLES[cache_key]
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except FileNotFoundError:
        raise ConfigurationError(f"{where}: no such file; give the path of the consent table CSV") from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"{where}: not UTF-8 text; save the consent table as UTF-8 CSV") from None
    except (OSError, csv.Error) as exc:
        raise ConfigurationError(f"{where}: cannot read it ({exc}); check the path and permissions") from None
    if not rows:
        raise ConfigurationError(f"{where}: the file is empty; it needs a header line, then one 'person id,tier' row "
                                 "per person")
    ids: list[str] = []
    names: list[str] = []
    for line, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 2:
            raise ConfigurationError(f"{where}:{line}: expected 2 columns (person id, tier), got {len(row)}")
        pid, tier = row[0], row[1].strip()
        if not pid.strip():
            raise ConfigurationError(f"{where}:{line}: the person id is empty")
        if tier not in tiers:
            raise ConfigurationError(f"{where}:{line}: tier {tier!r} is not declared in privacy.personal.tiers "
                                     f"({', '.join(tiers)}); declare it or fix the row")
        ids.append(pid)
        names.append(tier)
    keys, invisible = canonical_keys(pa.array(ids, type=pa.string()), numeric=numeric)
    if invisible.any():
        line = int(invisible.argmax())
        raise ConfigurationError(f"{where}: person id {ids[line]!r} has invisible characters, which the stream "
                                 "refuses in events too; remove them")
    seen: dict[str, str] = {}
    for key, tier in zip(keys.to_pylist(), names, strict=True):
        if seen.setdefault(key, tier) != tier:
            raise ConfigurationError(f"{where}: person {key!r} is listed with tiers {seen[key]!r} and {tier!r}; a "
                                     "person has one budget: keep one row")
    out = (tuple(seen), tuple(seen.values()))
    _TABLES[cache_key] = out
    return out


def _personal_declaration(settings: Settings) -> PersonalDeclaration:
    from histogram.errors import MechanismError
    from histogram.personalized import (
        CountUtility,
        minimum,
        partitioned,
        privacy_aware,
        sampling,
        threshold,
        utility_based,
        utility_based_partition,
    )

    p = settings.privacy
    cfg = p.personal
    assert cfg is not None
    if settings.service.role != "single":
        raise ConfigurationError(
            f"privacy.personal with service.role {settings.service.role}: scale-out workers do not route events "
            "by budget tier yet; run one service.role: single process")
    if settings.release.mechanism in MODEL_MECHANISMS:
        raise ConfigurationError(
            f"privacy.personal with release.mechanism: {settings.release.mechanism}: per-tier model releases are "
            "not built; use release.mechanism: lpa or psd with privacy.personal, or remove privacy.personal")
    smoothers = [step for step in parse_chain(settings.release.postprocess) if step in STATEFUL]
    if smoothers:
        raise ConfigurationError(
            f"privacy.personal with release.postprocess {smoothers[0]}: the smoothers follow one release series, "
            "not a personalized estimate; use none, nonnegative or integer with privacy.personal")
    counted = set(settings.domain().names)
    if cfg.attribute is not None:
        s = settings.schema_
        if cfg.attribute in counted:
            raise ConfigurationError(
                f"privacy.personal.attribute {cfg.attribute!r} is also a counted attribute (schema.attributes): a "
                "budget that depends on a sensitive value is itself sensitive (docs/privacy.md §12.2); key the "
                "tiers by a public consent field that is not counted")
        if cfg.attribute in {s.user_id, s.event_time, s.arrival_time}:
            raise ConfigurationError(
                f"privacy.personal.attribute {cfg.attribute!r} is the user id / event time column; name the "
                "consent field of the events")
    tier_names = tuple(cfg.tiers)
    keys: tuple[str, ...] = ()
    key_tiers: tuple[str, ...] = ()
    if cfg.table is not None:
        keys, key_tiers = _read_consent_table(cfg.table, tier_names, settings.schema_.numeric_user_ids)
    budgets = PersonalBudgets(p.epsilon, dict(cfg.tiers), dict(zip(keys, key_tiers, strict=True)),
                              cfg.attribute if cfg.attribute is not None else "@table")
    budgets.check_public(counted)
    # head counts: declared persons, else (table) the table's rows per tier
    per_tier: dict[str, int] = {}
    for name in (*tier_names, DEFAULT_TIER):
        if name in cfg.persons:
            per_tier[name] = int(cfg.persons[name])
        else:
            per_tier[name] = sum(1 for t in key_tiers if t == name)
    tally: dict[Fraction, int] = {}
    eps_of = {**dict(cfg.tiers), DEFAULT_TIER: p.epsilon}
    for name, n in per_tier.items():
        tally[eps_of[name]] = tally.get(eps_of[name], 0) + n
    ordered = sorted(tally)
    levels = BudgetLevels(tuple(ordered), tuple(tally[e] for e in ordered))
    tier_level = {name: ordered.index(eps_of[name]) for name in per_tier}
    try:
        if cfg.mechanism == "minimum":
            plan = minimum(levels)
        elif cfg.mechanism == "threshold":
            plan = threshold(levels, cfg.threshold)
        elif cfg.mechanism == "sampling":
            plan = sampling(levels, cfg.threshold)
        elif cfg.mechanism == "privacy_aware":
            plan = privacy_aware(levels, cfg.min_size, CountUtility() if cfg.weights == "utility" else None)
        else:
            plan = utility_based(levels, CountUtility(), cfg.min_size)
            if cfg.weights == "sum":
                plan = partitioned(plan.name, utility_based_partition(levels, CountUtility(), cfg.min_size))
    except MechanismError as exc:
        raise ConfigurationError(f"privacy.personal.mechanism {cfg.mechanism}: {exc} (declare head counts in "
                                 "privacy.personal.persons, or use a consent table)") from None
    if (p.unit == "w-event" and p.w > 1 and any(part.sample_below is not None and levels.minimum < part.sample_below
                                                for part in plan.parts)):
        raise ConfigurationError(sampling_window_refusal(p.w))
    return PersonalDeclaration(budgets, levels, tier_level, tier_level[DEFAULT_TIER], plan, keys,
                               tuple(tier_level[t] for t in key_tiers), cfg.attribute)
