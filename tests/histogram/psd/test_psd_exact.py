"""PSD: exact budget split, tree structure, least squares, non-negativity, interface."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from histogram.errors import MechanismError
from histogram.mechanism import Mechanism
from histogram.noise import Randomness
from histogram.psd.budget import make_plan
from histogram.psd.consistency import least_squares, nonnegative, project_groups_to_simplex
from histogram.psd.mechanism import PSD_OPTIONS, PSDMechanism
from histogram.psd.median import exponential_choice, median_utility
from histogram.psd.tree import PSDTree, build_tree, discrete_laplace_variance, leaf_index_grid
from histogram.testing import RecordingDrawer, ReplayDrawer


def drawer(seed: int = 0, timestep: int = 0):
    return Randomness.seeded(seed).drawer("psd-test", timestep)


def clustered(shape: tuple[int, ...], n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centre = rng.uniform(0, 1, (3, len(shape))) * np.asarray(shape)
    pts = np.concatenate(
        [rng.normal(c, 0.08 * np.asarray(shape), (n // 3, len(shape))) for c in centre]
    )
    idx = np.clip(pts.astype(np.int64), 0, np.asarray(shape) - 1)
    flat = np.ravel_multi_index(tuple(idx.T), shape)
    return np.bincount(flat, minlength=math.prod(shape)).astype(np.int64)


# -- budget ------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["kd", "quad", "hybrid"])
@pytest.mark.parametrize("allocation", ["geometric", "uniform"])
@pytest.mark.parametrize("eps", [Fraction(1), Fraction(1, 3), Fraction(7, 10), Fraction(123, 1000)])
def test_budget_sums_exactly_to_epsilon(variant, allocation, eps):
    m = PSDMechanism((40, 33, 5), variant=variant, count_allocation=allocation, height=4)
    b = m.budget(eps)
    assert b.total == eps
    assert all(isinstance(e, Fraction) and e > 0 for e in b.count)
    assert len(b.count) == m.plan.height + 1
    if variant == "quad":
        assert b.median == 0 and b.median_steps == 0
    else:
        assert b.median == eps * Fraction(3, 10)
        assert b.median_step * b.median_steps == b.median
    for depth in range(m.plan.height + 1):
        assert b.leaf(depth) == sum(b.count[depth:], Fraction(0))


def test_uniform_allocation_is_equal_per_level():
    b = PSDMechanism((64, 64), variant="quad", count_allocation="uniform", height=5).budget(
        Fraction(3)
    )
    assert set(b.count) == {Fraction(1, 2)}


def test_geometric_allocation_is_the_papers_two_d_rule():
    # 2-D, both attributes wide: ε_ℓ ∝ 2^{ℓ/3} (Cormode et al.), leaves get the most.
    b = PSDMechanism((1024, 1024), variant="quad", height=8).budget(Fraction(1))
    ratios = [float(b.count[i + 1] / b.count[i]) for i in range(8)]
    assert ratios == pytest.approx([2 ** (1 / 3)] * 8, rel=1e-5)
    # closed form of the paper: ε_ℓ = ε · 2^{ℓ/3} (2^{1/3} - 1) / (2^{(h+1)/3} - 1)
    h = 8
    closed = [
        2 ** (lvl / 3) * (2 ** (1 / 3) - 1) / (2 ** ((h + 1) / 3) - 1) for lvl in range(h + 1)
    ]
    assert [float(e) for e in b.count] == pytest.approx(closed, rel=1e-5)


def test_geometric_allocation_is_uniform_in_one_dimension():
    b = PSDMechanism((256,), variant="quad", height=6).budget(Fraction(1))
    assert set(b.count) == {Fraction(1, 7)}


def test_median_steps_skip_attributes_that_cannot_split():
    plan = make_plan((3, 1, 100), height=4, median_levels=4)
    # attribute 1 never splits; attribute 0 (3 bins) can split on levels 0 and 1 only
    assert [[s.attribute for s in level] for level in plan.levels] == [[0, 2], [0, 2], [2], [2]]
    assert plan.median_steps == 6


# -- options -----------------------------------------------------------------


def test_defaults():
    m = PSDMechanism((1024, 1024))
    assert m.name == "psd" and m.sensitivity == 1 and m.confidence == 0.95
    assert m.variant == "quad" and m.height == 8 and m.count_allocation == "geometric"
    assert m.median_share == 0
    assert PSDMechanism((16, 16)).height == 4  # capped where quadtree leaves are single bins
    kd = PSDMechanism((1024, 1024), variant="kd")
    assert kd.median_share == Fraction(3, 10)
    hy = PSDMechanism((1024, 1024), variant="hybrid")
    assert hy.switch_level == 4 and hy.median_share == Fraction(3, 10)
    assert isinstance(m, Mechanism)


def test_from_options_validates_keys_and_values():
    m = PSDMechanism.from_options(
        (64, 32),
        sensitivity=2,
        confidence=0.9,
        options={"variant": "hybrid", "height": 5, "median_share": "1/4", "switch_level": 2},
    )
    assert (m.variant, m.height, m.median_share, m.switch_level) == ("hybrid", 5, Fraction(1, 4), 2)
    assert m.sensitivity == 2 and m.confidence == 0.9
    assert PSDMechanism.from_options(
        (8,), options={"median_share": 0.2, "variant": "kd"}
    ).median_share == Fraction(1, 5)
    with pytest.raises(MechanismError) as err:
        PSDMechanism.from_options((8, 8), options={"hieght": 3})
    assert "hieght" in str(err.value)
    for key in PSD_OPTIONS:
        assert key in str(err.value)


@pytest.mark.parametrize(
    "options",
    [
        {"variant": "rtree"},
        {"count_allocation": "optimal"},
        {"height": -1},
        {"height": 2.5},
        {"height": True},
        {"height": 7},  # 64 bins: quadtree leaves are single bins at depth 6
        {"variant": "quad", "median_share": "1/2"},
        {"variant": "kd", "median_share": 1},
        {"variant": "kd", "median_share": 0},
        {"variant": "kd", "median_share": "abc"},
        {"variant": "kd", "switch_level": 2},
        {"variant": "hybrid", "height": 4, "switch_level": 5},
        {"variant": "hybrid", "switch_level": 0},
    ],
)
def test_from_options_rejects_bad_values(options):
    with pytest.raises(MechanismError):
        PSDMechanism.from_options((64, 64), options=options)


def test_constructor_rejects_bad_arguments():
    for kwargs in ({"sensitivity": 0}, {"confidence": 1.0}, {"confidence": 0}):
        with pytest.raises(MechanismError):
            PSDMechanism((4, 4), **kwargs)
    for shape in ((), (0, 3), (2.0, 3), 5):
        with pytest.raises(MechanismError):
            PSDMechanism(shape)  # type: ignore[arg-type]


def test_release_rejects_bad_input():
    m = PSDMechanism((4, 4))
    with pytest.raises(MechanismError):
        m.release(np.ones(16), Fraction(1), drawer())  # float counts
    with pytest.raises(MechanismError):
        m.release(np.ones(15, dtype=np.int64), Fraction(1), drawer())
    with pytest.raises(MechanismError):
        m.release(-np.ones(16, dtype=np.int64), Fraction(1), drawer())
    for eps in (Fraction(0), Fraction(-1), 0.5):
        with pytest.raises(MechanismError):
            m.release(np.ones(16, dtype=np.int64), eps, drawer())  # type: ignore[arg-type]


# -- release: output in bin space and the tree ---------------------------------


@pytest.mark.parametrize(
    ("shape", "variant"),
    [
        ((64, 48), "quad"),
        ((64, 48), "kd"),
        ((64, 48), "hybrid"),
        ((37,), "kd"),
        ((12, 9, 10), "hybrid"),
        ((5, 7), "quad"),
    ],
)
def test_release_is_consistent_and_in_bin_space(shape, variant):
    counts = clustered(shape, 3000, seed=1)
    m = PSDMechanism(shape, variant=variant)
    eps = Fraction(1, 2)
    rel = m.release_tree(counts, eps, drawer(3))
    out = rel.histogram
    assert out.epsilon == eps and isinstance(out.epsilon, Fraction)
    assert out.counts.dtype == np.float64 and out.counts.shape == (math.prod(shape),)
    assert np.all(out.counts >= 0) and not out.counts.flags.writeable
    assert out.half_width.shape == out.counts.shape and np.all(out.half_width >= 0)
    tree = rel.tree
    # the leaves partition the domain
    assert tree.volume.sum() == math.prod(shape)
    painted = np.zeros(shape, dtype=np.int64)
    for lo, hi in zip(tree.lo, tree.hi, strict=True):
        painted[tuple(slice(a, b + 1) for a, b in zip(lo, hi, strict=True))] += 1
    assert np.all(painted == 1)
    ids = tree.leaf_of_bin()
    assert np.array_equal(np.bincount(ids, minlength=tree.count.size), tree.volume)
    # each leaf's count is spread evenly over its bins, and adds up again
    assert np.allclose(np.bincount(ids, weights=out.counts), tree.count)
    assert np.all(tree.lower <= tree.upper)
    # JSON-ready details that rebuild the same bins
    spec = json.loads(json.dumps(out.details))["tree"]
    assert spec["variant"] == variant and spec["shape"] == list(shape)
    assert sum(Fraction(e) for e in spec["count_epsilon"]) + Fraction(spec["median_epsilon"]) == eps
    again = PSDTree.from_description(spec)
    assert np.array_equal(again.to_bins(), out.counts)


def test_tree_levels_add_up_after_post_processing():
    shape = (32, 32)
    counts = clustered(shape, 2000, seed=2)
    m = PSDMechanism(shape, variant="hybrid", height=5)
    levels = build_tree(counts.reshape(shape), m.plan, m.budget(Fraction(1)), 1, drawer(1))
    parents = [lv.parent for lv in levels]
    beta, _ = least_squares(parents, [lv.noisy for lv in levels], [lv.variance for lv in levels])
    final = nonnegative(parents, beta)
    for lvl in range(1, len(levels)):
        n_up = levels[lvl - 1].size
        child_sum_beta = np.bincount(parents[lvl], weights=beta[lvl], minlength=n_up)
        child_sum_final = np.bincount(parents[lvl], weights=final[lvl], minlength=n_up)
        inner = ~levels[lvl - 1].leaf
        assert np.allclose(child_sum_beta[inner], beta[lvl - 1][inner], atol=1e-8)
        assert np.allclose(child_sum_final[inner], final[lvl - 1][inner], atol=1e-8)
        assert np.all(final[lvl] >= 0)
        # every inner node has 2..2^d children whose boxes tile it
        kids = np.bincount(parents[lvl], minlength=n_up)
        assert np.all(kids[inner] >= 2) and np.all(kids[inner] <= 4) and np.all(kids[~inner] == 0)
        vol = np.prod(levels[lvl].hi - levels[lvl].lo + 1, axis=0)
        up_vol = np.prod(levels[lvl - 1].hi - levels[lvl - 1].lo + 1, axis=0)
        assert np.array_equal(
            np.bincount(parents[lvl], weights=vol, minlength=n_up)[inner], up_vol[inner]
        )


def test_true_counts_add_up_without_noise_variation():
    # noise is independent of the data: the difference of two releases with the
    # same drawer is the difference of the true counts, node by node
    shape = (16, 8)
    a = clustered(shape, 500, seed=4)
    m = PSDMechanism(shape, variant="quad", height=3)
    la = build_tree(a.reshape(shape), m.plan, m.budget(Fraction(1)), 1, drawer(9))
    lz = build_tree(np.zeros(shape, dtype=np.int64), m.plan, m.budget(Fraction(1)), 1, drawer(9))
    for lv_a, lv_z in zip(la, lz, strict=True):
        true = lv_a.noisy - lv_z.noisy
        boxes = [
            a.reshape(shape)[lo0 : hi0 + 1, lo1 : hi1 + 1].sum()
            for lo0, lo1, hi0, hi1 in zip(*lv_a.lo, *lv_a.hi, strict=True)
        ]
        assert np.array_equal(true, boxes)
    assert la[0].noisy[0] - lz[0].noisy[0] == a.sum()


class Recorder:
    """A drawer wrapper that records the median randomness it hands out."""

    def __init__(self, inner):
        self.inner, self.laplace = inner, 0
        self.rec = RecordingDrawer(inner)

    def discrete_laplace(self, scale, size=None):
        self.laplace += 1 if size is None else size
        return self.inner.discrete_laplace(scale, size)

    def uniform_int(self, high):
        return self.rec.uniform_int(high)

    def bernoulli_exp(self, numerator, denominator):
        return self.rec.bernoulli_exp(numerator, denominator)


def test_release_is_reproducible_and_uses_only_the_drawer():
    shape = (40, 40)
    counts = clustered(shape, 4000, seed=5)
    m = PSDMechanism(shape, variant="kd", height=4)
    d1, d2 = drawer(11), drawer(11)
    r1 = m.release(counts, Fraction(1), d1)
    r2 = m.release(counts, Fraction(1), d2)
    assert np.array_equal(r1.counts, r2.counts) and np.array_equal(r1.half_width, r2.half_width)
    rec = Recorder(drawer(11))
    levels = build_tree(counts.reshape(shape), m.plan, m.budget(Fraction(1)), 1, rec)
    nodes = sum(lv.size for lv in levels)
    assert rec.laplace == nodes  # one noisy count per node
    # the medians draw proposals and acceptances in pairs: at least one round per sub-step,
    # each round proposing (width - 1) candidates per cell still open
    kinds = [d.kind for d in rec.rec.tape]
    assert kinds[0::2] == ["uniform_int"] * (len(kinds) // 2) and kinds[1::2] == ["bernoulli_exp"] * (len(kinds) // 2)
    assert len(kinds) // 2 >= m.plan.median_steps
    assert rec.rec.tape[0].count == shape[0] - 1
    assert d1.draws == nodes + rec.rec.draws


def test_medians_in_the_tree_follow_the_recorded_noise():
    """The tree's split equals the exponential-mechanism choice on the same recorded noise."""
    values = np.array([0, 0, 3, 5, 5, 5, 9, 11], dtype=np.int64)
    hist = np.bincount(values, minlength=12).astype(np.int64)
    m = PSDMechanism((12,), variant="kd", height=1)
    budget = m.budget(Fraction(2))
    rec = Recorder(drawer(21))
    levels = build_tree(hist, m.plan, budget, 1, rec)
    split = int(levels[1].lo[0, 1])  # right child starts at the split point
    cand = np.arange(1, 12)
    rank = (values[None, :] < cand[:, None]).sum(axis=1)
    utility = median_utility(rank, np.full(11, values.size))
    replay = ReplayDrawer(rec.rec.tape)
    assert 1 + exponential_choice(utility, np.array([11]), budget.median_step, 1, replay)[0] == split
    replay.assert_exhausted()
    # and the choice is the first accepted proposal
    proposals = rec.rec.tape[-2].values
    accepted = rec.rec.tape[-1].values
    assert split == cand[proposals[int(np.argmax(accepted))]]


