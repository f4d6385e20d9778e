"""Per-person budgets: public declaration, exact Fractions, default, refusal of sensitive keys."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from histogram.personalized import BudgetError, BudgetLevels, PersonalBudgets


def declaration(**kw):
    args = dict(
        default="0.01",
        tiers={"basic": "0.01", "research": 0.05, "open": Fraction(1, 10)},
        consent={"alice": "research", "bob": "open", "carol": "basic", "dan": "open"},
        attribute="consent_tier",
    )
    args.update(kw)
    return PersonalBudgets(**args)


def test_budgets_are_exact_fractions_with_a_default():
    b = declaration()
    assert b.epsilon("alice") == Fraction(1, 20)  # 0.05 read through str, not its binary float
    assert b.epsilon("bob") == Fraction(1, 10)
    assert b.epsilon("unknown person") == Fraction(1, 100)
    assert b.epsilon_of(None) == b.default
    assert all(isinstance(v, Fraction) for v in b.tiers.values())


def test_levels_count_the_consent_table_and_unregistered_persons():
    lv = declaration().levels(unregistered=10)
    assert lv.epsilons == (Fraction(1, 100), Fraction(1, 20), Fraction(1, 10))
    assert lv.counts == (11, 1, 2)  # carol + 10 at the default (also 0.01), alice, bob + dan
    assert lv.total == 14 and lv.minimum == Fraction(1, 100)
    assert lv.mean() == (11 * Fraction(1, 100) + Fraction(1, 20) + 2 * Fraction(1, 10)) / 14
    assert list(lv.index(["0.05", Fraction(1, 100)])) == [1, 0]
    with pytest.raises(BudgetError, match="not one of the declared levels"):
        lv.index(["0.07"])


def test_declaration_is_frozen_and_fingerprinted():
    b = declaration()
    with pytest.raises(TypeError):
        b.tiers["basic"] = Fraction(1)  # type: ignore[index]
    assert b.fingerprint() == declaration().fingerprint()
    changed = declaration(consent={"alice": "open", "bob": "open", "carol": "basic", "dan": "open"})
    assert (
        changed.fingerprint() != b.fingerprint()
    )  # a changed budget is visible, so a stream can refuse it


def test_the_consent_attribute_must_not_be_a_counted_attribute():
    b = declaration(attribute="income")
    with pytest.raises(BudgetError, match="itself sensitive"):
        b.check_public(["age", "income"])
    declaration().check_public(["age", "income"])  # a public consent field passes


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"default": "0"}, "default budget must be > 0"),
        ({"tiers": {"basic": "-0.1"}, "consent": {}}, "must be > 0"),
        ({"consent": {"alice": "premium"}}, "not a declared tier"),
        ({"tiers": {"": "0.1"}, "consent": {}}, "non-empty strings"),
    ],
)
def test_malformed_declarations_say_what_to_fix(kw, message):
    with pytest.raises((BudgetError, ValueError), match=message):
        declaration(**kw)


def test_levels_validate_themselves():
    with pytest.raises(BudgetError, match="ascending"):
        BudgetLevels((Fraction(1, 10), Fraction(1, 100)), (1, 1))
    with pytest.raises(BudgetError, match="one count per level"):
        BudgetLevels((Fraction(1, 10),), (1, 2))
    lv = BudgetLevels.from_vector(["0.1", 0.01, "0.1"])
    assert lv.epsilons == (Fraction(1, 100), Fraction(1, 10)) and lv.counts == (1, 2)
    assert isinstance(lv.index([0.1]), np.ndarray)
