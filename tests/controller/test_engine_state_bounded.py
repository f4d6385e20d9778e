"""The engine's state does not grow with the stream (issue 19 item 1): 10⁴ timesteps of every method.

Under w-event the ledger keeps only the charges that touch a window containing the current
timestep; under user-level the charges are bounded by the budget (ε over the smallest charge),
so once it is spent nothing is added. The snapshot the journal stores with every release is
therefore bounded too: its size after 10⁴ timesteps is no larger than after the first few
hundred (within the width of the numbers in it).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from controller.method import METHODS, W_EVENT_METHODS, MethodSpec, build_engine
from controller.units import UserLevel, WEvent
from histogram.lpa import LaplaceMechanism
from histogram.noise import Randomness

BINS = 16
T = 10_000


def _counts(rng: np.random.Generator, t: int, base: np.ndarray) -> np.ndarray:
    if t % 5 == 0:  # frequent change, so the methods keep spending
        base[:] = rng.multinomial(2_000, rng.dirichlet(np.ones(BINS)))
    return base


def _cases():
    for unit_kind in ("w-event", "user-level"):
        for m in METHODS:
            if m in W_EVENT_METHODS and unit_kind == "user-level":
                continue
            yield pytest.param(unit_kind, m, id=f"{unit_kind}-{m}")


@pytest.mark.slow
@pytest.mark.nightly  # 10,000 timesteps per method (~45 s in all)
@pytest.mark.parametrize(("unit_kind", "method"), list(_cases()))
def test_ledger_and_snapshot_stay_bounded_over_ten_thousand_timesteps(unit_kind, method):
    w = 20
    unit = WEvent(1, w, 4) if unit_kind == "w-event" else UserLevel(1, 200, 10)
    rnd = Randomness.seeded(19)
    rng = np.random.default_rng(19)
    engine = build_engine(MethodSpec(method, unit, population=2_000, threshold=0.05), LaplaceMechanism(), BINS)
    state = engine.initial_state()
    base = np.zeros(BINS, dtype=np.int64)
    most, sizes = 0, {}
    for t in range(T):
        _, state = engine.step(state, _counts(rng, t, base).copy(), rnd.drawer(method, t))
        most = max(most, len(state.accountant.entries))
        if t == T - 1 or (400 <= t < 500 and t % 10 == 9):  # early: the largest of a few (compressed
            size = len(json.dumps(engine.snapshot(state)))  # per-bin buffers, e.g. AdaPub's, vary in size)
            key = t if t == T - 1 else 499
            sizes[key] = max(size, sizes.get(key, 0))
    if unit_kind == "w-event":
        assert most <= 4 * w  # at most a few charges per timestep, each live for w timesteps
    else:
        assert most <= unit.horizon + 3 * unit.cutoff  # bounded by the budget: ε / the smallest charge
    assert sizes[T - 1] <= sizes[499] + 400, sizes  # a few wider numbers, nothing per timestep
