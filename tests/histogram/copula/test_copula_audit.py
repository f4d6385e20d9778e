"""Privacy audit of DPCopula: sensitivity of every statistic, the ε its recorded draws provide, and a
Clopper–Pearson audit of the Kendall release on the extremal neighbouring pair.

Three layers, each with deliberately broken variants it must catch (``BROKEN``):

1. **Sensitivity** (exact). The integer statistics the noise is added to
   change by at most the stated amount between add/remove-one-record
   neighbours: the Kendall grid statistic by ``K`` (searched exhaustively
   over every added record on random small tables around the floor n₀, and
   on the extremal construction that attains the bound), each 2 × 2 median
   table by 1, the concatenated marginals by ``m``.
2. **Scale** (exact). The production release is run with a recording
   drawer; ``Σ_draws (true L1 sensitivity of that draw's vector) / scale``
   (the sensitivities stated HERE, from layer 1, not read from the
   mechanism) must be ≤ the ε charged.
3. **Statistical** (Clopper–Pearson, ``tests/dp_audit.py``). One Kendall pair
   released on the extremal neighbours: lower bound on the loss ≤ ε₂.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from math import comb

import numpy as np
import pytest

import histogram.copula.mechanism as copula_mechanism
from histogram.copula import DPCopula
from histogram.copula.statistics import concordance, two_way
from histogram.noise import Randomness
from histogram.testing import RecordingDrawer
from tests.dp_audit import GeneratorSource, Outcomes, audit

K = 8
N0 = 12


def extremal_pair(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` records on a strictly increasing diagonal, plus one record discordant with all of them."""
    base = np.stack([np.arange(1, n + 1), np.arange(1, n + 1)], axis=1)
    extra = np.array([[0, n + 1]])
    return base, np.concatenate([base, extra])


def kendall_stat(x: np.ndarray, levels: tuple[int, int], n0: int, k: int) -> int:
    return copula_mechanism.kendall_grid_statistic(concordance(two_way(x, levels, 0, 1)), x.shape[0], n0, k)


# -- broken variants of the production code (applied with monkeypatch to the real module) ----------

def _halved(s: int, n: int, min_records: int, resolution: int) -> int:
    """Claims Δ = 2/(n₀+1): half of the bound the extremal pair attains."""
    d = comb(max(n, min_records), 2)
    return (s * resolution * (min_records + 1)) // (2 * d)


def _no_floor(s: int, n: int, min_records: int, resolution: int) -> int:
    """The paper's Lemma 4.1 with the data's own n in the denominator (n is private)."""
    d = comb(max(n, 2), 2)
    return (s * resolution * (min_records + 1)) // (4 * d)


BROKEN: dict[str, tuple[str, Callable]] = {
    "kendall sensitivity halved": ("kendall_grid_statistic", _halved),
    "kendall without the public denominator floor": ("kendall_grid_statistic", _no_floor),
    "marginal scale ignores m": ("marginal_scale", lambda self, eps: Fraction(self.sensitivity) / self.split(eps)[0]),
    "dependence scale ignores the pair count": (
        "dependence_scale", lambda self, eps: Fraction(self.sensitivity * self.resolution) / self.split(eps)[1]),
    "split spends ε on each part": ("split", lambda self, eps: (Fraction(eps), Fraction(eps))),
}


def _apply(monkeypatch, name: str) -> None:
    attr, fn = BROKEN[name]
    if attr == "kendall_grid_statistic":
        monkeypatch.setattr(copula_mechanism, attr, fn)
    else:
        monkeypatch.setattr(copula_mechanism.DPCopula, attr, fn)


# -- layer 1: sensitivity -------------------------------------------------------------------------

def max_kendall_change(n0: int, k: int, sizes=range(2, 20), seeds=range(4)) -> int:
    """Largest |Q(D') − Q(D)| over D' = D + one record: extremal pairs and exhaustive additions."""
    worst = 0
    for n in sizes:
        d, d2 = extremal_pair(n)
        levels = (n + 2, n + 2)
        worst = max(worst, abs(kendall_stat(d2, levels, n0, k) - kendall_stat(d, levels, n0, k)))
        for seed in seeds:
            rng = np.random.default_rng([n, seed])
            levels = (4, 5)
            x = np.stack([rng.integers(0, 4, n), rng.integers(0, 5, n)], axis=1)
            q = kendall_stat(x, levels, n0, k)
            for a in range(4):
                for b in range(5):
                    y = np.concatenate([x, [[a, b]]])
                    worst = max(worst, abs(kendall_stat(y, levels, n0, k) - q))
    return worst


def test_kendall_grid_statistic_changes_by_at_most_k_and_the_bound_is_attained():
    assert max_kendall_change(N0, K) == K
    d, d2 = extremal_pair(N0)
    assert kendall_stat(d2, (N0 + 2,) * 2, N0, K) - kendall_stat(d, (N0 + 2,) * 2, N0, K) == -K




