"""Stop, crash and restart with a smoothing ``release.postprocess``, through the service.

The Kalman/EWMA smoothers carry state from one timestep to the next (a function of earlier
releases only). The service journals it inside the engine snapshot, so a stream stopped (or
killed between journaling a checkpoint and committing it) and restarted from its journal must
publish exactly the bytes an uninterrupted run publishes, every copy of every timestep. The
service runs for real (``Service.start()``/``run()``, the real journal in ``tmp_path``, journal
compaction after every checkpoint in one variant) with Kafka faked in process and seeded noise.
A restart that loses the filter state (the broken variant) is caught; a snapshot without it is
refused. The same property through the embedded broker with kill -9s is in
``tests/stream/service/test_service_crash.py::test_smoothed_releases_survive_a_stop_and_a_kill_byte_for_byte``.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import stream.service.loop as loop_mod
from controller.errors import StateError
from histogram.postprocess import PostProcessor, PostState
from stream.config import load_settings
from stream.pipeline import ReleasePipeline
from stream.service.http import Health
from stream.service.metrics import Metrics
from stream.service.testing import FakeKafka, fake_kafka_parts

START = 1_700_000_000.0
TIMESTEPS = 20


CRASHES: list[str] = []


class _Crash(BaseException):
    """Stands in for kill -9 at a failpoint."""


def _settings(state_dir, decision: str, chain: str, compact: bool = False):
    return load_settings(None, **{
        "stream": {"id": "smooth", "timestep": "1s", "start": "2023-11-14T22:13:20Z"},
        "schema": {"attributes": [{"name": "x", "kind": "numeric", "min": 0, "max": 100, "bins": 5,
                                   "out_of_range": "reject"}]},
        "privacy": {"unit": "w-event", "epsilon": 1, "w": 4, "cutoff": 2, "population": 100},
        "release": {"decision": decision, "mechanism": "lpa", "postprocess": chain},
        "randomness": {"seed": 7, "allow_seeded_noise": True},
        "kafka": {"input_topic": "in", "output_topic": "out", "record_time": "log-append-time",
                  "create_topics": False},
        "service": {"state_dir": str(state_dir), "poll_timeout": "10ms",
                    **({"journal_compact_bytes": 0} if compact else {})},
    })


def _run(monkeypatch, state_dir, decision: str, chain: str, stops: list[int], *, crash_at: int | None = None,
         compact: bool = False) -> dict[int, list[bytes]]:
    """Run to TIMESTEPS releases, stopping (and restarting from the journal) after each of ``stops``;
    ``crash_at``: also die at the n-th ``after_journal`` failpoint (journaled, not committed)."""
    kafka = FakeKafka(start=START, events_per_step=30, output_topic="out")
    for name, value in fake_kafka_parts(kafka).items():
        monkeypatch.setattr(loop_mod, name, value)
    hits = {"n": 0}

    def failpoint(name: str) -> None:
        if name == "after_journal" and crash_at is not None:
            hits["n"] += 1
            if hits["n"] == crash_at:
                CRASHES.append(name)
                raise _Crash(name)

    runs = [*stops, TIMESTEPS]
    if crash_at is not None:
        runs = [TIMESTEPS, *runs]
    for limit in runs:
        svc = loop_mod.Service(_settings(state_dir, decision, chain, compact), metrics=Metrics(), health=Health(),
                               stop=threading.Event(), max_timesteps=limit, failpoint=failpoint)
        svc.start()
        try:
            assert svc.run() == 0
        except _Crash:
            pass
        svc.close()
    return kafka.released()


def _last(copies: dict[int, list[bytes]]) -> dict[int, bytes]:
    return {t: c[-1] for t, c in copies.items() if t < TIMESTEPS}


@pytest.mark.parametrize(("decision", "chain"), [("uniform", "kalman+nonnegative+integer"),
                                                 ("fixed", "nonnegative+ewma")])
def test_stop_and_restart_publishes_the_bytes_of_an_uninterrupted_run(tmp_path, monkeypatch, decision, chain):
    whole = _run(monkeypatch, tmp_path / "a", decision, chain, [])
    restarted = _run(monkeypatch, tmp_path / "b", decision, chain, [4, 9, 13])
    assert sorted(_last(whole)) == list(range(TIMESTEPS))
    assert _last(restarted) == _last(whole)
    docs = [json.loads(b) for b in _last(whole).values()]
    assert all(d["method"]["postprocess"] == chain.split("+") and d["schema_version"] == 2 for d in docs)
    # not vacuous: the smoother changed what is published, and its counts move on republished steps too
    plain = _last(_run(monkeypatch, tmp_path / "c", decision, "none", []))
    assert sum(json.loads(plain[t])["counts"] != d["counts"] for t, d in enumerate(docs)) >= TIMESTEPS // 2
    assert all(d["accuracy"]["half_width"] is None for d in docs)  # a filtered count claims no interval


def test_a_crash_between_journal_and_commit_resends_and_continues_byte_for_byte(tmp_path, monkeypatch):
    chain = "kalman+integer"
    whole = _run(monkeypatch, tmp_path / "a", "uniform", chain, [])
    CRASHES.clear()
    crashed = _run(monkeypatch, tmp_path / "b", "uniform", chain, [12], crash_at=6, compact=True)
    assert CRASHES == ["after_journal"]
    for t in range(TIMESTEPS):
        assert set(crashed[t]) == {whole[t][-1]}, t  # every copy, re-sent ones included, is the same bytes


def test_a_restart_that_loses_the_filter_state_is_caught(tmp_path, monkeypatch):
    """The broken variant: the restored smoother starts over. The comparison above must see it."""
    chain = "kalman+nonnegative+integer"
    whole = _run(monkeypatch, tmp_path / "a", "uniform", chain, [])
    monkeypatch.setattr(PostProcessor, "state_from_json", lambda self, data, bins: PostState())
    restarted = _run(monkeypatch, tmp_path / "b", "uniform", chain, [4, 9, 13])
    assert _last(restarted) != _last(whole)


def test_a_snapshot_without_the_filter_state_is_refused(tmp_path):
    s = _settings(tmp_path, "uniform", "kalman")
    pipe = ReleasePipeline(s)
    for _ in range(3):
        pipe.release_counts(np.array([3, 0, 1, 4, 2], dtype=np.int64))
    snap = pipe.snapshot()
    assert "postprocess" in snap["engine"]
    ReleasePipeline.restore(s, snap)  # the whole snapshot restores
    broken = {**snap, "engine": {k: v for k, v in snap["engine"].items() if k != "postprocess"}}
    with pytest.raises(StateError, match="no state for release.postprocess kalman"):
        ReleasePipeline.restore(s, broken)
    plain = _settings(tmp_path, "uniform", "none")
    with pytest.raises(StateError, match="carries a smoother's state"):
        ReleasePipeline(plain, engine_state=snap["engine"], window_state=snap["window"])
