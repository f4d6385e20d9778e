"""The runs-axis helpers that policies share: row-wise L1 distance and the one-run noise adapter."""

from fractions import Fraction

import numpy as np
import pytest

from histogram.distance import l1_distance, l1_distance_rows
from histogram.errors import MechanismError, NoiseError
from histogram.noise import DrawerNoise, Randomness


def test_l1_rows_equal_l1_per_row_for_int_and_float_releases():
    rng = np.random.default_rng(3)
    true = rng.integers(0, 50, size=9)
    ints = rng.integers(-20, 70, size=(5, 9))
    floats = ints + rng.normal(0, 3, size=(5, 9))
    floats[0, 0] = 0.5 + 2**-17  # fixed-point rounding boundary
    for rel in (ints, floats):
        got = l1_distance_rows(true, rel)
        assert got.dtype == np.int64
        assert got.tolist() == [l1_distance(true, row) for row in rel]


def test_l1_rows_refuses_mismatched_shapes_and_non_finite():
    with pytest.raises(MechanismError, match="runs, bins"):
        l1_distance_rows(np.zeros(3, dtype=np.int64), np.zeros(3))
    with pytest.raises(MechanismError, match="NaN"):
        l1_distance_rows(np.zeros(2, dtype=np.int64), np.array([[np.nan, 0.0]]))


def test_drawer_noise_draws_what_the_drawer_draws_in_call_order():
    a = Randomness.seeded(7).drawer("s", 3, "release")
    b = Randomness.seeded(7).drawer("s", 3, "release")
    noise = DrawerNoise(a)
    one = np.array([0])
    x = noise.laplace(one, Fraction(5, 2), None)
    y = noise.laplace(one, Fraction(3), 4)
    z = noise.laplace_each(one, np.array([7]), np.array([3]), 2)
    assert x.tolist() == [b.discrete_laplace(Fraction(5, 2))]
    assert y.tolist() == [b.discrete_laplace(Fraction(3), 4).tolist()]
    assert z.tolist() == [b.discrete_laplace(Fraction(7, 3), 2).tolist()]
    assert noise.laplace(np.zeros(0, dtype=np.int64), Fraction(1), 3).shape == (0, 3)
    with pytest.raises(NoiseError, match="one run"):
        noise.laplace(np.array([0, 1]), Fraction(1), None)
