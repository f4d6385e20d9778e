"""The dpstream service: consume → window → release → journal → produce, exactly once.

The loop (one thread; SIGTERM/SIGINT only set a flag; every wait is bounded
by ``service.poll_timeout``, so the loop wakes up to stop and to seal idle
timesteps)::

    poll ≤ kafka.max_poll_records records
      → decode + validate + window (ReleasePipeline.offer)
      → dead letters and late events become records of the next checkpoint
    seal what the watermark / idle rule allows (ReleasePipeline.seal)
      → each sealed timestep's release becomes a record of the next checkpoint
    checkpoint when a timestep was sealed, when ``service.commit_interval``
    passed with new input, or when ``service.max_buffered_records`` records wait:
      1. journal.append(checkpoint)       fsync: release bytes, ledger, engine,
                                           windows incl. open events, offsets
      2. one Kafka transaction: every record of the checkpoint, the input
         offsets and the checkpoint marker (kafka_io), then commit

``release.delay: k`` (a fixed-lag smoother): the step that seals timestep ``t`` publishes
timestep ``t − k``'s message (nothing while ``t < k``); each journaled release says which
timestep(s) it sends (:attr:`JournaledRelease.outputs`), the journal's digests, the start-up
check against the output topic, the public feed, the alert detectors and
``dpstream_last_published_timestep`` follow the timestep a message carries, not the step that
sent it. At a clean end (``--max-timesteps``, ``stream.end``) the last ``k`` are flushed in the
final checkpoint's transaction (:class:`JournaledFlush`, with the engine snapshot that says so);
a stop (SIGTERM) or a crash keeps them queued in the journaled engine snapshot, so a restart
publishes them, ``k`` late, with the bytes an uninterrupted run publishes.

Why no event is lost or counted twice (the "persist open windows" choice).
Checkpoint *n* is taken after offering exactly the input records with offset
< ``offsets_n[p]`` on every partition *p*; its windowing snapshot holds the
buffered events of every open timestep; its transaction commits exactly
``offsets_n`` and marker *n*. So the group's committed offsets always equal
the offsets of a journaled checkpoint whose state accounts for every earlier
record once: counted in a sealed timestep (whose release is in that or an
earlier checkpoint), buffered in an open timestep (in the snapshot), or
dead-lettered / late (whose record is in that or an earlier checkpoint). At
start-up the service restores that checkpoint — first re-sending it when its
transaction did not commit: the same records, offsets and marker — and
consumes from ``offsets_n``; a record re-delivered below a partition's
position is dropped by offset. A crash between checkpoints loses only work
nothing outside has seen (no record is produced outside a checkpoint), so
redoing it, even drawing noise again for a timestep that had been sealed in
memory only, still lets exactly one draw per timestep reach Kafka.

Why noise is never redrawn for anything that may be visible: a release is
produced only inside the transaction of the checkpoint that journaled it,
after the fsync; after a crash the journaled checkpoint is re-sent byte for
byte (:func:`stream.service.journal.plan_recovery`), never recomputed. The embedded
broker shows records of interrupted transactions; they are byte-identical to
the re-sent ones, and consumers drop duplicates by ``release_id``.

Test-only fault injection: ``DPSTREAM_FAILPOINT=name[:n]`` (names in
:data:`stream.service.failpoints.FAILPOINTS`) kills the process with SIGKILL the
*n*-th time the loop reaches that point. Unset, it does nothing.

The process around the loop (signals, the shutdown watchdog, choosing the
single, worker or releaser role) is :mod:`stream.service.launcher`.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import repeat
from typing import Any

import numpy as np
from kafka import TopicPartition

from stream.config import Settings
from stream.ingest.events import Rejections, parse_times
from stream.ingest.formats import input_decoder
from stream.ingest.windowing import Grid
from stream.messages import parse_message
from stream.pipeline import JOURNAL_VERSION, ReleasePipeline, SealedRelease
from stream.service.alerts import ALERT_ROLE, AlertWatch
from stream.service.catchup import (
    LARGE_CATCH_UP,
    LAST_RECORD,
    LastRecord,
    StreamEnd,
    catch_up_summary,
    checkpoint_room,
)
from stream.service.http import Health, HttpServer
from stream.service.integrity import CHECK as CLUSTER_CHECK
from stream.service.integrity import CHECK_INTERVAL_S as CLUSTER_CHECK_INTERVAL_S
from stream.service.integrity import ClusterView, cluster_loss
from stream.service.journal import (
    INDEX_KEEP,
    Checkpoint,
    Journal,
    JournaledFlush,
    JournaledOutput,
    JournaledRelease,
    JournalError,
    JournalWriteError,
    Published,
    canonical_json,
    plan_recovery,
)
from stream.service.kafka_io import (
    InputReader,
    KafkaIOError,
    OutRecord,
    RecordTimeRefused,
    TopicMetadata,
    TransactionalWriter,
    bounded_value,
    check_log_append_time,
    committed_marker,
    dead_letter_limit,
    ensure_topics,
    make_producer,
    output_timestamp_warning,
    read_tail,
    safe_rejection_records,
    topic_timestamp_type,
    transactional_id_for,
)
from stream.service.logs import get_logger, log
from stream.service.metrics import Metrics
from stream.service.public import ReleaseFeed
from stream.service.schedule import PublishSchedule, record_timestamp_ms

__all__ = ["Service", "ServiceError", "checkpoint_records", "EXIT_OK", "EXIT_REFUSED", "EXIT_FAILED"]

INTERNAL_ERROR = "internal_error"  # dead-letter reason for a message the decoder itself failed on
EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2
LAG_INTERVAL_S = 5.0

_log = get_logger("service")


class ServiceError(RuntimeError):
    """The service cannot continue (fatal Kafka error, inconsistent state)."""


@dataclass
class _Pending:
    """What the next checkpoint will carry."""

    releases: list[tuple[SealedRelease, float]] = field(default_factory=list)
    outputs: list[JournaledOutput] = field(default_factory=list)
    #: release.delay at the clean end of the stream: the last timesteps, flushed
    flush: JournaledFlush | None = None

    def __bool__(self) -> bool:
        return bool(self.releases or self.outputs or self.flush is not None)


def checkpoint_records(cp: Checkpoint, settings: Settings, now: float | None = None) -> list[OutRecord]:
    """The Kafka records of a checkpoint, in journal order (the same bytes for a first send and a re-send).

    Under ``service.publish: on-schedule`` each release record's timestamp is the public
    scheduled time of the timestep whose step sends it (:func:`stream.service.schedule.record_timestamp_ms`;
    ``now``, the commit's wall time in seconds, only tells a backlog's late release apart; None:
    on time): under ``release.delay: k`` timestep ``t − k``'s message carries ``S(cell of t)``,
    and the ones flushed at the end ``S`` of the last timestep's cell.
    """
    k = settings.kafka
    key = settings.stream.id.encode()
    topics = {"domain": k.output_topic, "dead_letter": k.dead_letter_topic, "late": k.late_topic,
              ALERT_ROLE: settings.alerts.topic}
    schedule = PublishSchedule.from_settings(settings)
    step_s = settings.stream.timestep.total_seconds()
    records = [OutRecord(k.output_topic, o.key, o.value, o.headers) for o in cp.outputs if o.role == "domain"]
    at = -math.inf if now is None else now
    records += [OutRecord(k.output_topic, key, p.message, timestamp_ms=record_timestamp_ms(schedule, r.cell, at, step_s))
                for r in cp.releases for p in r.outputs]
    if cp.flush is not None:
        records += [OutRecord(k.output_topic, key, p.message,
                              timestamp_ms=record_timestamp_ms(schedule, cp.flush.cell, at, step_s))
                    for p in cp.flush.published]
    records += [OutRecord(topics[o.role], o.key, o.value, o.headers) for o in cp.outputs if o.role != "domain"]
    if not records:
        # A transaction that carries only offsets: the embedded broker drops its offset commit
        # (verified), so it always carries one record — a checkpoint marker on the internal state
        # topic, derived from the journaled checkpoint (a re-send is byte-identical).
        marker = {"stream": settings.stream.id, "checkpoint": cp.seq,
                  "offsets": {str(p): o for p, o in sorted(cp.offsets.items())}}
        records.append(OutRecord(k.state_topic, key, canonical_json(marker)))
    return records


def _budget(pipeline: ReleasePipeline, settings: Settings) -> tuple[Fraction, Fraction, Fraction, bool]:
    state = pipeline.engine_state
    acct = state.accountant
    last = max(0, state.timestep - 1)
    remaining = acct.remaining(last)
    cap: int | None = None  # the most fresh releases the method makes (user-level only)
    if settings.privacy.unit == "user-level":
        # uniform releases at every timestep up to the horizon N (ε/N each); the others stop at C
        uniform = pipeline.engine.method == "uniform"
        cap = settings.privacy.horizon if uniform else settings.privacy.cutoff
    exhausted = (cap is not None and state.fresh_count >= cap) or remaining <= 0
    parts = getattr(state, "parts", None)
    if parts is not None:  # privacy.personal: exhausted once every part's sub-stream is
        exhausted = all((cap is not None and s.fresh_count >= cap) or s.accountant.remaining(last) <= 0
                        for s in parts)
    return Fraction(settings.privacy.epsilon), acct.spent, remaining, exhausted


class Service:
    """One stream's service. ``start()`` recovers, ``run()`` loops until stopped.

    Args:
        settings: validated settings.
        metrics, health: shared with the HTTP server.
        stop: set it to stop the loop (signal handlers do only that).
        failpoint: test hook (see :class:`stream.service.failpoints.Failpoints`).
        max_timesteps: stop after this many timesteps were released (demo).
    """

    #: check every input record against the record-time assumptions (kafka_io.InputReader); the
    #: scale-out releaser, whose input is the internal shuffle topic, turns it off
    input_checks = True

    def __init__(self, settings: Settings, *, metrics: Metrics, health: Health, stop: threading.Event,
                 failpoint: Callable[[str], None] | None = None, max_timesteps: int | None = None) -> None:
        self.settings = settings
        self.metrics = metrics
        self.health = health
        self.stop = stop
        self.failpoint = failpoint or (lambda _name: None)
        self._output_timestamp_warning: str | None = None  # said once the start can no longer fail
        #: where the stream stops (``--max-timesteps``, ``stream.end``; stream/service/catchup.py)
        self.end = StreamEnd(Grid.from_settings(settings), max_timesteps, settings.stream.end)
        self.stream_id = settings.stream.id
        self.fingerprint = settings.fingerprint()
        # input.format chooses the decoder; a failing schema registry is a /readyz cause
        self.decoder = input_decoder(settings, on_status=lambda ok, why: health.check("schema_registry", ok, why))
        self.journal: Journal | None = None
        self.reader: InputReader | None = None
        self.producer: Any = None
        self.writer: TransactionalWriter | None = None
        self.pipeline: ReleasePipeline | None = None
        self.positions: dict[int, int] = {}      # next input offset per partition (processed)
        self.committed: dict[int, int] = {}      # offsets of the last committed checkpoint
        self.open_events: dict[int, int] = {}    # private audit: accepted events per open grid cell
        self.record_mode = settings.kafka.record_time != "watermark"
        self.record_times: dict[int, float] = {}  # largest record time seen per partition (seconds)
        self.stamps: dict[tuple[int, int], float] = {}  # (partition, offset) -> record time, one poll
        self.pending = _Pending()
        self.released = 0
        self.committed_seq = 0  # the last checkpoint committed to this cluster (its marker on the state topic)
        self.cluster_lost: str | None = None  # why the cluster contradicts the stream's state (integrity.py)
        self._last_cluster_check = time.monotonic()
        self._topic_metadata = TopicMetadata(settings.kafka)  # the check's metadata: its two topics only
        #: complete timesteps may still wait beyond the last checkpoint's room: seal them before reading more
        self._backlog = False
        self._last_checkpoint = time.monotonic()
        self._last_lag = 0.0
        self._step_mark = 0.0
        self.domain_bytes = b""
        #: the public port's feed (stream/service/public.py): committed release bytes only
        self.public: ReleaseFeed | None = None
        self.public_server: HttpServer | None = None
        #: the declared queries' detectors (None: no query declared; stream/service/alerts.py)
        self.alerts: AlertWatch | None = None
        #: service.publish: on-schedule (None: when-complete); the wall clock it is read against
        #: (epoch seconds; tests inject a manual clock)
        self.schedule = PublishSchedule.from_settings(settings)
        self.clock: Callable[[], float] = time.time
        self._behind_cell: int | None = None  # the last timestep counted behind schedule

    @property
    def max_timesteps(self) -> int | None:
        """``--max-timesteps``: release timesteps 0..K−1, then stop (settable between runs)."""
        return self.end.max_timesteps

    @max_timesteps.setter
    def max_timesteps(self, value: int | None) -> None:
        self.end.max_timesteps = value

    # -- start-up ----------------------------------------------------------------
    def start(self) -> None:
        """Connect, recover from the journal (re-sending an uncommitted checkpoint), restore the pipeline.

        Raises:
            JournalError (and subclasses): refuse to start (fail closed).
            KafkaIOError: Kafka unusable.
        """
        s, k = self.settings, self.settings.kafka
        self.health.set(False, "connecting")
        pipeline_probe = ReleasePipeline(s)  # domain message and validation of the config
        self.domain_bytes = pipeline_probe.domain_message().to_bytes()
        if k.create_topics:
            created = ensure_topics(k, {k.input_topic: k.topic_partitions, k.output_topic: k.topic_partitions,
                                        k.dead_letter_topic: k.topic_partitions, k.late_topic: k.topic_partitions,
                                        k.state_topic: 1,
                                        **({s.alerts.topic: k.topic_partitions} if s.queries else {})},
                                    configs={k.input_topic: {"message.timestamp.type": "LogAppendTime"},
                                             # explicit: a cluster default of LogAppendTime would
                                             # overwrite each release's scheduled timestamp S(c)
                                             k.output_topic: {"message.timestamp.type": "CreateTime"}})
            if created:
                log(_log, logging.INFO, "created topics", topics=created)
        check_log_append_time(k, topic_timestamp_type)
        self._output_timestamp_warning = output_timestamp_warning(s, topic_timestamp_type)
        if k.record_time != "watermark" and s.stream.start is None:
            raise RecordTimeRefused(
                f"kafka.record_time is {k.record_time} but stream.start is not set: the first timestep must "
                "be public, not chosen by the first event. Fix: set stream.start (an instant on the grid)")
        self.record_mode = k.record_time != "watermark"
        if s.stream.end == LAST_RECORD and (not self.record_mode or s.service.role != "single"):
            raise RecordTimeRefused(
                "stream.end is last-record but kafka.record_time is watermark or service.role is not single: the "
                "end follows the input's record times, which only a single process in a record-time mode reads. "
                "Fix: use a record-time mode and service.role single, or set stream.end to an instant")
        self.reader = InputReader(k, k.input_topic, slack_s=s.stream.allowed_lateness.total_seconds() / 2,
                                  record_time=k.record_time if self.input_checks else "off",
                                  skew_s=s.stream.clock_skew.total_seconds())
        self.health.set(False, "recovering")
        state_dir = s.service.state_dir
        # release digests kept for the start-up check must cover the output tail it reads (bounded memory)
        keep = max(INDEX_KEEP, k.startup_tail_records + 2 * s.service.max_releases_per_checkpoint)
        journal = (Journal.open(state_dir, self.stream_id, index_keep=keep)
                   if Journal.exists(state_dir, self.stream_id) else None)
        try:
            plan = self._plan(journal)
        except BaseException:
            if journal is not None:
                journal.close()
            raise
        if journal is None:
            journal = Journal.create(state_dir, self.stream_id, fingerprint=self.fingerprint,
                                     privacy_view=s.privacy_view(), index_keep=keep)
        journal.failpoint = self.failpoint
        if journal.last_seq == 0:  # nothing published yet: the stream's first checkpoint carries its domain
            self.pending.outputs.append(JournaledOutput("domain", self.stream_id.encode(), self.domain_bytes))
        self.journal = journal
        if plan.truncate_torn:
            journal.truncate_torn_tail()
        level = logging.WARNING if plan.redo is not None or plan.truncate_torn else logging.INFO
        for note in plan.notes:
            log(_log, level, "recovery", note=note)
        self.producer = make_producer(k, transactional_id_for(k, self.stream_id))
        for topic in (k.output_topic, k.dead_letter_topic, k.late_topic, k.state_topic,
                      *((s.alerts.topic,) if s.queries else ())):
            self.producer.partitions_for(topic)  # metadata now, not inside the first transaction
        self.writer = TransactionalWriter(self.producer, self.reader.group_metadata, k.state_topic, self.failpoint)
        if plan.redo is None:
            self.writer.warm_up(journal.last_seq)
        else:
            if not self._commit(plan.redo):
                raise ServiceError("stopped while re-sending the journaled checkpoint")
            self.metrics.recoveries.inc()
            self.metrics.releases_resent.inc(len(plan.redo.releases))
            log(_log, logging.WARNING, "re-sent journaled checkpoint", seq=plan.redo.seq,
                releases=len(plan.redo.releases))
        windowing = plan.windowing or {}
        self.pipeline = ReleasePipeline(s, engine_state=plan.engine, window_state=windowing.get("window"),
                                        step_hook=self._on_sealed, recall=self._recall)
        if self.pipeline.window.max_event_time is not None:
            # the idle clock restarts with the process (the snapshot has no wall time)
            self.pipeline.window.last_event_wall = time.time()
        self.open_events = {int(c): int(n) for c, n in (windowing.get("open_events") or {}).items()}
        # declared queries' detectors, resumed from the checkpoint (issue 33; stream/service/alerts.py)
        self.alerts = AlertWatch(s, self.metrics, windowing.get("alerts")) if s.queries else None
        # per-partition record-time progress at the checkpoint: the restarted service resumes with the
        # same completeness evidence (a journal without it, from an older build, starts with none: that
        # only delays completeness, it never changes what a timestep holds)
        self.record_times = {int(p): float(t) for p, t in (windowing.get("record_times") or {}).items()}
        self.positions = dict(plan.resume_offsets)
        self.committed = dict(plan.resume_offsets)
        self.reader.seek(self.positions)
        self.released = self.pipeline.next_index
        if journal.index:  # the last timestep on the output topic (release.delay: k behind the last sealed)
            self.metrics.last_published.set(max(journal.index))
        self.committed_seq = journal.last_seq  # re-sent above when it was one ahead of Kafka
        if s.stream.end == LAST_RECORD:  # the largest record time so far and the decision, journaled
            saved = windowing.get("end")
            self.end.last = LastRecord.restore(saved) if saved else LastRecord()
        self._log_catch_up()
        self._publish_budget()
        self.metrics.journal_bytes.set(journal.size)
        self.metrics.info.info({"stream": self.stream_id, "decision": s.release.decision,
                                "mechanism": s.release.mechanism, "unit": s.privacy.unit,
                                "config_fingerprint": self.fingerprint[:16]})
        waiting = self.pipeline.unpublished  # release.delay: released, published k timesteps later
        log(_log, logging.INFO, "started", stream=self.stream_id, next_timestep=self.pipeline.next_index,
            journal_checkpoints=journal.last_seq, partitions=len(self.reader.partitions),
            resumed_from_offsets=bool(plan.resume_offsets),
            **({"unpublished": list(waiting)} if self.pipeline.post.delay else {}))
        if self._output_timestamp_warning:  # after the start can no longer fail (a fatal error comes alone)
            log(_log, logging.WARNING, self._output_timestamp_warning)
        self.health.set(True, "running")

    def _log_catch_up(self) -> None:
        """Say at start-up how many timesteps the wall clock already completes, from when to when, and
        what bounds them (a start far behind the clock releases every one of them: docs/configuration.md)."""
        assert self.pipeline is not None
        stop = self._stop_index()
        skew = self.settings.stream.clock_skew.total_seconds() if self.record_mode else 0.0
        summary = catch_up_summary(self.end.grid, self.pipeline.window.next_cell, self.pipeline.next_index,
                                   time.time(), skew, stop)
        big = summary["timesteps"] > LARGE_CATCH_UP
        log(_log, logging.WARNING if big else logging.INFO, "catch-up", next_timestep=self.pipeline.next_index,
            **summary, bounded_by=self.end.reason(), per_checkpoint=self.settings.service.max_releases_per_checkpoint,
            **({"hint": "each of these timesteps is released (fresh or republished) and charged to the budget; "
                        "bound a backfill with stream.end or --max-timesteps"} if big else {}))

    def _stop_index(self) -> int | None:
        """The first timestep index never to seal (``--max-timesteps``, ``stream.end``), or None."""
        assert self.pipeline is not None
        return self.end.stop_index(self.pipeline.window.first_cell, self.positions)

    def _sealed_to_the_end(self) -> bool:
        """Every timestep up to the stream's end (``--max-timesteps``, ``stream.end``) is sealed."""
        assert self.pipeline is not None
        stop = self._stop_index()
        return stop is not None and self.pipeline.next_index >= stop

    def _finished(self) -> bool:
        stop = self._stop_index()
        return stop is not None and self.released >= stop and not self.pending.releases

    def _plan(self, journal: Journal | None) -> Any:
        k = self.settings.kafka
        assert self.reader is not None
        marker = committed_marker(self.reader.control, k.state_topic)
        committed = self.reader.committed()
        published = []
        for _, _, value in read_tail(k, k.output_topic, key=self.stream_id.encode(), last=k.startup_tail_records):
            try:
                msg = parse_message(value)
            except Exception:  # noqa: BLE001, S112 - not one of our messages: the journal check ignores it
                continue
            if getattr(msg, "message_type", "") in ("release", "model-release") and msg.stream == self.stream_id:
                published.append((msg.timestep.index, _sha256(value), msg.release_id))
                if self.public is not None and msg.config_fingerprint == self.fingerprint:
                    self.public.add(value)  # already public: the page shows history after a restart
        return plan_recovery(journal, stream_id=self.stream_id, fingerprint=self.fingerprint,
                             privacy_view=self.settings.privacy_view(), marker=marker, committed=committed,
                             published=published)

    def _recall(self, index: int) -> dict[str, Any] | None:
        """Pipeline hook: a timestep the journal already has is re-sent, never stepped again."""
        journal = self.journal
        if journal is None or not journal.knows(index):
            return None
        for r in journal.last.releases if journal.last else ():
            if r.timestep == index and r.cell is not None:
                published = {} if r.published is None else {
                    "published": [p.message.decode("ascii") for p in r.published]}  # release.delay
                return {"version": JOURNAL_VERSION, "stream": self.stream_id,
                        "config_fingerprint": self.fingerprint, "index": index, "cell": r.cell,
                        "release_id": r.release_id, "payload": r.message.decode("ascii"),
                        "engine_state": r.engine, "window": {}, **published}
        raise JournalError(f"timestep {index} was already released but the pipeline is sealing it again, and "
                           "its bytes are no longer in the journal: state is inconsistent; refusing")

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> int:
        """Loop until the stop flag is set (or ``max_timesteps``); returns an exit code."""
        assert self.pipeline is not None
        while not self.stop.is_set():
            self.health.tick()
            if self._cluster_lost():  # on_cluster_loss: wait — nothing read, sealed or released meanwhile
                self.stop.wait(CLUSTER_CHECK_INTERVAL_S)
                continue
            live = self.reader is not None and self.reader.caught_up(self.positions)
            batch = [] if self._backlog else self._poll()  # a backlog of complete timesteps first
            if batch:
                self._ingest(batch, live=live)
            self._seal()
            if self.pending.flush is None and self._sealed_to_the_end():
                self._flush_end()  # release.delay: in the transaction of the last timestep
            if self._due() and not self._checkpoint():
                break
            self._update_lag()
            if self._finished():
                log(_log, logging.INFO, "released the requested number of timesteps", timesteps=self.released,
                    bounded_by=self.end.reason())
                break
        self.health.set(False, "stopping")
        if self._finished():
            self._flush_end()  # a stream whose end came in an earlier run (or a lowered --max-timesteps)
        if self.pending or self.positions != self.committed:
            self._checkpoint()  # finish: commit what was processed (returns early if Kafka is failing)
        log(_log, logging.INFO, "stopped", next_timestep=self.pipeline.next_index)
        return EXIT_OK

    def _flush_end(self) -> None:
        """``release.delay: k`` at the clean end of the stream (``--max-timesteps``, ``stream.end``):
        the last timesteps waiting for publication go into the final checkpoint, with the engine
        snapshot that has none left (so a restart does not publish them again). Post-processing of
        releases only: nothing is drawn or charged. Nothing to do without a delay, or when a previous
        run already flushed them."""
        assert self.pipeline is not None
        flushed = self.pipeline.flush()
        if not flushed:
            return
        cell = self.pipeline.window.next_cell
        published = tuple(Published(m.timestep.index, m.release_id, payload) for m, payload in flushed)
        self.pending.flush = JournaledFlush(published, self.pipeline.snapshot()["engine"],
                                            None if cell is None else cell - 1)
        log(_log, logging.INFO, "flushed the delayed timesteps at the end of the stream",
            timesteps=[p.timestep for p in published], delay=self.pipeline.post.delay)

    def _poll(self) -> list[tuple[int, list[Any]]]:
        assert self.reader is not None
        try:
            return self.reader.poll(self._poll_wait(), self.settings.kafka.max_poll_records, self.positions)
        except KafkaIOError as err:
            self.metrics.kafka_errors.labels(str(err.retriable).lower()).inc()
            if not err.retriable:
                raise ServiceError(str(err)) from err
            log(_log, logging.WARNING, "poll failed, retrying", error=str(err))
            self.stop.wait(0.5)
            return []

    def _ingest(self, batch: list[tuple[int, list[Any]]], *, live: bool = True) -> None:
        """Decode, validate and window one poll's records.

        ``live``: the service had read everything there was before this poll, so these records
        are new arrivals and the wall clock may extend the far-future bound; otherwise they are
        a backlog (after a restart or a slow period) and the bound stays relative to the largest
        accepted event time (:attr:`stream.ingest.windowing.Windower.catching_up`).
        """
        payloads: list[bytes | None] = []  # None: a tombstone (dead-lettered as such)
        keys: list[bytes | None] = []
        sources: list[tuple[int, int]] = []
        for p, records in batch:  # each partition's records in increasing offset order
            floor = self.positions.get(p)
            if floor is not None and records and records[0].offset < floor:
                records = [r for r in records if r.offset >= floor]  # re-delivered: already processed
            if not records:
                continue
            offsets = [r.offset for r in records]
            payloads.extend([r.value for r in records])
            keys.extend([r.key for r in records])
            sources.extend(zip(repeat(p), offsets))
            for r in records:
                self.stamps[(p, r.offset)] = r.timestamp / 1000.0
            if self.end.last is not None:
                self.end.last.observe(r.timestamp / 1000.0 for r in records)
            self.record_times[p] = max(self.record_times.get(p, float("-inf")), records[-1].timestamp / 1000.0)
            self.positions[p] = offsets[-1] + 1
        if self.reader is not None:  # the consumer's position moves past transaction markers
            for p in self.reader.partitions:
                pos = self.reader.position(p)
                if pos is not None and pos > self.positions.get(p, 0):
                    self.positions[p] = pos
        if not payloads:
            return
        assert self.pipeline is not None
        now = time.time()
        self.pipeline.window.catching_up = not live
        m = self.metrics
        m.messages_consumed.inc(len(payloads))
        for decoded, part_sources in self._decode(payloads, sources, keys):
            if self.record_mode:  # each event's own record time decides (docs/privacy.md §1.1)
                rec = np.array([self.stamps[src] for src in part_sources], dtype=np.float64)
                msg = decoded.batch.messages
                rec = rec[msg] if msg is not None else np.full(len(decoded.batch), rec[0] if rec.size else 0.0)
                offered = self.pipeline.offer(decoded.batch, record_time=rec)
            else:
                offered = self.pipeline.offer(decoded.batch, now=now)  # an error here is fatal: state may be torn
            rejected = Rejections.concat([decoded.rejections, offered])
            self._observe_accepted(decoded.batch, offered, part_sources)
            self._dead_letter(rejected)
            m.events_consumed.inc(len(decoded.batch) + len(decoded.rejections))
            m.events_accepted.inc(len(decoded.batch) - len(offered))
            m.count_rejections(rejected.counts())
        self.stamps.clear()

    def _decode(self, payloads: list[bytes | None], sources: list[tuple[int, int]],
                keys: list[bytes | None]) -> list[tuple[Any, list[Any]]]:
        """Decode a poll's messages; a message the decoder cannot handle at all is dead-lettered
        (``internal_error``) instead of stopping the service (a poison pill would crash it forever)."""
        try:
            return [(self.decoder.decode(payloads, sources, keys=keys), sources)]
        except Exception:  # noqa: BLE001, S110 - isolate the message that breaks the decoder
            pass
        parts = []
        for payload, source, key in zip(payloads, sources, keys, strict=True):
            try:
                parts.append((self.decoder.decode([payload], [source], keys=[key]), [source]))
            except Exception as exc:  # noqa: BLE001
                self._unprocessable(payload or b"", source, exc)
        return parts

    def _unprocessable(self, payload: bytes, source: tuple[int, int], exc: BaseException) -> None:
        k = self.settings.kafka
        headers = (("dpstream.reason", INTERNAL_ERROR.encode()),
                   ("dpstream.detail", f"{type(exc).__name__}"[:200].encode()),
                   ("dpstream.stream", self.stream_id.encode()),
                   ("dpstream.source.topic", k.input_topic.encode()),
                   ("dpstream.source.partition", str(source[0]).encode()),
                   ("dpstream.source.offset", str(source[1]).encode()))
        value, cut = bounded_value(payload, dead_letter_limit(k.max_request_size))
        self.pending.outputs.append(JournaledOutput("dead_letter", f"{source[0]}:{source[1]}".encode(),
                                                    value, (*headers, *cut)))
        self.metrics.events_consumed.inc()
        self.metrics.dead_letters.labels(INTERNAL_ERROR).inc()
        log(_log, logging.ERROR, "message could not be processed; dead-lettered", partition=source[0],
            offset=source[1], error_type=type(exc).__name__)

    def _dead_letter(self, rejected: Rejections) -> None:
        topic, stream = self.settings.kafka.input_topic, self.stream_id
        limit = dead_letter_limit(self.settings.kafka.max_request_size)
        records = safe_rejection_records(rejected, input_topic=topic, stream=stream, limit=limit,
                                         timestamps=self.stamps)
        for role, key, value, headers in records:
            self.pending.outputs.append(JournaledOutput(role, key, value, headers))

    def _observe_accepted(self, batch: Any, offered: Rejections, sources: list[tuple[int, int]]) -> None:
        """Accepted events: the private audit per grid cell (journaled, never published or logged),
        and each partition's largest event time (for :class:`EventTimeAligner`)."""
        n = len(batch)
        if not n:
            return
        accepted = ~np.isin(batch.rows, offered.row) if len(offered) else np.ones(n, dtype=bool)
        if not accepted.any():
            return
        times, _, _ = parse_times(batch.event_time)
        assert self.pipeline is not None
        cells, counts = np.unique(self.pipeline.grid.cell(times[accepted]), return_counts=True)
        for c, k in zip(cells.tolist(), counts.tolist(), strict=True):
            self.open_events[c] = self.open_events.get(c, 0) + k
        if self.reader is not None and batch.messages is not None and len(self.reader.partitions) > 1:
            part = np.fromiter((src[0] for src in sources), dtype=np.int64, count=len(sources))[batch.messages]
            acc_part, acc_time = part[accepted], times[accepted]
            for p in np.unique(acc_part).tolist():
                self.reader.observe(int(p), float(acc_time[acc_part == p].max()))

    def _seal(self) -> None:
        """Seal what the watermark allows, and idle timesteps — but only once caught up with the input:
        a backlog (after a restart or a slow period) is not a quiet stream. Under
        ``service.publish: on-schedule`` never a timestep before its scheduled time."""
        assert self.pipeline is not None and self.reader is not None
        self._step_mark = time.monotonic()
        now = self.clock()
        before = None if self.schedule is None else self.schedule.first_not_due(now)
        if self.record_mode:
            frontier = self.reader.record_frontier(self.positions, self.record_times, now,
                                                   self.settings.stream.clock_skew.total_seconds())
            self._seal_bounded(record_frontier=frontier, before=before)
            self._watch_schedule(now)
            return
        idle_clock = now if self.reader.caught_up(self.positions) else None
        if idle_clock is None and self.pipeline.window.last_event_wall is not None:
            self.pipeline.window.last_event_wall = now  # the idle timer runs only while caught up
        self._seal_bounded(now=idle_clock, before=before)

    def _seal_bounded(self, **rule: Any) -> None:
        """Seal what ``rule`` (a :meth:`ReleasePipeline.seal` completeness rule) allows, but no more than
        the next checkpoint may take (:func:`stream.service.catchup.checkpoint_room`): a long backlog is
        released in checkpoints of ``service.max_releases_per_checkpoint``, and no more input is read while
        complete timesteps wait (so what is buffered stays bounded by the open timesteps)."""
        assert self.pipeline is not None
        last = self.end.last  # stream.end: last-record runs in a single process only (with a reader)
        if last is not None and not last.decided and self.reader is not None and self.reader.caught_up(self.positions):
            last.decide()  # stream.end: last-record: every partition read to its high watermark once
            log(_log, logging.INFO, "stream end decided (stream.end: last-record)", bounded_by=self.end.reason(),
                next_timestep=self.pipeline.next_index)
        room = checkpoint_room(len(self.pending.releases), self.settings.service.max_releases_per_checkpoint,
                               self.pipeline.next_index, self._stop_index())
        sealed = self.pipeline.seal(limit=room, **rule) if room else []
        self._backlog = len(sealed) >= room and not self._finished()

    # -- the public release schedule (service.publish: on-schedule, stream/service/schedule.py) ----------
    def _poll_wait(self) -> float:
        """How long a poll may wait for input: ``service.poll_timeout``, but no later than the next
        timestep's scheduled time, so a release's time does not depend on whether records arrive."""
        wait = self.settings.service.poll_timeout.total_seconds()
        nxt = self.pipeline.window.next_cell if self.schedule is not None and self.pipeline is not None else None
        if nxt is not None:
            ahead = self.schedule.release_time(nxt) - self.clock()  # type: ignore[union-attr]
            if ahead > 0:
                wait = min(wait, ahead)
        return wait

    def _on_schedule_pending(self) -> bool:
        """A pending release is on schedule (not a backlog's): commit it now, not after up to
        ``commit_interval`` — whether the consumer happens to be caught up is input volume."""
        if self.schedule is None:
            return False
        now, step_s = self.clock(), self.settings.stream.timestep.total_seconds()
        return any(record_timestamp_ms(self.schedule, sealed.cell, now, step_s) is not None
                   for sealed, _ in self.pending.releases)

    def _watch_schedule(self, now: float) -> None:
        """Operators' view of the schedule (record-time modes): the next timestep is due but not yet
        complete (broker lag, a backlog): how far behind, and each such timestep counted once."""
        if self.schedule is None or self.pipeline is None:
            return
        nxt = self.pipeline.window.next_cell
        if nxt is None or not self.schedule.is_due(nxt, now):
            self.metrics.behind_schedule.set(0)
            return
        self.metrics.behind_schedule.set(now - self.schedule.release_time(nxt))
        if nxt != self._behind_cell:
            self._behind_cell = nxt
            self.metrics.timesteps_behind_schedule.inc()

    def _on_sealed(self, sealed: SealedRelease) -> None:
        """Step hook: the timestep's noise is drawn; nothing is visible yet."""
        now = time.monotonic()
        self.metrics.step_duration.observe(now - self._step_mark)
        self._step_mark = now
        self.failpoint("after_noise")
        self.pending.releases.append((sealed, now))

    def _due(self) -> bool:
        """When to checkpoint. A sealed timestep is published at once when the service is caught up
        with its input (seal-to-publish latency); while it works through a backlog, seals are
        batched for up to ``commit_interval`` (the data is old anyway; one fsync and one
        transaction then carry many timesteps)."""
        assert self.reader is not None
        interval = self.settings.service.commit_interval.total_seconds()
        since = time.monotonic() - self._last_checkpoint
        if len(self.pending.outputs) >= self.settings.service.max_buffered_records:
            return True
        if self.pending.flush is not None and not self.pending.releases:
            return True
        if self.pending.releases:
            return (since >= interval or self._backlog
                    or len(self.pending.releases) >= self.settings.service.max_releases_per_checkpoint
                    or self.reader.caught_up(self.positions) or self._on_schedule_pending())
        new_input = bool(self.pending.outputs) or self.positions != self.committed
        return new_input and since >= interval

    def _journaled_release(self, sealed: SealedRelease) -> JournaledRelease:
        ledger = tuple(e.to_json() for e in sealed.release.ledger) if sealed.release is not None else ()
        events = self.open_events.pop(sealed.cell, 0)
        published = None if sealed.delayed is None else tuple(
            Published(m.timestep.index, m.release_id, payload) for m, payload in sealed.delayed)
        return JournaledRelease(sealed.index, sealed.release_id, sealed.kind, sealed.payload, ledger,
                                sealed.engine_snapshot(), {"events": events}, sealed.cell, published)

    def _checkpoint(self) -> bool:
        """Journal (fsync) then commit one transaction. False when stopped before it committed."""
        assert self.journal is not None and self.pipeline is not None
        started = time.monotonic()
        pending, self.pending = self.pending, _Pending()
        releases = tuple(self._journaled_release(s) for s, _ in pending.releases)
        published = tuple(p for r in releases for p in r.outputs) + (
            pending.flush.published if pending.flush is not None else ())
        window = self.pipeline.window.snapshot(include_buffers=True)
        # alert events of the messages this checkpoint publishes (release.delay: timestep t − k's):
        # in this checkpoint, hence in the same transaction
        alerts = () if self.alerts is None else tuple(self.alerts.observe([p.message for p in published]))
        cp = Checkpoint(self.journal.last_seq + 1, dict(self.committed), dict(self.positions), releases,
                        tuple(pending.outputs) + alerts,
                        {"window": window, "open_events": {str(c): n for c, n in self.open_events.items()},
                         "record_times": {str(p): t for p, t in sorted(self.record_times.items())},
                         **({"end": self.end.last.snapshot()} if self.end.last is not None else {}),
                         **({"alerts": self.alerts.snapshot()} if self.alerts is not None else {})},
                        flush=pending.flush)
        t0 = time.monotonic()
        self._append(cp)
        self.metrics.journal_fsync.observe(time.monotonic() - t0)
        self.failpoint("after_journal")
        if not self._commit(cp):
            return False
        done = time.monotonic()
        self._last_checkpoint = done
        self.committed = dict(cp.offsets)
        self.committed_seq = cp.seq
        m = self.metrics
        m.checkpoint_duration.observe(done - started)
        if self.alerts is not None:
            self.alerts.committed()
        for (sealed, sealed_at), r in zip(pending.releases, releases, strict=True):
            m.seal_to_publish.observe(done - sealed_at)
            m.timesteps_sealed.inc()
            m.releases.labels(r.kind).inc()
            if sealed.recovered:
                m.releases_resent.inc()
        if published:
            m.last_published.set(published[-1].timestep)
        if releases:
            self.released = releases[-1].timestep + 1
            m.last_timestep.set(releases[-1].timestep)
            m.last_release_time.set(time.time())
            self._publish_budget()
            # no per-checkpoint late or dead-letter counts: raw per-timestep figures (docs/privacy.md §9)
            delayed = {"published": [p.timestep for p in published][:8]} if self.pipeline.post.delay else {}
            log(_log, logging.INFO, "released", timesteps=[r.timestep for r in releases][:8],
                kinds=sorted({r.kind for r in releases}), checkpoint=cp.seq, **delayed)
        try:
            if self.journal.maybe_compact(self.settings.service.journal_compact_bytes):
                log(_log, logging.INFO, "compacted the journal", size_bytes=self.journal.size)
        except JournalWriteError as exc:  # the journal itself is intact: keep releasing, retry later
            m.journal_write_failures.inc()
            log(_log, logging.WARNING, "journal compaction failed; the journal is unchanged and keeps growing "
                "until it succeeds", error=str(exc), cause=exc.cause)
        m.journal_bytes.set(self.journal.size)
        return True

    def _append(self, cp: Checkpoint) -> None:
        """Journal ``cp`` durably. While the disk refuses (full, I/O error) nothing is released: the
        service says so (log, ``journal_write_blocked``, ``/readyz``) and retries the *same*
        checkpoint, so its timesteps are published with the noise already drawn once the disk has room.

        Raises:
            JournalError: stopped (SIGTERM) while blocked: the checkpoint was neither journaled nor
                published, so the next start re-does its timesteps (none of them was visible).
        """
        assert self.journal is not None
        failures, backoff = 0, 0.2
        while True:
            try:
                self.journal.append(cp)
                break
            except JournalWriteError as exc:
                failures += 1
                self.metrics.journal_write_failures.inc()
                self.metrics.journal_blocked.set(1)
                state_dir = self.settings.service.state_dir
                self.health.set(False, f"journal write failed ({exc.cause}): releases stopped; free space in "
                                       f"{state_dir} and the service resumes by itself")
                if failures == 1 or failures % 20 == 0:
                    log(_log, logging.ERROR, "journal write failed; releasing nothing until it succeeds "
                        f"(free disk space in {state_dir}); retrying the same checkpoint", checkpoint=cp.seq,
                        cause=exc.cause, attempts=failures)
                self.health.tick()  # the loop is alive (liveness), just not ready
                if self.stop.wait(backoff):
                    raise JournalError(
                        f"stopped while checkpoint {cp.seq} could not be journaled ({exc.cause}); nothing of it "
                        "was published, and the next start re-does its timesteps") from exc
                backoff = min(5.0, backoff * 2)
        if failures:
            self.metrics.journal_blocked.set(0)
            log(_log, logging.WARNING, "journal writable again; releasing", checkpoint=cp.seq, attempts=failures)

    def _commit(self, cp: Checkpoint) -> bool:
        """Send a journaled checkpoint until it commits. Retries re-send the same records."""
        assert self.writer is not None
        records = checkpoint_records(cp, self.settings, self.clock())
        offsets = {TopicPartition(self.settings.kafka.input_topic, p): o for p, o in cp.offsets.items()}
        backoff = 0.2
        while True:
            try:
                self.writer.commit(records, offsets, cp.seq)
                self.metrics.transactions.labels("committed").inc()
                if self.public is not None:  # committed, hence public: now the public port may show it
                    self.public.add_many(p.message for p in cp.published)
                if not self.health.ready and not self.stop.is_set():
                    self.health.set(True, "running")
                return True
            except KafkaIOError as err:
                self.metrics.transactions.labels("failed").inc()
                self.metrics.kafka_errors.labels(str(err.retriable).lower()).inc()
                if not err.retriable:
                    raise ServiceError(f"{err}; the journaled checkpoint {cp.seq} will be re-sent at the next "
                                       "start") from err
                log(_log, logging.WARNING, "transaction failed, retrying the same records", checkpoint=cp.seq,
                    error=str(err))
                self.health.set(False, f"retrying transaction: {err.action}")
                if self.stop.wait(backoff):
                    log(_log, logging.WARNING, "stopping with an uncommitted checkpoint (re-sent at next start)",
                        checkpoint=cp.seq)
                    return False
                backoff = min(5.0, backoff * 2)
                self._reset_producer()

    def _reset_producer(self) -> None:
        """A fresh producer (init_transactions aborts whatever the old one left open)."""
        k = self.settings.kafka
        try:
            self.producer.close(timeout=1)
        except Exception:  # noqa: BLE001, S110 - it is being replaced
            pass
        try:
            self.producer = make_producer(k, transactional_id_for(k, self.stream_id))
        except KafkaIOError as err:
            if not err.retriable:
                raise ServiceError(str(err)) from err
            return  # the next commit attempt fails fast and retries
        assert self.writer is not None
        self.writer.producer = self.producer
        self.writer.in_transaction = False

    def _publish_budget(self) -> None:
        assert self.pipeline is not None
        budget, spent, remaining, exhausted = _budget(self.pipeline, self.settings)
        self.metrics.set_budget(budget=budget, spent=spent, remaining=remaining, exhausted=exhausted)

    def _update_lag(self) -> None:
        now = time.monotonic()
        if now - self._last_lag < LAG_INTERVAL_S:
            return
        self._last_lag = now
        assert self.reader is not None
        try:
            ends = self.reader.end_offsets()
        except KafkaIOError:
            return
        for p, end in ends.items():
            self.metrics.consumer_lag.labels(str(p)).set(max(0, end - self.positions.get(p, 0)))

    def _cluster_lost(self) -> bool:
        """Every ``CLUSTER_CHECK_INTERVAL_S``: does the cluster still hold what the stream's state says
        it committed (:mod:`stream.service.integrity`)? On the first contradiction: not ready with the
        cause, one ERROR line, a metric; then stop (``service.on_cluster_loss: stop``, the default:
        ServiceError, exit 1, and the next start refuses with its recovery check) or wait (True while
        it lasts; one WARNING line when the cluster matches again).

        Raises:
            ServiceError: the cluster lost the stream's data and the configuration says stop.
        """
        now = time.monotonic()
        if now - self._last_cluster_check < CLUSTER_CHECK_INTERVAL_S:
            return self.cluster_lost is not None
        self._last_cluster_check = now
        cause = self._cluster_cause()
        if cause is None:
            if self.cluster_lost is not None:
                self.cluster_lost = None
                self.health.check(CLUSTER_CHECK, True)
                self.metrics.cluster_lost.set(0)
                log(_log, logging.WARNING, "the Kafka cluster matches the stream's state again; resuming")
            return False
        if self.cluster_lost is None:
            self.cluster_lost = cause
            self.health.check(CLUSTER_CHECK, False, cause)
            self.metrics.cluster_lost.set(1)
            action = self.settings.service.on_cluster_loss
            log(_log, logging.ERROR, "the Kafka cluster lost the stream's data; releasing nothing", error=cause,
                on_cluster_loss=action)
        if self.settings.service.on_cluster_loss == "stop":
            raise ServiceError(cause)
        return True

    def _cluster_cause(self) -> str | None:
        """One comparison (offsets and sequence numbers only); None also when the cluster does not answer
        (an unreachable broker is the probe's finding, :mod:`stream.service.probe`)."""
        assert self.reader is not None
        k = self.settings.kafka
        control = self.reader.control
        try:
            # a fresh metadata request for these two topics only (never auto-creates one)
            topics = self._topic_metadata.partitions([k.input_topic, k.output_topic])
            partitions = topics[k.input_topic] or frozenset()
            ends = self.reader.log_ends() if partitions else {}  # the high watermark, not the LSO
            fetched = {p: self.reader.fetched_high(p) for p in self.reader.partitions}
            marker = committed_marker(control, k.state_topic) if self.committed_seq else None
        except Exception as exc:  # noqa: BLE001 - no answer: nothing to compare
            log(_log, logging.DEBUG, "cluster check skipped", error=f"{type(exc).__name__}: {exc}")
            return None
        view = ClusterView(partitions, ends, topics[k.output_topic] is not None, marker, fetched)
        return cluster_loss(view, input_topic=k.input_topic, output_topic=k.output_topic,
                            reading=frozenset(self.reader.partitions), committed=self.committed,
                            committed_seq=self.committed_seq)

    def close(self) -> None:
        for closer in (lambda: self.producer.close(timeout=2), lambda: self.reader.close(),
                       self._topic_metadata.close):
            try:
                closer()
            except Exception:  # noqa: BLE001, S110 - best effort on the way out
                pass
        if self.journal is not None:
            self.journal.close()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
