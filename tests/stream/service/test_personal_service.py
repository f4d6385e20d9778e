"""``privacy.personal`` through the service on the real embedded broker: tiers routed by the events'
consent field, releases equal to the offline replay, a restart continues the stream, and a changed
budget declaration under the same stream id is refused at start-up."""

from __future__ import annotations

import csv
import io
import json
import logging
from fractions import Fraction

import jsonschema
import pytest

from stream.messages import SCHEMA_DIR
from stream.service.logs import JsonFormatter
from tests.kafka_harness import (  # noqa: F401
    STEP,
    T0,
    InProcessService,
    broker,
    dedupe_by_release_id,
    heartbeat,
    produce,
    read_all,
    service_config,
    settings_from,
    wait_for,
)

pytestmark = pytest.mark.kafka

TIERS = {"basic": "0.5", "research": "2"}
CONSENT = ["basic", "research", None, "basic", "undeclared"]


def _events(first: int, last: int) -> list[dict]:
    out = []
    for t in range(first, last):
        for i in range(24):
            attrs = {"age": (i * 13) % 100, "sex": "MF"[i % 2]}
            if CONSENT[i % 5] is not None:
                attrs["consent"] = CONSENT[i % 5]
            out.append({"user_id": f"u{i}", "event_time": T0 + STEP * t + 1 + i, "attributes": attrs})
    return out


def _config(bootstrap, state, stream_id, tiers=TIERS):
    return service_config(
        bootstrap, state, stream_id=stream_id, seed=5,
        privacy={"unit": "w-event", "w": 1, "epsilon": "1", "horizon": None, "cutoff": 1,  # Sampling: w = 1 (§12.7)
                 "personal": {"mechanism": "sampling", "threshold": "2", "attribute": "consent", "tiers": tiers,
                              "persons": {"basic": 40, "research": 30, "default": 30}}},
        release={"decision": "dsat"},
    )


def _replay(settings, events, tmp_path) -> dict[int, bytes]:
    """The offline replay of the same events (a CSV with the consent column) and seed."""
    from stream.lab.replay import replay

    path, out = tmp_path / "events.csv", tmp_path / "replay.jsonl"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user_id", "event_time", "age", "sex", "consent"])
        for e in events:
            a = e["attributes"]
            w.writerow([e["user_id"], repr(e["event_time"]), a["age"], a["sex"], a.get("consent", "")])
    replay(settings, path, out)
    lines = out.read_bytes().splitlines()[1:]
    return {json.loads(x)["timestep"]["index"]: x for x in lines}


def test_personal_stream_on_the_broker_restarts_and_refuses_a_changed_declaration(broker, tmp_path):  # noqa: F811
    cfg = _config(broker.bootstrap, tmp_path / "state", "pdp-ward")
    settings = settings_from(cfg)
    k = settings.kafka
    first, second = _events(0, 4), _events(4, 7)
    with InProcessService(settings) as svc:
        produce(broker.bootstrap, k.input_topic, [json.dumps(e).encode() for e in first])
        heartbeat(broker.bootstrap, k.input_topic, 4, event_timestep=50)
        wait_for(lambda: svc.published() >= 4, what="4 releases")
    assert svc.exit_code == 0
    with InProcessService(settings_from(cfg)) as again:  # restart: continues from the journal
        produce(broker.bootstrap, k.input_topic, [json.dumps(e).encode() for e in second])
        heartbeat(broker.bootstrap, k.input_topic, 7, event_timestep=50)
        wait_for(lambda: again.published() >= 3, what="3 more releases")
    records = read_all(broker.bootstrap, k.output_topic)
    kept = dedupe_by_release_id(records)
    messages = [(json.loads(v), v) for v in kept.values()]
    published = {m["timestep"]["index"]: v for m, v in messages if m["message_type"] == "release"}
    assert sorted(published) == list(range(7))
    schema = json.loads((SCHEMA_DIR / "release.schema.json").read_text())
    budgets = {"basic": Fraction(1, 2), "research": Fraction(2), "default": Fraction(1)}
    for raw in published.values():
        msg = json.loads(raw)
        jsonschema.validate(msg, schema)
        for tier in msg["personal"]["tiers"]:
            assert Fraction(tier["window_spent_exact"]) <= budgets[tier["tier"]]
    # the heartbeat events (no consent field, default tier) sit in timestep 50, which is never sealed
    assert published == _replay(settings, first + second, tmp_path)

    changed = settings_from(_config(broker.bootstrap, tmp_path / "state", "pdp-ward",
                                    tiers={"basic": "0.6", "research": "2"}))
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter())
    logging.getLogger("dpstream").addHandler(handler)
    try:
        refused = InProcessService(changed)
        with refused:
            pass
    finally:
        logging.getLogger("dpstream").removeHandler(handler)
    assert refused.exit_code == 2
    assert "privacy configuration of stream 'pdp-ward' changed" in buf.getvalue()
