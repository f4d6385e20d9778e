"""Catching up on a backlog through the real service and broker (issue 28 items 1 and 2).

The whole input is produced before the service starts (a backlog: every timestep is complete as
soon as it is read). ``service.max_releases_per_checkpoint`` bounds every checkpoint, whatever the
backlog; a kill -9 at every failpoint in the middle of a multi-checkpoint catch-up still gives one
payload per timestep, byte-identical to an uninterrupted offline replay, with every event counted
once. ``stream.end`` and ``--max-timesteps`` bound a start far behind the wall clock, and the
start-up log says what the catch-up is.
"""

from __future__ import annotations

import json
import os
import re
import signal

import numpy as np
import pytest

from stream.service.failpoints import FAILPOINTS
from stream.service.journal import Journal
from tests.kafka_harness import (  # noqa: F401
    STEP,
    T0,
    broker,
    check_published,
    produce,
    read_all,
    releases_by_timestep,
    service_config,
    synthetic_input,
    wait_for,
    write_config,
    zygote,
)
from tests.kafka_harness import _equals_replay as equals_replay

pytestmark = pytest.mark.kafka

TIMESTEPS, PER_TIMESTEP, CHUNK = 24, 10, 4


def _released(bootstrap: str, topic: str) -> int:
    return len(releases_by_timestep(read_all(bootstrap, topic, timeout_s=5)))


def _backlog(bootstrap: str, cfg: dict, *, timesteps: int, per_timestep: int, seed: int, partitions: int = 2,
             heartbeat: bool = True) -> tuple[list[list[bytes]], dict[int, int], int]:
    """Produce the whole input before any service runs: timestep t's records stamped just before its
    end (the broker's clock at the data's pace), then (``heartbeat``) one record per partition past
    the last deadline, in a later timestep that never completes."""
    from kafka import KafkaProducer

    from stream.config import KafkaSection
    from stream.service.kafka_io import ensure_topics

    k = KafkaSection(**cfg["kafka"])
    ensure_topics(k, {k.input_topic: partitions})
    rng = np.random.default_rng(seed)
    chunks, injected, bad = synthetic_input(rng, timesteps, per_timestep)
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    try:
        for t, msgs in enumerate(chunks):
            stamp = int((T0 + STEP * (t + 1)) * 1000) - 1
            for i, m in enumerate(msgs):
                p.send(k.input_topic, value=m, partition=i % partitions, timestamp_ms=stamp)
        if heartbeat:
            beat = json.dumps({"user_id": "heartbeat", "event_time": T0 + STEP * (timesteps + 3) + 1,
                               "attributes": {"age": 1, "sex": "F"}}).encode()
            for part in range(partitions):
                p.send(k.input_topic, value=beat, partition=part,
                       timestamp_ms=int((T0 + STEP * (timesteps + 1) + 1) * 1000))
        p.flush()
    finally:
        p.close()
    return chunks, injected, bad


def _config(bootstrap: str, tmp_path, **service) -> dict:
    # one poll reads the whole backlog, so every timestep completes at once
    return service_config(bootstrap, tmp_path / "state", seed=28,
                          kafka={"topic_partitions": 2, "max_poll_records": 5000},
                          stream={"allowed_lateness": f"{STEP}s"},
                          privacy={"horizon": TIMESTEPS, "cutoff": TIMESTEPS},
                          service={"max_releases_per_checkpoint": CHUNK, **service})


def _checkpoint_sizes(cfg: dict) -> list[int]:
    with Journal.open(cfg["service"]["state_dir"], cfg["stream"]["id"]) as j:
        return [len(cp.releases) for cp in j.checkpoints_on_disk()]


def test_a_backlog_is_released_in_bounded_checkpoints(broker, zygote, tmp_path):  # noqa: F811
    """24 timesteps complete in one poll; every checkpoint holds at most 4 of them (before: one
    checkpoint held the whole backlog), the releases equal an uninterrupted replay byte for byte."""
    cfg = _config(broker.bootstrap, tmp_path)
    chunks, injected, bad = _backlog(broker.bootstrap, cfg, timesteps=TIMESTEPS, per_timestep=PER_TIMESTEP, seed=1)
    config = write_config(cfg, tmp_path / "config.yaml")
    pid = zygote.spawn(config, tmp_path / "run.log")
    wait_for(lambda: _released(broker.bootstrap, cfg["kafka"]["output_topic"]) >= TIMESTEPS, timeout=90,
             what="the backlog released")
    os.kill(pid, signal.SIGTERM)
    assert zygote.wait(pid, 30) == 0
    sizes = _checkpoint_sizes(cfg)
    assert sum(sizes) == TIMESTEPS and max(sizes) <= CHUNK, sizes
    assert sizes.count(CHUNK) >= TIMESTEPS // CHUNK - 1, sizes  # pipelined full checkpoints, not one each
    violations, _ = check_published(broker.bootstrap, cfg, injected=injected, dead=bad, timesteps=TIMESTEPS)
    assert violations == []
    assert equals_replay(broker.bootstrap, cfg, chunks, tmp_path, TIMESTEPS)
    log = (tmp_path / "run.log").read_text()
    assert '"catch-up"' in log and '"per_checkpoint": 4' in log


#: the hit that falls in the middle of the catch-up: the 6th timestep drawn (2nd checkpoint), the
#: 3rd checkpoint (the 1st carries the domain and 4 releases)
_MIDWAY = {"after_noise": 6, "after_journal": 3, "mid_produce": 3, "after_produce_before_commit": 3}


