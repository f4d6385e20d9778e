"""Detectors on the declared queries' released answers, and the alert events they publish (issue 33).

The service feeds every release message of a checkpoint, in timestep order, to
:class:`AlertWatch` *before* the checkpoint is journaled: the alert events it returns become
outputs of that same checkpoint (role ``alert``, topic ``alerts.topic``), so they are journaled
with the release and written in the same Kafka transaction — a consumer never sees an alert
without its release or a release without its alerts, and a kill between the two re-sends both
byte for byte (the journal's redo). The detectors' state is part of the checkpoint's state, so a
restart resumes them exactly; a release the journal re-sends (a recalled timestep) is not fed
twice (:attr:`AlertWatch.last_timestep`).

What a detector reads: the answers the release message carries (``queries``), its kind and
source timestep, and public configuration — nothing else (``docs/privacy.md`` §13). A
republished release repeats an earlier answer and adds no evidence: detectors are fed only the
fresh releases (a new ``accuracy.source_timestep``). The metrics (``dpstream_query_*``,
``dpstream_alerts_total``) are set only once the checkpoint committed: they show released
values only, one series per declared query and detector (bounded by the configuration).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from histogram.detectors import Detector, make_detector
from stream.messages import canonical_bytes
from stream.service.journal import JournaledOutput
from stream.service.metrics import Metrics

__all__ = ["ALERT_ROLE", "AlertWatch", "alert_event"]

ALERT_ROLE = "alert"
ALERT_VERSION = 1


@dataclass(frozen=True)
class _Effect:
    """A metric change to apply once the checkpoint that carries it committed."""

    query: str
    value: float
    half_width: float | None
    stats: tuple[tuple[str, float | None, bool], ...]  # (detector, statistic, fired)


def alert_event(*, stream: str, release: dict[str, Any], answer: dict[str, Any], detector: str,
                statistic: float, limit: float) -> bytes:
    """The canonical JSON of one alert event (the value of one record on the alerts topic)."""
    what = ("the released answer is above the declared threshold" if detector == "threshold"
            else "the private threshold test (sparse vector, charged) answered above" if detector == "private"
            else f"the {detector} chart of the released answers is above its control limit")
    doc = {"message_type": "alert", "version": ALERT_VERSION, "stream": stream, "query": answer["name"],
           "detector": detector, "timestep": release["timestep"]["index"],
           "source_timestep": release["accuracy"]["source_timestep"], "release_id": release["release_id"],
           "value": answer["value"], "half_width": answer.get("half_width"),
           "statistic": round(float(statistic), 6) + 0.0, "limit": round(float(limit), 6) + 0.0, "fired": what,
           "note": "computed from the release message and public configuration only: no privacy cost"}
    return canonical_bytes(doc)


class AlertWatch:
    """The declared queries' detectors of one stream (see the module docstring)."""

    def __init__(self, settings: Any, metrics: Metrics, state: dict[str, Any] | None = None) -> None:
        self.stream = settings.stream.id
        self.metrics = metrics
        self.detectors: dict[str, dict[str, Detector]] = {}
        for q in settings.queries:
            self.detectors[q.name] = {
                d.kind: make_detector(d.kind, above=d.above, limit=d.limit, slack=d.slack, weight=d.weight,
                                      baseline=d.baseline, season=d.season, target=d.target)
                for d in q.detectors}
        #: queries with a private threshold alert: its positives (published in the release) become
        #: alert events too, detector "private"
        self.private = {q.name for q in settings.queries if q.private is not None}
        metrics.declare_queries([(name, [*dets, *(["private"] if name in self.private else [])])
                                 for name, dets in self.detectors.items()])
        #: the last timestep whose release was fed (a re-sent release is never fed twice)
        self.last_timestep = -1
        #: the last source timestep fed to the detectors (republished releases add no evidence)
        self.last_source = -1
        self._effects: list[_Effect] = []
        self._last: dict[str, Any] = {}  # per query: the last committed effect (restored on start)
        if state:
            self.restore(state)

    def observe(self, payloads: list[bytes]) -> list[JournaledOutput]:
        """Feed a checkpoint's release messages (timestep order); the alert events to publish with them."""
        out: list[JournaledOutput] = []
        for payload in payloads:
            release = json.loads(payload)
            index = int(release["timestep"]["index"])
            if index <= self.last_timestep:
                continue
            self.last_timestep = index
            source = release["accuracy"]["source_timestep"]
            fresh = release["kind"] == "fresh" and source is not None and source > self.last_source
            if fresh:
                self.last_source = int(source)
            private = {o["name"]: o for o in release.get("private_alerts") or ()}
            for answer in release.get("queries") or ():
                name = answer["name"]
                stats: list[tuple[str, float | None, bool]] = []
                outcome = private.get(name)
                if outcome is not None and outcome["tested"]:  # the SVT's published answer, as released
                    stats.append(("private", float(outcome["positives"]), bool(outcome["fired"])))
                    if outcome["fired"]:
                        out.append(JournaledOutput(ALERT_ROLE, f"{self.stream}:{name}:private".encode(), alert_event(
                            stream=self.stream, release=release, answer=answer, detector="private",
                            statistic=float(outcome["positives"]), limit=float(outcome["max_alerts"]))))
                for kind, det in self.detectors.get(name, {}).items():
                    if not fresh:
                        continue
                    var = answer.get("variance")
                    verdict = det.update(int(source), float(answer["value"]), 0.0 if var is None else float(var))
                    stats.append((kind, verdict.statistic, verdict.fired))
                    if verdict.fired and verdict.statistic is not None:
                        out.append(JournaledOutput(ALERT_ROLE, f"{self.stream}:{name}:{kind}".encode(), alert_event(
                            stream=self.stream, release=release, answer=answer, detector=kind,
                            statistic=verdict.statistic, limit=verdict.limit)))
                self._effects.append(_Effect(name, float(answer["value"]), answer.get("half_width"), tuple(stats)))
        return out

    def committed(self) -> None:
        """The checkpoint committed: show its answers and detector outcomes in the metrics."""
        effects, self._effects = self._effects, []
        for e in effects:
            self._apply(e, count=True)

    def _apply(self, e: _Effect, *, count: bool) -> None:
        m = self.metrics
        m.query_value.labels(e.query).set(e.value)
        m.query_half_width.labels(e.query).set(math.nan if e.half_width is None else e.half_width)
        for kind, stat, fired in e.stats:
            m.query_statistic.labels(e.query, kind).set(math.nan if stat is None else stat)
            m.query_firing.labels(e.query, kind).set(1 if fired else 0)
            if fired and count:
                m.alerts.labels(e.query, kind).inc()
        last = self._last.setdefault(e.query, {"value": e.value, "half_width": e.half_width, "stats": {}})
        last.update(value=e.value, half_width=e.half_width)
        for kind, stat, fired in e.stats:
            last["stats"][kind] = [stat, fired]

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready state after the fed releases (journaled with the checkpoint that carries them)."""
        last = {k: dict(v, stats=dict(v["stats"])) for k, v in self._last.items()}
        for e in self._effects:  # what the checkpoint being journaled will show once committed
            cur = last.setdefault(e.query, {"value": e.value, "half_width": e.half_width, "stats": {}})
            cur.update(value=e.value, half_width=e.half_width)
            cur["stats"] = dict(cur["stats"], **{kind: [stat, fired] for kind, stat, fired in e.stats})
        return {"last_timestep": self.last_timestep, "last_source": self.last_source,
                "detectors": {q: {k: d.snapshot() for k, d in dets.items()} for q, dets in self.detectors.items()},
                "last": last}

    def restore(self, state: dict[str, Any]) -> None:
        self.last_timestep = int(state.get("last_timestep", -1))
        self.last_source = int(state.get("last_source", -1))
        for q, dets in (state.get("detectors") or {}).items():
            for kind, s in dets.items():
                if kind in self.detectors.get(q, {}):
                    self.detectors[q][kind].restore(s)
        for q, last in (state.get("last") or {}).items():
            if q in self.detectors:
                stats = tuple((k, v[0], bool(v[1])) for k, v in last.get("stats", {}).items()
                              if k in self.detectors[q])
                self._apply(_Effect(q, float(last["value"]), last.get("half_width"), stats), count=False)
