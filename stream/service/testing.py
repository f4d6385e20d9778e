"""In-memory parts for running the release path without Kafka (tests, examples).

Shipped inside the package (as bytewax does) so the service's tests and the
users' own tests can drive :class:`~stream.pipeline.ReleasePipeline` with
injected parts:

* :class:`ManualClock` — wall time that moves only when told to (idle
  sealing, far-future checks);
* :class:`MemorySource` — payloads served in polls, each tagged with a
  ``(partition, offset)`` source like a Kafka record;
* :class:`MemorySink` — records produced, by topic;
* :func:`payloads` — JSON payloads from event dicts (single or arrays);
* :func:`run_in_memory` — source → decoder → pipeline → sink, the loop the
  service runs, minus Kafka;
* :class:`FakeKafka` and :func:`fake_kafka_parts` — what
  :class:`stream.service.loop.Service` needs from Kafka, in process: a reader
  serving generated events one timestep per poll, and a transactional writer
  keeping the committed marker, offsets and output tail. Patch the parts
  into ``stream.service.loop`` to run the real ``Service.start()``/``run()``
  (journal included) without a broker (the soak benchmark and the disk-full
  tests do).
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stream.ingest.events import Rejection
from stream.ingest.formats import input_decoder
from stream.pipeline import ReleasePipeline, SealedRelease

__all__ = [
    "FakeKafka",
    "fake_kafka_parts",
    "fake_launcher_parts",
    "ManualClock",
    "MemorySource",
    "MemorySink",
    "SinkRecord",
    "payloads",
    "run_in_memory",
    "RunResult",
    "small_settings",
    "SMALL_ATTRIBUTES",
]

#: A two-attribute domain (20 bins) for tests.
SMALL_ATTRIBUTES: list[dict[str, Any]] = [
    {"name": "age", "kind": "numeric", "min": 0, "max": 100, "bins": 10, "out_of_range": "reject"},
    {"name": "sex", "kind": "categorical", "values": ["M", "F"]},
]


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def small_settings(seed: int | None = 1, **sections: Any) -> Any:
    """Settings for tests: stream ``t``, 60 s timesteps, the :data:`SMALL_ATTRIBUTES` domain,
    user-level ε=1 over 50 timesteps, uniform decision, LPA, seeded noise.

    ``sections`` are merged over those defaults (``stream={"allowed_lateness": "2m"}``).
    """
    from stream.config import load_settings

    # run_in_memory runs the legacy watermark rule (its source carries no record times): these
    # settings opt into it explicitly unless the caller chooses a record-time mode
    legacy = (sections.get("kafka") or {}).get("record_time", "watermark") == "watermark"
    base: dict[str, Any] = {
        "stream": {"id": "t", "timestep": "60s"},
        **({"kafka": {"record_time": "watermark", "allow_data_dependent_inclusion": True}} if legacy else {}),
        "schema": {"attributes": SMALL_ATTRIBUTES},
        "privacy": {"unit": "user-level", "epsilon": 1, "horizon": 50, "cutoff": 10, "population": 100},
        "release": {"decision": "uniform"},
    }
    if seed is not None:
        base["randomness"] = {"seed": seed, "allow_seeded_noise": True}
    return load_settings(None, **_merge(base, sections))


class ManualClock:
    """A wall clock for tests: ``clock()`` / ``clock.now()`` in epoch seconds."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    __call__ = now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += float(seconds)
        return self._now

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError("a clock does not go backwards")
        self._now = float(t)


