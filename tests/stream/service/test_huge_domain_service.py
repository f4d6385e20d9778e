"""The service releases models of a 10-attribute, 8¹⁰ = 1,073,741,824-cell domain (issue 31 item 1).

The real ``Service`` (journal, engine, commit path) on Kafka faked in process: the count vector
(8 GiB of int64) is never built — the pipeline hands the model its bounded records — so the
process stays small, every timestep gets a model-release message, and a restart republishes
the same bytes. The release answers box queries from the model (``/api/query``'s code).
"""

from __future__ import annotations

import json
import resource
import threading

import numpy as np
import pytest

import stream.service.loop as loop_mod
from stream.config import load_settings
from stream.service.http import Health
from stream.service.metrics import Metrics
from stream.service.query import answer_query
from stream.service.testing import FakeKafka, fake_kafka_parts

START = 1_700_000_000.0
M, LEVELS = 10, 8


class TenAttributes(FakeKafka):
    """FakeKafka's input with ten correlated attributes a0..a9 (levels 0..7) per event."""

    def payload(self, offset: int) -> bytes:
        rng = np.random.default_rng(offset)
        base = rng.normal()
        levels = np.clip(np.floor((0.8 * base + 0.6 * rng.normal(size=M) + 2.5) / 5 * LEVELS), 0, LEVELS - 1)
        attrs = ", ".join(f'"a{j}": {v + 0.5:.1f}' for j, v in enumerate(levels))
        return (f'{{"user_id": "u{offset % 4999}", "event_time": {self._time(offset):.6f}, '
                f'"attributes": {{{attrs}}}}}').encode()


def _settings(state_dir, release):
    return load_settings(None, **{
        "stream": {"id": "huge", "timestep": "1s", "start": "2023-11-14T22:13:20Z"},
        "schema": {"attributes": [{"name": f"a{j}", "kind": "numeric", "min": 0, "max": LEVELS, "bins": LEVELS}
                                  for j in range(M)]},
        "privacy": {"unit": "user-level", "epsilon": 10, "horizon": 40, "cutoff": 4, "population": 400},
        "release": release,
        "randomness": {"seed": 3, "allow_seeded_noise": True},
        "kafka": {"input_topic": "in", "output_topic": "out", "record_time": "log-append-time",
                  "create_topics": False},
        "service": {"state_dir": str(state_dir), "poll_timeout": "10ms"},
    })


def _run(monkeypatch, state_dir, release, stops, kafka):
    for name, value in fake_kafka_parts(kafka).items():
        monkeypatch.setattr(loop_mod, name, value)
    for limit in stops:
        svc = loop_mod.Service(_settings(state_dir, release), metrics=Metrics(), health=Health(),
                               stop=threading.Event(), max_timesteps=limit)
        svc.start()
        assert svc.run() == 0
        svc.close()
    return kafka.released()


@pytest.mark.parametrize("release", [
    {"decision": "dsat", "mechanism": "copula", "threshold": 0.1, "copula": {"min_records": 300}},
    {"decision": "dsat", "mechanism": "marginals", "threshold": 0.1, "marginals": {"k": 2}},
], ids=["copula", "marginals"])
def test_a_billion_cell_stream_releases_models_and_restarts_byte_for_byte(tmp_path, monkeypatch, release):
    settings = _settings(tmp_path / "probe", release)
    assert settings.domain().size == LEVELS**M >= 10**9
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    whole = _run(monkeypatch, tmp_path / "a", release, [5], TenAttributes(start=START, events_per_step=400))
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mib < 512, f"the process grew by {grown_mib:.0f} MiB: was a count vector built?"
    restarted = _run(monkeypatch, tmp_path / "b", release, [2, 5], TenAttributes(start=START, events_per_step=400))
    for t in range(5):
        assert set(restarted[t]) == set(whole[t]) and len(set(whole[t])) == 1, t
    docs = [json.loads(whole[t][0]) for t in range(5)]
    assert all(d["message_type"] == "model-release" for d in docs) and docs[0]["kind"] == "fresh"
    assert {d["model"]["max_order"] for d in docs} == {2}  # one- and two-way tables (pairwise decision space)
    domain = json.loads(loop_mod.ReleasePipeline(settings).domain_message().to_bytes())
    ans = answer_query({"where": ["a0:0-3", "a7:4-7"]}, domain, docs[-1])
    assert 0 <= ans["answer"] <= docs[-1]["model"]["total"] + 1e-6
    assert ans["computed_from"] in ("copula probability (exact)", "released table 0×7")
