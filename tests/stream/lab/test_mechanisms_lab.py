"""``dpstream evaluate --mechanisms``: records instead of histograms, the schedule, the answers, the CLI."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from stream.commands.cli import main
from stream.config import load_settings
from stream.lab.evaluate import EvaluationError
from stream.lab.generate import generate
from stream.lab.highdim import HighDimParams, query_workload, random_boxes
from stream.lab.inputs import load_records, load_truth
from stream.lab.mechanisms import (
    _box_counts,
    evaluate_mechanisms,
    parse_mechanisms,
)


@pytest.fixture(scope="module")
def census(tmp_path_factory):
    d = tmp_path_factory.mktemp("census")
    generate("census", d, timesteps=4, population=300, seed=2, dimensions=3)
    with open(d / "events.csv", "a") as fh:  # person 0 twice in timestep 0: bounding keeps one
        fh.write("0,1704067300,30,female,grade-9\n")
    return d


@pytest.fixture(scope="module")
def highdim(tmp_path_factory):
    d = tmp_path_factory.mktemp("highdim")
    generate("highdim", d, timesteps=4, population=3000, seed=5, w=4, cutoff=4)
    return d


def test_records_give_the_same_histograms_as_load_truth(census):
    s = load_settings(census / "config.yaml")
    rec = load_records(s, census / "events.csv")
    hist = load_truth(s, census / "events.csv").counts
    assert rec.timesteps == hist.shape[0] == 4
    for t, x in enumerate(rec.records):
        flat = np.ravel_multi_index(tuple(x.T), rec.levels)
        np.testing.assert_array_equal(np.bincount(flat, minlength=hist.shape[1]), hist[t])
    assert rec.report.bounded_out == 1


def test_box_truth_counts_records_inside_inclusive_bounds():
    x = np.array([[0, 0, 0], [1, 2, 3], [2, 2, 2], [3, 1, 0]])
    lo = np.array([[1, 0, 0], [0, 2, 2], [0, 0, 0]])
    hi = np.array([[2, 2, 3], [3, 2, 3], [3, 2, 3]])
    np.testing.assert_array_equal(_box_counts(x, (4, 3, 4), lo, hi), [2, 2, 4])


def test_boxes_constrain_the_asked_number_of_attributes():
    levels = (6,) * 8
    lo, hi = random_boxes(levels, 3, 50, 0)
    active = ((lo > 0) | (hi < 5)).sum(axis=1)
    assert (active == 3).all() and (lo <= hi).all()
    assert set(query_workload(levels, 5, 0)) == {"range1", "range2", "range3", "range_all"}


def test_lpa_with_negligible_noise_answers_every_query_exactly(census):
    s = load_settings(census / "config.yaml").with_changes({"privacy": {"epsilon": 10**9}})
    rec = load_records(s, census / "events.csv")
    r = evaluate_mechanisms(s, rec, ["lpa"], runs=1, queries=30, schedule="uniform")
    row = r["methods"]["lpa"]
    for k in ("range1_abs", "range2_abs", "range3_abs", "range_all_abs", "marg1", "marg2"):
        assert row[k] == 0.0, k
    # the same with a realistic ε is not exact: the test can tell
    r1 = evaluate_mechanisms(load_settings(census / "config.yaml"), rec, ["lpa"], runs=1, queries=30,
                             schedule="uniform")
    assert r1["methods"]["lpa"]["range1_abs"] > 1


def test_schedule_spends_the_config_epsilon_and_c(highdim):
    s = load_settings(highdim / "config.yaml").with_changes({"privacy": {"cutoff": 2}})
    rec = load_records(s, highdim / "events.csv")
    r = evaluate_mechanisms(s, rec, ["copula", "marginals"], runs=2, queries=10, synthetic=2000)
    assert r["schedule"]["fresh_epsilon"] == ["1/2", None, "1/2", None]
    for row in r["methods"].values():
        assert row["fresh_releases"] == 2 and row["epsilon_spent"] == 1.0 and row["max_window_spend"] == 1.0
    uniform = evaluate_mechanisms(s, rec, ["marginals-1"], runs=1, queries=5, synthetic=500, schedule="uniform")
    assert uniform["schedule"]["fresh_epsilon"] == ["1/4"] * 4


def test_a_schedule_steps_the_services_engine(highdim, monkeypatch):
    """fixed/uniform in front of a mechanism run through the one run primitive (_run_engine), whose
    runs are what replay --seed seed+r publishes (the parametrized test below)."""
    from stream.lab import mechanisms

    calls = []
    real = mechanisms._run_engine

    def spy(settings, name, decision, *args, **kwargs):
        calls.append((name, decision))
        return real(settings, name, decision, *args, **kwargs)

    monkeypatch.setattr(mechanisms, "_run_engine", spy)
    s = load_settings(highdim / "config.yaml")
    rec = load_records(s, highdim / "events.csv")
    evaluate_mechanisms(s, rec, ["lpa", "marginals-1"], runs=2, queries=5, synthetic=500, schedule="uniform")
    assert calls == [("lpa", "uniform")] * 2 + [("marginals-1", "uniform")] * 2


def test_large_domain_runs_the_models_and_skips_the_histogram_methods(tmp_path):
    generate("highdim", tmp_path, timesteps=2, population=2000, seed=1, highdim=HighDimParams(attributes=12, levels=10),
             w=2, cutoff=2)
    s = load_settings(tmp_path / "config.yaml")
    rec = load_records(s, tmp_path / "events.csv")
    r = evaluate_mechanisms(s, rec, ["lpa", "psd", "copula-median", "marginals"], runs=1, queries=10, synthetic=2000)
    assert r["cells"] == 10**12 and set(r["methods"]) == {"copula-median", "marginals"}
    assert "more than --max-cells" in r["skipped"]["lpa"] and "psd" in r["skipped"]
    assert "ratio_to_lpa" not in r


def test_models_beat_lpa_on_the_high_dimensional_stream(highdim):
    s = load_settings(highdim / "config.yaml")
    rec = load_records(s, highdim / "events.csv")
    r = evaluate_mechanisms(s, rec, ["lpa", "copula-median", "marginals"], runs=1, queries=40, synthetic=20_000)
    ratio = r["ratio_to_lpa"]
    for name in ("copula-median", "marginals"):
        assert ratio[name]["marg2"] < 0.5 and ratio[name]["range_all_abs"] < 0.5, (name, ratio[name])


def test_runs_are_reproducible_by_seed(highdim):
    s = load_settings(highdim / "config.yaml")
    rec = load_records(s, highdim / "events.csv")
    a, b, c = (evaluate_mechanisms(s, rec, ["copula"], runs=1, queries=10, seed=k, synthetic=2000)
               for k in (0, 0, 1))
    assert a["methods"]["copula"]["marg2"] == b["methods"]["copula"]["marg2"] != c["methods"]["copula"]["marg2"]


def test_bad_names_are_refused():
    with pytest.raises(EvaluationError, match="unknown mechanism"):
        parse_mechanisms("lpa,dpcopula")
    with pytest.raises(EvaluationError, match="twice"):
        parse_mechanisms("lpa,lpa")


def test_cli(highdim, tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["evaluate", "--config", str(highdim / "config.yaml"), "--input", str(highdim / "events.csv"),
            "--runs", "1", "--queries", "10", "--synthetic", "2000", "--json", str(out)]
    assert main([*args, "--mechanisms", "lpa,copula", "--plot", str(tmp_path / "p.png")]) == 0
    r = json.loads(out.read_text())
    assert r["mode"] == "mechanisms" and set(r["methods"]) == {"lpa", "copula"}
    assert r["ratio_to_lpa"]["lpa"]["marg2"] == 1.0 and (tmp_path / "p.png").stat().st_size > 1000
    from stream.lab.mechanisms import plot_mechanisms

    plot_mechanisms(r, tmp_path / "z.png", relative_to="zero-release")
    assert (tmp_path / "z.png").stat().st_size > 1000
    assert main([*args, "--mechanisms", "lpa,kway"]) == 2
    assert "unknown mechanism" in capsys.readouterr().err
    assert main([*args, "--mechanisms", "lpa", "--methods", "bd"]) == 2
    assert "fixed or uniform" in capsys.readouterr().err
    assert main([*args, "--mechanisms", "lpa,copula", "--methods", "dsat", "--max-cells", "1000"]) == 0
    err = capsys.readouterr().err  # LPA needs the histogram; the copula decides on the records, as the service
    assert "lpa skipped" in err and "lpa needs the full histogram" in err and "copula skipped" not in err


@pytest.mark.parametrize("name, decision, changes, mixed", [
    ("copula-median", "dsft", {"release": {"threshold": 1.5}, "privacy": {"epsilon": 50}}, True),
    ("marginals", "dsft", {"release": {"threshold": 1.5}, "privacy": {"epsilon": 50}}, True),
    ("lpa", "dsat", {}, False),  # 3,000 people over 1.7M cells: every timestep differs by ~2n
    ("copula-median", "fixed", {"privacy": {"cutoff": 2}}, True),  # a public schedule in front
    ("marginals", "uniform", {}, False),
])
def test_a_decision_in_front_publishes_what_the_service_publishes(highdim, name, decision, changes, mixed):
    """--methods dsat/dsft/fixed/uniform: the service's engine decides; each run's kinds and models are
    replay --seed's."""
    from itertools import combinations

    from histogram.noise import Randomness
    from stream.lab.mechanisms import _run_engine, engine_settings
    from stream.lab.replay import replay

    s = load_settings(highdim / "config.yaml").with_changes(changes) if changes else load_settings(
        highdim / "config.yaml")
    rec = load_records(s, highdim / "events.csv")
    m = len(rec.levels)
    tables = [(j,) for j in range(m)] + list(combinations(range(m), 2))
    run = _run_engine(s, name, decision, rec, query_workload(rec.levels, 5, 0), tables, Randomness.seeded(3), 500)
    seeded = engine_settings(s, name, decision).with_changes({"randomness": {"seed": 3, "allow_seeded_noise": True}})
    messages = []
    replay(seeded, highdim / "events.csv", None, on_release=lambda r: messages.append(json.loads(r.payload)))
    assert [msg["kind"] for msg in messages] == run.kinds
    assert run.kinds[0] == "fresh" and run.fresh == run.kinds.count("fresh")
    assert ("republished" in run.kinds) == mixed  # where it republishes, a lab that always refreshed would fail
    for msg, model in zip(messages, run.models, strict=True):
        if msg["kind"] != "fresh":
            assert model is None
        elif name == "copula-median":
            assert msg["model"]["correlation"] == (np.round(model.correlation, 6) + 0.0).tolist()
        elif name == "marginals":
            assert msg["model"]["total"] == round(model.total, 6)
    assert run.epsilon_spent == Fraction(messages[-1]["epsilon_spent_exact"])


