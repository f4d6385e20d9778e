"""The sparse-vector decisions use exact integer noise only (docs/privacy.md §2.2.1).

Count-space L1 distances are integers, so the SVT's threshold noise ρ and
query noise ν are discrete Laplace draws at exact ``Fraction`` scales, and the
test ``d + ν − ρ ≥ T·n`` compares integers with an exact rational. A run of
every sampling method under both units, recorded draw by draw, must contain
nothing else; and the comparison must be exact at the boundary, where a float
threshold would round.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import controller.policies.sampling as sampling
from controller.method import MethodSpec, build_engine
from controller.units import UserLevel, WEvent
from histogram.lpa import LaplaceMechanism
from histogram.noise import Randomness
from histogram.testing import RecordingDrawer

BINS = 12


USER, WEVENT = UserLevel(Fraction(1), 40, 10), WEvent(Fraction(1), 5, 2)
RUNS = [("dsft", USER), ("dsat", USER), ("dsft", WEVENT), ("dsat", WEVENT), ("bd", WEVENT), ("ba", WEVENT)]


@pytest.mark.parametrize(("method", "unit"), RUNS, ids=[f"{m}-{type(u).__name__}" for m, u in RUNS])
def test_every_draw_of_a_run_is_exact_integer_noise(method, unit):
    engine = build_engine(MethodSpec(method, unit, population=200, threshold=0.02), LaplaceMechanism(), BINS)
    rng = np.random.default_rng(3)
    state = engine.initial_state()
    tapes = []
    for t in range(30):
        counts = rng.poisson(15 + 10 * (t // 7 % 2), BINS).astype(np.int64)
        drawer = RecordingDrawer(Randomness.seeded(2).drawer("svt-exact", t))
        _, state = engine.step(state, counts, drawer)
        tapes.extend(drawer.tape)
    assert tapes, "the run drew no noise"
    decisions = [d for d in tapes if d.size is None]
    assert decisions, "no decision noise was drawn"
    for d in tapes:
        assert d.kind == "discrete_laplace"
        assert isinstance(d.scale, Fraction | int) and not isinstance(d.scale, bool)
        assert d.values.dtype == np.int64


@pytest.mark.parametrize("policy_type", [sampling.DistanceSamplingPolicy, sampling.WEventSamplingPolicy])
@pytest.mark.parametrize("adaptive", [False, True])
def test_the_svt_comparison_is_exact_at_the_boundary(policy_type, adaptive):
    """d + ν − ρ equal to T·n exactly counts as above; one less does not (no float rounding). With
    T = 0.28 and n = 25, T·n is 7 exactly, while the float product 0.28 × 25 is 7.000000000000001,
    whose ceiling 8 would turn the boundary case into "below". The one SVT step both units share
    (:meth:`_svt_query`), DSFT's fixed and DSAT's per-run thresholds."""
    from controller.ledger import UnitLedger
    from controller.policies.base import RunsContext

    threshold = Fraction(repr(0.28)) * 25
    assert threshold == 7 and 0.28 * 25 > 7
    unit = USER if policy_type is sampling.DistanceSamplingPolicy else WEVENT
    policy = policy_type(unit, population=25, threshold=0.28, k=Fraction(1, 2), adaptive=adaptive)

    class Noise:  # ρ, then ν: the values we choose
        values: list[int] = []

        def laplace(self, rows, scale, size):  # type: ignore[no-untyped-def]
            return np.array([self.values.pop(0) for _ in rows.tolist()], dtype=np.int64)

    def above(d: int, rho: int, nu: int) -> bool:
        state = policy.reset_runs(1)
        state.threshold[:] = 0.28  # DSAT's public threshold at T (the PID's start is its own)
        Noise.values = [rho, nu]
        ledger = UnitLedger.for_unit(unit, 1, 5, policy.charges())
        ctx = RunsContext(1, 1, ledger, np.zeros(1, dtype=np.int64), counts=np.array([d, 0], dtype=np.int64),
                          last=np.zeros((1, 2), dtype=np.int64), noise=Noise())
        one = np.zeros(1, dtype=np.int64)
        return bool(policy._svt_query(state, ctx, one, one)[0])

    assert above(7, 0, 0) is True  # 7 >= 7
    assert above(6, 0, 0) is False
    assert above(7, 1, 1) is True  # 7 + 1 − 1 == 7
    assert above(7, 1, 0) is False
    assert above(8, 0, -1) is True
