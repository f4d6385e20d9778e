"""Scale-out by partitions (issue 12 item 3): workers in one consumer group and one releaser
release exactly what one process releases from the same input and seed; a worker killed with
SIGKILL mid-run, restarted, and a worker added mid-run change nothing; every timestep is
released once."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from tests.kafka_harness import (  # noqa: F401
    FAST_GROUP,
    STEP,
    InProcessService,
    broker,
    event,
    heartbeat,
    produce,
    read_all,
    releases_by_timestep,
    service_config,
    settings_from,
    wait_for,
    write_config,
    zygote,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 4


def _input(rng: np.random.Generator, timesteps: int, people: int = 40) -> list[list[bytes]]:
    """Per timestep, messages of events; people appear in several partitions (round robin), so
    contribution bounding has to merge rows across workers."""
    out = []
    for t in range(timesteps):
        msgs = []
        for i in range(people * 2):
            u = int(rng.integers(people))
            msgs.append(json.dumps(event(f"p{u}", t, age=int(rng.integers(0, 90)), sex="MF"[u % 2],
                                         offset=1.0 + i * 0.1)).encode())
        out.append(msgs)
    return out


def _configs(bootstrap: str, tmp: Path, *, timesteps: int) -> tuple[dict, dict]:
    """(single-process config, scale-out base config): same stream id, seed, input topic."""
    single = service_config(bootstrap, tmp / "single", seed=11, kafka={"topic_partitions": PARTITIONS},
                            release={"decision": "dsat"}, privacy={"horizon": timesteps, "cutoff": 4})
    scaled = json.loads(json.dumps(single))
    k = scaled["kafka"]
    for topic in ("output_topic", "dead_letter_topic", "late_topic", "state_topic"):
        k[topic] = k[topic] + ".scaled"
    k["group_id"] = k["group_id"] + ".scaled"
    scaled["service"]["state_dir"] = str(tmp / "releaser")
    return single, scaled


def _role(cfg: dict, role: str, worker_id: str | None = None) -> dict:
    out = json.loads(json.dumps(cfg))
    out["service"]["role"] = role
    if worker_id:
        out["service"]["worker_id"] = worker_id
    return out


def _feed(bootstrap: str, topic: str, chunks: list[list[bytes]]) -> None:
    for msgs in chunks:
        produce(bootstrap, topic, msgs, partitions=PARTITIONS)
    heartbeat(bootstrap, topic, len(chunks), partitions=PARTITIONS)


def _released(bootstrap: str, topic: str, timesteps: int) -> dict[int, set[bytes]]:
    return releases_by_timestep(read_all(bootstrap, topic, isolation_level="read_committed", expect=timesteps + 1))


def _one_process(bootstrap: str, single: dict, chunks: list[list[bytes]]) -> dict[int, set[bytes]]:
    """Feed the input (and the heartbeats) and release it with one process: the reference."""
    timesteps = len(chunks)
    with InProcessService(settings_from(single)) as one:
        _feed(bootstrap, single["kafka"]["input_topic"], chunks)
        wait_for(lambda: one.published() >= timesteps, 60, what="single-process releases")
    expected = _released(bootstrap, single["kafka"]["output_topic"], timesteps)
    assert sorted(expected) == list(range(timesteps))
    return expected


def test_workers_and_releaser_release_what_one_process_releases(broker, tmp_path) -> None:  # noqa: F811
    timesteps = 6
    single, scaled = _configs(broker.bootstrap, tmp_path, timesteps=timesteps)
    chunks = _input(np.random.default_rng(3), timesteps)
    expected = _one_process(broker.bootstrap, single, chunks)
    with InProcessService(settings_from(_role(scaled, "releaser"))) as rel, \
            InProcessService(settings_from(_role(scaled, "worker", "w1"))) as w1, \
            InProcessService(settings_from(_role(scaled, "worker", "w2"))) as w2:
        wait_for(lambda: rel.published() >= timesteps, 90, what="releases from the scaled-out stream")
        assert w1.exit_code is None and w2.exit_code is None
        accepted = w1.metric("dpstream_events_accepted_total") + w2.metric("dpstream_events_accepted_total")
        assert accepted >= sum(len(c) for c in chunks)  # every event, read by some worker (the heartbeats too)
        # the group split the partitions: both did work (each reads its own partitions)
        assert w1.metric("dpstream_events_accepted_total") > 0 and w2.metric("dpstream_events_accepted_total") > 0
        # workers serve metrics and health like any process
        from urllib.request import urlopen

        with urlopen(f"{w1.server.url}/metrics", timeout=5) as r:  # noqa: S310 - loopback test server
            assert b"dpstream_events_accepted_total" in r.read()
        with urlopen(f"{w2.server.url}/readyz", timeout=5) as r:  # noqa: S310
            assert r.status == 200
    got = _released(broker.bootstrap, scaled["kafka"]["output_topic"], timesteps)
    for t in range(timesteps):
        assert len(got[t]) == 1, f"timestep {t} released {len(got[t])} times"
        assert got[t] == expected[t], f"timestep {t}: the scaled-out release differs from one process's"


def test_a_worker_killed_and_one_added_mid_run_change_nothing(broker, zygote, tmp_path) -> None:  # noqa: F811
    """Real processes: two workers and the releaser; after a third of the input worker 1 is killed
    with SIGKILL (its partitions move to worker 2), later restarted, and a third worker joins;
    the releases equal the single process's, byte for byte, one per timestep."""
    timesteps = 9
    single, scaled = _configs(broker.bootstrap, tmp_path, timesteps=timesteps)
    for cfg in (single, scaled):
        cfg["service"]["commit_interval"] = "300ms"
    chunks = _input(np.random.default_rng(5), timesteps)
    expected = _one_process(broker.bootstrap, single, chunks)
    topic = single["kafka"]["input_topic"]

    # a fresh input topic for the scaled-out run, fed while the workers come and go
    scaled["kafka"]["input_topic"] = topic + ".live"
    paths = {}
    for name, cfg in (("releaser", _role(scaled, "releaser")), ("w1", _role(scaled, "worker", "w1")),
                      ("w2", _role(scaled, "worker", "w2")), ("w3", _role(scaled, "worker", "w3"))):
        paths[name] = write_config(cfg, tmp_path / f"{name}.yaml")
    from stream.config import KafkaSection
    from stream.service.kafka_io import ensure_topics

    ensure_topics(KafkaSection(**scaled["kafka"]), {scaled["kafka"]["input_topic"]: PARTITIONS})
    logs = tmp_path / "logs"
    logs.mkdir()
    pids = {name: zygote.spawn(paths[name], logs / f"{name}.log") for name in ("releaser", "w1", "w2")}
    live = scaled["kafka"]["input_topic"]
    third = timesteps // 3
    for msgs in chunks[:third]:
        produce(broker.bootstrap, live, msgs, partitions=PARTITIONS)
    time.sleep(4)  # the group forms (FAST_GROUP: ~3 s on the embedded broker) and work is in flight
    import os

    os.kill(pids["w1"], signal.SIGKILL)
    assert zygote.wait(pids["w1"], 10) == -signal.SIGKILL
    for msgs in chunks[third:2 * third]:
        produce(broker.bootstrap, live, msgs, partitions=PARTITIONS)
    pids["w1"] = zygote.spawn(paths["w1"], logs / "w1-again.log")
    pids["w3"] = zygote.spawn(paths["w3"], logs / "w3.log")
    for msgs in chunks[2 * third:]:
        produce(broker.bootstrap, live, msgs, partitions=PARTITIONS)
    heartbeat(broker.bootstrap, live, timesteps, partitions=PARTITIONS)
    out = scaled["kafka"]["output_topic"]
    deadline = time.monotonic() + 120
    got: dict[int, set[bytes]] = {}
    while time.monotonic() < deadline:
        got = releases_by_timestep(read_all(broker.bootstrap, out, isolation_level="read_committed"))
        if len(got) >= timesteps:
            break
        time.sleep(1)
    for name, pid in pids.items():
        os.kill(pid, signal.SIGTERM)
        assert zygote.wait(pid, 30) == 0, (name, (logs / f"{name}.log").read_text()[-3000:])
    assert sorted(got)[:timesteps] == list(range(timesteps)), sorted(got)
    for t in range(timesteps):
        assert len(got[t]) == 1, f"timestep {t} released {len(got[t])} different payloads"
        assert got[t] == expected[t], f"timestep {t}: differs from the single process's release"


