"""Statistical audit of PSD's private median (exponential mechanism).

For adversarial neighbouring cells D, D' the audit samples the production
sampler (:func:`histogram.psd.median.exponential_choice` over
:func:`histogram.psd.median.median_utility`, exact rejection sampling, vectorised over many copies of the
cell), picks the most distinguishing output on one sample and measures it on
a fresh one: with Clopper–Pearson bounds, ``ε_lb = ln(p_lo(D) / p_hi(D'))`` is
a lower bound on the privacy loss with probability at least ``1 - α``
(``α = 1e-6``, split over the two bounds). A correct mechanism must give
``ε_lb ≤ ε``; every deliberately broken variant in the catalogue must give
``ε_lb > ε`` on at least one pair, or the audit proves nothing. Seeds are
fixed, so the outcome is deterministic; the false-failure probability of the
correct mechanism is below α by construction.

The neighbouring pairs were found by searching all cells of up to 5 bins and
3 records with the exact pmf (:func:`median_probabilities`): pair "edge"
reaches a true loss of 0.93·ε, the largest among them.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import betaincinv

from histogram.noise import Randomness
from histogram.psd.median import exponential_choice, median_probabilities, median_utility

ALPHA = 1e-6
EPS = Fraction(1)
SELECT_RUNS = 20_000
TEST_RUNS = 200_000

# name: (bins of the cell, records of D, records of D', contribution bound Δ)
PAIRS = {
    "edge": (5, [0, 0, 3], [0, 0, 3, 3], 1),
    "tie": (3, [1], [1, 2], 1),
    "two-records": (5, [0, 0], [0, 0, 3, 3], 2),
}


class ArgmaxOnly:
    """Broken randomness: only the best candidates are ever accepted (the exact median is released)."""

    def __init__(self, inner):
        self.inner = inner

    def uniform_int(self, high):
        return self.inner.uniform_int(high)

    def bernoulli_exp(self, numerator, denominator):
        return np.asarray(numerator) == 0


# A variant maps (Δ) to (ε the sampler is told, Δ the sampler is told, drawer wrapper or None).
def correct(sens):
    return EPS, sens, None


def no_factor_two(sens):
    return 2 * EPS, sens, None  # exp(ε·u/Δ) instead of exp(ε·u/(2Δ))


def ignores_sensitivity(sens):
    return EPS, 1, None  # calibrated for Δ = 1 whatever the bound


def no_noise(sens):
    return EPS, sens, ArgmaxOnly


BROKEN = {
    "no factor 2": no_factor_two,
    "sensitivity ignored": ignores_sensitivity,
    "no noise": no_noise,
}


def sample(variant, bins: int, records: list[int], sens: int, runs: int, seed: str) -> np.ndarray:
    """Counts of each split point s = 1 … bins-1 over ``runs`` independent runs."""
    values = np.asarray(records, dtype=np.int64)
    cand = np.arange(1, bins)
    rank = (values[None, :] < cand[:, None]).sum(axis=1)
    utility = median_utility(rank, np.full(cand.size, values.size))
    epsilon, told_sens, wrap = variant(sens)
    drawer = Randomness.seeded(20240601).drawer(f"psd-median-audit/{seed}", 0)
    if wrap is not None:
        drawer = wrap(drawer)
    choice = exponential_choice(np.tile(utility, runs), np.full(runs, cand.size), epsilon, told_sens, drawer)
    return np.bincount(choice, minlength=cand.size)


def cp_lower(k: int, n: int, a: float) -> float:
    return 0.0 if k == 0 else float(betaincinv(k, n - k + 1, a))  # Beta(k, n-k+1) quantile


def cp_upper(k: int, n: int, a: float) -> float:
    return 1.0 if k == n else float(betaincinv(k + 1, n - k, 1 - a))


def audit(variant, pair: str) -> float:
    """Lower confidence bound on the privacy loss of ``variant`` on one neighbouring pair."""
    bins, d, d2, sens = PAIRS[pair]
    name = getattr(variant, "__name__", "v")
    a = sample(variant, bins, d, sens, SELECT_RUNS, f"{name}/{pair}/select/D")
    b = sample(variant, bins, d2, sens, SELECT_RUNS, f"{name}/{pair}/select/D'")
    ratio_ab = np.log((a + 1) / (b + 1))
    # the event: one output, in the direction where it separates the two inputs most
    if ratio_ab.max() >= -ratio_ab.min():
        event, num_in, den_in = int(ratio_ab.argmax()), d, d2
    else:
        event, num_in, den_in = int(ratio_ab.argmin()), d2, d
    num = sample(variant, bins, num_in, sens, TEST_RUNS, f"{name}/{pair}/test/num")[event]
    den = sample(variant, bins, den_in, sens, TEST_RUNS, f"{name}/{pair}/test/den")[event]
    lo = cp_lower(int(num), TEST_RUNS, ALPHA / 2)
    hi = cp_upper(int(den), TEST_RUNS, ALPHA / 2)
    return math.inf if hi == 0 else (-math.inf if lo == 0 else math.log(lo / hi))


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_private_median_stays_within_e_to_the_epsilon(pair):
    assert audit(correct, pair) <= float(EPS)


def test_the_audit_has_power_on_the_correct_mechanism():
    # the strongest pair's true loss is 0.93·ε; the audit must see most of it
    assert audit(correct, "edge") > 0.75 * float(EPS)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_every_broken_variant_is_caught(name):
    variant = BROKEN[name]
    losses = {pair: audit(variant, pair) for pair in PAIRS}
    assert max(losses.values()) > float(EPS), losses


def test_sampler_matches_the_exact_distribution():
    bins, d, _, sens = PAIRS["edge"]
    counts = sample(correct, bins, d, sens, TEST_RUNS, "fit")
    p = median_probabilities(np.array(d), 0, bins - 1, EPS, sens)
    sd = np.sqrt(p * (1 - p) / TEST_RUNS)
    assert np.all(np.abs(counts / TEST_RUNS - p) < 6 * sd)


def test_exact_distribution_of_the_worked_pair():
    # D = {0, 0, 3} in bins 0..4: u(s) = -|2r(s) - 3| = -1, -1, -1, -3 → weights e^{-ε/2}, …, e^{-3ε/2}
    p = median_probabilities(np.array([0, 0, 3]), 0, 4, EPS, 1)
    w = np.exp(-np.array([1, 1, 1, 3]) / 2)
    assert np.allclose(p, w / w.sum())
    q = median_probabilities(np.array([0, 0, 3, 3]), 0, 4, EPS, 1)
    worst = np.max(np.abs(np.log(p / q)))
    assert worst <= float(EPS)
    assert worst == pytest.approx(0.9284528164, rel=1e-9)
