"""Consistency post-processing of a noisy tree: least squares, then non-negativity.

Pure post-processing of the released noisy counts (no data, no budget).

**Least squares.** Every node ``v`` has a noisy count ``y_v = x_v + η_v`` with
independent noise of known variance ``σ_v²`` (public: it follows from the
node's ε). The estimate ``β`` is the weighted least-squares solution

    minimise Σ_v (β_v - y_v)² / σ_v²   subject to   β_v = Σ_{c child of v} β_c,

i.e. the best linear unbiased estimate (Gauss–Markov). With equal variances
per level this is the paper's OLS estimator (Cormode et al. §IV, following Hay
et al. VLDB 2010, whose weights are ``ε_ℓ²`` — proportional to ``1/σ²`` for
Laplace noise); we weight by the exact variance of the discrete Laplace noise
actually used, which also covers leaves that stop early with a larger budget.
It is computed in two passes, ``O(nodes)``:

* upward: ``z_v``/``s_v`` is the estimate of ``x_v`` (and its variance) from
  the observations in ``v``'s subtree only: for a leaf ``(y_v, σ_v²)``;
  otherwise the inverse-variance combination of ``y_v`` with the children's
  sum ``Z_v = Σ z_c`` (variance ``S_v = Σ s_c``);
* downward: ``β_root = z_root``; then each child gets
  ``β_c = z_c + (s_c / S_v)·(β_v - Z_v)``: the parent's correction is shared in
  proportion to the children's variances.

The downward pass also gives the exact variance of every estimate's error,
``P_c = s_c - (s_c/S_v)²·(S_v - P_v)`` (the contrast ``z_c - (s_c/S_v)·Z_v`` is
uncorrelated with ``β_v``'s error), which the accuracy statement uses.

**Non-negativity.** Top-down: the root is clipped at 0; then the children of
every node are replaced by the Euclidean projection of their estimates onto
``{c ≥ 0, Σ c = parent's final value}``. The result is consistent (a parent is
the sum of its children) and non-negative, and small noisy counts in empty
regions are driven to zero rather than spread as positive bias.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from histogram.errors import MechanismError

__all__ = ["least_squares", "nonnegative", "project_groups_to_simplex"]


def least_squares(
    parents: Sequence[np.ndarray], noisy: Sequence[np.ndarray], variance: Sequence[np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Weighted least-squares consistent estimates and their error variances.

    Args:
        parents: per level, the parent index of each node in the level above
            (ignored for level 0, which must hold exactly one node).
        noisy: per level, the noisy counts.
        variance: per level, the noise variance of each count (> 0).

    Returns:
        ``(beta, post_var)``: per level, the estimates and their variances.
    """
    depth = len(noisy)
    if depth == 0 or noisy[0].size != 1:
        raise MechanismError("the tree needs exactly one root")
    y = [np.asarray(v, dtype=np.float64) for v in noisy]
    var = [np.asarray(v, dtype=np.float64) for v in variance]
    z: list[np.ndarray] = [np.empty(0)] * depth
    s: list[np.ndarray] = [np.empty(0)] * depth
    child_z: list[np.ndarray] = [np.empty(0)] * depth
    child_s: list[np.ndarray] = [np.empty(0)] * depth
    z[-1], s[-1] = y[-1], var[-1]
    for lvl in range(depth - 2, -1, -1):
        n = y[lvl].size
        p = parents[lvl + 1]
        zc = np.bincount(p, weights=z[lvl + 1], minlength=n)
        sc = np.bincount(p, weights=s[lvl + 1], minlength=n)
        has = sc > 0
        inv = 1.0 / var[lvl] + np.divide(1.0, sc, out=np.zeros(n), where=has)
        s_here = 1.0 / inv
        z_here = s_here * (y[lvl] / var[lvl] + np.divide(zc, sc, out=np.zeros(n), where=has))
        z[lvl], s[lvl], child_z[lvl], child_s[lvl] = z_here, s_here, zc, sc
    beta = [z[0].copy()]
    post = [s[0].copy()]
    for lvl in range(1, depth):
        p = parents[lvl]
        big_s = child_s[lvl - 1][p]
        k = s[lvl] / big_s
        beta.append(z[lvl] + k * (beta[lvl - 1][p] - child_z[lvl - 1][p]))
        post.append(s[lvl] - k * k * (big_s - post[lvl - 1][p]))
    return beta, post


def project_groups_to_simplex(
    values: np.ndarray, group: np.ndarray, target: np.ndarray
) -> np.ndarray:
    """Project each group of ``values`` onto ``{x ≥ 0, Σ x = target[group]}`` (Euclidean).

    Michelot's algorithm (J. Optim. Theory Appl. 1986), vectorised over
    groups: ``θ = (Σ_A v - t) / |A|`` over the active set ``A`` (initially the
    whole group), drop the entries with ``v ≤ θ``, repeat until ``A`` is
    stable; then ``x = max(v - θ, 0)``. The active sets only shrink, so it
    stops after at most (largest group size) rounds. A group whose target is
    ``<= 0`` becomes all zeros.

    Args:
        values: one value per entry.
        group: the group (``0 … len(target)-1``) of each entry.
        target: the sum each group must have.
    """
    values = np.asarray(values, dtype=np.float64)
    group = np.asarray(group, dtype=np.int64)
    target = np.asarray(target, dtype=np.float64)
    n_groups = target.size
    active = np.ones(values.size, dtype=bool)
    theta = np.zeros(n_groups)
    while True:
        count = np.bincount(group, weights=active, minlength=n_groups)
        total = np.bincount(group, weights=np.where(active, values, 0.0), minlength=n_groups)
        theta = np.divide(total - target, count, out=np.full(n_groups, np.inf), where=count > 0)
        still = active & (values > theta[group])
        if np.array_equal(still, active):
            break
        active = still
    out = np.where(active, values - theta[group], 0.0)
    out[target[group] <= 0] = 0.0
    return out


def nonnegative(parents: Sequence[np.ndarray], beta: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Consistent, non-negative counts from consistent estimates ``beta`` (top-down projection)."""
    out = [np.maximum(np.asarray(beta[0], dtype=np.float64), 0.0)]
    for lvl in range(1, len(beta)):
        p = np.asarray(parents[lvl], dtype=np.int64)
        out.append(project_groups_to_simplex(beta[lvl], p, out[lvl - 1]))
    return out
