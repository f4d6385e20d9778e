"""BD and BA written once over a runs axis: the service's run is that rule with R = 1.

* The service path is pinned: over a 150-step stream, every journaled state (``state_to_json``),
  release and ledger charge hashes to what the per-run rule produced before the rule moved onto the
  runs axis (issue 29), so journals on disk restore and continue byte for byte.
* A journaled state from before BD's grid rounding (a publication ε off the grid) still decides
  with exactly what the window has left.
* The runs' state is stepped every timestep, in order; anything else is refused.

(``tests/controller/test_policies.py::test_runs_axis_conformance`` runs R = 4 against R engines.)
"""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction

import numpy as np
import pytest

from controller.errors import StateError
from controller.ledger import AccountantLedger
from controller.policies.base import DecisionContext, RunsContext
from controller.policies.kellaris import (
    BudgetAbsorption,
    BudgetDistribution,
    KellarisState,
    bd_publication_epsilon,
)
from controller.step import Engine
from controller.units import WEvent
from histogram.lpa import LaplaceMechanism
from histogram.noise import Randomness
from tests.engine_helpers import stream

#: sha256 of the per-timestep journaled state, release counts and ledger charges, from the per-run
#: rule before issue 29 (controller/policies/kellaris.py at 4e06320)
PINNED = {
    "bd": (53, "96608ee90377058c6ea6b27f4824a150af80a9b87f82d3218e572446f78530c9"),
    "ba": (62, "5239ee2cd5f4d4cbea8d7242ee0aea5c223cb38a0c7a7012d70b171854680d49"),
}


def _fingerprint(policy) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    engine = Engine(policy, LaplaceMechanism(), 20)
    state, rnd, h, fresh = engine.initial_state(), Randomness.seeded(4), hashlib.sha256(), 0
    for t, counts in enumerate(stream(150, seed=6, bins=20, population=3000)):
        rel, state = engine.step(state, counts, rnd.drawer("pin", t))
        fresh += rel.kind == "fresh"
        h.update(json.dumps(policy.state_to_json(state.policy), sort_keys=True).encode() + b"\n")
        h.update(np.asarray(rel.counts, dtype=np.int64).tobytes()
                 + repr([(e.purpose, str(e.epsilon)) for e in rel.ledger]).encode())
    return fresh, h.hexdigest()


@pytest.mark.parametrize(("name", "cls"), [("bd", BudgetDistribution), ("ba", BudgetAbsorption)])
def test_service_run_is_pinned_byte_for_byte(name, cls):
    assert _fingerprint(cls(WEvent(Fraction(3, 2), 6))) == PINNED[name]


class _Zero:
    def discrete_laplace(self, scale, size=None):  # type: ignore[no-untyped-def]
        return 0 if size is None else np.zeros(size, dtype=np.int64)


def test_a_journal_from_before_the_grid_still_decides_with_what_the_window_left():
    """A publication ε of 1/3 (off the grid (ε/2)/2³²) in a restored journal: the next publication is
    half of ε/2 − 1/3, rounded down to the grid, and the new state keeps the old entry as it was."""
    policy = BudgetDistribution(WEvent(Fraction(1), 4))
    acct = policy.new_accountant()
    acct.spend(2, Fraction(1, 3), "publication")
    state = KellarisState.from_json({"publications": [[2, "1/3"]], "last_publication": 2, "nullified": 0})
    counts = np.full(5, 10**6, dtype=np.int64)
    ctx = DecisionContext(3, counts, np.zeros(5, dtype=np.int64), 1, acct, _Zero(), LaplaceMechanism())  # type: ignore[arg-type]
    decision, new = policy.decide(state, ctx)
    want = bd_publication_epsilon(Fraction(1, 2) - Fraction(1, 3), policy.grid)
    assert decision.fresh and decision.epsilon == want and want < Fraction(1, 12)
    assert policy.state_to_json(new) == {"publications": [[2, "1/3"], [3, str(want)]], "last_publication": 3,
                                         "nullified": 0}


@pytest.mark.parametrize("cls", [BudgetDistribution, BudgetAbsorption])
def test_the_runs_state_is_stepped_every_timestep_in_order(cls):
    policy = cls(WEvent(Fraction(1), 4))
    ledger = AccountantLedger.fresh(Fraction(1), 4, 2)
    state = policy.reset_runs(2)
    counts, last = np.zeros(3, dtype=np.int64), np.zeros((2, 3), dtype=np.int64)

    def ctx(t: int) -> RunsContext:
        return RunsContext(t, 2, ledger, np.zeros(2, dtype=np.int64), counts=counts, last=last,
                           has_last=np.zeros(2, dtype=bool), noise=None, mechanism=LaplaceMechanism())

    with pytest.raises(StateError, match="every timestep, in order"):
        policy.decide_runs(state, ctx(1))
