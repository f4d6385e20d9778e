"""Accountants: exact ledgers, caps checked before spending, JSON round trips."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.accountant import (
    LedgerEntry,
    UserLevelAccountant,
    WindowAccountant,
    restore_accountant,
)
from controller.errors import InsufficientBudgetError, StateError

amounts = st.fractions(min_value=Fraction(1, 1000), max_value=Fraction(1, 2), max_denominator=1000)


def test_user_level_caps_total_exactly():
    acct = UserLevelAccountant(Fraction(3, 10))
    for t in range(3):
        acct.spend(t, Fraction(1, 10), "publication")
    assert acct.spent == Fraction(3, 10) and acct.remaining() == 0
    with pytest.raises(InsufficientBudgetError) as err:
        acct.spend(3, Fraction(1, 10**9), "publication")
    assert err.value.remaining == 0 and err.value.requested == Fraction(1, 10**9)
    assert len(acct.entries) == 3  # the refused spend left no trace


def test_spends_must_be_positive_fractions():
    acct = UserLevelAccountant(Fraction(1))
    with pytest.raises(TypeError):
        acct.spend(0, 0.1, "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        acct.spend(0, Fraction(0), "x")


def test_window_accountant_checks_every_window():
    acct = WindowAccountant(Fraction(1), 3)
    acct.spend(0, Fraction(1, 2), "p")
    acct.spend(1, Fraction(1, 2), "p")
    assert not acct.can_spend(2, Fraction(1, 100))  # window [0, 2] is full
    with pytest.raises(InsufficientBudgetError):
        acct.spend(2, Fraction(1, 100), "p")
    acct.spend(3, Fraction(1, 2), "p")  # window [1, 3]: 1/2 + 1/2
    assert acct.window_spend(3) == 1
    assert acct.max_window_spend == 1


def test_window_extension_counts_an_entry_in_every_window_it_touches():
    acct = WindowAccountant(Fraction(1), 2)
    inst = acct.spend(0, Fraction(1, 2), "decision")
    acct.extend(inst.seq, 1)
    acct.extend(inst.seq, 2)  # window [1, 2] holds the instance
    acct.spend(2, Fraction(1, 2), "publication")
    assert acct.window_spend(2) == 1
    # stretched to 3, the instance also fills window [2, 3] with the publication at 2
    acct2 = acct.copy()
    acct2.extend(inst.seq, 3)
    assert not acct2.can_spend(3, Fraction(1, 2) + Fraction(1, 100))


def test_window_spends_must_come_in_order():
    acct = WindowAccountant(Fraction(1), 3)
    acct.spend(5, Fraction(1, 10), "p")
    with pytest.raises(ValueError):
        acct.spend(4, Fraction(1, 10), "p")


def _full_history_max_window(history: list[LedgerEntry], w: int) -> Fraction:
    if not history:
        return Fraction(0)
    worst = Fraction(0)
    # the window sum, as a function of its start s, is a sum of indicators of
    # [start - w + 1, end]; its maximum is at one of those left endpoints
    for s in sorted({e.start - w + 1 for e in history} | {e.end for e in history}):
        total = sum((e.epsilon for e in history if e.start <= s + w - 1 and e.end >= s), Fraction(0))
        worst = max(worst, total)
    return worst


@settings(max_examples=300, deadline=None)
@given(
    eps=st.fractions(min_value=Fraction(1, 10), max_value=Fraction(3), max_denominator=100),
    ops=st.lists(st.tuples(st.integers(0, 3), amounts, st.booleans()), max_size=60),
)
def test_user_level_never_exceeds_epsilon(eps, ops):
    acct = UserLevelAccountant(eps)
    t = 0
    for dt, amount, _ in ops:
        t += dt
        if acct.can_spend(t, amount):
            acct.spend(t, amount, "x")
        else:
            with pytest.raises(InsufficientBudgetError):
                acct.spend(t, amount, "x")
        assert sum((e.epsilon for e in acct.entries), Fraction(0)) <= eps
        assert isinstance(acct.spent, Fraction)


@settings(max_examples=250, deadline=None)
@given(
    eps=st.fractions(min_value=Fraction(1, 10), max_value=Fraction(2), max_denominator=50),
    w=st.integers(1, 6),
    ops=st.lists(st.tuples(st.integers(0, 3), amounts, st.sampled_from(["spend", "extend"])), max_size=60),
)
def test_every_window_stays_within_epsilon(eps, w, ops):
    """Whatever the order of spends and extensions, no window of w timesteps exceeds ε."""
    acct = WindowAccountant(eps, w)
    history: dict[int, LedgerEntry] = {}
    t = 0
    for dt, amount, op in ops:
        t += dt
        live = [e.seq for e in acct.entries]
        if op == "extend" and live:
            seq = live[-1]
            if acct.can_extend(seq, t):
                history[seq] = acct.extend(seq, t)
            else:
                with pytest.raises(InsufficientBudgetError):
                    acct.extend(seq, t)
        elif acct.can_spend(t, amount):
            e = acct.spend(t, amount, "x")
            history[e.seq] = e
        else:
            with pytest.raises(InsufficientBudgetError):
                acct.spend(t, amount, "x")
        assert _full_history_max_window(list(history.values()), w) <= eps
        # the snapshot round-trips through JSON at every point
        clone = restore_accountant(json.loads(json.dumps(acct.snapshot())))
        assert clone.snapshot() == acct.snapshot()


def test_restore_refuses_over_budget_or_malformed_ledgers():
    with pytest.raises(StateError):
        UserLevelAccountant.restore(
            {"kind": "user-level", "epsilon": "1", "entries": [
                {"seq": 0, "start": 0, "end": 0, "epsilon": "2", "purpose": "p"}]}
        )
    with pytest.raises(StateError):
        restore_accountant({"kind": "mystery"})
    with pytest.raises(StateError):
        UserLevelAccountant.restore({"kind": "user-level", "epsilon": "1", "entries": [{"seq": 0}]})
