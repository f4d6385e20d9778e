"""Synthetic count streams like the public w-event benchmark's (issue 13 item 5).

The benchmark of Schäler, Hütter and Schäler (PVLDB 16(8), 2023; its code is
``chryenix/streamdp-benchmark``) runs every mechanism on synthetic
one-dimensional count streams of **1,000 timesteps** whose largest value is
scaled to **a ∈ {10, 100, 1,000, 10,000}**, with a floor of **2** (its
``min_period_value``) so that no stream is empty. Its own generator is periodic
with exponential growth and decay (basis 1.3, average period length 40–120,
period lengths drawn around that mean with deviation 2, at least 4; the decay
runs as long as the rest of the period, so troughs dip a little under the
floor, and below 0 at large scales, where we clip to 0: a count is never
negative); that is the ``exponential`` family here, with those parameters.

The other families are the stream shapes the w-event literature evaluates on
(sinusoidal, log-normal, linear trend, random walk, sudden change). The
benchmark's published code holds no generator for them, so their shape
parameters below are **our choice** (``docs/results.md`` says so); they share
the benchmark's length, scales and floor:

* ``sine``: ``floor + (a − floor)·(1 + sin(2πt/period + φ))/2``, period 40
  (the benchmark's shortest average period), random phase φ.
* ``lognormal``: independent draws ``exp(N(0, σ²))``, σ = 0.5, scaled so the
  stream's largest value is ``a``.
* ``trend``: a straight line from ``floor`` to ``a`` plus Gaussian noise with
  sd 2% of ``a``.
* ``randomwalk``: starts at ``a/2``, Gaussian steps with sd 2% of ``a``,
  reflected at ``floor`` and ``a``.
* ``sudden``: piecewise constant; a new level, uniform in ``[floor, a]``, after
  segments of geometric length with mean 100 timesteps.

Every value is rounded to a whole count (a histogram bin counts people). With
``bins > 1`` each bin is an independent stream of the family (its own phase,
draws and change points). The randomness is public workload, not privacy
noise: a numpy generator seeded from ``(seed, family)``, so the same seed gives
the same stream on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FAMILIES", "FamilyParams", "family_series", "family_chunks", "spread_over_bins"]

#: The synthetic families ``dpstream generate`` writes, with a one-line description each.
FAMILIES: dict[str, str] = {
    "exponential": "the benchmark's own generator: periods of exponential growth then decay (basis 1.3)",
    "sine": "periodic: a sine wave between the floor and the scale",
    "lognormal": "independent log-normal draws (sigma 0.5) scaled to the scale",
    "trend": "a linear trend from the floor to the scale, with Gaussian noise (sd 2% of the scale)",
    "randomwalk": "a Gaussian random walk (steps sd 2% of the scale) reflected inside [floor, scale]",
    "sudden": "piecewise constant levels that change suddenly (mean segment 100 timesteps)",
}
_TAGS = {name: i + 0x5E1 for i, name in enumerate(FAMILIES)}

#: The benchmark's floor (``min_period_value``): no timestep is empty.
FLOOR = 2.0


@dataclass(frozen=True)
class FamilyParams:
    """Public shape parameters of a family stream.

    Attributes:
        scale: ``a``, the largest count of the stream (people per bin); the benchmark uses
            10, 100, 1,000 and 10,000.
        period: average period length in timesteps (``sine``, ``exponential``).
        basis: growth factor per timestep of the ``exponential`` family (benchmark: 1.3).
        sigma: log-sd of the ``lognormal`` family.
        noise: sd of the ``trend`` noise and the ``randomwalk`` steps, as a fraction of ``scale``.
        segment: mean segment length of the ``sudden`` family, in timesteps.
    """

    scale: float = 1000.0
    period: int = 40
    basis: float = 1.3
    sigma: float = 0.5
    noise: float = 0.02
    segment: int = 100

    def __post_init__(self) -> None:
        if not (math.isfinite(self.scale) and self.scale > FLOOR):
            raise ValueError(f"--scale must be a number above the floor {FLOOR:g}, got {self.scale}")
        if self.period < 4:
            raise ValueError(f"--period must be >= 4 timesteps (the benchmark's shortest), got {self.period}")
        if not 1.0 < self.basis <= 4.0:
            raise ValueError(f"the exponential basis must lie in (1, 4], got {self.basis}")
        if not 0.0 < self.sigma <= 3.0:
            raise ValueError(f"the log-normal sigma must lie in (0, 3], got {self.sigma}")
        if not 0.0 <= self.noise <= 1.0:
            raise ValueError(f"the noise fraction must lie in [0, 1], got {self.noise}")
        if self.segment < 1:
            raise ValueError(f"the segment length must be >= 1 timestep, got {self.segment}")


def _scale_to(x: np.ndarray, scale: float) -> np.ndarray:
    """The benchmark's scaling: ``floor`` stays, the largest value becomes ``scale``."""
    top = float(x.max())
    if top <= FLOOR:
        return np.full_like(x, FLOOR)
    return FLOOR + (x - FLOOR) * (scale - FLOOR) / (top - FLOOR)


