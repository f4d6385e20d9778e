"""The copula's decision sees dependence, not only marginals (issue 31 item 2, ``docs/privacy.md`` §11.4).

A stream whose one-way marginals never change while the correlation of two attributes flips from
+1 to −1: with ``release.copula.decision_space: pairwise`` (the default) DSFT releases fresh at
the flip and the released correlation follows it; with ``one-way`` the flip is invisible to the
decision and the stale model (positive correlation) is republished. Through the whole release
pipeline (windowing, bounding, engine, messages), seeded noise at a large ε so that the verdict is
the data's, not the noise's.
"""

from __future__ import annotations

import json

import pytest

from stream.ingest.events import EventBatch
from stream.pipeline import ReleasePipeline
from stream.service.testing import small_settings

LEVELS = 4
PEOPLE = 400
FLIP = 5
TIMESTEPS = 10


def _events() -> list[dict]:
    out = []
    for t in range(TIMESTEPS):
        for i in range(PEOPLE):
            a = i % LEVELS
            b = a if t < FLIP else LEVELS - 1 - a  # both marginals uniform at every timestep
            out.append({"user_id": f"u{t}-{i}", "event_time": t * 60 + 1 + i * 0.01,
                        "attributes": {"a": f"v{a}", "b": f"v{b}"}})
    return out


def _run(space: str | None) -> list[dict]:
    copula = {"min_records": PEOPLE // 2, **({} if space is None else {"decision_space": space})}
    settings = small_settings(
        seed=3,
        schema={"attributes": [{"name": n, "kind": "categorical", "values": [f"v{j}" for j in range(LEVELS)]}
                               for n in ("a", "b")]},
        privacy={"epsilon": 200, "cutoff": 4, "horizon": 50, "population": PEOPLE},
        release={"decision": "dsft", "mechanism": "copula", "threshold": 0.2, "copula": copula},
    )
    p = ReleasePipeline(settings)
    p.offer(EventBatch.from_records(_events()))
    return [json.loads(s.payload) for s in p.seal(final=True)][:TIMESTEPS]


@pytest.mark.parametrize("space", [None, "pairwise"])
def test_a_correlation_flip_alone_triggers_a_fresh_release(space):
    docs = _run(space)
    kinds = [d["kind"] for d in docs]
    assert kinds[0] == "fresh" and kinds[FLIP] == "fresh", kinds
    assert kinds[1:FLIP] == ["republished"] * (FLIP - 1), kinds  # nothing changed before the flip
    rho = [d["model"]["correlation"][0][1] for d in docs]
    assert rho[0] > 0.8 and rho[FLIP] < -0.8, rho


def test_one_way_decision_misses_the_flip():
    docs = _run("one-way")
    kinds = [d["kind"] for d in docs]
    assert kinds[0] == "fresh" and kinds[1:] == ["republished"] * (TIMESTEPS - 1), kinds
    assert all(d["model"]["correlation"][0][1] > 0.8 for d in docs)  # the stale model, after the flip too
