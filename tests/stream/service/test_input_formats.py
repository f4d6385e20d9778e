"""Avro, Protobuf and JSON Schema input through the real service on the embedded broker (issue 32).

confluent-kafka's own ``Producer`` with its ``AvroSerializer`` / ``ProtobufSerializer`` /
``JSONSerializer`` writes
the input topic, against a Schema Registry reachable over HTTP (``tests/schema_registry.py``).
Mid-stream the producer's schema evolves (a new schema id for the same subject); a record whose
schema dropped a mapped field, a truncated record, a record of JSON and one naming an unknown id
are dead-lettered each with its own reason while the stream goes on; then the registry goes down:
a record of a new schema id is dead-lettered as ``schema_unavailable`` and ``/readyz`` names the
outage, a record of a cached id still counts; the registry comes back and the check clears.
Together with ``test_record_reasons.py`` every dead-letter reason goes through the service.
"""

from __future__ import annotations

import json
import time
import warnings

import pytest

from stream.ingest.events import WIRE_REASONS
from stream.ingest.wire import frame
from tests.kafka_harness import (  # noqa: F401
    STEP,
    T0,
    InProcessService,
    broker,
    dedupe_by_key,
    read_all,
    service_config,
    settings_from,
    wait_for,
)
from tests.schema_registry import SchemaRegistry, admission_proto
from tests.stream.ingest.test_formats import avro_schema

pytestmark = pytest.mark.kafka

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext


