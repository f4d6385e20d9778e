"""benchmarks/bench_engine.py (issue 29's engine-speed targets) on tiny sizes: every decision method
the service runs is timed, the noise alone is timed at the scales the step drew at (not a fixed
scale), the targets are issue 29's, and ``--root`` pairs checkouts in subprocesses."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from controller.method import METHODS, W_EVENT_METHODS
from histogram.noise import Randomness
from histogram.testing import RecordingDrawer
from tests.bench_loader import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_engine")


def _run(bench, capsys, *argv: str) -> dict:
    assert bench.main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_every_method_the_service_runs_is_timed_with_its_noise(bench, capsys) -> None:
    """All user-level and w-event methods of controller/method.py, each with the step, the fresh
    step and the noise alone; the histogram-build part stays; the targets are 2 ms and 150 ms."""
    expected = {f"user:{m}" for m in METHODS if m not in W_EVENT_METHODS} | {f"w:{m}" for m in METHODS}
    assert set(bench.CASES) == expected
    out = _run(bench, capsys, "--records", "500", "--repeats", "2", "--bins", "64", "--large-methods", "none")
    rows = out["steps"]["64"]
    assert set(rows) == expected
    for case, r in rows.items():
        assert r["timed_steps"] >= 2 and 0 < r["fresh_fraction"] <= 1, case
        assert r["fresh_step_ms"] > 0 and r["noise_ms"] > 0 and r["step_ms"] > 0, case
    assert out["histogram_build"]["records"] == 500 and out["histogram_build"]["records_per_s_codes"] > 0
    assert out["targets"]["step_ms"] == {"10000": 2.0, "1000000": 150.0}
    assert out["within_target"] == {}  # 64 bins has no target


def test_the_targets_are_judged_on_the_fresh_step(bench) -> None:
    rows = {"w:a": {"fresh_step_ms": 1.5}, "w:b": {"fresh_step_ms": 2.5}, "w:c": {"fresh_step_ms": None}}
    assert bench.within_target({"10000": rows, "64": rows}) == {
        "10000": {"target_ms": 2.0, "met": ["w:a"], "missed": ["w:b", "w:c"]}}


@pytest.mark.parametrize("case", ["user:dsat", "w:uniform", "w:pegasus", "w:rescuedp"])
def test_the_noise_alone_is_drawn_at_the_steps_scales_and_sizes(bench, case) -> None:
    """The replay makes exactly the step's draws (kind, scale, size): for LPA the release's
    ``Δ/ε``, not a fixed scale (the bench used to time the noise at scale 10 whatever the step drew)."""
    from controller.method import build_engine
    from histogram.lpa import LaplaceMechanism

    bins = 50
    mechanism = LaplaceMechanism()
    engine = build_engine(bench._spec(case, bins), mechanism, bins)
    hists = bench._stream(bins)
    rnd = Randomness.seeded(3)
    state = engine.initial_state()
    fresh = 0
    for t in range(6):
        step = RecordingDrawer(rnd.drawer("s", t))
        release, state, seconds, calls = bench.timed_step(engine, state, hists[t % len(hists)], lambda d=step: d)
        alone = RecordingDrawer(rnd.drawer("n", t))
        assert bench.timed_replay(lambda d=alone: d, calls) >= 0 and seconds > 0
        assert [(d.kind, d.scale, d.size) for d in alone.tape] == [(d.kind, d.scale, d.size) for d in step.tape]
        if release.kind == "fresh" and release.timestep == t:
            fresh += 1
            sized = [d for d in step.tape if d.kind == "discrete_laplace" and d.size is not None]
            assert sized, case
            assert Fraction(sized[-1].scale) == mechanism.scale(release.epsilon_release), case
    assert fresh, f"{case} released nothing fresh in 6 steps"


def test_unknown_methods_are_refused_with_the_choices(bench) -> None:
    with pytest.raises(SystemExit, match="unknown method 'w:nope'.*user:dsat"):
        bench.parse_cases("w:nope")
    assert bench.parse_cases("fixed") == ("user:fixed", "w:fixed")
    assert bench.parse_cases("all") == bench.CASES


def test_root_pairs_checkouts_in_subprocesses(bench, capsys) -> None:
    """``--root A --root B``: each root's medians and the per-round ratio A / B, per figure."""
    out = _run(bench, capsys, "--root", str(ROOT), "--root", str(ROOT), "--pairs", "1", "--repeats", "1",
               "--bins", "32", "--methods", "user:dsat,w:fast", "--large-methods", "none")
    assert [r["root"] for r in out["roots"]] == [str(ROOT), str(ROOT)]
    keys = {f"32.{c}.{k}" for c in ("user:dsat", "w:fast") for k in ("step_ms", "fresh_step_ms", "noise_ms")}
    for r in out["roots"]:
        assert set(r["medians"]) == keys and all(v > 0 for v in r["medians"].values())
    assert set(out["first_over_second"]) == keys and all(np.isfinite(v) for v in out["first_over_second"].values())
