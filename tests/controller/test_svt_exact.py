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


def test_the_svt_comparison_is_exact_at_the_boundary(monkeypatch):
    """d + ν − ρ equal to T·n exactly counts as above; one less does not (no float rounding)."""
    threshold = Fraction(repr(0.1)) * 3  # T·n with T = 0.1 and n = 3: 3/10, not 0.30000000000000004
    assert threshold == Fraction(3, 10)

    class Ctx:
        counts = np.array([1, 0], dtype=np.int64)
        last_counts = np.array([0, 0], dtype=np.int64)

        class noise:  # noqa: N801 - a drawer stand-in returning the noise we choose
            value = 0

            @classmethod
            def discrete_laplace(cls, scale, size=None):
                return cls.value

    class Cal:
        query_scale = Fraction(1)

    assert sampling._noisy_above(Ctx, Cal, 0, Fraction(1)) is True
    assert sampling._noisy_above(Ctx, Cal, 1, Fraction(1, 10**30)) is False  # 0 >= 1e-30 is false
    Ctx.noise.value = -1
    assert sampling._noisy_above(Ctx, Cal, -1, Fraction(1)) is True  # 1 - 1 + 1 == 1
