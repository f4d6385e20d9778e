"""Gaussian maths the copula models need: bivariate normal probabilities, correlation matrices.

Public maths only (no data, no randomness). Everything is vectorised numpy.

* :func:`bvn_cdf` — ``P(Z₁ ≤ h, Z₂ ≤ k)`` for a standard bivariate normal with
  correlation ρ, by Owen's T function (closed form; ``scipy.special.owens_t``).
* :func:`bvn_rectangle` — the probability of a rectangle, infinite bounds allowed.
* :func:`nearest_correlation` — Higham's (2002) alternating projections with
  Dykstra's correction onto {PSD} ∩ {unit diagonal}, then an eigenvalue floor
  so the result is positive definite (Cholesky works). Post-processing.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr, ndtri, owens_t

from histogram.errors import MechanismError

__all__ = ["bvn_cdf", "bvn_rectangle", "grid_cell_probabilities", "nearest_correlation", "thresholds"]

_TINY = 1e-12


def bvn_cdf(h: np.ndarray, k: np.ndarray, rho: float | np.ndarray) -> np.ndarray:
    """``Φ₂(h, k; ρ)`` elementwise (broadcasting); ``h``, ``k`` may be ±inf.

    Uses ``Φ₂ = ½Φ(h) + ½Φ(k) − T(h, a_h) − T(k, a_k) − β`` with
    ``a_h = (k − ρh)/(h√(1−ρ²))``, ``a_k = (h − ρk)/(k√(1−ρ²))`` and
    ``β = ½`` iff ``hk < 0`` (or ``hk = 0`` and ``h + k < 0``), else 0.
    """
    h, k, rho = np.broadcast_arrays(np.asarray(h, float), np.asarray(k, float), np.asarray(rho, float))
    rho = np.clip(rho, -1 + 1e-15, 1 - 1e-15)
    out = np.empty(h.shape)
    lo_inf = np.isneginf(h) | np.isneginf(k)
    h_inf = np.isposinf(h)
    k_inf = np.isposinf(k)
    out[lo_inf] = 0.0
    only_k = h_inf & ~lo_inf
    out[only_k] = ndtr(k[only_k])
    only_h = k_inf & ~lo_inf & ~h_inf
    out[only_h] = ndtr(h[only_h])
    fin = ~(lo_inf | h_inf | k_inf)
    hh = h[fin].copy()
    kk = k[fin].copy()
    r = rho[fin]
    hh[hh == 0] = _TINY
    kk[kk == 0] = _TINY
    s = np.sqrt((1 - r) * (1 + r))
    ah = (kk - r * hh) / (hh * s)
    ak = (hh - r * kk) / (kk * s)
    beta = np.where(hh * kk < 0, 0.5, 0.0)
    val = 0.5 * ndtr(hh) + 0.5 * ndtr(kk) - owens_t(hh, ah) - owens_t(kk, ak) - beta
    out[fin] = np.clip(val, 0.0, 1.0)
    return out


def bvn_rectangle(lo1, hi1, lo2, hi2, rho) -> np.ndarray:
    """``P(lo1 < Z₁ ≤ hi1, lo2 < Z₂ ≤ hi2)`` for the standard bivariate normal with correlation ρ."""
    p = bvn_cdf(hi1, hi2, rho) - bvn_cdf(lo1, hi2, rho) - bvn_cdf(hi1, lo2, rho) + bvn_cdf(lo1, lo2, rho)
    return np.clip(p, 0.0, 1.0)


def thresholds(probabilities: np.ndarray) -> np.ndarray:
    """Latent cut points of a discrete marginal: ``t[v+1] = Φ⁻¹(F(v))``, ``t[0] = -inf``, ``t[L] = +inf``.

    Level ``v`` of the attribute is the latent interval ``(t[v], t[v+1]]``.
    """
    p = np.asarray(probabilities, dtype=float)
    cdf = np.concatenate([[0.0], np.cumsum(p)])
    cdf = np.clip(cdf / cdf[-1], 0.0, 1.0)
    t = ndtri(cdf)
    t[0], t[-1] = -np.inf, np.inf
    return t


def grid_cell_probabilities(t1: np.ndarray, t2: np.ndarray, rho: float) -> np.ndarray:
    """``a × b`` cell probabilities of two discretised latent normals with correlation ρ."""
    cdf = bvn_cdf(t1[:, None], t2[None, :], rho)
    return np.clip(np.diff(np.diff(cdf, axis=0), axis=1), 0.0, 1.0)


def nearest_correlation(a: np.ndarray, *, floor: float = 1e-6, iterations: int = 200, tol: float = 1e-10) -> np.ndarray:
    """The nearest (Frobenius) correlation matrix to symmetric ``a``, made positive definite.

    Higham, "Computing the nearest correlation matrix — a problem from
    finance", IMA J. Numer. Anal. 22 (2002): alternate the projection onto
    the PSD cone (with Dykstra's correction) and onto unit-diagonal matrices.
    Afterwards eigenvalues below ``floor`` are raised to it and the matrix is
    rescaled to unit diagonal, so the result has a Cholesky factor.
    """
    a = np.asarray(a, dtype=float)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise MechanismError(f"a correlation matrix must be square, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise MechanismError("the correlation estimate contains NaN or inf")
    y = (a + a.T) / 2
    np.fill_diagonal(y, 1.0)
    ds = np.zeros_like(y)
    x = y
    for _ in range(iterations):
        r = y - ds
        w, v = np.linalg.eigh(r)
        x = (v * np.maximum(w, 0.0)) @ v.T
        ds = x - r
        y_new = x.copy()
        np.fill_diagonal(y_new, 1.0)
        done = np.linalg.norm(y_new - y) <= tol * max(1.0, np.linalg.norm(y))
        y = y_new
        if done:
            break
    w, v = np.linalg.eigh((y + y.T) / 2)
    y = (v * np.maximum(w, floor)) @ v.T
    d = np.sqrt(np.diag(y))
    y = y / d[:, None] / d[None, :]
    np.fill_diagonal(y, 1.0)
    return (y + y.T) / 2
