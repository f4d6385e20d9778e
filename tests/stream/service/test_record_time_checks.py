"""What the inclusion proof assumes, enforced on every record (issue 27 item 4, ``docs/privacy.md`` §1.1).

* ``log-append-time``: a record whose ``timestamp_type`` is CreateTime (the topic was switched
  after start-up) stops the reader and the scale-out worker before anything of its poll is used;
* record time going backwards on a partition by more than ``stream.clock_skew`` stops them too
  (within the skew it is allowed: that is what the skew is for);
* the scale-out shuffle topic must have exactly one partition: worker and releaser refuse others;
* a worker dates completeness by a fresh end offset, never by its consumer's cached high watermark.

Each of these checks was absent before (main at 109d993 returned such records and started on a
two-partition shuffle topic); the tests below fail there.
"""

from __future__ import annotations

import threading

import pytest
from kafka import TopicPartition

from stream.service.progress import RecordTimeViolation
from tests.kafka_harness import (  # noqa: F401
    InProcessService,
    broker,
    service_config,
    settings_from,
    wait_for,
)
from tests.stream.service import reader_sim as sim


def _reader(records_by_partition: dict[int, list[sim.Rec]], mode: str = "log-append-time"):
    b = sim.Broker({p: sim.Log(list(recs)) for p, recs in records_by_partition.items()})
    s = sim.settings_for("0s")
    from stream.service.kafka_io import InputReader

    consumers = {p: sim.FakeConsumer(b, p) for p in b.logs}
    return InputReader(s.kafka, sim.TOPIC, slack_s=0.0, skew_s=sim.SKEW, record_time=mode,
                       clients=(None, consumers, sim.FakeProbe(b)), clock=b.clock)


def _rec(offset: int, t: float, kind: int = 1) -> sim.Rec:
    return sim.Rec(offset, int(t * 1000), {"user_id": f"u{offset}", "event_time": t,
                                           "attributes": {"age": 1, "sex": "M"}}, timestamp_type=kind)


def test_a_create_time_record_under_log_append_time_stops_the_reader() -> None:
    r = _reader({0: [_rec(0, sim.T0 + 1), _rec(1, sim.T0 + 2, kind=0)], 1: [_rec(0, sim.T0 + 1)]})
    with pytest.raises(RecordTimeViolation, match=r"in\[0\]@1 has timestamp type CreateTime") as err:
        r.poll(0.0, 100, {})
    assert not err.value.retriable  # the service stops (ServiceError), it does not retry past it
    assert "LogAppendTime" in str(err.value) and "trusted-create-time" in str(err.value)


def test_create_time_is_accepted_when_declared_trusted() -> None:
    r = _reader({0: [_rec(0, sim.T0 + 1, kind=0)]}, mode="trusted-create-time")
    assert [len(recs) for _, recs in r.poll(0.0, 100, {})] == [1]


@pytest.mark.parametrize("mode", ["log-append-time", "trusted-create-time"])
def test_record_time_going_backwards_beyond_the_skew_stops_the_reader(mode) -> None:
    back = sim.T0 + 100 - sim.SKEW - 0.5
    r = _reader({0: [_rec(0, sim.T0 + 100), _rec(1, back)]}, mode=mode)
    with pytest.raises(RecordTimeViolation, match=r"went backwards on in\[0\].*offset 1.*5\.500 s"):
        r.poll(0.0, 100, {})


def test_record_time_going_backwards_within_the_skew_is_allowed_and_checked_across_polls() -> None:
    r = _reader({0: [_rec(0, sim.T0 + 100), _rec(1, sim.T0 + 100 - sim.SKEW + 0.5), _rec(2, sim.T0 + 80)]})
    assert [len(recs) for _, recs in r.poll(0.0, 2, {})] == [2]
    with pytest.raises(RecordTimeViolation, match="went backwards"):  # the next poll: 20 s back
        r.poll(0.0, 2, {0: 2})


def test_the_watermark_mode_checks_nothing() -> None:
    r = _reader({0: [_rec(0, sim.T0 + 100, kind=0), _rec(1, sim.T0)]}, mode="watermark")
    assert [len(recs) for _, recs in r.poll(0.0, 100, {})] == [2]