def test_median_tables_and_marginals_move_by_one_cell_per_record():
    rng = np.random.default_rng(0)
    levels = (3, 4, 5)
    x = np.stack([rng.integers(0, L, 30) for L in levels], axis=1)
    from histogram.copula.statistics import marginal_counts, median_split_table, pairs

    base_m = np.concatenate(marginal_counts(x, levels))
    base_t = np.concatenate([median_split_table(x, j, k, 1, 2).ravel() for j, k in pairs(3)])
    for rec in np.ndindex(*levels):
        y = np.concatenate([x, [rec]])
        assert np.abs(np.concatenate(marginal_counts(y, levels)) - base_m).sum() == 3
        t = np.concatenate([median_split_table(y, j, k, 1, 2).ravel() for j, k in pairs(3)])
        assert np.abs(t - base_t).sum() == 3  # one cell in each of the P = 3 tables


# -- layer 2: the ε the recorded draws provide ------------------------------------------------------

def true_sensitivity(mech: DPCopula, draw_index: int) -> int:
    """L1 sensitivity of the vector behind the production draw number ``draw_index`` (from layer 1)."""
    m, p, c = len(mech.levels), comb(len(mech.levels), 2), mech.sensitivity
    if draw_index == 0:
        return c * m  # concatenated marginals
    return c * p * {"kendall": mech.resolution, "mle": 2 * mech.resolution, "median": 1}[mech.variant]


def provided_epsilon(mech: DPCopula, epsilon: Fraction) -> Fraction:
    rng = np.random.default_rng(1)
    x = np.stack([rng.integers(0, L, 300) for L in mech.levels], axis=1)
    rec = RecordingDrawer(Randomness.seeded(1).drawer("audit", 0))
    mech.release(x, epsilon, rec)
    laplace = [d for d in rec.tape if d.kind == "discrete_laplace"]
    assert len(laplace) == 2
    return sum((Fraction(true_sensitivity(mech, i)) / Fraction(d.scale) for i, d in enumerate(laplace)), Fraction(0))


MECHS = [DPCopula((3, 4, 5, 2), variant=v, sensitivity=c, resolution=50, partitions=5) for v in ("kendall", "mle", "median") for c in (1, 2)]


@pytest.mark.parametrize("mech", MECHS, ids=lambda m: f"{m.variant}-c{m.sensitivity}")
def test_recorded_draws_provide_exactly_the_charged_epsilon(mech):
    eps = Fraction(7, 10)
    assert provided_epsilon(mech, eps) == eps == mech.epsilon(eps)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_copula_variant_is_caught(name):
    """Sensitivity variants fail the exact search; scale/split variants over-provide ε."""
    with pytest.MonkeyPatch.context() as mp:
        _apply(mp, name)
        if BROKEN[name][0] == "kendall_grid_statistic":
            assert max_kendall_change(N0, K) > K
        else:
            eps = Fraction(7, 10)
            assert any(provided_epsilon(mech, eps) > eps for mech in MECHS)


# -- layer 3: Clopper–Pearson audit of one released Kendall pair ----------------------------------

def kendall_sampler(mech: DPCopula, epsilon: Fraction, n: int):
    d, d2 = extremal_pair(n)
    levels = (n + 2, n + 2)
    q1 = kendall_stat(d, levels, mech.min_records, mech.resolution)
    q2 = kendall_stat(d2, levels, mech.min_records, mech.resolution)
    scale = mech.dependence_scale(epsilon)

    def sample(seed: np.random.SeedSequence, runs: int) -> dict[str, Outcomes]:
        noise = GeneratorSource(seed).dlap(scale, runs)
        return {f"extremal n={n}": Outcomes(q1 + noise, q2 + noise, lambda v: {"released": v})}

    return sample


def run_kendall_audit(seed: int = 7) -> tuple[float, Fraction]:
    mech = DPCopula((N0 + 2, N0 + 2), ratio=Fraction(1), min_records=N0, resolution=4)
    eps = Fraction(2)
    _, eps2 = mech.split(eps)
    (result,) = audit(kendall_sampler(mech, eps, N0), seed=seed, ordered=("released",)).values()
    return result.lower_bound, eps2


def test_kendall_release_audit_stays_below_its_share():
    lb, eps2 = run_kendall_audit()
    assert 0.5 * float(eps2) < lb <= float(eps2)


def test_broken_kendall_release_is_caught_by_the_statistical_audit():
    with pytest.MonkeyPatch.context() as mp:
        _apply(mp, "kendall sensitivity halved")
        lb, eps2 = run_kendall_audit()
    assert lb > float(eps2)
