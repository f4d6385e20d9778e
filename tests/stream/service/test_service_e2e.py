"""The service end to end on the real embedded broker (in-process, fast)."""

from __future__ import annotations

import csv
import json
import time
import urllib.error
import urllib.request
from collections import Counter
from fractions import Fraction

import pytest

from stream.service.journal import journal_path
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
    releases_by_timestep,
    service_config,
    settings_from,
    wait_for,
)

pytestmark = pytest.mark.kafka


def _messages(timesteps: int, per: int, users: int, *, arrays: bool = True) -> tuple[list[bytes], list[dict]]:
    """Events in time order; several per person per timestep; every 3rd message a 4-event array."""
    evs = [event(f"u{(i * 7) % users}", t, age=(i * 13) % 100, sex="MF"[i % 2], offset=i * STEP / per)
           for t in range(timesteps) for i in range(per)]
    out, i, n = [], 0, 0
    while i < len(evs):
        n += 1
        if arrays and n % 3 == 0:
            out.append(json.dumps(evs[i:i + 4]).encode())
            i += 4
        else:
            out.append(json.dumps(evs[i]).encode())
            i += 1
    return out, evs


def _replay(settings, events: list[dict], tmp_path) -> dict[int, bytes]:
    """What ``dpstream replay`` gives for the same events and seed (a CSV of the events, in order)."""
    from stream.lab.replay import replay

    csv_path, out_path = tmp_path / "events.csv", tmp_path / "replay.jsonl"
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user_id", "event_time", "age", "sex"])
        for e in events:
            w.writerow([e["user_id"], repr(e["event_time"]), e["attributes"]["age"], e["attributes"]["sex"]])
    replay(settings, csv_path, out_path)
    lines = out_path.read_bytes().splitlines()
    assert json.loads(lines[0])["message_type"] == "domain"
    return {json.loads(line)["timestep"]["index"]: line for line in lines[1:]}


def _released(bootstrap: str, topic: str) -> dict[int, set[bytes]]:
    return releases_by_timestep(read_all(bootstrap, topic, timeout_s=5))


@pytest.mark.parametrize("partitions,lateness", [(1, "0s"), (3, "1h")])
def test_end_to_end_one_release_per_timestep_equal_to_replay(broker, tmp_path, partitions, lateness):  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path / "state", seed=11, kafka={"topic_partitions": partitions},
                         stream={"allowed_lateness": lateness})
    settings = settings_from(cfg)
    k = settings.kafka
    payloads, events = _messages(8, 30, 20)
    with InProcessService(settings) as svc:
        produce(broker.bootstrap, k.input_topic, payloads, partitions=partitions)
        heartbeat(broker.bootstrap, k.input_topic, 8, partitions=partitions,
                  lateness=settings.stream.allowed_lateness.total_seconds())
        wait_for(lambda: svc.published() >= 8, what="8 releases")
        time.sleep(0.5)
        assert svc.metric("dpstream_timesteps_sealed_total") == 8
        assert svc.metric("dpstream_releases_total", {"kind": "fresh"}) == 8
        assert svc.metric("dpstream_events_consumed_total") == 240 + partitions  # + the heartbeats
        assert svc.metric("dpstream_messages_consumed_total") == len(payloads) + partitions
        assert svc.metric("dpstream_late_events_total") == 0
    records = read_all(broker.bootstrap, k.output_topic)
    kept = dedupe_by_release_id(records)
    published = {json.loads(v)["timestep"]["index"]: v for v in kept.values()}
    assert sorted(published) == list(range(8))
    assert published == _replay(settings, events, tmp_path)
    domain = [json.loads(r.value) for r in records if json.loads(r.value)["message_type"] == "domain"]
    assert len(domain) == 1 and domain[0]["bins"] == 20
    assert all(r.key == settings.stream.id.encode() for r in records)


