"""Scale-out releaser (``service.role: releaser``): exactly one per stream.

It is the single-process service (:class:`stream.service.loop.Service`: journal, engine, noise
drawn once, transactions, recovery) with its input replaced: instead of events it reads the
workers' shuffle records (:mod:`stream.service.shuffle`) from ``kafka.shuffle_topic``,

* adds each record's rows to the open timesteps (inclusion was decided by the worker from each
  event's own fields; a row for a timestep already sealed — it can only come from a worker whose
  broker clock lagged by more than ``stream.clock_skew``, the single process's
  ``arrived_after_seal`` — is counted in ``dpstream_shuffle_rows_after_seal_total`` and goes to
  the late topic with that reason (:func:`after_seal_records`), in the next checkpoint, never
  into a release),
* keeps, per *input* partition, the largest completeness frontier any worker reported, and
* seals a timestep once every input partition's frontier is past its deadline.

Contribution bounding happens here, over the rows of all partitions together, exactly as the
single process bounds them: the released histograms are the single process's (tested). The
releaser's transactional id is the stream's, so a second releaser fences the first; its consumer
group is ``<kafka.group_id>.releaser``. Its journal holds the open timesteps' rows and the
frontiers; its committed offsets are on the shuffle topic.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any

import numpy as np

from stream.config import Settings
from stream.ingest.windowing import TimestepData
from stream.service.journal import JournaledOutput
from stream.service.kafka_io import KafkaIOError, bounded_value, dead_letter_limit, make_consumer
from stream.service.logs import log
from stream.service.loop import Service, ServiceError
from stream.service.shuffle import decode, shuffle_topic

__all__ = ["Releaser", "after_seal_records", "releaser_settings"]

AFTER_SEAL = "arrived_after_seal"
AFTER_SEAL_DETAIL = ("a worker handed this row over after its timestep had been released (the input partition's "
                     "broker clock behind the wall clock by more than stream.clock_skew)")

_log = logging.getLogger("dpstream.releaser")


def releaser_settings(settings: Settings) -> Settings:
    """The settings the releaser's :class:`Service` runs with: its input is the shuffle topic.

    Only Kafka plumbing changes (not part of the configuration fingerprint): the releases,
    their ids and bytes are those of a single process with the same configuration.
    """
    k = settings.kafka
    kafka = k.model_copy(update={"input_topic": shuffle_topic(settings), "record_time": "trusted-create-time",
                                 "group_id": f"{k.group_id}.releaser", "topic_partitions": 1})
    return settings.model_copy(update={"kafka": kafka})


class Releaser(Service):
    """See the module docstring. ``settings`` is the stream's configuration (role releaser)."""

    #: the shuffle topic's record times are the workers' clocks and decide nothing: the workers
    #: check the input's records (stream.service.worker)
    input_checks = False

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        self.input_topic = settings.kafka.input_topic
        super().__init__(releaser_settings(settings), **kwargs)
        self.input_partitions: list[int] = []

    def start(self) -> None:
        from stream.service.shuffle import check_shuffle_partitions

        shuffle = self.settings.kafka.input_topic
        probe = make_consumer(self.settings.kafka, group=False)
        try:  # before anything is read: an existing shuffle topic with several partitions is refused
            check_shuffle_partitions(shuffle, probe.partitions_for_topic(shuffle))
        finally:
            probe.close()
        super().start()
        assert self.reader is not None
        check_shuffle_partitions(shuffle, self.reader.partitions)
        self.input_partitions = _partitions(self.settings, self.input_topic)
        log(_log, logging.INFO, "releaser started", input_partitions=len(self.input_partitions))

    def _ingest(self, batch: list[tuple[int, list[Any]]], *, live: bool = True) -> None:
        assert self.pipeline is not None
        window = self.pipeline.window
        for p, records in batch:
            floor = self.positions.get(p)
            if floor is not None:
                records = [r for r in records if r.offset >= floor]  # re-delivered: already processed
            for r in records:
                try:
                    rec = decode(r.value)
                except ValueError:
                    self.metrics.kafka_errors.labels("false").inc()
                    log(_log, logging.ERROR, "not a shuffle record; skipped", partition=p, offset=r.offset)
                    continue
                for data in rec.cells:
                    if window.add_rows(data):
                        self.open_events[data.cell] = self.open_events.get(data.cell, 0) + len(data)
                    else:  # its timestep is out: to the late topic, like arrived_after_seal in one process
                        self.metrics.shuffle_after_seal.inc(len(data))
                        self.metrics.count_rejections({AFTER_SEAL: len(data)})
                        self.pending.outputs.extend(after_seal_records(
                            data, stream=self.stream_id, input_topic=self.input_topic, partition=rec.partition,
                            limit=dead_letter_limit(self.settings.kafka.max_request_size)))
                if rec.frontier is not None and rec.frontier > self.record_times.get(rec.partition, float("-inf")):
                    self.record_times[rec.partition] = rec.frontier
            if records:
                self.positions[p] = records[-1].offset + 1
                self.metrics.messages_consumed.inc(len(records))
        if self.reader is not None:  # the consumer's position moves past transaction markers
            for p in self.reader.partitions:
                pos = self.reader.position(p)
                if pos is not None and pos > self.positions.get(p, 0):
                    self.positions[p] = pos

    def _seal(self) -> None:
        """Seal every timestep whose deadline every input partition is known to be past (and, under
        ``service.publish: on-schedule``, whose scheduled time has come)."""
        assert self.pipeline is not None
        self._step_mark = time.monotonic()
        if not self.input_partitions:
            return
        frontier = min(self.record_times.get(p, float("-inf")) for p in self.input_partitions)
        now = self.clock()  # service.publish: on-schedule: never before the public scheduled time
        before = None if self.schedule is None else self.schedule.first_not_due(now)
        self._seal_bounded(record_frontier=frontier, before=before)  # bounded checkpoints
        self._watch_schedule(now)