def _exponential(n: int, p: FamilyParams, rng: np.random.Generator) -> np.ndarray:
    out = np.empty(n)
    t = 0
    while t < n:
        length = 0
        while length < 4:  # the benchmark redraws a period shorter than 4
            length = int(rng.normal(p.period, 2.0))
        start = rng.random() * 2.0 + FLOOR
        half = length // 2
        k = np.arange(length)
        # growth for the first half (value·basis per step), then decay (value/basis per step)
        expo = np.where(k < half, k, 2 * (half - 1) - k)
        seg = start * p.basis ** expo.astype(np.float64)
        m = min(length, n - t)
        out[t:t + m] = seg[:m]
        t += length
    # the benchmark keeps the (scaled) values under the floor, negative ones included; a count
    # cannot be negative, so they become 0 here
    return np.maximum(_scale_to(out, p.scale), 0.0)


def _series(family: str, n: int, p: FamilyParams, rng: np.random.Generator) -> np.ndarray:
    a = p.scale
    t = np.arange(n, dtype=np.float64)
    if family == "exponential":
        return _exponential(n, p, rng)
    if family == "sine":
        phase = rng.uniform(0, 2 * math.pi)
        return FLOOR + (a - FLOOR) * (1 + np.sin(2 * math.pi * t / p.period + phase)) / 2
    if family == "lognormal":
        return _scale_to(FLOOR + rng.lognormal(0.0, p.sigma, n), a)
    if family == "trend":
        line = FLOOR + (a - FLOOR) * t / max(1, n - 1)
        return np.clip(line + rng.normal(0.0, p.noise * a, n), FLOOR, a)
    if family == "randomwalk":
        steps = rng.normal(0.0, p.noise * a, n)
        x = np.empty(n)
        v = a / 2
        span = a - FLOOR
        for i in range(n):  # reflect at both walls (the walk stays a walk, not a clipped one)
            v = (v + steps[i] - FLOOR) % (2 * span)
            v = FLOOR + (v if v <= span else 2 * span - v)
            x[i] = v
        return x
    if family == "sudden":
        x = np.empty(n)
        i = 0
        while i < n:
            length = int(rng.geometric(1.0 / p.segment))
            x[i:i + length] = rng.uniform(FLOOR, a)
            i += length
        return x
    raise ValueError(f"unknown family {family!r}: choose one of {', '.join(FAMILIES)}")


def family_series(family: str, timesteps: int, seed: int, *, bins: int = 1,
                  params: FamilyParams | None = None) -> np.ndarray:
    """The ``(timesteps, bins)`` whole-count matrix of ``family`` (seeded, reproducible)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}: choose one of {', '.join(FAMILIES)}")
    if timesteps < 1 or bins < 1:
        raise ValueError("a family stream needs at least one timestep and one bin")
    p = params or FamilyParams()
    cols = []
    for b in range(bins):
        rng = np.random.default_rng([seed, _TAGS[family], b])
        cols.append(_series(family, timesteps, p, rng))
    return np.rint(np.stack(cols, axis=1)).astype(np.int64)


def spread_over_bins(totals: np.ndarray, bins: int, seed: int, alpha: float = 1.0) -> np.ndarray:
    """``(timesteps, bins)`` counts whose row sums are ``totals``: each timestep's people spread
    over the bins by a multinomial draw with shares from one Dirichlet(``alpha``) draw (public
    workload for the planner's synthetic streams: seeded, never noise)."""
    totals = np.maximum(np.asarray(totals, dtype=np.int64), 0)
    if bins == 1:
        return totals[:, None].copy()
    rng = np.random.default_rng([seed, bins, 0x91A])
    shares = rng.dirichlet(np.full(bins, float(alpha)))
    return rng.multinomial(totals, shares).astype(np.int64)


def family_attributes(bins: int) -> list[dict[str, Any]]:
    """``schema.attributes`` of a family stream: one numeric attribute ``bin`` with ``bins`` bins."""
    return [{"name": "bin", "kind": "numeric", "min": 0, "max": bins, "bins": bins}]


@dataclass(frozen=True)
class _Chunk:
    timestep: int
    ids: np.ndarray
    codes: np.ndarray


def family_chunks(counts: np.ndarray) -> Iterator[_Chunk]:
    """One event per counted person: ``counts[t, b]`` rows with code ``b`` at timestep ``t``.

    Each event gets a fresh person id (one record per person per timestep, so contribution
    bounding keeps all of them and the windowed counts equal ``counts``)."""
    next_id = 0
    for t in range(counts.shape[0]):
        row = counts[t]
        codes = np.repeat(np.arange(row.size, dtype=np.int64), row)[:, None]
        ids = np.arange(next_id, next_id + codes.shape[0], dtype=np.int64)
        next_id += codes.shape[0]
        yield _Chunk(t, ids, codes)
