"""LPA's privacy map and accuracy, range queries, exact parameters."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from histogram.exact import to_fraction
from histogram.lpa import LaplaceMechanism
from histogram.noise import (
    Randomness,
    discrete_laplace_half_width,
    discrete_laplace_mean_abs,
    discrete_laplace_tail,
)
from histogram.query import RangeQueries, answer_range_queries, random_range_queries


def test_privacy_map_is_exact_and_inverse():
    m = LaplaceMechanism(sensitivity=2)
    eps = Fraction(3, 10)
    assert m.scale(eps) == Fraction(20, 3)
    assert m.epsilon(m.scale(eps)) == eps
    assert m.scale(eps) * eps == m.sensitivity  # scale·ε == Δ exactly


@pytest.mark.parametrize("bad", [Fraction(0), Fraction(-1), -1, 0])
def test_privacy_map_rejects_non_positive_epsilon(bad):
    with pytest.raises(ValueError):
        LaplaceMechanism().scale(bad)


def test_release_adds_integer_noise_and_reports_accuracy():
    m = LaplaceMechanism()
    counts = np.arange(10_000, dtype=np.int64)
    out = m.release(counts, Fraction(1, 2), Randomness.seeded(1).drawer("s", 0))
    assert out.counts.dtype == np.int64 and out.counts.shape == counts.shape
    assert not out.counts.flags.writeable
    assert out.epsilon == Fraction(1, 2)
    h = int(out.half_width[0])
    assert h == discrete_laplace_half_width(Fraction(2), 0.95)
    inside = np.mean(np.abs(out.counts - counts) <= h)
    assert inside > 0.94  # nominal 95 %, 10k bins: 6 sigma below is ~0.937
    assert math.isclose(np.mean(np.abs(out.counts - counts)), discrete_laplace_mean_abs(Fraction(2)), rel_tol=0.05)


def test_release_refuses_float_counts():
    with pytest.raises(ValueError):
        LaplaceMechanism().release(np.ones(3), Fraction(1), Randomness.seeded(0).drawer("s", 0))


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(1), Fraction(7), Fraction(100)])
@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.95, 0.999])
def test_half_width_is_the_smallest_covering_integer(scale, confidence):
    h = discrete_laplace_half_width(scale, confidence)
    assert discrete_laplace_tail(h + 1, scale) <= 1 - confidence
    if h > 0:
        assert discrete_laplace_tail(h, scale) > 1 - confidence


def test_range_queries_match_brute_force():
    rng = np.random.default_rng(5)
    shape = (4, 3, 5)
    counts = rng.integers(0, 50, size=int(np.prod(shape)))
    q = random_range_queries(shape, 200, rng)
    got = answer_range_queries(counts, shape, q)
    cube = counts.reshape(shape)
    want = [
        cube[q.lo[i, 0] : q.hi[i, 0] + 1, q.lo[i, 1] : q.hi[i, 1] + 1, q.lo[i, 2] : q.hi[i, 2] + 1].sum()
        for i in range(200)
    ]
    assert np.array_equal(got, want)
    stacked = answer_range_queries(np.stack([counts, 2 * counts]), shape, q)
    assert np.array_equal(stacked[1], 2 * got)


def test_range_queries_validate_bounds():
    with pytest.raises(ValueError):
        RangeQueries(np.array([[2]]), np.array([[1]]))


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.1, Fraction(1, 10)), ("0.3", Fraction(3, 10)), ("1/3", Fraction(1, 3)), (2, Fraction(2)),
     (Decimal("0.25"), Fraction(1, 4)), (Fraction(5, 7), Fraction(5, 7))],
)
def test_to_fraction_is_exact(value, expected):
    assert to_fraction(value) == expected


def test_float_sums_would_be_wrong_but_fractions_are_exact():
    assert not (0.1 + 0.1 + 0.1 <= 0.3)
    assert to_fraction(0.1) * 3 <= to_fraction(0.3)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "abc", True, None, "inf"])
def test_to_fraction_rejects_non_numbers(bad):
    with pytest.raises(ValueError):
        to_fraction(bad)


def test_l1_distance_is_exact_and_has_integer_sensitivity():
    from histogram.distance import l1_distance

    rng = np.random.default_rng(11)
    release = rng.normal(50, 20, 5000)  # a float (PSD-like) release
    h = rng.poisson(50, 5000).astype(np.int64)
    for _ in range(200):
        h2 = h.copy()
        b = rng.integers(0, 5000)
        h2[b] += 1 if h2[b] == 0 or rng.random() < 0.5 else -1
        assert abs(l1_distance(h, release) - l1_distance(h2, release)) <= 1
    ints = rng.integers(-5, 100, 5000)
    assert l1_distance(h, ints) == int(np.abs(h - ints).sum())
    assert l1_distance(np.array([0, 0]), np.array([0.25, 0.5])) == 0
    assert l1_distance(np.array([0, 0]), np.array([0.75, 0.5])) == 1