def after_seal_records(data: TimestepData, *, stream: str, input_topic: str, partition: int,
                       limit: int) -> list[JournaledOutput]:
    """Late-topic records for shuffle rows that arrived after their timestep was sealed.

    The releaser has the row, not the original record: the value is the row as JSON
    (``user_id``, ``event_time`` in epoch seconds, ``cell`` and ``bin``, the flat histogram index
    the worker computed), the headers the single process's late headers (reason
    ``arrived_after_seal``, a detail, the stream, the input topic and partition). The key is the
    input partition, the cell and a digest of the row, so a row handed over twice (an interrupted
    worker transaction) is one late record with the same bytes: consumers drop duplicates by key.
    Raw per-person data, like every late record (``docs/privacy.md`` §9).
    """
    users = data.user_id.to_pylist()
    flat = np.asarray(data.flat).tolist()
    times = np.asarray(data.time, dtype=np.float64).tolist()
    headers = (("dpstream.reason", AFTER_SEAL.encode()), ("dpstream.detail", AFTER_SEAL_DETAIL.encode()),
               ("dpstream.stream", stream.encode()), ("dpstream.source.topic", input_topic.encode()),
               ("dpstream.source.partition", str(partition).encode()))
    out = []
    for user, t, b in zip(users, times, flat, strict=True):
        value = json.dumps({"user_id": user, "event_time": t, "cell": int(data.cell), "bin": int(b)},
                           sort_keys=True, separators=(",", ":")).encode()
        digest = hashlib.sha256(value).hexdigest()[:16]
        value, cut = bounded_value(value, limit)
        out.append(JournaledOutput("late", f"{partition}:{data.cell}:{digest}".encode(), value, (*headers, *cut)))
    return out


def _partitions(settings: Settings, topic: str, timeout_s: float = 30.0) -> list[int]:
    """The input topic's partitions (the releaser waits for every one of them to be complete)."""
    consumer = make_consumer(settings.kafka, group=False)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            parts = consumer.partitions_for_topic(topic)
            if parts:
                return sorted(parts)
            if time.monotonic() > deadline:
                raise ServiceError(f"the input topic {topic!r} has no partitions (does it exist?)")
            time.sleep(0.2)
    except KafkaIOError as err:
        raise ServiceError(str(err)) from err
    finally:
        consumer.close()
