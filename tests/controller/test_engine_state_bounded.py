"""The engine's state does not grow with the stream (issue 19 item 1): 2,500 timesteps of every method.

Under w-event the ledger keeps only the charges that touch a window containing the current
timestep; under user-level the charges are bounded by the budget (ε over the smallest charge),
so once it is spent nothing is added. The snapshot the journal stores with every release is
therefore bounded too: its size after 2,500 timesteps is no larger than after the first few
hundred (within the width of the numbers in it).

Why 2,500 timesteps and not the 10⁴ this test once ran (the suite's time: 10⁴ steps of the 15
methods took ~890 s of the CI's test time, a fifth of it; the steps themselves, exact noise and
exact ledgers, are the cost): a leak is caught once it exceeds the margins over the ~2,000
timesteps between the two measurements. The snapshot margin is 400 bytes, so any growth above
0.2 bytes per timestep fails; the one leak this test has found (BD's off-grid ε, docs/performance.md)
grew ~1.3 bytes per timestep, 6.5 times that rate, and it fails here at 2,500 timesteps (shown by
reverting bd_publication_epsilon to the unrounded half of the remaining budget: ~3 KB of growth).
The ledger bound (4w = 80 entries) fails for a leak of one kept entry per ~30 timesteps; a ledger
that does not forget at all fails within the first hundred timesteps.
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
T = 2_500


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
@pytest.mark.nightly  # 2,500 timesteps per method (~200 s of test time in all at load 8)
@pytest.mark.parametrize(("unit_kind", "method"), list(_cases()))
def test_ledger_and_snapshot_stay_bounded_over_thousands_of_timesteps(unit_kind, method):
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
