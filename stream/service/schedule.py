"""The public release schedule (``service.publish: on-schedule``, docs/privacy.md §1.3).

Timestep ``c`` (grid cell) has the public inclusion deadline ``D(c) = end(c) +
stream.allowed_lateness`` (:meth:`stream.ingest.windowing.Grid.deadline`). Under
``on-schedule`` it is released at the wall-clock time

    S(c) = D(c) + stream.clock_skew + service.publish_margin

and not earlier, and only once it is complete (the completeness frontier is past ``D(c)``,
correctness first). ``S`` is a function of public configuration alone, so on a stream that keeps
up the time of a release, and the timestamp of its output record (exactly ``S(c)``, in whole
milliseconds), say nothing about the data. A timestep not complete by ``S(c)`` (broker lag, a
backlog) is released when it is: that delay is counted for operators
(``dpstream_timesteps_behind_schedule_total``, ``dpstream_release_behind_schedule_seconds``).

Everything is computed in integer microseconds (the resolution of the configured durations), so
``S(c)`` is exact and the same in every process and after every restart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["PublishSchedule", "record_timestamp_ms"]

_US = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class PublishSchedule:
    """``S(c) = origin + (c + 1)·timestep + offset`` in integer microseconds since the epoch.

    Attributes:
        origin_us: ``stream.origin``.
        step_us: ``stream.timestep`` (> 0).
        offset_us: ``stream.allowed_lateness + stream.clock_skew + service.publish_margin`` (>= 0;
            the configuration requires a margin > 0).
    """

    origin_us: int
    step_us: int
    offset_us: int

    def __post_init__(self) -> None:
        if self.step_us <= 0 or self.offset_us < 0:
            raise ValueError(f"a release schedule needs a timestep > 0 and an offset >= 0 "
                             f"(got {self.step_us} µs and {self.offset_us} µs)")

    @classmethod
    def from_settings(cls, settings: Any) -> PublishSchedule | None:
        """The schedule of ``settings``, or None with ``service.publish: when-complete``."""
        if settings.service.publish != "on-schedule":
            return None
        st = settings.stream
        offset = st.allowed_lateness + st.clock_skew + settings.service.publish_margin
        return cls((st.origin.astimezone(UTC) - _EPOCH) // _US, st.timestep // _US, offset // _US)

    def release_us(self, cell: int) -> int:
        """``S(cell)``, integer microseconds since the epoch."""
        return self.origin_us + (int(cell) + 1) * self.step_us + self.offset_us

    def release_time(self, cell: int) -> float:
        """``S(cell)``, float seconds since the epoch (for waits and metrics)."""
        return self.release_us(cell) / 1e6

    def release_ms(self, cell: int) -> int:
        """``S(cell)`` rounded up to whole milliseconds: the output record's timestamp."""
        return -(-self.release_us(cell) // 1000)

    def first_not_due(self, now: float) -> int:
        """The smallest cell whose scheduled time is still ahead of ``now`` (seconds): every
        smaller cell may be released (``S(c) <= now``), this one and later ones not yet."""
        now_us = math.floor(float(now) * 1e6)
        return (now_us - self.origin_us - self.offset_us) // self.step_us

    def is_due(self, cell: int, now: float) -> bool:
        return cell < self.first_not_due(now)


def record_timestamp_ms(schedule: PublishSchedule | None, cell: int | None, now: float,
                        step_s: float) -> int | None:
    """The Kafka timestamp of a release record of ``cell`` committed at ``now`` (seconds).

    On schedule: ``S(cell)`` exactly (a release committed within max(one timestep, one minute)
    after its scheduled time: the usual case, a little processing after ``S``). A release
    committed later than that
    (a backlog being caught up, a long broker outage) keeps the producer's clock (None): its
    commit time is then what readers observe anyway, and an old ``S`` as the timestamp could let
    the output topic's time-based retention delete it at once. None too for
    ``when-complete`` or a release journaled without its cell (an older build).
    """
    if schedule is None or cell is None:
        return None
    ms = schedule.release_ms(cell)
    if float(now) * 1000 - ms > max(step_s, 60.0) * 1000:
        return None
    return ms
