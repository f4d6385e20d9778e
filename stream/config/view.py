"""What the modules that build from the settings read of them (:mod:`.building`,
:mod:`.fingerprint`, :mod:`.personal`): the sections, the domain and the personal declaration.

:class:`stream.config.settings.Settings` is the one implementation. Those modules name this
protocol instead of ``Settings`` because ``Settings`` calls them: naming it would tie the four
modules into an import circle (``tests/test_architecture.py`` refuses one).
"""

from __future__ import annotations

from typing import Any, Protocol

from histogram.domain import Domain
from stream.config.sections import (
    PrivacySection,
    RandomnessSection,
    ReleaseSection,
    SchemaSection,
    ServiceSection,
    StreamSection,
)

__all__ = ["SettingsView"]


class SettingsView(Protocol):
    """The settings as the building modules see them (read-only)."""

    @property
    def stream(self) -> StreamSection: ...

    @property
    def schema_(self) -> SchemaSection: ...

    @property
    def privacy(self) -> PrivacySection: ...

    @property
    def release(self) -> ReleaseSection: ...

    @property
    def randomness(self) -> RandomnessSection: ...

    @property
    def service(self) -> ServiceSection: ...

    @property
    def queries(self) -> list[Any]: ...

    @property
    def alerts(self) -> Any: ...

    def declared_queries(self) -> tuple[Any, ...]:
        """``queries:`` resolved against the domain (:mod:`stream.config.alerts`)."""
        ...

    def domain(self) -> Domain:
        """The public histogram domain."""
        ...

    def personal_declaration(self) -> Any:
        """The :class:`stream.config.personal.PersonalDeclaration` of ``privacy.personal``, read once."""
        ...
