"""DPCopula through the project's accountant: the release's declared ε is what the ledger charges,
exactly, and a refused charge leaves the drawer untouched (charge before draw)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from controller.accountant import UserLevelAccountant
from controller.errors import InsufficientBudgetError
from histogram.copula import DPCopula
from histogram.noise import Randomness
from histogram.testing import RecordingDrawer


def charged_release(acct: UserLevelAccountant, mech: DPCopula, x: np.ndarray, t: int, eps: Fraction, drawer):
    acct.spend(t, mech.epsilon(eps), "dpcopula release")  # raises before any draw if over budget
    return mech.release(x, eps, drawer)


def test_copula_releases_charge_exactly_and_stop_at_the_cap():
    rng = np.random.default_rng(0)
    x = np.stack([rng.integers(0, 3, 200), rng.integers(0, 4, 200), rng.integers(0, 2, 200)], axis=1)
    mech = DPCopula((3, 4, 2), ratio=Fraction(3))
    acct = UserLevelAccountant(Fraction(3, 10))
    eps = Fraction(1, 10)
    for t in range(3):
        rel = charged_release(acct, mech, x, t, eps, Randomness.seeded(1).drawer("s", t))
        assert rel.epsilon == eps
    assert acct.spent == Fraction(3, 10)
    drawer = RecordingDrawer(Randomness.seeded(1).drawer("s", 3))
    with pytest.raises(InsufficientBudgetError):
        charged_release(acct, mech, x, 3, eps, drawer)
    assert drawer.tape == []
