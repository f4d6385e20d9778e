"""``decision: auto`` (issue 13 item 3): the planner chooses from public information only, says why,
and warns when a threshold sits below the noise floor or a method should do worse than zeros."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from controller.errors import ConfigurationError
from controller.method import METHODS
from stream.commands import load_resolved
from stream.config import Settings, load_settings
from stream.lab.evaluate import evaluate
from stream.planning import planner
from stream.planning.planner import AUTO, plan, resolve, warnings_for

ROOT = Path(__file__).resolve().parents[3]


def _config(*, decision: str = AUTO, epsilon: float = 1, w: int = 5, bins: int = 4, population: int = 200,
            cutoff: int = 3, threshold: float = 0.025, noise_floor: bool = False,
            history: str | None = None) -> dict:
    release = {"decision": decision, "threshold": threshold, "noise_floor": noise_floor,
               "planner": {"timesteps": 30, "runs": 1, "realisations": 1, **({"public_history": history} if history else {})}}
    return {
        "stream": {"id": "t", "timestep": "1h", "start": "2024-01-01T00:00:00Z"},
        "schema": {"user_id": "uid", "event_time": "ts",
                   "attributes": [{"name": "a", "kind": "categorical", "values": [f"v{i}" for i in range(bins)]}]},
        "privacy": {"unit": "w-event", "epsilon": epsilon, "w": w, "cutoff": cutoff, "population": population},
        "release": release,
    }


def _settings(**kw) -> Settings:
    return Settings(**_config(**kw)).validate_all()


@pytest.fixture(autouse=True)
def _fresh_cache():
    planner._CACHE.clear()
    yield
    planner._CACHE.clear()


def _counts_file(path: Path, counts: np.ndarray) -> str:
    lines = [",".join(f"bin_{i}" for i in range(counts.shape[1]))]
    lines += [",".join(str(int(x)) for x in row) for row in counts]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _static(bins: int = 4, t: int = 60) -> np.ndarray:
    return np.tile(np.array([50] * bins, dtype=np.int64), (t, 1))


def _jumping(bins: int = 4, t: int = 60) -> np.ndarray:
    rng = np.random.default_rng(3)
    return rng.integers(0, 100, size=(t, bins)).astype(np.int64)


# -- reads public information only ----------------------------------------------------------


def test_the_choice_is_the_same_for_two_private_inputs(tmp_path) -> None:
    """evaluate --methods auto on two very different private inputs with the same configuration:
    the same plan. Not vacuous: declared as the public history, the same two inputs lead the
    planner to different choices, so a planner that read the evaluated input would be caught."""
    s = _settings()
    a = evaluate(s, _static(), ["auto", "uniform"], runs=1, queries=0, progress=False)
    b = evaluate(s, _jumping(), ["auto", "uniform"], runs=1, queries=0, progress=False)
    assert a["plan"]["choice"] == b["plan"]["choice"] and a["plan"]["lab_choice"] == b["plan"]["lab_choice"]
    assert [k for k in a["methods"] if k.startswith("auto")] == [k for k in b["methods"] if k.startswith("auto")]
    # the check is not vacuous: as a (declared-public) history, these inputs change the choice
    ha = plan(_settings(history=_counts_file(tmp_path / "a.csv", _static())))
    hb = plan(_settings(history=_counts_file(tmp_path / "b.csv", _jumping())))
    assert ha.lab_choice != hb.lab_choice, (ha.lab_choice, hb.lab_choice)
    assert ha.scenarios == ("public-history",)


def test_plan_depends_on_public_parameters_and_is_deterministic() -> None:
    first = plan(_settings())
    planner._CACHE.clear()
    again = plan(_settings())
    assert first.choice == again.choice and first.mae == again.mae  # constants seed it: same on restart
    assert resolve(_settings()).fingerprint() == resolve(_settings()).fingerprint()
    # another ε is another public fact: another simulation (the scores move)
    other = plan(_settings(epsilon=0.05))
    assert other.mae != first.mae


def test_the_planner_never_opens_anything_but_the_declared_history(tmp_path, monkeypatch) -> None:
    import builtins

    opened: list[str] = []
    real_open = builtins.open

    def spy(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    plan(_settings())
    assert not [f for f in opened if f.endswith(".csv")], opened


# -- configuration and commands ---------------------------------------------------------------


def test_auto_resolves_to_a_concrete_method_and_pins(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_config()))
    raw = load_settings(path)
    assert raw.release.decision == AUTO and raw.plan is None
    with pytest.raises(ConfigurationError, match="planner"):
        raw.engine()  # unresolved auto cannot release
    resolved = load_resolved(str(path))
    assert resolved.release.decision in METHODS
    assert resolved.plan is not None and resolved.plan.choice.decision == resolved.release.decision
    text = resolved.plan.text()
    assert "chose" in text and "public information only" in text
    # writing the printed release settings into the config reproduces the same fingerprint
    pinned = raw.with_changes({"release": resolved.plan.choice.release_changes()})
    assert pinned.fingerprint() == resolved.fingerprint()
    # the planner section is how, not what: it does not enter the fingerprint
    no_planner = _config(decision=resolved.release.decision)
    no_planner["release"].pop("planner")
    no_planner["release"].update(resolved.plan.choice.release_changes())
    assert Settings(**no_planner).validate_all().fingerprint() == resolved.fingerprint()


def test_unknown_history_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_config(history=str(tmp_path / "missing.csv"))))
    from stream.config import ConfigError

    with pytest.raises(ConfigError, match="public_history .*does not exist"):
        load_resolved(str(path))


def _cli(*argv: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "stream.commands.cli", *argv], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)


def test_check_config_prints_why_and_warns(tmp_path) -> None:
    auto = tmp_path / "auto.yaml"
    auto.write_text(yaml.safe_dump(_config()))
    r = _cli("check-config", str(auto))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok:") and "auto" not in r.stdout.split(",")[0]
    assert "dpstream check-config: chose " in r.stderr and "release.decision: " in r.stderr
    low = tmp_path / "low.yaml"
    low.write_text(yaml.safe_dump(_config(decision="dsft", threshold=0.001)))
    r = _cli("check-config", str(low))
    assert r.returncode == 0 and "warning:" in r.stderr and "noise floor" in r.stderr
    fine = tmp_path / "fine.yaml"
    fine.write_text(yaml.safe_dump(_config(decision="dsft", noise_floor=True)))
    r = _cli("check-config", str(fine))
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_evaluate_runs_auto_by_name(tmp_path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_config()))
    data = _counts_file(tmp_path / "in.csv", _jumping(t=20))
    out = tmp_path / "o.json"
    r = _cli("evaluate", "--config", str(cfg), "--input", data, "--methods", "auto,fixed", "--runs", "1",
             "--queries", "0", "--json", str(out), "--progress", "off", "--jobs", "1")
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert [k for k in res["methods"] if k.startswith("auto")] and "plan" in res
    assert "dpstream evaluate: chose " in r.stderr


# -- warnings -------------------------------------------------------------------------------


def test_threshold_warning_fires_below_the_floor_only() -> None:
    low = warnings_for(_settings(decision="dsft", threshold=0.001))
    assert any("noise floor" in w for w in low)
    assert not any("noise floor" in w for w in warnings_for(_settings(decision="dsft", noise_floor=True)))
    assert not any("noise floor" in w for w in warnings_for(_settings(decision="uniform")))


def test_worse_than_zero_warning_fires_when_the_noise_exceeds_the_data_and_means_it() -> None:
    """Sparse domain, small ε: flagged, and on a stream at the declared population uniform really
    is worse than publishing zeros; a dense, generous configuration: silent, and better than zeros."""
    sparse = _settings(decision="uniform", epsilon=0.1, bins=40, population=40, w=10)
    flagged = [w for w in warnings_for(sparse) if "worse than publishing nothing" in w]
    assert flagged, warnings_for(sparse)
    truth = np.ones((60, 40), dtype=np.int64)  # 40 people over 40 bins
    res = evaluate(sparse, truth, ["uniform"], runs=3, queries=0, progress=False)
    assert res["methods"]["uniform"]["mae"] > res["references"]["zero-release"]["mae"]
    dense = _settings(decision="uniform", epsilon=1, bins=4, population=400, w=5)
    assert not [w for w in warnings_for(dense) if "worse than publishing nothing" in w]
    res = evaluate(dense, np.full((60, 4), 100, dtype=np.int64), ["uniform"], runs=3, queries=0, progress=False)
    assert res["methods"]["uniform"]["mae"] < res["references"]["zero-release"]["mae"]


def test_the_plan_warns_when_its_choice_loses_to_zeros() -> None:
    hopeless = plan(_settings(epsilon=0.01, bins=40, population=20, w=10))
    assert any("no better than publishing nothing" in w for w in hopeless.warnings), hopeless.text()
    assert not any("publishing nothing" in w for w in plan(_settings(population=2000)).warnings)


def test_scenarios_follow_the_declared_population() -> None:
    s = planner.scenario("sine", 50, 10, 300)
    assert s.shape == (50, 10) and s.sum(axis=1).max() <= 300 and s.sum(axis=1).max() >= 250
    sparse = planner.scenario("sudden", 50, 1000, 100)
    assert (sparse == 0).mean() > 0.8  # 100 people over 1,000 bins: mostly empty bins


def test_run_logs_the_choice_and_the_warnings(tmp_path, caplog) -> None:
    import logging

    from stream.commands.run import _warn_about_configuration

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_config()))
    with caplog.at_level(logging.INFO, logger="dpstream.run"):
        _warn_about_configuration(load_resolved(str(path)))
    assert any(r.getMessage().startswith("chose ") for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dpstream.run"):
        _warn_about_configuration(_settings(decision="dsft", threshold=0.001))
    assert [r for r in caplog.records if r.levelno == logging.WARNING and "noise floor" in r.getMessage()]


# -- the model filter among the candidates (issue 30 goal b) --------------------------------


def test_the_planner_simulates_the_model_filter_and_publishes_its_chain() -> None:
    """``m+model`` candidates exist for the schedules (uniform, fixed, Sample), are publishable
    without a declared population (the filter learns its variance from the releases), and set
    ``release.postprocess: model+nonnegative``; fast/pegasus get no filter."""
    p = plan(_settings(epsilon=0.1, w=10))
    models = {n for n in p.mae if n.endswith("+model")}
    assert models == {f"{b}+model" for b in planner.MODEL_BASES} | {"adaptive-sample(min_per_window=2)+model"}, models
    assert not [n for n in p.mae if n.startswith(("fast+", "pegasus+")) and n.endswith(("+model", "+kalman"))]
    c = planner.Candidate("fixed", "model")
    assert c.publishable(None) and c.release_changes()["postprocess"] == "model+nonnegative"
    Settings(**_config(decision="fixed")).validate_all().with_changes({"release": c.release_changes()})


def test_adaptive_sample_is_also_simulated_with_a_floor_at_its_start() -> None:
    """Unset, ``release.min_per_window`` gives two Adaptive Sample candidates: no floor, and floored at
    its start (the largest divisor of w not above the cutoff), unless that start is w (Uniform). The
    floored one publishes its floor, which the service's policy then holds; a configured floor is
    the only one simulated."""
    def floors(s: Settings) -> list[int | None]:
        return [c.min_per_window for c in planner._adaptive_candidates(s)]

    assert floors(_settings(w=10, cutoff=3)) == [None, 2]
    assert floors(_settings(w=5, cutoff=5)) == [None]
    s = _settings(w=10, cutoff=3)
    floored = planner.Candidate("adaptive-sample", "model", min_per_window=2)
    assert floored.name == "adaptive-sample(min_per_window=2)+model"
    chosen = s.with_changes({"release": {**floored.release_changes(), "planner": None}})
    assert chosen.engine().policy.describe()["min_releases"] == 2
    assert chosen.fingerprint() != s.with_changes({"release": {"decision": "adaptive-sample", "planner": None}}).fingerprint()
    # every other candidate clears a floor, so a configuration that sets one still plans
    assert planner.Candidate("fixed", "model").release_changes()["min_per_window"] is None
    configured = s.with_changes({"release": {"min_per_window": 5}})
    assert floors(configured) == [5]
    assert "adaptive-sample(min_per_window=5)" in plan(configured).mae


def test_a_floor_is_refused_for_another_decision_and_leaves_old_fingerprints_alone() -> None:
    with pytest.raises(Exception, match="min_per_window"):
        Settings(**_config(decision="dsat")).validate_all().with_changes({"release": {"min_per_window": 5}}).engine()
    s = Settings(**_config(decision="fixed")).validate_all()
    assert "min_per_window" not in planner.public_facts(s)  # the plan cache keys of before
    assert planner.public_facts(_settings().with_changes({"release": {"min_per_window": 2}}))["min_per_window"] == 2
    from stream.config.fingerprint import privacy_view
    assert "min_per_window" not in json.dumps(privacy_view(s))


def test_model_errors_over_stacked_runs_equal_one_run_at_a_time() -> None:
    """The filter steps runs with the same fresh timesteps together; each run's error must be what
    that run alone through the service's PostProcessor gives."""
    s = _settings(decision="fixed", epsilon=0.5, w=4, bins=3, population=300)
    truths = [planner.scenario(f, 40, 3, 300) for f in ("sine", "trend", "sudden")]
    traces = [planner._simulate(s, t, 7 + i, ("none",))[1] for i, t in enumerate(truths)]
    together = planner._chain_errors(s, planner.MODEL_CHAIN, truths, traces)
    alone = [planner._chain_errors(s, planner.MODEL_CHAIN, [t], [tr])[0] for t, tr in zip(truths, traces, strict=True)]
    assert together == pytest.approx(alone, rel=1e-12)
    # and one run alone is the service's chain applied release by release
    from histogram.postprocess import PostProcessor

    tr, truth = traces[0], truths[0]
    post = PostProcessor.for_stream("model+nonnegative", population=300, bins=3)
    state, err = post.initial(), 0.0
    for t in range(truth.shape[0]):
        out = np.zeros(3)
        if tr.has[t]:
            got, state = post.apply(state, tr.counts[t], tr.widths[t], tr.confidence, bool(tr.fresh[t]))
            out = got.counts
        err += np.abs(out - truth[t]).sum()
    assert alone[0] == pytest.approx(err / truth.size, rel=1e-12)


