"""kafka_io against the real embedded broker: topics, transactions, markers, errors."""

from __future__ import annotations

import pytest
from kafka import TopicPartition
from kafka import errors as kerr

from stream.config import KafkaSection
from stream.service.broker import EmbeddedBroker, free_port
from stream.service.kafka_io import (
    KafkaIOError,
    OutRecord,
    TopicMetadata,
    TransactionalWriter,
    assign_all,
    committed_marker,
    committed_offsets,
    ensure_topics,
    make_consumer,
    make_producer,
    read_tail,
    wrap_error,
)
from tests.kafka_harness import broker, kafka_section, produce, read_all  # noqa: F401

pytestmark = pytest.mark.kafka


def _section(b: EmbeddedBroker) -> KafkaSection:
    return KafkaSection(**kafka_section(b.bootstrap))


def test_broker_starts_on_a_free_port_and_stops():
    b = EmbeddedBroker.start()
    try:
        assert b.alive and b.bootstrap.startswith("127.0.0.1:")
    finally:
        b.stop()
    assert not b.alive
    b.stop()  # idempotent


def test_a_killed_parent_takes_its_broker_with_it():
    """A test or demo killed with SIGKILL must not leave an orphaned broker holding a port."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = ("from stream.service.broker import EmbeddedBroker\n"
            "b = EmbeddedBroker.start()\n"
            "print(b.process.pid, flush=True)\n"
            "import time; time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        broker_pid = int(parent.stdout.readline())  # type: ignore[union-attr]
        os.kill(broker_pid, 0)  # the broker is running
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(broker_pid, 0)
            except ProcessLookupError:
                return
            try:  # reap it if it became our zombie (it is not our child, so normally init does)
                os.waitpid(broker_pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.1)
        os.kill(broker_pid, signal.SIGKILL)
        raise AssertionError("the broker outlived its killed parent")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_broker_on_an_explicit_port():
    port = free_port()
    with EmbeddedBroker.start(port) as b:
        assert b.port == port


def test_ensure_topics_creates_only_missing(broker):  # noqa: F811
    k = _section(broker)
    created = ensure_topics(k, {k.input_topic: 3, k.output_topic: 1})
    assert created == sorted([k.input_topic, k.output_topic])
    assert ensure_topics(k, {k.input_topic: 3, k.late_topic: 1}) == [k.late_topic]
    c = make_consumer(k)
    try:
        assert len(assign_all(c, k.input_topic)) == 3
    finally:
        c.close()


def test_topic_metadata_names_its_topics_only_and_creates_none(broker):  # noqa: F811
    """The integrity check's metadata: partitions of the named topics, None for a missing one, and
    asking for a missing topic does not create it (a consumer's metadata request may)."""
    k = _section(broker)
    ensure_topics(k, {k.input_topic: 3, k.output_topic: 1, "bystander": 2})
    meta = TopicMetadata(k)
    try:
        got = meta.partitions([k.input_topic, k.output_topic, "gone"])
        assert got == {k.input_topic: frozenset({0, 1, 2}), k.output_topic: frozenset({0}), "gone": None}
        assert "bystander" not in got
        assert meta.partitions(["gone"]) == {"gone": None}  # asked twice: still not created
    finally:
        meta.close()
    assert ensure_topics(k, {"gone": 1}) == ["gone"]  # it did not exist: created only now


def test_topic_metadata_of_an_unreachable_cluster_is_a_retriable_error_and_a_short_wait():
    """The service loop runs the check between polls: an unreachable cluster costs it the check's own
    bound (1 s here), not ``kafka.request_timeout_ms`` (30 s by default)."""
    import time

    meta = TopicMetadata(KafkaSection(bootstrap_servers=f"127.0.0.1:{free_port()}"), timeout_ms=1000)
    started = time.monotonic()
    with pytest.raises(KafkaIOError) as info:
        meta.partitions(["x"])
    assert info.value.retriable
    assert time.monotonic() - started < 15, "waited for kafka.request_timeout_ms, not the check's bound"
    meta.close()


def test_transaction_commits_records_offsets_and_marker_together(broker):  # noqa: F811
    k = _section(broker)
    ensure_topics(k, {k.input_topic: 2, k.output_topic: 1, k.state_topic: 1, k.dead_letter_topic: 1})
    produce(broker.bootstrap, k.input_topic, [b"a", b"b", b"c", b"d"], partitions=2)
    consumer = make_consumer(k)
    producer = make_producer(k, "txn-roundtrip")
    try:
        tps = assign_all(consumer, k.input_topic)
        for tp in tps:
            consumer.seek(tp, 0)
        polled = 0
        while polled < 4:
            polled += sum(len(v) for v in consumer.poll(timeout_ms=500).values())
        writer = TransactionalWriter(producer, consumer.group_metadata, k.state_topic)
        writer.commit(
            [OutRecord(k.output_topic, b"s", b'{"x":1}'),
             OutRecord(k.dead_letter_topic, b"0:1", b"raw", (("dpstream.reason", b"malformed_json"),))],
            {tps[0]: 2, tps[1]: 2}, seq=1,
        )
        assert committed_marker(consumer, k.state_topic) == 1
        assert committed_offsets(consumer, tps) == {tps[0]: 2, tps[1]: 2}
        # a second checkpoint moves the marker with the offsets
        writer.commit([OutRecord(k.output_topic, b"s", b'{"x":2}')], {tps[0]: 2, tps[1]: 2}, seq=2)
        assert committed_marker(consumer, k.state_topic) == 2
        out = read_all(broker.bootstrap, k.output_topic, isolation_level="read_committed", expect=2)
        assert [r.value for r in out] == [b'{"x":1}', b'{"x":2}']
        dead = read_all(broker.bootstrap, k.dead_letter_topic, expect=1)
        assert dead[0].headers == [("dpstream.reason", b"malformed_json")]
    finally:
        producer.close(timeout=2)
        consumer.close()


def test_an_aborted_transaction_does_not_move_the_marker(broker):  # noqa: F811
    k = _section(broker)
    ensure_topics(k, {k.input_topic: 1, k.output_topic: 1, k.state_topic: 1})
    consumer = make_consumer(k)
    producer = make_producer(k, "txn-abort")
    try:
        tps = assign_all(consumer, k.input_topic)
        writer = TransactionalWriter(producer, consumer.group_metadata, k.state_topic)
        writer.commit([OutRecord(k.output_topic, b"s", b"one")], {tps[0]: 0}, seq=1)

        def boom(name: str) -> None:
            if name == "after_produce_before_commit":
                raise kerr.KafkaTimeoutError("injected")

        writer.failpoint = boom
        with pytest.raises(KafkaIOError) as info:
            writer.commit([OutRecord(k.output_topic, b"s", b"two")], {tps[0]: 0}, seq=2)
        assert info.value.retriable
        assert committed_marker(consumer, k.state_topic) == 1
        # The embedded broker shows aborted records even to read_committed readers
        # (broker.md): this is why everything produced is journaled first.
        writer.failpoint = lambda name: None
        writer.commit([OutRecord(k.output_topic, b"s", b"two")], {tps[0]: 0}, seq=2)
        assert committed_marker(consumer, k.state_topic) == 2
    finally:
        producer.close(timeout=2)
        consumer.close()


def test_read_tail_filters_by_key_and_sees_everything_produced(broker):  # noqa: F811
    k = _section(broker)
    ensure_topics(k, {k.output_topic: 2})
    produce(broker.bootstrap, k.output_topic, [b"m%d" % i for i in range(10)], key=b"mine", partitions=2)
    produce(broker.bootstrap, k.output_topic, [b"other"], key=b"theirs")
    tail = read_tail(k, k.output_topic, key=b"mine", last=3)
    values = {v for _, _, v in tail}
    # the last records of each partition (the embedded broker's end offsets
    # lag by up to one record batch, so a few more may come), never other keys
    assert {b"m6", b"m7", b"m8", b"m9"} <= values
    assert all(v.startswith(b"m") for v in values)


def test_read_tail_of_an_empty_topic_and_of_a_single_record(broker):  # noqa: F811
    # an empty topic is answered from its offsets (no poll to wait for); one record is not
    # mistaken for an empty partition (the embedded broker's end offset is then 1, not past it)
    k = _section(broker)
    ensure_topics(k, {k.output_topic: 2})
    assert read_tail(k, k.output_topic, key=None, last=5) == []
    produce(broker.bootstrap, k.output_topic, [b"only"], partitions=2)
    assert [v for _, _, v in read_tail(k, k.output_topic, key=None, last=5)] == [b"only"]


def test_auto_offset_reset_is_none(broker):  # noqa: F811
    k = _section(broker)
    ensure_topics(k, {k.input_topic: 1})
    c = make_consumer(k)
    try:
        tps = assign_all(c, k.input_topic)
        c.seek(tps[0], 10_000)  # beyond the end
        produce(broker.bootstrap, k.input_topic, [b"x"])
        assert c.config["auto_offset_reset"] == "none"
        assert c.config["isolation_level"] == "read_committed"
        assert c.config["enable_auto_commit"] is False
    finally:
        c.close()


def test_errors_say_whether_they_are_retriable():
    assert wrap_error(kerr.KafkaTimeoutError("t"), "x").retriable
    assert wrap_error(kerr.NotCoordinatorError("t"), "x").retriable
    assert not wrap_error(kerr.ProducerFencedError("f"), "x").retriable
    assert not wrap_error(kerr.TopicAuthorizationFailedError("a"), "x").retriable
    assert not wrap_error(ValueError("v"), "x").retriable
    err = wrap_error(kerr.ProducerFencedError("f"), "commit transaction")
    assert "fatal" in str(err) and err.action == "commit transaction"


def test_unreachable_cluster_is_a_retriable_error():
    k = KafkaSection(bootstrap_servers=f"127.0.0.1:{free_port()}", request_timeout_ms=1000)
    with pytest.raises(KafkaIOError) as info:
        ensure_topics(k, {"x": 1}, timeout_s=1.0)
    assert info.value.retriable


def test_producer_settings_are_exactly_once(broker):  # noqa: F811
    k = _section(broker)
    p = make_producer(k, "txn-settings")
    try:
        assert p.config["acks"] == -1 or p.config["acks"] == "all"
        assert p.config["enable_idempotence"] is True
        assert p.config["transactional_id"] == "txn-settings"
    finally:
        p.close(timeout=2)
    _ = TopicPartition  # re-exported type used by callers


def test_a_timed_out_transactional_request_is_retriable_and_fencing_is_not():
    """kafka-python reports a failed transactional request as a plain KafkaError naming the broker
    error: a timeout (a hung broker) is retried with a fresh producer, fencing stops the service."""
    import kafka.errors as kerr

    from stream.service.kafka_io import wrap_error

    def classify(text):
        return wrap_error(kerr.KafkaError(f"Could not execute transactional request for unknown reasons: {text}"),
                          "commit").retriable

    assert classify("[Error 7] RequestTimedOutError: Request timed out after 9999 ms")
    assert classify("[Error 15] CoordinatorNotAvailableError")
    assert not classify("[Error 90] ProducerFencedError")
    assert not classify("something else")
    assert not wrap_error(kerr.TopicAuthorizationFailedError("RequestTimedOutError"), "commit").retriable
