"""``dpstream evaluate``: layout, numbers against closed forms, errors, exit codes."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from histogram.accuracy import QueryIndex
from histogram.noise import discrete_laplace_mean_abs
from histogram.query import answer_range_queries, random_range_queries, sized_range_queries
from stream.config import Settings
from stream.lab.evaluate import EvaluationError, evaluate, parse_methods
from stream.lab.metrics import build_workload, t_interval

KEYS = ("mae", "mre", "query_abs_error", "query_rel_error", "fresh_releases", "epsilon_spent", "max_window_spend")


def _config(unit: str = "user-level", *, bins: int = 50, horizon: int = 20, cutoff: int = 4, w: int = 5,
            epsilon: float = 1.0, population: int = 400) -> dict:
    privacy: dict = {"unit": unit, "epsilon": epsilon, "cutoff": cutoff, "population": population}
    privacy.update({"horizon": horizon} if unit == "user-level" else {"w": w})
    return {
        "stream": {"id": "t", "timestep": "1h", "start": "2024-01-01T00:00:00Z"},
        "schema": {
            "user_id": "uid",
            "event_time": "ts",
            "attributes": [
                {"name": "a", "kind": "categorical", "values": [f"v{i}" for i in range(bins // 5)]},
                {"name": "b", "kind": "numeric", "min": 0, "max": 5, "bins": 5},
            ],
        },
        "privacy": privacy,
        "release": {"threshold": 0.05},
    }


def _settings(*args, **kw) -> Settings:
    return Settings(**_config(*args, **kw)).validate_all()


def _truth(timesteps: int = 20, bins: int = 50, population: int = 400, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out, base = [], rng.multinomial(population, np.ones(bins) / bins)
    for t in range(timesteps):
        if t % 5 == 0:
            base = rng.multinomial(population, rng.dirichlet(np.ones(bins)))
        out.append(base)
    return np.asarray(out, dtype=np.int64)


def test_layout_numbers_and_confidence_intervals():
    s = _settings()
    res = evaluate(s, _truth(), ["dsat", "dsft", "uniform", "fixed"], runs=4, queries=30, seed=3, progress=False)
    assert set(res) == {"timesteps", "bins", "runs", "queries", "methods", "references", "worse_than_zero_release"}
    assert (res["timesteps"], res["bins"], res["runs"], res["queries"]) == (20, 50, 4, 30)
    assert list(res["methods"]) == ["dsat", "dsft", "uniform", "fixed"]
    for entry in res["methods"].values():
        for key in KEYS:
            v, ci = entry[key], entry[f"{key}_ci"]
            assert isinstance(v, float) and math.isfinite(v)
            assert ci[0] <= v + 1e-9 and v <= ci[1] + 1e-9
        assert entry["epsilon_spent"] <= 1.0 + 1e-12
        assert entry["max_window_spend"] <= 1.0 + 1e-12
        assert 1 <= entry["fresh_releases"] <= 20
    json.dumps(res, allow_nan=False)  # strict JSON


def test_reference_rows_are_exact_and_flag_methods_worse_than_nothing():
    """zero-release and previous-true against hand-computed errors; a method with more error than
    publishing zeros is listed (and one with less is not)."""
    truth = _truth(timesteps=10, bins=50, population=400)
    s = _settings(horizon=10, epsilon=1.0)
    res = evaluate(s, truth, ["uniform"], runs=2, queries=0, seed=1, progress=False)
    refs = res["references"]
    assert refs["zero-release"]["mae"] == pytest.approx(truth.sum() / truth.size)
    previous = np.vstack([np.zeros((1, 50)), truth[:-1]])
    assert refs["previous-true"]["mae"] == pytest.approx(np.abs(truth - previous).mean())
    assert refs["zero-release"]["private"] is True and refs["previous-true"]["private"] is False
    assert "NON-PRIVATE" in refs["previous-true"]["what"]
    # uniform at ε/N = 0.1 per step: E|DLap(10)| ≈ 10 per bin, far above the 8 people per bin of zeros
    assert res["methods"]["uniform"]["mae"] > refs["zero-release"]["mae"]
    assert res["worse_than_zero_release"] == ["uniform"]
    dense = evaluate(_settings(horizon=10, epsilon=50.0), truth * 10, ["uniform"], runs=2, queries=0, seed=1,
                     progress=False)
    assert dense["worse_than_zero_release"] == []


def test_cli_warns_when_a_method_is_worse_than_publishing_nothing(tmp_path, cli, capsys):
    cfg = _write_config(tmp_path / "c.yaml", _config(horizon=6, cutoff=2, epsilon=0.01))
    data = tmp_path / "e.csv"
    data.write_text("uid,ts,a,b\n" + "\n".join(_good_rows()) + "\n")
    out = tmp_path / "r.json"
    assert cli(["evaluate", "--config", str(cfg), "--input", str(data), "--methods", "uniform", "--runs", "2",
                "--queries", "0", "--json", str(out), "--progress", "off"]) == 0
    err = capsys.readouterr().err
    assert "uniform has a larger error than publishing all zeros" in err
    assert json.loads(out.read_text())["worse_than_zero_release"] == ["uniform"]


def test_uniform_mae_matches_discrete_laplace_expectation():
    """Uniform releases every timestep at ε/N: each count's error is DLap(N/ε), E|Z| = 2a/(1-a²)."""
    s = _settings(horizon=20, epsilon=2.0)
    res = evaluate(s, _truth(), ["uniform"], runs=6, queries=0, seed=11, progress=False)
    expected = discrete_laplace_mean_abs(Fraction(20, 2))
    got = res["methods"]["uniform"]
    assert got["mae"] == pytest.approx(expected, rel=0.05)
    lo, hi = got["mae_ci"]
    assert lo - 0.5 < expected < hi + 0.5
    assert got["fresh_releases"] == 20 and got["epsilon_spent"] == pytest.approx(1.0 * 2)
    assert got["query_abs_error"] is None  # no queries asked


