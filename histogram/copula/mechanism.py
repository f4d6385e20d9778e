"""DPCopula (Li, Xiong & Jiang, EDBT 2014; thesis ch. 3): a DP Gaussian copula of a record table.

One release at a total ε (charged once, by the caller's accountant, before
:meth:`DPCopula.release` draws anything) spends

* ``ε₁ = ε·k/(k+1)`` on the marginals: all ``m`` one-way count vectors get
  discrete Laplace noise of scale ``c·m/ε₁`` (their concatenation has L1
  sensitivity ``c·m`` for a person with at most ``c`` records), which is the
  paper's ``ε₁/m`` per margin;
* ``ε₂ = ε/(k+1)`` on the ``P = m(m−1)/2`` pairwise dependence statistics,
  ``ε₂/P`` each (the paper's Algorithm 4/5 split; k is the paper's ratio,
  default 8).

Dependence variants (``variant``):

``kendall`` (the paper's main variant)
    Kendall's τ-a of each pair with the denominator floored at a *public*
    ``min_records`` = n₀: ``τ₀ = (n_c − n_d) / C(max(n, n₀), 2)``. The paper's
    Lemma 4.1 gives Δ = 4/(n+1) with the data's own n, which is private under
    add/remove neighbours; with the floor, Δ = 4/(n₀+1) for every n
    (``docs/privacy.md``, DPCopula section). τ₀ is released on the grid
    ``γ = Δ/K``: ``Q = ⌊τ₀/γ⌋`` changes by at most K between neighbours
    (``|⌊x⌋ − ⌊y⌋| < |x − y| + 1``), and gets discrete Laplace noise of
    scale ``c·P·K/ε₂``: exact, pure ε₂-DP.
``mle`` (the paper's Algorithm 2, subsample and aggregate)
    Every record is put in one of ``l = partitions`` parts by a uniform draw
    of its own; each part's latent correlation estimate (normal scores of
    within-part mid-ranks, Pearson correlation: the standard closed-form
    approximation of the Gaussian-copula pseudo-MLE) is clipped to [−1, 1]
    and rounded to the grid 1/K; the sum over parts changes by at most 2K
    per coefficient when one record moves, and gets noise ``c·P·2K/ε₂``.
``median`` (seed 001's data: median-split two-way tables)
    Split points are the levels closest to the median of each *released*
    marginal (post-processing of the ε₁ part), every pair's 2 × 2 table of
    above/below counts gets noise ``c·P/ε₂`` per cell (one record moves one
    cell of each table), and ρ is the latent correlation that reproduces the
    noisy table's concordance (the tetrachoric estimate; seed 001's Bayesian
    posterior uses the same likelihood, we report its point estimate).

Post-processing (no privacy cost): noisy marginals are clipped at 0 and
normalised; τ is mapped to ρ either by the paper's ``sin(πτ/2)``
(``tau_mapping="paper"``, exact only for continuous data) or by solving for
the ρ whose discretised latent normal (with the released marginals) has that
τ-a (``"discrete"``, default: binned data are full of ties); likewise the
``mle`` variant's averaged normal-score correlation is mapped to the ρ whose
discretised model has that score correlation (``"discrete"``) or used as ρ
(``"paper"``); the matrix is
projected to the nearest positive definite correlation matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import comb

import numpy as np
from scipy.special import ndtr, ndtri

from histogram.copula.gaussian import (
    bvn_cdf,
    grid_cell_probabilities,
    nearest_correlation,
    thresholds,
)
from histogram.copula.model import GaussianCopula
from histogram.copula.statistics import (
    check_records,
    concordance,
    median_split_table,
    pairs,
)
from histogram.errors import MechanismError
from histogram.noise import NoiseDrawer
from histogram.records import RecordTable, rows_and_tables

__all__ = ["DPCopula", "CopulaRelease", "VARIANTS", "tau_of_rho", "kendall_grid_statistic", "probabilities"]

VARIANTS = ("kendall", "mle", "median")


def _positive_fraction(value: object, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, Fraction | int) or value <= 0:
        raise MechanismError(f"{name} must be a positive exact number (int or Fraction), got {value!r}")
    return Fraction(value)


def kendall_grid_statistic(s: int, n: int, min_records: int, resolution: int) -> int:
    """``⌊τ₀ / γ⌋`` with ``τ₀ = s / C(max(n, n₀), 2)`` and ``γ = 4/((n₀+1)·K)``, exactly in integers."""
    d = comb(max(n, min_records), 2)
    return (s * resolution * (min_records + 1)) // (4 * d)


def tau_of_rho(t1: np.ndarray, t2: np.ndarray, rho: float) -> float:
    """τ-a (population form ``P(conc) − P(disc)``) of two discretised latent normals with correlation ρ."""
    return _tau_of_cells(grid_cell_probabilities(t1, t2, rho))


def _tau_of_cells(p: np.ndarray) -> float:
    """τ-a of the two-way cell probabilities ``p``."""
    above = np.zeros_like(p)
    above[:-1] = np.cumsum(p[::-1], axis=0)[::-1][1:]
    right = np.zeros_like(p)
    right[:, :-1] = np.cumsum(above[:, ::-1], axis=1)[:, ::-1][:, 1:]
    left = np.zeros_like(p)
    left[:, 1:] = np.cumsum(above, axis=1)[:, :-1]
    return float(2 * (p * (right - left)).sum())


def _cells_many(t1: np.ndarray, t2: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """:func:`grid_cell_probabilities` of several pairs at once: ``t1`` ``(P, a+1)``, ``t2``
    ``(P, b+1)``, ``rho`` ``(P,)`` → ``(P, a, b)``, element for element the same values."""
    cdf = bvn_cdf(t1[:, :, None], t2[:, None, :], rho[:, None, None])
    return np.clip(np.diff(np.diff(cdf, axis=1), axis=2), 0.0, 1.0)


def _solve_increasing_many(f, targets: np.ndarray, iterations: int = 50) -> np.ndarray:
    """:func:`_solve_increasing` for many increasing functions at once: ``f(rhos)`` evaluates item i
    at ``rhos[i]``. Every item takes the decisions the one-at-a-time bisection takes (same ρ)."""
    t = np.asarray(targets, dtype=float)
    lo, hi = np.full(t.size, -0.9999), np.full(t.size, 0.9999)
    at_low, at_high = t <= f(lo), t >= f(hi)
    for _ in range(iterations):
        mid = (lo + hi) / 2
        below = f(mid) < t
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    out = (lo + hi) / 2
    out[at_high] = 0.9999
    out[at_low] = -0.9999
    return out


def _solve_pairs(levels: tuple[int, ...], targets: np.ndarray, value) -> np.ndarray:
    """Per attribute pair (:func:`pairs` order), the ρ where the increasing ``value(j_cells, k_cells, p)``
    meets its target: one batched bisection per group of pairs with the same table shape.
    ``value(js, ks, cells)`` maps ``(P, a, b)`` cell probabilities of pairs ``js``/``ks`` to ``(P,)``."""
    ps = pairs(len(levels))
    out = np.empty(len(ps))
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (j, k) in enumerate(ps):
        groups.setdefault((levels[j], levels[k]), []).append(i)
    for idx in groups.values():
        js = [ps[i][0] for i in idx]
        ks = [ps[i][1] for i in idx]
        out[idx] = _solve_increasing_many(lambda r, js=js, ks=ks: value(js, ks, r), np.asarray(targets)[idx])
    return out


def _solve_increasing(f, target: float, iterations: int = 50) -> float:
    """ρ ∈ [−1, 1] with ``f(ρ) = target`` for increasing ``f`` (bisection; clamps outside the range)."""
    lo, hi = -0.9999, 0.9999
    if target <= f(lo):
        return lo
    if target >= f(hi):
        return hi
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class CopulaRelease:
    """One DPCopula release: everything in it is DP output and may be published.

    Attributes:
        model: the released Gaussian copula (marginals, correlation, total).
        marginal_counts: the noisy one-way counts (int64), one vector per attribute.
        dependence: the noisy per-pair statistic on its published scale (τ₀ for
            ``kendall``, the averaged correlation for ``mle``, 2 × 2 noisy
            counts flattened for ``median``), in :func:`pairs` order.
        raw_correlation: the correlation estimate before projection (may be indefinite).
        epsilon: the ε this release cost (ε₁ + ε₂).
        variant: ``kendall`` | ``mle`` | ``median``.
        intervals: ``median`` with the Bayes estimator: per pair, the 95 %
            posterior interval of ρ (before projection), else None.
    """

    model: GaussianCopula
    marginal_counts: tuple[np.ndarray, ...]
    dependence: np.ndarray
    raw_correlation: np.ndarray
    epsilon: Fraction
    variant: str
    intervals: np.ndarray | None = None


@dataclass(frozen=True)
class DPCopula:
    """The DPCopula mechanism over a fixed public domain (``levels`` per attribute).

    Attributes:
        levels: number of levels of each attribute (public; ≥ 2 attributes).
        variant: one of :data:`VARIANTS`.
        ratio: the paper's k = ε₁/ε₂ (exact; default 8).
        min_records: n₀, a public floor on the Kendall denominator (≥ 2);
            set it near the smallest per-timestep population you expect.
        partitions: l, the number of parts of the ``mle`` variant.
        resolution: K, grid points per sensitivity unit (≥ 1).
        sensitivity: c, records per person per timestep (contribution bound).
        tau_mapping: ``discrete`` (default) or ``paper`` (``sin(πτ/2)``).
        median_estimator: ``bayes`` (default: seed 001's noise-aware posterior,
            mean and 95 % interval per pair) or ``tetrachoric`` (point estimate).
    """

    levels: tuple[int, ...]
    variant: str = "kendall"
    ratio: Fraction = Fraction(8)
    min_records: int = 100
    partitions: int = 20
    resolution: int = 1000
    sensitivity: int = 1
    tau_mapping: str = "discrete"
    median_estimator: str = "bayes"
    name: str = "dpcopula"

    def __post_init__(self) -> None:
        levels = tuple(self.levels)
        if len(levels) < 2 or any(isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 2 for v in levels):
            raise MechanismError(f"levels must list >= 2 attributes with >= 2 levels each, got {self.levels!r}")
        object.__setattr__(self, "levels", tuple(int(v) for v in levels))
        if self.variant not in VARIANTS:
            raise MechanismError(f"unknown DPCopula variant {self.variant!r}: choose one of {', '.join(VARIANTS)}")
        object.__setattr__(self, "ratio", _positive_fraction(self.ratio, "ratio (ε₁/ε₂)"))
        for name, low in (("min_records", 2), ("partitions", 1), ("resolution", 1), ("sensitivity", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise MechanismError(f"{name} must be an integer >= {low}, got {v!r}")
        if self.tau_mapping not in ("discrete", "paper"):
            raise MechanismError(f"tau_mapping must be 'discrete' or 'paper', got {self.tau_mapping!r}")
        if self.median_estimator not in ("bayes", "tetrachoric"):
            raise MechanismError(f"median_estimator must be 'bayes' or 'tetrachoric', got {self.median_estimator!r}")

    # -- privacy map -------------------------------------------------------
    @property
    def pair_count(self) -> int:
        return comb(len(self.levels), 2)

    def split(self, epsilon: Fraction) -> tuple[Fraction, Fraction]:
        """``(ε₁, ε₂)``: marginals and dependence shares of ``epsilon``; they sum to it exactly."""
        eps = _positive_fraction(epsilon, "epsilon")
        eps1 = eps * self.ratio / (self.ratio + 1)
        return eps1, eps - eps1

    def marginal_scale(self, epsilon: Fraction) -> Fraction:
        """Discrete Laplace scale of each one-way count: ``c·m/ε₁``."""
        eps1, _ = self.split(epsilon)
        return Fraction(self.sensitivity * len(self.levels)) / eps1

    def dependence_sensitivity(self) -> int:
        """L1 sensitivity of the integer per-pair statistic vector (all P pairs), for one person."""
        per_pair = {"kendall": self.resolution, "mle": 2 * self.resolution, "median": 1}[self.variant]
        return self.sensitivity * self.pair_count * per_pair

    def dependence_scale(self, epsilon: Fraction) -> Fraction:
        """Discrete Laplace scale of each per-pair integer statistic: sensitivity / ε₂."""
        _, eps2 = self.split(epsilon)
        return Fraction(self.dependence_sensitivity()) / eps2

    def epsilon(self, epsilon: Fraction) -> Fraction:
        """The ε one release at ``epsilon`` costs (all of it: ε₁ + ε₂)."""
        return sum(self.split(epsilon), Fraction(0))

    # -- release -----------------------------------------------------------
    def release(self, records: np.ndarray | RecordTable, epsilon: Fraction, noise: NoiseDrawer) -> CopulaRelease:
        """Release a DP Gaussian copula of ``records`` at ``epsilon`` (already charged by the caller)."""
        x, table = rows_and_tables(records, self.levels, check_records)
        levels = self.levels
        m = len(levels)
        true_marginals = [table((j,)) for j in range(m)]
        flat = np.concatenate(true_marginals)
        noisy_flat = flat + np.asarray(noise.discrete_laplace(self.marginal_scale(epsilon), flat.size), dtype=np.int64)
        cuts = np.cumsum([0, *levels])
        noisy_marginals = tuple(noisy_flat[cuts[j] : cuts[j + 1]].copy() for j in range(m))
        for v in noisy_marginals:
            v.setflags(write=False)
        probs = tuple(probabilities(v) for v in noisy_marginals)
        totals = [float(v.sum()) for v in noisy_marginals]
        total = max(0.0, float(np.mean(totals)))
        scale = self.dependence_scale(epsilon)
        ps = pairs(m)
        intervals = None
        if self.variant == "kendall":
            stats = np.array(
                [kendall_grid_statistic(concordance(table((j, k))), x.shape[0], self.min_records, self.resolution)
                 for j, k in ps],
                dtype=np.int64,
            )
            noisy = stats + np.asarray(noise.discrete_laplace(scale, len(ps)), dtype=np.int64)
            gamma = 4.0 / ((self.min_records + 1) * self.resolution)
            tau = np.clip((noisy + 0.5) * gamma, -1.0, 1.0)
            # undo the floor on the denominator with the DP total (post-processing)
            n_hat = max(total, 2.0)
            if n_hat < self.min_records:
                tau = np.clip(tau * comb(self.min_records, 2) / (n_hat * (n_hat - 1) / 2), -1.0, 1.0)
            dependence = tau
            rho = self._rho_from_tau(tau, probs)
        elif self.variant == "mle":
            part = noise.uniform_int(np.full(x.shape[0], self.partitions, dtype=np.int64)) if x.shape[0] else np.zeros(0, np.int64)
            stats = _partition_sums(x, part, self.partitions, self.resolution, ps)
            noisy = stats + np.asarray(noise.discrete_laplace(scale, len(ps)), dtype=np.int64)
            dependence = np.clip(noisy / (self.resolution * self.partitions), -1.0, 1.0)
            rho = self._rho_from_scores(dependence, probs)
        else:
            split = [_median_cut(p) for p in probs]
            tables = np.stack([median_split_table(x, j, k, split[j], split[k]).reshape(-1) for j, k in ps])
            noisy = tables + np.asarray(noise.discrete_laplace(scale, tables.size), dtype=np.int64).reshape(tables.shape)
            dependence = noisy.astype(np.int64)
            z = [float(ndtri(np.clip(p[: split[j] + 1].sum(), 1e-12, 1 - 1e-12))) for j, p in enumerate(probs)]
            if self.median_estimator == "bayes":
                post = [posterior_from_table(noisy[i], z[j], z[k], float(scale)) for i, (j, k) in enumerate(ps)]
                rho = np.array([m_ for m_, _, _ in post])
                intervals = np.array([[lo, hi] for _, lo, hi in post])
            else:
                rho = np.array([_rho_from_table(noisy[i], z[j], z[k]) for i, (j, k) in enumerate(ps)])
        raw = np.eye(m)
        for i, (j, k) in enumerate(ps):
            raw[j, k] = raw[k, j] = rho[i]
        corr = nearest_correlation(raw)
        dependence = np.asarray(dependence)
        dependence.setflags(write=False)
        raw.setflags(write=False)
        model = GaussianCopula(probs, corr, total)
        if intervals is not None:
            intervals.setflags(write=False)
        return CopulaRelease(model, noisy_marginals, dependence, raw, self.epsilon(epsilon), self.variant, intervals)

    def _rho_from_scores(self, r: np.ndarray, probs: tuple[np.ndarray, ...]) -> np.ndarray:
        """``mle``: the latent ρ whose discretised model has normal-score correlation ``r`` (post-processing).

        Binned data understate the latent correlation (ties); with ``tau_mapping="discrete"``
        each averaged noisy coefficient is mapped through the released marginals as Kendall's
        τ is, which removes that bias; ``"paper"`` uses ``r`` as ρ (the paper's continuous case).
        """
        if self.tau_mapping == "paper":
            return np.asarray(r, dtype=float).copy()
        cuts = [thresholds(p) for p in probs]
        scores = [_level_scores(p) for p in probs]

        def value(js, ks, rho):
            cells = _cells_many(np.stack([cuts[j] for j in js]), np.stack([cuts[k] for k in ks]), rho)
            return np.array([_score_correlation_of_cells(c, scores[j], scores[k]) for c, j, k in zip(cells, js, ks, strict=True)])

        return _solve_pairs(self.levels, np.asarray(r, dtype=float), value)

    def _rho_from_tau(self, tau: np.ndarray, probs: tuple[np.ndarray, ...]) -> np.ndarray:
        if self.tau_mapping == "paper":
            return np.sin(np.pi / 2 * tau)
        cuts = [thresholds(p) for p in probs]

        def value(js, ks, rho):
            cells = _cells_many(np.stack([cuts[j] for j in js]), np.stack([cuts[k] for k in ks]), rho)
            return np.array([_tau_of_cells(c) for c in cells])

        return _solve_pairs(self.levels, np.asarray(tau, dtype=float), value)


def _level_scores(p: np.ndarray) -> np.ndarray:
    """Population normal score of each level: ``Φ⁻¹`` of its mid cumulative probability."""
    p = np.asarray(p, dtype=float)
    mid = np.cumsum(p) - p / 2
    return ndtri(np.clip(mid, 1e-12, 1 - 1e-12))


def score_correlation(t1: np.ndarray, t2: np.ndarray, s1: np.ndarray, s2: np.ndarray, rho: float) -> float:
    """Correlation of the level normal scores ``s1``, ``s2`` under the discretised latent normal with ρ."""
    return _score_correlation_of_cells(grid_cell_probabilities(t1, t2, rho), s1, s2)


def _score_correlation_of_cells(p: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> float:
    p1, p2 = p.sum(axis=1), p.sum(axis=0)
    c1, c2 = s1 - (p1 * s1).sum(), s2 - (p2 * s2).sum()
    v1, v2 = (p1 * c1**2).sum(), (p2 * c2**2).sum()
    if v1 <= 0 or v2 <= 0:
        return 0.0
    return float((p * np.outer(c1, c2)).sum() / np.sqrt(v1 * v2))


def probabilities(noisy: np.ndarray) -> np.ndarray:
    """Noisy counts → probabilities: clip at 0, normalise; uniform when nothing is left (the released
    model's marginals, recomputed by anyone from the published counts)."""
    c = np.maximum(np.asarray(noisy, dtype=float), 0.0)
    s = c.sum()
    return c / s if s > 0 else np.full(c.size, 1.0 / c.size)


def _median_cut(p: np.ndarray) -> int:
    """The level v in 0..L−2 whose cumulative probability is closest to 1/2 (split: ≤ v vs > v)."""
    cdf = np.cumsum(p)[:-1]
    return int(np.argmin(np.abs(cdf - 0.5)))


def _rho_from_table(cells: np.ndarray, zj: float, zk: float) -> float:
    """Latent ρ whose model 2 × 2 table at cut points (zj, zk) has the noisy table's concordance."""
    c = np.maximum(np.asarray(cells, dtype=float), 0.0)
    if c.sum() <= 0:
        return 0.0
    p = c / c.sum()
    q = (p[0] + p[3]) - (p[1] + p[2])
    fj, fk = float(ndtr(zj)), float(ndtr(zk))

    def model(r: float) -> float:
        p00 = float(bvn_cdf(zj, zk, r))
        return 2 * (1 - fj - fk + 2 * p00) - 1

    return _solve_increasing(model, q)


_RHO_GRID = np.linspace(-0.995, 0.995, 399)


def posterior_from_table(cells: np.ndarray, zj: float, zk: float, scale: float) -> tuple[float, float, float]:
    """Seed 001's noise-aware posterior of ρ from one noisy 2 × 2 table: (mean, 2.5 %, 97.5 %).

    Uniform prior on a grid of ρ; likelihood of the noisy cells ``ỹ = y + noise``
    with ``y ~ Multinomial(n̂, p(ρ))`` (``p`` the latent quadrant probabilities at
    the released cut points ``zj``, ``zk``) and independent discrete Laplace noise
    of ``scale``, both replaced by their normal approximations (mean ``n̂·p``,
    covariance ``n̂(diag p − ppᵀ) + v·I``, ``v`` the noise variance). Seed 001 uses
    the exact sum over true counts with medians at 0 and a public n; here n is
    private, so ``n̂`` is the noisy table's total. Post-processing only.
    """
    y = np.asarray(cells, dtype=float)
    n_hat = max(float(y.sum()), 1.0)
    alpha = np.exp(-1.0 / scale)
    v = 2 * alpha / (1 - alpha) ** 2
    fj, fk = float(ndtr(zj)), float(ndtr(zk))
    p00 = bvn_cdf(np.full(_RHO_GRID.size, zj), np.full(_RHO_GRID.size, zk), _RHO_GRID)
    p = np.stack([p00, fj - p00, fk - p00, 1 - fj - fk + p00], axis=1).clip(1e-12, 1.0)
    cov = n_hat * (p[:, :, None] * np.eye(4)[None] - p[:, :, None] * p[:, None, :]) + (v + 1e-9) * np.eye(4)[None]
    resid = y[None, :] - n_hat * p
    sol = np.linalg.solve(cov, resid[:, :, None])[:, :, 0]
    _, logdet = np.linalg.slogdet(cov)
    loglik = -0.5 * (resid * sol).sum(axis=1) - 0.5 * logdet
    w = np.exp(loglik - loglik.max())
    w /= w.sum()
    cdf = np.cumsum(w)
    mean = float((w * _RHO_GRID).sum())
    lo = float(_RHO_GRID[np.searchsorted(cdf, 0.025)])
    hi = float(_RHO_GRID[min(np.searchsorted(cdf, 0.975), _RHO_GRID.size - 1)])
    return mean, lo, hi


def _partition_sums(x: np.ndarray, part: np.ndarray, parts: int, resolution: int, ps) -> np.ndarray:
    """Σ over parts of ``round(K · r_t)`` per pair, ``r_t`` the part's normal-scores correlation (0 if < 3 records).

    Records are discrete levels, so each part's mid-ranks come from counting:
    a level ``v`` held by ``N_t[v]`` records of part ``t`` has mid-rank
    ``cum_t[v] − (N_t[v] − 1)/2`` (``cum_t`` the cumulative count), exactly
    the ``average`` ranks of a sort, without importing ``scipy.stats`` (which
    alone took ~1 s of a 10⁹-cell step). The normal score of a record is
    ``Φ⁻¹(mid-rank/(n_t + 1))``; per part and pair, Pearson's r of the scores
    comes from per-part sums and Gram matrices (one matrix product per part), so the
    cost is O(n·m²) whatever the number of parts. A constant column in a part gives r = 0.
    """
    m = x.shape[1]
    out = np.zeros(len(ps), dtype=np.int64)
    if x.shape[0] == 0:
        return out
    part = np.asarray(part, dtype=np.int64)
    n_t = np.bincount(part, minlength=parts).astype(np.float64)
    # the records grouped by part (stable), each attribute's scores one contiguous row of an (m, n)
    # block: per part, the sums and the Gram matrix of its scores are then one matrix product (BLAS)
    order = np.argsort(part, kind="stable")
    part = part[order]
    scores = np.empty((m, x.shape[0]), dtype=np.float64)
    for j in range(m):
        col = x[order, j]
        levels = int(col.max()) + 1
        key = part * levels + col
        counts = np.bincount(key, minlength=parts * levels).reshape(parts, levels).astype(np.float64)
        mid = np.cumsum(counts, axis=1) - (counts - 1) / 2
        table = ndtri(mid / (n_t[:, None] + 1))
        scores[j] = table.reshape(-1)[key]
    bounds = np.concatenate([[0], np.cumsum(n_t.astype(np.int64))])
    sums = np.zeros((parts, m))
    gram = np.zeros((parts, m, m))
    for t in range(parts):
        block = scores[:, bounds[t]:bounds[t + 1]]
        if block.shape[1]:
            sums[t] = block.sum(axis=1)
            gram[t] = block @ block.T
    safe_n = np.maximum(n_t, 1.0)

    def centred(j: int, k: int) -> np.ndarray:
        return gram[:, j, k] - sums[:, j] * sums[:, k] / safe_n

    enough = n_t >= 3
    # a column constant within a part has variance 0 (up to rounding): its r is 0
    var = [np.where(centred(j, j) > 1e-9 * safe_n, centred(j, j), np.nan) for j in range(m)]
    for i, (j, k) in enumerate(ps):
        with np.errstate(invalid="ignore", divide="ignore"):
            r = centred(j, k) / np.sqrt(var[j] * var[k])
        r = np.nan_to_num(np.clip(r, -1.0, 1.0), nan=0.0, posinf=0.0, neginf=0.0)
        out[i] = int(np.rint(resolution * r[enough]).astype(np.int64).sum())
    return out
