"""Model releases through the engine (issue 15 item 3): the decision space and its sensitivity.

``docs/privacy.md`` §11.4: the decision of a model release compares ``view(H_t)`` (the true
marginal tables) with the last released tables; one person with c records moves ``view(H_t)``
by at most ``c × tables`` in L1. Checked by enumeration (every single-record neighbour of random
histograms, and two-record people for c = 2), the bound attained; a view whose declared
sensitivity forgets the number of tables is caught by the same check.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

from controller.errors import StateError
from controller.method import MethodSpec, build_engine
from controller.units import UserLevel
from histogram.copula.mechanism import DPCopula
from histogram.distance import l1_distance
from histogram.errors import MechanismError
from histogram.marginals.kway import KWayMarginals
from histogram.model_release import CopulaModelMechanism, KWayModelMechanism, MarginalView
from histogram.noise import Randomness

LEVELS = (3, 4, 2)


def _max_change(view: MarginalView, records_per_person: int, trials: int = 30) -> int:
    """Largest L1 change of ``view`` over every neighbour that adds one person (all cells enumerated)."""
    rng = np.random.default_rng(0)
    size = int(np.prod(view.levels))
    worst = 0
    for _ in range(trials):
        h = rng.poisson(3, size).astype(np.int64)
        base = view(h)
        cells = rng.integers(0, size, (size, records_per_person))
        cells[:, 0] = np.arange(size)
        for person in cells:
            h2 = h.copy()
            np.add.at(h2, person, 1)
            worst = max(worst, int(np.abs(view(h2) - base).sum()))
    return worst


@pytest.mark.parametrize("c", [1, 2])
@pytest.mark.parametrize("kind", ["one-way", "k=2", "k=3"])
def test_view_sensitivity_is_c_times_tables_and_attained(kind, c):
    view = (MarginalView.one_way(LEVELS, c) if kind == "one-way"
            else MarginalView.up_to(LEVELS, int(kind[-1]), c))
    assert view.sensitivity == c * view.tables
    # a person's c records in one cell: attains c per table
    assert _max_change(view, c) == view.sensitivity


#: broken declarations of the decision space's sensitivity (the audit catalogue lists them)
BROKEN = {
    "sensitivity forgets the tables": lambda view: view.contribution,  # the histogram's Δ
    "sensitivity forgets c": lambda view: view.tables,
}


def _view(kind: str, c: int) -> MarginalView:
    return MarginalView.one_way(LEVELS, c) if kind == "one-way" else MarginalView.up_to(LEVELS, int(kind[-1]), c)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_view_is_caught(name):
    """For DPCopula's one-way view and the k ≤ 2 view of k-way marginals, c = 2."""

    @dataclass(frozen=True)
    class Broken(MarginalView):
        @property
        def sensitivity(self) -> int:
            return BROKEN[name](self)

    for kind in ("one-way", "k=2"):
        good = _view(kind, 2)
        broken = Broken(good.levels, good.subsets, good.contribution)
        assert _max_change(broken, 2, trials=10) > broken.sensitivity  # the enumeration exceeds the declaration
        assert _max_change(good, 2, trials=10) == good.sensitivity


def test_the_decision_distance_moves_by_at_most_the_policys_delta():
    """The policy's Δ (build_engine: spec.sensitivity) bounds |d(D) − d(D')| for the floored L1
    the SVT reads, also against a float (consistent) last release."""
    kway = KWayModelMechanism(KWayMarginals(LEVELS, 2), consistent=True)
    view = kway.view
    rng = np.random.default_rng(1)
    size = int(np.prod(LEVELS))
    last = kway.release(rng.poisson(4, size).astype(np.int64), Fraction(1), Randomness.seeded(1).drawer("s", 0, "r")).counts
    assert last.dtype.kind == "f"
    worst = 0
    for _ in range(20):
        h = rng.poisson(4, size).astype(np.int64)
        d = l1_distance(view(h), last)
        for cell in range(size):
            h2 = h.copy()
            h2[cell] += 1
            worst = max(worst, abs(l1_distance(view(h2), last) - d))
    assert worst <= view.sensitivity == 6
    assert worst > 1  # the histogram's Δ (1) would be too small


