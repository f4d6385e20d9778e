"""The configuration's sections, one pydantic model each, with the checks that need only the
section itself (a field's range, fields that go together). One module per area:

* :mod:`.stream`: ``stream.*`` (identity, timestep grid, start, end, clock skew)
* :mod:`.schema`: ``schema.*`` (input columns, the domain's attributes)
* :mod:`.privacy`: ``privacy.*`` (unit, ε, population, shared population, ``privacy.personal``)
* :mod:`.release`: ``release.*`` (decision, mechanism, copula, marginals, planner, PID) and ``randomness.*``
* :mod:`.service`: ``input.*``, ``kafka.*``, ``service.*``
"""

from stream.config.sections.privacy import (
    DEFAULT_TIER,
    PERSONAL_MECHANISMS,
    PersonalSection,
    PrivacySection,
    SharedPopulation,
)
from stream.config.sections.release import (
    HISTOGRAM_ONLY_DECISIONS,
    MAX_SYNTHETIC,
    MODEL_MECHANISMS,
    CopulaSection,
    MarginalsSection,
    PIDSection,
    PlannerSection,
    RandomnessSection,
    ReleaseSection,
)
from stream.config.sections.schema import AttributeSpec, SchemaSection
from stream.config.sections.service import (
    InputSection,
    KafkaSection,
    SchemaRegistrySection,
    ServiceSection,
)
from stream.config.sections.stream import StreamSection

__all__ = [
    "DEFAULT_TIER", "HISTOGRAM_ONLY_DECISIONS", "MAX_SYNTHETIC", "MODEL_MECHANISMS", "PERSONAL_MECHANISMS",
    "AttributeSpec", "CopulaSection", "InputSection", "KafkaSection", "MarginalsSection", "PIDSection",
    "PersonalSection", "PlannerSection", "PrivacySection", "RandomnessSection", "ReleaseSection",
    "SchemaRegistrySection", "SchemaSection", "ServiceSection", "SharedPopulation", "StreamSection",
]