@pytest.mark.parametrize("change, words", [
    ({"privacy": {"contribution_bound": 2}}, "privacy.contribution_bound: 1"),
    ({"kafka": {"record_time": "watermark", "allow_data_dependent_inclusion": True},
      "stream": {"idle_timeout": "1s", "clock_skew": "5s"}}, "needs record-time inclusion"),
])
def test_scale_out_refuses_what_it_cannot_keep_exact(tmp_path, change, words) -> None:
    from stream.config import ConfigError

    cfg = service_config("127.0.0.1:1", tmp_path, seed=1)
    cfg["service"]["role"] = "worker"
    for section, values in change.items():
        cfg[section] = {**cfg[section], **values}
    with pytest.raises((ConfigError, ValueError), match=words):
        settings_from(cfg)


def test_a_worker_refuses_an_unconfirmed_log_append_time_topic(broker, tmp_path) -> None:  # noqa: F811
    """Workers decide inclusion, so they refuse what one process refuses: log-append-time on a topic
    that does not confirm message.timestamp.type=LogAppendTime (the embedded broker never does)."""
    cfg = service_config(broker.bootstrap, tmp_path, kafka={"record_time": "log-append-time"})
    cfg["stream"]["start"] = int(time.time()) // STEP * STEP
    cfg["stream"]["clock_skew"] = "5s"
    cfg["service"]["role"] = "worker"
    with InProcessService(settings_from(cfg)) as w:
        wait_for(lambda: w.exit_code is not None, 30, what="exit")
        assert w.exit_code == 2