def _engine(mechanism, decision="dsat"):
    spec = MethodSpec(decision, UserLevel(Fraction(4), 10, 3), population=300 * mechanism.view.tables,
                      sensitivity=mechanism.view.sensitivity)
    return build_engine(spec, mechanism, int(np.prod(LEVELS)))


@pytest.mark.parametrize("which", ["copula", "marginals"])
def test_engine_releases_the_model_and_republishes_it(which):
    mech = (CopulaModelMechanism(DPCopula(LEVELS, "kendall", min_records=100), synthetic_size=7)
            if which == "copula" else KWayModelMechanism(KWayMarginals(LEVELS, 2), consistent=False, synthetic_size=5))
    engine = _engine(mech, "fixed")
    assert engine.released_bins == mech.view.size
    state = engine.initial_state()
    assert state.last.counts.size == mech.view.size and state.last.model is None
    rng = np.random.default_rng(2)
    noise = Randomness.seeded(5)
    releases = []
    for t in range(4):
        r, state = engine.step(state, rng.poisson(20, engine.bins).astype(np.int64), noise.drawer("s", t, "release"))
        releases.append(r)
    fresh = [r for r in releases if r.kind == "fresh"]
    assert fresh and releases[0].kind == "fresh"
    for r in releases:
        assert r.counts.size == mech.view.size
        src = next(f for f in fresh if f.timestep == r.source_timestep)
        assert r.model == src.model and np.array_equal(r.counts, src.counts)  # republished repeats the model
    model = releases[0].model
    assert len(model["synthetic"]) == (7 if which == "copula" else 5)
    if which == "copula":
        corr = np.array(model["correlation"])
        assert corr.shape == (3, 3) and np.allclose(np.diag(corr), 1) and np.all(np.linalg.eigvalsh(corr) > 0)
    # the snapshot round-trips the model (a republish after a restart repeats it)
    restored = engine.restore(engine.snapshot(state))
    assert restored.last.model == state.last.model and np.array_equal(restored.last.counts, state.last.counts)
    snap = engine.snapshot(state)
    snap["last"]["counts"] = engine.snapshot(engine.initial_state())["last"]["counts"]
    snap["last"]["counts"]["size"] = engine.bins
    with pytest.raises(StateError):
        engine.restore(snap)


def test_the_policy_reads_the_view_not_the_histogram():
    """What the decision sees is view(counts) (a recording mechanism wrapper shows the engine's context)."""
    mech = KWayModelMechanism(KWayMarginals(LEVELS, 1), consistent=False)
    engine = _engine(mech, "dsat")
    seen = []
    original = engine.policy.decide

    def spy(state, ctx):
        seen.append((ctx.counts.copy(), ctx.last_counts.size, ctx.bins))
        return original(state, ctx)

    object.__setattr__(engine.policy, "decide", spy)
    h = np.arange(engine.bins, dtype=np.int64)
    engine.step(engine.initial_state(), h, Randomness.seeded(1).drawer("s", 0, "release"))
    counts, last_size, bins = seen[0]
    assert np.array_equal(counts, mech.view(h)) and last_size == bins == mech.view.size == 9


def test_mechanism_checks():
    with pytest.raises(MechanismError, match="synthetic_size"):
        CopulaModelMechanism(DPCopula(LEVELS), synthetic_size=10**6)
    with pytest.raises(MechanismError, match="k >= 2"):
        KWayModelMechanism(KWayMarginals(LEVELS, 1), synthetic_size=3)
    with pytest.raises(MechanismError, match="non-negative integer"):
        CopulaModelMechanism(DPCopula(LEVELS)).release(np.zeros(5, np.int64), Fraction(1),
                                                       Randomness.seeded(1).drawer("s", 0, "r"))