def test_all_zero_histogram_and_single_bin_domain():
    m = PSDMechanism((8, 8), variant="hybrid", height=3)
    out = m.release(np.zeros(64, dtype=np.int64), Fraction(1), drawer())
    assert np.all(out.counts >= 0) and np.isfinite(out.counts).all()
    single = PSDMechanism((1,))
    assert single.height == 0 and single.median_share == 0
    r = single.release(np.array([5]), Fraction(1), drawer())
    assert r.counts.shape == (1,) and r.epsilon == 1
    with pytest.raises(MechanismError):
        PSDMechanism((1,), variant="kd", median_share=Fraction(1, 2))


def test_half_width_covers_the_true_counts():
    # single-bin leaves (quadtree to full depth): the interval is Chebyshev on the
    # exact variance of each bin's estimate, so coverage is at least the confidence
    shape = (32, 32)
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 40, math.prod(shape))
    m = PSDMechanism(shape, variant="quad", height=5, confidence=0.9)
    inside = []
    for seed in range(4):
        out = m.release(counts, Fraction(1, 2), drawer(seed))
        inside.append(np.abs(out.counts - counts) <= out.half_width)
    assert np.mean(inside) >= 0.9
    # wide leaves: the statement is worst-case over the spread inside the leaf
    coarse = PSDMechanism(shape, variant="quad", height=2)
    out = coarse.release(counts, Fraction(1, 2), drawer(7))
    assert np.all(np.abs(out.counts - counts) <= out.half_width)


