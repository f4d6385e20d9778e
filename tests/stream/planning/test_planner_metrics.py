"""The planner scores its candidates through the one error-metrics module (issue 29: "one metrics
module"): :class:`histogram.accuracy.RunErrors`, the figures the lab reports, not a sum of its own.

The pinned plan below was computed by the planner before it scored through ``RunErrors`` (its own
``|R − H|`` sum); the move keeps every figure bit for bit (the same sums in the same order)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

import histogram.accuracy as accuracy
from controller.runs import step_run
from histogram.accuracy import RunErrors, Workload, stream_errors
from histogram.noise import Randomness
from histogram.postprocess import PostProcessor, postprocess
from stream.lab.evaluate import reference_rows
from stream.lab.metrics import build_workload
from stream.planning import planner
from tests.stream.planning.test_planner import _counts_file, _settings

ROOT = Path(__file__).resolve().parents[3]

#: ``plan(_settings())`` (w-event ε = 1, w = 5, 4 bins, population 200, 30 timesteps, 1 run) as the
#: planner with its own MAE sum computed it: the ranking of all 40 candidates, the zero release's
#: error on each scenario and the per-scenario MAE of one candidate of each scoring path. The
#: ``model`` filter's figures (and so the order and the scores, ratios to each scenario's best) were
#: re-pinned when its bank gained the fast filters and the change detector its pre-run reference
#: (issue 30), the order and the scores again when ``model-trend`` became a candidate (the best on
#: some scenarios), and again when the ``steady`` scenario came seventh and the order became minimax
#: regret (issue 30): the six families' figures did not move (``steady`` runs last, so their seeds
#: are the same); every other candidate's MAE on them is the pre-move figure.
PINNED_ORDER = ["uniform+model", "uniform+kalman", "adapub+nonnegative", "uniform+nonnegative", "uniform", "fixed+model",
    "fixed+kalman", "fixed+nonnegative", "fixed", "dsft+kalman", "dsat+kalman", "adapub", "dsat+nonnegative",
    "dsft+nonnegative", "pegasus+nonnegative", "dsat", "sample+nonnegative", "sample+kalman", "dsft",
    "ba+kalman", "sample", "pegasus", "sample+model", "bd+kalman", "fast+nonnegative", "fast", "ba+nonnegative",
    "ba", "dsat(noise_floor)+kalman", "dsft(noise_floor)+kalman", "dsat(noise_floor)+nonnegative",
    "dsft(noise_floor)+nonnegative", "dsat(noise_floor)", "dsft(noise_floor)", "bd+nonnegative", "bd",
    "rescuedp+nonnegative", "rescuedp", "adapub+kalman", "rescuedp+kalman"]
CHOICE = "uniform+model-trend"
PINNED_ZERO = [12.433333333333334, 19.941666666666666, 17.675, 25.166666666666668, 30.041666666666668, 13.75]
#: the ``steady`` scenario (the seventh): 200 people at every timestep over 4 bins
PINNED_STEADY_ZERO = 50.0
PINNED_MAE = {
    "dsat": [5.191666666666666, 5.683333333333334, 7.075, 7.316666666666666, 5.525, 5.891666666666667],
    "dsat+nonnegative": [4.016666666666667, 4.541666666666667, 7.041666666666667, 6.866666666666666, 5.525,
                         4.891666666666667],
    "dsat+kalman": [3.825815057497599, 4.49740523372919, 7.203362721316167, 6.84304037209572, 5.110736563391849,
                    4.52451137898546],
    "uniform+model": [3.2898712859522234, 4.60603902291874, 4.473380470907753,
                      4.27486247226804, 4.207777085902672, 2.8235729815860506],
    "fixed": [4.15, 3.908333333333333, 7.175, 4.666666666666667, 4.325, 4.1],
    "pegasus+nonnegative": [4.775, 6.808333333333334, 7.008333333333334, 6.133333333333334, 4.158333333333333,
                            3.533333333333333],
}
PINNED_STEADY_MAE = {"dsat": 6.091666666666667, "dsat+nonnegative": 6.091666666666667,
                     "dsat+kalman": 5.396127114813386, "uniform+model": 4.561695697519836, "fixed": 5.45,
                     "pegasus+nonnegative": 5.408333333333333}
PINNED_SCORES = {"uniform+model": 1.1104772162335648, "fixed+kalman": 1.2492351416786565, "dsat": 1.6947732670133635}


def test_the_planner_scores_through_the_one_metrics_module_and_sums_no_error_itself() -> None:
    """The planner imports the metrics from ``histogram.accuracy`` (which ``dpstream run`` can load
    without ``stream.lab``), computes no ``|R − H|`` of its own, and the lab's module keeps no copy
    or re-export of them."""
    import stream.lab.metrics as lab_metrics

    assert planner.RunErrors is accuracy.RunErrors and planner.Workload is accuracy.Workload
    moved = {"RunErrors", "Workload", "QueryIndex", "stream_errors"}
    assert not moved & set(lab_metrics.__all__)
    assert not [n for n in moved if getattr(getattr(lab_metrics, n, None), "__module__", "") == lab_metrics.__name__]
    for path in sorted((ROOT / "stream" / "planning").glob("*.py")):
        tree = ast.parse(path.read_text())
        calls = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and (getattr(node.func, "attr", None) in ("abs", "absolute")
                      or getattr(node.func, "id", None) == "abs")]
        assert not calls, f"{path.relative_to(ROOT)} computes an error of its own at lines {calls}"


def test_the_plan_is_what_the_planner_gave_with_its_own_sum() -> None:
    planner._CACHE.clear()
    p = planner.plan(_settings())
    assert p.scenarios == planner.SCENARIOS
    order = planner.rank(p.mae, zero=p.zero_mae, guard_on=[p.scenarios.index(planner.STEADY)])[1]
    # adaptive-sample's candidates and the model-trend ones came later (issue 30): the others keep
    # their pinned order
    later = [n for n in order if n.startswith("adaptive-sample") or n.endswith("+model-trend")]
    assert [n for n in order if n not in later] == PINNED_ORDER
    floored = [n for n in later if n.startswith("adaptive-sample(min_per_window=")]  # its floor at its start
    assert sorted(n for n in later if n not in floored) == [
        "adaptive-sample", "adaptive-sample+kalman", "adaptive-sample+model", "adaptive-sample+model-trend",
        "adaptive-sample+nonnegative", "fixed+model-trend", "sample+model-trend", "uniform+model-trend"]
    assert len(floored) in (0, 5)  # none where Adaptive Sample starts at w releases per window
    assert p.choice.name == p.lab_choice.name == CHOICE
    assert list(p.zero_mae) == [*PINNED_ZERO, PINNED_STEADY_ZERO]
    assert {n: list(p.mae[n]) for n in PINNED_MAE} == {n: [*v, PINNED_STEADY_MAE[n]] for n, v in PINNED_MAE.items()}
    assert {n: p.scores[n] for n in PINNED_SCORES} == PINNED_SCORES
    planner._CACHE.clear()


def _replayed(settings, truth: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """What ``_simulate`` publishes, re-derived from the engine's releases: ``(T, B)`` per chain."""
    timesteps, bins = truth.shape
    noise = Randomness.seeded(seed)
    kalman = PostProcessor.for_stream("nonnegative+kalman", population=settings.privacy.population, bins=bins)
    state = kalman.initial()
    out = {p: np.zeros((timesteps, bins)) for p in ("none", "nonnegative", "kalman")}
    last = {p: np.zeros(bins) for p in out}
    for t, release, _ in step_run(settings.engine(), truth, lambda t: noise.drawer("planner", t, "release")):
        if release.source_timestep is not None:
            last["none"] = release.counts.astype(np.float64)
            last["nonnegative"] = postprocess("nonnegative", release.counts).astype(np.float64)
            got, state = kalman.apply(state, release.counts, release.half_width, release.confidence,
                                      release.kind == "fresh")
            last["kalman"] = np.asarray(got.counts, dtype=np.float64)
        for p in out:
            out[p][t] = last[p]
    return out


