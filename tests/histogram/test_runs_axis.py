"""The runs-axis helpers that policies share: row-wise L1 distance and the one-run noise adapter."""

from fractions import Fraction

import numpy as np
import pytest

from histogram.distance import l1_distance, l1_distance_rows
from histogram.errors import MechanismError, NoiseError
from histogram.noise import DrawerNoise, Randomness, RunDrawer


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


class _TwoRuns:
    """Two runs' sources, each one seeded drawer (as the lab's EngineNoise keys them per run)."""

    def __init__(self) -> None:
        self.d = [DrawerNoise(Randomness.seeded(r).drawer("s", 3, "release")) for r in range(2)]

    def laplace(self, runs, scale, size):  # type: ignore[no-untyped-def]
        return np.concatenate([self.d[r].laplace(np.arange(1), scale, size) for r in runs.tolist()])

    def laplace_each(self, runs, num, den, size):  # type: ignore[no-untyped-def]
        return np.concatenate([self.d[r].laplace_each(np.arange(1), num[i:i + 1], den[i:i + 1], size)
                               for i, r in enumerate(runs.tolist())])


def test_run_drawer_draws_that_runs_values_in_call_order():
    """RunDrawer (one run of a runs source as a NoiseDrawer, for AdaPub's and RescueDP's one-run rule
    and the grouped release in the lab) gives run r exactly what run r's own drawer gives."""
    source = _TwoRuns()
    one = RunDrawer(source, 1)
    b = Randomness.seeded(1).drawer("s", 3, "release")
    assert one.discrete_laplace(Fraction(5, 2)) == b.discrete_laplace(Fraction(5, 2))
    assert one.discrete_laplace(Fraction(7, 3), 4).tolist() == b.discrete_laplace(Fraction(7, 3), 4).tolist()
    assert RunDrawer(source, 0).discrete_laplace(Fraction(3), 2).tolist() == \
        Randomness.seeded(0).drawer("s", 3, "release").discrete_laplace(Fraction(3), 2).tolist()
    with pytest.raises(NoiseError, match="discrete Laplace values only"):
        one.uniform_int(np.array([3]))
