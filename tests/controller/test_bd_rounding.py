"""BD's publication ε follows the documented rule outside the exact-halving regime (issue 27 item 7).

``docs/privacy.md`` §4.2 and ``controller/policies/kellaris.py``: a BD
publication at ``t`` uses half of what the window's publications left,
``(ε/2 − Σ recent)/2``, *rounded down* to a multiple of the public grid
``g = (ε/2)/2³²``. The budget audit of ``test_kellaris_audit.py`` replays the
ledger with the production helper itself and its streams only ever halve
exactly (every value already on the grid), so a BD that rounded *up* passed
it. Here the rule is recomputed independently — ``⌊(remaining/2)/g⌋·g`` from
the constructed public state — for window states where ``remaining/g`` is
odd (the half falls between two grid points): arbitrary ε, ``w`` and
recent publications on the grid, through ``BudgetDistribution.decide`` with
a test that passes (the test itself is audited elsewhere).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from controller.policies import kellaris
from controller.policies.base import DecisionContext
from controller.policies.kellaris import BudgetDistribution, KellarisState, bd_publication_epsilon
from controller.units import WEvent
from histogram.lpa import LaplaceMechanism
from tests.profiles import examples

BINS = 4


class _Zero:
    def discrete_laplace(self, scale, size=None):  # type: ignore[no-untyped-def]
        return 0 if size is None else np.zeros(size, dtype=np.int64)


def documented(eps: Fraction, recent: list[Fraction]) -> tuple[Fraction, Fraction]:
    """(the documented publication ε, the grid) for a window whose recent publications are ``recent``."""
    half = eps / 2
    grid = half / 2**32
    remaining = half - sum(recent, Fraction(0))
    return (Fraction(int(remaining / 2 / grid)) * grid if remaining > 0 else Fraction(0)), grid


def decide(eps: Fraction, w: int, recent: list[Fraction], monkeypatch) -> Fraction | None:  # type: ignore[no-untyped-def]
    """The production BD's publication ε at timestep ``w`` after ``recent`` (at timesteps 1…), None if it
    did not publish."""
    monkeypatch.setattr(BudgetDistribution, "_dissimilar_runs",
                        lambda self, state, ctx, rows, error: np.ones(rows.size, dtype=bool))
    policy = BudgetDistribution(WEvent(eps, w))
    t = w
    acct = policy.new_accountant()
    pubs = tuple((t - len(recent) + i, e) for i, e in enumerate(recent))  # at t−k … t−1, in order
    for s, e in pubs:
        acct.spend(s, e, "publication")
    ctx = DecisionContext(t, np.full(BINS, 10**6, dtype=np.int64), np.zeros(BINS, dtype=np.int64), len(pubs),
                          acct, _Zero(), LaplaceMechanism())  # type: ignore[arg-type]
    decision, _ = policy.decide(KellarisState(publications=pubs, last_publication=t - 1), ctx)
    return decision.epsilon if decision.fresh else None


epsilons = st.builds(Fraction, st.integers(1, 40), st.integers(1, 20))


@st.composite
def windows(draw):  # type: ignore[no-untyped-def]
    """(ε, w, recent publications on the grid) with the remaining budget an odd number of grid steps."""
    eps = draw(epsilons)
    w = draw(st.integers(2, 12))
    grid = eps / 2 / 2**32
    k = draw(st.integers(1, w - 1))
    steps = 2**32
    units = []
    for _ in range(k):
        u = draw(st.integers(1, max(1, steps // (2 * k))))
        units.append(u)
    if (steps - sum(units)) % 2 == 0:  # make the remainder odd: the half lies between two grid points
        units[0] += 1
    return eps, w, [u * grid for u in units]


G1 = Fraction(1, 2) / 2**32  # the grid for ε = 1


@settings(max_examples=examples(200), deadline=None)
@given(windows())
@example((Fraction(1), 4, [5 * G1]))  # remaining 2³² − 5 grid steps: half is 2³¹ − 2.5 steps
@example((Fraction(1), 4, [Fraction(1, 4), G1]))  # after 32 halvings a leftover of one step
@example((Fraction(3, 7), 2, [Fraction(3, 14) / 2**32 * 3]))  # a non-dyadic ε
def test_bd_publication_epsilon_is_half_the_remainder_rounded_down_on_the_grid(case):
    eps, w, recent = case
    mp = pytest.MonkeyPatch()
    try:
        got = decide(eps, w, recent, mp)
    finally:
        mp.undo()
    want, grid = documented(eps, recent)
    remaining = eps / 2 - sum(recent, Fraction(0))
    assert (remaining / grid) % 2 == 1  # outside the exact-halving regime
    assert got == want
    assert got <= remaining / 2 and (got / grid).denominator == 1 and remaining / 2 - got < grid
    assert bd_publication_epsilon(remaining, grid) == want


def _round_up(remaining, grid):  # type: ignore[no-untyped-def]
    """The broken variant: the half rounded *up* to the grid (more than the paper's rule), in steps."""
    return np.where(remaining > 0, -(-remaining // (2 * grid)), 0)


def test_rounding_up_is_caught():
    """The property's check fails on the broken variant (the publication ε above half the remainder)."""
    eps, w, recent = Fraction(1), 4, [5 * G1]
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(kellaris, "bd_publication_steps", _round_up)
        got = decide(eps, w, recent, monkeypatch)
    want, _ = documented(eps, recent)
    assert got is not None and got > want and got > (eps / 2 - recent[0]) / 2
