"""DP k-way marginals: record sensitivity, ε of the recorded draws, consistency, synthesis, queries.

``BROKEN`` lists deliberately wrong versions of the privacy map, applied to
the real class with monkeypatch; the exact ε audit must catch each.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations
from math import comb

import numpy as np
import pytest

from histogram.errors import MechanismError
from histogram.marginals import KWayMarginals
from histogram.noise import Randomness
from histogram.records import RecordTable
from histogram.testing import RecordingDrawer

LEVELS = (3, 4, 2, 5)


def _table(x, levels, attrs):
    """The true table over ``attrs`` (shaped over their levels), counted independently of the mechanism."""
    return RecordTable(levels, x).table(attrs).reshape(tuple(levels[a] for a in attrs))


def records(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    z = rng.multivariate_normal(np.zeros(4), 0.5 * np.eye(4) + 0.5, size=n)
    return np.stack([np.clip(((z[:, j] + 2) / 4 * L).astype(int), 0, L - 1) for j, L in enumerate(LEVELS)], axis=1)


def test_one_record_moves_each_order_by_exactly_c_choose_m_k():
    x = records(50, 0)
    mech = KWayMarginals(LEVELS, max_order=3)
    for rec in [(0, 0, 0, 0), (2, 3, 1, 4), (1, 2, 0, 3)]:
        y = np.concatenate([x, [rec]])
        for k in (1, 2, 3):
            diff = sum(int(np.abs(_table(y, LEVELS, s) - _table(x, LEVELS, s)).sum()) for s in mech.subsets(k))
            assert diff == comb(4, k) == mech.order_sensitivity(k)


def provided_epsilon(mech: KWayMarginals, eps: Fraction) -> Fraction:
    rec = RecordingDrawer(Randomness.seeded(3).drawer("audit", 0))
    mech.release(records(100, 1), eps, rec)
    assert [d.kind for d in rec.tape] == ["discrete_laplace"] * mech.max_order
    # true sensitivity of order k, stated here: every record contributes one cell to each of the C(m,k) tables
    return sum((Fraction(mech.sensitivity * comb(len(mech.levels), k + 1)) / Fraction(d.scale)
                for k, d in enumerate(rec.tape)), Fraction(0))


MECHS = [KWayMarginals(LEVELS, 1), KWayMarginals(LEVELS, 2, sensitivity=2),
         KWayMarginals(LEVELS, 3, shares=(Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)))]


@pytest.mark.parametrize("mech", MECHS, ids=lambda m: f"R{m.max_order}-c{m.sensitivity}")
def test_recorded_draws_provide_exactly_the_charged_epsilon(mech):
    eps = Fraction(9, 10)
    assert provided_epsilon(mech, eps) == eps == mech.epsilon(eps)


BROKEN = {
    "order sensitivity ignores C(m,k)": ("order_sensitivity", lambda self, k: self.sensitivity),
    "order sensitivity ignores c": ("order_sensitivity", lambda self, k: comb(len(self.levels), k)),
    "each order gets all of ε": (
        "scale", lambda self, k, eps: Fraction(self.order_sensitivity(k)) / Fraction(eps)),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_privacy_map_is_caught(name):
    attr, fn = BROKEN[name]
    eps = Fraction(9, 10)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(KWayMarginals, attr, fn)
        assert any(provided_epsilon(m, eps) > eps for m in MECHS)


def test_shares_must_sum_to_one_exactly():
    with pytest.raises(MechanismError, match="sum to exactly 1"):
        KWayMarginals(LEVELS, 2, shares=(Fraction(1, 2), Fraction(2, 3)))
    with pytest.raises(MechanismError, match="max_order"):
        KWayMarginals(LEVELS, 5)


def test_consistency_makes_overlapping_marginals_agree_and_reduces_error():
    x = records(3000, 2)
    mech = KWayMarginals(LEVELS, 3)
    errs = {True: 0.0, False: 0.0}
    for seed in range(5):
        for consistent in (True, False):
            rel = mech.release(x, Fraction(1, 2), Randomness.seeded(seed).drawer("s", 0), consistent=consistent)
            errs[consistent] += sum(float(np.abs(rel.tables[s] - _table(x, LEVELS, s)).sum()) for s in rel.tables)
            if consistent:
                for a, b in combinations(rel.tables, 2):
                    common = tuple(sorted(set(a) & set(b)))
                    pa = rel.tables[a].sum(axis=tuple(i for i, v in enumerate(a) if v not in common))
                    pb = rel.tables[b].sum(axis=tuple(i for i, v in enumerate(b) if v not in common))
                    np.testing.assert_allclose(pa, pb, atol=1e-6)
    assert errs[True] < 0.9 * errs[False]


def test_queries_and_synthesis_follow_the_released_tables():
    x = records(20_000, 3)
    rel = KWayMarginals(LEVELS, 2).release(x, Fraction(20), Randomness.seeded(1).drawer("s", 0))
    assert rel.range_count([1, 0, 0, 2], [2, 3, 1, 4]) == pytest.approx(
        np.sum((x[:, 0] >= 1) & (x[:, 3] >= 2)), rel=0.02)
    with pytest.raises(MechanismError, match="needs marginals of that order"):
        rel.range_count([1, 1, 1, 0], [2, 2, 1, 4])
    assert rel.marginal((3, 0)).shape == (5, 3)
    syn = rel.synthesize(20_000, Randomness.seeded(2).drawer("s", 0, "synthetic"))
    for j in range(4):
        np.testing.assert_allclose(np.bincount(syn[:, j], minlength=LEVELS[j]) / syn.shape[0],
                                   np.bincount(x[:, j], minlength=LEVELS[j]) / x.shape[0], atol=0.02)
    # the network keeps the strongest dependences: closer to the data than independent marginals
    err_syn = err_ind = 0.0
    for j, k in combinations(range(4), 2):
        b = _table(x, LEVELS, (j, k)) / x.shape[0]
        err_syn += np.abs(_table(syn, LEVELS, (j, k)) / syn.shape[0] - b).sum()
        err_ind += np.abs(np.outer(b.sum(1), b.sum(0)) - b).sum()
    assert err_syn < 0.6 * err_ind
