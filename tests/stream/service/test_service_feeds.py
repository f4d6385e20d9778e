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
import time

import pytest
from kafka import KafkaProducer

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
