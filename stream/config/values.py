"""The value types settings are written in: durations, instants, exact ε, and the section base."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Annotated

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
)

from histogram.exact import to_fraction

__all__ = ["Duration", "Exact", "Instant", "Section", "format_duration", "parse_duration", "parse_time"]


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


def parse_time(value: object) -> datetime:
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
Instant = Annotated[datetime, BeforeValidator(parse_time), PlainSerializer(lambda d: d.isoformat())]
Exact = Annotated[Fraction, BeforeValidator(lambda v: to_fraction(v, name="value")), PlainSerializer(str)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