def test_fixed_makes_exactly_c_fresh_releases_and_true_version_is_exact():
    s = _settings(horizon=20, cutoff=4)
    truth = _truth()
    res = evaluate(s, truth, ["fixed"], runs=3, queries=20, seed=0, true_versions=["fixed"], progress=False)
    fixed, true = res["methods"]["fixed"], res["methods"]["fixed-true"]
    assert fixed["fresh_releases"] == 4 and fixed["fresh_releases_ci"] == [4.0, 4.0]
    assert fixed["epsilon_spent"] == pytest.approx(1.0)
    # fixed samples t = 0, 5, 10, 15 and the stream changes at exactly those steps: no update error
    assert true["mae"] == 0.0 and true["query_abs_error"] == 0.0
    assert true["epsilon_spent"] is None and true["fresh_releases"] == 4


def test_w_event_window_spend_never_exceeds_epsilon():
    s = _settings("w-event", w=5, cutoff=2, epsilon=1.0)
    res = evaluate(s, _truth(30), ["dsat", "bd", "ba", "uniform", "fixed"], runs=3, queries=10, seed=2,
                   progress=False)
    for name, entry in res["methods"].items():
        assert entry["max_window_spend"] <= 1.0 + 1e-12, name
    # every run's figure, not only the mean (a confidence interval of a bounded mean may pass the bound)
    from stream.lab.evaluate import check_methods
    from stream.lab.noise import PooledNoise
    from stream.lab.runner import run_many

    wl = build_workload(_truth(30), s.domain().shape, queries=0, seed=2)
    for name, ms in check_methods(s, ["dsat", "bd", "ba", "uniform", "fixed"]).items():
        runs = run_many(ms, wl, 20, PooledNoise(2, ms.stream.id, name)).metrics
        assert max(m["max_window_spend"] for m in runs) <= 1.0, name
    # the stream total grows with the number of windows (uniform spends ε/w every timestep)
    assert res["methods"]["uniform"]["epsilon_spent"] == pytest.approx(30 / 5)


