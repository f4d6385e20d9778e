"""``dpstream_budget_exhausted`` says 1 exactly when no fresh release can happen any more.

Under user-level privacy DSAT/DSFT (and fixed) stop after C fresh releases; ``uniform`` releases at
every timestep up to the horizon N at ε/N each, so C fresh releases do not exhaust it. The gauge
is public (it is derived from public counts of fresh releases and the public ledger).
"""

from __future__ import annotations

import numpy as np
import pytest

from stream.config import load_settings
from stream.pipeline import ReleasePipeline
from stream.service.loop import _budget


def _settings(decision: str, *, horizon: int = 6, cutoff: int = 2):
    return load_settings(
        privacy={"unit": "user-level", "epsilon": "1", "horizon": horizon, "cutoff": cutoff,
                 "population": 1000},
        schema={"attributes": [{"name": "a", "kind": "categorical", "values": ["x", "y", "z"]}]},
        release={"decision": decision}, kafka={"record_time": "log-append-time"},
        stream={"start": "2024-01-01T00:00:00Z", "timestep": "1h"},
        randomness={"seed": 3, "allow_seeded_noise": True},
    )


def _run(decision: str, timesteps: int) -> list[tuple[bool, bool]]:
    """(fresh at t, exhausted after t) for each timestep, on a changing stream."""
    s = _settings(decision)
    pipe = ReleasePipeline(s)
    out = []
    for t in range(timesteps):
        release = pipe.release_counts(np.array([1000 * (t % 2), 5, 7], dtype=np.int64))
        out.append((bool(release.fresh), _budget(pipe, s)[3]))
    return out


def test_uniform_user_level_is_not_exhausted_while_it_still_releases_fresh():
    steps = _run("uniform", 6)
    assert all(fresh for fresh, _ in steps)  # ε/N at every one of the N timesteps
    assert [exhausted for _, exhausted in steps] == [False] * 5 + [True]


@pytest.mark.parametrize("decision", ["fixed", "dsft"])
def test_capped_methods_are_exhausted_after_c_fresh_releases(decision):
    steps = _run(decision, 6)
    fresh_seen = 0
    for fresh, exhausted in steps:
        fresh_seen += fresh
        assert exhausted == (fresh_seen >= 2)