def test_dead_letters_carry_original_bytes_source_and_reason(broker, tmp_path):  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path / "state", seed=3,
                         service={"max_message_bytes": 8192, "max_events_per_message": 50})
    settings = settings_from(cfg)
    k = settings.kafka
    good = event("a", 0)
    far = {**good, "event_time": time.time() + 10 * 86400}
    bad = {
        b"{not json": "malformed_json",
        b"\xff\xfe\x00garbage": "malformed_json",
        b"42": "not_an_object",
        json.dumps({"user_id": "a", "attributes": {"age": 3, "sex": "M"}}).encode(): "missing_field",
        json.dumps({**good, "attributes": {"age": "old", "sex": "M"}}).encode(): "wrong_type",
        json.dumps({**good, "user_id": True}).encode(): "wrong_type",
        b'{"user_id": "a", "event_time": NaN, "attributes": {"age": 3, "sex": "M"}}': "non_finite",
        b'{"user_id": "a", "event_time": 1704067201, "attributes": {"age": Infinity, "sex": "M"}}': "non_finite",
        json.dumps({**good, "event_time": "yesterday"}).encode(): "invalid_time",
        json.dumps({**good, "user_id": "x" * 300}).encode(): "invalid_user_id",
        json.dumps({**good, "attributes": {"age": 3, "sex": "M", "height": 2}}).encode(): "unknown_attribute",
        json.dumps({**good, "attributes": {"age": 300, "sex": "M"}}).encode(): "out_of_domain",
        json.dumps({**good, "attributes": {"age": 3, "sex": "X"}}).encode(): "out_of_domain",
        json.dumps({**good, "pad": "x" * 9000}).encode(): "oversized",
        json.dumps([good] * 60).encode(): "too_many_events",
        b"[]": "empty_message",
        json.dumps(far).encode(): "far_future",
        json.dumps({**good, "event_time": T0 - 100}).encode(): "before_start",
        b" \n": "empty_value",
        json.dumps({**good, "user_id": " a"}).encode(): "invalid_user_id",  # invisible variation of "a"
        json.dumps({**good, "user_id": "a\u200b"}).encode(): "invalid_user_id",
        b'{"user_id": "\\ud800", "event_time": 1704067201, "attributes": {"age": 3, "sex": "M"}}': "invalid_user_id",
    }
    mixed = json.dumps([good, {**good, "attributes": {"age": 999, "sex": "F"}}]).encode()
    payloads = [*bad, mixed, json.dumps(event("b", 1)).encode()]
    tombstone_offset = len(payloads)  # a Kafka tombstone (null value; kafka-python needs a key for it) follows
    with InProcessService(settings) as svc:
        produce(broker.bootstrap, k.input_topic, payloads, stamp=T0 + 1)  # far_future vs its own record time
        produce(broker.bootstrap, k.input_topic, [None], key=b"deleted-entity", stamp=T0 + 1)
        wait_for(lambda: len(read_all(broker.bootstrap, k.dead_letter_topic, timeout_s=3)) >= len(bad) + 2,
                 what="dead letters")
        expected = Counter(bad.values())
        expected["out_of_domain"] += 1  # the bad element of the mixed array message
        expected["tombstone"] += 1
        for reason, n in expected.items():
            assert svc.metric("dpstream_dead_letters_total", {"reason": reason}) == n, reason
    dead, problems = dedupe_by_key(read_all(broker.bootstrap, k.dead_letter_topic))
    assert not problems and len(dead) == len(bad) + 2
    assert dict(dead[f"0:{tombstone_offset}".encode()].headers)["dpstream.reason"] == b"tombstone"
    by_offset = {int(dict(r.headers)["dpstream.source.offset"]): r for r in dead.values()}
    for offset, (payload, reason) in enumerate(bad.items()):
        r = by_offset[offset]
        h = dict(r.headers)
        assert h["dpstream.reason"].decode() == reason, (payload[:40], h)
        assert r.value == payload  # the original bytes
        assert h["dpstream.source.partition"] == b"0" and h["dpstream.source.topic"] == k.input_topic.encode()
        assert r.key == f"0:{offset}".encode()
    element = by_offset[len(bad)]  # one bad event inside an array message: only that event is dead-lettered
    assert dict(element.headers)["dpstream.source.element"] == b"1"
    assert json.loads(element.value)["attributes"]["age"] == 999
    assert element.key == f"0:{len(bad)}:1".encode()


def test_late_events_go_to_the_late_topic_and_never_change_a_release(broker, tmp_path):  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path / "state", seed=5)
    settings = settings_from(cfg)
    k = settings.kafka
    with InProcessService(settings) as svc:
        produce(broker.bootstrap, k.input_topic, [json.dumps(event(f"u{i}", t)).encode()
                                                  for t in range(5) for i in range(10)])
        heartbeat(broker.bootstrap, k.input_topic, 5)
        wait_for(lambda: svc.published() >= 5, what="5 releases")
        before = read_all(broker.bootstrap, k.output_topic)
        late = [json.dumps(event(f"late{i}", 1, age=50)).encode() for i in range(25)]
        produce(broker.bootstrap, k.input_topic, late)  # stamped after the heartbeat: past timestep 1's deadline
        wait_for(lambda: svc.metric("dpstream_late_events_total") >= 25, what="late events")
        time.sleep(0.5)
    after = read_all(broker.bootstrap, k.output_topic)
    assert [r.value for r in after] == [r.value for r in before]
    late_records, problems = dedupe_by_key(read_all(broker.bootstrap, k.late_topic))
    assert not problems and len(late_records) == 25
    assert {r.value for r in late_records.values()} == set(late)
    assert all(dict(r.headers)["dpstream.reason"] == b"timestep_sealed" for r in late_records.values())


