"""A Kafka cluster that comes back without the stream's data is noticed every time (issue 34 item 2).

The embedded broker keeps topics in memory: killed and started again on the same port it
answers with no topics, as a cluster restored without its data would. The service must go
not-ready with the cause, log it once, and stop (``service.on_cluster_loss: stop``, exit 1) or
wait without releasing (``wait``) — never stay ready and silent. The comparison itself
(:func:`stream.service.integrity.cluster_loss`) is checked case by case first.
"""

from __future__ import annotations

import io
import json
import logging
import time

import pytest

from stream.service.broker import EmbeddedBroker
from stream.service.integrity import ClusterView, cluster_loss
from stream.service.logs import JsonFormatter
from tests.kafka_harness import (
    InProcessService,
    event,
    heartbeat,
    produce,
    service_config,
    settings_from,
    wait_for,
)

OK = ClusterView(frozenset({0, 1}), {0: 10, 1: 7}, True, 4)


def _loss(view: ClusterView, committed_seq: int = 4) -> str | None:
    return cluster_loss(view, input_topic="in", output_topic="out", reading=frozenset({0, 1}),
                        committed={0: 10, 1: 5}, committed_seq=committed_seq)


@pytest.mark.parametrize("view, words", [
    (OK, None),
    (ClusterView(frozenset({0, 1}), {0: 12, 1: 7}, True, 5), None),  # the cluster moved on: fine
    (ClusterView(frozenset(), {}, True, 4), "input topic in is gone"),
    (ClusterView(frozenset({0}), {0: 10}, True, 4), "lost partition(s) 1"),
    (ClusterView(frozenset({0, 1}), {0: 0, 1: 0}, True, 4), "input partition 0 ends at offset 0, before the position 10"),
    (ClusterView(frozenset({0, 1}), {0: 10, 1: 7}, False, 4), "output topic out is gone"),
    (ClusterView(frozenset({0, 1}), {0: 10, 1: 7}, True, None), "holds checkpoint none"),
    (ClusterView(frozenset({0, 1}), {0: 10, 1: 7}, True, 3), "holds checkpoint 3 on the state topic, but checkpoint 4"),
])
def test_each_contradiction_is_named(view, words):
    cause = _loss(view)
    if words is None:
        assert cause is None
    else:
        assert cause is not None and words in cause and "dpstream does not reset by itself" in cause


def test_a_short_end_with_a_fetch_past_the_position_is_the_test_brokers_batch_offset():
    """The embedded broker answers ListOffsets with the last batch's base offset + 1: an end below
    the committed position is a loss only if the partition is empty or no fetch reached past it."""
    def view(end, high):
        return ClusterView(frozenset({0, 1}), {0: end, 1: 7}, True, 4, {0: high, 1: 7})
    assert _loss(view(3, 10)) is None  # one batch of many records: its base offset + 1 is 3
    assert "ends at offset 3" in _loss(view(3, 5))  # no fetch got past 5: truncated
    assert "ends at offset 3" in _loss(view(3, None))
    assert "ends at offset 0" in _loss(view(0, 10))  # empty: a lost log, whatever an old fetch said


def test_no_marker_is_expected_before_the_first_commit():
    assert _loss(ClusterView(frozenset({0, 1}), {0: 10, 1: 7}, True, None), committed_seq=0) is None


def _one_release(bootstrap: str, topic: str, svc: InProcessService) -> None:
    """Five events in timestep 0 and a heartbeat past it: the service releases once and commits a
    position past 0."""
    produce(bootstrap, topic, [json.dumps(event(f"p{i}", 0)).encode() for i in range(5)], partitions=1)
    heartbeat(bootstrap, topic, 1, partitions=1)
    wait_for(lambda: svc.published() >= 1, what="a release (a committed position past 0)")


def _json_log() -> tuple[logging.Handler, io.StringIO]:
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter())
    return handler, buf


