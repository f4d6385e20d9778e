"""``stream.*``: the stream's identity, timestep grid, and where it starts and ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from stream.config.values import Duration, Instant, Section


class StreamSection(Section):
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
