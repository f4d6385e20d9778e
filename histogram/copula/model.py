"""A released Gaussian copula model and everything computed from it (post-processing only).

:class:`GaussianCopula` holds what a DPCopula release publishes: one
probability vector per attribute (from the DP marginals), the DP correlation
matrix of the latent normal vector, and the DP estimate of the number of
records. Level ``v`` of attribute ``j`` is the latent interval
``(t_j[v], t_j[v+1]]`` with ``t_j[v+1] = Φ⁻¹(F_j(v))``.

Nothing here reads data: every answer is a function of the release, so it is
as private as the release (post-processing). Queries never materialise the
full histogram:

* :meth:`GaussianCopula.box_probability` — a range (box) query: exact closed
  forms for boxes that constrain one or two attributes (Owen's T), a
  96-node Gauss–Legendre integral of the bivariate form for three, and the
  share of a latent sample for more;
* :meth:`GaussianCopula.marginal` — a k-way marginal table: exact for k ≤ 2,
  from a synthetic sample for k ≥ 3;
* :meth:`GaussianCopula.sample` — synthetic records (DPCopula's Algorithm 3),
  drawn from a passed-in drawer's exact uniform integers (seeded for
  tests/evaluation, CSPRNG-keyed otherwise: :class:`histogram.noise.Randomness`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from scipy.special import ndtr, ndtri

from histogram.copula.gaussian import bvn_rectangle, grid_cell_probabilities, thresholds
from histogram.errors import MechanismError

__all__ = ["GaussianCopula", "NormalSource", "standard_normals"]

_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(96)


class NormalSource(Protocol):
    """Where synthetic samples get their randomness: any :class:`~histogram.noise.NoiseDrawer`."""

    def uniform_int(self, high: np.ndarray) -> np.ndarray: ...


_GRID = 2**53


def standard_normals(source: NormalSource, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal variates ``Φ⁻¹((U + ½)/2⁵³)`` from exact uniform integers ``U`` (post-processing only).

    Only the drawer's exact ``uniform_int`` is used, so recording and replaying
    drawers see the draw; the 53-bit grid truncates the tails at about 8.3σ,
    which is immaterial for sampling synthetic records from a released model.
    """
    size = int(np.prod(shape))
    u = source.uniform_int(np.full(size, _GRID, dtype=np.int64)).astype(np.float64)
    return ndtri((u + 0.5) / _GRID).reshape(shape)


