"""Alert events and their releases commit together (issue 33 item 5), on the real embedded broker.

Releases 0..4 run normally; with 5..9 waiting the service is killed (SIGKILL through the
failpoint mechanism) inside the checkpoint that carries their releases and alert events, then
restarted. What the topics hold must be exactly what an uninterrupted run publishes: one payload
per timestep on the output topic, and on the alerts topic exactly the alert events that the
declared queries' detectors give on those releases (replayed offline from the published
releases), each naming a published release. A restart that loses the detectors' journaled state
(the deliberately broken variant) is caught.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from stream.service.alerts import AlertWatch
from stream.service.metrics import Metrics
from tests.kafka_harness import (  # noqa: F401
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

QUERIES = [{"name": "young_f", "where": {"age": "0-4", "sex": "F"},
            "detectors": [{"kind": "threshold", "above": -1.0e9},
                          {"kind": "cusum", "limit": 0.01, "slack": 0, "baseline": 2}]}]


def _run(bootstrap: str, tmp_path, zygote, failpoint: str, broken: bool | str = False):  # noqa: F811
    cfg = service_config(bootstrap, tmp_path / "state", seed=11, stream={"allowed_lateness": "60s"})
    cfg["queries"] = QUERIES  # a list, not a section
    cfg["alerts"] = {"topic": cfg["kafka"]["output_topic"] + ".alerts"}
    config = write_config(cfg, tmp_path / "config.yaml")
    topic_in, topic_out = cfg["kafka"]["input_topic"], cfg["kafka"]["output_topic"]
    from stream.config import KafkaSection
    from stream.service.kafka_io import ensure_topics

    ensure_topics(KafkaSection(**cfg["kafka"]), {topic_in: 1})
    batches = [[json.dumps(event(f"u{i}", t, age=3 * i + t, sex="MF"[i % 2])).encode() for i in range(20)]
               for t in range(10)]
    # a rise in the query's box from timestep 5 on (sd of the noise ~316): the uninterrupted chart
    # alerts at 5 and 6, where a chart that lost its baseline at the restart cannot answer yet
    for t in range(5, 10):
        batches[t] += [json.dumps(event(f"r{t}_{j}", t, age=2, sex="F")).encode() for j in range(2000)]

    def released() -> int:
        return len(releases_by_timestep(read_all(bootstrap, topic_out, timeout_s=5)))

    produce(bootstrap, topic_in, [m for b in batches[:5] for m in b])
    heartbeat(bootstrap, topic_in, 5, lateness=60, event_timestep=50)
    pid = zygote.spawn(config, tmp_path / "a.log", broken=broken)
    wait_for(lambda: released() >= 5, timeout=90, what="first 5 releases")
    os.kill(pid, signal.SIGTERM)
    assert zygote.wait(pid, 60) == 0
    produce(bootstrap, topic_in, [m for b in batches[5:] for m in b])
    heartbeat(bootstrap, topic_in, 10, lateness=60, event_timestep=50)
    pid = zygote.spawn(config, tmp_path / "b.log", env={"DPSTREAM_FAILPOINT": failpoint}, broken=broken)
    assert zygote.wait(pid, 90) == -signal.SIGKILL, (tmp_path / "b.log").read_text()[-2000:]
    pid = zygote.spawn(config, tmp_path / "c.log", broken=broken)
    wait_for(lambda: released() >= 10, timeout=90, what="10 releases")
    os.kill(pid, signal.SIGTERM)
    assert zygote.wait(pid, 60) == 0
    releases = releases_by_timestep(read_all(bootstrap, topic_out, timeout_s=5))
    alerts = {r.value for r in read_all(bootstrap, cfg["alerts"]["topic"], timeout_s=5)}
    return cfg, releases, alerts


def _expected(cfg, releases: dict[int, set[bytes]]) -> set[bytes]:
    watch = AlertWatch(settings_from(cfg), Metrics())
    out = watch.observe([next(iter(releases[t])) for t in sorted(releases)])
    return {o.value for o in out}


@pytest.mark.parametrize("failpoint", ["after_journal", "mid_produce", "after_produce_before_commit"])
def test_a_kill_inside_the_checkpoint_never_parts_alerts_from_their_release(broker, zygote, tmp_path,  # noqa: F811
                                                                           failpoint):
    cfg, releases, alerts = _run(broker.bootstrap, tmp_path, zygote, failpoint)
    assert sorted(releases) == list(range(10))
    assert all(len(p) == 1 for p in releases.values()), "a timestep published with two payloads"
    expected = _expected(cfg, releases)
    assert alerts == expected
    published_ids = {json.loads(next(iter(p)))["release_id"] for p in releases.values()}
    docs = [json.loads(a) for a in alerts]
    assert {d["release_id"] for d in docs} <= published_ids
    # every fresh release carries a threshold alert (above -1e9): none lost, none duplicated
    assert sorted(d["timestep"] for d in docs if d["detector"] == "threshold") == list(range(10))
    assert any(d["detector"] == "cusum" and d["timestep"] >= 5 for d in docs)


def test_the_checker_catches_a_restart_that_loses_the_detector_state(broker, zygote, tmp_path):  # noqa: F811
    cfg, releases, alerts = _run(broker.bootstrap, tmp_path, zygote, "after_journal", broken="lose-alert-state")
    assert all(len(p) == 1 for p in releases.values())
    assert alerts != _expected(cfg, releases)