def test_rank_bounds_the_worst_case_and_guards_against_the_zero_release() -> None:
    """The order is by the worst ratio to a stream's best (not by how many streams are within
    1.1x: that chose Sample at ε = 0.1, w = 50, 2.4x the best on sine), and a candidate worse than
    publishing zeros on some public stream comes last while another is not."""
    _, order = planner.rank({"near-most": [10.0, 10.0, 10.0, 19.0], "even": [13.0, 13.0, 13.0, 13.0]})
    assert order[0] == "even", order
    zero = [100.0, 100.0, 100.0, 12.0]  # "even" loses to zeros on the last stream, "near-most" too
    _, order = planner.rank({"near-most": [10.0, 10.0, 10.0, 19.0], "even": [13.0] * 4,
                             "modest": [14.0, 14.0, 14.0, 11.0]}, zero=zero)
    assert order[0] == "modest", order
    _, order = planner.rank({"even": [13.0] * 4, "near-most": [10.0, 10.0, 10.0, 19.0]}, zero=zero)
    assert order[0] == "even", order  # every candidate loses to zeros somewhere: the guard stands aside


def test_rank_minimises_the_largest_regret_in_counts_not_the_largest_ratio() -> None:
    """A sparse scenario (1 person per bin, where a release loses to zeros by a count or two) must
    not outweigh a dense one (10 per bin, where never releasing loses 10 counts): the order bounds
    the counts per bin lost against each scenario's best, so a candidate 4x the best on the sparse
    scenario (3 counts) ranks above one 2x the best on the dense scenario (5 counts)."""
    mae = {"releases": [4.0, 5.0], "never-releases": [1.0, 10.0]}
    _, order = planner.rank(mae)
    assert order == ["releases", "never-releases"], order
    # the guard reads the declared stream only (guard_on): losing to zeros on the sparse scenario
    # does not push "releases" behind a candidate that publishes zeros in disguise
    zero = [1.0, 10.0]
    assert planner.rank(mae, zero=zero, guard_on=[1])[1][0] == "releases"
    assert planner.rank(mae, zero=zero)[1][0] == "never-releases"  # guarded everywhere: the old behaviour
    # and a candidate worse than zeros on the declared stream comes last while another is not
    mae["noisy"] = [1.5, 10.5]
    assert planner.rank(mae, zero=zero, guard_on=[1])[1][-1] == "noisy"
    # a scenario no candidate could run (NaN, infinite) does not decide; an unusable candidate comes last
    odd = {"a": [4.0, 5.0, float("nan")], "b": [1.0, 10.0, float("inf")], "c": [float("inf"), 5.0, float("nan")]}
    assert planner.rank(odd)[1] == ["a", "b", "c"]