@pytest.mark.kafka
@pytest.mark.parametrize("mode", ["stop", "wait"])
def test_a_broker_that_comes_back_empty_is_noticed(tmp_path, mode):
    b = EmbeddedBroker.start()
    root = logging.getLogger("dpstream")
    handler, buf = _json_log()
    root.addHandler(handler)
    b2 = None
    try:
        cfg = service_config(b.bootstrap, tmp_path, service={"on_cluster_loss": mode})
        settings = settings_from(cfg)
        k = settings.kafka
        with InProcessService(settings) as svc:
            _one_release(b.bootstrap, k.input_topic, svc)
            released = svc.published()
            port = b.port
            b.stop()
            b2 = EmbeddedBroker.start(port=port)  # same address, no topics, no groups
            wait_for(lambda: not svc.health.is_ready() and "lost" in svc.health.view()[1], timeout=60,
                     what="not ready with the cause")
            reason = svc.health.view()[1]
            assert "the cluster lost data the stream's state depends on" in reason, reason
            assert svc.metric("dpstream_cluster_lost") == 1
            if mode == "stop":
                svc.thread.join(60)
                assert svc.exit_code == 1
            else:
                assert svc.thread.is_alive()  # waiting, not ready, releasing nothing
                assert svc.published() == released
                assert svc.stop() == 0
    finally:
        root.removeHandler(handler)
        (b2 or b).stop()
        b.stop()
    lines = [json.loads(x) for x in buf.getvalue().splitlines() if x.strip()]
    lost = [x for x in lines if x.get("event", "").startswith("the Kafka cluster lost the stream's data")]
    assert len(lost) == 1, lost  # logged once
    assert lost[0]["on_cluster_loss"] == mode and lost[0]["level"] == "ERROR"


@pytest.mark.kafka
def test_an_open_upstream_transaction_is_not_a_lost_log(tmp_path, monkeypatch):
    """While a producer holds a transaction open on the input, the last stable offset can be below
    the position already read (the embedded broker answers 0 for it): the check compares with the
    log's end instead, so a healthy service stays ready. This stopped the scale-out releaser, whose
    input (the shuffle topic) always has a worker's transaction open, whenever a check fell inside it."""
    from kafka import KafkaProducer

    from tests.kafka_harness import T0

    monkeypatch.setattr("stream.service.loop.CLUSTER_CHECK_INTERVAL_S", 0.3)
    b = EmbeddedBroker.start()
    tx = None
    try:
        settings = settings_from(service_config(b.bootstrap, tmp_path))
        k = settings.kafka
        with InProcessService(settings) as svc:
            _one_release(b.bootstrap, k.input_topic, svc)
            # from here on every check asks for its two topics only, never the metadata of every
            # topic of the cluster (a shared production cluster may hold thousands)
            from kafka import KafkaAdminClient, KafkaConsumer

            wide: list[str] = []
            for cls, name in ((KafkaConsumer, "_fetch_all_topic_metadata"), (KafkaConsumer, "topics"),
                              (KafkaAdminClient, "list_topics")):
                real = getattr(cls, name)
                monkeypatch.setattr(cls, name, lambda *a, _real=real, _name=name, **kw: (wide.append(_name),
                                                                                           _real(*a, **kw))[1])
            from stream.service.kafka_io import TopicMetadata

            asked: list[list[str]] = []
            named = TopicMetadata.partitions
            monkeypatch.setattr(TopicMetadata, "partitions",
                                lambda self, topics: (asked.append(list(topics)), named(self, topics))[1])
            tx = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id="upstream")
            tx.init_transactions()
            tx.begin_transaction()
            tx.send(k.input_topic, json.dumps(event("late", 3)).encode(), partition=0,
                    timestamp_ms=int((T0 + 3600) * 1000))
            tx.flush()  # sent, not committed: the transaction stays open
            deadline = time.monotonic() + 3.0  # about ten checks
            while time.monotonic() < deadline:
                assert svc.health.is_ready(), svc.health.view()
                time.sleep(0.1)
            assert svc.metric("dpstream_cluster_lost") == 0
            assert svc.exit_code is None and svc.thread.is_alive()
            assert len(asked) >= 3, f"the cluster check ran {len(asked)} times in 3 s (every 0.3 s expected)"
            assert all(sorted(t) == sorted([k.input_topic, k.output_topic]) for t in asked), asked
            assert not wide, f"the cluster check asked for every topic's metadata: {wide}"
            tx.abort_transaction()
            assert svc.stop() == 0
    finally:
        if tx is not None:
            tx.close(timeout=2)
        b.stop()