@dataclass(frozen=True)
class GaussianCopula:
    """A Gaussian copula with discrete marginals (a released model; safe to publish).

    Attributes:
        marginals: per attribute, level probabilities (non-negative, sum 1).
        correlation: ``m × m`` positive definite correlation matrix of the latent normal.
        total: estimated number of records (DP; float, ≥ 0). Counts = total × probability.
    """

    marginals: tuple[np.ndarray, ...]
    correlation: np.ndarray
    total: float
    cuts: tuple[np.ndarray, ...] = field(init=False, repr=False)
    chol: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        m = len(self.marginals)
        corr = np.array(self.correlation, dtype=float)
        if corr.shape != (m, m):
            raise MechanismError(f"correlation must be {m}×{m} for {m} attributes, got {corr.shape}")
        probs = []
        for j, p in enumerate(self.marginals):
            p = np.array(p, dtype=float)
            if p.ndim != 1 or p.size < 1 or (p < 0).any() or not np.isclose(p.sum(), 1.0):
                raise MechanismError(f"marginal {j} must be a probability vector (non-negative, sum 1)")
            p.setflags(write=False)
            probs.append(p)
        try:
            chol = np.linalg.cholesky(corr)
        except np.linalg.LinAlgError as exc:
            raise MechanismError("correlation is not positive definite: project it with nearest_correlation") from exc
        corr.setflags(write=False)
        chol.setflags(write=False)
        object.__setattr__(self, "marginals", tuple(probs))
        object.__setattr__(self, "correlation", corr)
        object.__setattr__(self, "total", max(0.0, float(self.total)))
        object.__setattr__(self, "cuts", tuple(thresholds(p) for p in probs))
        object.__setattr__(self, "chol", chol)

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(p.size for p in self.marginals)

    @property
    def cells(self) -> int:
        """Number of cells of the full histogram (a Python int; may be astronomically large)."""
        out = 1
        for L in self.levels:
            out *= L
        return out

    # -- sampling ------------------------------------------------------------
    def latent_sample(self, size: int, source: NormalSource) -> np.ndarray:
        """``size × m`` draws of the latent normal vector ``N(0, correlation)``."""
        z = standard_normals(source, (int(size), len(self.marginals)))
        return z @ self.chol.T

    def discretise(self, latent: np.ndarray) -> np.ndarray:
        """Records (int64 levels) of latent draws: level ``v`` iff ``t[v] < z ≤ t[v+1]``."""
        out = np.empty(latent.shape, dtype=np.int64)
        for j, t in enumerate(self.cuts):
            out[:, j] = np.searchsorted(t[1:-1], latent[:, j], side="left")
        return out

    def sample(self, size: int, source: NormalSource) -> np.ndarray:
        """``size`` synthetic records (DPCopula Algorithm 3): latent normal → Φ → inverse DP marginal CDF."""
        return self.discretise(self.latent_sample(size, source))

    # -- queries -------------------------------------------------------------
    def _bounds(self, lo, hi) -> tuple[list[int], np.ndarray, np.ndarray]:
        m = len(self.marginals)
        lo = np.asarray(lo, dtype=np.int64).reshape(-1)
        hi = np.asarray(hi, dtype=np.int64).reshape(-1)
        if lo.size != m or hi.size != m:
            raise MechanismError(f"a box needs a low and a high level for each of the {m} attributes")
        top = np.asarray(self.levels) - 1
        if (lo < 0).any() or (hi > top).any():
            raise MechanismError("box bounds must lie inside each attribute's levels (inclusive bounds)")
        active = [j for j in range(m) if lo[j] > 0 or hi[j] < top[j]]
        low = np.array([self.cuts[j][lo[j]] for j in active])
        high = np.array([self.cuts[j][hi[j] + 1] for j in active])
        return active, low, high

    def box_probability(self, lo, hi, latent: np.ndarray | None = None) -> float:
        """Model probability of the box ``lo[j] ≤ x_j ≤ hi[j]`` (inclusive, all attributes).

        Exact for boxes constraining ≤ 2 attributes, quadrature for 3; for
        more, the share of ``latent`` (from :meth:`latent_sample`) in the box.

        Raises:
            MechanismError: an empty box, or > 3 constrained attributes without ``latent``.
        """
        active, low, high = self._bounds(lo, hi)
        if any(l_ >= h_ for l_, h_ in zip(low, high, strict=True)):
            return 0.0
        d = len(active)
        if d == 0:
            return 1.0
        if d == 1:
            return float(ndtr(high[0]) - ndtr(low[0]))
        c = self.correlation
        if d == 2:
            j, k = active
            return float(bvn_rectangle(low[0], high[0], low[1], high[1], c[j, k]))
        if d == 3:
            return self._box3(active, low, high)
        if latent is None:
            raise MechanismError(f"a box over {d} attributes needs a latent sample (latent_sample) to estimate it")
        inside = np.ones(latent.shape[0], dtype=bool)
        for i, j in enumerate(active):
            inside &= (latent[:, j] > low[i]) & (latent[:, j] <= high[i])
        return float(inside.mean())

    def _box3(self, active: list[int], low: np.ndarray, high: np.ndarray) -> float:
        """``∫ P((Z₂, Z₃) ∈ rect | Z₁ = z) dΦ(z)`` over ``(low₁, high₁]`` in the u = Φ(z) scale."""
        c = self.correlation
        a, b, e = active
        r12, r13, r23 = c[a, b], c[a, e], c[b, e]
        s2 = np.sqrt(max(1 - r12**2, 1e-15))
        s3 = np.sqrt(max(1 - r13**2, 1e-15))
        r = np.clip((r23 - r12 * r13) / (s2 * s3), -1.0, 1.0)
        u0, u1 = float(ndtr(low[0])), float(ndtr(high[0]))
        u = (u1 - u0) / 2 * _NODES + (u1 + u0) / 2
        z = ndtri(np.clip(u, 1e-300, 1 - 1e-16))
        inner = bvn_rectangle((low[1] - r12 * z) / s2, (high[1] - r12 * z) / s2, (low[2] - r13 * z) / s3, (high[2] - r13 * z) / s3, r)
        return float(np.clip((u1 - u0) / 2 * np.dot(_WEIGHTS, inner), 0.0, 1.0))

    def range_count(self, lo, hi, latent: np.ndarray | None = None) -> float:
        """Estimated number of records in the box: ``total × box_probability``."""
        return self.total * self.box_probability(lo, hi, latent)

    def marginal(self, attributes: tuple[int, ...], sample: np.ndarray | None = None) -> np.ndarray:
        """Estimated counts of the k-way marginal over ``attributes`` (shape = their levels).

        Exact model probabilities for k ≤ 2; for k ≥ 3 the normalised table of
        a synthetic ``sample`` (from :meth:`sample`), scaled to ``total``.
        """
        attrs = tuple(int(a) for a in attributes)
        if len(set(attrs)) != len(attrs) or not attrs or not all(0 <= a < len(self.marginals) for a in attrs):
            raise MechanismError(f"marginal attributes must be distinct indices in 0..{len(self.marginals) - 1}")
        if len(attrs) == 1:
            return self.total * self.marginals[attrs[0]].copy()
        if len(attrs) == 2:
            j, k = attrs
            return self.total * grid_cell_probabilities(self.cuts[j], self.cuts[k], float(self.correlation[j, k]))
        if sample is None:
            raise MechanismError(f"a {len(attrs)}-way marginal needs a synthetic sample (sample) to estimate it")
        shape = tuple(self.levels[a] for a in attrs)
        flat = np.ravel_multi_index(tuple(sample[:, a] for a in attrs), shape)
        counts = np.bincount(flat, minlength=int(np.prod(shape))).reshape(shape)
        return self.total * counts / max(1, sample.shape[0])
