"""The five PDP mechanisms: plans from public levels only, exact per-person charges, noise scales, estimates."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from histogram.errors import MechanismError
from histogram.noise import Randomness
from histogram.personalized import (
    BudgetLevels,
    BudgetPartition,
    CountUtility,
    Part,
    PersonalizedMechanism,
    minimum,
    privacy_aware,
    sampling,
    threshold,
    utility_based,
)
from histogram.personalized.partition import privacy_aware_partition, utility_based_partition, waste
from histogram.testing import RecordingDrawer

F = Fraction
TIERS = BudgetLevels((F(1, 100), F(1, 20), F(1, 10)), (2000, 5000, 3000))


def all_mechanisms(levels=TIERS):
    util = CountUtility(query_bins=1, sampling_variance=0.1)
    return [
        minimum(levels),
        threshold(levels, F(1, 20)),
        sampling(levels, F(1, 20)),
        privacy_aware(levels, min_size=1000, utility=util),
        utility_based(levels, util, min_size=1000),
    ]


def population(levels, n_bins=8, seed=0):
    rng = np.random.default_rng(seed)
    budgets = np.repeat(np.arange(levels.size), levels.counts)
    return rng.integers(0, n_bins, budgets.size), budgets


@pytest.mark.parametrize("mech", all_mechanisms(), ids=lambda m: m.name)
def test_nobody_is_charged_more_than_their_budget(mech):
    for own, charged in zip(TIERS.epsilons, mech.personal_epsilon, strict=True):
        assert isinstance(charged, Fraction) and 0 <= charged <= own


def test_the_charges_are_the_ones_each_mechanism_promises():
    m, t, s, pa, ub = all_mechanisms()
    assert m.personal_epsilon == (F(1, 100),) * 3
    assert t.personal_epsilon == (0, F(1, 20), F(1, 20))
    assert s.personal_epsilon == (F(1, 100), F(1, 20), F(1, 20))  # ln(1 + p(e^t − 1)) = ε_i below t
    for mech in (pa, ub):
        for part in mech.parts:
            assert part.epsilon == min(TIERS.epsilons[i] for i in part.levels)
            assert all(mech.personal_epsilon[i] == part.epsilon for i in part.levels)


@pytest.mark.parametrize("mech", all_mechanisms(), ids=lambda m: m.name)
def test_each_part_is_noised_at_exactly_its_epsilon(mech):
    bins, budgets = population(TIERS)
    drawer = RecordingDrawer(Randomness.seeded(5).drawer("pdp", 0))
    out = mech.release(bins, budgets, 8, drawer)
    scales = [d.scale for d in drawer.tape if d.kind == "discrete_laplace"]
    assert scales == [1 / p.epsilon for p in mech.parts]
    assert [r.epsilon for r in out.parts] == [p.epsilon for p in mech.parts]
    kinds = {d.kind for d in drawer.tape}
    assert ("bernoulli_exp" in kinds) == (mech.name == "sampling")
    assert out.personal_epsilon == mech.personal_epsilon


@pytest.mark.parametrize("mech", all_mechanisms(), ids=lambda m: m.name)
def test_estimates_track_the_truth(mech):
    bins, budgets = population(TIERS)
    truth = np.bincount(bins, minlength=8)
    errs = [
        np.abs(
            mech.release(bins, budgets, 8, Randomness.seeded(r).drawer("pdp", 0)).estimate - truth
        ).mean()
        for r in range(20)
    ]
    # noise of scale ≤ 100 per bin, and at most ~a few hundred from rescaling: far below the count (~1250)
    assert np.mean(errs) < 400


def test_threshold_leaves_out_persons_below_it():
    bins, budgets = population(TIERS)
    out = threshold(TIERS, F(1, 20)).release(
        bins, budgets, 8, RecordingDrawer(Randomness.seeded(1).drawer("p", 0))
    )
    kept = np.bincount(bins[budgets >= 1], minlength=8)
    assert (
        np.abs(out.parts[0].counts - kept).max() < 400
    )  # noise scale 20: the dropped tier is not in the count


def test_constructor_refuses_a_part_released_above_a_members_budget():
    with pytest.raises(MechanismError, match="> their budget"):
        PersonalizedMechanism("bad", TIERS, (Part((0, 1, 2), F(1, 20)),), (1.0,))
    with pytest.raises(MechanismError, match="two parts"):
        PersonalizedMechanism(
            "bad", TIERS, (Part((0,), F(1, 100)), Part((0, 1), F(1, 100))), (0.5, 0.5)
        )
    with pytest.raises(MechanismError, match="above every declared budget"):
        threshold(TIERS, "0.5")


def test_release_validates_inputs():
    mech = minimum(TIERS)
    d = Randomness.seeded(0).drawer("p", 0)
    with pytest.raises(MechanismError, match="one entry per present person"):
        mech.release(np.zeros(3), np.zeros(2), 4, d)
    with pytest.raises(MechanismError, match="bins must lie"):
        mech.release(np.array([5]), np.array([0]), 4, d)


# -- partitions -------------------------------------------------------------------


def brute_force(levels, score, min_size, maximise):
    best = None
    for k in range(levels.size):
        for cuts in itertools.combinations(range(1, levels.size), k):
            p = BudgetPartition(levels, (0, *cuts))
            if min(p.counts) < min_size:
                continue
            v = score(p)
            if best is None or (v > best[0] + 1e-12 if maximise else v < best[0] - 1e-12):
                best = (v, p)
    return best[1]


LEVELS = BudgetLevels(
    tuple(F(x, 1000) for x in (10, 12, 20, 35, 37, 60, 61, 90)), (50, 10, 40, 30, 30, 5, 60, 20)
)


@pytest.mark.parametrize("util", [CountUtility(1, 0), CountUtility(20, 0.2), CountUtility(3, 0.05)])
@pytest.mark.parametrize("min_size", [1, 40, 90])
def test_utility_based_partition_is_optimal(util, min_size):
    def score(p):
        return float(
            util(np.array(p.counts, float), np.array([float(e) for e in p.epsilons])).sum()
        )

    got = utility_based_partition(LEVELS, util, min_size)
    want = brute_force(LEVELS, score, min_size, maximise=True)
    assert score(got) == pytest.approx(score(want), rel=1e-12)
    assert min(got.counts) >= min_size


@pytest.mark.parametrize("min_size", [1, 40, 90])
def test_privacy_aware_partition_minimises_waste_then_eq_5_2_3(min_size):
    def objective(p):
        return sum(
            sum(LEVELS.counts[i] * (float(LEVELS.epsilons[i]) - float(e)) ** 2 for i in g) / n
            for g, e, n in zip(p.groups, p.epsilons, p.counts, strict=True)
        )

    got = privacy_aware_partition(LEVELS, min_size)
    k = len(got.starts)
    # optimal waste for its own k
    same_k = [
        BudgetPartition(LEVELS, (0, *c))
        for c in itertools.combinations(range(1, LEVELS.size), k - 1)
    ]
    same_k = [p for p in same_k if min(p.counts) >= min_size]
    assert waste(got) == pytest.approx(min(waste(p) for p in same_k), abs=1e-15)
    assert min(got.counts) >= min_size
    # and no other k's waste-optimal partition has a smaller eq. (5.2.3) objective
    best_by_k = {}
    for c in itertools.chain.from_iterable(
        itertools.combinations(range(1, LEVELS.size), j) for j in range(LEVELS.size)
    ):
        p = BudgetPartition(LEVELS, (0, *c))
        if min(p.counts) < min_size:
            continue
        kk = len(p.starts)
        if kk not in best_by_k or waste(p) < waste(best_by_k[kk]) - 1e-15:
            best_by_k[kk] = p
    assert objective(got) <= min(objective(p) for p in best_by_k.values()) + 1e-12


def test_partitions_refuse_an_impossible_minimum_size():
    with pytest.raises(MechanismError, match="lower min_size"):
        utility_based_partition(LEVELS, CountUtility(), min_size=10_000)
    with pytest.raises(MechanismError, match="lower min_size"):
        privacy_aware_partition(LEVELS, min_size=10_000)


def test_plans_depend_on_public_levels_only():
    """Same public levels → same plan, whatever data is released (the plan is built before any data)."""
    a = utility_based(TIERS, CountUtility(1, 0.1), 1000)
    b = utility_based(TIERS, CountUtility(1, 0.1), 1000)
    assert a == b


# -- predicted error (public maths) against the real release ------------------------------

WIDE = BudgetLevels((F(1), F(2), F(4)), (1500, 1500, 1000))  # coins and spread dominate
NARROW = BudgetLevels((F(1, 50), F(1, 20), F(1, 10)), (1500, 1500, 1000))  # noise matters too
QUERIES = 20  # bin b holds persons i ≡ b (mod 20): twenty queries of frequency 1/20 per release


def _measured_variance(mech, runs, seed):
    """Mean squared error of estimate/N per bin, re-assigning budgets to persons at random each run."""
    n = mech.levels.total
    bins = np.arange(n) % QUERIES
    f = np.bincount(bins, minlength=QUERIES) / n
    vector = np.repeat(np.arange(mech.levels.size), mech.levels.counts)
    rng = np.random.default_rng(seed)
    errors = []
    for r in range(runs):
        drawer = Randomness.seeded(seed).drawer("variance", r)
        est = mech.release(bins, rng.permutation(vector), QUERIES, drawer).estimate
        errors.append(est / n - f)
    errors = np.array(errors)
    return float(np.mean(errors**2)), float(np.mean(errors))


def _weighted(levels, weights):
    """One part per level at its own ε, combined with arbitrary public weights."""
    parts = tuple(Part((i,), e) for i, e in enumerate(levels.epsilons))
    return PersonalizedMechanism("weighted", levels, parts, weights)


def _plans(levels):
    return [
        minimum(levels),
        threshold(levels, levels.epsilons[1]),
        sampling(levels, levels.epsilons[-1]),
        sampling(levels, levels.epsilons[1]),
        _weighted(levels, (0.2, 0.3, 0.5)),
        privacy_aware(levels, min_size=1000),  # head-count weights: no spread term
    ]


@pytest.mark.parametrize("levels", [WIDE, NARROW], ids=["wide", "narrow"])
def test_query_variance_predicts_the_measured_error(levels):
    for mech in _plans(levels):
        predicted = mech.query_variance(1 / QUERIES)
        measured, bias = _measured_variance(mech, runs=250, seed=11)
        assert abs(bias) < 4 * np.sqrt(predicted / 250) + 1e-9, mech.name
        if predicted < 1e-9:  # all at ε ≥ 1 with head-count weights: nothing to measure
            assert measured < 1e-6, mech.name
            continue
        assert abs(measured / predicted - 1) < 0.12, (mech.name, measured, predicted)


def test_query_variance_terms_each_matter():
    """Each term is a large share of some plan's error, so the 12 % check above would catch its loss."""
    f = 1 / QUERIES
    samp = sampling(WIDE, WIDE.epsilons[-1])  # coins and spread; noise negligible at ε = 4
    weighted = _weighted(WIDE, (0.2, 0.3, 0.5))  # spread only
    noisy = minimum(NARROW)  # noise only
    assert samp.query_variance(0.0) < 0.01 * samp.query_variance(
        f
    )  # noise is not what Sampling pays here
    spread = {m.name: f * (1 - f) * _spread(m) for m in (samp, weighted)}
    assert 0.2 < spread["sampling"] / samp.query_variance(f) < 0.8  # coins and spread both large
    assert spread["weighted"] / weighted.query_variance(f) > 0.95
    assert noisy.query_variance(f) == pytest.approx(noisy.query_variance(0.0))  # pure noise
    assert noisy.query_variance(f, query_bins=10) == pytest.approx(10 * noisy.query_variance(f))


def _spread(mech):
    from histogram.personalized.sampling import inclusion_probability

    out, expected = 0.0, mech.expected_members()
    for k, p in enumerate(mech.parts):
        for i in p.levels:
            q = (
                1.0
                if p.sample_below is None
                else inclusion_probability(mech.levels.epsilons[i], p.sample_below)
            )
            out += mech.levels.counts[i] * (mech.weights[k] / expected[k] * q) ** 2
    return out - 1.0 / mech.levels.total


def test_query_variance_refuses_nonsense():
    with pytest.raises(MechanismError, match="frequency"):
        minimum(TIERS).query_variance(1.5)
    with pytest.raises(MechanismError, match="query_bins"):
        minimum(TIERS).query_variance(0.5, query_bins=0)
