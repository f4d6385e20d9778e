"""The w-event accountant keeps only the entries of the last w timesteps, and decides exactly as an
accountant that keeps every entry and checks every window (issue 19 item 1).

The reference below is written independently of :class:`WindowAccountant`: it keeps the whole
ledger forever and, for a spend or an extension at ``t``, sums every entry over every window
``[s, s + w - 1]`` that contains ``t`` (the definition of w-event privacy in ``docs/privacy.md``).
A deliberately broken bounded accountant (it forgets entries one timestep too early) is run
through the same comparison to show the comparison can fail.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from controller.accountant import LedgerEntry, WindowAccountant
from controller.errors import InsufficientBudgetError


class _Rng:
    """The few draws the sequences need, from numpy's generator (test data, not privacy noise)."""

    def __init__(self, seed: int) -> None:
        self._g = np.random.default_rng(seed)

    def randint(self, lo: int, hi: int) -> int:
        return int(self._g.integers(lo, hi + 1))

    def choice(self, options: tuple[int, ...]) -> int:
        return options[int(self._g.integers(len(options)))]

    def random(self) -> float:
        return float(self._g.random())


UNITS = 120  # every amount below is a multiple of ε/120: the reference counts in exact integer units


class ReferenceWindowLedger:
    """Unbounded: every entry ever made; every window containing ``t`` checked by brute force.

    Amounts are integers in units of ε/:data:`UNITS` (exact, and fast enough to check every
    window against the whole ledger)."""

    def __init__(self, w: int) -> None:
        self.w = w
        self.entries: dict[int, list[int]] = {}  # seq -> [start, end, units]
        self.next_seq = 0

    def _fits(self, t: int, changes: dict[int, list[int]]) -> bool:
        ledger = {**self.entries, **changes}
        for s in range(t - self.w + 1, t + 1):  # every window [s, s+w-1] containing t
            total = sum(e[2] for e in ledger.values() if e[0] <= s + self.w - 1 and e[1] >= s)
            if total > UNITS:
                return False
        return True

    def spend(self, t: int, eps: int) -> int | None:
        change = {self.next_seq: [t, t, eps]}
        if not self._fits(t, change):
            return None
        self.entries.update(change)
        self.next_seq += 1
        return self.next_seq - 1

    def extend(self, seq: int, t: int) -> bool:
        start, end, eps = self.entries[seq]
        if t <= end:
            return True
        change = {seq: [start, t, eps]}
        if not self._fits(t, change):
            return False
        self.entries.update(change)
        return True


class ForgetsTooEarly(WindowAccountant):
    """Broken on purpose: drops entries that still touch the window (end == t - w + 1)."""

    def _advance(self, timestep: int) -> None:
        super()._advance(timestep)
        lo = timestep - self.w + 2
        if any(e.end < lo for e in self.entries):
            self.entries = [e for e in self.entries if e.end >= lo]
            self._live_sum = sum((e.epsilon for e in self.entries), Fraction(0))

    def _touching(self, timestep: int) -> Fraction:
        lo = timestep - self.w + 2
        return sum((e.epsilon for e in self.entries if e.end >= lo and e.start <= timestep), Fraction(0))


def _compare(cls: type[WindowAccountant], seed: int, timesteps: int, w: int) -> tuple[list[str], int]:
    """Drive both with one random sequence; returns the disagreements and the most entries kept."""
    rng = _Rng(seed)
    eps = Fraction(rng.randint(1, 4), rng.randint(1, 3))
    bounded, ref = cls(eps, w), ReferenceWindowLedger(w)
    live: dict[int, int] = {}  # bounded seq -> reference seq, for SVT-like instances being extended
    diffs: list[str] = []
    most = 0
    for t in range(timesteps):
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            units = rng.randint(1, 6) * UNITS // rng.choice((8, 12, 20, 30))
            amount = eps * Fraction(units, UNITS)
            want = ref.spend(t, units)
            try:
                got = bounded.spend(t, amount, "publication")
            except InsufficientBudgetError:
                got = None
            if (want is None) != (got is None):
                diffs.append(f"t={t}: spend {amount}: reference {'refuses' if want is None else 'allows'}")
                return diffs, most
            if got is not None and rng.random() < 0.3:
                live[got.seq] = want  # type: ignore[assignment]
        for seq in list(live):
            if not any(e.seq == seq for e in bounded.entries):
                del live[seq]  # out of every window containing t: the policies start a new instance
            elif rng.random() < 0.7:
                want_ok = ref.extend(live[seq], t)
                try:
                    bounded.extend(seq, t)
                    got_ok = True
                except InsufficientBudgetError:
                    got_ok = False
                if want_ok != got_ok:
                    diffs.append(f"t={t}: extend {seq}: reference {'allows' if want_ok else 'refuses'}")
                    return diffs, most
                if not got_ok:
                    del live[seq]
            else:
                del live[seq]  # the instance is abandoned (a fresh release ended it)
        units = rng.randint(1, 10) * UNITS // 10
        probe = eps * Fraction(units, UNITS)
        if bounded.can_spend(t, probe) != ref._fits(t, {-1: [t, t, units]}):
            diffs.append(f"t={t}: can_spend {probe} disagrees")
            return diffs, most
        most = max(most, len(bounded.entries))
    return diffs, most


@pytest.mark.parametrize("seed", range(6))
def test_bounded_window_accountant_decides_exactly_as_the_unbounded_reference(seed):
    w = (3, 20, 7, 1, 50, 12)[seed]
    diffs, most = _compare(WindowAccountant, seed, 1000, w)
    assert diffs == []
    # at most 3 spends per timestep, each live for w timesteps, plus stretched instances
    assert most <= 3 * w + 4 * w


def test_the_comparison_catches_an_accountant_that_forgets_too_early():
    failures = [_compare(ForgetsTooEarly, seed, 400, 5)[0] for seed in range(6)]
    assert any(failures), "the broken accountant went unnoticed: the comparison is vacuous"


def test_window_ledger_stays_bounded_after_ten_thousand_timesteps():
    w = 20
    acct = WindowAccountant(Fraction(1), w)
    lengths = []
    for t in range(10_000):
        acct.spend(t, Fraction(1, 2 * w), "publication")
        if t % 3 == 0 and acct.can_spend(t, Fraction(1, 4 * w)):
            acct.spend(t, Fraction(1, 4 * w), "test")
        lengths.append(len(acct.entries))
    assert max(lengths) <= 2 * w
    assert acct.spent == Fraction(10_000, 2 * w) + Fraction(len(range(0, 10_000, 3)), 4 * w)  # exact total kept
    assert acct.next_seq == 10_000 + len(range(0, 10_000, 3))
    snap = acct.snapshot()
    assert len(snap["entries"]) <= 2 * w  # what the journal carries per release is bounded too
    again = WindowAccountant.restore(snap)
    assert again.spent == acct.spent and again.window_spend(9_999) == acct.window_spend(9_999)
    assert isinstance(again.entries[0], LedgerEntry)