def test_w_event_methods_refused_under_user_level():
    with pytest.raises(EvaluationError, match="bd is a w-event mechanism.*privacy.unit: w-event"):
        evaluate(_settings(), _truth(), ["dsat", "bd"], runs=1, queries=0, progress=False)


@pytest.mark.parametrize("text, match", [("", "empty"), ("dsat,foo", "unknown method"), ("dsat,dsat", "twice")])
def test_parse_methods_errors(text, match):
    with pytest.raises(EvaluationError, match=match):
        parse_methods(text)


def test_wrong_number_of_bins_is_an_error():
    with pytest.raises(EvaluationError, match="bins"):
        evaluate(_settings(), _truth(bins=40), ["fixed"], runs=1, queries=0, progress=False)


def test_runs_are_reproducible_and_seeds_differ():
    s, truth = _settings(), _truth()
    a = evaluate(s, truth, ["dsat"], runs=2, queries=10, seed=5, progress=False)
    b = evaluate(s, truth, ["dsat"], runs=2, queries=10, seed=5, progress=False)
    c = evaluate(s, truth, ["dsat"], runs=2, queries=10, seed=9, progress=False)
    assert a == b and a != c


def test_with_changes_revalidates():
    s = _settings()
    assert s.with_changes({"release": {"k": 0.2}}).release.k == Fraction(1, 5)
    assert s.with_changes({"privacy": {"epsilon": 0.5}}).privacy.horizon == 20
    with pytest.raises(ValueError, match="epsilon"):
        s.with_changes({"privacy": {"epsilon": -1}})


def test_query_index_matches_reference_answers():
    shape = (7, 3, 4)
    rng = np.random.default_rng(4)
    q = random_range_queries(shape, 60, rng)
    counts = rng.integers(0, 9, (5, int(np.prod(shape))))
    idx = QueryIndex.compile(q, shape)
    assert np.array_equal(idx.answer_many(counts), answer_range_queries(counts, shape, q))


def test_sized_queries_cover_about_the_asked_size():
    shape = (96, 2, 12, 2, 2, 3)
    rng = np.random.default_rng(0)
    for size in (1, 10, 100, 1000, 10_000):
        q = sized_range_queries(shape, size, 200, rng)
        sizes = q.size
        assert np.all(q.lo >= 0) and np.all(q.hi < np.asarray(shape))
        assert np.median(sizes) == pytest.approx(size, rel=0.35 if size > 1 else 0)


def test_relative_error_uses_the_sanity_bound():
    truth = np.array([[0, 4] * 25] * 3, dtype=np.int64)
    w1 = build_workload(truth, (10, 5), queries=0, seed=0, sanity=1.0)
    w2 = build_workload(truth, (10, 5), queries=0, seed=0, sanity=8.0)
    from histogram.accuracy import RunErrors

    for w, expect in ((w1, (2 / 1 + 2 / 4) / 2), (w2, (2 / 8 + 2 / 8) / 2)):
        acc = RunErrors(w)
        for t in range(3):
            acc.add(t, truth[t] + 2)
        assert acc.metrics()[0]["mre"] == pytest.approx(expect)
        assert acc.metrics()[0]["mae"] == pytest.approx(2.0)


def test_t_interval_matches_scipy():
    x = [1.0, 2.0, 4.0, 7.0]
    lo, hi = t_interval(x, 0.95)
    ref = stats.t.interval(0.95, 3, loc=np.mean(x), scale=stats.sem(x))
    assert (lo, hi) == pytest.approx(ref)
    assert t_interval([3.0]) is None and t_interval([2.0, 2.0]) == (2.0, 2.0)


# -- the command line ------------------------------------------------------------------------


def _write_config(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg))
    return path


def _events_csv(path: Path, rows: list[str]) -> Path:
    path.write_text("uid,ts,a,b\n" + "".join(r + "\n" for r in rows))
    return path


