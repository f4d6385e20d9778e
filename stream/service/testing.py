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
  service runs, minus Kafka.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stream.ingest.events import EventDecoder, Rejection
from stream.pipeline import ReleasePipeline, SealedRelease

__all__ = [
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
    decoder = EventDecoder.from_settings(settings)
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
