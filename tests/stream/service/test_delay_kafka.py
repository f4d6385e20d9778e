"""``release.delay: 2`` on the embedded broker: kill -9 at every failpoint, then the output topic.

A smoothing stream (``model+nonnegative``, seeded) with ``stream.end`` after timestep 9 and an
output topic of 3 partitions: timesteps 0..4 arrive, the service publishes 0..2 (each ``k = 2``
steps late) and is stopped (SIGTERM: 3 and 4 stay queued in the journaled engine snapshot);
5..9 arrive and a second process is killed at the failpoint; a third one releases the rest,
reaches the stream's end, flushes 8 and 9 in the last timestep's transaction and exits 0; a
fourth finds the stream ended and publishes nothing. Then:

* the crash checker (``tests.kafka_harness.check_published``, read_uncommitted: every record of
  killed transactions too) finds exactly one distinct payload per timestep 0..9, the ledger equal
  to the published fresh releases, no event lost or counted twice;
* the deduplicated topic equals, byte for byte, an uninterrupted service run of the same stream
  id and ``dpstream replay`` of the same events with their arrival times;
* a librdkafka ``read_committed`` consumer (confluent-kafka, assign-based over every partition)
  reads each timestep's release in timestep order, every copy byte-identical (the embedded
  broker shows the records of a killed transaction even to read_committed readers: broker.md).
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from stream.service.failpoints import FAILPOINTS
from tests.kafka_harness import (  # noqa: F401
    STEP,
    T0,
    _equals_replay,
    broker,
    check_published,
    dedupe_by_release_id,
    event,
    heartbeat,
    produce,
    read_all,
    service_config,
    unique,
    wait_for,
    write_config,
    zygote,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.kafka

TIMESTEPS = 10
K = 2
STREAM = unique("lagged")  # one stream id for the uninterrupted run and every crashed one (same bytes)


def _cfg(bootstrap: str, state_dir) -> dict:
    return service_config(bootstrap, state_dir, stream_id=STREAM, seed=5, kafka={"topic_partitions": 3},
                          stream={"allowed_lateness": "60s", "end": T0 + STEP * TIMESTEPS},
                          release={"decision": "uniform", "postprocess": "model+nonnegative", "delay": K},
                          privacy={"horizon": TIMESTEPS, "cutoff": TIMESTEPS})


def _batches() -> list[list[bytes]]:
    return [[json.dumps(event(f"u{i}", t, age=7 * i + 3 * t)).encode() for i in range(10)] for t in range(TIMESTEPS)]


def _published(bootstrap: str, topic: str) -> set[int]:
    return {json.loads(v)["timestep"]["index"] for v in dedupe_by_release_id(read_all(bootstrap, topic, timeout_s=5)).values()}


def _input_topic(cfg: dict) -> str:
    from stream.config import KafkaSection
    from stream.service.kafka_io import ensure_topics

    topic = cfg["kafka"]["input_topic"]
    ensure_topics(KafkaSection(**cfg["kafka"]), {topic: 1})
    return topic


def _read_committed(bootstrap: str, topic: str, want: int, timeout_s: float = 60.0) -> list[bytes]:
    """Every release record a librdkafka read_committed reader sees, in the order it reads them."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("dashboard"),
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        assert len(meta.partitions) == 3  # the service created the output topic with kafka.topic_partitions
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                if len({json.loads(v)["timestep"]["index"] for v in out}) >= want:
                    break
                continue
            if json.loads(msg.value()).get("message_type") == "release":
                out.append(bytes(msg.value()))
        return out
    finally:
        c.close()


@pytest.fixture(scope="module")
def uninterrupted(broker, zygote, tmp_path_factory) -> dict[str, bytes]:  # noqa: F811
    """The same stream, one run, no fault: its releases by release id."""
    tmp = tmp_path_factory.mktemp("whole")
    cfg = _cfg(broker.bootstrap, tmp / "state")
    config = write_config(cfg, tmp / "config.yaml")
    topic_in = _input_topic(cfg)
    produce(broker.bootstrap, topic_in, [m for b in _batches() for m in b])
    heartbeat(broker.bootstrap, topic_in, TIMESTEPS, lateness=60, event_timestep=50)
    pid = zygote.spawn(config, tmp / "run.log")
    assert zygote.wait(pid, 90) == 0, (tmp / "run.log").read_text()[-2000:]  # stream.end: exits by itself
    kept = dedupe_by_release_id(read_all(broker.bootstrap, cfg["kafka"]["output_topic"]))
    assert sorted(json.loads(v)["timestep"]["index"] for v in kept.values()) == list(range(TIMESTEPS))
    assert _equals_replay(broker.bootstrap, cfg, _batches(), tmp, TIMESTEPS)  # = dpstream replay
    return kept


