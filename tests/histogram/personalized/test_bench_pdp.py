"""benchmarks/bench_pdp.py reproduces thesis §5.3's count task: settings, both answer modes, summaries."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from histogram.noise import Randomness
from histogram.personalized import BudgetLevels, minimum, privacy_aware, sampling
from histogram.query import answer_range_queries, random_range_queries
from tests.bench_loader import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_pdp")


def test_small_run_reports_every_setting_and_partitioning_beats_minimum(bench):
    report = bench.run(
        records=4_000,
        runs=1,
        queries=60,
        seed=3,
        datasets=("us", "flights"),
        kinds=("normal",),
    )
    json.dumps(report)  # serialisable
    assert set(report["results"]) == {
        f"{a}/{d}/{k}"
        for a in ("query", "histogram")
        for d in ("us", "flights")
        for k in ("normal",)
    }
    for key, setting in report["results"].items():
        mechs = setting["mechanisms"]
        assert {
            "minimum",
            "threshold@mean",
            "privacy-aware",
            "utility-based",
            "planned-sampling",
        } <= set(mechs)
        assert setting["min"] <= mechs["planned-sampling"]["threshold"] <= setting["max"]
        thresholds = sorted(m["threshold"] for n, m in mechs.items() if n.startswith("sampling@"))
        assert thresholds[0] == setting["min"] and thresholds[-1] == setting["max"]
        assert any(abs(t - setting["mean"]) < 1e-3 for t in thresholds), key
        assert all(math.isfinite(m["rfe"]) and m["rfe"] > 0 for m in mechs.values())
        if setting["budgets"] == "normal":
            # a tenth of the mean budget for everyone (Minimum) against groups at their own minimum
            assert mechs["utility-based"]["rfe"] < mechs["minimum"]["rfe"] / 3, key
        summary = bench.summary(setting)
        assert summary["sampling_best"] <= summary["sampling_at_mean"]
    table = bench.markdown(report)
    assert "| query | us | normal |" in table and "| histogram | flights | normal |" in table


def test_normal_budgets_are_the_truncated_normal_not_the_clipped_one(bench):
    """The thesis's N(0.1, 1) on [0.01, 1] has mean "around 0.5" (§5.3.2.2): a truncated normal (0.47).

    Clipping (the earlier setting) piles 46 % of people on 0.01 and 18 % on 1.0, mean 0.36.
    """
    rng = np.random.default_rng(0)
    x = bench.budgets("normal", 200_000, rng) / bench.GRID
    assert x.min() >= 0.01 and x.max() <= 1.0
    assert abs(x.mean() - 0.473) < 0.005
    assert np.mean(x == 0.01) < 0.01 and np.mean(x == 1.0) < 0.01
    clipped = bench.budgets("normal-clipped", 200_000, rng) / bench.GRID
    assert (
        abs(np.mean(clipped == 0.01) - 0.46) < 0.01
    )  # the old setting stays available, and differs


def _setting(bench, n, eps_levels, shares, seed=5):
    rng = np.random.default_rng(seed)
    bins, shape = bench.population("us", n, rng)
    level_of = rng.choice(len(eps_levels), size=n, p=shares)
    counts = np.bincount(level_of, minlength=len(eps_levels))
    levels = BudgetLevels(tuple(Fraction(e) for e in eps_levels), tuple(int(c) for c in counts))
    queries = random_range_queries(shape, 400, rng)
    exact = answer_range_queries(np.bincount(bins, minlength=int(np.prod(shape))), shape, queries)
    return bins, shape, level_of, levels, queries, exact


def test_per_query_answers_are_exact_when_the_noise_vanishes(bench):
    """Huge budgets: the plan, coins, scaling and weights alone must give the exact answers.

    Three groups weighted by head count sum to the population's count exactly;
    utility weights would not (each group then stands for the whole population).
    """
    bins, shape, level_of, levels, queries, exact = _setting(
        bench, 3_000, (60, 70, 80), (0.3, 0.3, 0.4)
    )
    groups = privacy_aware(levels, min_size=500)
    assert len(groups.parts) == 3
    for mech in (minimum(levels), sampling(levels, Fraction(60)), groups):
        drawer = Randomness.seeded(1).drawer("exact", 0)
        got = bench.answer_per_query(mech, bins, level_of, shape, queries, drawer)
        assert np.allclose(got, exact), mech.name


def test_per_query_noise_is_one_draw_per_query_at_the_parts_epsilon(bench):
    """Minimum at ε = 1/2: each answer's error is one discrete Laplace draw, variance 2a/(1−a)², a = e^{−1/2}.

    Noise put on the bins and summed over a query's bins (the histogram answer)
    would have a variance about ``mean bins per query`` times larger.
    """
    bins, shape, level_of, levels, queries, exact = _setting(
        bench, 2_000, (Fraction(1, 2),), (1.0,)
    )
    mech = minimum(levels)
    errors = np.concatenate(
        [
            bench.answer_per_query(
                mech, bins, level_of, shape, queries, Randomness.seeded(2).drawer("v", r)
            )
            - exact
            for r in range(10)
        ]
    )
    a = math.exp(-0.5)
    assert abs(errors.var() / (2 * a / (1 - a) ** 2) - 1) < 0.15
    assert abs(errors.mean()) < 0.3


def test_planned_threshold_moves_down_when_leaving_people_out_costs_more_than_noise(bench):
    """Noise summed over many bins: the largest budget; one draw per query: a threshold below it."""
    levels = BudgetLevels(
        (Fraction(1, 100), Fraction(1, 20), Fraction(1, 10)), (20_000, 50_000, 30_000)
    )
    assert bench.planned_threshold(levels, 0.05, query_bins=1000.0) == Fraction(1, 10)
    low = bench.planned_threshold(levels, 0.05, query_bins=1.0)
    assert Fraction(1, 100) < low < Fraction(1, 10)
    assert sampling(levels, low).query_variance(0.05) < sampling(
        levels, Fraction(1, 10)
    ).query_variance(0.05)
