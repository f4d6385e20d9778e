"""benchmarks/bench_pdp.py runs end to end on a small population and reports every mechanism."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_pdp.py"


def load():
    spec = importlib.util.spec_from_file_location("bench_pdp", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_small_run_reports_all_mechanisms_and_partitioning_beats_minimum():
    bench = load()
    report = bench.run(records=10_000, runs=2, queries=100, seed=3)
    json.dumps(report)  # serialisable
    assert set(report["results"]) == {"uniform", "normal", "tiers"}
    for setting in report["results"].values():
        mechs = setting["mechanisms"]
        assert {
            "minimum",
            "threshold@mean",
            "sampling@mean",
            "privacy-aware",
            "utility-based",
        } <= set(mechs)
        assert all(math.isfinite(m["range_rfe"]) and m["range_rfe"] > 0 for m in mechs.values())
    normal = report["results"]["normal"]["mechanisms"]
    # about half the people sit at ε = 0.01 and a fifth at 1.0: Minimum wastes almost everything
    assert normal["utility-based"]["range_rfe"] < normal["minimum"]["range_rfe"] / 3
    assert "| normal | utility-based |" in bench.markdown(report)