def test_far_future_event_is_dead_lettered_and_seals_nothing(broker, tmp_path):  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path / "state", seed=5, stream={"idle_timeout": "30s"},
                         kafka={"record_time": "watermark"})  # the legacy rule (opted into)
    settings = settings_from(cfg)
    k = settings.kafka
    with InProcessService(settings) as svc:
        produce(broker.bootstrap, k.input_topic, [json.dumps(event(f"u{i}", t)).encode()
                                                  for t in range(3) for i in range(5)])
        wait_for(lambda: svc.published() >= 2, what="2 releases")
        produce(broker.bootstrap, k.input_topic,
                [json.dumps(event("skewed", 0, offset=time.time() - T0 + 1e6)).encode()])
        wait_for(lambda: svc.metric("dpstream_dead_letters_total", {"reason": "far_future"}) == 1,
                 what="far-future dead letter")
        time.sleep(1.0)
        assert sorted(_released(broker.bootstrap, k.output_topic)) == [0, 1]  # timestep 2 still open
        produce(broker.bootstrap, k.input_topic, [json.dumps(event("v", 2)).encode()])
        time.sleep(0.5)
        assert svc.metric("dpstream_late_events_total") == 0


def test_a_clock_stamped_event_in_a_backlog_does_not_jump_the_watermark(broker, tmp_path):  # noqa: F811
    # Old data waiting when the service starts (it is catching up): one event stamped with the
    # wall clock — years after the data, yet not in the future — is dead-lettered instead of
    # sealing ~10^6 empty timesteps and making the rest of the backlog late.
    cfg = service_config(broker.bootstrap, tmp_path / "state", seed=5, stream={"idle_timeout": "30s"},
                         kafka={"record_time": "watermark"})  # the legacy rule (opted into)
    settings = settings_from(cfg)
    k = settings.kafka
    backlog = [json.dumps(event(f"u{i}", t)).encode() for t in range(4) for i in range(5)]
    backlog.insert(7, json.dumps(event("clock", 0, offset=time.time() - T0 - 60)).encode())
    produce(broker.bootstrap, k.input_topic, backlog, partitions=1)  # one partition: read in order
    with InProcessService(settings) as svc:
        wait_for(lambda: svc.metric("dpstream_events_consumed_total") >= len(backlog), what="the backlog read")
        wait_for(lambda: svc.published() >= 3, what="3 releases")
        time.sleep(0.5)
        assert svc.metric("dpstream_dead_letters_total", {"reason": "far_future"}) == 1
        assert svc.metric("dpstream_late_events_total") == 0
        assert svc.metric("dpstream_events_accepted_total") == 20
        assert svc.metric("dpstream_timesteps_sealed_total") == 3  # timestep 3 waits for more data
    assert sorted(_released(broker.bootstrap, k.output_topic)) == [0, 1, 2]


def test_several_events_per_person_count_once(broker, tmp_path):  # noqa: F811
    # One person, 50 events in one timestep: the journaled audit sees 50 events,
    # the release equals the replay of the same events (bounded to one record).
    cfg = service_config(broker.bootstrap, tmp_path / "state", seed=9)
    settings = settings_from(cfg)
    k = settings.kafka
    events = [event("same", 0, age=a, offset=1 + a / 10) for a in range(50)] + [event("other", 1)]
    payloads = [json.dumps(e).encode() for e in events]
    with InProcessService(settings) as svc:
        produce(broker.bootstrap, k.input_topic, payloads)
        heartbeat(broker.bootstrap, k.input_topic, 2, event_timestep=50)
        wait_for(lambda: svc.published() >= 2, what="2 releases")
    published = {json.loads(v)["timestep"]["index"]: v
                 for v in dedupe_by_release_id(read_all(broker.bootstrap, k.output_topic)).values()}
    assert published == _replay(settings, events, tmp_path)
    from stream.service.journal import Journal

    with Journal.open(settings.service.state_dir, settings.stream.id) as j:
        audits = {r.timestep: r.audit["events"] for cp in j.checkpoints_on_disk() for r in cp.releases}
    assert audits == {0: 50, 1: 1}


