"""A high-dimensional synthetic population stream (issue 15): ``dpstream generate highdim``.

``m`` attributes (8–12) with ``L`` levels each, so the histogram has ``L^m``
cells (at least 10⁶: 8 × 6 levels = 1,679,616; 12 × 10 = 10¹²). The
population is fixed (``P`` people with stable ids, one record each per
timestep) and drifts over the ``N`` timesteps in three ways:

* **dependence**: 80 % of the people (group A) have a latent normal vector
  with a 2-factor correlation matrix ``Σ_t`` whose loadings rotate by
  ``drift · π/2`` over the horizon (so which attributes move together changes);
  the other 20 % (group B, fixed per person) have neighbouring attribute pairs
  (0,1), (2,3), … anti-correlated (−0.7). The population is a *mixture*, so a
  single Gaussian copula is a good but not an exact model of it;
* **marginals**: attribute ``j``'s latent location moves as
  ``0.6·drift·sin(2π t/N + φ_j)``, so level frequencies change over time;
* **people**: each person's latent vector is an AR(1) process (persistence
  0.9 per timestep) with the stationary law above, so a person's record at
  ``t`` resembles their record at ``t − 1`` (user-level privacy matters);
* **a jump of dependence** (``jump``, optional): from timestep ``⌊jump · N⌋`` on,
  group A's loadings are turned by a further quarter turn at once, so which
  attributes move together changes abruptly while every marginal stays on its
  smooth path (a change only a decision that sees dependence can notice).

Attribute ``j`` is cut into ``L`` levels at public, uneven latent cut points
(half the attributes at equally spaced normal quantiles raised to 1.5, the
others at a seeded random set), the same at every timestep.

The randomness is public workload (a numpy generator seeded from ``seed``),
never privacy noise.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import ndtri

__all__ = ["HighDimParams", "highdim_attributes", "highdim_latent_correlation", "highdim_stream", "MIN_CELLS"]

#: the smallest domain the family writes (issue 15: "10⁶+ cells")
MIN_CELLS = 10**6
_TAG = 0x41D1


@dataclass(frozen=True)
class HighDimParams:
    """Public parameters of the ``highdim`` stream.

    Attributes:
        attributes: m, the number of attributes (8–12).
        levels: L, levels per attribute (≥ 2); ``L^m`` must be ≥ 10⁶.
        drift: how far the stream drifts over its horizon (0 = stationary; 1 = the loadings
            rotate by a quarter turn and the marginals move by up to 0.6 latent sd).
        persistence: AR(1) coefficient of a person's latent vector between timesteps, in [0, 1).
        mixture: share of people in group B (the anti-correlated pairs), in [0, 1).
        jump: where in the horizon (a fraction in (0, 1)) the dependence jumps; None: no jump.
    """

    attributes: int = 8
    levels: int = 6
    drift: float = 1.0
    persistence: float = 0.9
    mixture: float = 0.2
    jump: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.attributes, bool) or not 8 <= self.attributes <= 12:
            raise ValueError(f"--attributes must be 8 to 12 for the highdim stream, got {self.attributes}")
        if isinstance(self.levels, bool) or self.levels < 2:
            raise ValueError(f"--levels must be >= 2, got {self.levels}")
        if self.cells < MIN_CELLS:
            raise ValueError(
                f"the highdim stream needs at least {MIN_CELLS:,} cells, but {self.levels} levels ^ "
                f"{self.attributes} attributes = {self.cells:,}: raise --levels or --attributes")
        if not (math.isfinite(self.drift) and 0.0 <= self.drift <= 4.0):
            raise ValueError(f"--drift must lie in [0, 4], got {self.drift}")
        if not 0.0 <= self.persistence < 1.0:
            raise ValueError(f"persistence must lie in [0, 1), got {self.persistence}")
        if not 0.0 <= self.mixture < 1.0:
            raise ValueError(f"mixture must lie in [0, 1), got {self.mixture}")
        if self.jump is not None and not (math.isfinite(self.jump) and 0.0 < self.jump < 1.0):
            raise ValueError(f"--jump must lie strictly between 0 and 1 (a share of the horizon), got {self.jump}")

    def jump_timestep(self, timesteps: int) -> int | None:
        """The first timestep after the jump of dependence (None: no jump)."""
        return None if self.jump is None else max(1, int(self.jump * timesteps))

    @property
    def cells(self) -> int:
        return self.levels**self.attributes


def highdim_attributes(params: HighDimParams) -> list[dict[str, Any]]:
    """``schema.attributes``: numeric ``a0 … a{m-1}``, each ``[0, L)`` in ``L`` unit bins (value = level)."""
    return [{"name": f"a{j}", "kind": "numeric", "min": 0, "max": params.levels, "bins": params.levels}
            for j in range(params.attributes)]


def highdim_latent_correlation(m: int, t: int, horizon: int, drift: float, jump_at: int | None = None) -> np.ndarray:
    """Group A's latent correlation matrix at timestep ``t`` (a rotating 2-factor model; from
    ``jump_at`` on, turned by a further quarter turn)."""
    phase = drift * np.pi / 2 * t / max(1, horizon - 1) + (np.pi / 2 if jump_at is not None and t >= jump_at else 0.0)
    base = np.linspace(0, np.pi, m)
    load = np.stack([0.8 * np.cos(base + phase), 0.6 * np.sin(2 * base - phase)], axis=1)
    sigma = load @ load.T
    np.fill_diagonal(sigma, 1.0)
    return sigma / np.sqrt(np.outer(np.diag(sigma), np.diag(sigma)))


def _group_b_correlation(m: int) -> np.ndarray:
    alt = np.eye(m)
    for j in range(0, m - 1, 2):
        alt[j, j + 1] = alt[j + 1, j] = -0.7
    return alt


def _cut_points(params: HighDimParams, rng: np.random.Generator) -> list[np.ndarray]:
    cuts = []
    for j in range(params.attributes):
        if j % 2:
            q = np.sort(rng.uniform(0.05, 0.95, params.levels - 1))
        else:
            q = np.linspace(0, 1, params.levels + 1)[1:-1] ** 1.5
        cuts.append(ndtri(q))
    return cuts


@dataclass(frozen=True)
class _Chunk:
    timestep: int
    ids: np.ndarray
    codes: np.ndarray


def highdim_stream(timesteps: int, population: int, seed: int, params: HighDimParams,
                   info: dict[str, Any] | None = None) -> Iterator[_Chunk]:
    """The population's records, one timestep at a time (``(P, m)`` int64 levels, stable ids)."""
    if timesteps < 1 or population < 1:
        raise ValueError("the highdim stream needs at least one timestep and one person")
    rng = np.random.default_rng([seed, _TAG])
    m, n = params.attributes, population
    cuts = _cut_points(params, rng)
    phases = rng.uniform(0, 2 * np.pi, m)
    group_b = rng.random(n) < params.mixture
    chol_b = np.linalg.cholesky(_group_b_correlation(m))
    a = params.persistence
    u = rng.standard_normal((n, m))  # each person's standardised innovation state (stationary N(0, I))
    ids = np.arange(n, dtype=np.int64)
    if info is not None:
        info.update(attributes=m, levels=params.levels, cells=params.cells, drift=params.drift,
                    group_b=int(group_b.sum()), jump_timestep=params.jump_timestep(timesteps))
    jump_at = params.jump_timestep(timesteps)
    for t in range(timesteps):
        if t:
            u = a * u + math.sqrt(1 - a * a) * rng.standard_normal((n, m))
        chol_a = np.linalg.cholesky(highdim_latent_correlation(m, t, timesteps, params.drift, jump_at))
        z = np.where(group_b[:, None], u @ chol_b.T, u @ chol_a.T)
        z += 0.6 * params.drift * np.sin(2 * np.pi * t / max(1, timesteps) + phases)
        codes = np.empty((n, m), dtype=np.int64)
        for j in range(m):
            codes[:, j] = np.searchsorted(cuts[j], z[:, j])
        yield _Chunk(t, ids, codes)


