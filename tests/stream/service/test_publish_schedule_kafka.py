"""``service.publish: on-schedule`` through ``run_service`` on the embedded broker (issue 27 item 5).

A live stream (record times from the producer's clock, ``kafka.record_time:
trusted-create-time``): 30 people in timestep 0, then one newcomer whose record arrives just
after timestep 0's deadline. Published as soon as complete (main), that record completes
timestep 0 and its release follows within a poll: the release time says someone sent an event
then. On schedule, timestep 0 is committed no earlier than D(0) + clock_skew + publish_margin,
and its output record's timestamp is exactly that time (the embedded broker keeps producer
timestamps, so this reads back what the service set).
"""

from __future__ import annotations

import json
import math
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
STEP, SKEW, MARGIN = 4, 1.0, 1.0


def _sleep_until(t: float) -> None:
    while (left := t - time.time()) > 0:
        time.sleep(min(left, 0.05))


def _event(user: str, t: float) -> bytes:
    return json.dumps({"user_id": user, "event_time": t, "attributes": {"age": 40, "sex": "F"}}).encode()


def test_a_record_after_the_deadline_does_not_bring_the_release_forward(broker, tmp_path):  # noqa: F811
    start = math.ceil((time.time() + 8) / STEP) * STEP  # a boundary a few seconds ahead
    deadline = start + STEP                             # D(0): allowed_lateness 0
    scheduled = deadline + SKEW + MARGIN                # S(0)
    cfg = service_config(broker.bootstrap, tmp_path, seed=5,
                         stream={"start": start, "timestep": f"{STEP}s", "clock_skew": f"{SKEW:g}s"},
                         kafka={"record_time": "trusted-create-time", "topic_partitions": 1},
                         service={"publish": "on-schedule", "publish_margin": f"{MARGIN:g}s"})
    s = settings_from(cfg)
    topic = s.kafka.input_topic
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, acks="all")
    seen: list[float] = []
    try:
        with InProcessService(s) as svc:
            _sleep_until(start + 0.2)
            for i in range(30):  # timestep 0, stamped by the producer's clock (inside timestep 0)
                producer.send(topic, _event(f"p{i}", start + 0.1 + 0.02 * i), partition=0)
            producer.flush()
            _sleep_until(deadline + 0.2)
            assert time.time() < scheduled - 0.5, "the machine is too slow for this timing test"
            producer.send(topic, _event("newcomer", deadline + 0.2), partition=0)  # timestep 1, just late
            producer.flush()

            def released() -> bool:
                if svc.published() >= 1:
                    seen.append(time.time())
                    return True
                return False

            wait_for(released, 60, interval=0.02, what="timestep 0 released")
            behind = svc.metric("dpstream_timesteps_behind_schedule_total")
    finally:
        producer.close()
    # committed no earlier than the schedule (the service's own commit precedes our observation)
    assert seen[0] >= scheduled, f"released {scheduled - seen[0]:.2f}s before its scheduled time"
    releases = [r for r in read_all(broker.bootstrap, s.kafka.output_topic, expect=2)
                if json.loads(r.value).get("message_type") == "release"]
    first = [r for r in releases if json.loads(r.value)["timestep"]["index"] == 0]
    assert first and {r.timestamp for r in first} == {int(scheduled * 1000)}
    assert behind == 0