class MemorySource:
    """Payloads served in order, at most ``max_records`` per :meth:`poll`.

    Each record comes as ``(payload, (partition, offset))``. ``record_times`` (float seconds, one
    per message, non-decreasing: the broker's LogAppendTime) is each record's own timestamp, for
    settings with record-time inclusion (``kafka.record_time`` other than ``watermark``).
    """

    def __init__(self, messages: Iterable[bytes], *, max_records: int = 500, partition: int = 0,
                 record_times: Sequence[float] | None = None) -> None:
        self._messages = [bytes(m) for m in messages]
        self.max_records = int(max_records)
        self.partition = partition
        self.position = 0
        self.record_times = None if record_times is None else [float(r) for r in record_times]
        if self.record_times is not None:
            if len(self.record_times) != len(self._messages):
                raise ValueError(f"{len(self.record_times)} record times for {len(self._messages)} messages")
            if any(b < a for a, b in zip(self.record_times, self.record_times[1:], strict=False)):
                raise ValueError("record times must be non-decreasing (one partition, stamped by the broker)")

    def record_time(self, offset: int) -> float:
        """The record time of the message at ``offset``."""
        if self.record_times is None:
            raise ValueError("this MemorySource has no record times")
        return self.record_times[offset]

    def poll(self, max_records: int | None = None) -> list[tuple[bytes, tuple[int, int]]]:
        k = self.max_records if max_records is None else int(max_records)
        start = self.position
        chunk = self._messages[start:start + k]
        self.position += len(chunk)
        return [(m, (self.partition, start + i)) for i, m in enumerate(chunk)]

    def seek(self, offset: int) -> None:
        self.position = int(offset)

    @property
    def exhausted(self) -> bool:
        return self.position >= len(self._messages)


@dataclass(frozen=True)
class SinkRecord:
    topic: str
    key: bytes | None
    value: bytes


@dataclass
class MemorySink:
    """Collects produced records."""

    records: list[SinkRecord] = field(default_factory=list)

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.records.append(SinkRecord(topic, key, bytes(value)))

    def values(self, topic: str) -> list[bytes]:
        return [r.value for r in self.records if r.topic == topic]


def payloads(events: Sequence[Mapping[str, Any]], *, per_message: int = 1) -> list[bytes]:
    """JSON payloads for ``events``: one object per message, or arrays of ``per_message`` events."""
    if per_message == 1:
        return [json.dumps(e).encode() for e in events]
    return [json.dumps(list(events[i:i + per_message])).encode() for i in range(0, len(events), per_message)]


@dataclass
class RunResult:
    releases: list[SealedRelease]
    rejections: list[Rejection]
    sink: MemorySink
    pipeline: ReleasePipeline


def run_in_memory(
    settings: Any,
    source: MemorySource,
    *,
    clock: ManualClock | None = None,
    pipeline: ReleasePipeline | None = None,
    sink: MemorySink | None = None,
    tick: float = 0.0,
    final: bool = True,
    on_release: Callable[[SealedRelease], None] | None = None,
) -> RunResult:
    """Poll ``source`` until exhausted, decode, offer, seal, send; then flush if ``final``.

    Releases go to ``kafka.output_topic`` (key = stream id), dead letters to
    ``kafka.dead_letter_topic`` and late events to ``kafka.late_topic`` (the
    original payload bytes). ``tick`` seconds are added to ``clock`` per poll.

    Which events count follows ``kafka.record_time`` as the service does: record-time modes
    (the default) need ``MemorySource(record_times=…)`` — each event's own record time decides
    (``docs/privacy.md`` §1.1) and the partition's last record time completes timesteps; the
    legacy ``watermark`` (explicitly opted into) uses ``clock`` for the idle and far-future rules.

    Raises:
        ValueError: record-time settings and a source without record times.
    """
    record_mode = settings.kafka.record_time != "watermark"
    if record_mode and source.record_times is None:
        raise ValueError(
            f"kafka.record_time is {settings.kafka.record_time}: give the source each message's record time "
            "(MemorySource(record_times=...)), or opt into the legacy rule (kafka.record_time: watermark, "
            "kafka.allow_data_dependent_inclusion: true)")
    pipe = pipeline or ReleasePipeline(settings)
    out = sink or MemorySink()
    decoder = input_decoder(settings)
    k = settings.kafka
    releases: list[SealedRelease] = []
    rejected: list[Rejection] = []
    row = 0

    def publish(sealed: list[SealedRelease]) -> None:
        for s in sealed:
            out.send(k.output_topic, s.key, s.payload)
            releases.append(s)
            if on_release is not None:
                on_release(s)

    while not source.exhausted:
        records = source.poll()
        now = None if clock is None else clock.now()
        decoded = decoder.decode([r[0] for r in records], [r[1] for r in records], first_row=row)
        row += len(decoded.batch) + sum(1 for r in decoded.rejections if r.row is not None)
        if record_mode:
            rec = np.array([source.record_time(r[1][1]) for r in records], dtype=np.float64)
            msg = decoded.batch.messages
            per_event = rec[msg] if msg is not None else np.full(len(decoded.batch), rec[0] if rec.size else 0.0)
            offered = pipe.offer(decoded.batch, record_time=per_event)
        else:
            offered = pipe.offer(decoded.batch, now=now)
        for rej in list(decoded.rejections) + list(offered):
            rejected.append(rej)
            topic = k.late_topic if rej.late else k.dead_letter_topic
            out.send(topic, None, rej.payload or b"")
        if record_mode:
            publish(pipe.seal(record_frontier=source.record_time(records[-1][1][1]) if records else None))
        else:
            publish(pipe.seal(now=now))
        if clock is not None and tick:
            clock.advance(tick)
    if final:
        publish(pipe.seal(final=True, record_frontier=math.inf) if record_mode else pipe.seal(final=True))
    return RunResult(releases, rejected, out, pipe)


