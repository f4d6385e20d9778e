"""Records that used to stop the stream, and person ids from the record key, through the real service.

* A 1.4 MB JSON message (20,000 events, sent gzip-compressed by the
  producer, a few tens of KB on the wire) is ``oversized``: its dead letter
  is cut to a 4 KiB prefix with the original's size and SHA-256, the stream
  goes on, and a restart over the same records gives the same outputs (the
  issue measured the service before this change: the dead-letter producer
  refused the whole 1.4 MB copy and the service exited 1, again on every
  restart).
* ``schema.user_id: "@key"``: the person is the record key, canonicalised like
  a field (``"007"`` and ``"7"`` are one person); a keyless record is a
  missing id.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kafka import KafkaProducer

from stream.ingest.events import REASONS
from tests.kafka_harness import (  # noqa: F401
    STEP,
    T0,
    InProcessService,
    broker,
    dedupe_by_key,
    dedupe_by_release_id,
    event,
    heartbeat,
    produce,
    read_all,
    service_config,
    settings_from,
    wait_for,
)

pytestmark = pytest.mark.kafka


def _releases(bootstrap: str, topic: str) -> dict[int, bytes]:
    kept = dedupe_by_release_id(read_all(bootstrap, topic))
    return {json.loads(v)["timestep"]["index"]: v for v in kept.values()}


def test_a_huge_compressed_message_is_dead_lettered_bounded_and_the_stream_goes_on(broker, tmp_path):  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path / "state", seed=4, kafka={"topic_partitions": 1},
                         service={"max_events_per_message": 50_000})
    settings = settings_from(cfg)
    k = settings.kafka
    huge = json.dumps([event(f"u{i}", 0) for i in range(20_000)]).encode()
    assert len(huge) > 1_300_000
    good = [json.dumps(event(f"p{i}", t)).encode() for t in range(3) for i in range(5)]
    with InProcessService(settings) as svc:  # it creates the topics (one partition each)
        p = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip", max_request_size=4_000_000,
                          acks="all")
        p.send(k.input_topic, value=huge, partition=0, timestamp_ms=int((T0 + 1) * 1000)).get(30)
        p.flush()
        p.close()
        produce(broker.bootstrap, k.input_topic, good, partitions=1)
        heartbeat(broker.bootstrap, k.input_topic, 3, partitions=1)
        wait_for(lambda: svc.published() >= 3, what="3 releases after the huge message")
        assert svc.metric("dpstream_dead_letters_total", {"reason": "oversized"}) == 1
    first = _releases(broker.bootstrap, k.output_topic)
    assert sorted(first) == [0, 1, 2]
    assert all(json.loads(v)["counts"] is not None for v in first.values())
    dead, problems = dedupe_by_key(read_all(broker.bootstrap, k.dead_letter_topic))
    assert not problems
    (letter,) = [r for r in dead.values() if dict(r.headers)["dpstream.reason"] == b"oversized"]
    h = dict(letter.headers)
    assert len(letter.value) == 4096 and huge.startswith(letter.value)
    assert h["dpstream.truncated"] == b"true"
    assert int(h["dpstream.original.bytes"]) == len(huge)
    assert h["dpstream.original.sha256"].decode() == hashlib.sha256(huge).hexdigest()
    assert h["dpstream.source.offset"] == b"0" and h["dpstream.source.timestamp"] == str((T0 + 1) * 1000).encode()
    # a restart over the same records (journal kept) publishes nothing new and nothing different
    with InProcessService(settings) as svc:
        time.sleep(2)
        assert svc.exit_code is None  # still running
    assert _releases(broker.bootstrap, k.output_topic) == first
    again, problems = dedupe_by_key(read_all(broker.bootstrap, k.dead_letter_topic))
    assert not problems and set(again) == set(dead)


def _replay_counts(cfg: dict, users: list[str], sexes: list[str], tmp_path) -> list:
    """The counts ``dpstream replay`` releases for timestep 0 with these person ids (same stream, same seed)."""
    from stream.lab.replay import replay

    plain = {**cfg, "schema": {k: v for k, v in cfg["schema"].items() if k != "user_id"}}
    csv_path, out_path = tmp_path / "keys.csv", tmp_path / "keys.jsonl"
    rows = ["user_id,event_time,age,sex"] + [f"{u},{T0 + 1},30,{s}" for u, s in zip(users, sexes, strict=True)]
    csv_path.write_text("\n".join(rows) + "\n")
    replay(settings_from(plain), csv_path, out_path)
    (line,) = out_path.read_bytes().splitlines()[1:]
    return json.loads(line)["counts"]


def test_person_from_the_record_key(broker, tmp_path):  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path / "state", seed=6, schema={"user_id": "@key"},
                         kafka={"topic_partitions": 1})
    settings = settings_from(cfg)
    k = settings.kafka

    def body(sex: str, *, with_id: bool = False) -> bytes:
        ev = event("9", 0, sex=sex)
        if not with_id:
            del ev["user_id"]
        return json.dumps(ev).encode()

    # "007" and "7" are one person: with a contribution bound of 1 only one of their two events counts.
    # A keyless record has no person (missing_field); a body that carries a user_id field is
    # unknown_attribute (so is the harness's heartbeat, which still moves the partition's record time).
    with InProcessService(settings) as svc:  # it creates the topics (one partition each)
        p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        ts = int((T0 + 1) * 1000)
        for key, value in ((b"007", body("M")), (b"7", body("F")), (b"8", body("M")), (None, body("M")),
                           (b"9", body("M", with_id=True))):
            p.send(k.input_topic, key=key, value=value, partition=0, timestamp_ms=ts)
        p.flush()
        p.close()
        heartbeat(broker.bootstrap, k.input_topic, 1, partitions=1)
        wait_for(lambda: svc.published() >= 1, what="the release of timestep 0")
        assert svc.metric("dpstream_dead_letters_total", {"reason": "missing_field"}) == 1
        assert svc.metric("dpstream_dead_letters_total", {"reason": "unknown_attribute"}) == 2
        assert svc.metric("dpstream_events_accepted_total") == 3
    counts = json.loads(_releases(broker.bootstrap, k.output_topic)[0])["counts"]
    # the same noise (seed, stream, timestep): equal to two people, not to three
    assert counts == _replay_counts(cfg, ["7", "7", "8"], ["M", "F", "M"], tmp_path)
    assert counts != _replay_counts(cfg, ["7", "7x", "8"], ["M", "F", "M"], tmp_path)


# ---------------------------------------------------------------------------
# fuzz through the broker: nothing stops the stream, everything is accounted for, a rerun agrees

_SHAPES = st.one_of(
    st.binary(max_size=64),
    st.just(None),  # tombstone
    st.sampled_from([b"", b" ", b"\n\t", b"\xef\xbb\xbf{}", b'{"user_id":"\\ud800"}', b"[" * 50_000]),
    st.builds(lambda n: json.dumps([event(f"x{i}", 0) for i in range(n)]).encode(), st.integers(1, 3)),
    # expands far past service.max_message_bytes once the producer's compression is undone
    st.builds(lambda n: json.dumps([event("big", 0)] * n).encode(), st.sampled_from([12_000, 30_000])),
    st.builds(lambda n: b" " * n + b"{}", st.sampled_from([2_000_000])),
    st.builds(lambda uid, t: json.dumps({"user_id": uid, "event_time": T0 + t,
                                         "attributes": {"age": 30, "sex": "M"}}).encode(),
              st.one_of(st.text(max_size=8), st.integers()), st.floats(-100, 4 * STEP)),
)


def _run_over(bootstrap: str, cfg: dict, values: list, *, produce_input: bool) -> tuple[dict, dict]:
    """One service run over the input topic: (figures, dead/late letters by key with their bytes)."""
    settings = settings_from(cfg)
    k = settings.kafka
    with InProcessService(settings) as svc:
        if produce_input:
            p = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", max_request_size=8_000_000,
                              acks="all")
            for v in values:
                p.send(k.input_topic, key=b"k", value=v, partition=0, timestamp_ms=int((T0 + 1) * 1000))
            p.flush()
            p.close()
            heartbeat(bootstrap, k.input_topic, 4, partitions=1)
        wait_for(lambda: svc.metric("dpstream_messages_consumed_total") >= len(values) + 1, timeout=60,
                 what="every message consumed")
        wait_for(lambda: svc.published() >= 4, what="4 releases")
        wait_for(lambda: svc.service.positions == svc.service.committed, what="a checkpoint")
        assert svc.exit_code is None and svc.health.ready
        figures = {name: svc.metric(f"dpstream_{name}_total") for name in
                   ("events_consumed", "events_accepted", "late_events", "messages_consumed")}
        figures["dead"] = sum(svc.metric("dpstream_dead_letters_total", {"reason": r}) for r in
                              (*REASONS, "internal_error"))
    letters = {}
    for topic in (k.dead_letter_topic, k.late_topic):
        kept, problems = dedupe_by_key(read_all(bootstrap, topic))
        assert not problems
        letters.update({key: (r.value, r.headers) for key, r in kept.items()})
    releases = {json.loads(v)["timestep"]["index"]: json.loads(v)["counts"]
                for v in dedupe_by_release_id(read_all(bootstrap, k.output_topic)).values()}
    return {**figures, "releases": releases}, letters


_EVERY_SHAPE = [
    None, b"", b" ", b"\xef\xbb\xbf{}", b'{"user_id":"\\ud800"}', b"[" * 50_000, b"\xff\xfe",
    json.dumps([event("big", 0)] * 30_000).encode(),  # ~2 MB of JSON, tens of KB on the wire
    b" " * 2_000_000 + b"{}",
    json.dumps([event("a", 0), event("b", 1)]).encode(),
    json.dumps({"user_id": "late", "event_time": T0 - 50, "attributes": {"age": 30, "sex": "M"}}).encode(),
]


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@example(values=_EVERY_SHAPE)
@given(values=st.lists(_SHAPES, min_size=20, max_size=40))
def test_fuzzed_records_never_stop_the_stream_and_a_rerun_agrees(broker, values):  # noqa: F811
    with tempfile.TemporaryDirectory() as tmp:
        cfg = service_config(broker.bootstrap, Path(tmp) / "a", seed=9, kafka={"topic_partitions": 1})
        first, letters = _run_over(broker.bootstrap, cfg, values, produce_input=True)
        assert first["events_consumed"] == first["events_accepted"] + first["dead"] + first["late_events"]
        assert first["messages_consumed"] == len(values) + 1  # + the heartbeat
        # the same records again, from scratch: same stream and seed, fresh state and output topics
        again = {**cfg, "service": {**cfg["service"], "state_dir": str(Path(tmp) / "b")},
                 "kafka": {**cfg["kafka"], **{t: f"{cfg['kafka'][t]}.rerun" for t in
                                              ("output_topic", "dead_letter_topic", "late_topic", "state_topic",
                                               "group_id")
                                              if t in cfg["kafka"]}}}
        second, letters2 = _run_over(broker.bootstrap, again, values, produce_input=False)
        assert second == first
        assert letters2 == letters
