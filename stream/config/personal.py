"""Personalized DP's public declaration (``privacy.personal``, ``docs/privacy.md`` §12): who gets
which ε, read from the consent attribute's tiers or a consent table CSV, and the PDP plan over it.

The section's own checks are in :mod:`stream.config.sections.privacy`; the checks that need the
whole configuration, and the consent table's reading, are here; the per-part engines are built by
:func:`stream.config.building.build_engine`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from controller.errors import ConfigurationError
from controller.personal import sampling_window_refusal
from histogram.personalized import BudgetLevels, PersonalBudgets, PersonalizedMechanism
from histogram.postprocess import STATEFUL, parse_chain
from stream.config.sections import DEFAULT_TIER, MODEL_MECHANISMS
from stream.config.view import SettingsView

__all__ = ["PersonalDeclaration", "declare"]


@dataclass(frozen=True, eq=False)
class PersonalDeclaration:
    """Who gets which ε, and the PDP plan over it: all public, fixed for the stream's lifetime.

    Attributes:
        budgets: the declaration (default ε, tiers, consent table, consent attribute).
        levels: the distinct budgets with the declared head counts.
        tier_level: tier name → level index (``default`` included).
        default_level: level of ``privacy.epsilon``.
        plan: the PDP mechanism over ``levels``.
        table_keys, table_levels: the consent table as canonical person keys and their levels.
    """

    budgets: PersonalBudgets
    levels: BudgetLevels
    tier_level: Mapping[str, int]
    default_level: int
    plan: PersonalizedMechanism
    table_keys: tuple[str, ...]
    table_levels: tuple[int, ...]
    attribute: str | None


_TABLES: dict[tuple[str, int, int, tuple[str, ...], bool], tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _read_consent_table(path: str, tiers: tuple[str, ...], numeric: bool = True,
                        ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(canonical person keys, tier names)`` of a consent table CSV (header line, then ``id,tier``)."""
    import csv

    import pyarrow as pa

    from stream.ingest.person_key import canonical_keys

    where = f"privacy.personal.table: {path}"
    try:
        st = Path(path).stat()
        cache_key = (str(Path(path).resolve()), st.st_mtime_ns, st.st_size, tiers, numeric)
        if cache_key in _TABLES:
            return _TABLES[cache_key]
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except FileNotFoundError:
        raise ConfigurationError(f"{where}: no such file; give the path of the consent table CSV") from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"{where}: not UTF-8 text; save the consent table as UTF-8 CSV") from None
    except (OSError, csv.Error) as exc:
        raise ConfigurationError(f"{where}: cannot read it ({exc}); check the path and permissions") from None
    if not rows:
        raise ConfigurationError(f"{where}: the file is empty; it needs a header line, then one 'person id,tier' row "
                                 "per person")
    ids: list[str] = []
    names: list[str] = []
    for line, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 2:
            raise ConfigurationError(f"{where}:{line}: expected 2 columns (person id, tier), got {len(row)}")
        pid, tier = row[0], row[1].strip()
        if not pid.strip():
            raise ConfigurationError(f"{where}:{line}: the person id is empty")
        if tier not in tiers:
            raise ConfigurationError(f"{where}:{line}: tier {tier!r} is not declared in privacy.personal.tiers "
                                     f"({', '.join(tiers)}); declare it or fix the row")
        ids.append(pid)
        names.append(tier)
    keys, invisible = canonical_keys(pa.array(ids, type=pa.string()), numeric=numeric)
    if invisible.any():
        line = int(invisible.argmax())
        raise ConfigurationError(f"{where}: person id {ids[line]!r} has invisible characters, which the stream "
                                 "refuses in events too; remove them")
    seen: dict[str, str] = {}
    for key, tier in zip(keys.to_pylist(), names, strict=True):
        if seen.setdefault(key, tier) != tier:
            raise ConfigurationError(f"{where}: person {key!r} is listed with tiers {seen[key]!r} and {tier!r}; a "
                                     "person has one budget: keep one row")
    out = (tuple(seen), tuple(seen.values()))
    _TABLES[cache_key] = out
    return out


