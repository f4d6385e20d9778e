"""The lab's side of the error metrics: its seeded query workload and its summaries over runs.

The error figures themselves (:class:`histogram.accuracy.RunErrors` over a
:class:`histogram.accuracy.Workload`) are pure maths shared with the planner; this module adds
what only the evaluation does:

* :func:`build_workload`: the evaluation's public range-count workload, drawn with the
  evaluation's own seeded generator (thesis: "a random interval on each attribute"), or queries
  of a given size (Fig. 4.7: "the product of the query ranges on each dimension equals the given
  size", approximately here);
* :func:`summarise`, :func:`t_interval`, :func:`t_quantile`: means over runs with Student-t
  confidence intervals.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from histogram.accuracy import Workload
from histogram.query import random_range_queries, sized_range_queries

__all__ = ["build_workload", "t_interval", "t_quantile", "summarise"]


def build_workload(
    truth: np.ndarray,
    shape: Sequence[int],
    *,
    queries: int,
    seed: int,
    sanity: float = 1.0,
    query_size: int | None = None,
) -> Workload:
    """The evaluation's workload: ``truth`` (``(timesteps, bins)`` integer counts) measured on
    ``queries`` random range queries (``query_size``: each covering about that many bins; None:
    a uniformly random interval on every attribute) drawn from ``seed``, with the relative
    error's sanity bound ``sanity`` (records).

    The queries are public workload, not noise: they come from the evaluation's own generator
    (seeded by ``seed``; the same queries for every method of one evaluation).

    Raises:
        ValueError: ``queries < 0``, or what :meth:`histogram.accuracy.Workload.build` refuses.
    """
    if queries < 0:
        raise ValueError(f"--queries must be >= 0, got {queries}")
    shape = tuple(int(s) for s in shape)
    if queries == 0:
        return Workload.build(truth, shape, sanity=sanity)
    rng = np.random.default_rng([seed, 0x9E77])
    q = random_range_queries(shape, queries, rng) if query_size is None else \
        sized_range_queries(shape, query_size, queries, rng)
    return Workload.build(truth, shape, queries=q, sanity=sanity)


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Student-t confidence interval of the mean; ``None`` with fewer than 2 values."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return None
    mean = float(x.mean())
    sd = float(x.std(ddof=1))
    if sd == 0.0:
        return (mean, mean)
    half = t_quantile(x.size - 1, confidence) * sd / math.sqrt(x.size)
    return (mean - half, mean + half)


def _t_two_sided(theta: float, df: int) -> float:
    """``P(|T| <= √df·tan θ)`` for Student's t with integer ``df`` (Abramowitz & Stegun 26.7.3–4)."""
    s, c = math.sin(theta), math.cos(theta)
    c2 = c * c
    if df % 2:  # odd: (2/π)(θ + sin θ (cos θ + (2/3)cos³θ + … + (2·4⋯(df−3))/(1·3⋯(df−2)) cos^(df−2) θ))
        if df == 1:
            return 2 * theta / math.pi
        term, total = c, c
        for k in range(3, df - 1, 2):
            term *= c2 * (k - 1) / k
            total += term
        return 2 / math.pi * (theta + s * total)
    term, total = 1.0, 1.0  # even: sin θ (1 + (1/2)cos²θ + (1·3)/(2·4)cos⁴θ + …)
    for k in range(2, df - 1, 2):
        term *= c2 * (k - 1) / k
        total += term
    return s * total


@functools.lru_cache(maxsize=64)
def t_quantile(df: int, confidence: float) -> float:
    """The two-sided Student-t critical value: ``t`` with ``P(|T_df| <= t) = confidence``.

    The t distribution's closed form for integer degrees of freedom, inverted by bisection on
    ``θ = atan(t/√df)`` to full float precision: no scipy import (it cost ~0.2 s CPU of every
    ``evaluate``)."""
    if df < 1 or not 0.0 < confidence < 1.0:
        raise ValueError(f"need df >= 1 and 0 < confidence < 1, got df={df}, confidence={confidence}")
    lo, hi = 0.0, math.pi / 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if _t_two_sided(mid, df) < confidence:
            lo = mid
        else:
            hi = mid
    return math.sqrt(df) * math.tan((lo + hi) / 2)


def summarise(per_run: Sequence[dict[str, float | None]], confidence: float = 0.95) -> dict[str, object]:
    """Mean of every metric over runs, each with a ``NAME_ci`` companion ``[lo, hi]``."""
    out: dict[str, object] = {}
    if not per_run:
        return out
    for key in per_run[0]:
        vals = [r[key] for r in per_run]
        if any(v is None for v in vals):
            out[key], out[f"{key}_ci"] = None, None
            continue
        arr = np.asarray(vals, dtype=np.float64)
        out[key] = None if not np.all(np.isfinite(arr)) else float(arr.mean())
        ci = t_interval(arr, confidence) if out[key] is not None else None
        out[f"{key}_ci"] = None if ci is None else [ci[0], ci[1]]
    return out