def test_a_worker_stops_on_a_create_time_record_before_using_its_poll(tmp_path) -> None:
    from stream.service.http import Health
    from stream.service.metrics import Metrics
    from stream.service.worker import Worker

    cfg = service_config("127.0.0.1:1", tmp_path, seed=1, kafka={"record_time": "log-append-time"},
                         stream={"clock_skew": "5s"})
    cfg["service"]["role"] = "worker"
    w = Worker(settings_from(cfg), metrics=Metrics(), health=Health(), stop=threading.Event())
    w.owned = {0, 1}
    good = [_rec(0, sim.T0 + 1)]
    bad = [_rec(0, sim.T0 + 1, kind=0)]
    with pytest.raises(RecordTimeViolation, match="CreateTime"):
        w._ingest({TopicPartition("in", 0): good, TopicPartition("in", 1): bad})
    assert w.pipeline.window.buffered_events == 0 and not w.outputs and not w.positions
    back = [_rec(1, sim.T0 + 1000), _rec(2, sim.T0 + 900)]
    with pytest.raises(RecordTimeViolation, match="went backwards"):
        w._ingest({TopicPartition("in", 0): back})


def test_check_shuffle_partitions() -> None:
    from stream.service.shuffle import ShuffleTopicRefused, check_shuffle_partitions

    check_shuffle_partitions("s", {0})
    check_shuffle_partitions("s", None)  # not created yet: created with one partition
    with pytest.raises(ShuffleTopicRefused, match="has 2 partitions; scale-out needs exactly one"):
        check_shuffle_partitions("s", {0, 1})


@pytest.mark.kafka
@pytest.mark.parametrize("role", ["worker", "releaser"])
def test_scale_out_refuses_a_shuffle_topic_with_two_partitions(broker, tmp_path, role) -> None:  # noqa: F811
    from stream.service.kafka_io import ensure_topics
    from stream.service.shuffle import shuffle_topic

    cfg = service_config(broker.bootstrap, tmp_path, kafka={"topic_partitions": 2})
    cfg["service"]["role"] = role
    s = settings_from(cfg)
    ensure_topics(s.kafka, {s.kafka.input_topic: 2, shuffle_topic(s): 2})
    with InProcessService(s) as svc:
        wait_for(lambda: svc.exit_code is not None, 30, what="exit")
    assert svc.exit_code == 2
    assert "exactly one" in svc.health.reason, svc.health.reason


def test_a_worker_dates_completeness_by_a_fresh_end_never_a_cached_high_watermark(tmp_path) -> None:
    """Scale-out workers follow the reader's rule (issue 27 item 1): read to an end offset observed
    at τ → τ − clock_skew; a position at the consumer's cached high watermark proves nothing."""
    from stream.service.http import Health
    from stream.service.metrics import Metrics
    from stream.service.progress import EndProbe
    from stream.service.worker import Worker

    cfg = service_config("127.0.0.1:1", tmp_path, seed=1, stream={"clock_skew": "5s"})
    cfg["service"]["role"] = "worker"
    w = Worker(settings_from(cfg), metrics=Metrics(), health=Health(), stop=threading.Event())
    b = sim.Broker({0: sim.Log([_rec(i, sim.T0 + i) for i in range(12)])})
    consumer = sim.FakeConsumer(b, 0)
    consumer.hold = 2
    consumer.poll(max_records=100)  # read 10 of 12: its cached high watermark says 12
    consumer.high = 10  # ... as of an older fetch: stale
    w.consumer = consumer
    w.topic = sim.TOPIC
    w.owned = {0}
    w.record_times[0] = sim.T0 + 9
    b.now = sim.T0 + 100
    w.probe = EndProbe(sim.FakeProbe(b), clock=b.clock)
    assert w._frontier(0, w._ends([0])) == sim.T0 + 9  # the fresh end (12) is not reached
    consumer.hold, consumer.high = 0, 12
    consumer.poll(max_records=100)
    w.record_times[0] = sim.T0 + 11
    b.now = sim.T0 + 200
    assert w._frontier(0, w._ends([0])) == sim.T0 + 200 - 5  # read to the end observed at T0 + 200
