"""Declared queries (issue 33 item 1): product-set answers and their intervals are valid bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from histogram.declared import (
    DeclaredQuery,
    answer_counts,
    discrete_laplace_variance,
    runs,
    sum_half_width,
)
from histogram.errors import MechanismError
from histogram.model_query import CountsAnswers


def _draw(rng: np.random.Generator, scale: float, shape: tuple[int, ...]) -> np.ndarray:
    a = math.exp(-1.0 / scale)
    return rng.geometric(1 - a, shape) - rng.geometric(1 - a, shape)


def test_product_set_answer_matches_boxes_and_brute_force() -> None:
    rng = np.random.default_rng(3)
    shape = (5, 3, 4)
    counts = rng.integers(-5, 50, size=int(np.prod(shape)))
    q = DeclaredQuery("q", ((0, 1, 3), (2,), (0, 1, 2, 3)), shape)
    brute = sum(counts.reshape(shape)[i, j, k] for i in (0, 1, 3) for j in (2,) for k in range(4))
    assert answer_counts(counts, q) == brute
    boxes = CountsAnswers(counts, shape)
    assert sum(boxes.box(lo, hi).value for lo, hi in q.boxes()) == brute
    assert q.bins == 12 and runs((0, 1, 3, 5, 6)) == [(0, 1), (3, 3), (5, 6)]


def test_bad_query_refused() -> None:
    with pytest.raises(MechanismError, match="sorted set"):
        DeclaredQuery("q", ((1, 0),), (3,))
    with pytest.raises(MechanismError, match="sorted set"):
        DeclaredQuery("q", ((0, 3),), (3,))


@pytest.mark.parametrize(("scale", "bins"), [(1.0, 1), (2.0, 10), (0.5, 60), (8.0, 4)])
def test_sum_interval_covers_at_least_the_confidence(scale: float, bins: int) -> None:
    """Monte Carlo: the true answer lies within ± half-width at least 95% of the time (the bound
    is valid, never an approximation), and it is not wildly loose (< 2× the normal quantile + 1)."""
    rng = np.random.default_rng(7)
    s = _draw(rng, scale, (100_000, bins)).sum(axis=1)
    h = sum_half_width(scale, bins, 0.95)
    assert (np.abs(s) <= h).mean() >= 0.95
    sd = math.sqrt(bins * discrete_laplace_variance(scale))
    assert abs(s.var() - sd**2) < 0.05 * sd**2
    assert h < 2 * 1.96 * sd + 1
