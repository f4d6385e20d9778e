"""PSD against LPA on a skewed 2-D point set (fixed seeds, measured margins).

A 128 × 128 grid; 20,000 records, 97 % of them in four tight clusters, 86 % of
the bins empty. Large range queries (sides 32–63 bins) must be answered more
accurately by PSD than by LPA at the same ε, and small queries (4 × 4 bins)
on empty areas must come out near zero. Measured with these seeds (mean
absolute error over 200 queries, three releases):

======  ===========  =================  ===========  ================
ε       LPA large    PSD (quad) large   LPA empty    PSD (quad) empty
======  ===========  =================  ===========  ================
1/2     72–94        43–47              8.8          0.8–1.1
1/10    392–452      190–246            44           2.2–3.7
======  ===========  =================  ===========  ================

The assertions below leave a wide margin around these figures.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from histogram.lpa import LaplaceMechanism
from histogram.noise import Randomness
from histogram.psd.mechanism import PSDMechanism
from histogram.query import RangeQueries, answer_range_queries

N = 128
SHAPE = (N, N)


@pytest.fixture(scope="module")
def workload():
    rng = np.random.default_rng(2024)
    centres = np.array([[30, 30], [90, 40], [60, 100], [100, 105]])
    weights = np.array([0.4, 0.3, 0.2, 0.1])
    n = 20_000
    clusters = [
        rng.normal(c, 4, (int(n * 0.97 * w), 2)) for c, w in zip(centres, weights, strict=True)
    ]
    pts = np.concatenate([*clusters, rng.uniform(0, N, (int(n * 0.03), 2))])
    idx = np.clip(pts.astype(np.int64), 0, N - 1)
    hist = np.bincount(idx[:, 0] * N + idx[:, 1], minlength=N * N).astype(np.int64)
    qrng = np.random.default_rng(7)
    lo = qrng.integers(0, N // 2, (200, 2))
    side = qrng.integers(N // 4, N // 2, (200, 2))
    large = RangeQueries(lo, np.minimum(lo + side, N - 1))
    grid = hist.reshape(SHAPE)
    corners = []
    while len(corners) < 200:
        c = qrng.integers(0, N - 4, 2)
        if grid[c[0] : c[0] + 4, c[1] : c[1] + 4].sum() == 0:
            corners.append(c)
    corners = np.array(corners)
    empty = RangeQueries(corners, corners + 3)
    return hist, large, empty


def errors(mechanism, hist, large, empty, eps, seeds=(0, 1, 2)):
    truth = answer_range_queries(hist, SHAPE, large)
    big, small = [], []
    for seed in seeds:
        out = mechanism.release(hist, eps, Randomness.seeded(seed).drawer("psd-accuracy", 0)).counts
        big.append(np.abs(answer_range_queries(out, SHAPE, large) - truth).mean())
        small.append(np.abs(answer_range_queries(out, SHAPE, empty)).mean())
    return np.array(big), np.array(small)


def test_the_point_set_is_skewed(workload):
    hist, _, _ = workload
    assert (hist == 0).mean() > 0.8
    top = np.sort(hist)[::-1]
    assert (
        top[: hist.size // 20].sum() > 0.8 * hist.sum()
    )  # 5 % of the bins hold > 80 % of the records


@pytest.mark.parametrize(
    ("eps", "empty_bound"),
    [(Fraction(1, 2), 2.0), (Fraction(1, 10), 6.0)],
)
def test_psd_beats_lpa_on_large_queries_and_empty_areas(workload, eps, empty_bound):
    hist, large, empty = workload
    psd_big, psd_small = errors(PSDMechanism(SHAPE), hist, large, empty, eps)
    lpa_big, lpa_small = errors(LaplaceMechanism(), hist, large, empty, eps)
    # large queries: PSD's error is well below LPA's for every seed
    assert np.all(psd_big < 0.75 * lpa_big), (psd_big, lpa_big)
    assert psd_big.mean() < 0.6 * lpa_big.mean()
    # small queries on empty areas: near zero, far below LPA's noise
    assert np.all(psd_small < empty_bound), psd_small
    assert psd_small.mean() < 0.2 * lpa_small.mean()


def test_every_variant_keeps_empty_areas_near_zero(workload):
    hist, _, empty = workload
    eps = Fraction(1, 2)
    _, lpa_small = errors(LaplaceMechanism(), hist, empty, empty, eps, seeds=(0,))
    for variant in ("kd", "hybrid"):
        _, small = errors(PSDMechanism(SHAPE, variant=variant), hist, empty, empty, eps, seeds=(0,))
        assert small.mean() < 0.5 * lpa_small.mean(), variant
