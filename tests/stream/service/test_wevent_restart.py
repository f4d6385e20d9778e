"""Stop-and-restart equivalence for the w-event mechanisms with state (PeGaSus), through the service.

The service runs for real (``Service.start()``/``run()``, the real journal in ``tmp_path``) with
Kafka faked in process (:func:`stream.service.testing.fake_kafka_parts`), seeded noise. A stream
stopped after a few timesteps and restarted from its journal must publish, timestep by timestep,
the same counts, kinds and accuracy as the same stream run without a stop: PeGaSus's open group
(its size and the sum of its perturbed histograms) is journaled with the engine state and
restored, not rebuilt. A restart that lost the group (the broken variant below) is caught.
"""

from __future__ import annotations

import json
import threading

import pytest

import stream.service.loop as loop_mod
from controller.policies.wevent import PegasusPolicy
from stream.config import load_settings
from stream.service.http import Health
from stream.service.metrics import Metrics
from stream.service.testing import FakeKafka, fake_kafka_parts

START = 1_700_000_000.0
TIMESTEPS = 24


def _settings(state_dir, decision: str):
    return load_settings(None, **{
        "stream": {"id": "wev", "timestep": "1s", "start": "2023-11-14T22:13:20Z"},
        "schema": {"attributes": [{"name": "x", "kind": "numeric", "min": 0, "max": 100, "bins": 5,
                                   "out_of_range": "reject"}]},
        "privacy": {"unit": "w-event", "epsilon": 4, "w": 4, "population": 1000},
        "release": {"decision": decision, "mechanism": "lpa"},
        "randomness": {"seed": 3, "allow_seeded_noise": True},
        "kafka": {"input_topic": "in", "output_topic": "out", "record_time": "log-append-time",
                  "create_topics": False},
        "service": {"state_dir": str(state_dir), "poll_timeout": "10ms"},
    })


def _run(monkeypatch, state_dir, decision: str, stops: list[int]) -> dict[int, dict]:
    """Run to TIMESTEPS releases, stopping (and restarting from the journal) after each of ``stops``."""
    kafka = FakeKafka(start=START, events_per_step=60, output_topic="out")
    for name, value in fake_kafka_parts(kafka).items():
        monkeypatch.setattr(loop_mod, name, value)
    for limit in [*stops, TIMESTEPS]:
        svc = loop_mod.Service(_settings(state_dir, decision), metrics=Metrics(), health=Health(),
                               stop=threading.Event(), max_timesteps=limit)
        svc.start()
        assert svc.run() == 0
        svc.close()
    out = {}
    for t, copies in kafka.released().items():
        doc = json.loads(copies[-1])
        out[t] = {k: doc.get(k) for k in ("counts", "kind", "accuracy", "details", "epsilon")}
    return out


@pytest.mark.parametrize("decision", ["pegasus", "sample", "fast", "adaptive-sample"])
def test_stop_and_restart_publishes_what_an_uninterrupted_run_does(tmp_path, monkeypatch, decision):
    whole = _run(monkeypatch, tmp_path / "a", decision, [])
    restarted = _run(monkeypatch, tmp_path / "b", decision, [5, 11])
    assert sorted(whole)[:TIMESTEPS] == list(range(TIMESTEPS))
    assert {t: restarted[t] for t in range(TIMESTEPS)} == {t: whole[t] for t in range(TIMESTEPS)}
    if decision == "pegasus":  # groups span the restarts, so the restored state mattered
        sizes = [(whole[t]["details"] or {}).get("smoothed_over", 1) for t in range(TIMESTEPS)]
        assert max(sizes) >= 3


def test_a_restart_that_loses_the_group_is_caught(tmp_path, monkeypatch):
    whole = _run(monkeypatch, tmp_path / "a", "pegasus", [])
    monkeypatch.setattr(PegasusPolicy, "state_from_json", lambda self, data: self.reset())
    restarted = _run(monkeypatch, tmp_path / "b", "pegasus", [5, 11])
    assert any(restarted[t] != whole[t] for t in range(TIMESTEPS))