def _good_rows(timesteps: int = 6, people: int = 30) -> list[str]:
    start = 1704067200
    rng = np.random.default_rng(1)
    rows = []
    for t in range(timesteps):
        for p in range(people):
            rows.append(f"u{p},{start + 3600 * t + int(rng.integers(0, 3600))},v{int(rng.integers(0, 10))},"
                        f"{int(rng.integers(0, 5))}")
    return rows


@pytest.fixture
def cli():
    from stream.commands.cli import main

    return main


def test_cli_events_and_counts_agree(tmp_path, cli, capsys):
    from stream.lab.generate import generate

    d = tmp_path / "g"
    generate("traffic", d, timesteps=12, population=80, seed=2, grid=8, w=6, counts=True)
    outs = []
    for name in ("events.csv", "counts.csv"):
        out = tmp_path / f"{name}.json"
        code = cli(["evaluate", "--config", str(d / "config.yaml"), "--input", str(d / name),
                    "--methods", "dsat,bd,ba,uniform,fixed", "--runs", "2", "--queries", "20", "--seed", "4",
                    "--json", str(out), "--progress", "off"])
        assert code == 0
        outs.append(json.loads(out.read_text()))
    inputs = [o.pop("input") for o in outs]
    assert outs[0] == outs[1]
    assert outs[0]["timesteps"] == 12 and outs[0]["bins"] == 64
    # a counts file cannot show that each person was counted at most Δ times per timestep: said, not hidden
    assert inputs[0]["kind"] == "events" and inputs[0]["contribution_bounding"].startswith("applied")
    assert inputs[1] == {"kind": "counts", "contribution_bounding": "not checked", "caveat": inputs[1]["caveat"]}
    assert "cannot be checked" in inputs[1]["caveat"]
    assert capsys.readouterr().err.count("contribution bounding") == 1  # the counts run only, on stderr