def test_the_steady_scenario_is_the_declared_population_at_every_timestep() -> None:
    s = planner.scenario(planner.STEADY, 40, 12, 300)
    assert s.shape == (40, 12) and (s.sum(axis=1) == 300).all()
    assert planner.SCENARIOS[-1] == planner.STEADY  # last: the families keep their seeds
    assert (planner.scenario(planner.STEADY, 5, 1, 7) == 7).all()


def test_each_run_on_its_own_draw_of_a_family_scores_as_the_draws_alone() -> None:
    """``release.planner.realisations``: each synthetic family is drawn that many times (scenario seeds
    13, 14, …), each draw simulated once with its own noise seed. A candidate's score is the mean of
    its errors on the draws, each exactly what that draw alone (with the same noise seed) gives; the
    zero release's is the mean of the draws' too. One draw is the plan before (seed 13)."""
    s = _settings(decision="fixed", epsilon=0.5, w=4, bins=3, population=300)
    draws = [planner.scenario("sudden", 40, 3, 300, planner.SCENARIO_SEED + r) for r in range(2)]
    assert not np.array_equal(draws[0], draws[1])
    both, _ = planner.simulate(s, [draws], 2, 50)
    alone = [planner.simulate(s, [d], 1, 50 + r)[0] for r, d in enumerate(draws)]
    assert set(both) == set(alone[0])
    for name, (mae,) in both.items():
        assert mae == pytest.approx(np.mean([a[name][0] for a in alone]), rel=1e-12), name
    with pytest.raises(ValueError, match="one per run"):
        planner.simulate(s, [draws], 3, 50)

    cfg = _config(population=300, bins=3)
    cfg["release"]["planner"]["realisations"] = 3
    p = plan(Settings(**cfg).validate_all())
    zeros = [[np.abs(planner.scenario(f, 30, 3, 300, planner.SCENARIO_SEED + r)).mean() for r in range(3)]
             for f in planner.SCENARIOS]
    assert list(p.zero_mae) == pytest.approx([np.mean(z) for z in zeros], rel=1e-12)
    assert p.facts["realisations"] == 3 and "3 draw(s) of each" in p.reasons[0]
    one = plan(_settings(population=300, bins=3))  # realisations 1: seed 13 alone, as before
    assert list(one.zero_mae) == pytest.approx([z[0] for z in zeros], rel=1e-12)
