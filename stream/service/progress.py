"""Per-partition completeness evidence, and the record-time assumptions checked on every record.

``docs/privacy.md`` §1.1: a timestep is declared complete when every input partition is known
to be past its deadline. A partition is past record time ``T`` when either

* a record with record time ``> T`` was read from it (record time is monotone per partition:
  checked here, :class:`RecordTimeGuard`), or
* it was read to its end as observed at public wall-clock time ``observed_at`` and
  ``observed_at − stream.clock_skew > T``: every record not read yet was appended after
  ``observed_at``, so its record time is at least ``observed_at − clock_skew``.

"Read to its end" needs an end offset *with the time it was observed*: a fresh ListOffsets
answer (:class:`EndProbe`, asked ``read_uncommitted``, so records of an open transaction count
as not read yet: a ``read_committed`` end, the last stable offset, is not the end), and the
consumer's position at or past it. A consumer's cached high watermark says nothing about *now*
(it dates from that consumer's last fetch, which may be minutes old if it was not polled): it
is never taken as proof of the end on its own (issue 27 item 1). It is used as a second
condition only: the embedded test broker answers ListOffsets with the last batch's base
offset + 1, below the true end, and a position past the last fetch's high watermark shows
that batch was read whole. On Apache Kafka the fresh end is at least every earlier high
watermark, so the second condition changes nothing there.

Nothing here reads an event's fields: no quantity a person controls (event time, attributes,
key) decides when a partition counts as read or when a timestep is complete.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stream.service.kafka_errors import KafkaIOError, wrap_error

__all__ = ["EndObservation", "EndProbe", "RecordTimeGuard", "RecordTimeViolation", "partition_frontier",
           "read_to_end", "LOG_APPEND_TIME"]

#: ``ConsumerRecord.timestamp_type`` of a record stamped by the broker (Kafka's TimestampType.LOG_APPEND_TIME).
LOG_APPEND_TIME = 1


class RecordTimeViolation(KafkaIOError):
    """A record breaks an assumption the inclusion proof rests on; the service stops (fatal), and
    nothing of the batch that holds it is released."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False, action="check record time")


@dataclass(frozen=True)
class EndObservation:
    """A partition's log end offset and the public wall-clock time it was asked for.

    ``offset``: the end offset a ``read_uncommitted`` ListOffsets request returned (records of
    open transactions lie below it). ``observed_at``: float seconds (epoch), taken just *before*
    the request was sent, so every record appended after it has record time at least
    ``observed_at − clock_skew``.
    """

    offset: int
    observed_at: float


def read_to_end(position: int | None, end: EndObservation | None, fetched_high: int | None) -> bool:
    """True when a consumer at ``position`` has read every record appended before
    ``end.observed_at``: ``position ≥ end.offset`` and, when a fetch reported a high watermark,
    ``position ≥`` it (see the module docstring for why both)."""
    if position is None or end is None or position < end.offset:
        return False
    return fetched_high is None or position >= fetched_high


def partition_frontier(seen: float | None, position: int | None, end: EndObservation | None,
                       fetched_high: int | None, skew: float) -> float:
    """Record time one partition is known to be past (float seconds; −inf when nothing is known).

    ``seen``: the largest record time read from it. Once :func:`read_to_end`, at least
    ``end.observed_at − skew`` — never the current wall clock, which says nothing about records
    appended since the end was observed.
    """
    out = -math.inf if seen is None else float(seen)
    if read_to_end(position, end, fetched_high):
        assert end is not None
        out = max(out, end.observed_at - skew)
    return out


