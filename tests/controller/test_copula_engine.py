"""DPCopula through the engine (Engine.step with the Mechanism adapter): charges, determinism, metadata."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from controller.method import MethodSpec, build_engine
from controller.units import UserLevel
from histogram.copula import DPCopula
from histogram.copula.histogram_release import CopulaHistogramMechanism, records_of_counts
from histogram.errors import MechanismError
from histogram.mechanism import Mechanism
from histogram.noise import Randomness

LEVELS = (4, 3, 5)
BINS = 60


def counts(seed: int, n: int = 3000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    z = rng.multivariate_normal(np.zeros(3), [[1, 0.6, 0.3], [0.6, 1, 0.2], [0.3, 0.2, 1]], size=n)
    x = np.stack([np.clip(((z[:, j] + 2) / 4 * L).astype(int), 0, L - 1) for j, L in enumerate(LEVELS)], axis=1)
    return np.bincount(np.ravel_multi_index(tuple(x.T), LEVELS), minlength=BINS).astype(np.int64)


def test_records_of_counts_round_trips():
    c = counts(0, 500)
    x = records_of_counts(c, LEVELS)
    assert x.shape == (500, 3)
    np.testing.assert_array_equal(np.bincount(np.ravel_multi_index(tuple(x.T), LEVELS), minlength=BINS), c)


def test_engine_steps_with_the_copula_mechanism_and_charges_exactly():
    mech = CopulaHistogramMechanism(DPCopula(LEVELS, min_records=2000))
    assert isinstance(mech, Mechanism)
    engine = build_engine(MethodSpec("uniform", UserLevel(Fraction(1), 5, 4)), mech, BINS)
    state = engine.initial_state()
    rnd = Randomness.seeded(3)
    for t in range(5):
        release, state = engine.step(state, counts(t), rnd.drawer("s", t))
        assert release.counts.sum() == pytest.approx(3000, rel=0.05)
        assert np.isinf(release.half_width).all()
        assert release.details["model"]["kind"] == "gaussian-copula"
    assert state.accountant.spent == Fraction(1)
    # same seed, same release (replay)
    again, _ = engine.step(engine.initial_state(), counts(0), rnd.drawer("s", 0))
    first, _ = engine.step(engine.initial_state(), counts(0), rnd.drawer("s", 0))
    np.testing.assert_array_equal(again.counts, first.counts)


def test_neighbours_give_identical_metadata_on_the_same_noise():
    """Nothing but DP outputs in the release: D and D + one record differ only through the noisy values."""
    mech = CopulaHistogramMechanism(DPCopula(LEVELS, min_records=2000))
    c = counts(1)
    c2 = c.copy()
    c2[7] += 1
    a = mech.release(c, Fraction(1, 2), Randomness.seeded(9).drawer("s", 0))
    b = mech.release(c2, Fraction(1, 2), Randomness.seeded(9).drawer("s", 0))
    assert a.epsilon == b.epsilon and a.confidence == b.confidence == 0.0
    assert set(a.details["model"]) == set(b.details["model"])
    assert a.details["model"]["levels"] == b.details["model"]["levels"]
    assert mech.expected_abs_error(Fraction(1, 2), BINS) > 0


def test_wrong_counts_are_refused():
    mech = CopulaHistogramMechanism(DPCopula(LEVELS))
    with pytest.raises(MechanismError, match="60 bins"):
        mech.release(np.zeros(10, dtype=np.int64), Fraction(1), Randomness.seeded(1).drawer("s", 0))
