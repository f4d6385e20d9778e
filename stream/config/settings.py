"""The whole configuration: :class:`Settings`, its sections, its environment source, and the
checks that span sections (``input.fields`` against the schema, the inclusion rules of
``docs/privacy.md`` §1.1).

What the settings *build* (domain, method, mechanism, engine) is :mod:`stream.config.building`;
their fingerprint is :mod:`stream.config.fingerprint`; the personal declaration is
:mod:`stream.config.personal`. The methods below are the public way in to each.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import Field, PrivateAttr, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from controller.errors import ConfigurationError
from controller.method import MethodSpec
from controller.personal import PersonalEngine
from controller.step import Engine
from controller.units import UserLevel, WEvent
from histogram.domain import Domain
from histogram.mechanism import Mechanism
from histogram.noise import Randomness
from histogram.postprocess import PostProcessor
from stream.config import building
from stream.config.alerts import AlertsSection, QuerySettings, declared_queries
from stream.config.errors import ENV_PREFIX, ConfigError
from stream.config.fingerprint import fingerprint_of, privacy_view
from stream.config.personal import PersonalDeclaration, declare
from stream.config.sections import (
    InputSection,
    KafkaSection,
    PrivacySection,
    RandomnessSection,
    ReleaseSection,
    SchemaSection,
    ServiceSection,
    StreamSection,
)

__all__ = ["Settings"]


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
    #: declared queries and their detectors, and where alerts go (:mod:`stream.config.alerts`; issue 33)
    queries: list[QuerySettings] = Field(default_factory=list, max_length=50)
    alerts: AlertsSection = Field(default_factory=AlertsSection)
    #: the personal budget declaration, consent table included, as read once at start-up
    _personal: Any = PrivateAttr(default=None)

    #: the planner's :class:`stream.planning.planner.Plan` when ``decision: auto`` was resolved (not a setting)
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

    # -- what the settings build (stream.config.building), their fingerprint, the declaration -----
    @property
    def schema(self) -> SchemaSection:  # type: ignore[override]
        return self.schema_

    def domain(self) -> Domain:
        """The public histogram domain."""
        return building.domain(self)

    def unit(self) -> UserLevel | WEvent:
        """The privacy unit and budget (``privacy.unit``)."""
        return building.unit(self)

    def model_tables(self) -> int:
        """How many marginal tables a model release publishes (1 for a histogram mechanism)."""
        return building.model_tables(self)

    def method_spec(self, decision: str | None = None) -> MethodSpec:
        """The controller's view (``decision``: another method with the same parameters)."""
        return building.method_spec(self, decision)

    def mechanism(self) -> Mechanism:
        """The release mechanism (``release.mechanism``) over this domain."""
        return building.build_mechanism(self)

    def postprocessor(self) -> PostProcessor:
        """``release.postprocess`` with its public parameters (:mod:`histogram.postprocess`)."""
        return building.postprocessor(self)

    def engine(self, randomness: Randomness | None = None) -> Engine | PersonalEngine:
        """Decision policy + mechanism, ready to step (one sub-stream per part under ``privacy.personal``;
        ``randomness`` keys its Sampling coins, default :meth:`noise_source`): :func:`building.build_engine`."""
        return building.build_engine(self, randomness=randomness)

    def personal_declaration(self) -> PersonalDeclaration:
        """The public per-person budget declaration and its PDP plan (reads the consent table once).

        Raises:
            ConfigurationError: ``privacy.personal`` is not set, or is inconsistent (one line each).
        """
        if self.privacy.personal is None:
            from controller.errors import ConfigurationError

            raise ConfigurationError("privacy.personal is not set: this stream has one budget for everyone")
        if self._personal is None:  # read once (at start-up, by validate_all): fixed for the settings' lifetime
            self._personal = declare(self)
        return self._personal

    def ingest_domain(self) -> Domain:
        """The domain events are decoded with: the counted attributes, plus the consent attribute."""
        return building.ingest_domain(self)

    def noise_source(self) -> Randomness:
        """Secure randomness, or seeded when (and only when) the config allows it."""
        return building.noise_source(self)

    def privacy_view(self) -> dict[str, Any]:
        """Everything that changes what a release means or costs (JSON-ready)."""
        return privacy_view(self)

    def declared_queries(self) -> tuple[Any, ...]:
        """``queries:`` resolved against the domain (:class:`histogram.declared.DeclaredQuery`)."""
        return declared_queries(self.queries, self.domain())

    def fingerprint(self) -> str:
        """SHA-256 of :meth:`privacy_view` in canonical JSON (hex)."""
        return fingerprint_of(self)

    def validate_all(self) -> Settings:
        """Build the domain and the method once so every cross-field error surfaces now
        (:func:`building.validate`); returns ``self``."""
        building.validate(self)
        return self

    def with_changes(self, changes: Mapping[str, Any]) -> Settings:
        """A re-validated copy with nested ``changes`` merged in (e.g. ``{"release": {"k": 0.1}}``).

        Mappings merge key by key, any other value replaces the old one; the secrets (which JSON
        dumps mask) are carried over. Raises :class:`ConfigError` when the result is invalid."""
        data = _deep_merge(self.model_dump(by_alias=True, mode="json"), changes)
        data["kafka"]["sasl_plain_password"] = self.kafka.sasl_plain_password
        if self.input.schema_registry is not None:
            data["input"]["schema_registry"]["basic_auth_password"] = self.input.schema_registry.basic_auth_password
        try:
            return Settings(**data).validate_all()
        except ConfigError:
            raise
        except (ConfigurationError, ValueError) as exc:
            raise ConfigError(f"invalid configuration: {exc}") from exc


def _deep_merge(base: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