def test_rows_handed_over_after_a_seal_go_to_the_late_topic(broker, zygote, tmp_path) -> None:  # noqa: F811
    """issue 28 item 5: the releaser seals timesteps 0..3 while the worker is paused (SIGSTOP); a record
    whose broker clock lagged (record time within timestep 1's deadline, appended after the seal)
    arrives meanwhile, and the resumed worker hands its row over. The releaser counts it
    (``dpstream_shuffle_rows_after_seal_total``, ``dpstream_late_events_total``) and sends it to the
    late topic with the reason ``arrived_after_seal``, as one process would; no release changes."""
    import os

    from kafka import KafkaProducer

    bootstrap = broker.bootstrap
    cfg = service_config(bootstrap, tmp_path / "releaser", seed=5, kafka={"topic_partitions": 1},
                         privacy={"horizon": 10, "cutoff": 4})
    topic = cfg["kafka"]["input_topic"]
    from stream.config import KafkaSection
    from stream.service.kafka_io import ensure_topics

    ensure_topics(KafkaSection(**cfg["kafka"]), {topic: 1})  # auto-created topics get 4 partitions here
    produce(bootstrap, topic, [json.dumps(event(f"p{i}", t)).encode() for t in range(4) for i in range(5)])
    heartbeat(bootstrap, topic, 4)  # the partition is past timestep 3's deadline
    worker_cfg = write_config(_role(cfg, "worker", "w1"), tmp_path / "worker.yaml")
    pid = zygote.spawn(worker_cfg, tmp_path / "worker.log")
    try:
        with InProcessService(settings_from(_role(cfg, "releaser"))) as rel:
            wait_for(lambda: rel.published() >= 4, 90, what="timesteps 0..3 released")
            os.kill(pid, signal.SIGSTOP)  # paused across the seal of what the lagging record belongs to
            lagging = json.dumps(event("lagging", 1, offset=5.0)).encode()
            p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
            p.send(topic, value=lagging, partition=0, timestamp_ms=int((event("x", 1)["event_time"] + 30) * 1000))
            p.flush()
            p.close()
            time.sleep(1.0)
            os.kill(pid, signal.SIGCONT)
            wait_for(lambda: rel.metric("dpstream_shuffle_rows_after_seal_total") >= 1, 60,
                     what="the late row reached the releaser")
            late = wait_for(lambda: read_all(bootstrap, cfg["kafka"]["late_topic"], timeout_s=3), 30,
                            what="a record on the late topic")
            assert rel.metric("dpstream_late_events_total") == 1
            assert rel.metric("dpstream_arrived_after_seal_total") == 1
    finally:
        os.kill(pid, signal.SIGTERM)
        zygote.wait(pid, 30)
    assert len({r.key for r in late}) == 1, late
    rec = late[0]
    headers = dict(rec.headers)
    assert headers["dpstream.reason"] == b"arrived_after_seal"
    assert headers["dpstream.source.topic"] == topic.encode() and headers["dpstream.source.partition"] == b"0"
    doc = json.loads(rec.value)
    assert doc["user_id"] == "lagging" and doc["event_time"] == event("lagging", 1, offset=5.0)["event_time"]
    got = _released(bootstrap, cfg["kafka"]["output_topic"], 4)
    assert sorted(got) == [0, 1, 2, 3] and all(len(v) == 1 for v in got.values())
