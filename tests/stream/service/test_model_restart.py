"""Model releases survive restarts byte for byte (issue 15 item 3), through the service.

The service runs for real (``Service.start()``/``run()``, the real journal in ``tmp_path``) with
Kafka faked in process, seeded noise, ``release.mechanism: copula`` / ``marginals`` under DSAT.
A stream stopped and restarted from its journal publishes exactly the bytes an uninterrupted run
does (the republished timesteps repeat the last model, which the journal carries with the engine
state); a transaction that fails after its checkpoint was journaled is re-sent byte for byte by
the restarted service, never redrawn. A restart that lost the model (broken variant) is caught.
"""

from __future__ import annotations

import json
import threading

import pytest

import stream.service.loop as loop_mod
from controller.step import LastRelease
from stream.config import load_settings
from stream.service.http import Health
from stream.service.metrics import Metrics
from stream.service.testing import FakeKafka, _FakeWriter, fake_kafka_parts

START = 1_700_000_000.0
TIMESTEPS = 16
RELEASE = {
    "copula": {"decision": "dsat", "mechanism": "copula", "threshold": 0.2,
               "copula": {"synthetic_size": 12, "min_records": 50}},
    "marginals": {"decision": "dsat", "mechanism": "marginals", "threshold": 0.2,
                  "marginals": {"k": 2, "synthetic_size": 6}},
}


def _settings(state_dir, which: str):
    return load_settings(None, **{
        "stream": {"id": "model", "timestep": "1s", "start": "2023-11-14T22:13:20Z"},
        "schema": {"attributes": [{"name": "x", "kind": "numeric", "min": 0, "max": 100, "bins": 5,
                                   "out_of_range": "reject"},
                                  {"name": "y", "kind": "numeric", "min": 0, "max": 100, "bins": 4,
                                   "out_of_range": "reject"}]},
        "privacy": {"unit": "user-level", "epsilon": 40, "horizon": 40, "cutoff": 6, "population": 80},
        "release": RELEASE[which],
        "randomness": {"seed": 3, "allow_seeded_noise": True},
        "kafka": {"input_topic": "in", "output_topic": "out", "record_time": "log-append-time",
                  "create_topics": False},
        "service": {"state_dir": str(state_dir), "poll_timeout": "10ms"},
    })


def _service(state_dir, which, limit):
    return loop_mod.Service(_settings(state_dir, which), metrics=Metrics(), health=Health(),
                            stop=threading.Event(), max_timesteps=limit)


def _run(monkeypatch, state_dir, which: str, stops: list[int], kafka=None) -> dict[int, list[bytes]]:
    kafka = kafka or FakeKafka(start=START, events_per_step=80, output_topic="out", two_d=True)
    for name, value in fake_kafka_parts(kafka).items():
        monkeypatch.setattr(loop_mod, name, value)
    for limit in [*stops, TIMESTEPS]:
        svc = _service(state_dir, which, limit)
        svc.start()
        assert svc.run() == 0
        svc.close()
    return kafka.released()


@pytest.mark.parametrize("which", sorted(RELEASE))
def test_stop_and_restart_publishes_the_bytes_of_an_uninterrupted_run(tmp_path, monkeypatch, which):
    whole = _run(monkeypatch, tmp_path / "a", which, [])
    restarted = _run(monkeypatch, tmp_path / "b", which, [4, 9])
    assert sorted(whole)[:TIMESTEPS] == list(range(TIMESTEPS))
    for t in range(TIMESTEPS):
        assert set(restarted[t]) == set(whole[t]) and len(set(whole[t])) == 1, t
    docs = [json.loads(whole[t][0]) for t in range(TIMESTEPS)]
    assert all(d["message_type"] == "model-release" for d in docs)
    kinds = [d["kind"] for d in docs]
    # republished timesteps straddle the restarts, so the journaled model mattered
    assert "republished" in kinds[5:] and "republished" in kinds[10:] and kinds[0] == "fresh", kinds
    assert docs[0]["model"]["synthetic"] is not None


def test_a_restart_that_loses_the_model_is_caught(tmp_path, monkeypatch):
    whole = _run(monkeypatch, tmp_path / "a", "copula", [])
    original = LastRelease.from_json.__func__

    def forgetful(cls, data):
        return original(cls, {k: v for k, v in data.items() if k != "model"})

    monkeypatch.setattr(LastRelease, "from_json", classmethod(forgetful))
    restarted = _run(monkeypatch, tmp_path / "b", "copula", [4, 9])
    assert any(set(restarted[t]) != set(whole[t]) for t in range(TIMESTEPS))


def test_a_failed_send_after_the_journal_is_re_sent_byte_for_byte(tmp_path, monkeypatch):
    """The restart runs with another seed (not part of the fingerprint): a redrawn timestep would
    differ from the uninterrupted run's bytes, a re-sent one is identical."""
    whole = _run(monkeypatch, tmp_path / "a", "copula", [])
    kafka = FakeKafka(start=START, events_per_step=80, output_topic="out", two_d=True)
    for name, value in fake_kafka_parts(kafka).items():
        monkeypatch.setattr(loop_mod, name, value)
    commit = _FakeWriter.commit
    calls = {"n": 0}

    def failing(self, records, offsets, seq):
        calls["n"] += 1
        if calls["n"] == 6:  # the checkpoint is journaled; the transaction never reaches the broker
            raise RuntimeError("broker gone")
        return commit(self, records, offsets, seq)

    monkeypatch.setattr(_FakeWriter, "commit", failing)
    svc = _service(tmp_path / "b", "copula", TIMESTEPS)
    svc.start()
    with pytest.raises(RuntimeError, match="broker gone"):
        svc.run()
    svc.close()
    before = set(kafka.released())
    lost = min(set(range(TIMESTEPS)) - before)
    monkeypatch.setattr(_FakeWriter, "commit", commit)
    other_seed = _settings(tmp_path / "b", "copula").model_copy(
        update={"randomness": _settings(tmp_path / "b", "copula").randomness.model_copy(update={"seed": 4})})
    monkeypatch.setattr(loop_mod.Service, "__init__", _with_settings(loop_mod.Service.__init__, other_seed))
    restarted = _run(monkeypatch, tmp_path / "b", "copula", [], kafka=kafka)
    assert set(restarted[lost]) == set(whole[lost])  # re-sent from the journal, not redrawn
    for t in before:
        assert set(restarted[t]) == set(whole[t])
    later = [t for t in range(lost + 1, TIMESTEPS) if json.loads(restarted[t][-1])["kind"] == "fresh"]
    assert later and any(set(restarted[t]) != set(whole[t]) for t in later)  # the other seed was in force


def _with_settings(init, settings):
    def patched(self, _settings, **kwargs):
        return init(self, settings, **kwargs)
    return patched
