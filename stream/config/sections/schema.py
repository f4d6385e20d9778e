"""``schema.*``: which input field is which, and the public domain's attributes."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    model_validator,
)

from stream.config.values import Section


class AttributeSpec(Section):
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


class SchemaSection(Section):
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
