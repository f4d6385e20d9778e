"""Configuration of declared queries and their alerts (``queries:`` and ``alerts:``; issue 33).

```yaml
queries:
  - name: flu_north                 # [a-z0-9_], unique: the metric label and the alert's query
    where:                          # per attribute: a categorical value / a list of them, or
      region: north                 # "LOW-HIGH" / a list of level indexes of a numeric attribute;
      age: "2-4"                    # attributes not named keep every level
    detectors:
      - {kind: threshold, above: 120}
      - {kind: cusum, limit: 5, slack: 0.5, baseline: 7, season: 24}
      - {kind: ewma, limit: 3, weight: 0.2}
alerts:
  topic: dpstream.alerts
```

Everything here is public configuration: detectors read released answers and these settings
only (``docs/privacy.md`` §13). The query names, sets and detectors are part of the
configuration fingerprint when any query is declared (the release messages carry the answers).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from histogram.declared import DeclaredQuery

__all__ = ["DetectorSettings", "PrivateAlertSettings", "QuerySettings", "AlertsSection", "declared_queries",
           "private_engine"]

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DetectorSettings(_Frozen):
    """One detector on a declared query's fresh released answers (``histogram.detectors``).

    ``threshold``: fires when a fresh answer is above ``above`` (counts). ``cusum`` / ``ewma``:
    control charts on standardised residuals; ``limit`` (standard deviations) is required,
    ``slack`` (CUSUM, sd), ``weight`` (EWMA, in (0, 1]); the baseline is the mean of the last
    ``baseline`` fresh answers one ``season`` (timesteps) apart, or ``target`` (counts) when set.
    """

    kind: Literal["threshold", "cusum", "ewma"]
    above: float | None = None
    limit: float | None = Field(default=None, gt=0)
    slack: float = Field(default=0.5, ge=0)
    weight: float = Field(default=0.2, gt=0, le=1)
    baseline: int = Field(default=7, ge=2, le=1000)
    season: int = Field(default=1, ge=1, le=10000)
    target: float | None = None

    @model_validator(mode="after")
    def _needs(self) -> DetectorSettings:
        if self.kind == "threshold" and self.above is None:
            raise ValueError("a threshold detector needs above: the released answer (a count) it fires over")
        if self.kind != "threshold" and self.limit is None:
            raise ValueError(f"a {self.kind} detector needs limit: the control limit in standard deviations "
                             "(e.g. 5 for CUSUM, 3 for EWMA)")
        return self


class PrivateAlertSettings(_Frozen):
    """A private threshold alert on the query's *true* answer at every republished timestep
    (sparse vector; costs budget: ``alerts.private_share``; ``docs/privacy.md`` §14.1)."""

    above: float
    max_alerts: int = Field(default=1, ge=1, le=1000)


class QuerySettings(_Frozen):
    """One declared query (see the module docstring)."""

    name: str
    where: dict[str, str | int | list[str | int]] = Field(default_factory=dict)
    detectors: list[DetectorSettings] = Field(default_factory=list, max_length=3)
    private: PrivateAlertSettings | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"query name {v!r}: use lowercase letters, digits and _ (starting with a letter)")
        return v

    @model_validator(mode="after")
    def _distinct_detectors(self) -> QuerySettings:
        kinds = [d.kind for d in self.detectors]
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"query {self.name}: at most one detector of each kind")
        return self


class AlertsSection(_Frozen):
    """Where alert events go: ``topic`` (written in the same Kafka transaction as the release), and
    ``private_share``: the share of ``privacy.epsilon`` the private threshold alerts get together
    (split equally between them; the decision policy and the releases get the rest)."""

    topic: str = "dpstream.alerts"
    private_share: Fraction | None = None

    @field_validator("private_share", mode="before")
    @classmethod
    def _share(cls, v: Any) -> Any:
        if v is None:
            return None
        share = Fraction(str(v))
        if not 0 < share < 1:
            raise ValueError(f"alerts.private_share {v} must lie strictly between 0 and 1 (e.g. 1/10)")
        return share


def private_engine(settings: Any, build: Any, spec: Any = None) -> Any:
    """The stream's engine with its private threshold alerts: ``build(spec)`` (the one engine builder,
    :func:`stream.config.building.build_engine`) builds the plain engine at the reduced ε, whose policy
    is then wrapped.

    The decision policy runs with ``ε·(1 − share)``; each private alert's SVT instance gets
    ``ε·share / alerts``; one accountant of ε charges both.

    Raises:
        ValueError: private alerts on a w-event, personalized or model-release stream, or without
            ``alerts.private_share``.
    """
    from dataclasses import replace

    from controller.private_alerts import AlertingPolicy, PrivateAlert
    from controller.svt import SVTCalibration
    from controller.units import UserLevel

    private = [q for q in settings.queries if q.private is not None]
    share = settings.alerts.private_share
    if share is None:
        raise ValueError("queries declare private alerts but alerts.private_share is not set: declare the share of "
                         "privacy.epsilon they may spend (e.g. 1/10)")
    if settings.privacy.unit != "user-level" or settings.privacy.personal is not None:
        raise ValueError("private alerts need privacy.unit: user-level without privacy.personal")
    if settings.release.mechanism not in ("lpa", "psd"):
        raise ValueError("private alerts test the histogram's counts: use release.mechanism lpa or psd")
    spec = settings.method_spec() if spec is None else spec
    unit = spec.unit
    inner = build(replace(spec, unit=UserLevel(unit.epsilon * (1 - share), unit.horizon, unit.cutoff)))
    if getattr(inner.policy, "smooth", None) is not None:
        raise ValueError(f"private alerts cannot wrap release.decision {settings.release.decision}")
    declared = {d.name: d for d in settings.declared_queries()}
    each = unit.epsilon * share / len(private)
    alerts = []
    for q in private:
        d = declared[q.name]
        flat = np.ravel_multi_index(np.ix_(*[np.asarray(k) for k in d.levels]), d.shape).ravel()
        cal = SVTCalibration.build(each, q.private.max_alerts, spec.sensitivity, spec.svt_split)  # type: ignore[arg-type]
        alerts.append(PrivateAlert(q.name, tuple(sorted(int(b) for b in flat)), float(q.private.above), cal))
    return replace(inner, policy=AlertingPolicy(inner.policy, tuple(alerts), unit))


def _levels(name: str, attr: Any, spec: str | int | list[str | int]) -> tuple[int, ...]:
    items = spec if isinstance(spec, list) else [spec]
    values = list(getattr(attr, "values", ()) or ())
    size = int(attr.bins)
    out: set[int] = set()
    for item in items:
        if isinstance(item, str) and item in values:
            out.add(values.index(item))
            continue
        text = str(item)
        low, dash, high = text.partition("-")
        try:
            lo, hi = int(low), int(high) if dash else int(low)
        except ValueError:
            known = f"one of {values} or " if values else ""
            raise ValueError(f"query {name}: where.{attr.name}: {item!r} is not {known}a level index "
                             f"or LOW-HIGH range of level indexes 0..{size - 1}") from None
        if not 0 <= lo <= hi < size:
            raise ValueError(f"query {name}: where.{attr.name}: {item!r} lies outside levels 0..{size - 1}")
        out.update(range(lo, hi + 1))
    if not out:
        raise ValueError(f"query {name}: where.{attr.name} keeps no level")
    return tuple(sorted(out))


def declared_queries(queries: list[QuerySettings], domain: Any) -> tuple[DeclaredQuery, ...]:
    """The configured queries resolved against the domain (level sets per attribute).

    Raises:
        ValueError: duplicate names, an unknown attribute, or a level outside the attribute.
    """
    names = [q.name for q in queries]
    if len(set(names)) != len(names):
        raise ValueError(f"queries: names must be distinct, got {names}")
    attrs = {a.name: a for a in domain.attributes}
    out = []
    for q in queries:
        unknown = sorted(set(q.where) - set(attrs))
        if unknown:
            raise ValueError(f"query {q.name}: where names {unknown}, not attributes of the domain ({sorted(attrs)})")
        levels = tuple(_levels(q.name, a, q.where[a.name]) if a.name in q.where else tuple(range(int(a.bins)))
                       for a in domain.attributes)
        out.append(DeclaredQuery(q.name, levels, tuple(int(a.bins) for a in domain.attributes)))
    return tuple(out)
