"""Avro, Protobuf and JSON Schema input (issue 32): records written by confluent-kafka's own
serializers against a Schema Registry reachable over HTTP (``tests/schema_registry.py``), decoded
by :func:`stream.ingest.formats.input_decoder` and validated exactly like JSON input.

No Kafka here (the service end to end: ``tests/stream/service/test_input_formats.py``).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import warnings
from pathlib import Path

import pytest

from stream.config import ConfigError
from stream.ingest.events import WIRE_REASONS, validate_batch
from stream.ingest.formats import input_decoder
from stream.ingest.schemas import RegistryClient, SchemaFileError, SchemaStore
from stream.ingest.wire import encode_indexes, frame, message_indexes
from stream.service.testing import small_settings
from tests.schema_registry import SchemaRegistry, admission_proto

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # authlib's httpx deprecation notice, imported by the client
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

T = 1_704_067_200  # 2024-01-01T00:00:00Z
UTC = dt.UTC


def avro_schema(*, drop: tuple[str, ...] = (), extra: bool = False, unit: str = "millis") -> str:
    fields = [
        {"name": "patient", "type": {"type": "record", "name": "Patient", "fields": [{"name": "id", "type": "string"}]}},
        {"name": "event_time", "type": {"type": "long", "logicalType": f"timestamp-{unit}"}},
        {"name": "age", "type": ["null", "int"], "default": None},
        {"name": "sex", "type": {"type": "enum", "name": "Sex", "symbols": ["M", "F", "X"]}},
    ]
    if extra:
        fields.insert(0, {"name": "ward", "type": "string", "default": "A"})
    return json.dumps({"type": "record", "name": "Admission", "namespace": "hospital",
                       "fields": [f for f in fields if f["name"] not in drop]})


@pytest.fixture(scope="module")
def registry():
    with SchemaRegistry() as reg:
        yield reg


@pytest.fixture()
def client(registry):
    registry.down, registry.auth = False, None
    return SchemaRegistryClient({"url": registry.url})


def ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def settings_for(fmt: str, registry: SchemaRegistry | None = None, **inp):
    src = {"schema_registry": {"url": registry.url}} if registry is not None else {}
    return small_settings(schema={"user_id": "patient.id"}, input={"format": fmt, **src, **inp})


def when(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(T + seconds, UTC)


# the same events, as JSON and as dicts for the serializers: valid ones, then each rejection kind
CASES = [  # (user id, seconds after T, age, sex)
    ("p1", 5.25, 30, "M"),
    ("007", 6.0, 45, "F"),      # canonical person key: "7", as in JSON
    ("7", 7.0, 99, "M"),
    ("p2", 8.0, None, "M"),     # missing_field (age)
    ("p3", 9.0, 1000, "F"),     # out_of_domain (age)
    ("p4", 10.0, 20, "X"),      # out_of_domain (sex is not a listed value)
    ("", 11.0, 20, "M"),        # invalid_user_id
]


def _json_reference(settings_json):
    dec = input_decoder(settings_json)
    payloads = [json.dumps({"user_id": u, "event_time": T + t,
                            "attributes": {"age": a, "sex": s}}).encode() for u, t, a, s in CASES]
    d = dec.decode(payloads, [(0, i) for i in range(len(payloads))])
    return validate_batch(d.batch, settings_json.ingest_domain(), numeric_user_ids=True)


def _same_as_json(decoded, settings) -> None:
    assert not decoded.rejections.counts(), list(decoded.rejections)
    valid, rej = validate_batch(decoded.batch, settings.ingest_domain())
    ref_valid, ref_rej = _json_reference(small_settings())
    assert valid.flat.tolist() == ref_valid.flat.tolist()
    assert valid.time.tolist() == pytest.approx(ref_valid.time.tolist(), abs=1e-6)
    assert valid.user_id.to_pylist() == ref_valid.user_id.to_pylist() == ["p1", "7", "7"]
    assert [(r.reason, r.detail, r.row) for r in rej] == [(r.reason, r.detail, r.row) for r in ref_rej]
    assert [r.reason for r in rej] == ["missing_field", "out_of_domain", "out_of_domain", "invalid_user_id"]


# ---------------------------------------------------------------------------
# each format, written by confluent-kafka's serializer, reads as the same events as JSON


@pytest.mark.parametrize("unit", ["millis", "micros"])
def test_avro_from_confluent_serializer_reads_like_json(registry, client, unit):
    ser = AvroSerializer(client, avro_schema(unit=unit))
    payloads = [ser({"patient": {"id": u}, "event_time": when(t), "age": a, "sex": s}, ctx(f"avro-{unit}"))
                for u, t, a, s in CASES]
    assert payloads[0][0] == 0  # the wire format: magic byte, then the id the registry gave
    decoded = input_decoder(settings_for("avro", registry)).decode(payloads, [(0, i) for i in range(len(CASES))])
    _same_as_json(decoded, settings_for("avro", registry))


def test_protobuf_from_confluent_serializer_reads_like_json(registry, client):
    _, adm = admission_proto(first="Note")  # Admission is message 2 of its file: message indexes [2]
    ser = ProtobufSerializer(adm, client, {"use.deprecated.format": False})
    payloads = []
    for u, t, a, s in CASES:
        m = adm()
        m.patient.id = u
        m.event_time.FromNanoseconds(int(round((T + t) * 1e9)))
        if a is not None:
            m.age = a
        m.sex = ["M", "F", "X"].index(s)
        payloads.append(ser(m, ctx("proto")))
    assert message_indexes(payloads[0]) == ((2,), 7)
    decoded = input_decoder(settings_for("protobuf", registry)).decode(payloads, [(0, i) for i in range(len(CASES))])
    _same_as_json(decoded, settings_for("protobuf", registry))
    sid = int.from_bytes(payloads[0][1:5], "big")
    assert f"GET /schemas/ids/{sid}?format=serialized" in registry.requests  # a descriptor, not .proto text


JSON_SCHEMA = {"type": "object", "properties": {
    "patient": {"type": "object", "properties": {"id": {"type": "string"}}},
    "event_time": {"type": "number"}, "age": {"type": ["integer", "null"]}, "sex": {"type": "string"}}}


def test_json_schema_from_confluent_serializer_reads_like_json(registry, client):
    ser = JSONSerializer(json.dumps(JSON_SCHEMA), client)
    payloads = [ser({"patient": {"id": u}, "event_time": T + t, "age": a, "sex": s}, ctx("jsonschema"))
                for u, t, a, s in CASES]
    decoded = input_decoder(settings_for("jsonschema", registry)).decode(payloads,
                                                                         [(0, i) for i in range(len(CASES))])
    _same_as_json(decoded, settings_for("jsonschema", registry))


# ---------------------------------------------------------------------------
# schema evolution: a new writer schema id for the same subject


def test_avro_evolution_mid_stream_and_a_schema_that_drops_a_mapped_field(registry, client, caplog):
    topic = "avro-evolution"
    v1 = AvroSerializer(client, avro_schema())
    v2 = AvroSerializer(client, avro_schema(extra=True, unit="micros"))  # a field added first, time in µs
    v3 = AvroSerializer(client, avro_schema(drop=("age",)))  # age gone: the mapping needs it
    rec = {"patient": {"id": "a"}, "event_time": when(5), "age": 30, "sex": "M"}
    p1, p2 = v1(rec, ctx(topic)), v2({**rec, "ward": "B", "patient": {"id": "b"}}, ctx(topic))
    p3 = v3({k: v for k, v in rec.items() if k != "age"}, ctx(topic))
    ids = [int.from_bytes(p[1:5], "big") for p in (p1, p2, p3)]
    assert len(set(ids)) == 3 and registry.subjects[f"{topic}-value"] == ids
    dec = input_decoder(settings_for("avro", registry))
    with caplog.at_level(logging.ERROR, logger="stream.ingest.formats"):
        d = dec.decode([p1, p2, p3, p1, p3], [(0, i) for i in range(5)])
    assert d.batch.user_id.to_pylist() == ["a", "b", "a"]  # the stream goes on around the bad schema
    assert d.batch.event_time.tolist() == pytest.approx([T + 5] * 3)
    assert [(r.reason, r.source) for r in d.rejections] == [("schema_mismatch", (0, 2)), ("schema_mismatch", (0, 4))]
    detail = d.rejections[0].detail
    assert f"schema id {ids[2]}" in detail and "'age'" in detail and "attribute 'age'" in detail
    assert d.rejections[0].payload == p3  # the original bytes, to replay once the mapping is fixed
    errors = [r for r in caplog.records if "schema id" in r.getMessage()]
    assert len(errors) == 1  # one ERROR per schema id, not one per record


def test_protobuf_evolution_and_dropped_field(registry, client):
    topic = "proto-evolution"
    _, v1 = admission_proto()
    _, v2 = admission_proto(extra=True)
    _, v3 = admission_proto(drop=("sex",))
    out = []
    for cls, uid in ((v1, "a"), (v2, "b"), (v3, "c")):
        m = cls()
        m.patient.id = uid
        m.event_time.seconds = T + 5
        m.age = 40
        if uid != "c":
            m.sex = 1
        out.append(ProtobufSerializer(cls, client, {"use.deprecated.format": False})(m, ctx(topic)))
    d = input_decoder(settings_for("protobuf", registry)).decode(out, [(0, i) for i in range(3)])
    assert d.batch.user_id.to_pylist() == ["a", "b"]
    assert d.batch.attributes["sex"].to_pylist() == ["F", "F"]
    (r,) = d.rejections
    assert r.reason == "schema_mismatch" and "'sex'" in r.detail and "hospital.Admission" in r.detail


def test_json_schema_dropped_property(registry, client):
    dropped = {**JSON_SCHEMA, "properties": {k: v for k, v in JSON_SCHEMA["properties"].items() if k != "sex"}}
    ok = JSONSerializer(json.dumps(JSON_SCHEMA), client)
    gone = JSONSerializer(json.dumps(dropped), client)
    good = {"patient": {"id": "a"}, "event_time": T + 5, "age": 30, "sex": "M"}
    payloads = [ok(good, ctx("js-evo")), gone({k: v for k, v in good.items() if k != "sex"}, ctx("js-evo"))]
    dec = input_decoder(settings_for("jsonschema", registry))
    d = dec.decode(payloads, [(0, 0), (0, 1)])
    assert d.batch.user_id.to_pylist() == ["a"] and [r.reason for r in d.rejections] == ["schema_mismatch"]
    assert "'sex'" in d.rejections[0].detail


# ---------------------------------------------------------------------------
# a poison record per format, and the registry's failures


def _avro_record(registry, client) -> bytes:
    return AvroSerializer(client, avro_schema())({"patient": {"id": "a"}, "event_time": when(5), "age": 30,
                                                 "sex": "M"}, ctx("poison"))


def test_poison_records_each_get_their_own_reason(registry, client):
    good = _avro_record(registry, client)
    sid = int.from_bytes(good[1:5], "big")
    payloads = [
        good,
        good[:-3],                       # truncated body: undecodable
        good + b"\x00",                  # trailing bytes: undecodable
        b'{"user_id": "a"}',             # JSON on an Avro topic: not_wire_format
        b"\x00\x00\x01",                 # too short for a schema id
        frame(9999, good[5:]),           # an id the registry does not know
        frame(sid, b"\x01\x02"),         # garbage body
        None,                            # a tombstone
        b"",                             # empty
    ]
    d = input_decoder(settings_for("avro", registry)).decode(payloads, [(0, i) for i in range(len(payloads))])
    assert len(d.batch) == 1
    assert [r.reason for r in sorted(d.rejections, key=lambda r: r.source)] == [
        "undecodable", "undecodable", "not_wire_format", "not_wire_format", "unknown_schema", "undecodable",
        "tombstone", "empty_value"]
    assert all(r.payload == payloads[r.source[1]] for r in d.rejections)


def test_protobuf_and_json_schema_poison(registry, client):
    _, adm = admission_proto()
    m = adm()
    m.patient.id = "a"
    m.event_time.seconds = T + 5
    m.sex = 1
    good = ProtobufSerializer(adm, client, {"use.deprecated.format": False})(m, ctx("ppoison"))
    sid = int.from_bytes(good[1:5], "big")
    bad = [frame(sid, b"\xff\xff\xff", encode_indexes((1,))),  # Admission, but not a message
           frame(sid, good[6:], encode_indexes((7,))),          # no 8th message in the file
           frame(sid, b"", b"\x81")]                            # indexes cut short
    d = input_decoder(settings_for("protobuf", registry)).decode([good, *bad], [(0, i) for i in range(4)])
    assert len(d.batch) == 1 and [r.reason for r in d.rejections] == ["undecodable"] * 3
    js = JSONSerializer(json.dumps(JSON_SCHEMA), client)({"patient": {"id": "a"}, "event_time": T + 5, "age": 3,
                                                          "sex": "M"}, ctx("jpoison"))
    sid = int.from_bytes(js[1:5], "big")
    jd = input_decoder(settings_for("jsonschema", registry)).decode(
        [js, frame(sid, b"{not json"), frame(sid, b"[1, 2]"), frame(sid, json.dumps(
            {"patient": {"id": 1.5}, "event_time": T, "age": 3, "sex": "M"}).encode()),
         frame(sid, json.dumps({"patient": {"id": "b"}, "event_time": T, "age": [3], "sex": "M"}).encode())],
        [(0, i) for i in range(5)])
    assert jd.batch.user_id.to_pylist() == ["a"]
    assert [r.reason for r in jd.rejections] == ["undecodable", "not_an_object", "wrong_type", "wrong_type"]
    # booleans are no numbers (as in JSON input), in a batch of numbers too
    flags = [frame(sid, json.dumps({"patient": {"id": u}, "event_time": t, "age": a, "sex": "M"}).encode())
             for u, t, a in (("n", T + 1, 4), ("b1", T + 1, True), ("b2", False, 5))]
    fd = input_decoder(settings_for("jsonschema", registry)).decode(flags, [(0, i) for i in range(3)])
    assert fd.batch.user_id.to_pylist() == ["n"] and fd.batch.attributes["age"].tolist() == [4.0]
    assert [(r.reason, r.detail) for r in fd.rejections] == [
        ("wrong_type", "attribute 'age' (age) has the wrong type"),
        ("wrong_type", "schema.event_time (event_time) has the wrong type")]
    assert "schema.user_id (patient.id) has the wrong type" in [r.detail for r in jd.rejections]


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_registry_outage_dead_letters_uncached_ids_and_reports_status(registry, client, caplog):
    good = _avro_record(registry, client)
    other = AvroSerializer(client, avro_schema(extra=True))({"ward": "C", "patient": {"id": "b"},
                                                            "event_time": when(6), "age": 31, "sex": "F"},
                                                           ctx("outage"))
    status: list[tuple[bool, str]] = []
    clock = _Clock()
    store = SchemaStore({}, RegistryClient(registry.url, timeout=2), retry_backoff=10, clock=clock,
                        on_status=lambda ok, why: status.append((ok, why)))
    from stream.ingest.formats import WireDecoder

    dec = WireDecoder(small_settings().ingest_domain(), "avro", store, user_id="patient.id")
    assert len(dec.decode([good]).batch) == 1  # cached from now on
    registry.down = True
    asked = store.lookups
    with caplog.at_level(logging.WARNING, logger="stream.ingest.schemas"):
        d = dec.decode([good, other, other, good])
    assert [r.levelname for r in caplog.records] == ["ERROR"]  # one line per outage, not per record
    assert "schema registry failing" in caplog.records[0].getMessage()
    assert d.batch.user_id.to_pylist() == ["a", "a"]  # the cached schema keeps decoding
    assert [r.reason for r in d.rejections] == ["schema_unavailable", "schema_unavailable"]
    assert store.lookups == asked + 1  # one request per backoff, not one per record
    assert status and status[-1][0] is False and "HTTP 503" in status[-1][1] and "schema_unavailable" in status[-1][1]
    clock.t += 11
    registry.down = False
    d = dec.decode([other])
    assert d.batch.user_id.to_pylist() == ["b"] and status[-1] == (True, "")


def test_basic_auth_and_a_refused_password_is_not_shown(registry, client):
    good = _avro_record(registry, client)
    registry.auth = ("dp", "s3cret-pw")
    try:
        ok = small_settings(schema={"user_id": "patient.id"}, input={"format": "avro", "schema_registry": {
            "url": registry.url, "basic_auth_username": "dp", "basic_auth_password": "s3cret-pw"}})
        assert len(input_decoder(ok).decode([good]).batch) == 1
        bad = small_settings(schema={"user_id": "patient.id"}, input={"format": "avro", "schema_registry": {
            "url": registry.url, "basic_auth_username": "dp", "basic_auth_password": "wrong-pw"}})
        (r,) = input_decoder(bad).decode([good]).rejections
        assert r.reason == "schema_unavailable" and "401" in r.detail and "basic_auth" in r.detail
        assert "wrong-pw" not in r.detail and "wrong-pw" not in repr(bad)
    finally:
        registry.auth = None


def test_unreachable_registry_is_schema_unavailable():
    s = small_settings(schema={"user_id": "patient.id"},
                       input={"format": "avro", "schema_registry": {"url": "http://127.0.0.1:9", "timeout": "1s"}})
    (r,) = input_decoder(s).decode([frame(1, b"\x02a")]).rejections
    assert r.reason == "schema_unavailable" and "could not be reached" in r.detail


# ---------------------------------------------------------------------------
# local schema files (air-gapped), configuration


def test_local_schema_files_for_each_format(tmp_path: Path):
    import io

    from fastavro import parse_schema, schemaless_writer
    from google.protobuf import descriptor_pb2, timestamp_pb2

    avsc = tmp_path / "admission.avsc"
    avsc.write_text(avro_schema())
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(json.loads(avro_schema())),
                      {"patient": {"id": "a"}, "event_time": (T + 5) * 1000, "age": 3, "sex": "F"})
    d = input_decoder(settings_for("avro", schemas={42: str(avsc)})).decode([frame(42, buf.getvalue())])
    assert d.batch.user_id.to_pylist() == ["a"] and d.batch.event_time.tolist() == [T + 5]
    (r,) = input_decoder(settings_for("avro", schemas={42: str(avsc)})).decode([frame(43, buf.getvalue())]).rejections
    assert r.reason == "unknown_schema" and "input.schemas" in r.detail

    fdp, adm = admission_proto()
    fds = descriptor_pb2.FileDescriptorSet()
    fds.file.add().ParseFromString(timestamp_pb2.DESCRIPTOR.serialized_pb)  # --include_imports: deps first
    fds.file.append(fdp)
    desc = tmp_path / "admission.desc"
    desc.write_bytes(fds.SerializeToString())
    m = adm()
    m.patient.id = "b"
    m.event_time.seconds = T + 6
    m.sex = 2
    d = input_decoder(settings_for("protobuf", schemas={5: str(desc)})).decode(
        [frame(5, m.SerializeToString(), encode_indexes((1,)))])  # Admission: the file's second message
    assert d.batch.user_id.to_pylist() == ["b"] and d.batch.attributes["sex"].to_pylist() == ["X"]
    assert d.batch.attributes["age"].to_pylist() == [None]  # proto3 optional, unset: missing

    js = tmp_path / "admission.json"
    js.write_text(json.dumps(JSON_SCHEMA))
    d = input_decoder(settings_for("jsonschema", schemas={3: str(js)})).decode(
        [frame(3, json.dumps({"patient": {"id": "c"}, "event_time": "2024-01-01T00:00:07Z", "age": 9,
                              "sex": "M"}).encode())])
    assert d.batch.user_id.to_pylist() == ["c"]
    valid, rej = validate_batch(d.batch, small_settings().ingest_domain())
    assert valid.time.tolist() == [T + 7] and not len(rej)

    from stream.config import missing_files

    assert missing_files(settings_for("avro", schemas={42: str(avsc), 7: str(tmp_path / "missing.avsc")})) == [
        f"input.schemas.7: no such file {str(tmp_path / 'missing.avsc')!r}; mount or copy it there, or correct the path"]
    with pytest.raises(SchemaFileError, match="input.schemas.7"):
        input_decoder(settings_for("avro", schemas={7: str(tmp_path / "missing.avsc")}))
    with pytest.raises(SchemaFileError, match="FileDescriptorSet"):
        input_decoder(settings_for("protobuf", schemas={7: str(avsc)}))


def test_attribute_paths_by_input_fields_and_record_key(registry, client):
    schema = json.dumps({"type": "record", "name": "Flat", "fields": [
        {"name": "ts", "type": "double"},
        {"name": "demo", "type": ["null", {"type": "record", "name": "Demo", "fields": [
            {"name": "years", "type": "long"}, {"name": "gender", "type": "string"}]}]}]})
    ser = AvroSerializer(client, schema)
    payloads = [ser({"ts": T + 1.5, "demo": {"years": 50, "gender": "F"}}, ctx("flat")),
                ser({"ts": T + 2.5, "demo": None}, ctx("flat"))]
    s = small_settings(schema={"user_id": "@key", "event_time": "ts"},
                       input={"format": "avro", "schema_registry": {"url": registry.url},
                              "fields": {"age": "demo.years", "sex": "demo.gender"}})
    d = input_decoder(s).decode(payloads, [(0, 0), (0, 1)], keys=[b"k1", b"k2"])
    valid, rej = validate_batch(d.batch, s.ingest_domain())
    assert valid.user_id.to_pylist() == ["k1"] and valid.time.tolist() == [T + 1.5]
    assert [r.reason for r in rej] == ["missing_field"]  # a null record along the path: missing


def test_configuration_errors():
    with pytest.raises(ConfigError, match="input.format avro needs the writer schemas"):
        small_settings(input={"format": "avro"})
    with pytest.raises(ConfigError, match="apply to input.format avro"):
        small_settings(input={"schemas": {1: "a.avsc"}})
    with pytest.raises(ConfigError, match="basic_auth_username and basic_auth_password"):
        small_settings(input={"format": "avro", "schema_registry": {"url": "http://r", "basic_auth_username": "u"}})
    with pytest.raises(ConfigError, match=r"input.fields names \['colour'\]"):
        small_settings(input={"format": "avro", "schemas": {1: "a.avsc"}, "fields": {"colour": "c"}})
    s = small_settings(input={"format": "avro", "schema_registry": {
        "url": "https://r", "basic_auth_username": "u", "basic_auth_password": "pw-123"}})
    assert "pw-123" not in s.model_dump_json() and "pw-123" not in repr(s)
    assert input_decoder(small_settings()).__class__.__name__ == "EventDecoder"  # json stays the default


def test_wire_reasons_are_reason_codes():
    from stream.ingest.events import DEAD_LETTER_REASONS

    assert set(WIRE_REASONS) <= set(DEAD_LETTER_REASONS)


def test_the_readme_input_format_examples_are_valid_configuration(monkeypatch):
    import re

    import yaml

    from tests.kafka_harness import ROOT

    text = (ROOT / "README.md").read_text()
    guide = text[text.index("### Input formats"):text.index("## More than one core")]
    blocks = re.findall(r"\*\*(Avro|Protobuf|JSON Schema)\*\*.*?```yaml\n(.*?)```", guide, flags=re.S)
    assert [name for name, _ in blocks] == ["Avro", "Protobuf", "JSON Schema"]
    for name, block in blocks:
        doc = yaml.safe_load(block)
        if "basic_auth_username" in block:  # the password from the environment, as the comment says
            monkeypatch.setenv("DPSTREAM_INPUT__SCHEMA_REGISTRY__BASIC_AUTH_PASSWORD", "from-the-environment")
        else:
            monkeypatch.delenv("DPSTREAM_INPUT__SCHEMA_REGISTRY__BASIC_AUTH_PASSWORD", raising=False)
        s = small_settings(**doc)
        assert s.input.format == {"Avro": "avro", "Protobuf": "protobuf", "JSON Schema": "jsonschema"}[name]
        if s.input.schema_registry is not None:  # nothing to read at construction: the decoder builds
            if s.input.schema_registry.basic_auth_username:  # the secret came from the environment, as documented
                assert s.input.schema_registry.basic_auth_password.get_secret_value() == "from-the-environment"
            if s.input.schema_registry.ssl_cafile:  # a file of the deployment: checked by `run` (exit 2)
                from stream.config import missing_files

                assert [line.split(":")[0] for line in missing_files(s)] == ["input.schema_registry.ssl_cafile"]
            else:
                assert input_decoder(s).format == s.input.format


def test_a_missing_library_is_named_at_start_up(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "fastavro", None)  # as if not installed
    with pytest.raises(ImportError, match=r"input.format avro needs the fastavro library.*dpstream\[avro\]"):
        input_decoder(settings_for("avro", schema_registry={"url": "http://127.0.0.1:9"}))


def test_a_proto_file_is_compiled_with_protoc(tmp_path: Path):
    """``input.schemas`` may name a ``.proto`` when protoc is on the PATH (else a clear refusal)."""
    import shutil

    if shutil.which("protoc") is None:
        pytest.skip("protoc not installed (Debian: apt-get install protobuf-compiler); the .desc path is tested above")
    proto = tmp_path / "admission.proto"
    proto.write_text('''syntax = "proto3";
package clinic;
import "google/protobuf/timestamp.proto";
message Admission {
  message Patient { string id = 1; }
  Patient patient = 1;
  google.protobuf.Timestamp event_time = 2;
  optional int32 age = 3;
  enum Sex { M = 0; F = 1; }
  Sex sex = 4;
}
''')
    dec = input_decoder(settings_for("protobuf", schemas={11: str(proto)}))
    _, adm = admission_proto(package="clinic")  # the same wire layout, fields 1-4
    m = adm()
    m.patient.id = "p"
    m.event_time.seconds = T + 9
    m.age = 64
    m.sex = 1
    d = dec.decode([frame(11, m.SerializeToString(), encode_indexes((0,)))])
    assert d.batch.user_id.to_pylist() == ["p"] and d.batch.attributes["sex"].to_pylist() == ["F"]
    assert d.batch.attributes["age"].tolist() == [64.0]
    bad = tmp_path / "bad.proto"
    bad.write_text("message {")
    with pytest.raises(SchemaFileError, match="protoc refused"):
        input_decoder(settings_for("protobuf", schemas={12: str(bad)}))


def test_check_config_refuses_a_schema_file_that_is_not_one(tmp_path: Path, capsys):
    """``dpstream check-config`` (and ``run``) exit 2 naming the input.schemas entry, before any Kafka."""
    import yaml

    from stream.commands.check_config import check
    from tests.kafka_harness import service_config

    cfg = service_config("127.0.0.1:9", tmp_path, schema={"user_id": "patient.id"},
                         input={"format": "protobuf", "schemas": {7: str(tmp_path / "x.desc")}})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    (tmp_path / "x.desc").write_bytes(b"\xff\xff not a descriptor set")
    with pytest.raises(ConfigError, match=r"input.schemas.7: .*x.desc' is not a FileDescriptorSet"):
        check(str(path))
    assert check(str(path), check_files=False) == 0  # checked on another machine: files not read
    fds_path = tmp_path / "x.desc"
    from google.protobuf import descriptor_pb2, timestamp_pb2

    fdp, _ = admission_proto()
    fds = descriptor_pb2.FileDescriptorSet()
    fds.file.add().ParseFromString(timestamp_pb2.DESCRIPTOR.serialized_pb)
    fds.file.append(fdp)
    fds_path.write_bytes(fds.SerializeToString())
    assert check(str(path)) == 0


def test_protobuf_schema_with_a_reference_to_another_file(registry, client):
    """A .proto importing another user file: the serializer registers the import as a reference
    (subject = its file name), dpstream fetches it by subject and version and loads both."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    F = descriptor_pb2.FieldDescriptorProto
    common = descriptor_pb2.FileDescriptorProto(name="ward/common.proto", package="ward", syntax="proto3")
    common.message_type.add(name="Person").field.add(name="id", number=1, type=F.TYPE_STRING,
                                                     label=F.LABEL_OPTIONAL)
    main = descriptor_pb2.FileDescriptorProto(name="ward/visit.proto", package="ward", syntax="proto3",
                                              dependency=["ward/common.proto", "google/protobuf/timestamp.proto"])
    visit = main.message_type.add(name="Visit")
    visit.field.add(name="patient", number=1, type=F.TYPE_MESSAGE, type_name=".ward.Person", label=F.LABEL_OPTIONAL)
    visit.field.add(name="event_time", number=2, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp",
                    label=F.LABEL_OPTIONAL)
    visit.field.add(name="age", number=3, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    visit.field.add(name="sex", number=4, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(common)
    pool.Add(main)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("ward.Visit"))
    m = cls()
    m.patient.id = "v1"
    m.event_time.seconds = T + 3
    m.age, m.sex = 44.5, "F"
    payload = ProtobufSerializer(cls, client, {"use.deprecated.format": False})(m, ctx("visits"))
    sid = int.from_bytes(payload[1:5], "big")
    assert registry.schemas[sid]["references"], "the serializer registered the import as a reference"
    d = input_decoder(settings_for("protobuf", registry)).decode([payload])
    assert d.batch.user_id.to_pylist() == ["v1"] and d.batch.attributes["age"].tolist() == [44.5]
    assert any(r.startswith("GET /subjects/ward%2Fcommon.proto/versions/") or
               r.startswith("GET /subjects/ward/common.proto/versions/") for r in registry.requests)
