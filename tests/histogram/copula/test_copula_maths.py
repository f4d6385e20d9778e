"""DPCopula maths: bivariate normal, concordance, projection, sampling, queries, estimators."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from histogram.copula import DPCopula, GaussianCopula, bvn_cdf, nearest_correlation
from histogram.copula.gaussian import bvn_rectangle, thresholds
from histogram.copula.mechanism import tau_of_rho
from histogram.copula.statistics import check_records, concordance, two_way
from histogram.errors import MechanismError
from histogram.noise import Randomness


def latent_records(n: int, corr: np.ndarray, levels: tuple[int, ...], seed: int) -> np.ndarray:
    """Records from a discretised latent normal (a Gaussian copula with uneven marginals)."""
    rng = np.random.default_rng(seed)
    z = rng.multivariate_normal(np.zeros(len(levels)), corr, size=n)
    out = np.empty(z.shape, dtype=np.int64)
    for j, L in enumerate(levels):
        cuts = np.linspace(-1.8, 1.2, L - 1) if L > 1 else np.zeros(0)
        out[:, j] = np.searchsorted(cuts, z[:, j])
    return out


def test_bvn_cdf_matches_scipy():
    rng = np.random.default_rng(0)
    h, k = rng.normal(size=(2, 40)) * 1.5
    rho = rng.uniform(-0.97, 0.97, size=40)
    ours = bvn_cdf(h, k, rho)
    ref = [multivariate_normal(cov=[[1, r], [r, 1]]).cdf([a, b]) for a, b, r in zip(h, k, rho, strict=True)]
    np.testing.assert_allclose(ours, ref, atol=1e-7)


def test_bvn_cdf_edges():
    assert bvn_cdf(0.0, 0.0, 0.5) == pytest.approx(0.25 + np.arcsin(0.5) / (2 * np.pi), abs=1e-9)
    assert bvn_cdf(-np.inf, 1.0, 0.3) == 0.0
    assert bvn_cdf(np.inf, 0.0, 0.3) == pytest.approx(0.5)
    assert bvn_cdf(0.7, np.inf, -0.3) == pytest.approx(0.758036, abs=1e-6)
    assert bvn_rectangle(-np.inf, np.inf, -np.inf, np.inf, 0.9) == pytest.approx(1.0)


def test_nearest_correlation_is_a_positive_definite_correlation_matrix():
    bad = np.array([[1, 0.9, -0.9], [0.9, 1, 0.9], [-0.9, 0.9, 1]])
    assert np.linalg.eigvalsh(bad).min() < 0
    fixed = nearest_correlation(bad)
    np.testing.assert_allclose(np.diag(fixed), 1.0)
    assert np.linalg.eigvalsh(fixed).min() > 0
    np.linalg.cholesky(fixed)
    good = np.array([[1, 0.3, 0.2], [0.3, 1, -0.1], [0.2, -0.1, 1]])
    np.testing.assert_allclose(nearest_correlation(good), good, atol=1e-9)
    # Higham's projection is closer than naive eigenvalue clipping + rescaling
    bad = np.array([[1, 0.95, 0.1, 0.6], [0.95, 1, -0.8, 0.3], [0.1, -0.8, 1, 0.7], [0.6, 0.3, 0.7, 1]])
    assert np.linalg.eigvalsh(bad).min() < 0
    fixed = nearest_correlation(bad)
    w, v = np.linalg.eigh(bad)
    clipped = (v * np.maximum(w, 1e-6)) @ v.T
    d = np.sqrt(np.diag(clipped))
    clipped = clipped / d[:, None] / d[None, :]
    assert np.linalg.norm(fixed - bad) < np.linalg.norm(clipped - bad) - 1e-3


def brute_concordance(a: np.ndarray, b: np.ndarray) -> int:
    s = 0
    for i, j in itertools.combinations(range(a.size), 2):
        s += int(np.sign(a[i] - a[j]) * np.sign(b[i] - b[j]))
    return s


@pytest.mark.parametrize("seed", range(6))
def test_concordance_from_the_two_way_table_is_exact(seed):
    rng = np.random.default_rng(seed)
    levels = (int(rng.integers(2, 6)), int(rng.integers(2, 6)))
    x = np.stack([rng.integers(0, levels[0], 60), rng.integers(0, levels[1], 60)], axis=1)
    assert concordance(two_way(x, levels, 0, 1)) == brute_concordance(x[:, 0], x[:, 1])


def test_records_are_checked_against_the_domain():
    with pytest.raises(MechanismError, match="attribute 1 has a level outside 0..2"):
        check_records(np.array([[0, 3]]), (2, 3))
    with pytest.raises(MechanismError, match=r"\(n, 2\)"):
        check_records(np.zeros((4, 3), dtype=int), (2, 3))


def test_tau_of_rho_is_increasing_and_matches_continuous_limit():
    fine = thresholds(np.full(400, 1 / 400))
    for r in (-0.6, 0.0, 0.4, 0.8):
        assert tau_of_rho(fine, fine, r) == pytest.approx(2 / np.pi * np.arcsin(r), abs=0.01)
    coarse = thresholds(np.array([0.2, 0.5, 0.3]))
    vals = [tau_of_rho(coarse, coarse, r) for r in np.linspace(-0.9, 0.9, 7)]
    assert all(a < b for a, b in itertools.pairwise(vals))


def test_model_queries_agree_with_a_large_synthetic_sample():
    corr = nearest_correlation(np.array([[1, 0.6, 0.3, 0.1], [0.6, 1, 0.4, 0.2], [0.3, 0.4, 1, 0.5], [0.1, 0.2, 0.5, 1]]))
    margins = (np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.4, 0.4, 0.1]), np.full(5, 0.2), np.array([0.7, 0.3]))
    model = GaussianCopula(margins, corr, 1000.0)
    drawer = Randomness.seeded(5).drawer("t", 0, "synthetic")
    latent = model.latent_sample(400_000, drawer)
    sample = model.discretise(latent)
    for lo, hi in (([1, 0, 0, 0], [2, 3, 4, 1]), ([0, 1, 0, 0], [1, 2, 4, 1]), ([1, 1, 1, 0], [2, 2, 3, 1]),
                   ([0, 1, 2, 0], [1, 3, 4, 1])):
        inside = np.all((sample >= lo) & (sample <= hi), axis=1).mean()
        assert model.box_probability(lo, hi) == pytest.approx(inside, abs=4e-3), (lo, hi)
    assert model.box_probability([0, 0, 0, 0], [2, 3, 4, 1]) == 1.0
    for j in range(4):
        np.testing.assert_allclose(np.bincount(sample[:, j], minlength=margins[j].size) / sample.shape[0], margins[j], atol=4e-3)
    pair = model.marginal((1, 2)) / 1000
    emp = np.bincount(sample[:, 1] * 5 + sample[:, 2], minlength=20).reshape(4, 5) / sample.shape[0]
    np.testing.assert_allclose(pair, emp, atol=4e-3)
    assert model.marginal((0, 1, 3), sample).sum() == pytest.approx(1000)
    with pytest.raises(MechanismError, match="latent sample"):
        model.box_probability([1, 1, 1, 1], [1, 1, 1, 1])
    assert model.box_probability([1, 1, 1, 1], [1, 1, 1, 1], latent) > 0


def test_sampling_is_reproducible_when_seeded_and_fresh_when_secure():
    model = GaussianCopula((np.full(3, 1 / 3), np.full(2, 0.5)), np.array([[1, 0.5], [0.5, 1]]), 10.0)
    a = model.sample(50, Randomness.seeded(1).drawer("s", 3, "synthetic"))
    b = model.sample(50, Randomness.seeded(1).drawer("s", 3, "synthetic"))
    c = model.sample(50, Randomness.secure().drawer("s", 3, "synthetic"))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


LEVELS = (4, 5, 3, 6)
TRUE = np.array([[1, 0.6, 0.3, -0.2], [0.6, 1, 0.45, 0.0], [0.3, 0.45, 1, 0.25], [-0.2, 0.0, 0.25, 1]])


@pytest.mark.parametrize("variant,mapping,tol", [("kendall", "discrete", 0.05), ("median", "discrete", 0.07)])
def test_dp_copula_recovers_the_latent_correlation(variant, mapping, tol):
    x = latent_records(40_000, TRUE, LEVELS, seed=11)
    mech = DPCopula(LEVELS, variant=variant, tau_mapping=mapping, min_records=40_000)
    rel = mech.release(x, Fraction(4), Randomness.seeded(2).drawer("s", 0))
    assert np.abs(rel.model.correlation - TRUE).max() < tol
    assert rel.model.total == pytest.approx(40_000, rel=0.01)
    for j, L in enumerate(LEVELS):
        np.testing.assert_allclose(rel.model.marginals[j], np.bincount(x[:, j], minlength=L) / x.shape[0], atol=0.01)


def test_discrete_tau_mapping_beats_the_papers_sine_on_binned_data():
    x = latent_records(40_000, TRUE, LEVELS, seed=12)
    errs = {}
    for mapping in ("discrete", "paper"):
        mech = DPCopula(LEVELS, tau_mapping=mapping, min_records=40_000)
        rel = mech.release(x, Fraction(8), Randomness.seeded(3).drawer("s", 0))
        errs[mapping] = np.abs(rel.model.correlation - TRUE).max()
    assert errs["discrete"] < 0.05 < errs["paper"]


def test_mle_variant_recovers_correlation_with_enough_budget_per_partition():
    x = latent_records(60_000, TRUE, LEVELS, seed=13)
    mech = DPCopula(LEVELS, variant="mle", partitions=200)
    rel = mech.release(x, Fraction(50), Randomness.seeded(4).drawer("s", 0))
    # normal scores of binned data attenuate the latent correlation; the sign and order survive
    est = rel.model.correlation
    assert np.abs(est - TRUE).max() < 0.15
    assert est[0, 1] > est[0, 2] > 0 > est[0, 3]


def test_mle_discrete_mapping_removes_the_binning_bias():
    """Normal scores of binned data understate ρ; mapping through the released marginals corrects it."""
    x = latent_records(60_000, TRUE, LEVELS, seed=13)
    errs = {}
    for mapping in ("paper", "discrete"):
        mech = DPCopula(LEVELS, variant="mle", partitions=200, tau_mapping=mapping)
        rel = mech.release(x, Fraction(50), Randomness.seeded(4).drawer("s", 0))
        errs[mapping] = np.abs(rel.model.correlation - TRUE).max()
    assert errs["discrete"] < 0.05 < 0.1 < errs["paper"]


def test_release_splits_epsilon_exactly_and_declares_its_cost():
    mech = DPCopula((3, 3, 3), ratio=Fraction(8))
    eps1, eps2 = mech.split(Fraction(1, 10))
    assert (eps1, eps2) == (Fraction(8, 90), Fraction(1, 90))
    assert mech.epsilon(Fraction(1, 10)) == Fraction(1, 10)
    assert mech.marginal_scale(Fraction(1, 10)) == 3 / eps1
    assert mech.dependence_scale(Fraction(1, 10)) == 3 * 1000 / eps2
    with pytest.raises(MechanismError, match="positive exact number"):
        mech.split(0.1)  # type: ignore[arg-type]
    with pytest.raises(MechanismError, match="unknown DPCopula variant"):
        DPCopula((3, 3), variant="spearman")


def test_a_billion_cell_domain_is_released_without_materialising_it():
    levels = (10,) * 9
    corr = np.full((9, 9), 0.4) + 0.6 * np.eye(9)
    x = latent_records(20_000, corr, levels, seed=14)
    rel = DPCopula(levels, min_records=20_000).release(x, Fraction(1), Randomness.seeded(5).drawer("s", 0))
    assert rel.model.cells == 10**9
    lo, hi = [0] * 9, [9] * 9
    lo[0], hi[0], lo[4], hi[4] = 3, 6, 0, 4
    truth = np.mean((x[:, 0] >= 3) & (x[:, 0] <= 6) & (x[:, 4] <= 4))
    assert rel.model.box_probability(lo, hi) == pytest.approx(truth, abs=0.03)


def test_median_bayes_intervals_cover_the_latent_correlation():
    """Seed 001's noise-aware posterior: 95 % intervals cover ρ in most of 40 independent releases."""
    cover, widths = 0, []
    for seed in range(40):
        x = latent_records(2000, np.array([[1, 0.5], [0.5, 1]]), (5, 5), seed=100 + seed)
        rel = DPCopula((5, 5), variant="median").release(x, Fraction(1, 2), Randomness.seeded(seed).drawer("s", 0))
        lo, hi = rel.intervals[0]
        cover += lo <= 0.5 <= hi
        widths.append(hi - lo)
    assert cover >= 34  # nominal 38 of 40
    assert 0.05 < np.mean(widths) < 0.5


