"""Window ledgers over a runs axis: one interface, two implementations, one law.

A policy stepping R independent runs at once asks its ledger, per run, whether a charge fits
(:meth:`RunsLedger.can_spend` gives a boolean mask), and charges or stretches entries for a subset
of runs (``rows``); :meth:`RunsLedger.renew` keeps a w-event SVT instance's running entry (stretch it,
or start a new one, only if a release could still be paid after). Two ledgers implement the interface:

* :class:`AccountantLedger` — R exact :class:`~controller.accountant.WindowAccountant`\\ s (``Fraction``
  arithmetic). This is the service's authority (the service runs R = 1, on the engine state's own
  accountant); its entries, labels and ``seq`` numbers are the journal's.
* :class:`UnitLedger` — the same law in int64 whole multiples of one public unit, the largest
  ``Fraction`` of which ε and every amount the policy declares (its ``charges()``, its privacy map)
  is a whole multiple (:func:`charge_unit`). Sums and cap checks are exact integer operations, so
  every answer equals the accountant's; the lab uses it for speed.

Amounts are given in the ledger's own representation (:meth:`RunsLedger.amount`: a ``Fraction``
for the accountant ledger, an ``int`` of units for the unit ledger), so a policy converts each
declared charge once. ``tests/controller/test_ledger_law.py`` drives both with the same random
spend/extend/renew sequences and checks identical answers and identical state (:meth:`RunsLedger.view`).

Window law (``docs/privacy.md`` §4): an entry spans ``[start, end]`` and counts in full in every
window of ``w`` timesteps it touches; spends come in timestep order, so at timestep ``t`` the fullest
window containing ``t`` is ``[t-w+1, t]`` and holds exactly the entries with ``end >= t-w+1``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from controller.accountant import WindowAccountant
from controller.errors import InsufficientBudgetError

__all__ = ["RunsLedger", "AccountantLedger", "UnitLedger", "LedgerView", "charge_unit",
           "RENEW_NONE", "RENEW_HELD", "RENEW_EXTENDED", "RENEW_STARTED"]

#: :meth:`RunsLedger.renew` outcomes, one per row: nothing charged and no running entry (``-1``)
RENEW_NONE = 0
#: nothing charged; the running entry is kept as it was (it could be stretched, the reserve could not follow)
RENEW_HELD = 1
#: the running entry now covers ``t`` (no new ε in the window ending at ``t``: it already counted there)
RENEW_EXTENDED = 2
#: a new running entry of ``amount`` was charged at ``t``
RENEW_STARTED = 3
# the codes are ordered: ``outcome >= RENEW_EXTENDED`` is "the running entry now covers t"

#: per run: ``{end timestep: ε of the live entries ending there}``, total ε, max window ε
LedgerView = tuple[dict[int, Fraction], Fraction, Fraction]


def charge_unit(amounts: Iterable[Fraction]) -> Fraction:
    """The largest ``Fraction`` of which every amount is a whole multiple (their rational gcd)."""
    amounts = [Fraction(a) for a in amounts if a]
    if not amounts:
        raise ValueError("charge_unit needs at least one positive amount")
    lcm = 1
    for a in amounts:
        lcm = lcm * a.denominator // math.gcd(lcm, a.denominator)
    g = 0
    for a in amounts:
        g = math.gcd(g, a.numerator * (lcm // a.denominator))
    return Fraction(g, lcm)


class RunsLedger(Protocol):
    """R window ledgers (one per run) with one budget ε and window w."""

    runs: int
    w: int

    def amount(self, epsilon: Fraction) -> Any:
        """``epsilon`` in this ledger's representation (raises if it is off the ledger's grid)."""
        ...

    def can_spend(self, t: int, amount: Any) -> np.ndarray:
        """Per run: whether charging ``amount`` (one value, or one per run) at ``t`` keeps every window <= ε."""
        ...

    def remaining(self, t: int) -> np.ndarray:
        """Per run: the ε that could still be charged at ``t`` (ε minus the window ending at ``t``; for
        user-level privacy ε minus the total), in this ledger's representation. User-level DSAT/DSFT
        give it to the horizon's last timestep (its charges are on the policy's grid: ε and every
        earlier charge are)."""
        ...

    def spend(self, t: int, rows: np.ndarray, amount: Any, purpose: str) -> np.ndarray:
        """Charge ``amount`` at ``t`` for each run in ``rows`` (raises before charging if any would
        break the cap); returns one handle per row for :meth:`extend`."""
        ...

    def can_extend(self, t: int, rows: np.ndarray, handles: np.ndarray, amount: Any) -> np.ndarray:
        """Per row: whether stretching the entry ``handles[i]`` (of ``amount``) to ``t`` fits."""
        ...

    def extend(self, t: int, rows: np.ndarray, handles: np.ndarray, amount: Any) -> np.ndarray:
        """Stretch each entry to cover ``t``; returns the entries' new handles."""
        ...

    def renew(self, t: int, rows: np.ndarray, handles: np.ndarray, amount: Any, reserve: Any,
              purpose: str) -> tuple[np.ndarray, np.ndarray]:
        """Keep one running entry of ``amount`` per run covering ``t``, leaving ``reserve`` free.

        For each run ``rows[i]``, whose running entry is ``handles[i]`` (``-1``: none):

        * the entry still counts in the window ending at ``t`` (its end >= ``t-w+1``): stretch it to
          ``t`` (which adds nothing to that window) if ``reserve`` more would then fit
          (:data:`RENEW_EXTENDED`), else charge nothing and keep it (:data:`RENEW_HELD`);
        * otherwise (none, or it has left the window): charge a new entry of ``amount`` at ``t`` if
          ``amount + reserve`` fit (:data:`RENEW_STARTED`), else charge nothing (:data:`RENEW_NONE`,
          handle ``-1``: an entry that left the window is never stretched back into it).

        Returns the outcome (int8) and the running entry's handle after the call, per row. This is a
        w-event SVT instance's lifetime (``docs/privacy.md`` §4): its entry spans the timesteps it
        queries, and a query is only asked when a positive's release (``reserve``) could be paid.
        """
        ...

    def view(self, t: int, run: int) -> LedgerView:
        """Run ``run``'s ledger after timestep ``t`` in exact terms (what the law test compares)."""
        ...

    def window_spent(self, t: int, run: int) -> Fraction:
        """Run ``run``'s ε in the window ending at ``t``, exact: the sum of :meth:`view`'s live entries
        (what a one-run rule's ``accountant.remaining`` subtracts from ε)."""
        ...


