"""Scale-out worker (``service.role: worker``): one of several processes in one consumer group.

Each worker reads the input partitions the group assigns it (``subscribe``: more workers,
fewer partitions each; a dead worker's partitions move to the others), and does the heavy part
of the service for them: decode, validate, decide inclusion from each event's own fields and
record time (:meth:`stream.ingest.windowing.Grid.inclusion`: the same function as the single
process, so the same events count in the same timesteps), dead-letter and late records. Every
``service.commit_interval`` it commits one Kafka transaction holding

* per owned partition, one shuffle record (:mod:`stream.service.shuffle`): the rows accepted
  since the last transaction and the partition's completeness frontier (its largest record
  time; once read to an end offset observed at wall time T (fresh, read_uncommitted), at least
  T − ``stream.clock_skew``: :mod:`stream.service.progress`),
* the dead-letter and late records,
* the input offsets (``send_offsets_to_transaction`` with the group's metadata, so a worker
  the group has moved on from is fenced on Apache Kafka).

Rows and offsets commit together, so after a crash or a rebalance the next owner re-reads
exactly what was not handed over. Nothing is drawn here: workers never see noise or budget.
The releaser (:mod:`stream.service.releaser`) merges and releases.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

import numpy as np
from kafka import TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener

from stream.config import Settings
from stream.ingest.events import Rejections
from stream.ingest.formats import input_decoder
from stream.ingest.windowing import TimestepData
from stream.pipeline import ReleasePipeline
from stream.service.http import Health
from stream.service.kafka_io import (
    KafkaIOError,
    OutRecord,
    check_log_append_time,
    dead_letter_limit,
    ensure_topics,
    make_consumer,
    make_producer,
    safe_rejection_records,
    wrap_error,
)
from stream.service.logs import log
from stream.service.metrics import Metrics
from stream.service.progress import EndProbe, RecordTimeGuard, partition_frontier
from stream.service.shuffle import ShuffleRecord, check_shuffle_partitions, encode, shuffle_topic

__all__ = ["Worker", "run_worker"]

_log = logging.getLogger("dpstream.worker")


class _Listener(ConsumerRebalanceListener):
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.worker.revoked({tp.partition for tp in revoked})

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.worker.assigned({tp.partition for tp in assigned})


class Worker:
    """One worker process's loop. See the module docstring."""

    def __init__(self, settings: Settings, *, metrics: Metrics, health: Health, stop: threading.Event) -> None:
        self.settings = settings
        self.metrics = metrics
        self.health = health
        self.stop = stop
        k = settings.kafka
        self.topic = k.input_topic
        self.shuffle = shuffle_topic(settings)
        self.worker_id = settings.service.worker_id or socket.gethostname()
        self.decoder = input_decoder(settings, on_status=lambda ok, why: health.check("schema_registry", ok, why))
        self.pipeline = ReleasePipeline(settings)  # used for validation and inclusion only: never sealed
        self.owned: set[int] = set()
        self.positions: dict[int, int] = {}
        self.record_times: dict[int, float] = {}
        self.outputs: list[OutRecord] = []
        self.consumer: Any = None
        self.producer: Any = None
        self.probe: EndProbe | None = None
        #: the record-time assumptions, checked on every input record (the worker decides inclusion)
        self.guard = RecordTimeGuard(k.record_time, settings.stream.clock_skew.total_seconds(), k.input_topic)
        self._last = time.monotonic()
        self._dirty = False

    def probe_partitions(self) -> list[TopicPartition]:
        """The input partitions the broker probe (:mod:`stream.service.probe`) asks about: the
        ones this worker owns now, so a lost leader of any of them marks it not ready; partition
        0 while it owns none (between rebalances), so the probe still sees the cluster. Called
        from the probe's thread: ``sorted`` copies the set in one C call, atomic under the GIL."""
        owned = sorted(self.owned)
        return [TopicPartition(self.topic, p) for p in owned] or [TopicPartition(self.topic, 0)]

    # -- group membership ------------------------------------------------------------
    def revoked(self, parts: set[int]) -> None:
        """Partitions leaving this worker: what was read from them and not yet committed is
        dropped (their next owner re-reads it from the committed offsets)."""
        if not parts:
            return
        self._discard_uncommitted()
        self.owned -= parts
        log(_log, logging.INFO, "partitions revoked", partitions=sorted(parts))

    def assigned(self, parts: set[int]) -> None:
        self.owned |= parts
        for p in parts:
            self.record_times.pop(p, None)
            self.positions.pop(p, None)
            self.guard.largest.pop(p, None)
        log(_log, logging.INFO, "partitions assigned", partitions=sorted(parts))

    def _discard_uncommitted(self) -> None:
        """Forget every row and output not yet committed, and rewind to the committed offsets."""
        self.pipeline.window.drain()
        self.outputs = []
        self.positions.clear()
        self.record_times.clear()
        self.guard.largest.clear()  # re-read from the committed offsets: earlier record times again
        if self.consumer is not None:
            for p in self.owned:
                tp = TopicPartition(self.topic, p)
                try:
                    committed = self.consumer.committed(tp)
                    if committed is None:
                        self.consumer.seek_to_beginning(tp)
                    else:
                        self.consumer.seek(tp, committed)
                except Exception:  # noqa: BLE001, S110 - a revoked partition may no longer be seekable
                    pass

    # -- the loop --------------------------------------------------------------------
    def start(self) -> None:
        s, k = self.settings, self.settings.kafka
        if k.create_topics:
            ensure_topics(k, {k.input_topic: k.topic_partitions, self.shuffle: 1, k.dead_letter_topic: 1,
                              k.late_topic: 1},
                          configs={k.input_topic: {"message.timestamp.type": "LogAppendTime"}})
        check_log_append_time(k)  # the worker decides inclusion: same refusal as one process
        self.consumer = make_consumer(k, auto_offset_reset="earliest")
        self.consumer.subscribe([k.input_topic], listener=_Listener(self))
        self.producer = make_producer(k, f"{k.transactional_id or 'dpstream-' + s.stream.id}-worker-{self.worker_id}")
        for topic in (self.shuffle, k.dead_letter_topic, k.late_topic):
            parts = self.producer.partitions_for(topic)
            if topic == self.shuffle:
                check_shuffle_partitions(topic, parts)
        # fresh end offsets with the time they were asked (read_uncommitted: an open transaction's
        # records are not read yet): the only evidence that a partition was read to its end
        self.probe = EndProbe(make_consumer(k, isolation_level="read_uncommitted", group=False))
        self.health.set(True, "running")
        log(_log, logging.INFO, "worker started", stream=s.stream.id, worker=self.worker_id)

    def run(self) -> int:
        interval = self.settings.service.commit_interval.total_seconds()
        timeout_ms = int(self.settings.service.poll_timeout.total_seconds() * 1000)
        while not self.stop.is_set():
            self.health.tick()
            try:
                batch = self.consumer.poll(timeout_ms=timeout_ms, max_records=self.settings.kafka.max_poll_records)
            except Exception as exc:  # noqa: BLE001
                err = wrap_error(exc, f"poll {self.topic}")
                if not err.retriable:
                    raise err from exc
                log(_log, logging.WARNING, "poll failed, retrying", error=str(err))
                continue
            if batch:
                self._ingest(batch)
                self._dirty = True
            # every commit_interval, and at once when a poll comes back empty (caught up: hand over
            # what was read now, as the single process publishes promptly once caught up)
            due = time.monotonic() - self._last >= interval or (not batch and self._dirty)
            if due and self.owned:
                self._commit()
        if self.owned:
            self._commit()
        return 0

    def _ingest(self, batch: dict[Any, list[Any]]) -> None:
        payloads: list[bytes | None] = []
        keys: list[bytes | None] = []
        sources: list[tuple[int, int]] = []
        stamps: dict[tuple[int, int], float] = {}
        for tp, records in batch.items():  # fail closed before anything of this poll is used
            if tp.partition in self.owned and records:
                self.guard.check(tp.partition, records)
        for tp, records in batch.items():
            p = tp.partition
            if p not in self.owned or not records:
                continue
            for r in records:
                payloads.append(r.value)
                keys.append(r.key)
                sources.append((p, r.offset))
                stamps[(p, r.offset)] = r.timestamp / 1000.0
            self.record_times[p] = max(self.record_times.get(p, float("-inf")), records[-1].timestamp / 1000.0)
            self.positions[p] = records[-1].offset + 1
        if not payloads:
            return
        decoded = self.decoder.decode(payloads, sources, keys=keys)
        b = decoded.batch
        rec = np.array([stamps[src] for src in sources], dtype=np.float64)
        rec = rec[b.messages] if b.messages is not None else np.zeros(len(b))
        offered = self.pipeline.offer(b, record_time=rec)
        rejected = Rejections.concat([decoded.rejections, offered])
        k = self.settings.kafka
        topics = {"dead_letter": k.dead_letter_topic, "late": k.late_topic}
        out = safe_rejection_records(rejected, input_topic=k.input_topic, stream=self.settings.stream.id,
                                     limit=dead_letter_limit(k.max_request_size), timestamps=stamps)
        self.outputs.extend(OutRecord(topics[role], key, value, headers) for role, key, value, headers in out)
        m = self.metrics
        m.messages_consumed.inc(len(payloads))
        m.events_consumed.inc(len(b) + len(decoded.rejections))
        m.events_accepted.inc(len(b) - len(offered))
        m.count_rejections(rejected.counts())

    def _frontier(self, p: int, ends: Any) -> float | None:
        """Record time partition ``p`` is known to be past (see
        :func:`stream.service.progress.partition_frontier`): its largest record time read; once
        read to an end offset observed at ``observed_at``, at least ``observed_at − clock_skew``."""
        tp = TopicPartition(self.topic, p)
        try:
            position = self.consumer.position(tp)
            high = self.consumer.highwater(tp)
        except Exception:  # noqa: BLE001 - unknown: only the records seen count
            position = high = None
        if position is not None:
            self.positions[p] = max(self.positions.get(p, 0), int(position))
        f = partition_frontier(self.record_times.get(p), position, ends.get(tp), high,
                               self.settings.stream.clock_skew.total_seconds())
        return None if f == float("-inf") else f

    def _ends(self, owned: list[int]) -> Any:
        """Fresh end observations of the owned partitions (the last ones when the request fails)."""
        tps = [TopicPartition(self.topic, p) for p in owned]
        if self.probe is None:
            return {}
        try:
            return self.probe.observe(tps)
        except KafkaIOError:
            return {tp: self.probe.last[tp] for tp in tps if tp in self.probe.last}

    def _commit(self) -> None:
        owned = sorted(self.owned)
        ends = self._ends(owned)
        # rows of every owned partition, merged by cell (the releaser merges people across
        # partitions anyway): they ride in the first record, before every partition's frontier
        # each person's smallest row per timestep only (contribution_bound is 1 with scale-out):
        # exact, since the releaser's bound over all parts picks the smallest of these
        cells = [d.bounded(1) for d in self.pipeline.window.drain()]
        records = [OutRecord(self.shuffle, str(owned[0]).encode(), value)
                   for value in self._row_records(owned[0], cells)]
        for p in owned:  # after the rows: a frontier never overtakes the rows it covers
            records.append(OutRecord(self.shuffle, str(p).encode(), encode(ShuffleRecord(p, self._frontier(p, ends), ()))))
        records.extend(self.outputs)
        offsets = {TopicPartition(self.topic, p): self.positions[p] for p in owned if p in self.positions}
        try:
            self._transaction(records, offsets)
        except KafkaIOError as err:
            if not err.retriable:  # the same records would fail again: stop, say why
                raise
            log(_log, logging.WARNING, "transaction failed; re-reading from the committed offsets", error=str(err))
            self._reset_producer()
            self._discard_uncommitted()
            return
        self.outputs = []
        self._last = time.monotonic()
        self._dirty = False
        self.metrics.transactions.labels("committed").inc()

    def _row_records(self, partition: int, cells: list[Any]) -> list[bytes]:
        """The rows as shuffle records that each fit the producer's request size (halving a
        piece until it does): a busy second of input is many records, never one refused one."""
        limit = dead_letter_limit(self.settings.kafka.max_request_size)
        out: list[bytes] = []
        pending = list(cells)
        while pending:
            data = pending.pop()
            value = encode(ShuffleRecord(partition, None, (data,)))
            if len(value) <= limit or len(data) <= 1:
                out.append(value)
                continue
            half = len(data) // 2
            pending.append(TimestepData(data.cell, data.flat[half:], data.time[half:], data.user_id.slice(half)))
            pending.append(TimestepData(data.cell, data.flat[:half], data.time[:half], data.user_id.slice(0, half)))
        return out

    def _transaction(self, records: list[OutRecord], offsets: dict[TopicPartition, int]) -> None:
        from kafka.structs import OffsetAndMetadata

        p = self.producer
        try:
            p.begin_transaction()
            futures = [p.send(r.topic, key=r.key, value=r.value, headers=list(r.headers) or None) for r in records]
            p.flush()
            for f in futures:
                f.get(timeout=0)
            if offsets:
                p.send_offsets_to_transaction({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()},
                                              self.consumer.group_metadata())
            p.commit_transaction()
        except Exception as exc:  # noqa: BLE001
            try:
                p.abort_transaction()
            except Exception:  # noqa: BLE001, S110 - the producer is being replaced
                pass
            raise wrap_error(exc, "commit worker transaction") from exc

    def _reset_producer(self) -> None:
        k = self.settings.kafka
        try:
            self.producer.close(timeout=1)
        except Exception:  # noqa: BLE001, S110
            pass
        self.producer = make_producer(k, f"{k.transactional_id or 'dpstream-' + self.settings.stream.id}"
                                         f"-worker-{self.worker_id}")

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()
        for closer in (lambda: self.producer.close(timeout=2), lambda: self.consumer.close()):
            try:
                closer()
            except Exception:  # noqa: BLE001, S110
                pass


def run_worker(settings: Settings, *, stop: threading.Event | None = None, metrics: Metrics | None = None,
               health: Health | None = None, on_started: Any = None) -> int:
    """Run a worker until stopped; the exit code (0 stopped, 1 Kafka unusable).

    ``on_started(worker, None)`` is called once it has joined (tests)."""
    stop = stop or threading.Event()
    health = health or Health()
    worker = Worker(settings, metrics=metrics or Metrics(), health=health, stop=stop)
    from stream.service.journal import JournalError

    try:
        try:
            worker.start()
        except JournalError as exc:  # a refusal (e.g. the input topic's timestamp type): exit 2
            health.set(False, f"refused to start: {exc}")
            log(_log, logging.ERROR, "refusing to start", error=str(exc), error_type=type(exc).__name__)
            return 2
        if on_started is not None:
            on_started(worker, None)
        return worker.run()
    except KafkaIOError as err:
        log(_log, logging.ERROR, "worker stopped", error=str(err))
        return 1
    finally:
        worker.close()