def declare(settings: SettingsView) -> PersonalDeclaration:
    """The declaration of ``privacy.personal`` and its PDP plan, with every check that needs the
    whole configuration (one process, a histogram mechanism, no smoother, a public consent field);
    reads the consent table (cached by path, size and modification time).

    Raises:
        ConfigurationError: what is inconsistent, and what to set instead.
    """
    from histogram.errors import MechanismError
    from histogram.personalized import (
        CountUtility,
        minimum,
        partitioned,
        privacy_aware,
        sampling,
        threshold,
        utility_based,
        utility_based_partition,
    )

    p = settings.privacy
    cfg = p.personal
    assert cfg is not None
    if settings.service.role != "single":
        raise ConfigurationError(
            f"privacy.personal with service.role {settings.service.role}: scale-out workers do not route events "
            "by budget tier yet; run one service.role: single process")
    if settings.release.mechanism in MODEL_MECHANISMS:
        raise ConfigurationError(
            f"privacy.personal with release.mechanism: {settings.release.mechanism}: per-tier model releases are "
            "not built; use release.mechanism: lpa or psd with privacy.personal, or remove privacy.personal")
    smoothers = [step for step in parse_chain(settings.release.postprocess) if step in STATEFUL]
    if smoothers:
        raise ConfigurationError(
            f"privacy.personal with release.postprocess {smoothers[0]}: the smoothers follow one release series, "
            "not a personalized estimate; use none, nonnegative or integer with privacy.personal")
    counted = set(settings.domain().names)
    if cfg.attribute is not None:
        s = settings.schema_
        if cfg.attribute in counted:
            raise ConfigurationError(
                f"privacy.personal.attribute {cfg.attribute!r} is also a counted attribute (schema.attributes): a "
                "budget that depends on a sensitive value is itself sensitive (docs/privacy.md §12.2); key the "
                "tiers by a public consent field that is not counted")
        if cfg.attribute in {s.user_id, s.event_time, s.arrival_time}:
            raise ConfigurationError(
                f"privacy.personal.attribute {cfg.attribute!r} is the user id / event time column; name the "
                "consent field of the events")
    tier_names = tuple(cfg.tiers)
    keys: tuple[str, ...] = ()
    key_tiers: tuple[str, ...] = ()
    if cfg.table is not None:
        keys, key_tiers = _read_consent_table(cfg.table, tier_names, settings.schema_.numeric_user_ids)
    budgets = PersonalBudgets(p.epsilon, dict(cfg.tiers), dict(zip(keys, key_tiers, strict=True)),
                              cfg.attribute if cfg.attribute is not None else "@table")
    budgets.check_public(counted)
    # head counts: declared persons, else (table) the table's rows per tier
    per_tier: dict[str, int] = {}
    for name in (*tier_names, DEFAULT_TIER):
        if name in cfg.persons:
            per_tier[name] = int(cfg.persons[name])
        else:
            per_tier[name] = sum(1 for t in key_tiers if t == name)
    tally: dict[Fraction, int] = {}
    eps_of = {**dict(cfg.tiers), DEFAULT_TIER: p.epsilon}
    for name, n in per_tier.items():
        tally[eps_of[name]] = tally.get(eps_of[name], 0) + n
    ordered = sorted(tally)
    levels = BudgetLevels(tuple(ordered), tuple(tally[e] for e in ordered))
    tier_level = {name: ordered.index(eps_of[name]) for name in per_tier}
    try:
        if cfg.mechanism == "minimum":
            plan = minimum(levels)
        elif cfg.mechanism == "threshold":
            plan = threshold(levels, cfg.threshold)
        elif cfg.mechanism == "sampling":
            plan = sampling(levels, cfg.threshold)
        elif cfg.mechanism == "privacy_aware":
            plan = privacy_aware(levels, cfg.min_size, CountUtility() if cfg.weights == "utility" else None)
        else:
            plan = utility_based(levels, CountUtility(), cfg.min_size)
            if cfg.weights == "sum":
                plan = partitioned(plan.name, utility_based_partition(levels, CountUtility(), cfg.min_size))
    except MechanismError as exc:
        raise ConfigurationError(f"privacy.personal.mechanism {cfg.mechanism}: {exc} (declare head counts in "
                                 "privacy.personal.persons, or use a consent table)") from None
    if (p.unit == "w-event" and p.w > 1 and any(part.sample_below is not None and levels.minimum < part.sample_below
                                                for part in plan.parts)):
        raise ConfigurationError(sampling_window_refusal(p.w))
    return PersonalDeclaration(budgets, levels, tier_level, tier_level[DEFAULT_TIER], plan, keys,
                               tuple(tier_level[t] for t in key_tiers), cfg.attribute)