def test_a_candidates_score_is_run_errors_mae_on_the_same_releases() -> None:
    """Each simulated candidate's error is exactly ``RunErrors``' (and the lab's ``stream_errors``')
    MAE of the releases the engine published, for every scoring path: as published,
    ``nonnegative``, ``+kalman`` and ``+model``; and the zero release's is the lab's reference row."""
    truth = planner.scenario("sine", 40, 5, 300)
    workload = Workload.build(truth, (5,))
    base = _settings(decision="fixed", epsilon=0.5, w=4, bins=5, population=300)
    for decision in ("dsat", "fixed", "pegasus"):
        s = base.with_changes({"release": {"decision": decision}})
        posts = ("none", "nonnegative") if decision == "pegasus" else ("none", "nonnegative", "kalman")
        scored, trace = planner._simulate(s, truth, 11, posts)
        published = _replayed(s, truth, 11)
        for p in posts:
            acc = RunErrors(workload)
            for t in range(truth.shape[0]):
                acc.add(t, published[p][t])
            assert scored[p] == acc.metrics()[0]["mae"] == stream_errors(workload, published[p])[0]["mae"], \
                (decision, p)
    # the model filter over the fixed schedule's releases
    _, trace = planner._simulate(base, truth, 11, ("none",))
    model = PostProcessor.for_stream("model+nonnegative", population=300, bins=5)
    state, acc = model.initial(), RunErrors(workload)
    for t in range(truth.shape[0]):
        out = np.zeros(5)
        if trace.has[t]:
            got, state = model.apply(state, trace.counts[t], trace.widths[t], trace.confidence, bool(trace.fresh[t]))
            out = np.asarray(got.counts, dtype=np.float64)
        acc.add(t, out)
    assert planner._chain_errors(base, planner.MODEL_CHAIN, [truth], [trace]) == [acc.metrics()[0]["mae"]]