def test_expected_abs_error_matches_the_noise_of_a_balanced_tree():
    # counts far from 0 (non-negativity never binds), full depth (single-bin leaves)
    shape = (64, 64)
    counts = np.full(math.prod(shape), 1000, dtype=np.int64)
    m = PSDMechanism(shape, variant="quad", height=6)
    eps = Fraction(1, 2)
    errs = np.concatenate([m.release(counts, eps, drawer(s)).counts - counts for s in range(3)])
    expected = m.expected_abs_error(eps, counts.size)
    sigma = expected / math.sqrt(2 / math.pi)  # the estimate is sqrt(2P/π) for one-bin leaves
    assert np.sqrt(np.mean(errs**2)) == pytest.approx(sigma, rel=0.03)  # the variance P is exact
    # E|X| of a sum dominated by one Laplace term lies between σ/√2 and σ·√(2/π)
    assert sigma / math.sqrt(2) * 0.97 <= np.abs(errs).mean() <= expected * 1.03
    # coarser leaves spread their noise: the per-bin error shrinks
    assert PSDMechanism(shape, variant="quad", height=3).expected_abs_error(
        eps
    ) < m.expected_abs_error(eps)


# -- least squares against numpy.linalg.lstsq -----------------------------------


def _design(parents: list[np.ndarray], sizes: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Node × leaf incidence matrix of a tree given level by level."""
    has_kids = [
        np.bincount(parents[lvl + 1], minlength=sizes[lvl]) > 0 for lvl in range(len(sizes) - 1)
    ]
    has_kids.append(np.zeros(sizes[-1], dtype=bool))
    leaf_ids = []
    count = 0
    for lvl, size in enumerate(sizes):
        ids = np.full(size, -1)
        leaves = ~has_kids[lvl]
        ids[leaves] = np.arange(count, count + leaves.sum())
        count += int(leaves.sum())
        leaf_ids.append(ids)
    rows = []
    below: list[list[set[int]]] = [[set() for _ in range(s)] for s in sizes]
    for lvl in range(len(sizes) - 1, -1, -1):
        for v in range(sizes[lvl]):
            if leaf_ids[lvl][v] >= 0:
                below[lvl][v].add(int(leaf_ids[lvl][v]))
            if lvl:
                below[lvl - 1][parents[lvl][v]] |= below[lvl][v]
    for lvl in range(len(sizes)):
        for v in range(sizes[lvl]):
            row = np.zeros(count)
            row[list(below[lvl][v])] = 1
            rows.append(row)
    return np.array(rows), leaf_ids


def test_least_squares_worked_example_uniform_variances():
    # root (y=10) with children a (y=7) and b (y=2); a has leaves 3, 5; b has leaves 1, 0, 2
    parents = [np.array([-1]), np.array([0, 0]), np.array([0, 0, 1, 1, 1])]
    y = [np.array([10.0]), np.array([7.0, 2.0]), np.array([3.0, 5.0, 1.0, 0.0, 2.0])]
    var = [np.ones(1), np.ones(2), np.ones(5)]
    beta, post = least_squares(parents, y, var)
    a, _ = _design(parents, [1, 2, 5])
    x, *_ = np.linalg.lstsq(a, np.concatenate(y), rcond=None)
    assert np.allclose(np.concatenate(beta), a @ x, atol=1e-12)
    cov = np.linalg.inv(a.T @ a)
    assert np.allclose(np.concatenate(post), np.einsum("ij,jk,ik->i", a, cov, a), atol=1e-12)
    # the hand computation: ordinary least squares on this tree
    assert beta[0][0] == pytest.approx(np.concatenate(beta)[1:3].sum())


@pytest.mark.parametrize("variant", ["kd", "quad", "hybrid"])
@pytest.mark.parametrize("seed", [0, 1])
def test_least_squares_equals_weighted_lstsq_on_real_trees(variant, seed):
    shape = (9, 7)
    counts = np.random.default_rng(seed).integers(0, 6, math.prod(shape))
    m = PSDMechanism(shape, variant=variant, height=3)
    levels = build_tree(counts.reshape(shape), m.plan, m.budget(Fraction(1)), 1, drawer(seed))
    parents = [lv.parent for lv in levels]
    y = [lv.noisy.astype(float) for lv in levels]
    var = [lv.variance for lv in levels]
    assert (
        len({float(v) for lv in var for v in lv}) > 1
    )  # genuinely weighted (levels, early leaves)
    beta, post = least_squares(parents, y, var)
    a, _ = _design(parents, [lv.size for lv in levels])
    w = 1.0 / np.sqrt(np.concatenate(var))
    x, *_ = np.linalg.lstsq(a * w[:, None], np.concatenate(y) * w, rcond=None)
    assert np.allclose(np.concatenate(beta), a @ x, atol=1e-9)
    cov = np.linalg.inv((a * (w**2)[:, None]).T @ a)
    assert np.allclose(np.concatenate(post), np.einsum("ij,jk,ik->i", a, cov, a), atol=1e-9)


def test_discrete_laplace_variance_closed_form():
    for scale in (Fraction(1, 3), Fraction(1), Fraction(25, 2)):
        z = np.arange(-2000, 2001)
        a = math.exp(-1 / float(scale))
        pmf = (1 - a) / (1 + a) * a ** np.abs(z)
        assert discrete_laplace_variance(scale) == pytest.approx(
            float((pmf * z * z).sum()), rel=1e-9
        )


# -- non-negativity ------------------------------------------------------------


def _project_reference(v: np.ndarray, t: float) -> np.ndarray:
    if t <= 0:
        return np.zeros_like(v)
    u = np.sort(v)[::-1]
    css = np.cumsum(u)
    j = np.arange(1, v.size + 1)
    hits = np.nonzero(u - (css - t) / j > 0)[0]
    rho = hits[-1] if hits.size else 0  # a target lost to rounding against the largest value
    theta = (css[rho] - t) / (rho + 1)
    return np.maximum(v - theta, 0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.floats(-50, 50, allow_nan=False), min_size=1, max_size=8),
            st.floats(0, 100, allow_nan=False),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_projection_matches_the_sort_based_reference(groups):
    values = np.concatenate([np.asarray(v, dtype=float) for v, _ in groups])
    group = np.concatenate([np.full(len(v), i) for i, (v, _) in enumerate(groups)])
    target = np.array([t for _, t in groups])
    order = np.random.default_rng(len(values)).permutation(
        values.size
    )  # groups need not be contiguous
    out = np.empty_like(values)
    out[order] = project_groups_to_simplex(values[order], group[order], target)
    for i, (v, t) in enumerate(groups):
        got = out[group == i]
        assert np.all(got >= 0)
        assert got.sum() == pytest.approx(t, abs=1e-9)
        assert np.allclose(got, _project_reference(np.asarray(v, dtype=float), t), atol=1e-9)


def test_nonnegative_zeroes_empty_subtrees():
    parents = [np.array([-1]), np.array([0, 0]), np.array([0, 0, 1, 1])]
    beta = [np.array([4.0]), np.array([5.0, -1.0]), np.array([6.0, -1.0, -0.5, -0.5])]
    final = nonnegative(parents, beta)
    assert final[1].tolist() == [4.0, 0.0]
    assert final[2].tolist() == [4.0, 0.0, 0.0, 0.0]


def test_leaf_index_grid_three_dimensions():
    shape = (3, 4, 2)
    lo = np.array([[0, 0, 0], [0, 0, 1], [1, 0, 0], [0, 2, 0]])
    hi = np.array([[0, 1, 0], [0, 1, 1], [2, 1, 1], [2, 3, 1]])
    ids = leaf_index_grid(shape, lo, hi).reshape(shape)
    expected = np.empty(shape, dtype=np.int64)
    for i, (a, b) in enumerate(zip(lo, hi, strict=True)):
        expected[a[0] : b[0] + 1, a[1] : b[1] + 1, a[2] : b[2] + 1] = i
    assert np.array_equal(ids, expected)
    with pytest.raises(MechanismError):
        leaf_index_grid(shape, lo[:3], hi[:3])  # not a partition
