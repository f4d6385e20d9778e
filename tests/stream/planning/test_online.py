"""``release.planner.online`` through the configuration and the one engine builder (issue 30 item 4):
before any release the stream runs today's public plan; re-plans read releases only; the choice and
the history it needs are in the engine snapshot (restart mid-stream = the same bytes)."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from controller.online import OnlinePolicy
from histogram.noise import Randomness
from stream.config import ConfigError, Settings
from stream.planning import online as online_mod
from tests.controller.test_online_policy import window_violations


def _config(*, unit: str = "w-event", decision: str = "uniform", every: int = 8, min_releases: int = 2,
            online: bool = True, postprocess: str = "none") -> dict:
    privacy = ({"unit": "w-event", "epsilon": 1, "w": 4, "cutoff": 2, "population": 200} if unit == "w-event"
               else {"unit": "user-level", "epsilon": 1, "horizon": 40, "cutoff": 4, "population": 200})
    planner = {"timesteps": 16, "runs": 1, "realisations": 1, **({"online": {"every": every, "min_releases": min_releases}}
                                              if online else {})}
    return {
        "stream": {"id": "t", "timestep": "1h", "start": "2024-01-01T00:00:00Z"},
        "schema": {"user_id": "uid", "event_time": "ts",
                   "attributes": [{"name": "a", "kind": "categorical", "values": ["x", "y", "z"]}]},
        "privacy": privacy,
        "release": {"decision": decision, "postprocess": postprocess, "planner": planner},
    }


def _settings(**kw) -> Settings:
    return Settings(**_config(**kw)).validate_all()


def _truth(t: int = 48) -> np.ndarray:
    rng = np.random.default_rng(4)
    level = np.where(np.arange(t) < t // 2, 60, 5 + 150 * ((np.arange(t) // 3) % 2))
    return np.maximum(0, level[:, None] + rng.integers(-3, 4, size=(t, 3))).astype(np.int64)


def _steps(engine, state, truth, start: int, stop: int):
    noise = Randomness.seeded(11)
    out = []
    for t in range(start, stop):
        release, state = engine.step(state, truth[t], noise.drawer("t", t, "release"))
        out.append(release)
    return out, state


def test_online_wraps_the_configured_method_and_starts_with_it() -> None:
    s = _settings()
    policy = s.engine().policy
    assert isinstance(policy, OnlinePolicy)
    assert policy.labels[policy.start] == "uniform"
    assert {"uniform", "fixed", "sample", "dsat", "dsat(noise_floor)"} <= set(policy.labels)
    # before any re-plan (t < every) the stream is exactly the plain method's
    plain = _settings(online=False).engine()
    a, _ = _steps(s.engine(), s.engine().initial_state(), _truth(), 0, 8)
    b, _ = _steps(plain, plain.initial_state(), _truth(), 0, 8)
    assert [r.counts.tolist() for r in a] == [r.counts.tolist() for r in b]


def test_online_switches_on_a_regime_change_and_keeps_every_window() -> None:
    s = _settings()
    engine = s.engine()
    releases, state = _steps(engine, engine.initial_state(), _truth(), 0, 48)
    assert state.policy.switches, "the re-plan never switched on a stream whose regime changes"
    assert window_violations(releases, Fraction(1), 4) == []


def test_restart_mid_stream_gives_the_same_bytes() -> None:
    s = _settings()
    truth = _truth()
    engine = s.engine()
    whole, end = _steps(engine, engine.initial_state(), truth, 0, 48)
    for cut in (9, 17, 30):
        first, mid = _steps(engine, engine.initial_state(), truth, 0, cut)
        restored = _settings().engine()  # a new process: a new engine from the same configuration
        snap = json.dumps(engine.snapshot(mid), sort_keys=True)
        state = restored.restore(json.loads(snap))
        assert json.dumps(restored.snapshot(state), sort_keys=True) == snap
        rest, end2 = _steps(restored, state, truth, cut, 48)
        assert [r.counts.tobytes() for r in first + rest] == [r.counts.tobytes() for r in whole]
        assert json.dumps(restored.snapshot(end2), sort_keys=True) == json.dumps(engine.snapshot(end), sort_keys=True)
    assert end.policy.switches  # the restart crossed switches


def test_the_snapshot_carries_the_choice_and_the_history() -> None:
    s = _settings()
    engine = s.engine()
    _, state = _steps(engine, engine.initial_state(), _truth(), 0, 30)
    snap = engine.snapshot(state)["policy"]
    assert snap["choice"] == state.policy.choice and snap["switches"]
    assert snap["releases"] and snap["seen_fresh"] == state.fresh_count


def test_online_is_public_configuration_in_the_fingerprint() -> None:
    assert _settings().fingerprint() != _settings(online=False).fingerprint()
    assert _settings(every=8).fingerprint() != _settings(every=9).fingerprint()


def test_online_refuses_user_level_with_what_to_do() -> None:
    with pytest.raises(ConfigError, match="w-event"):
        _settings(unit="user-level", decision="dsat")


@pytest.mark.parametrize("chain", ["nonnegative+kalman", "model+nonnegative", "model-perbin", "ewma"])
def test_smoothing_chains_exclude_self_smoothing_candidates(chain) -> None:
    """Every smoother (the configuration refuses each after FAST and PeGaSus), the model filters too:
    a model chain used to keep them as candidates, and the first re-plan failed building them."""
    labels = _settings(postprocess=chain).engine().policy.labels
    assert "fast" not in labels and "pegasus" not in labels
    assert "fast" in _settings(postprocess="nonnegative").engine().policy.labels


def _chain_mae(settings, chain: str, truth: np.ndarray, seed: int) -> float:
    """One seeded candidate run on ``truth`` published through ``chain`` release by release, as the
    service would (the same seeds and drawers as the planner's simulation), scored by RunErrors."""
    from controller.runs import step_run
    from histogram.accuracy import RunErrors, Workload
    from histogram.postprocess import PostProcessor

    bins = truth.shape[1]
    post = PostProcessor.for_stream(chain, population=settings.privacy.population, bins=bins)
    state, acc, noise = post.initial(), RunErrors(Workload.build(truth, (bins,))), Randomness.seeded(seed)
    out = np.zeros(bins)
    for t, release, _ in step_run(settings.engine(), truth, lambda t: noise.drawer("planner", t, "release")):
        if release.source_timestep is not None:
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                got, state = post.apply(state, release.counts, np.broadcast_to(release.half_width, (bins,)),
                                        release.confidence, release.kind == "fresh")
            out = np.asarray(got.counts, dtype=np.float64)
        acc.add(t, out)
    return acc.metrics()[0]["mae"]


@pytest.mark.parametrize("chain", ["model+nonnegative", "kalman+nonnegative", "nonnegative+ewma", "integer"])
def test_the_replan_scores_each_candidate_with_the_configured_chain_itself(chain) -> None:
    """Issue 30 item 4: ``model+nonnegative`` was scored as plain ``nonnegative`` (and
    ``kalman+nonnegative`` as ``nonnegative+kalman``, ``ewma``/``integer`` as ``none``); each
    candidate's score is now its error through the configured chain, release by release."""
    s = _settings(postprocess=chain)
    labels = s.engine().policy.labels
    series, eps = _truth(16).astype(float), (Fraction(1, 2),) * 16
    replan = online_mod.replanner(s, labels)
    scores = replan.scores(series, eps)
    truth = online_mod.scenario_of(series, eps)
    expected = []
    for label in labels:
        cand = replan._candidate(label)
        mae = _chain_mae(cand, chain, truth, online_mod.NOISE_SEED)  # runs: 1
        expected.append(mae if np.isfinite(mae) else np.inf)
    assert scores == pytest.approx(tuple(expected), rel=1e-12)
    if chain == "model+nonnegative":  # not the nonnegative figures it used to score
        plain = [_chain_mae(replan._candidate(label), "nonnegative", truth, online_mod.NOISE_SEED) for label in labels]
        assert all(abs(a - b) > 1e-9 for a, b in zip(scores, plain, strict=True))


def test_a_model_chain_replan_runs_the_model_filter(monkeypatch) -> None:
    """Through the policy's own call: a re-plan under ``model+nonnegative`` builds that chain to score
    the candidates (before: it never ran the filter, and failed building PeGaSus with a model)."""
    from histogram.postprocess import PostProcessor

    built: list[str] = []
    real = PostProcessor.for_stream.__func__

    def spy(cls, chain, **kw):  # type: ignore[no-untyped-def]
        built.append(chain)
        return real(cls, chain, **kw)

    s = _settings(postprocess="model+nonnegative")
    labels = s.engine().policy.labels
    monkeypatch.setattr(PostProcessor, "for_stream", classmethod(spy))
    choice = online_mod.replanner(s, labels)(_truth(16).astype(float), (Fraction(1, 2),) * 16, 0)
    assert 0 <= choice < len(labels)
    assert built and set(built) == {"model+nonnegative"}


def test_replan_reads_only_what_it_is_given(monkeypatch) -> None:
    """The stream's re-plan is a deterministic function of the released series it is handed."""
    s = _settings()
    labels = s.engine().policy.labels
    series = _truth(16).astype(float)
    first = online_mod.replanner(s, labels)(series, (Fraction(1, 2),) * 16, 0)
    again = online_mod.replanner(s, labels)(series.copy(), (Fraction(1, 2),) * 16, 0)
    assert first == again and 0 <= first < len(labels)


def test_the_scenario_weights_rows_by_their_declared_noise() -> None:
    """A row released at a large ε (small noise) dominates its neighbours released at a small ε."""
    series = np.array([[0.0], [100.0], [0.0]])
    precise = online_mod.scenario_of(series, (Fraction(1, 10), Fraction(10), Fraction(1, 10)))
    even = online_mod.scenario_of(series, (Fraction(1),) * 3)
    assert precise[1, 0] == 100 and even[1, 0] == 33


def test_evaluate_steps_the_online_engine_not_the_fast_paths() -> None:
    """``dpstream evaluate`` runs the re-planned stream (its fast paths would run the start method only)."""
    from stream.lab.evaluate import evaluate

    s = _settings()
    res = evaluate(s, _truth(), ["uniform"], runs=1, queries=0, progress=False)["methods"]["uniform"]
    engine = s.engine()
    releases, state = _steps(engine, engine.initial_state(), _truth(), 0, 48)
    assert state.policy.switches
    assert res["fresh_releases"] < 48  # uniform alone publishes at every timestep
    assert res["max_window_spend"] <= 1


def test_check_config_says_what_online_may_switch_to() -> None:
    from stream.commands.check_config import planner_lines

    lines = planner_lines(_settings())
    assert any("online re-planning" in x and "starts with uniform" in x and "every 8 timesteps" in x for x in lines)
    assert not any("online" in x for x in planner_lines(_settings(online=False)))
