"""One law, two ledgers: the exact ``Fraction`` accountants and the int64 unit ledger answer alike.

Hypothesis drives :class:`controller.ledger.AccountantLedger` (the service's authority) and
:class:`controller.ledger.UnitLedger` (the lab's) with the same random sequences of spend and
extend requests (and ``renew``, an SVT instance's running entry) over R runs, and checks after every
request that both gave the same answers (``can_spend`` / ``can_extend`` masks, ``renew`` outcomes)
and hold the same state (live ε by end timestep, total ε,
largest window ε). This replaces the per-method pairings of the lab kernels with the engine.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.errors import InsufficientBudgetError
from controller.ledger import AccountantLedger, UnitLedger, charge_unit

fractions = st.fractions(min_value=Fraction(1, 24), max_value=Fraction(3, 2), max_denominator=24)


@st.composite
def scenarios(draw):
    epsilon = draw(fractions)
    # charges of a few sixths of ε (or arbitrary): tight windows, where the answers differ by one entry
    share = st.builds(lambda k, n: epsilon * Fraction(k, n), st.integers(1, 6), st.integers(1, 7))
    charges = draw(st.lists(st.one_of(share, fractions), min_size=1, max_size=3))
    runs = draw(st.integers(1, 4))
    w = draw(st.integers(1, 6))
    timesteps = draw(st.integers(1, 25))
    # per timestep: a list of (op, charge index, runs bitmask)
    op = st.tuples(st.sampled_from(["spend", "extend", "renew"]), st.integers(0, 5),
                   st.integers(1, 2**runs - 1))
    steps = draw(st.lists(st.lists(op, max_size=4), min_size=timesteps, max_size=timesteps))
    return epsilon, charges, runs, w, steps


def _same_state(exact: AccountantLedger, units: UnitLedger, t: int) -> None:
    for r in range(exact.runs):
        assert exact.view(t, r) == units.view(t, r), f"run {r} after timestep {t}"
        # a one-run rule's accountant.remaining subtracts this (AdaPub, RescueDP in the lab)
        live = sum(exact.view(t, r)[0].values(), Fraction(0))
        assert exact.window_spent(t, r) == units.window_spent(t, r) == live, f"run {r} after timestep {t}"
    # what could still be charged at t, per run (the user-level horizon's last release takes it)
    assert exact.remaining(t).tolist() == [Fraction(int(u)) * units.unit for u in units.remaining(t)], t


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_both_ledgers_give_identical_answers_and_state(scenario):
    epsilon, charges, runs, w, steps = scenario
    exact = AccountantLedger.fresh(epsilon, w, runs)
    units = UnitLedger(epsilon, w, runs, len(steps), charges)
    # each run's extendable entries: (accountant seq, unit-ledger handle, charge index)
    live: list[list[tuple[int, int, int]]] = [[] for _ in range(runs)]
    # each run's running entry for renew (of charges[0]; -1: none): accountant seq, unit-ledger handle
    running_exact = np.full(runs, -1, dtype=np.int64)
    running_units = np.full(runs, -1, dtype=np.int64)
    for t, ops in enumerate(steps):
        for kind, c, mask in ops:
            rows = np.array([r for r in range(runs) if mask >> r & 1], dtype=np.int64)
            if kind == "renew":  # reserve: one of the charges, or nothing (c = 5)
                reserve = charges[c % len(charges)] if c < 5 else Fraction(0)
                a, ha = exact.renew(t, rows, running_exact[rows], exact.amount(charges[0]),
                                    exact.amount(reserve), "decision")
                b, hb = units.renew(t, rows, running_units[rows], units.amount(charges[0]),
                                    units.amount(reserve) if reserve else 0, "decision")
                assert np.array_equal(a, b), f"renew outcomes at timestep {t}"
                assert np.array_equal(ha < 0, hb < 0)
                running_exact[rows], running_units[rows] = ha, hb
            elif kind == "spend":
                c %= len(charges)
                e_exact, e_units = exact.amount(charges[c]), units.amount(charges[c])
                ok_exact = exact.can_spend(t, e_exact)
                assert np.array_equal(ok_exact, units.can_spend(t, e_units))
                rows = rows[ok_exact[rows]]
                seqs = exact.spend(t, rows, e_exact, "decision")
                handles = units.spend(t, rows, e_units, "decision")
                for r, s, h in zip(rows.tolist(), seqs.tolist(), handles.tolist(), strict=True):
                    live[r].append((s, h, c))
            else:  # stretch one entry of each chosen run still held by its accountant (c picks which)
                picked = []
                for r in rows.tolist():
                    held = {e.seq for e in exact.accountants[r].entries}
                    live[r] = [x for x in live[r] if x[0] in held]
                    if live[r]:
                        i = c % len(live[r])
                        picked.append((r, i, *live[r][i]))
                for r, i, seq, handle, c in picked:  # one charge per call (the amount is the entry's)
                    row = np.array([r]), np.array([seq]), np.array([handle])
                    a = exact.can_extend(t, row[0], row[1], exact.amount(charges[c]))
                    b = units.can_extend(t, row[0], row[2], units.amount(charges[c]))
                    assert np.array_equal(a, b)
                    if a[0]:
                        s2 = exact.extend(t, row[0], row[1], exact.amount(charges[c]))
                        h2 = units.extend(t, row[0], row[2], units.amount(charges[c]))
                        live[r][i] = (int(s2[0]), int(h2[0]), c)
            _same_state(exact, units, t)
        for c in charges:  # every charge's answer, also at timesteps with no request
            assert np.array_equal(exact.can_spend(t, exact.amount(c)), units.can_spend(t, units.amount(c)))
        _same_state(exact, units, t)


def test_a_charge_that_does_not_fit_raises_in_both_and_changes_nothing():
    exact = AccountantLedger.fresh(Fraction(1), 3, 2)
    units = UnitLedger(Fraction(1), 3, 2, 5, [Fraction(1, 2)])
    rows = np.array([0, 1])
    for ledger in (exact, units):
        ledger.spend(0, rows, ledger.amount(Fraction(1, 2)), "publication")
        ledger.spend(1, np.array([1]), ledger.amount(Fraction(1, 2)), "publication")
        with pytest.raises(InsufficientBudgetError):
            ledger.spend(2, rows, ledger.amount(Fraction(1, 2)), "publication")
    for r in range(2):
        assert exact.view(2, r) == units.view(2, r)
    assert exact.view(2, 0)[1] == Fraction(1, 2)


def test_the_unit_ledger_refuses_an_undeclared_amount():
    units = UnitLedger(Fraction(1), 3, 1, 5, [Fraction(1, 4)])
    assert charge_unit([Fraction(1), Fraction(1, 4)]) == Fraction(1, 4)
    with pytest.raises(ValueError, match="charges"):
        units.amount(Fraction(1, 3))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10**6), fractions, st.integers(1, 5))
def test_lpa_scale_and_error_in_ledger_units_equal_the_mechanisms(units, unit, sensitivity):
    """The lab reads LPA's scale and expected error in ledger units; they are the mechanism's own."""
    from histogram.lpa import LaplaceMechanism

    mech = LaplaceMechanism(sensitivity)
    num, den = mech.scale_in_units(np.array([units]), unit)
    assert Fraction(int(num[0]), int(den[0])) == mech.scale(units * unit)
    assert mech.expected_abs_error_in_units(units, unit) == mech.expected_abs_error(units * unit)


@st.composite
def user_level_scenarios(draw):
    epsilon = draw(fractions)
    share = st.builds(lambda k, n: epsilon * Fraction(k, n), st.integers(1, 6), st.integers(1, 7))
    charges = draw(st.lists(st.one_of(share, fractions), min_size=1, max_size=3))
    runs = draw(st.integers(1, 4))
    timesteps = draw(st.integers(1, 25))
    op = st.tuples(st.sampled_from(["spend", "extend"]), st.integers(0, 5), st.integers(1, 2**runs - 1))
    steps = draw(st.lists(st.lists(op, max_size=3), min_size=timesteps, max_size=timesteps))
    return epsilon, charges, runs, steps


@settings(max_examples=300, deadline=None)
@given(user_level_scenarios())
def test_a_unit_ledger_over_the_whole_stream_is_the_user_level_accountant(scenario):
    """User-level privacy (one total budget, :class:`controller.accountant.UserLevelAccountant`):
    :meth:`UnitLedger.for_unit` gives a window spanning the stream, and answers, totals and the
    largest 'window' figure and what remains equal the accountant's on the same spends, and stretching
    an entry (a user-level SVT instance's, every query) never changes a total."""
    from controller.accountant import UserLevelAccountant
    from controller.units import UserLevel

    epsilon, charges, runs, steps = scenario
    unit = UserLevel(epsilon, horizon=len(steps), cutoff=1)
    exact = AccountantLedger([UserLevelAccountant(epsilon) for _ in range(runs)])
    units = UnitLedger.for_unit(unit, runs, len(steps), charges)
    first: list[tuple[int, int, int] | None] = [None] * runs  # each run's first entry: seq, handle, charge
    for t, ops in enumerate(steps):
        for kind, c, mask in ops:
            rows = np.array([r for r in range(runs) if mask >> r & 1], dtype=np.int64)
            c %= len(charges)
            if kind == "extend":  # stretch each chosen run's first entry to t (charges nothing)
                for r in rows.tolist():
                    if first[r] is not None:
                        seq, handle, fc = first[r]
                        row = np.array([r])
                        s2 = exact.extend(t, row, np.array([seq]), exact.amount(charges[fc]))
                        h2 = units.extend(t, row, np.array([handle]), units.amount(charges[fc]))
                        first[r] = (int(s2[0]), int(h2[0]), fc)
                _same_state(exact, units, t)
                continue
            e_exact, e_units = exact.amount(charges[c]), units.amount(charges[c])
            ok = exact.can_spend(t, e_exact)
            assert np.array_equal(ok, units.can_spend(t, e_units))
            seqs = exact.spend(t, rows[ok[rows]], e_exact, "publication")
            handles = units.spend(t, rows[ok[rows]], e_units, "publication")
            for r, s2, h2 in zip(rows[ok[rows]].tolist(), seqs.tolist(), handles.tolist(), strict=True):
                if first[r] is None:
                    first[r] = (s2, h2, c)
            _same_state(exact, units, t)
            for r in range(runs):  # the largest window figure is the total, as the accountant reports
                acct = exact.accountants[r]
                assert units.view(t, r)[2] == acct.window_spend(t) == acct.spent
