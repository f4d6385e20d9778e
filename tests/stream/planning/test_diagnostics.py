"""The threshold-below-noise-floor warning (issue 13 item 3): right when it fires, silent when it
should be, and meaningful — a flagged DSFT on a stream that never changes spends its budget like
fixed sampling, while the suggested threshold keeps it quiet."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from stream.config import Settings
from stream.lab.evaluate import evaluate
from stream.planning.diagnostics import threshold_below_noise_floor


def _settings(threshold: float, *, decision: str = "dsft", noise_floor: bool = False, population: int | None = 400,
              horizon: int = 30, cutoff: int = 6) -> Settings:
    privacy = {"unit": "user-level", "epsilon": 1, "cutoff": cutoff, "horizon": horizon}
    if population is not None:
        privacy["population"] = population
    return Settings(**{
        "stream": {"id": "t", "timestep": "1h", "start": "2024-01-01T00:00:00Z"},
        "schema": {"user_id": "uid", "event_time": "ts", "attributes": [
            {"name": "a", "kind": "categorical", "values": [f"v{i}" for i in range(10)]},
            {"name": "b", "kind": "numeric", "min": 0, "max": 5, "bins": 5}]},
        "privacy": privacy,
        "release": {"threshold": threshold, "decision": decision, "noise_floor": noise_floor},
    }).validate_all()


def test_fires_below_the_floor_and_only_there() -> None:
    low = threshold_below_noise_floor(_settings(0.05))
    assert low is not None and low.threshold_counts == pytest.approx(20)
    assert low.noise_floor_counts > low.threshold_counts
    assert "release.noise_floor: true" in low.message() and "like fixed sampling" in low.message()
    json.dumps(low.to_json())
    assert threshold_below_noise_floor(_settings(low.suggested_threshold)) is None
    assert threshold_below_noise_floor(_settings(0.05, decision="dsat")) is not None
    assert threshold_below_noise_floor(_settings(0.05, noise_floor=True)) is None
    for other in ("uniform", "fixed"):
        assert threshold_below_noise_floor(_settings(0.05, decision=other)) is None


def test_the_warning_predicts_what_the_method_does_on_a_static_stream() -> None:
    """Flagged: C fresh releases on a stream that never changes (as fixed sampling would make);
    at 1.5x the suggested threshold (the floor itself is where the noisy test fires about half
    the time): the first release and about one more."""
    truth = np.tile(np.arange(50, dtype=np.int64) % 17, (30, 1))  # the same histogram every timestep
    flagged = _settings(0.05)
    assert threshold_below_noise_floor(flagged) is not None
    res = evaluate(flagged, truth, ["dsft"], runs=5, queries=0, seed=2, progress=False)
    assert res["methods"]["dsft"]["fresh_releases"] >= 5.5  # the cutoff is 6
    quiet = _settings(1.5 * threshold_below_noise_floor(flagged).suggested_threshold)
    res = evaluate(quiet, truth, ["dsft"], runs=5, queries=0, seed=2, progress=False)
    assert res["methods"]["dsft"]["fresh_releases"] <= 3.0


def test_evaluate_and_run_say_it(tmp_path, capsys, caplog) -> None:
    import yaml

    from stream.commands.cli import main
    from stream.commands.run import _warn_about_configuration

    cfg = _settings(0.05).model_dump(mode="json", by_alias=True, exclude_none=True)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    data = tmp_path / "e.csv"
    data.write_text("uid,ts,a,b\n" + "\n".join(f"u{i},{1704067200 + 3600 * (i % 5) + 1},v{i % 10},{i % 5}"
                                               for i in range(200)) + "\n")
    out = tmp_path / "r.json"
    assert main(["evaluate", "--config", str(path), "--input", str(data), "--methods", "dsft,uniform",
                 "--runs", "1", "--queries", "0", "--json", str(out), "--progress", "off"]) == 0
    assert "dsft: release.threshold puts the dsft threshold" in capsys.readouterr().err
    diagnostics = json.loads(out.read_text())["diagnostics"]
    assert [d["method"] for d in diagnostics] == ["dsft"]
    with caplog.at_level(logging.WARNING):
        _warn_about_configuration(_settings(0.05))
        _warn_about_configuration(_settings(2.0))
    assert sum("below the distance test's noise floor" in r.getMessage() for r in caplog.records) == 1
