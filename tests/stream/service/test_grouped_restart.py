"""Stop-and-restart equivalence for AdaPub and RescueDP, through the service.

The same harness as ``test_wevent_restart.py`` (the real service and journal in ``tmp_path``,
Kafka faked in process, seeded noise): a stream stopped twice and restarted from its journal
must publish, timestep by timestep, the same counts, kinds, accuracy and details as the same
stream run without a stop. AdaPub's time groups (each bin's perturbed values), feedback errors
and last release, and RescueDP's filter, schedules and PID errors are journaled with the
engine state and restored. Restarts that lose that state (the broken variants) are caught.
"""

from __future__ import annotations

import pytest

from controller.policies.grouping import AdaPubPolicy, RescueDPPolicy
from tests.stream.service.test_wevent_restart import TIMESTEPS, _run


@pytest.mark.parametrize("decision", ["adapub", "rescuedp"])
def test_stop_and_restart_publishes_what_an_uninterrupted_run_does(tmp_path, monkeypatch, decision):
    whole = _run(monkeypatch, tmp_path / "a", decision, [])
    restarted = _run(monkeypatch, tmp_path / "b", decision, [5, 11])
    assert sorted(whole)[:TIMESTEPS] == list(range(TIMESTEPS))
    assert {t: restarted[t] for t in range(TIMESTEPS)} == {t: whole[t] for t in range(TIMESTEPS)}
    if decision == "adapub":  # time groups span the restarts, so the restored state mattered
        assert max((whole[t]["details"] or {}).get("smoothed_over", 1) for t in range(TIMESTEPS)) >= 3
    else:  # bins on their own schedules across the restarts
        kinds = [whole[t]["kind"] for t in range(TIMESTEPS)]
        assert "republished" in kinds[6:] and "fresh" in kinds[12:]


@pytest.mark.parametrize("policy", [AdaPubPolicy, RescueDPPolicy])
def test_a_restart_that_loses_the_state_is_caught(tmp_path, monkeypatch, policy):
    decision = policy.name if isinstance(policy.name, str) else policy.__dataclass_fields__["name"].default
    whole = _run(monkeypatch, tmp_path / "a", decision, [])
    monkeypatch.setattr(policy, "state_from_json", lambda self, data: self.reset())
    restarted = _run(monkeypatch, tmp_path / "b", decision, [5, 11])
    assert any(restarted[t] != whole[t] for t in range(TIMESTEPS))
