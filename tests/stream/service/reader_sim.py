"""A simulated multi-partition input for :class:`stream.service.kafka_io.InputReader` (issue 27 item 1).

A broker on a simulated wall clock: each partition is a log of records stamped with the
clock when appended (LogAppendTime, broker clock = wall clock, so ``clock_skew`` holds), with
optional transactions (records appended inside an open transaction stay below the last stable
offset until it commits). Consumers behave as kafka-python's do where it matters:

* a consumer fetches only when polled, and not always all of it: a fetch may hold back the
  last few records (a busy partition's consumer is always a few records behind);
* ``highwater()`` is the log end as of that consumer's *last fetch* (stale when not polled);
* ``read_committed``: nothing at or past the last stable offset is returned.

The end-offset probe answers ListOffsets ``read_uncommitted`` (the log end) as Apache Kafka does.
:func:`run` drives the real ``InputReader`` and ``Windower`` the way ``stream.service.loop``
does in a record-time mode (poll, window each event by its own record time, report event
times to :meth:`InputReader.observe`, seal what :meth:`InputReader.record_frontier` completes)
and returns the sealed histograms and the on-time events that arrived after their seal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kafka import TopicPartition

from stream.ingest.events import EventBatch, validate_batch
from stream.ingest.windowing import AFTER_SEAL, Grid, Windower
from stream.service.kafka_io import InputReader
from stream.service.testing import small_settings

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
STEP = 60.0
SKEW = 5.0
TOPIC = "in"


def settings_for(lateness: str = "0s") -> Any:
    return small_settings(stream={"timestep": "60s", "allowed_lateness": lateness, "max_future": "10m",
                                  "start": T0, "clock_skew": f"{SKEW:g}s"},
                          kafka={"record_time": "log-append-time"})


@dataclass(frozen=True)
class Rec:
    """The fields of a kafka-python ConsumerRecord the service reads."""

    offset: int
    timestamp: int  # ms
    value: dict[str, Any]
    timestamp_type: int = 1
    key: bytes | None = None


@dataclass
class Log:
    records: list[Rec] = field(default_factory=list)
    open_from: int | None = None  # first offset of the open transaction

    @property
    def end(self) -> int:
        return len(self.records)

    @property
    def stable(self) -> int:
        return self.end if self.open_from is None else self.open_from


@dataclass
class Broker:
    logs: dict[int, Log]
    now: float = T0

    def clock(self) -> float:
        return self.now


class FakeConsumer:
    """One partition's read_committed consumer (see the module docstring)."""

    def __init__(self, broker: Broker, partition: int) -> None:
        self.broker = broker
        self.p = partition
        self.pos = 0
        self.fetched = 0  # records [pos, fetched) are buffered
        self.high: int | None = None
        self.hold = 0  # records the next fetch holds back
        self.fetch_ok = True

    def poll(self, timeout_ms: int = 0, max_records: int = 500) -> dict[Any, list[Rec]]:
        log = self.broker.logs[self.p]
        if self.fetch_ok:
            self.fetched = max(self.fetched, min(log.stable, log.end - self.hold))
            self.high = log.end
        n = min(self.fetched - self.pos, max_records)
        if n <= 0:
            return {}
        out = log.records[self.pos:self.pos + n]
        self.pos += n
        return {TopicPartition(TOPIC, self.p): out}

    def highwater(self, tp: Any) -> int | None:
        return self.high

    def position(self, tp: Any) -> int:
        return self.pos

    def seek(self, tp: Any, off: int) -> None:
        self.pos = self.fetched = off

    def seek_to_beginning(self, tp: Any) -> None:
        self.seek(tp, 0)

    def close(self, **_: Any) -> None:
        pass


class FakeProbe:
    """ListOffsets: ``read_uncommitted`` answers the log end; ``lso=True`` (a broken variant) the
    last stable offset, what a read_committed end_offsets returns."""

    def __init__(self, broker: Broker, lso: bool = False) -> None:
        self.broker = broker
        self.lso = lso

    def end_offsets(self, tps: Sequence[Any]) -> dict[Any, int]:
        logs = self.broker.logs
        return {tp: (logs[tp.partition].stable if self.lso else logs[tp.partition].end) for tp in tps}

    def close(self, **_: Any) -> None:
        pass


