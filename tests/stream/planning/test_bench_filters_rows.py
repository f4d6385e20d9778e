"""``benchmarks/bench_filters.py --from-rows A B``: auto re-measured alone (B) is tabulated over a
grid's rows (A): the same setting's rows merge, B's values win, A's other methods stay."""

from __future__ import annotations

from tests.bench_loader import load_benchmark


def _bench():
    return load_benchmark("bench_filters")


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


def test_a_row_of_delayed_columns_alone_is_left_to_the_merge() -> None:
    """``--methods uniform --delays 2``: a plain baseline and delayed columns only; such a row is not
    judged alone (it has no undelayed method of ours) but merges over the grid's row and is judged there."""
    bf = _bench()
    delayed = {"stream": "sine", "epsilon": 0.1, "w": 50, "runs": 20,
               "mae": {"uniform": 503.4, "zero-release": 501.0, "fixed+model+nonnegative delay 2": 106.3}}
    assert not bf.judgeable(delayed)
    grid = {"stream": "sine", "epsilon": 0.1, "w": 50, "runs": 20,
            "mae": {"uniform": 503.4, "fixed": 151.9, "fixed+model+nonnegative": 140.0,
                    "fixed+model+nonnegative delay 2": 90.0, "zero-release": 501.0}}
    merged = bf.merge([grid, delayed])[0]
    assert bf.judgeable(merged)
    assert bf.judge(merged)["gain"] == 1 - 106.3 / 151.9  # the re-measured delayed column wins


def test_the_settings_sharing_autos_public_facts_are_measured_in_one_group(tmp_path) -> None:
    """The six 1-bin families differ only in their stream (not a public fact the planner reads):
    one group per ε, w; a different declared population (another plan) is its own group."""
    import yaml

    bf = _bench()
    cfg, counts = bf.generate("sine", tmp_path / "sine", 50)
    base = yaml.safe_load(cfg.read_text())
    grid = []
    for stream in ("sine", "trend", "census-like"):
        for eps in (0.1, 1.0):
            config = {**base, "stream": {**base["stream"], "id": stream},
                      "privacy": {**base["privacy"], "epsilon": eps, "unit": "w-event", "w": 10}}
            if stream == "census-like":
                config["privacy"]["population"] = 7
            grid.append((stream, eps, 10, config, counts))
    groups = bf.plan_groups(grid, tmp_path)
    assert sorted(sorted((s, e) for s, e, *_ in g) for g in groups) == [
        [("census-like", 0.1)], [("census-like", 1.0)], [("sine", 0.1), ("trend", 0.1)], [("sine", 1.0), ("trend", 1.0)]]
    assert [len(g) for g in groups] == [2, 2, 1, 1]  # largest first


def test_evaluate_in_this_process_writes_the_bytes_of_the_command(tmp_path) -> None:
    """``dpstream evaluate`` run in the benchmark's process (planner cache kept) and as its own
    process: the same JSON, byte for byte (a filter, a per-run rule, auto's plan included)."""
    import yaml

    bf = _bench()
    cfg, counts = bf.generate("sudden", tmp_path / "g", 120)
    config = yaml.safe_load(cfg.read_text())
    config["privacy"].update({"epsilon": 1.0, "unit": "w-event", "w": 10})
    config["release"]["planner"] = {"runs": 1, "realisations": 1, "timesteps": 40}  # a short plan: this checks the bytes only
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    args = ["evaluate", "-c", str(tmp_path / "c.yaml"), "--input", str(counts), "--counts", "--methods",
            "fixed+model+nonnegative,adapub,auto", "--runs", "2", "--queries", "0", "--progress", "off", "--jobs", "1"]
    bf._cli(*args, "--json", str(tmp_path / "sub.json"))
    bf._cli_here(*args, "--json", str(tmp_path / "here.json"))
    assert (tmp_path / "here.json").read_bytes() == (tmp_path / "sub.json").read_bytes()