def test_budget_exhaustion_is_normal(broker, tmp_path):  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path / "state", privacy={"horizon": 3, "cutoff": 3})
    settings = settings_from(cfg)
    k = settings.kafka
    with InProcessService(settings) as svc:
        produce(broker.bootstrap, k.input_topic, [json.dumps(event(f"u{i}", t)).encode()
                                                  for t in range(8) for i in range(4)])
        heartbeat(broker.bootstrap, k.input_topic, 8)
        wait_for(lambda: svc.published() >= 8, what="8 releases")
        time.sleep(0.3)
        assert svc.metric("dpstream_budget_exhausted") == 1
        assert svc.metric("dpstream_epsilon_spent") == 1
        assert svc.metric("dpstream_epsilon_remaining") == 0
        assert svc.metric("dpstream_releases_total", {"kind": "fresh"}) == 3
        assert svc.metric("dpstream_releases_total", {"kind": "republished"}) == 5
    docs = sorted((json.loads(v) for v in dedupe_by_release_id(read_all(broker.bootstrap, k.output_topic)).values()),
                  key=lambda d: d["timestep"]["index"])
    assert [d["kind"] for d in docs] == ["fresh"] * 3 + ["republished"] * 5
    assert all(Fraction(d["epsilon_spent_exact"]) <= 1 for d in docs)
    assert docs[-1]["counts"] == docs[2]["counts"]  # republished = the last fresh release


def test_http_endpoints(broker, tmp_path):  # noqa: F811
    settings = settings_from(service_config(broker.bootstrap, tmp_path / "state", seed=1))
    with InProcessService(settings) as svc:
        base = svc.server.url

        def get(path: str) -> tuple[int, bytes]:
            try:
                with urllib.request.urlopen(base + path, timeout=5) as resp:  # noqa: S310 - loopback test
                    return resp.status, resp.read()
            except urllib.error.HTTPError as err:
                return err.code, err.read()

        assert get("/healthz")[0] == 200
        status, body = get("/readyz")
        assert status == 200 and json.loads(body)["ready"] is True
        status, body = get("/metrics")
        assert status == 200 and b"dpstream_events_consumed_total" in body and b"dpstream_epsilon_remaining" in body
        status, body = get("/domain")
        assert status == 200 and json.loads(body)["message_type"] == "domain"
        assert get("/nope")[0] == 404
        svc.health.set(False, "retrying transaction")
        assert get("/readyz")[0] == 503 and get("/healthz")[0] == 200


def test_config_drift_is_refused(broker, tmp_path):  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path / "state", seed=2)
    settings = settings_from(cfg)
    with InProcessService(settings) as svc:
        produce(broker.bootstrap, settings.kafka.input_topic, [json.dumps(event("a", t)).encode() for t in range(3)])
        heartbeat(broker.bootstrap, settings.kafka.input_topic, 3)
        wait_for(lambda: svc.published() >= 3, what="releases")
    for change in ({"privacy": {**cfg["privacy"], "epsilon": 2}},
                   {"privacy": {**cfg["privacy"], "cutoff": 50}},
                   {"release": {"decision": "fixed"}},
                   {"schema": {"attributes": cfg["schema"]["attributes"][:1]}}):
        drifted = settings_from({**cfg, **change})
        svc = InProcessService(drifted)
        with svc:
            pass
        assert svc.exit_code == 2
        assert "changed" in svc.health.reason and "new stream id" in svc.health.reason
    # the original configuration still runs
    with InProcessService(settings) as svc:
        assert svc.health.ready


def test_lost_or_damaged_journal_is_refused(broker, tmp_path):  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path / "state", seed=2)
    settings = settings_from(cfg)
    with InProcessService(settings) as svc:
        produce(broker.bootstrap, settings.kafka.input_topic,
                [json.dumps(event("a", t)).encode() for t in range(4)])
        heartbeat(broker.bootstrap, settings.kafka.input_topic, 4)
        wait_for(lambda: svc.published() >= 4, what="releases")
    path = journal_path(settings.service.state_dir, settings.stream.id)
    original = path.read_bytes()

    def attempt() -> InProcessService:
        svc = InProcessService(settings)
        with svc:
            pass
        return svc

    path.write_bytes(original[: len(original) - 7])  # the committed last checkpoint cut short
    svc = attempt()
    # the last committed checkpoint is gone: Kafka and the output topic are ahead of the journal
    assert svc.exit_code == 2 and ("behind" in svc.health.reason or "does not know" in svc.health.reason)
    damaged = bytearray(original)
    damaged[20] ^= 0x20  # inside the first frame (a damaged last frame would read as a torn tail)
    path.write_bytes(bytes(damaged))
    svc = attempt()
    assert svc.exit_code == 2 and ("checksum" in svc.health.reason or "bad frame" in svc.health.reason)
    path.unlink()
    svc = attempt()
    assert svc.exit_code == 2 and "journal was lost" in svc.health.reason
    assert not path.exists()  # never silently recreated (that would reset the budget)
    path.write_bytes(original)
    svc = attempt()
    assert svc.exit_code == 0
