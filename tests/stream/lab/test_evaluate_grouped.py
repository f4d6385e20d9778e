"""AdaPub and RescueDP are selectable like every other method: ``release.decision`` and ``evaluate --methods``."""

from __future__ import annotations

import numpy as np
import pytest

from stream.config import ConfigError, Settings
from stream.lab.evaluate import EvaluationError, evaluate
from tests.stream.lab.test_evaluate import _config, _settings, _truth


@pytest.mark.parametrize("decision", ["adapub", "rescuedp"])
def test_decision_is_accepted_in_config_and_builds_its_engine(decision):
    cfg = _config("w-event", w=5, cutoff=2)
    cfg["release"] = {"decision": decision, "mechanism": "lpa"}
    engine = Settings(**cfg).validate_all().engine()
    assert engine.method == decision and engine.policy.describe()["decision"] == decision


def test_evaluate_runs_them_within_the_window_budget():
    s = _settings("w-event", w=5, cutoff=2, epsilon=1.0)
    res = evaluate(s, _truth(30), ["adapub", "rescuedp", "uniform"], runs=2, queries=5, seed=2, progress=False)
    for name in ("adapub", "rescuedp"):
        entry = res["methods"][name]
        assert 0 < entry["max_window_spend"] <= 1.0 + 1e-12, name
        assert np.isfinite(entry["mae"]) and entry["mae"] > 0, name
    assert res["methods"]["rescuedp"]["fresh_releases"] < 30  # it skips timesteps; AdaPub never does
    assert res["methods"]["adapub"]["fresh_releases"] == 30


def test_they_are_refused_under_user_level_and_with_psd():
    with pytest.raises(EvaluationError, match="adapub is a w-event mechanism"):
        evaluate(_settings(), _truth(), ["adapub"], runs=1, queries=0, progress=False)
    with pytest.raises((ConfigError, ValueError), match="lpa"):
        _settings("w-event", w=5, cutoff=2).with_changes({"release": {"decision": "rescuedp", "mechanism": "psd"}})
