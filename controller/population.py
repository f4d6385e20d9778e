"""Several streams over the same people: one exact ledger per population.

Each stream's ledger proves its own promise: ε for a person's whole presence
(user-level), or ε in any window of ``w`` timesteps (w-event). Two streams
over the same people compose: by sequential composition a person is
protected by the *sum* of the streams' ε (docs/privacy.md §10). A deployment
declares which streams share a population (``privacy.shared_population:
{name, cap}``); this ledger keeps, per population, what each stream declared,
and refuses a stream whose registration would push the total past the cap.

What adds up, exactly:

* user-level streams: each stream's total ε; the sum is the loss over the
  people's whole presence in all of them;
* w-event streams: each stream's per-window ε, and only for streams with
  the same ``w`` (any ``w`` consecutive timesteps of the common timeline are
  one window of each stream, so the sum bounds every window). Streams with
  different ``w``, or a mix of units, in one population are refused: the
  ledger does not claim a composition it cannot prove.

Pure bookkeeping in :class:`fractions.Fraction`; storage is the caller's
(``stream.service.population``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from controller.errors import ConfigurationError

__all__ = ["PopulationEntry", "PopulationLedger", "PopulationRefused"]


class PopulationRefused(ConfigurationError):
    """A stream may not join a population: over the cap, or a composition the ledger cannot prove."""


@dataclass(frozen=True)
class PopulationEntry:
    """What one stream declares over the population.

    Attributes:
        stream: the stream id.
        unit: ``user-level`` or ``w-event``.
        epsilon: the stream's ε (user-level: total; w-event: per window), exact.
        w: the window length (w-event only).
    """

    stream: str
    unit: str
    epsilon: Fraction
    w: int | None = None

    def __post_init__(self) -> None:
        if self.unit not in ("user-level", "w-event"):
            raise ValueError(f"unknown privacy unit {self.unit!r}")
        if (self.unit == "w-event") != (self.w is not None):
            raise ValueError("w is required for w-event entries and only for them")
        if Fraction(self.epsilon) <= 0:
            raise ValueError(f"epsilon must be > 0, got {self.epsilon}")
        object.__setattr__(self, "epsilon", Fraction(self.epsilon))

    def describe(self) -> str:
        per = f" per window of {self.w} timesteps" if self.w is not None else " in total"
        return f"stream {self.stream!r} ({self.unit}, ε = {self.epsilon}{per})"

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "unit": self.unit, "epsilon": str(self.epsilon), "w": self.w}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PopulationEntry:
        return cls(str(data["stream"]), str(data["unit"]), Fraction(str(data["epsilon"])), data.get("w"))


@dataclass(frozen=True)
class PopulationLedger:
    """The streams registered over one population, and its cap (exact).

    Attributes:
        name: the population's name (``privacy.shared_population.name``).
        cap: the most ε the population's people may lose over all its streams together.
        entries: stream id → its declaration.
    """

    name: str
    cap: Fraction
    entries: Mapping[str, PopulationEntry] = field(default_factory=dict)

    @property
    def total(self) -> Fraction:
        return sum((e.epsilon for e in self.entries.values()), Fraction(0))

    def register(self, entry: PopulationEntry, cap: Fraction) -> PopulationLedger:
        """The ledger with ``entry`` registered (idempotent for the same declaration).

        Raises:
            PopulationRefused: the cap differs from the one the population was declared with;
                the entry mixes units or window lengths with the registered streams; or the
                total would exceed the cap. The message names the streams involved.
        """
        cap = Fraction(cap)
        if cap != self.cap:
            raise PopulationRefused(
                f"population {self.name!r} was declared with cap ε = {self.cap} "
                f"(by {_names(self.entries)}), but {entry.describe()} declares cap ε = {cap}: give every "
                "stream of the population the same privacy.shared_population.cap"
            )
        others = {s: e for s, e in self.entries.items() if s != entry.stream}
        clash = [e for e in others.values() if (e.unit, e.w) != (entry.unit, entry.w)]
        if clash:
            raise PopulationRefused(
                f"{entry.describe()} cannot join population {self.name!r}: "
                f"{'; '.join(e.describe() for e in clash)} use another privacy unit or window, and their "
                "losses do not add up to one provable figure; use one unit and one w for the whole population, "
                "or declare separate populations only if they really hold different people"
            )
        total = sum((e.epsilon for e in others.values()), Fraction(0)) + entry.epsilon
        if total > cap:
            raise PopulationRefused(
                f"{entry.describe()} would bring population {self.name!r} to ε = {total} "
                f"(= {' + '.join(str(e.epsilon) for e in [*others.values(), entry])}), over its cap of ε = {cap}; "
                f"already registered: {'; '.join(e.describe() for e in others.values())}. "
                "Lower this stream's privacy.epsilon (with privacy.personal: its largest tier's ε), retire a stream (remove its entry from the population "
                "ledger once it is stopped for good), or raise the cap if the people consent to it"
            )
        return PopulationLedger(self.name, self.cap, {**others, entry.stream: entry})

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "cap": str(self.cap),
                "streams": [self.entries[s].to_json() for s in sorted(self.entries)]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PopulationLedger:
        entries = [PopulationEntry.from_json(e) for e in data.get("streams", [])]
        return cls(str(data["name"]), Fraction(str(data["cap"])), {e.stream: e for e in entries})


def _names(entries: Mapping[str, PopulationEntry]) -> str:
    return ", ".join(repr(s) for s in sorted(entries)) or "no stream yet"