class AccountantLedger:
    """R exact ``Fraction`` accountants (the authority). Handles are ledger ``seq`` numbers.

    Window accountants normally; a :class:`~controller.accountant.UserLevelAccountant` (one total
    budget) also answers ``can_spend`` / ``spend`` (the service's user-level schedules use that)."""

    def __init__(self, accountants: list[WindowAccountant]) -> None:
        if not accountants:
            raise ValueError("AccountantLedger needs at least one accountant")
        self.accountants = accountants
        self.runs = len(accountants)
        self.w = getattr(accountants[0], "w", 0)  # a user-level accountant (one total) has no window
        self.epsilon = accountants[0].epsilon

    @classmethod
    def fresh(cls, epsilon: Fraction, w: int, runs: int) -> AccountantLedger:
        return cls([WindowAccountant(Fraction(epsilon), w) for _ in range(runs)])

    def amount(self, epsilon: Fraction) -> Fraction:
        return Fraction(epsilon)

    @staticmethod
    def _each(amount: Any, n: int) -> list[Fraction]:
        if isinstance(amount, np.ndarray):
            return [Fraction(a) for a in amount.tolist()]
        return [Fraction(amount)] * n

    def can_spend(self, t: int, amount: Any) -> np.ndarray:
        amounts = self._each(amount, self.runs)
        return np.array([a.can_spend(t, e) for a, e in zip(self.accountants, amounts, strict=True)], dtype=bool)

    def remaining(self, t: int) -> np.ndarray:
        return np.array([a.remaining(t) for a in self.accountants], dtype=object)

    def spend(self, t: int, rows: np.ndarray, amount: Any, purpose: str) -> np.ndarray:
        rows_l = np.asarray(rows).tolist()
        amounts = self._each(amount, len(rows_l))
        for r, e in zip(rows_l, amounts, strict=True):  # check all before charging any
            if not self.accountants[r].can_spend(t, e):
                raise InsufficientBudgetError(self.accountants[r].remaining(t), e, f"{purpose} at timestep {t}")
        return np.array([self.accountants[r].spend(t, e, purpose).seq for r, e in zip(rows_l, amounts, strict=True)],
                        dtype=np.int64)

    def can_extend(self, t: int, rows: np.ndarray, handles: np.ndarray, amount: Any) -> np.ndarray:
        return np.array([self.accountants[r].can_extend(h, t)
                         for r, h in zip(np.asarray(rows).tolist(), np.asarray(handles).tolist(), strict=True)],
                        dtype=bool)

    def extend(self, t: int, rows: np.ndarray, handles: np.ndarray, amount: Any) -> np.ndarray:
        out = [self.accountants[r].extend(h, t).seq
               for r, h in zip(np.asarray(rows).tolist(), np.asarray(handles).tolist(), strict=True)]
        return np.array(out, dtype=np.int64)

    def renew(self, t: int, rows: np.ndarray, handles: np.ndarray, amount: Any, reserve: Any,
              purpose: str) -> tuple[np.ndarray, np.ndarray]:
        amount, reserve = Fraction(amount), Fraction(reserve)
        rows_l = np.asarray(rows).tolist()
        outcome = np.zeros(len(rows_l), dtype=np.int8)
        out = np.full(len(rows_l), -1, dtype=np.int64)
        for i, (r, h) in enumerate(zip(rows_l, np.asarray(handles).tolist(), strict=True)):
            acct = self.accountants[r]
            used = acct.window_spend(t)
            # a window accountant only drops entries that ended before t-w+1: a live handle is found
            entry = next((e for e in acct.entries if e.seq == h), None) if h >= 0 else None
            if entry is not None and entry.end >= t - self.w + 1:
                if used + reserve <= self.epsilon:
                    out[i], outcome[i] = acct.extend(h, t).seq, RENEW_EXTENDED
                else:
                    out[i], outcome[i] = h, RENEW_HELD
            elif used + amount + reserve <= self.epsilon:
                out[i], outcome[i] = acct.spend(t, amount, purpose).seq, RENEW_STARTED
        return outcome, out

    def view(self, t: int, run: int) -> LedgerView:
        acct = self.accountants[run]
        by_end: dict[int, Fraction] = {}
        for e in acct.entries:
            if not self.w or e.end >= t - self.w + 1:  # user-level (w = 0): the whole stream is the window
                by_end[e.end] = by_end.get(e.end, Fraction(0)) + e.epsilon
        # user-level: the largest "window" is the whole stream, its total
        return by_end, acct.spent, getattr(acct, "max_window_spend", acct.spent)

    def window_spent(self, t: int, run: int) -> Fraction:
        return sum(self.view(t, run)[0].values(), Fraction(0))