class EndProbe:
    """Fresh log end offsets, each with the wall-clock time it was asked (:class:`EndObservation`).

    ``consumer``: a ``read_uncommitted`` consumer outside any group, used for ListOffsets only.
    Asked at most every ``min_interval_s`` (the answers in between are the last ones: older
    evidence only delays completeness, it never advances it wrongly).
    """

    def __init__(self, consumer: Any, *, clock: Callable[[], float] = time.time, min_interval_s: float = 0.1) -> None:
        self.consumer = consumer
        self.clock = clock
        self.min_interval = float(min_interval_s)
        self.last: dict[Any, EndObservation] = {}
        self._asked_at = -math.inf

    def observe(self, tps: Sequence[Any]) -> dict[Any, EndObservation]:
        """The latest observation of each of ``tps`` (asking the broker when due).

        Raises:
            KafkaIOError: the request failed (retriable: the caller keeps its last evidence).
        """
        now = self.clock()
        if tps and now - self._asked_at >= self.min_interval:
            try:
                ends = self.consumer.end_offsets(list(tps))
            except Exception as exc:  # noqa: BLE001
                raise wrap_error(exc, "read end offsets") from exc
            self._asked_at = now
            for tp, off in ends.items():
                if off is not None:
                    self.last[tp] = EndObservation(int(off), now)
        return {tp: self.last[tp] for tp in tps if tp in self.last}

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:  # noqa: BLE001, S110 - best effort on the way out
            pass


class RecordTimeGuard:
    """Checks every record read from the input against what the inclusion proof assumes.

    * ``log-append-time``: each record's ``timestamp_type`` must be LogAppendTime; a record the
      producer stamped (the topic switched to CreateTime after start-up) stops the service.
    * Record mode (``log-append-time``, ``trusted-create-time``): per partition, a record time
      more than ``skew`` seconds below the largest one read before stops the service (a broker
      clock that jumped ahead, or a leader change to a broker ahead in time, could have completed
      a timestep early; whether to go on is an operator decision, never a silent drop).

    ``mode`` ``"watermark"`` or ``"off"`` checks nothing (the legacy rule; internal topics).
    """

    def __init__(self, mode: str, skew: float, topic: str = "") -> None:
        self.mode = mode
        self.skew = float(skew)
        self.topic = topic
        self.largest: dict[int, float] = {}

    @property
    def active(self) -> bool:
        return self.mode in ("log-append-time", "trusted-create-time")

    def seed(self, times: Mapping[int, float]) -> None:
        """Resume with the largest record time per partition of a checkpoint."""
        for p, t in times.items():
            if math.isfinite(t) and t > self.largest.get(int(p), -math.inf):
                self.largest[int(p)] = float(t)

    def check(self, partition: int, records: Iterable[Any]) -> None:
        """Raises :class:`RecordTimeViolation` on the first record that breaks an assumption
        (before anything of the batch is used); otherwise records the partition's progress."""
        if not self.active:
            return
        largest = self.largest.get(partition, -math.inf)
        for r in records:
            if self.mode == "log-append-time" and getattr(r, "timestamp_type", None) != LOG_APPEND_TIME:
                raise RecordTimeViolation(
                    f"record {self.topic}[{partition}]@{r.offset} has timestamp type "
                    f"{_type_name(getattr(r, 'timestamp_type', None))}, but kafka.record_time is log-append-time: "
                    "its producer chose the record time that decides which events count. Stopped; nothing "
                    "of this record was released. Fix: set the topic config message.timestamp.type="
                    "LogAppendTime again (or, only if every producer's clock is trusted, set "
                    "kafka.record_time: trusted-create-time), then restart: the record is read again")
            t = r.timestamp / 1000.0
            if t < largest - self.skew:
                raise RecordTimeViolation(
                    f"record time went backwards on {self.topic}[{partition}]: the record at offset {r.offset} "
                    f"is stamped {t:.3f}, {largest - t:.3f} s before a record read earlier on the same partition, "
                    f"more than stream.clock_skew ({self.skew:g} s). The inclusion proof assumes record time is "
                    "monotone per partition (a broker clock jumped, or a leader moved to a broker whose clock "
                    "differs): timesteps may have been declared complete early. Stopped; nothing of this record "
                    "was released. Fix the broker clocks; then either widen stream.clock_skew to cover the jump "
                    "or accept the loss of these records as late by starting a new stream.id")
            if t > largest:
                largest = t
        if largest > -math.inf:
            self.largest[partition] = largest


def _type_name(kind: Any) -> str:
    return {0: "CreateTime", 1: "LogAppendTime", -1: "none"}.get(kind, repr(kind))