# -- Kafka, faked in process (for Service itself) --------------------------------------


@dataclass(frozen=True)
class FakeRecord:
    """An input record as :class:`stream.service.kafka_io.InputReader` yields it."""

    offset: int
    value: bytes
    key: bytes | None
    timestamp: int  # ms (the broker's LogAppendTime)


class FakeKafka:
    """What a broker remembers between service runs: committed marker and offsets, the output tail.

    Input: ``events_per_step`` JSON events per timestep of ``step_s`` seconds from ``start``
    (epoch seconds), generated on demand (offset ``o`` is event ``o % events_per_step`` of
    timestep ``o // events_per_step``), with attributes ``x`` (and ``y`` when ``two_d``) cycling
    through ``0..modulus-1``; one new timestep of input "arrives" each time the reader has
    caught up, so a service checkpoints once per timestep, as on a live stream.
    """

    def __init__(self, *, start: float, events_per_step: int = 4, step_s: float = 1.0, two_d: bool = False,
                 modulus: int = 100, tail: int = 1000, output_topic: str = "out") -> None:
        self.start, self.events, self.step_s = float(start), int(events_per_step), float(step_s)
        self.two_d, self.modulus = two_d, int(modulus)
        self.output_topic = output_topic
        self.marker: int | None = None
        self.committed: dict[int, int | None] = {0: None}
        self.tail: deque[tuple[int, bytes | None, bytes]] = deque(maxlen=tail)
        self.available = 0  # input offsets that exist so far
        self.transactions = 0

    def _time(self, offset: int) -> float:
        step, j = divmod(offset, self.events)
        return self.start + (step + (j + 0.5) / (self.events + 1)) * self.step_s

    def payload(self, offset: int) -> bytes:
        m = self.modulus
        attrs = (f'{{"x": {(offset * 7) % m}, "y": {(offset * 13) % m}}}' if self.two_d
                 else f'{{"x": {(offset * 7) % m}}}')
        return f'{{"user_id": "u{offset % 997}", "event_time": {self._time(offset):.6f}, "attributes": {attrs}}}'.encode()

    def record(self, offset: int) -> FakeRecord:
        return FakeRecord(offset, self.payload(offset), None, int(round(self._time(offset) * 1000)))

    def released(self) -> dict[int, list[bytes]]:
        """Release payloads in the output tail, by timestep (every copy)."""
        out: dict[int, list[bytes]] = {}
        for _, _, value in self.tail:
            doc = json.loads(value)
            if doc.get("message_type") in ("release", "model-release"):
                out.setdefault(int(doc["timestep"]["index"]), []).append(value)
        return out


