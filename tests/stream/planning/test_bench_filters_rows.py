"""``benchmarks/bench_filters.py --from-rows A B``: auto re-measured alone (B) is tabulated over a
grid's rows (A): the same setting's rows merge, B's values win, A's other methods stay."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_filters", ROOT / "benchmarks" / "bench_filters.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rows_of_one_setting_merge_and_the_later_auto_wins() -> None:
    bf = _bench()
    grid = [{"stream": "sine", "epsilon": 0.1, "w": 10, "runs": 10,
             "mae": {"uniform": 100.0, "fixed": 99.0, "auto": 230.0, "_auto_choice": "sample+nonnegative",
                     "zero-release": 500.0}},
            {"stream": "trend", "epsilon": 1.0, "w": 10, "runs": 10, "mae": {"fixed": 10.0, "auto": 9.9}}]
    alone = [{"stream": "sine", "epsilon": 0.1, "w": 10, "runs": 10,
              "mae": {"auto": 73.2, "_auto_choice": "fixed+model", "zero-release": 500.0}}]
    rows = bf.merge(grid + alone)
    assert [(r["stream"], r["w"]) for r in rows] == [("sine", 10), ("trend", 10)]
    sine = rows[0]["mae"]
    assert sine == {"uniform": 100.0, "fixed": 99.0, "auto": 73.2, "_auto_choice": "fixed+model",
                    "zero-release": 500.0}
    judged = bf.judge(rows[0])
    assert judged["auto_vs_best"] == 73.2 / 73.2 and judged["auto_vs_zero"] == 73.2 / 500.0