# -- the public query workload of `dpstream evaluate --mechanisms` -----------------------

#: range-query families: boxes constraining 1, 2, 3 attributes, or every attribute (the thesis's ch. 3 queries)
RANGE_KINDS = ("range1", "range2", "range3", "range_all")


def random_boxes(levels: tuple[int, ...], constrained: int, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` boxes (inclusive ``lo``, ``hi``, each ``(count, m)``) each constraining ``constrained`` attributes.

    Each constrained attribute gets a random sub-interval of its levels that is not the whole range;
    the others are left whole. Public workload (seeded numpy generator), never privacy noise.
    """
    m = len(levels)
    if not 1 <= constrained <= m:
        raise ValueError(f"a box constrains 1 to {m} attributes, got {constrained}")
    rng = np.random.default_rng([seed, 0xB0C5, constrained])
    top = np.asarray(levels, dtype=np.int64) - 1
    lo = np.zeros((count, m), dtype=np.int64)
    hi = np.tile(top, (count, 1))
    for q in range(count):
        for j in rng.choice(m, size=constrained, replace=False):
            a, b = sorted(rng.integers(0, levels[j], size=2).tolist())
            if a == 0 and b == top[j]:
                b -= 1
            lo[q, j], hi[q, j] = a, b
    return lo, hi


def query_workload(levels: tuple[int, ...], count: int, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``count`` boxes of every :data:`RANGE_KINDS` kind (``range3`` only with ≥ 3 attributes)."""
    m = len(levels)
    sizes = {"range1": 1, "range2": 2, "range3": 3, "range_all": m}
    return {kind: random_boxes(levels, d, count, seed) for kind, d in sizes.items() if d <= m}
