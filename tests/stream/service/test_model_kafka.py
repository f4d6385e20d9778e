"""Model releases end to end through the embedded broker (issue 15 item 3).

The real service (``run_service`` in a thread) reads events from the embedded Kafka broker
(``tests/kafka_harness.py``), releases a DPCopula / k-way marginals model per timestep and commits
model-release messages to the output topic in its transactions. Read back with kafka-python and
with librdkafka (confluent-kafka, ``read_committed``, assign-based): one message per timestep,
each valid under ``model-release.schema.json``, the same bytes for both clients, republished
timesteps repeating their model, and a restart over the same topics publishing nothing new.
"""

from __future__ import annotations

import json
import time

import jsonschema
import pytest

from stream.messages import SCHEMA_DIR, ModelReleaseMessage, parse_message
from tests.kafka_harness import (  # noqa: F401
    InProcessService,
    broker,
    dedupe_by_release_id,
    event,
    heartbeat,
    produce,
    read_all,
    releases_by_timestep,
    service_config,
    settings_from,
    wait_for,
)

pytestmark = pytest.mark.kafka
TIMESTEPS = 6


def _validator():
    schema = json.loads((SCHEMA_DIR / "model-release.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _feed(bootstrap: str, topic: str) -> None:
    """120 people per timestep; age and sex dependent (older people mostly "M")."""
    for ts in range(TIMESTEPS):
        evs = [event(f"p{i}", ts, age=(i * 37) % 100, sex="M" if ((i * 37) % 100 + (i % 7) * 6) > 55 else "F",
                     offset=1 + i / 10) for i in range(120)]
        produce(bootstrap, topic, [json.dumps(e).encode() for e in evs])
    heartbeat(bootstrap, topic, TIMESTEPS)


def _run(broker, tmp_path, release):  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path, seed=7, kafka={"topic_partitions": 1},
                         privacy={"epsilon": 30, "population": 120, "cutoff": 6}, release=release)
    s = settings_from(cfg)
    with InProcessService(s) as svc:
        _feed(broker.bootstrap, s.kafka.input_topic)
        wait_for(lambda: svc.published() >= TIMESTEPS or svc.exit_code is not None, 90,
                 what=f"{TIMESTEPS} model releases")
        assert svc.exit_code is None, f"service exited {svc.exit_code}"
    assert svc.exit_code == 0
    return s


def test_model_releases_end_to_end_through_the_embedded_broker(broker, tmp_path):  # noqa: F811
    s = _run(broker, tmp_path, {"decision": "dsat", "mechanism": "copula", "threshold": 0.2,
                                "copula": {"synthetic_size": 15}})
    records = read_all(broker.bootstrap, s.kafka.output_topic, isolation_level="read_committed")
    by_ts = releases_by_timestep(records)
    assert sorted(by_ts)[:TIMESTEPS] == list(range(TIMESTEPS))
    assert all(len(v) == 1 for v in by_ts.values())  # one message per timestep (duplicates byte-identical)
    kept = dedupe_by_release_id(records)
    check = _validator()
    docs = sorted((json.loads(v) for v in kept.values()), key=lambda d: d["timestep"]["index"])
    for d in docs:
        check.validate(d)
        assert d["message_type"] == "model-release" and d["method"]["mechanism"] == "copula"
    fresh = {d["timestep"]["index"]: d for d in docs if d["kind"] == "fresh"}
    assert 0 in fresh and any(d["kind"] == "republished" for d in docs)
    for d in docs:
        assert d["model"] == fresh[d["accuracy"]["source_timestep"]]["model"]
    corr = fresh[0]["model"]["correlation"]
    assert corr[0][1] < 0  # older people are mostly "M" (level 0 of sex): a negative latent correlation
    assert len(fresh[0]["model"]["synthetic"]["records"]) == 15
    # a restart over the same topics re-reads nothing and publishes no second release of any timestep
    with InProcessService(s) as again:
        time.sleep(2)
        assert again.exit_code is None
    again_records = read_all(broker.bootstrap, s.kafka.output_topic, isolation_level="read_committed")
    assert {t: v for t, v in releases_by_timestep(again_records).items() if t < TIMESTEPS} == \
        {t: v for t, v in by_ts.items() if t < TIMESTEPS}


def test_a_librdkafka_consumer_reads_model_releases(broker, tmp_path):  # noqa: F811
    confluent_kafka = pytest.importorskip("confluent_kafka")
    s = _run(broker, tmp_path, {"decision": "uniform", "mechanism": "marginals",
                                "marginals": {"k": 2, "synthetic_size": 8}})
    topic = s.kafka.output_topic
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"dash-{topic}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False})
    got: dict[int, bytes] = {}
    kinds = set()
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in meta.partitions])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(got) < TIMESTEPS:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            kinds.add(json.loads(msg.value())["message_type"])
            parsed = parse_message(msg.value())
            if isinstance(parsed, ModelReleaseMessage):  # the consumer tells the kinds apart
                assert parsed.to_bytes() == msg.value()  # canonical bytes survive the round trip
                got[parsed.timestep.index] = msg.value()
    finally:
        c.close()
    assert sorted(got)[:TIMESTEPS] == list(range(TIMESTEPS))
    assert "domain" in kinds and "model-release" in kinds and "release" not in kinds
    by_ts = releases_by_timestep(read_all(broker.bootstrap, topic, isolation_level="read_committed"))
    for t, value in got.items():
        assert by_ts[t] == {value}  # librdkafka and kafka-python read the same bytes
    check = _validator()
    for value in got.values():
        doc = json.loads(value)
        check.validate(doc)
        tables = doc["model"]["marginals"]
        assert [t["attributes"] for t in tables] == [["age"], ["sex"], ["age", "sex"]]
        assert len(doc["model"]["synthetic"]["records"]) == 8