def test_cli_reports_bad_rows_and_strict_fails(tmp_path, cli, capsys):
    cfg = _write_config(tmp_path / "c.yaml", _config(horizon=6, cutoff=2))
    rows = _good_rows()
    rows[3] = "u3,not-a-time,v1,2"
    rows[10] = "u4,1704067300,nope,2"
    rows[20] = "u5,1704067300,v1"
    ev = _events_csv(tmp_path / "e.csv", rows)
    out = tmp_path / "r.json"
    code = cli(["evaluate", "--config", str(cfg), "--input", str(ev), "--methods", "fixed,uniform",
                "--runs", "2", "--queries", "5", "--json", str(out), "--progress", "off"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "3 bad rows" in err and "invalid_time" in err and "out_of_domain" in err
    assert json.loads(out.read_text())["timesteps"] == 6
    code = cli(["evaluate", "--config", str(cfg), "--input", str(ev), "--methods", "fixed", "--runs", "1",
                "--json", str(out), "--strict", "--progress", "off"])
    err = capsys.readouterr().err
    assert code == 2 and "line 5" in err  # the first bad row (header = line 1)


@pytest.mark.parametrize("content", [b"", b"\x00\xff\xfe garbage \n\x01\x02", b"uid,ts,a,b\n", b"uid,ts\n1,2\n,,,\n"])
def test_cli_never_crashes_on_malformed_input(tmp_path, cli, capsys, content):
    cfg = _write_config(tmp_path / "c.yaml", _config(horizon=6, cutoff=2))
    bad = tmp_path / "bad.csv"
    bad.write_bytes(content)
    code = cli(["evaluate", "--config", str(cfg), "--input", str(bad), "--methods", "fixed", "--runs", "1",
                "--json", str(tmp_path / "o.json"), "--progress", "off"])
    assert code in (0, 2)
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip()


def test_cli_exit_codes_for_arguments_and_config(tmp_path, cli, capsys):
    cfg = _write_config(tmp_path / "c.yaml", _config(horizon=6, cutoff=2))
    ev = _events_csv(tmp_path / "e.csv", _good_rows())
    base = ["evaluate", "--config", str(cfg), "--input", str(ev), "--runs", "1", "--progress", "off",
            "--json", str(tmp_path / "o.json")]
    assert cli(base + ["--methods", "dsat,bd"]) == 2
    assert "w-event" in capsys.readouterr().err
    assert cli(base + ["--methods", "dsat,nope"]) == 2
    assert "unknown method" in capsys.readouterr().err
    assert cli(["evaluate", "--config", str(tmp_path / "missing.yaml"), "--input", str(ev)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli(["evaluate", "--config", str(cfg), "--input", str(tmp_path / "missing.csv"),
                "--progress", "off"]) == 2
    assert "missing.csv" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli(base + ["--runs", "0"])
    assert exc.value.code == 2


def test_cli_plot(tmp_path, cli):
    pytest.importorskip("matplotlib")
    cfg = _write_config(tmp_path / "c.yaml", _config(horizon=6, cutoff=2))
    ev = _events_csv(tmp_path / "e.csv", _good_rows())
    png = tmp_path / "p.png"
    assert cli(["evaluate", "--config", str(cfg), "--input", str(ev), "--methods", "dsat,fixed,uniform",
                "--runs", "2", "--queries", "5", "--json", str(tmp_path / "o.json"), "--plot", str(png),
                "--progress", "off"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_plot_without_matplotlib_fails_early(tmp_path, cli, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    cfg = _write_config(tmp_path / "c.yaml", _config(horizon=6, cutoff=2))
    ev = _events_csv(tmp_path / "e.csv", _good_rows())
    out = tmp_path / "o.json"
    assert cli(["evaluate", "--config", str(cfg), "--input", str(ev), "--methods", "fixed", "--runs", "2",
                "--queries", "5", "--json", str(out), "--plot", str(tmp_path / "p.png"), "--progress", "off"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install" in err and "--plot" in err
    assert not out.exists() and not (tmp_path / "p.png").exists()  # nothing ran


@pytest.mark.parametrize("where", ["missing-dir", "a-directory", "read-only-dir"])
def test_cli_unwritable_output_fails_early(tmp_path, cli, capsys, where):
    import os

    cfg = _write_config(tmp_path / "c.yaml", _config(horizon=6, cutoff=2))
    ev = _events_csv(tmp_path / "e.csv", _good_rows())
    if where == "missing-dir":
        target = tmp_path / "nope" / "o.json"
    elif where == "a-directory":
        target = tmp_path
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        target = ro / "o.json"
        if os.access(ro, os.W_OK):  # root ignores permissions
            pytest.skip("running as root: a read-only directory is writable")
    assert cli(["evaluate", "--config", str(cfg), "--input", str(ev), "--methods", "fixed", "--runs", "1",
                "--json", str(target), "--progress", "off"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--json" in err and str(target) in err


def test_cli_prints_a_results_table(tmp_path, cli, capsys):
    cfg = _write_config(tmp_path / "c.yaml", _config(horizon=6, cutoff=2))
    ev = _events_csv(tmp_path / "e.csv", _good_rows())
    assert cli(["evaluate", "--config", str(cfg), "--input", str(ev), "--methods", "dsat,fixed", "--runs", "2",
                "--queries", "5", "--json", str(tmp_path / "o.json"), "--progress", "off"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("method"))
    for col in ("MAE", "range-query error", "fresh releases", "ε spent"):
        assert col in header
    result = json.loads((tmp_path / "o.json").read_text())
    fixed = next(line for line in lines if line.startswith("fixed "))
    assert f"{result['methods']['fixed']['mae']:.4g}" in fixed
    assert any(line.startswith("zero-release") and line.endswith("[ref]") for line in lines)
    assert any(line.startswith("previous-true") and line.endswith("[ref, non-private]") for line in lines)
    # without --json the JSON alone is on stdout and the table goes to stderr
    assert cli(["evaluate", "--config", str(cfg), "--input", str(ev), "--methods", "fixed", "--runs", "1",
                "--queries", "5", "--progress", "off"]) == 0
    cap = capsys.readouterr()
    json.loads(cap.out)
    assert "range-query error" in cap.err


def test_replay_with_seed_s_plus_r_reproduces_run_r(tmp_path, cli):
    """The evaluation steps the service's engine with the service's noise: replay --seed reproduces a run."""
    from histogram.noise import Randomness
    from stream.config import load_settings
    from stream.lab.generate import generate
    from stream.lab.inputs import load_truth

    d = tmp_path / "g"
    generate("traffic", d, timesteps=10, population=50, seed=3, grid=6, w=5)
    settings = load_settings(d / "config.yaml")
    truth = load_truth(settings, d / "events.csv").counts
    seed, r = 7, 2
    engine, rnd = settings.engine(), Randomness.seeded(seed + r)
    state, ours = engine.initial_state(), []
    for t in range(truth.shape[0]):
        release, state = engine.step(state, truth[t], rnd.drawer(settings.stream.id, t, "release"))
        ours.append(release.counts.tolist())
    out = tmp_path / "r.jsonl"
    assert cli(["replay", "--config", str(d / "config.yaml"), "--input", str(d / "events.csv"),
                "--output", str(out), "--seed", str(seed + r)]) == 0
    msgs = [json.loads(line) for line in out.read_text().splitlines()]
    theirs = [m["counts"] for m in msgs if m.get("message_type") == "release"]
    assert theirs == ours


def test_postprocessed_variant_is_never_worse_and_helps_a_sparse_stream():
    """``m+nonnegative`` makes the same decisions with the same seeds (post-processing cannot
    change them), so its error is at most the raw method's, and strictly less when counts are small."""
    s = _settings(horizon=20, epsilon=1.0)
    truth = _truth(population=100)  # 2 people per bin on average: noise often goes below zero
    res = evaluate(s, truth, ["uniform", "uniform+nonnegative", "dsat", "dsat+nonnegative"], runs=3, queries=20,
                   seed=5, progress=False)
    m = res["methods"]
    for base in ("uniform", "dsat"):
        assert m[f"{base}+nonnegative"]["fresh_releases"] == m[base]["fresh_releases"]
        assert m[f"{base}+nonnegative"]["mae"] < m[base]["mae"]
    with pytest.raises(EvaluationError, match="unknown post-processor"):
        parse_methods("dsat+smooth")


def test_person_from_record_key_is_refused_for_csv_input(tmp_path, cli, capsys):
    """schema.user_id "@key" exists only on Kafka: replay and evaluate say so and what to set."""
    cfg = _config(horizon=6, cutoff=2)
    cfg["schema"]["user_id"] = "@key"
    path = _write_config(tmp_path / "c.yaml", cfg)
    data = tmp_path / "e.csv"
    data.write_text("uid,ts,a,b\n" + "\n".join(_good_rows()) + "\n")
    assert cli(["evaluate", "--config", str(path), "--input", str(data), "--runs", "1", "--progress", "off"]) == 2
    assert cli(["replay", "--config", str(path), "--input", str(data), "--output", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("a CSV file has no record keys") == 2 and "DPSTREAM_SCHEMA__USER_ID" in err


def test_cli_recommend_ranks_every_runnable_candidate(tmp_path, cli, capsys):
    from controller.method import METHODS, W_EVENT_METHODS

    cfg = _write_config(tmp_path / "c.yaml", _config(horizon=6, cutoff=2))
    ev = _events_csv(tmp_path / "e.csv", _good_rows())
    out = tmp_path / "o.json"
    assert cli(["evaluate", "--config", str(cfg), "--input", str(ev), "--recommend", "--runs", "2",
                "--queries", "5", "--json", str(out), "--progress", "off"]) == 0
    text = capsys.readouterr().out
    result = json.loads(out.read_text())
    ranked = result["recommendation"]["ranking"]
    # every method of the registry this (user-level) config can run, in three variants; the w-event
    # mechanisms cannot
    runnable = [m for m in METHODS if m not in W_EVENT_METHODS]
    assert sorted(ranked) == sorted(m + v for m in runnable for v in ("", "+nonnegative", "+kalman"))
    maes = [result["methods"][n]["mae"] for n in ranked]
    assert maes == sorted(maes)
    assert f"recommend {ranked[0]}:" in text and "not free" in text