@pytest.mark.parametrize("failpoint", FAILPOINTS)
def test_kill_9_in_the_middle_of_a_multi_checkpoint_catch_up(broker, zygote, tmp_path, failpoint):  # noqa: F811
    cfg = _config(broker.bootstrap, tmp_path)
    chunks, injected, bad = _backlog(broker.bootstrap, cfg, timesteps=TIMESTEPS, per_timestep=PER_TIMESTEP, seed=2)
    config = write_config(cfg, tmp_path / "config.yaml")
    out = cfg["kafka"]["output_topic"]
    pid = zygote.spawn(config, tmp_path / "a.log", env={"DPSTREAM_FAILPOINT": f"{failpoint}:{_MIDWAY[failpoint]}"})
    assert zygote.wait(pid, 60) == -signal.SIGKILL
    before = _released(broker.bootstrap, out)
    assert CHUNK <= before < TIMESTEPS, before  # killed mid-catch-up: some checkpoints out, most not
    pid = zygote.spawn(config, tmp_path / "b.log")
    wait_for(lambda: _released(broker.bootstrap, out) >= TIMESTEPS, timeout=90, what="the backlog released")
    os.kill(pid, signal.SIGTERM)
    assert zygote.wait(pid, 30) == 0
    sizes = _checkpoint_sizes(cfg)
    assert max(sizes) <= CHUNK, sizes
    violations, facts = check_published(broker.bootstrap, cfg, injected=injected, dead=bad, timesteps=TIMESTEPS)
    assert violations == [], facts
    assert equals_replay(broker.bootstrap, cfg, chunks, tmp_path, TIMESTEPS)
    restarted = (tmp_path / "b.log").read_text()
    if failpoint == "after_noise":  # nothing journaled, nothing visible: stepped again
        assert "re-sent journaled checkpoint" not in restarted
    else:
        assert "re-sent journaled checkpoint" in restarted


def _far_behind(bootstrap: str, tmp_path, **stream) -> dict:
    """``stream.start`` in 2024 and the broker's clock trusted to 5 s: the wall clock completes every
    one-minute timestep since then (about a million), not just the 20 with data."""
    return service_config(bootstrap, tmp_path / "state", kafka={"topic_partitions": 1, "max_poll_records": 5000},
                          stream={"allowed_lateness": "0s", "clock_skew": "5s", **stream},
                          privacy={"unit": "w-event", "w": 10, "cutoff": 10, "epsilon": 1},
                          release={"decision": "uniform"})


def _run_until_exit(zygote, cfg, tmp_path, name: str, timeout: float = 90) -> tuple[int | None, str]:  # noqa: F811
    config = write_config(cfg, tmp_path / f"{name}.yaml")
    pid = zygote.spawn(config, tmp_path / f"{name}.log")
    status = zygote.wait(pid, timeout)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        zygote.wait(pid, 10)
    return status, (tmp_path / f"{name}.log").read_text()


def test_a_backfill_far_behind_the_clock_stops_after_its_last_record(broker, zygote, tmp_path):  # noqa: F811
    """issue 28 item 2: 20 timesteps of data two years back. ``stream.end: last-record`` releases
    exactly 0..19 and exits 0 by itself; the start-up log says how far behind the clock it is."""
    cfg = _far_behind(broker.bootstrap, tmp_path, end="last-record")
    _backlog(broker.bootstrap, cfg, timesteps=20, per_timestep=5, seed=3, partitions=1, heartbeat=False)
    status, log = _run_until_exit(zygote, cfg, tmp_path, "backfill")
    assert status == 0, log[-2000:]
    released = releases_by_timestep(read_all(broker.bootstrap, cfg["kafka"]["output_topic"], timeout_s=5))
    assert sorted(released) == list(range(20))
    catch_up = json.loads(next(line for line in log.splitlines() if '"catch-up"' in line))
    assert catch_up["level"] == "WARNING" and catch_up["timesteps"] > 500_000  # by the wall clock, unbounded yet
    assert catch_up["from"].startswith("2024-01-01T00:00") and "stream.end last-record" in catch_up["bounded_by"]
    assert re.search(r'"released the requested number of timesteps".*"timesteps": 20', log)
    # a restart decides the same end (journaled with the first start-up's end offsets) and releases nothing
    produce(broker.bootstrap, cfg["kafka"]["input_topic"], [b"{}"], stamp=T0 + STEP * 40)
    status, log = _run_until_exit(zygote, cfg, tmp_path, "again")
    assert status == 0, log[-2000:]
    assert sorted(releases_by_timestep(read_all(broker.bootstrap, cfg["kafka"]["output_topic"],
                                                timeout_s=5))) == list(range(20))


def test_a_configured_end_instant_bounds_the_catch_up(broker, zygote, tmp_path):  # noqa: F811
    """``stream.end`` as an instant: the timesteps that start before it, even without data in them."""
    cfg = _far_behind(broker.bootstrap, tmp_path, end=T0 + STEP * 30)
    _backlog(broker.bootstrap, cfg, timesteps=20, per_timestep=5, seed=4, partitions=1, heartbeat=False)
    status, log = _run_until_exit(zygote, cfg, tmp_path, "end")
    assert status == 0, log[-2000:]
    released = releases_by_timestep(read_all(broker.bootstrap, cfg["kafka"]["output_topic"], timeout_s=5))
    assert sorted(released) == list(range(30))
    catch_up = json.loads(next(line for line in log.splitlines() if '"catch-up"' in line))
    assert catch_up["timesteps"] == 30 and catch_up["to"].startswith("2024-01-01T00:30")
