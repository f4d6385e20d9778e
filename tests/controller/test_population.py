"""The population ledger: streams over the same people add up, exactly, under a declared cap."""

from __future__ import annotations

from fractions import Fraction

import pytest

from controller.population import PopulationEntry, PopulationLedger, PopulationRefused

A = PopulationEntry("traffic-grid", "user-level", Fraction(1, 2))
B = PopulationEntry("traffic-od", "user-level", Fraction(3, 10))
C = PopulationEntry("traffic-extra", "user-level", Fraction(1, 5) + Fraction(1, 10**9))


def test_streams_add_up_exactly_to_the_cap_and_not_beyond():
    ledger = PopulationLedger("city", Fraction(1)).register(A, Fraction(1)).register(B, Fraction(1))
    assert ledger.total == Fraction(4, 5)
    exact = PopulationEntry("traffic-extra", "user-level", Fraction(1, 5))
    assert ledger.register(exact, Fraction(1)).total == 1  # exactly the cap is allowed
    with pytest.raises(PopulationRefused) as err:
        ledger.register(C, Fraction(1))  # 1 + 10⁻⁹ over: no float rounding hides it
    text = str(err.value)
    for name in ("traffic-extra", "traffic-grid", "traffic-od", "city"):
        assert name in text
    assert "over its cap" in text and "Lower this stream's privacy.epsilon" in text


def test_a_restart_is_idempotent_and_a_changed_declaration_replaces_the_old_one():
    ledger = PopulationLedger("city", Fraction(1)).register(A, Fraction(1))
    assert ledger.register(A, Fraction(1)) == ledger
    bigger = PopulationEntry("traffic-grid", "user-level", Fraction(9, 10))
    assert ledger.register(bigger, Fraction(1)).total == Fraction(9, 10)  # its own old ε is not counted twice


def test_compositions_the_ledger_cannot_prove_are_refused():
    ledger = PopulationLedger("city", Fraction(2)).register(A, Fraction(2))
    window = PopulationEntry("alerts", "w-event", Fraction(1, 10), w=20)
    with pytest.raises(PopulationRefused, match="another privacy unit or window"):
        ledger.register(window, Fraction(2))
    w = PopulationLedger("ward", Fraction(1)).register(window, Fraction(1))
    with pytest.raises(PopulationRefused, match="'alerts'"):
        w.register(PopulationEntry("beds", "w-event", Fraction(1, 10), w=30), Fraction(1))
    assert w.register(PopulationEntry("beds", "w-event", Fraction(1, 10), w=20), Fraction(1)).total == Fraction(1, 5)
    with pytest.raises(PopulationRefused, match="same privacy.shared_population.cap"):
        ledger.register(B, Fraction(3))


def test_json_round_trip_is_exact():
    ledger = PopulationLedger("city", Fraction(1)).register(A, Fraction(1)).register(C, Fraction(1))
    assert PopulationLedger.from_json(ledger.to_json()) == ledger
    assert ledger.to_json()["streams"][0]["epsilon"] == str(C.epsilon)
