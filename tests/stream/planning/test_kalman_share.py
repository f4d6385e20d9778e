"""The q sweep behind the Kalman smoother's process share (``benchmarks/kalman_share.py``): the
share it sets reaches the service's filter, and its summary counts what it says."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.bench_loader import BENCHMARKS, load_benchmark


def _maes(tmp_path, share: float) -> dict[str, float]:
    out = tmp_path / f"{share}.json"
    subprocess.run([sys.executable, str(BENCHMARKS / "families.py"), "--runs", "2", "--families", "sine",
                    "--epsilons", "0.1", "--ws", "10", "--methods", "uniform,uniform+nonnegative+kalman",
                    "--process-share", str(share), "--json", str(out)],
                   check=True, stdout=subprocess.DEVNULL, cwd=BENCHMARKS.parent)
    return json.loads(out.read_text())["rows"][0]["mae"]


def test_the_share_reaches_the_filter_and_nothing_else(tmp_path) -> None:
    low, high = _maes(tmp_path, 0.05), _maes(tmp_path, 0.5)
    assert low["uniform"] == high["uniform"]  # the plain method: the same runs
    assert low["uniform+nonnegative+kalman"] != high["uniform+nonnegative+kalman"]


def test_the_summary_is_the_best_smoothed_over_the_best_plain() -> None:
    ks = load_benchmark("kalman_share")
    rows = [{"mae": {"uniform": 10.0, "fixed": 8.0, "sample": 9.0, "a": 6.0, "b": 7.0}},  # 0.75
            {"mae": {"uniform": 4.0, "fixed": 5.0, "sample": 6.0, "a": 5.0, "b": 4.4}}]  # 1.1
    got = ks.summarise(rows, ["a", "b"])
    assert got["settings"] == 2 and got["worst"] == 1.1
    assert got["geometric_mean"] == pytest.approx((0.75 * 1.1) ** 0.5, abs=1e-4)
    assert got["worse_than_plain"] == 1 and got["at_least_20pct_better"] == 1
