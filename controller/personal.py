"""Personalized differential privacy through the engine: one sub-stream per part of a PDP plan.

A PDP plan (:class:`histogram.personalized.PersonalizedMechanism`, built from
public budget levels only) cuts the budget levels into parts; every person's
level lies in at most one part. :class:`PersonalEngine` runs the configured
decision method once per part, as an ordinary :class:`~controller.step.Engine`
whose privacy unit carries the part's ε (user-level: over the horizon;
w-event: per window), on the histogram of the persons of that part only.
Adding or removing one person changes one part's histograms and no other
part's (parallel composition, ``docs/privacy.md`` §12.7), so person ``i`` loses
at most what the part's sub-stream spends, which its own accountant caps at
the part's ε ≤ ε_i (Minimum, Threshold, partitioning). For Jorgensen et al.'s
Sampling, person ``i`` with ε_i < t is in the part only if their exact coin
came up (:meth:`PersonalEngine.slots`), and a sub-stream that spends S ≤ t on
the sample costs them ``ln(1 + p_i(e^S − 1)) ≤ S·ε_i/t`` (convexity; §12.7).
The coin must be independent of everything a neighbour keeps: under
user-level privacy (a neighbour differs in all of a person's records) one coin
per person for the stream's lifetime; under w-event privacy (a neighbour keeps
the person's records outside one window, whose releases would reveal a shared
coin) one fresh coin per person *and timestep*, which is sound for windows of
``w = 1`` only: with ``w > 1`` Sampling is refused (:class:`StateError`, and
by configuration validation), see ``docs/privacy.md`` §12.7.

**Ledger per budget level.** Next to each part's own accountant, the engine
keeps one accountant per budget level, capped at that level's ε, in exact
Fractions: every charge ``x`` a part's sub-stream makes is mirrored into the
ledger of every level of the part as ``x · personal_epsilon[level] / ε_part``
(``x`` itself except for sampled levels below the threshold). The mirror is
charged before the step's release can leave the engine, and a charge a level
cannot afford raises (nothing is published for the timestep). The level
ledgers are what the release message reports per tier.

Inputs. The engine steps on ``(levels + 1) × bins`` true counts: row ``ℓ`` the
histogram of the persons at level ``ℓ`` (after contribution bounding), the
last row the persons a Sampling coin left out (never counted). Which row an
event lands in is a function of its own public consent value or of the
public consent table, and of its person's coin: never of other events
(``docs/privacy.md`` §1.1, §12.2).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from controller.accountant import (
    Accountant,
    LedgerEntry,
    UserLevelAccountant,
    WindowAccountant,
    restore_accountant,
)
from controller.errors import StateError
from controller.step import Engine, EngineState, LastRelease, Release
from controller.units import UserLevel, WEvent
from histogram.noise import GeneratorDrawer, NoiseDrawer, Randomness
from histogram.personalized import PersonalizedMechanism
from histogram.personalized.sampling import InclusionSampler

__all__ = ["PersonalEngine", "sampling_window_refusal", "PersonalState", "PersonalRelease", "PERSONAL_STATE_VERSION", "PERSONAL_MESSAGE_VERSION"]

PERSONAL_STATE_VERSION = 1
#: Sampling coins kept in memory (about 100 bytes each): past it the oldest are dropped and recomputed
COIN_CACHE_MAX = 1 << 18
#: version of the ``personal`` block of a release message (``stream/schemas/release.schema.json``)
PERSONAL_MESSAGE_VERSION = 1


@dataclass(frozen=True)
class PersonalRelease(Release):
    """A :class:`~controller.step.Release` plus what it says about each tier (public).

    ``personal``: ``{"version", "mechanism", "tiers": [...], "parts": [...]}``; each tier
    gives its declared ε, the part it is released in and its ledger (spent, and for w-event
    the window's spend), each part its ε, kind and its own noisy counts. Everything in it is
    public configuration or computed from released values and the ledgers.
    """

    personal: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PersonalState:
    """Engine state of a personalized stream. Secret: holds the coin key and the parts' ρ."""

    timestep: int
    fresh_count: int
    parts: tuple[EngineState, ...]
    ledgers: tuple[Accountant, ...]
    coin_key: int
    last: LastRelease
    default_level: int = 0

    @property
    def accountant(self) -> Accountant:
        """The ledger of the default budget (``privacy.epsilon``): what the stream-wide figures report."""
        return self.ledgers[self.default_level]


def sampling_window_refusal(w: int) -> str:
    """Why Sampling is refused under w-event privacy with ``w > 1`` (one line, what to do)."""
    return (f"privacy.personal.mechanism sampling with privacy.unit w-event and w = {w}: a w-event neighbour "
            "keeps a person's records outside the window, so a coin shared by timesteps inside and outside "
            "the window is revealed by the releases outside it and the sample amplifies nothing; a fresh coin "
            "per timestep is proven only for w = 1 (docs/privacy.md §12.7). Use w: 1, privacy.unit: "
            "user-level, or another privacy.personal.mechanism (threshold, privacy_aware, utility_based)")


def _level_accountant(unit: UserLevel | WEvent, epsilon: Fraction) -> Accountant:
    if isinstance(unit, WEvent):
        return WindowAccountant(epsilon, unit.w)
    return UserLevelAccountant(epsilon)


class PersonalEngine:
    """The PDP release backend: a plan, one :class:`Engine` per part, one ledger per level.

    Args:
        plan: the public PDP plan over the budget levels.
        engines: one engine per part of ``plan`` (same order), each with its part's ε.
        unit: the stream's privacy unit (its ε is the default budget).
        tiers: tier name → level index (the default tier included).
        default_level: level index of the default budget.
        randomness: where the coin key comes from (the OS CSPRNG unless seeded).
        stream_id: names the coin key's seeded derivation.
        declaration: SHA-256 of the private part of the declaration (the consent table's rows), or
            empty when there is none. Secret: never published; a snapshot stores it only keyed by
            the coin key (:meth:`declaration_digest`), and :meth:`restore` refuses a snapshot whose
            digest differs (a changed consent table fails closed).
    """

    def __init__(
        self,
        plan: PersonalizedMechanism,
        engines: Sequence[Engine],
        unit: UserLevel | WEvent,
        tiers: Mapping[str, int],
        default_level: int,
        randomness: Randomness,
        stream_id: str,
        declaration: bytes = b"",
    ) -> None:
        self.plan = plan
        self.declaration = bytes(declaration)
        self.engines = tuple(engines)
        self.unit = unit
        self.tiers = dict(tiers)
        self.default_level = int(default_level)
        self.randomness = randomness
        self.stream_id = stream_id
        if len(self.engines) != len(plan.parts):
            raise StateError(f"{len(plan.parts)} parts but {len(self.engines)} engines")
        bins = {e.bins for e in self.engines}
        if len(bins) != 1:
            raise StateError("every part's engine must release the same bins")
        self.bins = bins.pop()
        for part, eng in zip(plan.parts, self.engines, strict=True):
            acct = eng.policy.new_accountant()
            if acct.epsilon != part.epsilon:
                raise StateError(f"a part released at ε={part.epsilon} has an engine with budget {acct.epsilon}")
        self.levels = plan.levels.size
        #: the excluded row (sampling coin failed) is the last one
        self.input_bins = (self.levels + 1) * self.bins
        self.charge = plan.personal_epsilon
        self._part_of = plan.part_of_level()
        self._ratio: list[Fraction] = []
        for lvl in range(self.levels):
            k = int(self._part_of[lvl])
            self._ratio.append(Fraction(0) if k < 0 else self.charge[lvl] / plan.parts[k].epsilon)
        self._sampled = [k for k, p in enumerate(plan.parts) if p.sample_below is not None]
        self._sampler = (InclusionSampler.build(plan.levels.epsilons, plan.parts[self._sampled[0]].sample_below)
                         if self._sampled else None)
        if self._sampler is not None and isinstance(unit, WEvent) and unit.w > 1 and bool(
                (self._sampler.numer < self._sampler.big_t).any()):
            raise StateError(sampling_window_refusal(unit.w))
        #: w-event: a fresh coin per person and timestep (w = 1); user-level: one per person for the
        #: stream's lifetime. Public (follows from the unit); a test may switch it to show the audit
        #: catches a lifetime coin under w-event.
        self.coin_per_timestep = isinstance(unit, WEvent)
        #: (coin key, person, level, timestep or None) → kept: each coin is drawn once, not at every
        #: batch. Secret (derived from the coin key), in memory only; bounded (oldest first out, and
        #: a coin evicted is recomputed identically).
        self._coins: OrderedDict[tuple[int, str, int, int | None], bool] = OrderedDict()

    @property
    def method(self) -> str:
        return self.engines[0].method

    @property
    def mechanism(self) -> Any:
        return self.engines[0].mechanism

    @property
    def policy(self) -> Any:
        return self.engines[0].policy

    # -- inclusion ---------------------------------------------------------------------
    def slots(self, state: PersonalState, levels: np.ndarray, persons: Sequence[str],
              timesteps: np.ndarray | int | None = None) -> np.ndarray:
        """Input row of each event: its level, or the excluded row if its person's coin failed.

        ``levels`` (int64, one per event) come from the event's public consent value or the
        consent table; ``persons`` are the events' canonical person keys; ``timesteps`` (w-event
        only) each event's grid cell, from its own event time (an int for a whole batch of one
        timestep). The Sampling coin is drawn exactly (:func:`histogram.personalized.sample_inclusion`)
        from an AES-CTR stream keyed by HMAC-SHA256(coin key, person) under user-level privacy (the
        same person gets the same coin at every timestep and after a restart) and by
        HMAC-SHA256(coin key, timestep, person) under w-event privacy (a fresh coin per person and
        timestep, the same after a restart). No coin depends on anyone else's events.
        """
        out = np.asarray(levels, dtype=np.int64).copy()
        if self._sampler is None or out.size == 0:
            return out
        sampler = self._sampler
        below = np.flatnonzero(sampler.numer[out] < sampler.big_t)
        if not below.size:
            return out
        cells: list[int | None]
        if self.coin_per_timestep:
            if timesteps is None:
                raise StateError("w-event Sampling draws a coin per person and timestep: pass each event's timestep")
            cells = np.broadcast_to(np.asarray(timesteps, dtype=np.int64), out.shape)[below].tolist()
        else:
            cells = [None] * below.size
        key = state.coin_key.to_bytes(16, "little")
        if hasattr(persons, "to_pylist"):  # an Arrow string array of person keys
            persons = persons.take(below).to_pylist()
        else:
            persons = [persons[i] for i in below.tolist()]
        coins = self._coins
        for i, person, cell in zip(below.tolist(), persons, cells, strict=True):
            level = int(out[i])
            ck = (state.coin_key, person, level, cell)
            kept = coins.get(ck)
            if kept is None:
                message = (b"dpstream-pdp-coin-v1\x00" + person.encode() if cell is None else
                           b"dpstream-pdp-coin-timestep-v1\x00" + int(cell).to_bytes(8, "little", signed=True)
                           + person.encode())
                digest = hmac.new(key, message, hashlib.sha256).digest()
                drawer = GeneratorDrawer(int.from_bytes(digest[:16], "little"))
                kept = bool(sampler.draw(np.array([level]), drawer)[0])
                coins[ck] = kept
                while len(coins) > COIN_CACHE_MAX:
                    coins.popitem(last=False)
            if not kept:
                out[i] = self.levels
        return out

    # -- stepping ----------------------------------------------------------------------
    def initial_state(self) -> PersonalState:
        words = self.randomness.drawer(self.stream_id, 0, "pdp-coin-key").uniform_int(
            np.full(4, 2**32, dtype=np.int64))
        key = sum(int(w) << (32 * i) for i, w in enumerate(words.tolist()))
        ledgers = tuple(_level_accountant(self.unit, e) for e in self.plan.levels.epsilons)
        return PersonalState(0, 0, tuple(e.initial_state() for e in self.engines), ledgers, key,
                             LastRelease.placeholder(self.bins), self.default_level)

    def step(self, state: PersonalState, counts: np.ndarray, noise: NoiseDrawer) -> tuple[PersonalRelease, PersonalState]:
        """One timestep: every part's sub-stream steps on its persons' counts; ledgers mirrored. Pure."""
        counts = np.asarray(counts)
        if counts.shape != (self.input_bins,) or counts.dtype.kind not in "iu":
            raise ValueError(f"counts must be an integer vector of length {self.input_bins} "
                             f"({self.levels} budget levels + excluded, × {self.bins} bins)")
        rows = counts.reshape(self.levels + 1, self.bins)
        t = state.timestep
        ledgers = [a.copy() for a in state.ledgers]
        changed: list[LedgerEntry] = []
        releases: list[Release] = []
        part_states: list[EngineState] = []
        for k, (part, eng) in enumerate(zip(self.plan.parts, self.engines, strict=True)):
            part_counts = rows[list(part.levels)].sum(axis=0).astype(np.int64)
            rel, st = eng.step(state.parts[k], part_counts, noise)
            releases.append(rel)
            part_states.append(st)
            before = {e.seq: e for e in state.parts[k].accountant.entries}
            for entry in rel.ledger:
                for lvl in part.levels:
                    changed.append(self._mirror(ledgers[lvl], lvl, k, entry, before.get(entry.seq), t))
        fresh = any(r.kind == "fresh" for r in releases)
        fresh_count = state.fresh_count + (1 if fresh else 0)
        last = self._combine(releases, t) if fresh else state.last
        acct = ledgers[self.default_level]
        window = acct.window_spend(t) if isinstance(acct, WindowAccountant) else None
        release = PersonalRelease(
            timestep=t,
            kind="fresh" if fresh else "republished",
            counts=last.counts,
            half_width=last.half_width,
            confidence=last.confidence,
            source_timestep=last.timestep,
            epsilon_release=last.epsilon,
            epsilon_spent=acct.spent,
            window_spend=window,
            epsilon_remaining=acct.remaining(t),
            fresh_count=fresh_count,
            method=self.method,
            ledger=tuple(changed),
            details={},
            personal=self._describe(releases, ledgers, t),
        )
        new = PersonalState(t + 1, fresh_count, tuple(part_states), tuple(ledgers), state.coin_key, last,
                            self.default_level)
        return release, new

    def _mirror(self, ledger: Accountant, lvl: int, part: int, entry: LedgerEntry,
                previous: LedgerEntry | None, t: int) -> LedgerEntry:
        """Charge (or stretch) level ``lvl``'s copy of part ``part``'s ledger entry ``entry``."""
        if previous is not None:  # an existing entry grew (w-event SVT span): same seq in the mirror;
            return ledger.extend(entry.seq, entry.end)  # a window it cannot afford raises
        amount = entry.epsilon * self._ratio[lvl]
        mirrored = ledger.spend(t, amount, f"part {part}: {entry.purpose}")
        if mirrored.seq != entry.seq:
            raise StateError(f"level ledger out of step with part {part}'s ledger (seq {mirrored.seq} vs {entry.seq})")
        return mirrored

    def _combine(self, releases: Sequence[Release], t: int) -> LastRelease:
        """The published estimate: Σ_k w_k · H̃_k · N / E_k over every part's current release (public constants)."""
        expected = self.plan.expected_members()
        total = float(self.plan.levels.total)
        factors = [w * total / e if e > 0 else 0.0 for w, e in zip(self.plan.weights, expected, strict=True)]
        unit = all(abs(f - 1.0) < 1e-12 for f in factors) and all(r.counts.dtype.kind in "iu" for r in releases)
        if unit:
            est = sum((np.asarray(r.counts, dtype=np.int64) for r in releases), np.zeros(self.bins, np.int64))
            width = sum((np.asarray(r.half_width, dtype=np.float64) for r in releases), np.zeros(self.bins))
        else:
            est = sum((f * np.asarray(r.counts, dtype=np.float64) for f, r in zip(factors, releases, strict=True)),
                      np.zeros(self.bins))
            width = sum((f * np.asarray(r.half_width, dtype=np.float64) for f, r in zip(factors, releases, strict=True)
                         if f > 0), np.zeros(self.bins))
        # the parts' intervals hold together with probability >= 1 − Σ(1 − c_k) (union bound)
        confidence = max(0.0, 1.0 - sum(1.0 - r.confidence for r in releases))
        sources = [r.source_timestep for r in releases]
        source = None if any(s is None for s in sources) else min(sources)  # type: ignore[type-var]
        if source is None:
            width = np.full(self.bins, np.inf)
            confidence = 0.0
        est = np.asarray(est)
        est.setflags(write=False)
        return LastRelease(est, np.asarray(width, dtype=np.float64), confidence, source,
                           max(r.epsilon_release for r in releases))

    def _describe(self, releases: Sequence[Release], ledgers: Sequence[Accountant], t: int) -> dict[str, Any]:
        tiers = []
        for name, lvl in sorted(self.tiers.items(), key=lambda kv: (kv[1], kv[0])):
            acct = ledgers[lvl]
            k = int(self._part_of[lvl])
            window = acct.window_spend(t) if isinstance(acct, WindowAccountant) else None
            tiers.append({
                "tier": name,
                "epsilon": float(self.plan.levels.epsilons[lvl]),
                "epsilon_exact": str(self.plan.levels.epsilons[lvl]),
                "part": None if k < 0 else k,
                "charge_exact": str(self.charge[lvl]),
                "spent_exact": str(acct.spent),
                "window_spent_exact": None if window is None else str(window),
            })
        parts = []
        for k, (part, rel) in enumerate(zip(self.plan.parts, releases, strict=True)):
            parts.append({
                "epsilon": float(part.epsilon),
                "epsilon_exact": str(part.epsilon),
                "sampled_below_exact": None if part.sample_below is None else str(part.sample_below),
                "weight": float(self.plan.weights[k]),
                "kind": rel.kind,
                "source_timestep": rel.source_timestep,
                "counts": np.asarray(rel.counts).tolist(),
            })
        return {"version": PERSONAL_MESSAGE_VERSION, "mechanism": self.plan.name, "tiers": tiers, "parts": parts}

    # -- snapshots ---------------------------------------------------------------------
    def parameters(self) -> dict[str, Any]:
        """Public parameters a snapshot must match: the parts' engines, the levels and the plan."""
        return json.loads(json.dumps({
            "parts": [e.parameters() for e in self.engines],
            "levels": [str(e) for e in self.plan.levels.epsilons],
            "counts": list(self.plan.levels.counts),
            "plan": [{"levels": list(p.levels), "epsilon": str(p.epsilon),
                      "sample_below": None if p.sample_below is None else str(p.sample_below)}
                     for p in self.plan.parts],
            "tiers": self.tiers,
        }, sort_keys=True))

    def declaration_digest(self, coin_key: int) -> str | None:
        """HMAC-SHA256(coin key, the consent table's digest), hex; None without a consent table.

        Keyed by the stream's secret coin key, so it says nothing about the table to anyone who
        does not hold the state; it lets a restart detect a changed table although the public
        config fingerprint no longer carries a hash of the table's rows (``docs/privacy.md`` §12.2).
        """
        if not self.declaration:
            return None
        return hmac.new(coin_key.to_bytes(16, "little"), b"dpstream-pdp-declaration-v1\x00" + self.declaration,
                        hashlib.sha256).hexdigest()

    def snapshot(self, state: PersonalState) -> dict[str, Any]:
        """JSON-ready snapshot (secret: coin key, threshold noise, the keyed consent-table digest)."""
        return {
            "declaration": self.declaration_digest(state.coin_key),
            "version": PERSONAL_STATE_VERSION,
            "kind": "personal",
            "method": self.method,
            "bins": self.bins,
            "parameters": self.parameters(),
            "timestep": state.timestep,
            "fresh_count": state.fresh_count,
            "coin_key": f"{state.coin_key:032x}",
            "parts": [e.snapshot(s) for e, s in zip(self.engines, state.parts, strict=True)],
            "ledgers": [a.snapshot() for a in state.ledgers],
            "last": state.last.to_json(),
        }

    def restore(self, data: dict[str, Any]) -> PersonalState:
        """Rebuild a state from :meth:`snapshot`; refuses another plan, budget or size."""
        if not isinstance(data, dict) or data.get("kind") != "personal" or data.get("version") != PERSONAL_STATE_VERSION:
            raise StateError("the snapshot is not a personalized-DP engine snapshot of version "
                             f"{PERSONAL_STATE_VERSION}: refusing to continue it with privacy.personal set")
        if data.get("parameters") != self.parameters() or data.get("bins") != self.bins:
            raise StateError("snapshot was taken under a different personal budget declaration or plan "
                             "(tiers, ε per tier, mechanism, parts): refusing to continue it; start a new stream id")
        try:
            parts = tuple(e.restore(s) for e, s in zip(self.engines, data["parts"], strict=True))
            ledgers = tuple(restore_accountant(a) for a in data["ledgers"])
            if len(ledgers) != self.levels or any(
                    a.epsilon != e for a, e in zip(ledgers, self.plan.levels.epsilons, strict=True)):
                raise StateError("snapshot's level ledgers do not match the declared budget levels")
            last = LastRelease.from_json(data["last"])
            timestep, fresh_count = int(data["timestep"]), int(data["fresh_count"])
            key = int(str(data["coin_key"]), 16)
            declared = data.get("declaration")
        except StateError:
            raise
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            raise StateError(f"malformed personalized engine snapshot: {exc}") from exc
        if not hmac.compare_digest(str(declared), str(self.declaration_digest(key))):
            raise StateError("the consent table (privacy.personal.table) differs from the one the stream's snapshot "
                             "was taken under: a changed table is a changed budget; restore the table, or start "
                             "a new stream id")
        if any(p.timestep != timestep for p in parts) or not 0 <= fresh_count <= timestep:
            raise StateError("snapshot's parts are not at the stream's timestep")
        return PersonalState(timestep, fresh_count, parts, ledgers, key, last, self.default_level)
