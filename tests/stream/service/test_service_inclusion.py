"""Record-time inclusion through the service on the embedded broker (issue 11 §1, issue 18 item 2).

The embedded broker ignores ``message.timestamp.type=LogAppendTime`` (``/work/shared/notes/broker.md``):
records keep the producer's timestamp. These tests therefore run with
``kafka.record_time: trusted-create-time`` and set each record's timestamp deliberately, playing
the broker's clock (monotone per partition, as LogAppendTime would be). The refusal test checks
that ``log-append-time`` refuses to start when the topic's timestamp type cannot be confirmed.
"""

from __future__ import annotations

import json
import time

import pytest
from kafka import KafkaProducer

from tests.kafka_harness import (  # noqa: F401
    InProcessService,
    broker,
    read_all,
    service_config,
    settings_from,
    wait_for,
)

pytestmark = pytest.mark.kafka
STEP = 60


def _start() -> int:
    return (int(time.time()) // STEP - 8) * STEP  # eight whole timesteps ago


def _ev(user: str, t: float, age: int = 30) -> dict:
    return {"user_id": user, "event_time": t, "attributes": {"age": age, "sex": "M"}}


def _population(start: int) -> list[tuple[dict, float]]:
    """(event, record time): 6 timesteps, honest clocks (record time = event time + 2 s)."""
    out = []
    for i in range(6 * 30):
        t = start + i * 2.0
        out.append((_ev(f"p{i}", t, age=i % 100), t + 2.0))
    return out


def _send(bootstrap: str, topic: str, items: list[tuple[dict, float]], *, transactional: bool = False) -> None:
    items = sorted(items, key=lambda x: x[1])  # arrival order = record-time order (the broker's clock)
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all",
                      **({"transactional_id": f"up-{topic}", "enable_idempotence": True} if transactional else {}))
    try:
        if transactional:
            p.init_transactions()
            p.begin_transaction()
        for e, r in items:
            p.send(topic, value=json.dumps(e).encode(), partition=0, timestamp_ms=int(r * 1000))
        p.flush()
        if transactional:
            p.commit_transaction()
    finally:
        p.close()


def _run(bootstrap, tmp_path, items, *, mode, transactional=False):
    start = items[0][1] // STEP * STEP if items else _start()
    cfg = service_config(bootstrap, tmp_path, seed=3,
                         stream={"start": int(start), "allowed_lateness": "10s", "max_future": "120s",
                                 **({} if mode == "watermark" else {"clock_skew": "5s"})},
                         kafka={"record_time": mode, "topic_partitions": 1})
    s = settings_from(cfg)
    # the input is written before the service starts: its stamps lie minutes in the past, and a
    # service already at the end of an empty topic would (rightly) take the wall clock − clock_skew
    # as every partition's progress and release those timesteps before the records arrive
    from stream.service.kafka_io import ensure_topics

    ensure_topics(s.kafka, {s.kafka.input_topic: 1})
    _send(bootstrap, s.kafka.input_topic, items, transactional=transactional)
    with InProcessService(s) as svc:
        assert svc.exit_code is None, f"service exited {svc.exit_code}"
        wait_for(lambda: svc.metric("dpstream_messages_consumed_total") >= len(items), 60, what="input read")
        wait_for(lambda: svc.published() >= 6, 60, what="six complete timesteps released")
        # the service's own counts (reading the late topic back raced its checkpoint under load)
        late = int(svc.metric("dpstream_late_events_total"))
        accepted = svc.metric("dpstream_events_accepted_total")
    return late, accepted


def test_a_fast_clock_person_changes_no_other_timestep(broker, tmp_path):  # noqa: F811
    start = _start()
    base = _population(start)
    # one extra person: record time in timestep 2, event time 100 s ahead (within max_future)
    rec = start + 2 * STEP + 30.0
    extra = [(_ev("newcomer", rec + 100.0), rec)]
    late, accepted = _run(broker.bootstrap, tmp_path / "d2", base + extra, mode="trusted-create-time")
    assert late == 0  # nobody's event was pushed out of its timestep
    assert accepted == len(base) + 1
    # the legacy watermark rule on the same input: the newcomer's clock makes others late
    late_old, _ = _run(broker.bootstrap, tmp_path / "old", base + extra, mode="watermark")
    assert late_old > 0


def test_transactional_upstream_goes_quiet_and_complete_timesteps_are_released(broker, tmp_path):  # noqa: F811
    """A transactional upstream commits, then goes quiet (issue 18 item 2): the commit marker takes an
    offset, so only the consumer's position reaches the end offset; the timesteps whose deadline the
    wall clock passes (+ clock_skew) must then be released. This broker stamps transactional records
    with its own clock, so the events are "live": event times just before now."""
    now = time.time()
    start = int(now) - 10
    cfg = service_config(broker.bootstrap, tmp_path, seed=3,
                         stream={"start": start, "timestep": "2s", "allowed_lateness": "10s", "clock_skew": "1s"},
                         kafka={"record_time": "trusted-create-time", "topic_partitions": 1})
    s = settings_from(cfg)
    items = [(_ev(f"p{i}", now - 3 + i * 0.01, age=i % 100), now) for i in range(180)]
    last_cell = int((items[-1][0]["event_time"] - start) // 2)
    with InProcessService(s) as svc:
        _send(broker.bootstrap, s.kafka.input_topic, items, transactional=True)
        wait_for(lambda: svc.metric("dpstream_messages_consumed_total") >= len(items), 60, what="input read")
        wait_for(lambda: svc.published() >= last_cell + 1, 40, what="the quiet stream's complete timesteps")
        late = svc.metric("dpstream_late_events_total")
        accepted = svc.metric("dpstream_events_accepted_total")
    assert late == 0 and accepted == len(items)


def test_refuses_when_the_topic_timestamp_type_cannot_be_confirmed(broker, tmp_path):  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path, stream={"start": _start()},
                         kafka={"record_time": "log-append-time"})
    with InProcessService(settings_from(cfg)) as svc:
        wait_for(lambda: svc.exit_code is not None, 30, what="exit")
        assert svc.exit_code == 2
