"""The Sampling mechanism's coin: exactly Bernoulli((e^a − 1)/(e^t − 1)), from exact primitives only."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from histogram.errors import MechanismError
from histogram.noise import Randomness
from histogram.personalized.sampling import inclusion_probability, sample_inclusion
from histogram.testing import RecordingDrawer
from tests.dp_audit import cp_lower, cp_upper


def test_the_rejection_construction_has_the_exact_law():
    """The accepted J has P(J = j) ∝ e^{j/D}, so P(J < A) = (e^{A/D} − 1)/(e^{T/D} − 1): exact algebra."""
    for a, t in [
        (Fraction(1, 100), Fraction(1, 10)),
        (Fraction(3, 7), Fraction(2)),
        (Fraction(1, 2), Fraction(1)),
    ]:
        d = math.lcm(a.denominator, t.denominator)
        big_a, big_t = int(a * d), int(t * d)
        weights = [math.exp((j - big_t + 1) / d) for j in range(big_t)]  # acceptance prob of J = j
        p = sum(weights[:big_a]) / sum(weights)
        assert math.isclose(p, inclusion_probability(a, t), rel_tol=1e-12)


@pytest.mark.parametrize(
    ("a", "t"),
    [
        (Fraction(1, 2), Fraction(2)),
        (Fraction(1, 100), Fraction(1, 20)),
        (Fraction(3, 2), Fraction(2)),
    ],
)
def test_empirical_frequency_matches_the_irrational_probability(a, t):
    levels = (a, t)
    n = 200_000
    kept = sample_inclusion(
        np.zeros(n, dtype=np.int64), levels, t, Randomness.seeded(3).drawer("pdp", 0)
    )
    k = int(kept.sum())
    p = inclusion_probability(a, t)
    assert cp_lower(np.array([k]), n)[0] <= p <= cp_upper(np.array([k]), n)[0]


def test_a_float_shortcut_is_distinguishable_from_the_exact_law():
    """Not vacuous: e^{a}/e^{t} (a plausible mistake) lies far outside the interval the exact coin gives."""
    a, t, n = Fraction(1, 2), Fraction(2), 200_000
    kept = sample_inclusion(
        np.zeros(n, dtype=np.int64), (a, t), t, Randomness.seeded(4).drawer("pdp", 0)
    )
    k = np.array([int(kept.sum())])
    wrong = math.exp(float(a - t))
    assert not cp_lower(k, n)[0] <= wrong <= cp_upper(k, n)[0]


def test_persons_at_or_above_the_threshold_are_always_kept_and_draw_nothing():
    drawer = RecordingDrawer(Randomness.seeded(1).drawer("pdp", 0))
    kept = sample_inclusion(
        np.array([1, 2, 1]),
        (Fraction(1, 100), Fraction(1, 10), Fraction(1)),
        Fraction(1, 10),
        drawer,
    )
    assert kept.all() and not drawer.tape


def test_only_exact_primitives_are_used():
    drawer = RecordingDrawer(Randomness.seeded(1).drawer("pdp", 0))
    sample_inclusion(
        np.zeros(1000, dtype=np.int64), (Fraction(1, 100), Fraction(1, 10)), Fraction(1, 10), drawer
    )
    assert {d.kind for d in drawer.tape} == {"uniform_int", "bernoulli_exp"}
    # common denominator D = lcm(100, 10) = 100, T = t·D = 10: J uniform on {0..9}, accepted w.p. exp(-(9-J)/100)
    assert all(d.scale == 100 for d in drawer.tape if d.kind == "bernoulli_exp")
    assert all(0 <= v < 10 for d in drawer.tape if d.kind == "uniform_int" for v in d.values)


def test_seeded_is_reproducible_and_secure_is_not_seeded():
    levels, t = (Fraction(1, 100), Fraction(1, 10)), Fraction(1, 10)
    idx = np.zeros(5000, dtype=np.int64)
    one = sample_inclusion(idx, levels, t, Randomness.seeded(9).drawer("pdp", 0))
    two = sample_inclusion(idx, levels, t, Randomness.seeded(9).drawer("pdp", 0))
    assert np.array_equal(one, two)
    three = sample_inclusion(idx, levels, t, Randomness.secure().drawer("pdp", 0))
    assert not np.array_equal(one, three)


def test_budgets_that_cannot_be_sampled_exactly_are_refused_with_advice():
    bad = Fraction(1, 3**30)
    with pytest.raises(MechanismError, match="coarser public grid"):
        sample_inclusion(
            np.zeros(3, dtype=np.int64),
            (bad, Fraction(1, 7**3)),
            Fraction(1, 7**3),
            Randomness.seeded(0).drawer("s", 0),
        )
