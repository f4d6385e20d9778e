"""Kafka clients for the service: topics, the transactional producer, the consumer.

Everything here is thin glue over kafka-python, with two rules:

* every failure surfaces as :class:`KafkaIOError`, which says whether it is
  *retriable* (try the same thing again: a timeout, a leader moving) or
  *fatal* (fenced producer, authorisation, misconfiguration: stop);
* the client settings the privacy invariants rely on are not optional
  (K7 of the reliability catalogue): ``acks=all`` with idempotence and a
  stable ``transactional_id``; ``isolation_level=read_committed``, no
  auto-commit, ``auto_offset_reset=none`` (the service always seeks
  explicitly; an offset that is out of range is an error, never a silent
  reset past data).

Checkpoint marker. Besides the input offsets, every transaction commits, for
the same consumer group, the offset ``seq`` on partition 0 of the state topic
(``kafka.state_topic``): the sequence number of the journal checkpoint the
transaction carries. It moves atomically with the input offsets, so after a
crash the group's committed marker says exactly which journal checkpoint
reached Kafka (offset-commit *metadata* would do the same on Apache Kafka,
but the embedded broker drops it).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kerr
from kafka.structs import OffsetAndMetadata

from stream.config import KafkaSection
from stream.service.journal import JournalError
from stream.service.kafka_errors import FATAL_TYPES, KafkaIOError, wrap_error
from stream.service.progress import EndProbe, RecordTimeGuard, partition_frontier

__all__ = [
    "KafkaIOError",
    "OutRecord",
    "TransactionalWriter",
    "wrap_error",
    "client_options",
    "ensure_topics",
    "make_consumer",
    "make_producer",
    "assign_all",
    "committed_offsets",
    "committed_marker",
    "end_offsets",
    "read_tail",
    "transactional_id_for",
    "rejection_records",
    "InputReader",
    "RecordTimeRefused",
    "check_log_append_time",
    "topic_timestamp_type",
    "TopicMetadata",
    "FATAL_TYPES",
]

def transactional_id_for(k: KafkaSection, stream_id: str) -> str:
    """The stable transactional id of a stream (one writer per stream)."""
    return k.transactional_id or f"dpstream-{stream_id}"


def client_options(k: KafkaSection) -> dict[str, Any]:
    """Connection and security options shared by every client."""
    opts: dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in k.bootstrap_servers.split(",") if s.strip()],
        "client_id": k.client_id,
        "request_timeout_ms": k.request_timeout_ms,
        "security_protocol": k.security_protocol,
    }
    for name in ("sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
                 "ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        value = getattr(k, name)
        if value is not None:
            # secrets are SecretStr in the settings (never printed); kafka-python needs the clear text
            opts[name] = value.get_secret_value() if hasattr(value, "get_secret_value") else value
    return opts


def ensure_topics(k: KafkaSection, topics: Mapping[str, int], *, timeout_s: float = 30.0,
                  configs: Mapping[str, Mapping[str, str]] | None = None) -> list[str]:
    """Create the topics that are missing; returns the names created.

    Args:
        topics: name -> partition count for topics created here (existing
            topics are left as they are, whatever their partition count).
        configs: name -> topic configs for topics created here (e.g. the input
            topic's ``message.timestamp.type=LogAppendTime``).

    Raises:
        KafkaIOError: the cluster could not be reached or refused.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            remaining_ms = max(1000, int((deadline - time.monotonic()) * 1000))
            admin = KafkaAdminClient(**client_options(k), bootstrap_timeout_ms=remaining_ms)
            try:
                existing = set(admin.list_topics())
                missing = {name: n for name, n in topics.items() if name not in existing}
                if missing:
                    spec = {name: {"num_partitions": n, "replication_factor": k.replication_factor,
                                   **({"configs": dict(configs[name])} if configs and name in configs else {})}
                            for name, n in missing.items()}
                    try:
                        admin.create_topics(spec, timeout_ms=int(timeout_s * 1000), wait_for_metadata=True)
                    except kerr.TopicAlreadyExistsError:
                        pass  # another instance created it meanwhile
                return sorted(missing)
            finally:
                admin.close()
        except Exception as exc:  # noqa: BLE001 - classified below
            err = wrap_error(exc, "create topics")
            if not err.retriable or time.monotonic() > deadline:
                raise err from exc
            time.sleep(0.5)


#: Kafka's error code for a topic the cluster does not have (``UNKNOWN_TOPIC_OR_PARTITION``).
_UNKNOWN_TOPIC = kerr.UnknownTopicOrPartitionError.errno


class TopicMetadata:
    """The partitions of a few named topics, asked of the cluster in one metadata request for those
    names only (``KafkaAdminClient.describe_topics``: never every topic of the cluster, never creating
    one), over one admin connection kept between calls.

    A consumer's ``topics()`` fetches the metadata of *every* topic the client may see: on a shared
    production cluster with thousands of topics, the service's periodic integrity check
    (:mod:`stream.service.integrity`, every few seconds) would ask for all of them each time.
    """

    def __init__(self, k: KafkaSection, *, timeout_ms: int = 5000) -> None:
        self._k = k
        #: the longest one call waits (connecting and answering): at most ``kafka.request_timeout_ms``;
        #: the check runs between polls of the service loop, which must not stall for long
        self._timeout_ms = max(100, min(int(timeout_ms), int(k.request_timeout_ms)))
        self._admin: KafkaAdminClient | None = None

    def partitions(self, topics: Sequence[str]) -> dict[str, frozenset[int] | None]:
        """Topic name -> its partition ids, or None when the cluster does not have it.

        Raises:
            KafkaIOError: no answer, or the cluster refused (another error code than "unknown
                topic"); the admin connection is dropped and made again on the next call.
        """
        try:
            if self._admin is None:
                self._admin = KafkaAdminClient(**{**client_options(self._k), "request_timeout_ms": self._timeout_ms},
                                               bootstrap_timeout_ms=self._timeout_ms)
            answer = self._admin.describe_topics(list(topics))
        except Exception as exc:  # noqa: BLE001 - classified by wrap_error
            self.close()
            raise wrap_error(exc, "describe topics") from exc
        out: dict[str, frozenset[int] | None] = dict.fromkeys(topics)
        for topic in answer:
            code = int(topic.get("error_code") or 0)
            if code == _UNKNOWN_TOPIC:
                continue
            if code:
                raise wrap_error(kerr.for_code(code)(f"topic {topic.get('name')}"), "describe topics")
            out[topic["name"]] = frozenset(int(part["partition_index"]) for part in topic.get("partitions") or ())
        return out

    def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                admin.close()
            except Exception:  # noqa: BLE001, S110 - best effort
                pass


def topic_timestamp_type(k: KafkaSection, topic: str) -> str | None:
    """The topic's ``message.timestamp.type`` (``LogAppendTime`` / ``CreateTime``), or None when the
    cluster does not say (the embedded test broker fails ``describe_configs``)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    try:
        admin = KafkaAdminClient(**client_options(k))
    except Exception:  # noqa: BLE001 - "cannot tell" is an answer the caller handles
        return None
    try:
        answer = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"message.timestamp.type": None})],
            config_filter="all")
        return _find_config(answer, "message.timestamp.type")
    except Exception:  # noqa: BLE001 - e.g. the embedded broker (a KeyError inside kafka-python)
        return None
    finally:
        admin.close()
    return None


def _find_config(answer: Any, key: str) -> str | None:
    """The value of ``key`` in kafka-python's nested describe_configs answer
    (``{type: {name: {key: {"value": …}}}}``), or None."""
    if isinstance(answer, Mapping):
        if key in answer:
            data = answer[key]
            value = data.get("value") if isinstance(data, Mapping) else data
            return None if value is None else str(value)
        for sub in answer.values():
            found = _find_config(sub, key)
            if found is not None:
                return found
    return None


def make_consumer(k: KafkaSection, *, isolation_level: str = "read_committed",
                  group: bool = True, **extra: Any) -> KafkaConsumer:
    """The service's consumer: read_committed, no auto-commit, no silent reset.

    The group timeouts come from the configuration (the embedded broker only
    completes a JoinGroup after ``max_poll_interval_ms``; Apache Kafka waits
    ``group.initial.rebalance.delay.ms``); the service itself uses
    :func:`assign_all`, so it never waits for a rebalance.
    """
    opts = client_options(k)
    opts.update(
        group_id=k.group_id if group else None,
        enable_auto_commit=False,
        isolation_level=isolation_level,
        auto_offset_reset="none",
        max_poll_records=k.max_poll_records,
        max_partition_fetch_bytes=k.max_partition_fetch_bytes,
        max_poll_interval_ms=k.max_poll_interval_ms,
        session_timeout_ms=k.session_timeout_ms,
        heartbeat_interval_ms=k.heartbeat_interval_ms,
    )
    opts.update(extra)
    try:
        return KafkaConsumer(**opts)
    except Exception as exc:  # noqa: BLE001
        raise wrap_error(exc, "create consumer") from exc


def make_producer(k: KafkaSection, transactional_id: str | None, **extra: Any) -> KafkaProducer:
    """A transactional (or, with ``None``, idempotent) producer: acks=all."""
    opts = client_options(k)
    opts.update(
        acks="all",
        enable_idempotence=True,
        max_request_size=k.max_request_size,
        linger_ms=5,
    )
    if transactional_id is not None:
        opts.update(transactional_id=transactional_id, transaction_timeout_ms=k.transaction_timeout_ms)
    opts.update(extra)
    try:
        producer = KafkaProducer(**opts)
    except Exception as exc:  # noqa: BLE001
        raise wrap_error(exc, "create producer") from exc
    if transactional_id is not None:
        try:
            producer.init_transactions()
        except Exception as exc:  # noqa: BLE001
            producer.close(timeout=1)
            raise wrap_error(exc, "init transactions") from exc
    return producer


def assign_all(consumer: KafkaConsumer, topic: str, *, timeout_s: float = 30.0) -> list[TopicPartition]:
    """Assign every partition of ``topic`` to ``consumer`` (no group rebalance).

    A stream's timesteps span all partitions, so one service instance owns
    the whole input topic; the transactional id fences a second instance.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            parts = consumer.partitions_for_topic(topic)
        except Exception as exc:  # noqa: BLE001
            raise wrap_error(exc, f"read partitions of {topic}") from exc
        if parts:
            tps = [TopicPartition(topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            return tps
        if time.monotonic() > deadline:
            raise KafkaIOError(f"topic {topic!r} does not exist or has no partitions", retriable=True,
                               action="assign")
        time.sleep(0.2)


def committed_offsets(consumer: KafkaConsumer, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
    """The group's committed offsets (None where nothing was committed)."""
    out: dict[TopicPartition, int | None] = {}
    for tp in tps:
        try:
            out[tp] = consumer.committed(tp)
        except Exception as exc:  # noqa: BLE001
            raise wrap_error(exc, f"read committed offset of {tp.topic}[{tp.partition}]") from exc
    return out


def committed_marker(consumer: KafkaConsumer, state_topic: str) -> int | None:
    """The last journal checkpoint sequence number committed to Kafka, if any."""
    return committed_offsets(consumer, [TopicPartition(state_topic, 0)])[TopicPartition(state_topic, 0)]


def end_offsets(consumer: KafkaConsumer, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    try:
        return dict(consumer.end_offsets(list(tps)))
    except Exception as exc:  # noqa: BLE001
        raise wrap_error(exc, "read end offsets") from exc


def read_tail(k: KafkaSection, topic: str, *, key: bytes | None, last: int,
              timeout_s: float = 10.0) -> list[tuple[int, int, bytes]]:
    """The last ``last`` records of each partition of ``topic`` with this key.

    Read with ``read_uncommitted``: every record ever produced counts as
    published, including records of aborted transactions.

    Returns:
        (partition, offset, value) for matching records, in offset order
        per partition.
    """
    consumer = make_consumer(k, isolation_level="read_uncommitted", group=False,
                             auto_offset_reset="earliest", max_poll_records=5000, fetch_max_wait_ms=100)
    try:
        tps = assign_all(consumer, topic, timeout_s=timeout_s)
        ends = end_offsets(consumer, tps)
        starts = dict(consumer.beginning_offsets(tps))
        if all(ends[tp] <= starts.get(tp, 0) for tp in tps):
            return []  # nothing was ever produced (or everything was deleted): no poll to wait for
        for tp in tps:
            consumer.seek(tp, max(starts.get(tp, 0), ends[tp] - last))
        out: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + timeout_s
        # The embedded broker reports the end offset as the base offset of the
        # last record batch + 1, so "position >= end" is not the end there: read
        # until the end offsets are reached *and* a poll comes back empty.
        while True:
            if time.monotonic() > deadline:
                raise KafkaIOError(f"timed out reading the tail of {topic!r}", retriable=True,
                                   action="read tail")
            batch = consumer.poll(timeout_ms=200)
            for tp, records in batch.items():
                out.extend((tp.partition, r.offset, r.value) for r in records
                           if key is None or r.key == key)
            if not batch and all(consumer.position(tp) >= ends[tp] for tp in tps):
                break
        out.sort()
        return out
    except KafkaIOError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise wrap_error(exc, f"read tail of {topic}") from exc
    finally:
        consumer.close()


def _never(_name: str) -> bool:
    return False


@dataclass(frozen=True)
class OutRecord:
    """One record a transaction produces."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int | None = None
    #: the record's timestamp (epoch ms); None: the producer's clock. A release's is its public
    #: scheduled time under ``service.publish: on-schedule`` (:mod:`stream.service.schedule`)
    timestamp_ms: int | None = None


@dataclass
class TransactionalWriter:
    """Produces a batch of records and offsets as one Kafka transaction.

    ``failpoint`` (tests only) is called with ``"mid_produce"`` after half of
    the records were sent and flushed and with
    ``"after_produce_before_commit"`` before the commit.
    """

    producer: KafkaProducer
    group_metadata: Callable[[], Any]
    marker_topic: str
    failpoint: Callable[[str], None] = field(default=lambda _name: None)
    in_transaction: bool = False

    def commit(self, records: Sequence[OutRecord], offsets: Mapping[TopicPartition, int], seq: int) -> None:
        """begin; send every record; send offsets + the checkpoint marker; commit.

        On any error the transaction is aborted (best effort) and a
        :class:`KafkaIOError` is raised; the caller retries the *same*
        records (they are journaled), never new ones.
        """
        p = self.producer
        try:
            p.begin_transaction()
            self.in_transaction = True
            # the extra flush half-way exists only for the mid_produce failpoint (tests)
            half = len(records) // 2 if getattr(self.failpoint, "wants", _never)("mid_produce") else -1
            futures = []
            for i, r in enumerate(records):
                futures.append(p.send(r.topic, key=r.key, value=r.value, headers=list(r.headers) or None,
                                      partition=r.partition, timestamp_ms=r.timestamp_ms))
                if i + 1 == half:
                    p.flush()
                    self.failpoint("mid_produce")
            if half == 0:
                self.failpoint("mid_produce")
            p.flush()
            for f in futures:
                f.get(timeout=0)  # raises the send error, if any
            commit = {tp: OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()}
            commit[TopicPartition(self.marker_topic, 0)] = OffsetAndMetadata(seq, "", -1)
            p.send_offsets_to_transaction(commit, self.group_metadata())
            self.failpoint("after_produce_before_commit")
            p.commit_transaction()
            self.in_transaction = False
        except Exception as exc:  # noqa: BLE001
            err = wrap_error(exc, "produce checkpoint transaction")
            self.abort()
            raise err from exc

    def warm_up(self, seq: int) -> None:
        """An aborted transaction that only re-sends the current marker ``seq``.

        Locates the group and transaction coordinators at start-up (~0.2 s) instead of inside
        the first real checkpoint. Aborted, it changes nothing (and the offset it carries is the
        one already committed, so even a broker that wrongly applied it would change nothing).
        """
        p = self.producer
        try:
            p.begin_transaction()
            self.in_transaction = True
            p.send_offsets_to_transaction({TopicPartition(self.marker_topic, 0): OffsetAndMetadata(seq, "", -1)},
                                          self.group_metadata())
            p.abort_transaction()
            self.in_transaction = False
        except Exception as exc:  # noqa: BLE001
            err = wrap_error(exc, "warm up transactions")
            self.abort()
            raise err from exc

    def abort(self) -> None:
        """Abort the open transaction, if any (best effort)."""
        if not self.in_transaction:
            return
        self.in_transaction = False
        try:
            self.producer.abort_transaction()
        except Exception:  # noqa: BLE001, S110 - the next init/commit surfaces real problems
            pass


# -- dead-letter and late records ---------------------------------------------


def _element_bytes(payload: bytes, element: int, cache: dict[int, Any]) -> bytes | None:
    """The JSON of one element of an array message (re-encoded), or None."""
    key = id(payload)
    if key not in cache:
        try:
            cache[key] = json.loads(payload)
        except (ValueError, UnicodeDecodeError, RecursionError):
            cache[key] = None
    doc = cache[key]
    if isinstance(doc, list) and 0 <= element < len(doc):
        return json.dumps(doc[element], separators=(",", ":")).encode("ascii")
    return None


#: Bytes kept of a dead letter whose original is too large to copy (the original stays in the input topic).
DEAD_LETTER_PREFIX = 4096
#: Room left under ``kafka.max_request_size`` for the key, the headers and the record overhead.
DEAD_LETTER_HEADROOM = 64 * 1024


def dead_letter_limit(max_request_size: int) -> int:
    """Largest dead-letter value copied whole: ``max_request_size`` less 64 KiB of headroom
    (half of it for a request size under 128 KiB), so a dead letter is never refused by the producer."""
    if max_request_size > 2 * DEAD_LETTER_HEADROOM:
        return max_request_size - DEAD_LETTER_HEADROOM
    return max_request_size // 2


def bounded_value(value: bytes, limit: int) -> tuple[bytes, tuple[tuple[str, bytes], ...]]:
    """``value`` itself when at most ``limit`` bytes; else its first bytes and headers saying so.

    The headers of a shortened value: ``dpstream.truncated: true``,
    ``dpstream.original.bytes`` and ``dpstream.original.sha256`` (hex), so an
    operator can find and check the original, which stays in the input topic
    at the coordinates the other headers give.
    """
    if len(value) <= limit:
        return value, ()
    keep = min(DEAD_LETTER_PREFIX, max(limit // 2, 0))
    return value[:keep], (
        ("dpstream.truncated", b"true"),
        ("dpstream.original.bytes", str(len(value)).encode()),
        ("dpstream.original.sha256", hashlib.sha256(value).hexdigest().encode()),
    )


def safe_rejection_records(rejections: Any, *, input_topic: str, stream: str, limit: int,
                           timestamps: Mapping[Any, float] | None = None,
                           ) -> list[tuple[str, bytes, bytes, tuple[tuple[str, bytes], ...]]]:
    """:func:`rejection_records`, but one odd rejection never loses the others: on an error each
    rejection is tried alone, and one that still fails keeps its coordinates, reason and a
    bounded copy of its payload."""
    try:
        return rejection_records(rejections, input_topic=input_topic, stream=stream, limit=limit,
                                 timestamps=timestamps)
    except Exception:  # noqa: BLE001, S110 - isolate the rejection that breaks it
        pass
    out: list[tuple[str, bytes, bytes, tuple[tuple[str, bytes], ...]]] = []
    for rej in rejections:
        try:
            out += rejection_records([rej], input_topic=input_topic, stream=stream, limit=limit)
        except Exception:  # noqa: BLE001
            src = rej.source if isinstance(rej.source, tuple) else (None, None)
            value, cut = bounded_value(rej.payload or b"", limit)
            out.append(("late" if rej.late else "dead_letter", f"{src[0]}:{src[1]}".encode(), value,
                        (("dpstream.reason", rej.reason.encode()), *cut)))
    return out


def rejection_records(rejections: Iterable[Any], *, input_topic: str, stream: str,
                      limit: int = dead_letter_limit(1_048_576),
                      timestamps: Mapping[Any, float] | None = None,
                      ) -> list[tuple[str, bytes, bytes, tuple[tuple[str, bytes], ...]]]:
    """Dead-letter / late records for rejected events: ``(role, key, value, headers)``.

    The value is the original message bytes; for one event inside a JSON
    array message it is that event's JSON (re-encoded; the header
    ``dpstream.source.element`` says which), so a bad event in a 500-event
    message does not copy the other 499. A value over ``limit`` bytes is cut
    to a prefix (:func:`bounded_value`): no record can make the dead-letter
    producer fail, so none can stop the stream. The key is
    ``partition:offset[:element]`` (deterministic: consumers can drop
    duplicates by key). Headers carry the reason code, a short detail and the
    source coordinates (topic, partition, offset, and the record timestamp in
    epoch milliseconds when ``timestamps`` has it).
    """
    out = []
    cache: dict[int, Any] = {}
    for rej in rejections:
        source = rej.source if isinstance(rej.source, tuple) else (None, None)
        partition, offset = source[0], source[1]
        role = "late" if rej.late else "dead_letter"
        payload = rej.payload if rej.payload is not None else b""
        value = payload
        coords = f"{partition}:{offset}"
        headers = [
            ("dpstream.reason", rej.reason.encode()),
            ("dpstream.detail", rej.detail[:200].encode("utf-8", "replace")),
            ("dpstream.stream", stream.encode()),
            ("dpstream.source.topic", input_topic.encode()),
            ("dpstream.source.partition", str(partition).encode()),
            ("dpstream.source.offset", str(offset).encode()),
        ]
        if timestamps is not None and source in timestamps:
            headers.append(("dpstream.source.timestamp", str(round(timestamps[source] * 1000)).encode()))
        if rej.element is not None:
            element_value = _element_bytes(payload, int(rej.element), cache) if len(payload) <= limit else None
            if element_value is not None:
                value = element_value
            coords += f":{rej.element}"
            headers.append(("dpstream.source.element", str(rej.element).encode()))
        value, cut = bounded_value(value, limit)
        out.append((role, coords.encode(), value, (*headers, *cut)))
    return out


# -- reading the input topic ----------------------------------------------------


class InputReader:
    """Reads every partition of the input topic; says how far each is known complete.

    One consumer per partition (all ``read_committed``, no auto-commit,
    ``auto_offset_reset=none``, assigned — never subscribed — so no group
    rebalance), plus a ``read_uncommitted`` consumer outside any group that only asks
    for end offsets (:class:`stream.service.progress.EndProbe`). Why a consumer per
    partition: kafka-python returns one partition's fetched records before another's,
    and pausing partitions hits a kafka-python bug (a partition paused while its
    records are buffered is never fetched again after it is resumed); with a consumer
    per partition the service decides what to read.

    Alignment (an optimisation only: it decides *when* a partition is read, never
    whether a timestep is complete). In the record-time modes partitions are aligned
    on **record time**, which the broker assigns: a partition whose largest record
    time is more than ``slack_s`` ahead of the slowest partition that still has
    records to read is not polled until that one catches up. No quantity a person
    controls (event time, attributes, key) decides when a partition is read
    (issue 27 item 1: aligning on event time let one far-ahead event pause a
    partition). The legacy watermark mode aligns on event time (:meth:`observe`), as
    before. If the slowest partition delivers nothing for ``max_wait_s`` it stops
    holding the others back: alignment is never a reason to stall.

    Completeness (:meth:`record_frontier`) is decided from record times read and
    fresh end offsets with the time they were observed, never from a consumer's
    cached high watermark alone (:mod:`stream.service.progress`). Every record is
    checked against the record-time assumptions before it is returned
    (:class:`stream.service.progress.RecordTimeGuard`).

    ``clients`` (tests): ``(control, {partition: consumer}, end probe consumer)``
    instead of connecting; ``clock``: the public wall clock (float seconds).
    """

    def __init__(self, k: KafkaSection, topic: str, *, slack_s: float, max_wait_s: float = 2.0,
                 timeout_s: float = 30.0, record_time: str | None = None, skew_s: float = 0.0,
                 clients: tuple[Any, Mapping[int, Any], Any] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.k = k
        self.topic = topic
        self.slack = float(slack_s)
        self.max_wait = float(max_wait_s)
        mode = k.record_time if record_time is None else record_time
        self.guard = RecordTimeGuard(mode, skew_s, topic)
        self.align_on_record = self.guard.active
        if clients is not None:
            self.control, consumers, probe = clients
            self.consumers: dict[int, Any] = dict(consumers)
            self.tps = [TopicPartition(topic, p) for p in sorted(self.consumers)]
        else:
            self.control = make_consumer(k)  # group metadata and committed offsets
            try:
                parts = assign_all(self.control, topic, timeout_s=timeout_s)
            except BaseException:
                self.control.close()
                raise
            self.control.assign([])
            self.tps = parts
            self.consumers = {}
            for tp in parts:
                c = make_consumer(k)
                c.assign([tp])
                self.consumers[tp.partition] = c
            probe = make_consumer(k, isolation_level="read_uncommitted", group=False)
        self.probe = EndProbe(probe, clock=clock)
        self.times: dict[int, float] = {}  # event-time alignment (watermark mode only)
        self._empty_since: dict[int, float] = {}

    @property
    def partitions(self) -> list[int]:
        return [tp.partition for tp in self.tps]

    def group_metadata(self) -> Any:
        return self.control.group_metadata()

    def seek(self, positions: Mapping[int, int]) -> None:
        """Position every partition: at ``positions[p]``, or at its beginning."""
        for tp in self.tps:
            c = self.consumers[tp.partition]
            if tp.partition in positions:
                c.seek(tp, positions[tp.partition])
            else:
                c.seek_to_beginning(tp)

    def observe(self, partition: int, max_event_time: float) -> None:
        """Watermark mode: a partition's largest accepted event time (its alignment key). In the
        record-time modes event times are ignored here: a person chooses them."""
        if self.align_on_record:
            return
        if max_event_time > self.times.get(partition, float("-inf")):
            self.times[partition] = max_event_time

    def _key(self, partition: int) -> float:
        """A partition's alignment key: its largest record time (record modes) or event time."""
        source = self.guard.largest if self.align_on_record else self.times
        return source.get(partition, float("-inf"))

    def _eligible(self, positions: Mapping[int, int], now: float) -> list[int]:
        if len(self.tps) < 2:
            return self.partitions
        lagging = []
        for tp in self.tps:
            high = self.consumers[tp.partition].highwater(tp)
            pos = positions.get(tp.partition)
            behind = high is None or pos is None or pos < high
            since = self._empty_since.get(tp.partition)
            starved = since is not None and now - since > self.max_wait
            if behind and not starved:
                lagging.append(tp.partition)
        if not lagging:
            return self.partitions
        floor = min(self._key(p) for p in lagging)
        eligible = [p for p in self.partitions if self._key(p) <= floor + self.slack]
        return eligible or self.partitions

    def poll(self, timeout_s: float, max_records: int, positions: Mapping[int, int]) -> list[tuple[int, list[Any]]]:
        """Records from the eligible partitions, slowest first.

        Raises:
            KafkaIOError: from the consumer (offset out of range is fatal);
                :class:`stream.service.progress.RecordTimeViolation` (fatal) when a record breaks
                a record-time assumption — nothing of this poll is returned.
        """
        now = time.monotonic()
        eligible = sorted(self._eligible(positions, now), key=self._key)
        out: list[tuple[int, list[Any]]] = []
        polled: set[int] = set()
        budget = max_records
        p = eligible[0] if eligible else -1
        try:
            for p in eligible:
                if budget <= 0:
                    break
                polled.add(p)
                for records in self.consumers[p].poll(timeout_ms=0, max_records=budget).values():
                    if records:
                        out.append((p, records))
                        budget -= len(records)
            if not out:  # nothing buffered: wait a little on each eligible partition
                share = max(1, int(timeout_s * 1000 / max(1, len(eligible))))
                for p in eligible:
                    polled.add(p)
                    for records in self.consumers[p].poll(timeout_ms=share, max_records=max_records).values():
                        if records:
                            out.append((p, records))
                    if out:
                        break
        except (kerr.UnsupportedCodecError, kerr.CorruptRecordError) as exc:
            from stream.service.codecs import undecodable_message

            raise KafkaIOError(undecodable_message(self.topic, p, self.position(p), exc), retriable=False,
                               action=f"poll {self.topic}") from exc
        except Exception as exc:  # noqa: BLE001
            raise wrap_error(exc, f"poll {self.topic}") from exc
        for part, records in out:  # fail closed before anything of this poll is used
            self.guard.check(part, records)
        delivered = {p for p, _ in out}
        for p in self.partitions:
            if p in polled and p not in delivered:
                self._empty_since.setdefault(p, now)
            else:
                self._empty_since.pop(p, None)
        return out

    def position(self, partition: int) -> int | None:
        """The consumer's position: past transaction markers, unlike "last record offset + 1"."""
        tp = next(tp for tp in self.tps if tp.partition == partition)
        try:
            return int(self.consumers[partition].position(tp))
        except Exception:  # noqa: BLE001 - unknown position: the caller keeps its own
            return None

    def record_frontier(self, positions: Mapping[int, int], record_times: Mapping[int, float], now: float,
                        skew: float) -> float:
        """Record time every assigned partition is known to be past (float seconds).

        Per partition (:func:`stream.service.progress.partition_frontier`): the largest record
        time read from it; once it has been read to an end offset observed at wall time
        ``observed_at`` (fresh, ``read_uncommitted``), at least ``observed_at − skew`` — never
        ``now − skew`` from a cached high watermark. The stream's frontier is the slowest
        partition's. Decides only *when* timesteps are complete
        (:meth:`stream.ingest.windowing.Windower.complete`), never what they hold. ``now``
        (the caller's wall clock) only caps the observation times.
        """
        highs = {tp: self.consumers[tp.partition].highwater(tp) for tp in self.tps}
        # Where each partition is read up to: the caller's processed offsets, or the consumer's own
        # position when further (everything a poll returned was processed before this call; a poll
        # that only moves past a transaction marker returns no records, so the caller never sees
        # that move: issue 28 item 3, a quiet transactional upstream's last timestep never completed).
        pos: dict[int, int | None] = {}
        for tp in self.tps:
            mine, theirs = positions.get(tp.partition), self.position(tp.partition)
            pos[tp.partition] = theirs if mine is None else mine if theirs is None else max(mine, theirs)
        # only a partition read up to what its last fetch reported can be at its end: ask for those
        ask = [tp for tp in self.tps
               if pos[tp.partition] is not None and (highs[tp] is None or pos[tp.partition] >= highs[tp])]
        try:
            ends = self.probe.observe(ask)
        except KafkaIOError:  # no fresh evidence this time: the last observations still hold
            ends = {tp: self.probe.last[tp] for tp in ask if tp in self.probe.last}
        out = float("inf")
        for tp in self.tps:
            p = tp.partition
            end = ends.get(tp)
            if end is not None and end.observed_at > now:
                end = type(end)(end.offset, now)
            out = min(out, partition_frontier(record_times.get(p), pos[p], end, highs[tp], skew))
        return out

    def fetched_high(self, partition: int) -> int | None:
        """The high watermark the partition's last fetch reported (None before any fetch)."""
        tp = next(tp for tp in self.tps if tp.partition == partition)
        return self.consumers[partition].highwater(tp)

    def caught_up(self, positions: Mapping[int, int]) -> bool:
        """True when every partition was read up to its last known high watermark."""
        for tp in self.tps:
            high = self.consumers[tp.partition].highwater(tp)
            if high is None or positions.get(tp.partition, 0) < high:
                return False
        return True

    def committed(self) -> dict[int, int | None]:
        return {tp.partition: off for tp, off in committed_offsets(self.control, self.tps).items()}

    def end_offsets(self) -> dict[int, int]:
        """Per partition, the end a ``read_committed`` consumer can read to (the last stable offset)."""
        return {tp.partition: off for tp, off in end_offsets(self.control, self.tps).items()}

    def log_ends(self) -> dict[int, int]:
        """Per partition, the log's end (``read_uncommitted``: the high watermark), asked now.

        Unlike the last stable offset, it never falls behind a position already read while an
        upstream transaction is open (the embedded broker even answers 0 for the last stable
        offset then): the end to compare a committed position with (:mod:`stream.service.integrity`).
        """
        return {tp.partition: off for tp, off in end_offsets(self.probe.consumer, self.tps).items()}

    def close(self) -> None:
        for c in [*self.consumers.values(), self.control]:
            try:
                c.close(autocommit=False)
            except Exception:  # noqa: BLE001, S110 - best effort on the way out
                pass
        self.probe.close()


class RecordTimeRefused(JournalError):
    """The input topic's record timestamps cannot be confirmed broker-stamped: refuse to start (exit 2)."""


def output_timestamp_warning(settings: Any,
                             timestamp_type: Callable[[KafkaSection, str], str | None] | None = None) -> str | None:
    """A warning when ``service.publish: on-schedule`` stamps each release with its scheduled time
    ``S(c)`` but the output topic reports ``message.timestamp.type=LogAppendTime``: the broker then
    overwrites that timestamp with the append time ``S(c) + δ`` (``docs/privacy.md`` §1.3). None when
    the topic keeps the producer's timestamp, when the cluster does not say, or with ``when-complete``.

    Not fatal: the append time tells what the release's arrival already tells; what is lost is the
    documented, data-independent record timestamp that dashboards can rely on.
    """
    if settings.service.publish != "on-schedule":
        return None
    k = settings.kafka
    if (timestamp_type or topic_timestamp_type)(k, k.output_topic) != "LogAppendTime":
        return None
    return ("the output topic has message.timestamp.type=LogAppendTime: the broker replaces each release's "
            "scheduled timestamp S(c) with its append time. Fix: kafka-configs --alter --entity-type topics "
            f"--entity-name {k.output_topic} --add-config message.timestamp.type=CreateTime")


def check_log_append_time(k: KafkaSection,
                          timestamp_type: Callable[[KafkaSection, str], str | None] | None = None) -> None:
    """With ``kafka.record_time: log-append-time``, refuse unless the input topic confirms
    ``message.timestamp.type=LogAppendTime`` (every process that decides inclusion checks it).

    ``timestamp_type`` asks the cluster (default :func:`topic_timestamp_type`; the loop passes its
    own reference, which the in-memory test Kafka replaces).

    Raises:
        RecordTimeRefused: the topic reports another type, or none.
    """
    if k.record_time != "log-append-time":
        return
    kind = (timestamp_type or topic_timestamp_type)(k, k.input_topic)
    if kind != "LogAppendTime":
        raise RecordTimeRefused(
            f"kafka.record_time is log-append-time but the input topic {k.input_topic!r} reports "
            f"message.timestamp.type={kind or 'unknown (the cluster did not say)'}: producers would "
            "choose the record times that decide which events count, so one person's clock could "
            "move other people's events out of their timestep. Fix: set the topic config "
            "message.timestamp.type=LogAppendTime (kafka-configs --alter --entity-type topics "
            f"--entity-name {k.input_topic} --add-config message.timestamp.type=LogAppendTime), or, "
            "only if every producer's clock is trusted, set kafka.record_time: trusted-create-time")