def test_dsat_in_front_runs_through_evaluate(highdim):
    s = load_settings(highdim / "config.yaml")
    rec = load_records(s, highdim / "events.csv")
    r = evaluate_mechanisms(s, rec, ["copula", "marginals"], runs=1, queries=10, synthetic=500, schedule="dsat")
    assert r["schedule"]["name"] == "dsat" and r["schedule"]["fresh_epsilon"] is None
    for row in r["methods"].values():
        assert 1 <= row["fresh_releases"] <= rec.timesteps
        assert row["max_window_spend"] <= float(s.privacy.epsilon) + 1e-12
        # accuracy over time: one value per timestep, whose mean is the reported error
        series = row["per_timestep"]
        assert len(series["marg2"]) == len(series["fresh_share"]) == rec.timesteps
        assert np.mean(series["marg2"]) == pytest.approx(row["marg2"], rel=1e-4)
        assert sum(series["fresh_share"]) == pytest.approx(row["fresh_releases"])
    zero = r["references"]["zero-release"]
    assert np.mean(zero["per_timestep"]["range1_abs"]) == pytest.approx(zero["range1_abs"], rel=1e-4)
    # the service steps a model on the records: no histogram, whatever the domain's size
    small = evaluate_mechanisms(s, rec, ["copula", "lpa"], runs=1, queries=10, schedule="dsft", max_cells=100)
    assert set(small["methods"]) >= {"copula"} and set(small["skipped"]) == {"lpa"}


def test_zero_release_reference_is_the_truth_itself(highdim):
    s = load_settings(highdim / "config.yaml")
    rec = load_records(s, highdim / "events.csv")
    r = evaluate_mechanisms(s, rec, ["marginals-1"], runs=1, queries=10)
    zero = r["references"]["zero-release"]
    n = np.mean([x.shape[0] for x in rec.records])
    assert zero["range1_abs"] > 0 and zero["marg1"] == pytest.approx(1.0) and zero["marg2"] == pytest.approx(1.0)
    assert zero["range_all_abs"] < zero["range1_abs"] <= n
