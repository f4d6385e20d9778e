"""controller.runs.step_run: the one step loop of offline runs (the lab, the planner's simulations
and its diagnostics), against stepping the engine by hand; and the callers go through it."""

from __future__ import annotations

import numpy as np
import pytest

from controller.runs import step_run
from histogram.noise import Randomness
from tests.stream.lab.test_evaluate import _settings, _truth


def _by_hand(engine, truth, rnd):
    state, out = engine.initial_state(), []
    for t in range(len(truth)):
        release, state = engine.step(state, truth[t], rnd.drawer("t", t, "release"))
        out.append(release)
    return out


@pytest.mark.parametrize("decision", ["dsat", "bd", "uniform"])
def test_step_run_is_the_engine_stepped_by_hand(decision):
    s = _settings("w-event", bins=10, w=4, cutoff=2).with_changes({"release": {"decision": decision}})
    truth = _truth(30, 10, 200, seed=2)
    rnd_a, rnd_b = Randomness.seeded(4), Randomness.seeded(4)
    got = list(step_run(s.engine(), truth, lambda t: rnd_a.drawer("t", t, "release")))
    want = _by_hand(s.engine(), truth, rnd_b)
    assert [t for t, _, _ in got] == list(range(30))
    for (_, a, _), b in zip(got, want, strict=True):
        assert (a.kind, a.source_timestep, a.epsilon_spent) == (b.kind, b.source_timestep, b.epsilon_spent)
        assert np.array_equal(a.counts, b.counts)
    # a function of (t, state) sees the state before each step
    seen = []
    list(step_run(s.engine(), lambda t, state: seen.append(state) or truth[t],
                  lambda t: Randomness.seeded(4).drawer("t", t, "release"), timesteps=3))
    assert [x.timestep for x in seen] == [s.engine().initial_state().timestep + t for t in range(3)]
    with pytest.raises(ValueError, match="timesteps"):
        next(step_run(s.engine(), lambda t, state: truth[t], lambda t: None))


def test_the_lab_and_the_planner_step_through_it(monkeypatch):
    from stream.lab import runs as lab_runs
    from stream.planning import diagnostics, planner

    calls = []

    def spy(real):
        def wrapped(*args, **kwargs):
            calls.append(real)
            return real(*args, **kwargs)
        return wrapped

    for module in (lab_runs, planner):
        monkeypatch.setattr(module, "step_run", spy(module.step_run))
    import controller.runs

    monkeypatch.setattr(controller.runs, "step_run", spy(controller.runs.step_run))  # diagnostics imports it late
    s = _settings("w-event", bins=10, w=4, cutoff=2, population=200)
    from stream.lab.metrics import build_workload

    w = build_workload(_truth(10, 10, 200), s.domain().shape, queries=0, seed=0)
    lab_runs.run_method(s, w, Randomness.seeded(1))
    planner._simulate(s, w.truth, 1, ("none",))
    planner.noise_above_data(s, max_steps=3)
    low = s.with_changes({"release": {"decision": "dsft", "threshold": 0.001}})
    diagnostics.threshold_below_noise_floor(low)
    assert len(calls) == 4