@pytest.mark.parametrize("failpoint", FAILPOINTS)
def test_kill_at_each_failpoint_with_a_delay_publishes_the_uninterrupted_bytes_once_in_order(
        broker, zygote, tmp_path, uninterrupted, failpoint):  # noqa: F811
    bootstrap = broker.bootstrap
    cfg = _cfg(bootstrap, tmp_path / "state")
    config = write_config(cfg, tmp_path / "config.yaml")
    topic_in, topic_out = _input_topic(cfg), cfg["kafka"]["output_topic"]
    batches = _batches()
    statuses = []
    produce(bootstrap, topic_in, [m for b in batches[:5] for m in b])
    heartbeat(bootstrap, topic_in, 5, lateness=60, event_timestep=50)  # timesteps 0..4 complete
    pid = zygote.spawn(config, tmp_path / "a.log")
    wait_for(lambda: _published(bootstrap, topic_out) >= set(range(5 - K)), what="timesteps 0..2 published")
    time.sleep(0.5)
    os.kill(pid, signal.SIGTERM)  # a stop, not the end: 3 and 4 stay queued
    statuses.append(zygote.wait(pid, 30))
    assert _published(bootstrap, topic_out) == set(range(5 - K))
    produce(bootstrap, topic_in, [m for b in batches[5:] for m in b])
    pid = zygote.spawn(config, tmp_path / "b.log", env={"DPSTREAM_FAILPOINT": failpoint})
    statuses.append(zygote.wait(pid, 30))
    heartbeat(bootstrap, topic_in, TIMESTEPS, lateness=60, event_timestep=50)  # and now 5..9
    pid = zygote.spawn(config, tmp_path / "c.log")
    statuses.append(zygote.wait(pid, 90))  # releases the rest, reaches stream.end, flushes 8 and 9, exits
    pid = zygote.spawn(config, tmp_path / "d.log")  # the stream has ended: nothing more
    statuses.append(zygote.wait(pid, 60))
    logs = "\n".join((tmp_path / f"{n}.log").read_text() for n in "abcd")
    assert statuses == [0, -signal.SIGKILL, 0, 0], logs[-3000:]
    if failpoint != "after_noise":
        assert "re-sent journaled checkpoint" in logs
    assert "flushed the delayed timesteps at the end of the stream" in logs
    assert '"unpublished": [3, 4]' in (tmp_path / "b.log").read_text()  # queued over the stop, said at start-up
    assert '"published": [' in logs and '"redacted"' not in logs  # the log fields are allowlisted

    violations, facts = check_published(bootstrap, cfg, injected={t: 10 for t in range(TIMESTEPS)}, dead=0,
                                        timesteps=TIMESTEPS)
    assert violations == [], (violations, facts)
    kept = dedupe_by_release_id(read_all(bootstrap, topic_out))
    assert kept == uninterrupted  # byte for byte (and so equal to dpstream replay: the fixture checks it)
    assert _equals_replay(bootstrap, cfg, batches, tmp_path, TIMESTEPS)
    docs = [json.loads(v) for v in kept.values()]
    assert [d["lag"]["smoothed_through"] for d in sorted(docs, key=lambda d: d["timestep"]["index"])] == \
        [min(t + K, TIMESTEPS - 1) for t in range(TIMESTEPS)]

    seen = _read_committed(bootstrap, topic_out, TIMESTEPS)
    first: dict[int, bytes] = {}
    for v in seen:
        t = json.loads(v)["timestep"]["index"]
        assert first.setdefault(t, v) == v, f"timestep {t} read with two different payloads"
    assert list(first) == list(range(TIMESTEPS))  # each timestep, in order
    assert sorted(first.values()) == sorted(uninterrupted.values())


