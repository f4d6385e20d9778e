"""kill -9 inside a journal compaction, through the service on the embedded broker (issue 19 item 2).

``service.journal_compact_bytes: 0`` makes the service compact after every checkpoint, and
``DPSTREAM_FAILPOINT=<compaction point>`` kills it there, right after a checkpoint carrying
releases committed: half-way through writing the new file, before the rename, after it. The
restart must resume at the same next timestep with the same ledger and publish nothing twice
(the checker of the other crash tests reads everything produced, aborted records included).

The checker also counts events per timestep from the private audit of the journaled checkpoints;
compaction drops old checkpoints (that is its purpose), so the test keeps a copy of every
checkpoint seen on disk before each run and gives the checker their union.
"""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from stream.service.failpoints import COMPACTION_FAILPOINTS
from stream.service.journal import Journal
from tests.kafka_harness import (  # noqa: F401
    broker,
    check_published,
    event,
    heartbeat,
    produce,
    read_all,
    releases_by_timestep,
    service_config,
    wait_for,
    write_config,
    zygote,
)

pytestmark = pytest.mark.kafka


def _released(bootstrap: str, topic: str) -> int:
    return len(releases_by_timestep(read_all(bootstrap, topic, timeout_s=5)))


def _started_at(log_text: str) -> list[int]:
    return [int(m) for m in re.findall(r'"next_timestep": ?(\d+)', log_text)]


@pytest.mark.parametrize("failpoint", COMPACTION_FAILPOINTS)
def test_kill_9_during_compaction_restarts_at_the_same_timestep(broker, zygote, tmp_path, monkeypatch,  # noqa: F811
                                                                 failpoint):
    bootstrap = broker.bootstrap
    cfg = service_config(bootstrap, tmp_path / "state", stream={"allowed_lateness": "60s"})
    config = write_config(cfg, tmp_path / "config.yaml")
    compacting = write_config({**cfg, "service": {**cfg["service"], "journal_compact_bytes": 0}},
                              tmp_path / "compacting.yaml")
    seen: dict[int, object] = {}

    def keep_checkpoints() -> None:
        with Journal.open(cfg["service"]["state_dir"], cfg["stream"]["id"]) as j:
            seen.update({cp.seq: cp for cp in j.checkpoints_on_disk()})
    topic_in, topic_out = cfg["kafka"]["input_topic"], cfg["kafka"]["output_topic"]
    from stream.config import KafkaSection
    from stream.service.kafka_io import ensure_topics

    ensure_topics(KafkaSection(**cfg["kafka"]), {topic_in: 1})
    batches = [[json.dumps(event(f"u{i}", t, age=7 * i + t)).encode() for i in range(10)] for t in range(10)]
    produce(bootstrap, topic_in, [m for b in batches[:5] for m in b])
    heartbeat(bootstrap, topic_in, 5, lateness=60, event_timestep=50)
    logs = [tmp_path / "a.log", tmp_path / "b.log", tmp_path / "c.log"]
    pid = zygote.spawn(config, logs[0])
    wait_for(lambda: _released(bootstrap, topic_out) >= 5, what="first 5 releases")
    os.kill(pid, signal.SIGTERM)
    assert zygote.wait(pid, 20) == 0
    keep_checkpoints()
    # timesteps 5..9 are complete before the second run starts: its first checkpoint carries their
    # releases, commits them, and the compaction that follows is killed
    produce(bootstrap, topic_in, [m for b in batches[5:] for m in b])
    heartbeat(bootstrap, topic_in, 10, lateness=60, event_timestep=50)
    pid = zygote.spawn(compacting, logs[1], env={"DPSTREAM_FAILPOINT": failpoint})
    assert zygote.wait(pid, 30) == -signal.SIGKILL
    with Journal.open(cfg["service"]["state_dir"], cfg["stream"]["id"]) as j:
        after_crash = (j.last_seq, j.last_timestep, j.engine)
    keep_checkpoints()
    assert after_crash[1] is not None and after_crash[1] >= 5  # the crash came after releases committed
    pid = zygote.spawn(compacting, logs[2])
    wait_for(lambda: "started" in logs[2].read_text() if logs[2].exists() else False, what="restart")
    wait_for(lambda: _released(bootstrap, topic_out) >= 10, what="10 releases")
    os.kill(pid, signal.SIGTERM)
    assert zygote.wait(pid, 20) == 0
    restart_log = logs[2].read_text()
    assert _started_at(restart_log)[0] == after_crash[1] + 1  # the same next timestep
    assert "re-sent journaled checkpoint" not in restart_log  # it had committed: nothing to re-send
    with Journal.open(cfg["service"]["state_dir"], cfg["stream"]["id"]) as j:
        assert j.last_seq >= after_crash[0]
        if j.last_timestep == after_crash[1]:
            assert j.engine == after_crash[2]  # the same ledger and controller state
    keep_checkpoints()
    on_disk = Journal.checkpoints_on_disk
    monkeypatch.setattr(Journal, "checkpoints_on_disk",
                        lambda self: iter([seen[q] for q in sorted(seen)]) if seen else on_disk(self))
    violations, _ = check_published(bootstrap, cfg, injected={t: 10 for t in range(10)}, dead=0, timesteps=10)
    assert violations == []
