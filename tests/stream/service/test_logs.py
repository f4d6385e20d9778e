"""Logs are an allowlist of public and operational fields (docs/privacy.md §9).

A field not in :data:`stream.service.logs.FIELDS` never reaches a log line,
whatever its name or value; every field the service's code passes to
``log()`` is allowlisted (so nothing is dropped by accident); and a real run
on the embedded broker, with dead letters and late events, writes only
allowlisted fields and no per-checkpoint late or dead-letter counts.
"""

from __future__ import annotations

import ast
import io
import json
import logging
from pathlib import Path

import pytest

from stream.service.logs import FIELDS, JsonFormatter, log, sanitize, setup_logging
from tests.kafka_harness import (  # noqa: F401
    T0,
    InProcessService,
    broker,
    event,
    heartbeat,
    produce,
    service_config,
    settings_from,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[3]
ENVELOPE = {"ts", "level", "logger", "event", "error", "redacted"}


def test_fields_outside_the_allowlist_are_dropped_whatever_their_name():
    buf = io.StringIO()
    logger = setup_logging("DEBUG", stream=buf)
    try:
        log(logging.getLogger("dpstream.test"), logging.INFO, "released", timesteps=[1, 2], checkpoint=4,
            dead_letters=3, late_events=1, counts=[5, 7], noise=3, threshold=0.4, payload=b"raw",
            harmless_looking=12, offset=17, big=list(range(100)))
        (line,) = [json.loads(x) for x in buf.getvalue().splitlines()]
    finally:
        logger.handlers.clear()
    assert line["timesteps"] == [1, 2] and line["checkpoint"] == 4 and line["offset"] == 17
    for key in ("dead_letters", "late_events", "counts", "noise", "threshold", "payload", "harmless_looking"):
        assert key not in line, key
    assert line["redacted"] == sorted(["dead_letters", "late_events", "counts", "noise", "threshold", "payload",
                                       "harmless_looking", "big"])
    assert set(line) <= ENVELOPE | set(FIELDS)


def test_an_allowlisted_name_with_a_bulky_value_is_dropped_too():
    import numpy as np

    out = sanitize({"timesteps": list(range(50)), "offset": np.int64(3), "note": "ok", "seq": 2})
    assert out == {"note": "ok", "seq": 2, "redacted": ["offset", "timesteps"]}
    rec = logging.LogRecord("dpstream.x", logging.ERROR, __file__, 1, "boom", None, None)
    assert json.loads(JsonFormatter().format(rec))["event"] == "boom"


def test_every_field_the_code_logs_is_allowlisted():
    used: dict[str, str] = {}
    for path in sorted((ROOT / "stream").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "log":
                for kw in node.keywords:
                    if kw.arg not in (None, "exc_info"):
                        used[kw.arg] = str(path.relative_to(ROOT))
    assert used, "found no log() calls"
    missing = {k: v for k, v in used.items() if k not in FIELDS}
    assert not missing, f"logged fields that are not allowlisted (they would be dropped): {missing}"


@pytest.mark.kafka
def test_a_service_run_logs_only_allowlisted_fields(broker, tmp_path):  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path / "state", seed=2, kafka={"topic_partitions": 1},
                         service={"max_message_bytes": 4096})
    settings = settings_from(cfg)
    k = settings.kafka
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("dpstream")
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    try:
        with InProcessService(settings) as svc:
            good = [json.dumps(event(f"p{i}", t)).encode() for t in range(2) for i in range(4)]
            bad = [b"{nope", json.dumps({**event("x", 0), "pad": "y" * 5000}).encode()]
            produce(broker.bootstrap, k.input_topic, good + bad, partitions=1)
            heartbeat(broker.bootstrap, k.input_topic, 2, partitions=1)
            late = json.dumps(event("late", 0)).encode()  # stamped after timestep 0's deadline: late
            produce(broker.bootstrap, k.input_topic, [late], partitions=1, stamp=T0 + 3 * 60 * 60)
            wait_for(lambda: svc.published() >= 2, what="2 releases")
            wait_for(lambda: svc.metric("dpstream_late_events_total") >= 1, what="the late event")
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert any(x["event"] == "released" for x in lines)
    for x in lines:
        assert set(x) <= ENVELOPE | set(FIELDS), x
        assert "redacted" not in x, x  # the code never tries to log a field outside the allowlist