@pytest.mark.slow
def test_random_kills_while_input_arrives_with_a_delay(broker, zygote, tmp_path):  # noqa: F811
    """kill -9 at random moments and two failpoint crashes while 12 timesteps of input arrive on 2
    partitions (record time: each timestep's records stamped before its end, one timestep a
    second); a last run reaches ``stream.end`` and exits by itself. One payload per timestep over
    everything produced, the ledger, no event lost or counted twice, and the bytes of
    ``dpstream replay``."""
    import threading

    import numpy as np
    from kafka import KafkaProducer

    from stream.config import KafkaSection
    from stream.service.kafka_io import ensure_topics
    from tests.kafka_harness import synthetic_input

    n, bootstrap = 12, broker.bootstrap
    rng = np.random.default_rng(30)  # test data and kill times only
    cfg = service_config(bootstrap, tmp_path / "state", seed=9, kafka={"topic_partitions": 2, "max_poll_records": 25},
                         stream={"allowed_lateness": f"{STEP}s", "end": T0 + STEP * n},
                         release={"decision": "uniform", "postprocess": "model+nonnegative", "delay": K},
                         privacy={"horizon": n, "cutoff": n})
    config = write_config(cfg, tmp_path / "config.yaml")
    k = KafkaSection(**cfg["kafka"])
    ensure_topics(k, {k.input_topic: 2})
    chunks, injected, bad = synthetic_input(rng, n, 40)
    kill_at = rng.uniform(2.5, 5.0, size=6).tolist()  # past the consumer group's join (~3 s here)

    def feed() -> None:
        p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=2, acks="all")
        try:
            for t, msgs in enumerate(chunks):
                for m in msgs:
                    p.send(k.input_topic, value=m, partition=t % 2 if m is msgs[0] else int(rng.integers(0, 2)),
                           timestamp_ms=int((T0 + STEP * (t + 1)) * 1000) - 1)
                p.flush()
                time.sleep(1.5)
            beat = json.dumps(event("heartbeat", n + 3)).encode()  # every partition past the last deadline
            for part in range(2):
                p.send(k.input_topic, value=beat, partition=part, timestamp_ms=int((T0 + STEP * (n + 1) + 1) * 1000))
            p.flush()
        finally:
            p.close()

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    runs: list[tuple[str, int | None]] = []
    for i, what in enumerate(["kill", "kill", "after_journal:2", "kill", "kill", "mid_produce:1", "kill", "kill"]):
        if what == "kill":
            pid = zygote.spawn(config, tmp_path / f"run{i}.log")
            status = zygote.wait(pid, kill_at.pop())
            if status is None:
                os.kill(pid, signal.SIGKILL)
                status = zygote.wait(pid, 10)
        else:
            pid = zygote.spawn(config, tmp_path / f"run{i}.log", env={"DPSTREAM_FAILPOINT": what})
            status = zygote.wait(pid, 10)
            if status is None:  # not reached (nothing to release meanwhile): kill it anyway
                os.kill(pid, signal.SIGKILL)
                status = zygote.wait(pid, 10)
                what += " not reached"
        runs.append((what, status))
        if status == 0:  # the stream reached its end during this run: nothing left to interrupt
            break
    feeder.join(60)
    pid = zygote.spawn(config, tmp_path / "final.log")
    final = zygote.wait(pid, 120)
    logs = "\n".join(p.read_text() for p in sorted(tmp_path.glob("*.log")))
    assert final == 0, (runs, (tmp_path / "final.log").read_text()[-3000:])
    killed = [w for w, st in runs if st == -signal.SIGKILL]
    assert len(killed) >= 4 and logs.count('"event": "released"') >= 4, runs  # kills between releases
    if "after_journal:2" in killed:  # reached: journaled, not committed, re-sent by the next run
        assert "re-sent journaled checkpoint" in logs, runs
    assert "flushed the delayed timesteps at the end of the stream" in logs
    violations, facts = check_published(bootstrap, cfg, injected=injected, dead=bad, timesteps=n)
    assert violations == [], (violations, facts, runs)
    assert _equals_replay(bootstrap, cfg, chunks, tmp_path, n)
