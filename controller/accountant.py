"""Privacy accountants: exact ledgers that make over-spending impossible.

Every ε that any part of dpstream spends goes through one accountant, in exact
rational arithmetic (``Fraction``), and is checked *before* the noise it pays
for is drawn. A spend that would break the cap raises
:class:`~controller.errors.InsufficientBudgetError` and changes nothing.

* :class:`UserLevelAccountant` — the total over the whole stream is <= ε.
* :class:`WindowAccountant` — for every window of ``w`` consecutive
  timesteps, the sum of every entry that touches the window is <= ε.

A ledger entry covers an inclusive span of timesteps ``[start, end]``. Most
entries are one timestep (a release, a dissimilarity test). A sparse-vector
instance in w-event mode reads data at every timestep it is queried, so its
entry's span grows with :meth:`WindowAccountant.extend`; it counts, in full,
in every window it touches (``docs/privacy.md`` §4 proves that is enough).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from controller.errors import InsufficientBudgetError, StateError

__all__ = ["LedgerEntry", "UserLevelAccountant", "WindowAccountant", "Accountant", "restore_accountant"]


@dataclass(frozen=True)
class LedgerEntry:
    """One charge: ``epsilon`` for ``purpose`` over timesteps ``[start, end]``.

    ``seq`` numbers entries in the order they were made (0, 1, 2, …).
    """

    seq: int
    start: int
    end: int
    epsilon: Fraction
    purpose: str

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "start": self.start,
            "end": self.end,
            "epsilon": str(self.epsilon),
            "purpose": self.purpose,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LedgerEntry:
        try:
            entry = cls(
                int(data["seq"]),
                int(data["start"]),
                int(data["end"]),
                Fraction(str(data["epsilon"])),
                str(data["purpose"]),
            )
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            raise StateError(f"malformed ledger entry {data!r}: {exc}") from exc
        if entry.epsilon <= 0 or entry.start > entry.end or entry.seq < 0:
            raise StateError(f"invalid ledger entry {data!r}: ε must be > 0, start <= end and seq >= 0")
        return entry


def _check_entries(entries: tuple[LedgerEntry, ...] | list[LedgerEntry]) -> None:
    seqs = [e.seq for e in entries]
    if len(set(seqs)) != len(seqs):
        raise StateError("ledger has repeated entry numbers: refusing a tampered or corrupted ledger")
    if any(e.epsilon <= 0 or e.start > e.end for e in entries):
        raise StateError("ledger has an entry with ε <= 0 or start > end")


def _check_amount(epsilon: Fraction) -> Fraction:
    if isinstance(epsilon, bool) or not isinstance(epsilon, Fraction | int):
        raise TypeError(f"ε must be an exact Fraction, got {type(epsilon).__name__}")
    eps = Fraction(epsilon)
    if eps <= 0:
        raise ValueError(f"a spend must be > 0, got {eps}")
    return eps


class UserLevelAccountant:
    """Total budget over the whole stream (user-level privacy).

    Attributes:
        epsilon: the cap.
        entries: every charge, in order (the ledger).
    """

    kind = "user-level"

    def __init__(self, epsilon: Fraction, entries: tuple[LedgerEntry, ...] = ()) -> None:
        self.epsilon = Fraction(epsilon)
        _check_entries(entries)
        self.entries: list[LedgerEntry] = list(entries)
        self._spent = sum((e.epsilon for e in self.entries), Fraction(0))
        if self._spent > self.epsilon:
            raise StateError(f"ledger spends ε={self._spent}, more than the budget ε={self.epsilon}")

    @property
    def spent(self) -> Fraction:
        """Total ε charged so far."""
        return self._spent

    def remaining(self, timestep: int | None = None) -> Fraction:
        """ε still available (the same at every timestep)."""
        return self.epsilon - self._spent

    def can_spend(self, timestep: int, epsilon: Fraction) -> bool:
        return self._spent + _check_amount(epsilon) <= self.epsilon

    def spend(self, timestep: int, epsilon: Fraction, purpose: str) -> LedgerEntry:
        """Charge ``epsilon`` at ``timestep``; raises if it would exceed the cap."""
        eps = _check_amount(epsilon)
        if self._spent + eps > self.epsilon:
            raise InsufficientBudgetError(self.remaining(), eps, f"{purpose} at timestep {timestep}")
        entry = LedgerEntry(len(self.entries), timestep, timestep, eps, purpose)
        self.entries.append(entry)
        self._spent += eps
        return entry

    def extend(self, seq: int, timestep: int) -> LedgerEntry:
        """Stretch an entry's span (no effect on a total budget; kept for the ledger)."""
        idx = self._index(seq)
        entry = replace(self.entries[idx], end=max(self.entries[idx].end, timestep))
        self.entries[idx] = entry
        return entry

    def _index(self, seq: int) -> int:
        for i in range(len(self.entries) - 1, -1, -1):
            if self.entries[i].seq == seq:
                return i
        raise StateError(f"no ledger entry with seq {seq}")

    def window_spend(self, timestep: int) -> Fraction:
        return self._spent

    def copy(self) -> UserLevelAccountant:
        """An independent copy (the engine charges a copy each step). Not re-validated: ``self``
        already holds the invariants, and its entries are immutable."""
        clone = object.__new__(UserLevelAccountant)
        clone.__dict__.update(self.__dict__)  # immutable values (Fractions, ints)…
        clone.entries = list(self.entries)  # …and the one mutable list, copied
        return clone

    def snapshot(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "epsilon": str(self.epsilon),
            "entries": [e.to_json() for e in self.entries],
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> UserLevelAccountant:
        if data.get("kind") != cls.kind:
            raise StateError(f"expected a {cls.kind} accountant snapshot, got {data.get('kind')!r}")
        try:
            entries = tuple(LedgerEntry.from_json(e) for e in data.get("entries", []))
            return cls(Fraction(str(data["epsilon"])), entries)
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            raise StateError(f"malformed user-level accountant snapshot: {exc}") from exc


class WindowAccountant:
    """Sliding-window budget (w-event privacy).

    Invariant: for every window ``[s, s + w - 1]``, the sum of ``epsilon`` over
    entries whose span intersects the window is at most ``epsilon``.

    Spends happen at the current timestep, in non-decreasing order. At a spend
    at ``t`` the windows containing ``t`` are ``[s, s+w-1]`` with
    ``t-w+1 <= s <= t``; entries known so far end at or before ``t``, so the
    fullest of them is ``[t-w+1, t]``: checking that one checks them all, and
    windows not containing ``t`` are unaffected. Entries that can no longer
    touch a window (``end < t - w + 1``) are dropped from memory; the totals
    keep their sum.
    """

    kind = "w-event"

    def __init__(
        self,
        epsilon: Fraction,
        w: int,
        entries: tuple[LedgerEntry, ...] = (),
        *,
        next_seq: int = 0,
        spent_total: Fraction = Fraction(0),
        max_window_spend: Fraction = Fraction(0),
        last_timestep: int = -1,
    ) -> None:
        if w < 1:
            raise ValueError(f"w must be >= 1, got {w}")
        self.epsilon = Fraction(epsilon)
        self.w = int(w)
        _check_entries(entries)
        self.entries: list[LedgerEntry] = list(entries)
        self.next_seq = max(next_seq, max((e.seq + 1 for e in self.entries), default=0))
        self.spent_total = Fraction(spent_total)
        self.max_window_spend = Fraction(max_window_spend)
        self.last_timestep = int(last_timestep)
        self._live_sum = sum((e.epsilon for e in self.entries), Fraction(0))
        if self.spent_total < self._live_sum or any(e.end > self.last_timestep for e in self.entries):
            raise StateError("w-event ledger is inconsistent: totals below the live entries, or entries after its last timestep")
        if self.entries and self.window_spend(self.last_timestep) > self.epsilon:
            raise StateError("restored ledger already exceeds the window budget")

    @property
    def spent(self) -> Fraction:
        """Total ε charged since the stream started (grows without bound)."""
        return self.spent_total

    def _touching(self, timestep: int) -> Fraction:
        lo = timestep - self.w + 1
        if timestep >= self.last_timestep:
            # every live entry starts at or before the last timestep seen, so it
            # touches [lo, timestep] unless it ended before lo: subtract those
            gone = sum((e.epsilon for e in self.entries if e.end < lo), Fraction(0))
            return self._live_sum - gone
        return sum((e.epsilon for e in self.entries if e.end >= lo and e.start <= timestep), Fraction(0))

    def window_spend(self, timestep: int) -> Fraction:
        """ε charged by entries touching the window ``[timestep-w+1, timestep]``."""
        return self._touching(timestep)

    def remaining(self, timestep: int) -> Fraction:
        """ε that could still be charged at ``timestep``."""
        return self.epsilon - self._touching(timestep)

    def _advance(self, timestep: int) -> None:
        if timestep < self.last_timestep:
            raise ValueError(
                f"spends must come in timestep order: got {timestep} after {self.last_timestep}"
            )
        self.last_timestep = timestep
        lo = timestep - self.w + 1
        if any(e.end < lo for e in self.entries):
            self.entries = [e for e in self.entries if e.end >= lo]
            self._live_sum = sum((e.epsilon for e in self.entries), Fraction(0))

    def can_spend(self, timestep: int, epsilon: Fraction) -> bool:
        return self._touching(timestep) + _check_amount(epsilon) <= self.epsilon

    def spend(self, timestep: int, epsilon: Fraction, purpose: str) -> LedgerEntry:
        """Charge ``epsilon`` at ``timestep``; raises if any window would exceed ε."""
        eps = _check_amount(epsilon)
        used = self._touching(timestep)
        if used + eps > self.epsilon:
            raise InsufficientBudgetError(self.epsilon - used, eps, f"{purpose} at timestep {timestep}")
        self._advance(timestep)
        entry = LedgerEntry(self.next_seq, timestep, timestep, eps, purpose)
        self.next_seq += 1
        self.entries.append(entry)
        self._live_sum += eps
        self.spent_total += eps
        self.max_window_spend = max(self.max_window_spend, used + eps)
        return entry

    def can_extend(self, seq: int, timestep: int) -> bool:
        entry = self.entries[self._index(seq)]
        used = self._touching(timestep)
        if not (entry.end >= timestep - self.w + 1):
            used += entry.epsilon  # the entry would newly enter this window
        return used <= self.epsilon

    def extend(self, seq: int, timestep: int) -> LedgerEntry:
        """Stretch entry ``seq`` to cover ``timestep``; raises if a window would exceed ε."""
        idx = self._index(seq)
        entry = self.entries[idx]
        if timestep <= entry.end:
            return entry
        if not self.can_extend(seq, timestep):
            raise InsufficientBudgetError(
                self.remaining(timestep), entry.epsilon, f"extending {entry.purpose} to timestep {timestep}"
            )
        entry = replace(entry, end=timestep)
        self.entries[idx] = entry
        self._advance(timestep)  # prunes after the entry was stretched, so it stays live
        self.max_window_spend = max(self.max_window_spend, self._touching(timestep))
        return entry

    def _index(self, seq: int) -> int:
        for i in range(len(self.entries) - 1, -1, -1):
            if self.entries[i].seq == seq:
                return i
        raise StateError(f"no live ledger entry with seq {seq}")

    def copy(self) -> WindowAccountant:
        """An independent copy (the engine charges a copy each step). Not re-validated through
        ``__init__`` (its checks re-sum every live entry in ``Fraction``s: ~15 % of an engine step):
        ``self`` already holds the invariants, and its entries are immutable."""
        clone = object.__new__(WindowAccountant)
        clone.__dict__.update(self.__dict__)  # immutable values (Fractions, ints)…
        clone.entries = list(self.entries)  # …and the one mutable list, copied
        return clone

    def snapshot(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "epsilon": str(self.epsilon),
            "w": self.w,
            "entries": [e.to_json() for e in self.entries],
            "next_seq": self.next_seq,
            "spent_total": str(self.spent_total),
            "max_window_spend": str(self.max_window_spend),
            "last_timestep": self.last_timestep,
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> WindowAccountant:
        if data.get("kind") != cls.kind:
            raise StateError(f"expected a {cls.kind} accountant snapshot, got {data.get('kind')!r}")
        try:
            return cls(
                Fraction(str(data["epsilon"])),
                int(data["w"]),
                tuple(LedgerEntry.from_json(e) for e in data.get("entries", [])),
                next_seq=int(data["next_seq"]),
                spent_total=Fraction(str(data["spent_total"])),
                max_window_spend=Fraction(str(data["max_window_spend"])),
                last_timestep=int(data["last_timestep"]),
            )
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            raise StateError(f"malformed w-event accountant snapshot: {exc}") from exc


Accountant = UserLevelAccountant | WindowAccountant


def restore_accountant(data: dict[str, Any]) -> Accountant:
    """Rebuild either accountant from its :meth:`snapshot`."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == UserLevelAccountant.kind:
        return UserLevelAccountant.restore(data)
    if kind == WindowAccountant.kind:
        return WindowAccountant.restore(data)
    raise StateError(f"unknown accountant kind {kind!r}")