def make_reader(settings: Any, broker: Broker, cls: type = InputReader, lso: bool = False) -> InputReader:
    consumers = {p: FakeConsumer(broker, p) for p in broker.logs}
    slack = settings.stream.allowed_lateness.total_seconds() / 2
    try:
        # max_wait 0: a partition that delivered nothing at its last poll holds no other back (the
        # reader's starvation timer runs on the real clock, which barely moves in a simulation)
        reader = cls(settings.kafka, TOPIC, slack_s=slack, max_wait_s=0.0, skew_s=SKEW, record_time="log-append-time",
                     clients=(None, consumers, FakeProbe(broker, lso)), clock=broker.clock)
    except TypeError:  # the InputReader of main before issue 27 (no injectable clients): wire it by hand
        reader = cls.__new__(cls)
        reader.k, reader.topic, reader.slack, reader.max_wait = settings.kafka, TOPIC, slack, 0.0
        reader.control, reader.consumers = None, consumers
        reader.tps = [TopicPartition(TOPIC, p) for p in sorted(consumers)]
        reader.times, reader._empty_since = {}, {}
    return reader


@dataclass(frozen=True)
class Tick:
    """One step of the simulated clock: ``dt`` seconds pass, then these records are appended
    (partition, person, event time − record time, age), transactions toggle, consumers are told
    whether their next fetch may happen and how many records it holds back."""

    dt: float
    arrivals: tuple[tuple[int, str, float, int], ...] = ()
    begin: tuple[int, ...] = ()
    commit: tuple[int, ...] = ()
    fetch: tuple[bool, ...] = ()
    hold: tuple[int, ...] = ()


@dataclass
class Outcome:
    sealed: dict[int, np.ndarray]
    after_seal: int  # events that passed the rule for a timestep already released
    seal_times: dict[int, float]


def run(settings: Any, partitions: int, ticks: Sequence[Tick], *, cls: type = InputReader, lso: bool = False,
        drain: float = 900.0, max_records: int = 50) -> Outcome:
    """Drive the reader and the windower over ``ticks``, then ``drain`` seconds of quiet."""
    grid = Grid.from_settings(settings)
    domain = settings.domain()
    k = settings.privacy.contribution_bound
    broker = Broker({p: Log() for p in range(partitions)})
    reader = make_reader(settings, broker, cls, lso)
    window = Windower(grid)
    positions: dict[int, int] = {}
    record_times: dict[int, float] = {}
    out = Outcome({}, 0, {})
    quiet = [Tick(1.0)] * int(drain)
    for tick in [*ticks, *quiet]:
        broker.now += tick.dt
        for p in tick.begin:
            log = broker.logs[p % partitions]
            if log.open_from is None:
                log.open_from = log.end
        for p, person, ahead, age in tick.arrivals:
            log = broker.logs[p % partitions]
            ev = {"user_id": person, "event_time": broker.now + ahead, "attributes": {"age": age, "sex": "M"}}
            log.records.append(Rec(log.end, int(round(broker.now * 1000)), ev))
        for p in tick.commit:
            broker.logs[p % partitions].open_from = None
        for p, c in reader.consumers.items():
            c.fetch_ok = tick.fetch[p] if p < len(tick.fetch) else True
            c.hold = tick.hold[p] if p < len(tick.hold) else 0
        for p, recs in reader.poll(0.0, max_records, positions):
            positions[p] = recs[-1].offset + 1
            record_times[p] = max(record_times.get(p, -math.inf), recs[-1].timestamp / 1000.0)
            valid, rej = validate_batch(EventBatch.from_records([r.value for r in recs]), domain)
            assert len(rej) == 0
            rec_t = np.array([recs[i].timestamp / 1000.0 for i in valid.position.tolist()])
            status = window.offer_recorded(valid, rec_t)
            out.after_seal += int(np.count_nonzero(status == AFTER_SEAL))
            accepted = status == 0
            if accepted.any():  # as the loop's _observe_accepted: each partition's largest event time
                reader.observe(p, float(valid.time[accepted].max()))
        frontier = reader.record_frontier(positions, record_times, broker.now, SKEW)
        for c in window.complete(frontier):
            out.sealed[c] = window.take(c).counts(domain.size, k)
            out.seal_times[c] = broker.now
            window.advance()
    return out


def l1_of_others(a: Outcome, b: Outcome) -> list[int]:
    """L1 distance per timestep sealed in both runs."""
    return [int(np.abs(a.sealed[c] - b.sealed[c]).sum()) for c in sorted(set(a.sealed) & set(b.sealed))]


def issue_scenario(newcomer: bool, *, seconds: int = 600) -> list[Tick]:
    """The issue's pair: partition 0 busy (three events a second, its consumer always two records
    behind the end), partition 1 quiet (one event every 10 s); D′ adds one event on partition 1
    whose event time is 500 s ahead of its record time."""
    ticks = []
    for s in range(seconds):
        arrivals = [(0, f"a{s}-{i}", -0.5, 20 + i) for i in range(3)]
        if s % 10 == 0:
            arrivals.append((1, f"b{s}", -0.5, 40))
        if newcomer and s == 30:
            arrivals.append((1, "newcomer", 500.0, 60))
        ticks.append(Tick(1.0, tuple(arrivals), hold=(2, 0)))
    return ticks
