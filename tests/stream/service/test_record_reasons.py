"""Every reason code through the real service on the embedded broker (issue 18 items 3-4).

One record per dead-letter reason (plus a late event), a keyless record and a record with headers
(both counted like any other), then ``schema.user_id: "@key"``. Not covered here:
``arrived_after_seal`` needs a broker clock behind the wall clock (record-time mode; see
``tests/stream/service/test_record_time_config.py`` and ``docs/privacy.md`` §1.1).
"""

from __future__ import annotations

import json

import pytest
from kafka import KafkaProducer

from stream.ingest.events import DEAD_LETTER_REASONS, WIRE_REASONS
from tests.kafka_harness import (  # noqa: F401
    STEP,
    T0,
    InProcessService,
    broker,
    dedupe_by_key,
    event,
    heartbeat,
    read_all,
    service_config,
    settings_from,
    wait_for,
)

pytestmark = pytest.mark.kafka


def _ev(user: object, t: float, **attrs: object) -> dict:
    return {"user_id": user, "event_time": t, "attributes": {"age": 30, "sex": "M", **attrs}}


def _bad_records() -> dict[str, tuple[bytes | None, bytes | None]]:
    """reason → (key, value) of one record that must be dead-lettered with it."""
    t = T0 + 5
    return {
        "malformed_json": (b"k", b"{not json"),
        "not_an_object": (b"k", b"42"),
        "missing_field": (b"k", json.dumps({"user_id": "a", "event_time": t, "attributes": {"sex": "M"}}).encode()),
        "wrong_type": (b"k", json.dumps(_ev(1.0, t)).encode()),
        "non_finite": (b"k", b'{"user_id": "a", "event_time": NaN, "attributes": {"age": 3, "sex": "M"}}'),
        "invalid_time": (b"k", json.dumps(_ev("a", "yesterday")).encode()),
        "invalid_user_id": (b"k", b'{"user_id": "\\ud800", "event_time": %d, "attributes": {"age": 3, "sex": "M"}}'
                            % t),
        "unknown_attribute": (b"k", json.dumps(_ev("a", t, colour="red")).encode()),
        "out_of_domain": (b"k", json.dumps(_ev("a", t, age=1000)).encode()),
        "oversized": (b"k", json.dumps([_ev(f"o{i}", t) for i in range(60)]).encode()),
        "too_many_events": (b"k", json.dumps([_ev(f"m{i}", t) for i in range(6)]).encode()),
        "empty_message": (b"k", b"[]"),
        "far_future": (b"k", json.dumps(_ev("a", T0 + 10**7)).encode()),
        "before_start": (b"k", json.dumps(_ev("a", T0 - 10 * STEP)).encode()),
        "tombstone": (b"k", None),
        "empty_value": (b"k", b""),
    }


def _send(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, list]],
          *, stamp: float) -> None:
    """Send ``(key, value, headers)`` records to partition 0, every one stamped ``stamp`` (seconds):
    the broker's LogAppendTime at the test data's pace (see :func:`tests.kafka_harness.produce`)."""
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    try:
        for key, value, headers in records:
            p.send(topic, value=value, key=key, headers=headers, partition=0, timestamp_ms=int(stamp * 1000))
        p.flush()
    finally:
        p.close()


def test_every_reason_code_through_the_service(broker, tmp_path) -> None:  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path, seed=1, kafka={"topic_partitions": 1},
                         service={"max_message_bytes": 4000, "max_events_per_message": 5})
    s = settings_from(cfg)
    bad = _bad_records()
    # the Schema Registry wire formats' own reasons: tests/stream/service/test_input_formats.py
    assert set(bad) == set(DEAD_LETTER_REASONS) - set(WIRE_REASONS), "a reason code has no case here"
    good = [(None, json.dumps(event("keyless", 0)).encode(), []),
            (b"h", json.dumps(event("headers", 0)).encode(), [("trace", b"\x00\xff"), ("x", b"")]),
            *((None, json.dumps(event(f"p{i}", i // 3)).encode(), []) for i in range(9))]
    with InProcessService(s) as svc:
        assert svc.exit_code is None
        # all stamped within timestep 0 (the events of timesteps 1 and 2 arrive early: fine)
        _send(broker.bootstrap, s.kafka.input_topic, good + [(k, v, []) for k, v in bad.values()], stamp=T0 + 5)
        heartbeat(broker.bootstrap, s.kafka.input_topic, 3)  # the partition's record time passes timestep 2
        wait_for(lambda: svc.published() >= 3, 60, what="three timesteps released")
        # record time past timestep 0's deadline: late, whatever its event time says
        _send(broker.bootstrap, s.kafka.input_topic, [(None, json.dumps(event("late", 0)).encode(), [])],
              stamp=T0 + 3 * STEP + 2)
        wait_for(lambda: svc.metric("dpstream_late_events_total") >= 1, 60, what="the late event")
        assert svc.exit_code is None
        accepted = svc.metric("dpstream_events_accepted_total")
    assert accepted == len(good) + 1  # keyless and header-carrying records counted like any other (+ heartbeat)
    dead, problems = dedupe_by_key(read_all(broker.bootstrap, s.kafka.dead_letter_topic,
                                            isolation_level="read_committed", expect=len(bad)))
    assert not problems
    reasons = sorted(dict(r.headers)["dpstream.reason"].decode() for r in dead.values())
    assert reasons == sorted(bad), reasons
    late = read_all(broker.bootstrap, s.kafka.late_topic, isolation_level="read_committed", expect=1)
    assert [dict(r.headers)["dpstream.reason"] for r in late] == [b"timestep_sealed"]


def test_person_id_from_the_record_key(broker, tmp_path) -> None:  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path, seed=1, kafka={"topic_partitions": 1},
                         schema={"user_id": "@key"})
    s = settings_from(cfg)

    def body(ts: int) -> bytes:
        return json.dumps({"event_time": T0 + STEP * ts + 1, "attributes": {"age": 30, "sex": "M"}}).encode()

    with InProcessService(s) as svc:
        assert svc.exit_code is None
        _send(broker.bootstrap, s.kafka.input_topic, [
            ("e\u0301".encode(), body(0), []), ("\u00e9".encode(), body(0), []),  # one person (NFC)
            (b"b", body(0), []), (None, body(0), []),  # keyless: missing_field
            (b" b", body(1), []), (b"\xff", body(1), []),  # invalid_user_id
            (b"c", body(1), []), (b"c", body(2), []),
        ], stamp=T0 + 1)
        wait_for(lambda: svc.metric("dpstream_messages_consumed_total") >= 8, 60, what="input read")
        _send(broker.bootstrap, s.kafka.input_topic, [(b"heartbeat", body(9), [])], stamp=T0 + 3 * STEP + 1)
        wait_for(lambda: svc.published() >= 3, 60, what="releases")
        assert svc.exit_code is None
        accepted = svc.metric("dpstream_events_accepted_total")
    dead, _ = dedupe_by_key(read_all(broker.bootstrap, s.kafka.dead_letter_topic,
                                     isolation_level="read_committed", expect=3))
    reasons = sorted(dict(r.headers)["dpstream.reason"].decode() for r in dead.values())
    assert reasons == ["invalid_user_id", "invalid_user_id", "missing_field"]
    assert accepted == 6  # é once per spelling (bounded to one person later), b, c twice, heartbeat