class _FakeReader:
    partitions = [0]
    group_metadata = None
    control = None

    def __init__(self, kafka: FakeKafka) -> None:
        self.kafka = kafka
        self.pos = 0

    def seek(self, positions: Mapping[int, int]) -> None:
        self.pos = positions.get(0, 0)

    def observe(self, partition: int, max_event_time: float) -> None:
        pass

    def poll(self, timeout_s: float, max_records: int, positions: Mapping[int, int]) -> list[tuple[int, list[Any]]]:
        k = self.kafka
        pos = positions.get(0, self.pos)
        if pos >= k.available:
            k.available = self.arrive(pos)
        end = min(k.available, pos + max_records)
        self.pos = end
        recs = [k.record(o) for o in range(pos, end)]
        return [(0, recs)] if recs else []

    def arrive(self, pos: int) -> int:
        """The input offsets that exist once the reader has caught up at ``pos``: the next timestep's."""
        return pos + self.kafka.events

    def position(self, partition: int) -> int | None:
        return self.pos

    def record_frontier(self, positions: Mapping[int, int], record_times: Mapping[int, float], now: float,
                        skew: float) -> float:
        return record_times.get(0, float("-inf"))

    def caught_up(self, positions: Mapping[int, int]) -> bool:
        return positions.get(0, 0) >= self.kafka.available

    def committed(self) -> dict[int, int | None]:
        return dict(self.kafka.committed)

    def end_offsets(self) -> dict[int, int]:
        return {0: self.kafka.available}

    def log_ends(self) -> dict[int, int]:
        return {0: self.kafka.available}

    def close(self) -> None:
        pass


class _FakeWriter:
    def __init__(self, kafka: FakeKafka) -> None:
        self.kafka = kafka
        self.producer: Any = None
        self.in_transaction = False

    def warm_up(self, seq: int) -> None:
        pass

    def commit(self, records: Sequence[Any], offsets: Mapping[Any, int], seq: int) -> None:
        k = self.kafka
        for r in records:
            if r.topic == k.output_topic:
                k.tail.append((0, r.key, r.value))
        k.marker = seq
        k.committed = {tp.partition: o for tp, o in offsets.items()}
        k.transactions += 1


class _FakeProducer:
    def partitions_for(self, topic: str) -> set[int]:
        return {0}

    def close(self, timeout: float | None = None) -> None:
        pass


class _FakeProbe:
    """The broker probe (:class:`stream.service.probe.BrokerProbe`) of a broker that always answers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def start(self) -> _FakeProbe:
        return self

    def stop(self, timeout: float | None = None) -> None:
        pass


def fake_kafka_parts(kafka: FakeKafka) -> dict[str, Any]:
    """Replacements for the Kafka functions and classes ``stream.service.loop`` imports, by name.

    Apply with ``monkeypatch.setattr(stream.service.loop, name, value)`` (tests) or ``setattr``.
    Settings must use ``kafka.record_time: log-append-time`` and ``kafka.output_topic`` equal to
    ``kafka.output_topic`` here.
    """
    return {
        "ensure_topics": lambda *a, **kw: [],
        "topic_timestamp_type": lambda k, topic: "LogAppendTime" if topic == k.input_topic else "CreateTime",
        "InputReader": lambda *a, **kw: _FakeReader(kafka),
        "committed_marker": lambda *a, **kw: kafka.marker,
        "read_tail": lambda k, topic, *, key, last, **kw: list(kafka.tail)[-last:],
        "make_producer": lambda *a, **kw: _FakeProducer(),
        "TransactionalWriter": lambda producer, group_metadata, state_topic, failpoint: _FakeWriter(kafka),
    }


def fake_launcher_parts() -> dict[str, Any]:
    """Replacements for what ``stream.service.launcher`` imports that would dial Kafka: apply with
    ``monkeypatch.setattr(stream.service.launcher, name, value)`` next to :func:`fake_kafka_parts`."""
    return {"BrokerProbe": _FakeProbe}  # run_service's probe would dial kafka.bootstrap_servers
