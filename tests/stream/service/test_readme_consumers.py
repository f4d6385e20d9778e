"""The README's consumer guide runs: both readers (confluent-kafka and kafka-python), copied
from the README as written, read a real service's releases on the embedded broker, each timestep
once although one release was re-sent (as after a crash), in timestep order."""

from __future__ import annotations

import itertools
import json
import re
import threading

import pytest

from tests.kafka_harness import (  # noqa: F401
    ROOT,
    WALL,
    InProcessService,
    broker,
    event,
    heartbeat,
    produce,
    read_all,
    service_config,
    settings_from,
    wait_for,
)

pytestmark = pytest.mark.kafka


def _readers() -> dict[str, str]:
    """The python code blocks of the README's consumer guide, by the client they import."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Reading releases"):text.index("### Input feeds")]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    out = {("confluent_kafka" if "confluent_kafka" in b else "kafka"): b for b in blocks}
    assert set(out) == {"confluent_kafka", "kafka"}, "the guide shows one reader per client"
    return out


def _take(code: str, bootstrap: str, topic: str, n: int, timeout: float = 60.0) -> list[dict]:
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    got: list[dict] = []

    def run() -> None:
        got.extend(itertools.islice(namespace["releases"](bootstrap, topic), n))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"the reader yielded {len(got)} of {n} releases in {timeout} s"
    return got


@pytest.mark.parametrize("client", ["confluent_kafka", "kafka"])
def test_readme_reader_sees_each_release_once(broker, tmp_path, client) -> None:  # noqa: F811
    if client == "confluent_kafka":
        pytest.importorskip("confluent_kafka")
    code = _readers()[client]
    s = settings_from(service_config(broker.bootstrap, tmp_path, seed=3, kafka={"topic_partitions": 1}))
    with InProcessService(s) as svc:
        produce(broker.bootstrap, s.kafka.input_topic,
                [json.dumps(event(f"u{i}", ts)).encode() for ts in range(3) for i in range(4)])
        heartbeat(broker.bootstrap, s.kafka.input_topic, 3)
        wait_for(lambda: svc.published() >= 3, 60, what="three releases")
    out = s.kafka.output_topic
    released = [r for r in read_all(broker.bootstrap, out, isolation_level="read_committed")
                if json.loads(r.value)["message_type"] == "release"]
    assert len(released) == 3
    # timestep 0 re-sent after the others (same bytes, as a restarted service does), then a
    # marker release: a reader that did not drop the duplicate yields timestep 0 as its 4th item
    marker = {**json.loads(released[-1].value), "release_id": "marker", "timestep": {"index": 99}}
    produce(broker.bootstrap, out, [released[0].value, json.dumps(marker).encode()],
            key=released[0].key, stamp=WALL)
    got = _take(code, broker.bootstrap, out, 4)
    assert [d["timestep"]["index"] for d in got] == [0, 1, 2, 99]
    assert [d["release_id"] for d in got[:3]] == [json.loads(r.value)["release_id"] for r in released]
