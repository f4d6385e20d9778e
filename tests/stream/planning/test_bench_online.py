"""``benchmarks/bench_online.py --also``: extra methods measured alone on the regime-change streams,
each with its own ``release.postprocess`` chain, through the same engine loop as the other columns."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from stream.config import Settings
from stream.lab.generate import build_config
from stream.planning.families import family_attributes
from tests.bench_loader import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_online")


def test_also_measures_each_method_with_its_own_chain(bench, capsys) -> None:
    argv = ["--runs", "2", "--timesteps", "60", "--plan-timesteps", "20", "--every", "10",
            "--regimes", "sine->sudden", "--ws", "10", "--epsilons", "1", "--only-also",
            "--also", "adaptive-sample:nonnegative,adaptive-sample:model+nonnegative"]
    assert bench.main(argv) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert "mae_online" not in row and "mae_auto" not in row  # --only-also skips them
    got = row["mae_also"]
    assert set(got) == {"adaptive-sample+nonnegative", "adaptive-sample+model+nonnegative"}
    truth = bench.truth_of("sine", "sudden", 60, 1000.0)
    config = build_config("sine", family_attributes(1), timesteps=60, population=1000, step_seconds=3600,
                          start=datetime(2024, 1, 1, tzinfo=UTC), epsilon=1.0, w=10)
    for chain in ("nonnegative", "model+nonnegative"):
        config["release"] = {**config.get("release", {}), "decision": "adaptive-sample", "postprocess": chain}
        expected, _ = bench.mae(Settings(**config).validate_all(), truth, 2)
        assert got[f"adaptive-sample+{chain}"] == expected
    assert got["adaptive-sample+nonnegative"] != got["adaptive-sample+model+nonnegative"]