class UnitLedger:
    """R window ledgers in int64 whole units: ``E[r, e]`` is the ε of run r's entries ending at e.

    Handles are the entries' end timesteps: stretching an entry moves its units to its new end. The
    running window sum is kept exact (integers) and moved on by one column per timestep.
    """

    def __init__(self, epsilon: Fraction, w: int, runs: int, timesteps: int, charges: Iterable[Fraction]) -> None:
        self.unit = charge_unit([Fraction(epsilon), *charges])
        self.epsilon = Fraction(epsilon)
        self.cap = int(self.epsilon / self.unit)
        if self.cap * (timesteps + 2) >= 2**62:
            raise ValueError("ε amounts too fine for an int64 unit ledger: use the AccountantLedger")
        self.runs, self.w = runs, w
        self.E = np.zeros((runs, timesteps), dtype=np.int64)
        self.max = np.zeros(runs, dtype=np.int64)
        self.total = np.zeros(runs, dtype=np.int64)
        self._t = -1
        self._used = np.zeros(runs, dtype=np.int64)  # the window ending at _t
        self._amounts: dict[Fraction, int] = {}

    @classmethod
    def for_unit(cls, unit: Any, runs: int, timesteps: int, charges: Iterable[Fraction]) -> UnitLedger:
        """The ledger of a privacy unit over a stream of ``timesteps``: w-event's window ``w``, or
        for user-level privacy (:class:`controller.units.UserLevel`, one total budget ε) a window
        spanning the whole stream.

        Why a window of ``timesteps`` is the user-level law (that of
        :class:`controller.accountant.UserLevelAccountant`): every timestep is ``t < timesteps``, so
        ``t - w + 1 <= 0`` and the window ending at ``t`` holds every entry charged so far. Then
        ``used(t)`` is the total spent, ``can_spend`` is ``spent + amount <= ε`` exactly as the
        accountant's, ``max`` is the largest running total (the total: it never decreases; the
        accountant's ``window_spend`` is its total too) and ``extend`` never adds a charge (no entry
        is ever outside the window), as the accountant's ``extend`` changes no total.
        ``tests/controller/test_ledger_law.py`` drives both with the same spends."""
        w = getattr(unit, "w", None)
        return cls(unit.epsilon, timesteps if w is None else w, runs, timesteps, charges)

    def amount(self, epsilon: Fraction) -> int:
        hit = self._amounts.get(epsilon)
        if hit is not None:
            return hit
        q = Fraction(epsilon) / self.unit
        if q.denominator != 1:
            raise ValueError(f"ε = {epsilon} is not a whole multiple of the ledger's unit {self.unit}: "
                             "the policy charged an amount its charges() does not declare")
        self._amounts[epsilon] = int(q)
        return int(q)

    def used(self, t: int) -> np.ndarray:
        """Units charged in the window ending at ``t``, per run (do not modify)."""
        if t != self._t:
            if t == self._t + 1:
                if t >= self.w:
                    self._used = self._used - self.E[:, t - self.w]
            else:
                self._used = self.E[:, max(0, t - self.w + 1):t + 1].sum(axis=1)
            self._t = t
        return self._used

    def can_spend(self, t: int, amount: Any) -> np.ndarray:
        return self.used(t) + amount <= self.cap

    def remaining(self, t: int) -> np.ndarray:
        return self.cap - self.used(t)

    def spend(self, t: int, rows: np.ndarray, amount: Any, purpose: str) -> np.ndarray:
        if not rows.size:
            return rows
        used = self.used(t)
        new = used[rows] + amount
        if new.max() > self.cap:
            raise InsufficientBudgetError(Fraction(int(self.cap - used[rows].max())) * self.unit,
                                          Fraction(int(np.max(amount))) * self.unit, f"{purpose} at timestep {t}")
        used = used.copy()  # a new array: what callers read before stays as it was
        self.E[rows, t] += amount
        self.total[rows] += amount
        used[rows] = new
        self._used = used
        self.max[rows] = np.maximum(self.max[rows], new)  # rows are distinct
        return np.full(rows.size, t, dtype=np.int64)

    def can_extend(self, t: int, rows: np.ndarray, handles: np.ndarray, amount: Any) -> np.ndarray:
        outside = handles < t - self.w + 1  # the entry would newly enter the window ending at t
        return self.used(t)[rows] + np.where(outside, amount, 0) <= self.cap

    def extend(self, t: int, rows: np.ndarray, handles: np.ndarray, amount: Any) -> np.ndarray:
        if not rows.size:
            return handles
        used = self.used(t)
        new = used[rows] + np.where(handles < t - self.w + 1, amount, 0)  # entries newly in the window
        if new.max() > self.cap:
            raise InsufficientBudgetError(Fraction(0), Fraction(int(amount)) * self.unit, f"extending at timestep {t}")
        used = used.copy()
        self.E[rows, handles] -= amount  # an entry already ending at t moves onto itself
        self.E[rows, t] += amount
        used[rows] = new
        self._used = used
        self.max[rows] = np.maximum(self.max[rows], new)  # rows are distinct
        return np.full(rows.size, t, dtype=np.int64)

    def renew(self, t: int, rows: np.ndarray, handles: np.ndarray, amount: Any, reserve: Any,
              purpose: str) -> tuple[np.ndarray, np.ndarray]:
        used_all = self.used(t)
        room = self.cap - used_all[rows]
        inside = handles >= max(0, t - self.w + 1)  # handles are end timesteps; -1 is none
        extend = inside & (room >= reserve)
        start = ~inside & (room >= amount + reserve)
        outcome = inside.astype(np.int8)  # RENEW_HELD where inside, RENEW_NONE elsewhere
        out = np.where(inside, handles, -1)
        if extend.any():
            # the entry already counts in the window ending at t: moved to t, no window sum changes
            # (nor the largest: it was reached when the entry and the rest of this window were charged)
            ext_rows = rows[extend]
            self.E[ext_rows, handles[extend]] -= amount  # an entry already ending at t moves onto itself
            self.E[ext_rows, t] += amount
            outcome[extend] = RENEW_EXTENDED
            out[extend] = t
        if start.any():
            new_rows = rows[start]
            new = self.cap - room[start] + amount
            self.E[new_rows, t] += amount
            self.total[new_rows] += amount
            used_all = used_all.copy()  # a new array: what callers read before stays as it was
            used_all[new_rows] = new
            self._used = used_all
            self.max[new_rows] = np.maximum(self.max[new_rows], new)  # rows are distinct
            outcome[start] = RENEW_STARTED
            out[start] = t
        return outcome, out

    def view(self, t: int, run: int) -> LedgerView:
        row = self.E[run]
        lo = max(0, t - self.w + 1)
        by_end = {int(e): Fraction(int(row[e])) * self.unit for e in range(lo, t + 1) if row[e]}
        return by_end, Fraction(int(self.total[run])) * self.unit, Fraction(int(self.max[run])) * self.unit

    def window_spent(self, t: int, run: int) -> Fraction:
        """The units of :meth:`view`'s live entries (ends ``max(0, t−w+1) .. t``) summed as integers,
        then times the unit: the same exact value as summing the entries' ε one by one."""
        return Fraction(int(self.E[run, max(0, t - self.w + 1):t + 1].sum())) * self.unit
