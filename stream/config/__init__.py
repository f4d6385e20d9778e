"""dpstream settings: one YAML file, environment overrides, strict validation.

Precedence: explicit overrides > environment (``DPSTREAM_…``, nested with
``__``, e.g. ``DPSTREAM_PRIVACY__EPSILON=0.5``) > the YAML file > defaults.
Unknown keys are errors (a typo must not silently fall back to a default).
Every error names the setting and says what to do; a configuration that
fails here can release nothing.

Where a setting is validated (one job per module; read top to bottom):

====================  ==========================================================================
``values``            the value types: durations (``300s``), instants, exact ε, the section base
``sections/``         one pydantic model per section, with the checks that need only that section
                      (``stream``, ``schema``, ``privacy``, ``release`` + ``randomness``, ``service``
                      for ``input``/``kafka``/``service``)
``settings``          :class:`Settings`: the sections together, the environment source, and the
                      checks across sections that need no built object (``input.fields``; the
                      inclusion rules of ``docs/privacy.md`` §1.1)
``building``          what settings build (domain, unit, method, mechanism, post-processor) and
                      the one engine builder; the checks that need them (model options, the
                      method's parameters via ``controller.method``); ``validate`` runs them all
``personal``          ``privacy.personal``'s declaration and consent table, with its checks
                      against the rest of the configuration
``alerts``            ``queries:`` and ``alerts:`` (issue 33): declared queries, detectors, the
                      private alerts' share, and the engine that wraps the policy with them
``fingerprint``       which settings change what a release means or costs, hashed
``view``              what ``building``/``personal``/``fingerprint`` read of :class:`Settings` (a protocol)
``loading``           ``load_settings``: the YAML read strictly, error lines, files that must exist
``errors``            :class:`ConfigError` and the secret settings (never shown)
====================  ==========================================================================

The privacy-relevant part of the settings (stream id and timestep grid,
domain, privacy unit and budget, method, mechanism and their parameters) is
hashed into :meth:`Settings.fingerprint`; the service stores it with its
ledger and refuses to continue a stream whose fingerprint changed.
"""

from stream.config.errors import ENV_PREFIX, SECRET_SETTINGS, ConfigError
from stream.config.loading import (
    FILE_SETTINGS,
    error_lines,
    format_errors,
    load_settings,
    missing_files,
)
from stream.config.personal import PersonalDeclaration
from stream.config.sections import (
    DEFAULT_TIER,
    MAX_SYNTHETIC,
    MODEL_MECHANISMS,
    PERSONAL_MECHANISMS,
    AttributeSpec,
    CopulaSection,
    InputSection,
    KafkaSection,
    MarginalsSection,
    PersonalSection,
    PIDSection,
    PlannerSection,
    PrivacySection,
    RandomnessSection,
    ReleaseSection,
    SchemaRegistrySection,
    SchemaSection,
    ServiceSection,
    SharedPopulation,
    StreamSection,
)
from stream.config.settings import Settings
from stream.config.values import Duration, Exact, Instant, format_duration, parse_duration

__all__ = [
    "ConfigError", "Settings", "load_settings", "missing_files", "parse_duration", "format_duration",
    "SECRET_SETTINGS", "ENV_PREFIX", "FILE_SETTINGS", "error_lines", "format_errors", "PersonalDeclaration",
    "DEFAULT_TIER", "MAX_SYNTHETIC", "MODEL_MECHANISMS", "PERSONAL_MECHANISMS", "AttributeSpec",
    "CopulaSection", "InputSection", "KafkaSection", "MarginalsSection", "PIDSection", "PersonalSection",
    "PlannerSection", "PrivacySection", "RandomnessSection", "ReleaseSection", "SchemaRegistrySection",
    "SchemaSection", "ServiceSection", "SharedPopulation", "StreamSection", "Duration", "Exact", "Instant",
]