def test_median_tetrachoric_point_estimate_has_no_intervals():
    x = latent_records(20_000, TRUE, LEVELS, seed=15)
    rel = DPCopula(LEVELS, variant="median", median_estimator="tetrachoric").release(
        x, Fraction(4), Randomness.seeded(6).drawer("s", 0))
    assert rel.intervals is None
    assert np.abs(rel.model.correlation - TRUE).max() < 0.08


def test_the_batched_bisection_takes_the_one_at_a_time_decisions():
    """_rho_from_tau / _rho_from_scores solve all pairs of a table shape in one batched bisection:
    bit for bit the ρ the pair-by-pair bisection finds (clamped ends included)."""
    from histogram.copula.gaussian import thresholds
    from histogram.copula.mechanism import (
        DPCopula,
        _level_scores,
        _solve_increasing,
        score_correlation,
    )
    from histogram.copula.statistics import pairs

    rng = np.random.default_rng(0)
    for _ in range(4):
        levels = tuple(int(v) for v in rng.integers(2, 7, 5))
        probs = tuple(rng.dirichlet(np.ones(v)) for v in levels)
        target = np.concatenate([rng.uniform(-0.9, 0.9, 8), [-0.9999999, 0.9999999]])
        cuts, scores = [thresholds(p) for p in probs], [_level_scores(p) for p in probs]
        one_by_one = [_solve_increasing(lambda r, a=cuts[j], b=cuts[k]: tau_of_rho(a, b, r), float(t))
                      for t, (j, k) in zip(target, pairs(5), strict=True)]
        assert np.array_equal(DPCopula(levels, "kendall")._rho_from_tau(target, probs), one_by_one)
        one_by_one = [_solve_increasing(lambda x, a=cuts[j], b=cuts[k], sa=scores[j], sb=scores[k]:
                                        score_correlation(a, b, sa, sb, x), float(t))
                      for t, (j, k) in zip(target, pairs(5), strict=True)]
        assert np.array_equal(DPCopula(levels, "mle")._rho_from_scores(target, probs), one_by_one)