def test_the_zero_release_is_the_labs_reference_row(tmp_path) -> None:
    history = planner.scenario("trend", 30, 4, 200)
    planner._CACHE.clear()
    p = planner.plan(_settings(history=_counts_file(tmp_path / "h.csv", history)))
    planner._CACHE.clear()
    lab = reference_rows(build_workload(history, (4,), queries=0, seed=0))["zero-release"]["mae"]
    assert p.zero_mae == (lab,)


def test_a_delayed_chain_is_scored_as_the_fixed_lag_smoother_publishes_it() -> None:
    """With ``release.delay`` k a candidate's score is the MAE of what the service publishes for each
    timestep: the smoother's value k timesteps later, the last k from the stream's end (a reference
    loop, run by run, here); delay 0 is the undelayed score; the online re-plan passes the delay."""
    from stream.planning.online import Replanner

    truth = planner.scenario("sudden", 40, 5, 300)
    workload = Workload.build(truth, (5,))
    base = _settings(decision="fixed", epsilon=0.5, w=4, bins=5, population=300)
    traces = [planner._simulate(base, truth, seed, ("none",))[1] for seed in (11, 12)]
    undelayed = planner._chain_errors(base, planner.MODEL_CHAIN, [truth, truth], traces)
    assert planner._chain_errors(base, planner.MODEL_CHAIN, [truth, truth], traces, delay=0) == undelayed
    for k in (1, 3):
        want = []
        for tr in traces:
            model = PostProcessor.for_stream(planner.MODEL_CHAIN, population=300, bins=5, delay=k)
            state, out = model.initial(), np.zeros(truth.shape)
            start = int(np.argmax(tr.has))
            for t in range(start, truth.shape[0]):
                got, state = model.apply(state, tr.counts[t], tr.widths[t], tr.confidence, bool(tr.fresh[t]))
                if t - k >= start:
                    out[t - k] = got.counts
            tail = model.pending(state, (5,))
            for j in range(k):
                out[truth.shape[0] - k + j] = tail[j]
            want.append(stream_errors(workload, out)[0]["mae"])
        got = planner._chain_errors(base, planner.MODEL_CHAIN, [truth, truth], traces, delay=k)
        assert got == want, k
        assert got != undelayed
    delayed = base.with_changes({"release": {"postprocess": "model+nonnegative", "delay": 2}})
    assert Replanner(delayed, ("fixed",)).delay == 2 and Replanner(base, ("fixed",)).delay == 0