def _writers(fmt: str, client: SchemaRegistryClient):
    """Four writers of the same subject: v1, v2 (a field added: a new id), v3 (sex dropped), v4 (another
    new id, first used during the registry outage). Each registers its schema at its first record."""
    import datetime as dt

    if fmt == "avro":
        def avro(**kw):
            ser = AvroSerializer(client, avro_schema(**kw))

            def write(user: str, t: float, ctx, age: int = 30, sex: str = "M") -> bytes:
                rec = {"patient": {"id": user}, "event_time": dt.datetime.fromtimestamp(t, dt.UTC), "age": age,
                       "sex": sex, "ward": "B"}
                return ser({k: v for k, v in rec.items() if k not in kw.get("drop", ())
                            and (k != "ward" or kw.get("extra"))}, ctx)
            return write
        return avro(), avro(extra=True, unit="micros"), avro(drop=("sex",)), avro(extra=True)

    if fmt == "jsonschema":
        from tests.stream.ingest.test_formats import JSON_SCHEMA

        def js(drop: tuple[str, ...] = (), extra: str | None = None):
            props = {k: v for k, v in JSON_SCHEMA["properties"].items() if k not in drop}
            if extra:
                props[extra] = {"type": "string"}
            ser = JSONSerializer(json.dumps({**JSON_SCHEMA, "properties": props}), client)

            def write(user: str, t: float, ctx, age: int = 30, sex: str = "M") -> bytes:
                rec = {"patient": {"id": user}, "event_time": t, "age": age, "sex": sex}
                if extra:
                    rec[extra] = "B"
                return ser({k: v for k, v in rec.items() if k not in drop}, ctx)
            return write
        return js(), js(extra="ward"), js(drop=("sex",)), js(extra="bed")

    def proto(**kw):
        _, cls = admission_proto(**kw)
        ser = ProtobufSerializer(cls, client, {"use.deprecated.format": False})

        def write(user: str, t: float, ctx, age: int = 30, sex: str = "M") -> bytes:
            m = cls()
            m.patient.id = user
            m.event_time.FromNanoseconds(int(t * 1e9))
            m.age = age
            if "sex" not in kw.get("drop", ()):
                m.sex = ["M", "F", "X"].index(sex)
            return ser(m, ctx)
        return write
    return proto(), proto(extra=True), proto(drop=("sex",)), proto(package="clinic")


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "jsonschema"])
def test_service_reads_registry_formats_with_evolution_poison_and_outage(broker, tmp_path, fmt) -> None:  # noqa: F811
    with SchemaRegistry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        cfg = service_config(broker.bootstrap, tmp_path, seed=1, kafka={"topic_partitions": 1},
                             schema={"user_id": "patient.id"},
                             input={"format": fmt, "schema_registry": {"url": registry.url, "timeout": "2s",
                                                                       "retry_backoff": "1s"}})
        s = settings_from(cfg)
        topic = s.kafka.input_topic
        ctx = SerializationContext(topic, MessageField.VALUE)
        v1, v2, v3, v4 = _writers(fmt, client)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})

        def send(values: list[bytes], stamp: float) -> None:
            for v in values:
                producer.produce(topic, v, partition=0, timestamp=int(stamp * 1000))
            assert producer.flush(30) == 0

        good0 = [v1(f"a{i}", T0 + 1 + i, ctx, age=20 + i) for i in range(5)]
        good1 = [v2(f"b{i}", T0 + STEP + 1 + i, ctx, sex="F") for i in range(5)]  # evolved mid-stream
        poison = {
            "schema_mismatch": v3("c0", T0 + STEP + 2, ctx),
            "undecodable": good1[0] + b"\xff",  # a varint that never ends (Protobuf) / a trailing byte (Avro)
            "not_wire_format": json.dumps({"user_id": "j", "event_time": T0 + 3,
                                           "attributes": {"age": 3, "sex": "M"}}).encode(),
            "unknown_schema": frame(4242, good0[0][5:]),
        }
        with InProcessService(s) as svc:
            assert svc.exit_code is None
            send(good0, T0 + 5)
            send([*good1, *poison.values()], T0 + STEP + 5)
            send([v1("beat", T0 + 9 * STEP, ctx)], T0 + 2 * STEP + 1)  # completes timesteps 0 and 1
            wait_for(lambda: svc.published() >= 2, 90, what="two timesteps released")
            assert svc.metric("dpstream_events_accepted_total") == 11
            for reason in poison:
                assert svc.metric("dpstream_dead_letters_total", {"reason": reason}) == 1, reason
            assert svc.health.checks().get("schema_registry", "ok") == "ok"

            # the registry goes down: a new schema id cannot be resolved, a cached one still decodes
            unseen = v4("d0", T0 + 2 * STEP + 3, ctx)  # a schema id the service has not seen yet
            registry.down = True
            send([unseen, v1("cached", T0 + 2 * STEP + 4, ctx)], T0 + 2 * STEP + 5)
            wait_for(lambda: svc.metric("dpstream_dead_letters_total", {"reason": "schema_unavailable"}) == 1, 60,
                     what="the record of an unresolvable schema id dead-lettered")
            wait_for(lambda: svc.metric("dpstream_events_accepted_total") == 12, 30, what="the cached id counted")
            ready, state, _ = svc.health.view()
            assert not ready and "schema registry failing" in state and "HTTP 503" in state
            assert "schema_unavailable" in svc.health.checks()["schema_registry"]
            registry.down = False
            time.sleep(1.2)  # past input.schema_registry.retry_backoff
            send([unseen], T0 + 2 * STEP + 6)  # replayed from the dead-letter topic, say
            wait_for(lambda: svc.metric("dpstream_events_accepted_total") == 13, 60, what="resolved after recovery")
            wait_for(lambda: svc.health.checks().get("schema_registry", "ok") == "ok", 10, what="check cleared")
            assert svc.exit_code is None
        producer = None  # librdkafka's threads stop with it, before the module's broker does
        dead, problems = dedupe_by_key(read_all(broker.bootstrap, s.kafka.dead_letter_topic,
                                                isolation_level="read_committed", expect=5))
        assert not problems
        by_reason = {dict(r.headers)["dpstream.reason"].decode(): r for r in dead.values()}
        assert set(by_reason) == set(WIRE_REASONS) and len(dead) == 5
        assert by_reason["schema_unavailable"].value == unseen  # the whole record, to replay
        assert by_reason["undecodable"].value == poison["undecodable"]
        assert b"'sex'" in dict(by_reason["schema_mismatch"].headers)["dpstream.detail"]


def test_a_scale_out_worker_chooses_the_same_decoder(tmp_path) -> None:
    """service.role worker decodes its partitions with the decoder input.format names, and a failing
    registry is a cause of its /readyz too."""
    import threading

    from stream.ingest.formats import WireDecoder
    from stream.service.http import Health
    from stream.service.metrics import Metrics
    from stream.service.worker import Worker

    cfg = service_config("127.0.0.1:9", tmp_path, kafka={"topic_partitions": 1}, schema={"user_id": "patient.id"},
                         service={"role": "worker"},
                         input={"format": "avro", "schema_registry": {"url": "http://127.0.0.1:9", "timeout": "1s"}})
    health = Health()
    w = Worker(settings_from(cfg), metrics=Metrics(), health=health, stop=threading.Event())
    assert isinstance(w.decoder, WireDecoder) and w.decoder.format == "avro"
    (r,) = w.decoder.decode([frame(3, b"\x02a")], [(0, 0)]).rejections
    assert r.reason == "schema_unavailable"
    assert "schema registry failing" in health.checks()["schema_registry"]
