"""Per-person privacy budgets for personalized differential privacy (PDP).

Under PDP (Jorgensen, Yu and Cormode, ICDE 2015; thesis ch. 5) every person
``i`` has their own ε_i, and a mechanism must be ε_i-DP *for person i*: adding
or removing i (with all of i's records) changes the probability of any output
by at most a factor ``exp(ε_i)``.

The assignment person → ε_i is **public**: it comes from configuration (tiers
keyed by a consent attribute, and a consent table person → tier read at
start-up), never from the sensitive attributes the histogram counts. If ε_i
were a function of a sensitive value, publishing a release whose noise or
inclusion depends on ε_i would leak that value (thesis §5.1: "the value of the
privacy budget should not be correlated with any sensitive information, which
would make it also sensitive"); ``docs/privacy.md`` §12 has the argument.
Persons without a consent entry get the stream's default ε.

Budgets are exact :class:`~fractions.Fraction` values (units: ε, nats of
privacy loss per person over the unit the caller's accountant charges).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import numpy as np

from histogram.errors import MechanismError
from histogram.exact import positive_fraction

__all__ = ["PersonalBudgets", "BudgetLevels", "BudgetError"]


class BudgetError(MechanismError):
    """A per-person budget declaration is malformed or would make the budget itself sensitive."""


@dataclass(frozen=True)
class BudgetLevels:
    """The distinct budgets of a population in ascending order, with public head counts.

    Attributes:
        epsilons: distinct ε values, strictly ascending (exact Fractions).
        counts: how many persons the public consent registry declares at each
            level (non-negative ints; used only to *plan* partitions and to
            rescale estimates, never read from the data being released).
    """

    epsilons: tuple[Fraction, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        eps = tuple(positive_fraction(e, name="budget level") for e in self.epsilons)
        counts = tuple(int(c) for c in self.counts)
        if not eps:
            raise BudgetError("a budget declaration needs at least one level (the default ε)")
        if len(eps) != len(counts):
            raise BudgetError(
                f"{len(eps)} budget levels but {len(counts)} head counts: give one count per level"
            )
        if any(b <= a for a, b in zip(eps, eps[1:], strict=False)):
            raise BudgetError(
                "budget levels must be distinct and ascending; merge equal levels first"
            )
        if any(c < 0 for c in counts):
            raise BudgetError("head counts per budget level must be >= 0")
        object.__setattr__(self, "epsilons", eps)
        object.__setattr__(self, "counts", counts)

    @classmethod
    def from_vector(cls, epsilons: Iterable[object]) -> BudgetLevels:
        """Levels and head counts of a public budget vector (one ε per registered person)."""
        tally: dict[Fraction, int] = {}
        for e in epsilons:
            f = positive_fraction(e, name="budget")
            tally[f] = tally.get(f, 0) + 1
        keys = sorted(tally)
        return cls(tuple(keys), tuple(tally[k] for k in keys))

    @property
    def size(self) -> int:
        return len(self.epsilons)

    @property
    def total(self) -> int:
        """Persons in the public registry (sum of the head counts)."""
        return sum(self.counts)

    @property
    def minimum(self) -> Fraction:
        return self.epsilons[0]

    def mean(self) -> Fraction:
        """Head-count-weighted mean budget (exact); the plain mean of the levels if no counts."""
        if self.total == 0:
            return sum(self.epsilons, Fraction(0)) / self.size
        return (
            sum((e * c for e, c in zip(self.epsilons, self.counts, strict=True)), Fraction(0))
            / self.total
        )

    def index(self, epsilons: Iterable[object]) -> np.ndarray:
        """Level index (int64) of each ε in ``epsilons``; refuses values that are not a declared level."""
        where = {e: i for i, e in enumerate(self.epsilons)}
        out = []
        for e in epsilons:
            f = positive_fraction(e, name="budget")
            if f not in where:
                raise BudgetError(
                    f"budget {f} is not one of the declared levels; declare it in the consent tiers"
                )
            out.append(where[f])
        return np.asarray(out, dtype=np.int64)


@dataclass(frozen=True)
class PersonalBudgets:
    """Who gets which ε: tiers keyed by a public consent attribute, a consent table, a default.

    Attributes:
        default: ε of every person without a consent entry (the stream's ε).
        tiers: consent value → ε (e.g. ``{"basic": 1/100, "research": 1/20}``).
        consent: person key → consent value (the public consent table; may be
            empty when every person's consent value travels with a public
            registration, see :meth:`epsilon_of`).
        attribute: name of the consent attribute (must not be one of the
            attributes the histogram counts: see :meth:`check_public`).

    The object is frozen and hashable by :meth:`fingerprint`, so a stream can
    record which declaration it started with and refuse a different one
    later, like any other budget change.
    """

    default: Fraction
    tiers: Mapping[str, Fraction]
    consent: Mapping[str, str]
    attribute: str = "consent"

    def __post_init__(self) -> None:
        object.__setattr__(self, "default", positive_fraction(self.default, name="default budget"))
        tiers = {}
        for name, eps in dict(self.tiers).items():
            if not isinstance(name, str) or not name.strip():
                raise BudgetError(f"consent tier names must be non-empty strings, got {name!r}")
            tiers[name] = positive_fraction(eps, name=f"budget of consent tier {name!r}")
        consent = {}
        for person, value in dict(self.consent).items():
            if value not in tiers:
                raise BudgetError(
                    f"consent table gives person {person!r} the value {value!r}, which is not a declared tier "
                    f"({sorted(tiers)}); add the tier or fix the table"
                )
            consent[str(person)] = value
        if not isinstance(self.attribute, str) or not self.attribute.strip():
            raise BudgetError("the consent attribute needs a name")
        object.__setattr__(self, "tiers", MappingProxyType(tiers))
        object.__setattr__(self, "consent", MappingProxyType(consent))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle as the declaration itself (read-only mapping views do not pickle): the lab's
        worker processes receive the settings of a personalized stream this way."""
        return (type(self), (self.default, dict(self.tiers), dict(self.consent), self.attribute))

    def check_public(self, counted_attributes: Iterable[str]) -> None:
        """Refuse a consent attribute that is also one of the counted (sensitive) attributes.

        Raises:
            BudgetError: if ``self.attribute`` is among ``counted_attributes``:
                ε would then be a function of a value the release protects.
        """
        if self.attribute in set(counted_attributes):
            raise BudgetError(
                f"the consent attribute {self.attribute!r} is also a counted attribute: a budget that depends "
                "on a sensitive value is itself sensitive; key the tiers by a public consent field instead"
            )

    def epsilon_of(self, consent_value: str | None) -> Fraction:
        """ε of a person whose (public) consent value is ``consent_value``; the default for None."""
        if consent_value is None:
            return self.default
        try:
            return self.tiers[consent_value]
        except KeyError:
            raise BudgetError(
                f"unknown consent value {consent_value!r}; declared tiers are {sorted(self.tiers)}"
            ) from None

    def epsilon(self, person: str) -> Fraction:
        """ε of ``person``: their tier's ε from the consent table, else the default."""
        return self.epsilon_of(self.consent.get(str(person)))

    def levels(self, unregistered: int = 0) -> BudgetLevels:
        """Distinct budgets with the consent table's head counts; ``unregistered`` persons at the default."""
        if unregistered < 0:
            raise BudgetError("the number of persons at the default budget must be >= 0")
        tally: dict[Fraction, int] = {self.default: int(unregistered)}
        for eps in self.tiers.values():
            tally.setdefault(eps, 0)
        for value in self.consent.values():
            tally[self.tiers[value]] += 1
        keys = sorted(tally)
        return BudgetLevels(tuple(keys), tuple(tally[k] for k in keys))

    def fingerprint(self) -> str:
        """SHA-256 of the canonical declaration: equal iff default, tiers, consent and attribute are equal.

        **Secret when there is a consent table**: an unsalted hash of private rows lets anyone who
        knows every other row confirm one person's presence and tier. Never publish it; the public
        view carries :meth:`public_fingerprint`, and a restart compares this one keyed by a secret
        of the stream's state (``controller.personal``, ``docs/privacy.md`` §12.2).
        """
        parts = self._public_parts() + [f"person {k}={v}" for k, v in sorted(self.consent.items())]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def public_fingerprint(self) -> str:
        """SHA-256 of the declaration without the consent table's rows (attribute, default ε, tiers).

        Public. Equal to :meth:`fingerprint` when there is no consent table (attribute mode), so
        those streams keep their config fingerprint."""
        return hashlib.sha256("\n".join(self._public_parts()).encode()).hexdigest()

    def _public_parts(self) -> list[str]:
        parts = [f"attribute={self.attribute}", f"default={self.default}"]
        return parts + [f"tier {k}={v}" for k, v in sorted(self.tiers.items())]
