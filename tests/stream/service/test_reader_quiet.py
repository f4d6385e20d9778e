"""A transactional upstream that goes quiet (issue 28 item 3), on a two-partition topic.

A librdkafka transactional producer writes six one-minute timesteps, one transaction each,
keys spread over both partitions, record timestamps inside each timestep
(``kafka.record_time: trusted-create-time``), and stops; every timestep ended before the
service starts. ``--max-timesteps 6`` must release all six: after the last commit (or abort)
marker nothing more arrives, so only "read to the end offset, observed at wall time T" with
T − clock_skew past the last deadline can complete timestep 5.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.kafka_harness import (  # noqa: F401
    STEP,
    InProcessService,
    broker,
    service_config,
    settings_from,
    wait_for,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.kafka

TIMESTEPS = 6
PER_TIMESTEP = 1500
ABORTED = 100


def _produce_transactional(bootstrap: str, topic: str, start: int, *, trailing_abort: bool) -> int:
    """Six transactions (one per timestep) on both partitions; returns the number of events."""
    from confluent_kafka import Producer

    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"quiet-{topic}", "linger.ms": 5})
    tx.init_transactions(30)
    n = 0
    for ts in range(TIMESTEPS):
        tx.begin_transaction()
        for i in range(PER_TIMESTEP):
            user = f"u{ts}-{i}"
            at = start + STEP * ts + 1 + i * (STEP - 5) / PER_TIMESTEP  # inside the timestep
            ev = {"user_id": user, "event_time": at, "attributes": {"age": 30, "sex": "M"}}
            tx.produce(topic, json.dumps(ev).encode(), key=user.encode(), partition=i % 2,
                       timestamp=int((at + 1) * 1000))
            n += 1
        tx.commit_transaction(30)
    if trailing_abort:
        tx.begin_transaction()
        for i in range(ABORTED):
            at = start + STEP * TIMESTEPS - 2  # the last timestep's end, after every committed record
            ev = {"user_id": f"aborted{i}", "event_time": at, "attributes": {"age": 30, "sex": "M"}}
            tx.produce(topic, json.dumps(ev).encode(), partition=i % 2, timestamp=int(at * 1000))
        tx.flush(30)
        tx.abort_transaction(30)
    return n


@pytest.mark.parametrize("trailing_abort", [False, True], ids=["commit-last", "abort-last"])
def test_quiet_transactional_upstream_releases_every_timestep(broker, tmp_path, trailing_abort) -> None:  # noqa: F811
    # every timestep ended before the service starts (the last deadline is >= 10 s + clock_skew ago)
    start = (int(time.time()) - 15) // STEP * STEP - TIMESTEPS * STEP
    cfg = service_config(broker.bootstrap, tmp_path, seed=3, kafka={"topic_partitions": 2, "max_poll_records": 50},
                         stream={"start": start, "clock_skew": "5s"})
    s = settings_from(cfg)
    from stream.service.kafka_io import ensure_topics

    ensure_topics(s.kafka, {s.kafka.input_topic: 2})
    _produce_transactional(broker.bootstrap, s.kafka.input_topic, start, trailing_abort=trailing_abort)
    with InProcessService(s, max_timesteps=TIMESTEPS) as svc:
        wait_for(lambda: svc.exit_code is not None or svc.published() >= TIMESTEPS, 30,
                 what=f"{TIMESTEPS} timesteps released")
        released = svc.published()
        svc.stop()
    assert released >= TIMESTEPS, f"released {released} of {TIMESTEPS} timesteps"
    assert svc.exit_code == 0
    late = svc.metric("dpstream_late_events_total")
    accepted = svc.metric("dpstream_events_accepted_total")
    # the embedded broker shows aborted records to read_committed consumers (Apache Kafka filters them)
    assert (accepted, late) == (TIMESTEPS * PER_TIMESTEP + ABORTED * trailing_abort, 0), \
        f"accepted {accepted}, late {late}: on-time events were read after their timestep was released"
