"""Logs and public metrics carry nothing a neighbour changes (issue 27 item 7).

``tests/stream/service/test_logs.py`` checks the *names* of the fields the
code logs against the allowlist, and ``test_metrics.py`` that every metric
family is classified; neither reads the *values* the service loop sets. So
a raw count in an allowlisted field (``releases=<events in the timestep>``)
or in a metric classed ``public`` would pass both.

Here the real service loop (``Service.start()``/``run()``, the real journal,
pipeline and engine; Kafka faked in process as in ``test_disk_full.py``)
runs two neighbouring inputs with the same seeded noise: D, and D′ = D plus
one person with one event in each of five timesteps (busy ones, and ones
that are empty in D). Then, for every decision method run here:

* every log line, every field but its wall-clock ``ts``, is byte-identical
  between D and D′ — except the fields listed in :data:`VOLUME_FIELDS`,
  which reveal input volume to operators as the ``volume`` metrics do
  (``docs/privacy.md`` §9), and whose values are compared as "may differ";
* every metric family classed ``public`` in ``stream.service.metrics.CLASSES``
  is byte-identical in the Prometheus exposition, scraped after start-up and
  after every checkpoint (a gauge overwritten later is still seen), and at
  the end equals what the output topic already says (releases by kind, the
  last timestep, the count sealed).

For data-independent decisions (uniform, fixed, Sample) the decisions are
the same in D and D′ by construction; for a data-dependent one (DSAT, BD)
the comparison is made on seeds where the published decision sequence is
the same (the decision itself is audited in ``tests/controller``), which
the test asserts rather than assumes.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

import stream.service.loop as loop_mod
from stream.config import load_settings
from stream.service.http import Health
from stream.service.logs import setup_logging
from stream.service.metrics import CLASSES, Metrics
from stream.service.testing import FakeKafka, FakeRecord, _FakeReader, fake_kafka_parts

START = 1_700_000_000.0  # 2023-11-14T22:13:20Z, timestep 1 s
STEPS = 12
EXTRA_AT = (0, 3, 4, 7, 8)  # D′: one more person, with an event in busy timesteps and in empty ones
EMPTY = {7, 8}  # timesteps with no event in D

#: log fields that may differ between neighbours, and why that is no leak to the public: the journal's
#: size after a compaction (logged) moves with the published release bytes (their noisy counts'
#: digits), the events buffered for open timesteps and the last checkpoint's dead-letter records —
#: operator-only input volume, like the ``volume`` metrics (docs/privacy.md §9). Measured here: every
#: compaction line's size differs between D and D′ by a few bytes.
VOLUME_FIELDS = frozenset({"size_bytes"})


def _event(user: str, t: float, x: int) -> bytes:
    return json.dumps({"user_id": user, "event_time": t, "attributes": {"x": x}}).encode()


def stream_of(extra: bool) -> list[list[tuple[bytes, float]]]:
    """One list of (payload, record time) per timestep; ``extra`` adds the neighbour's events."""
    out = []
    for step in range(STEPS + 2):
        n = 0 if step in EMPTY else 3 + step % 3
        recs = [(_event(f"u{step}-{j}", START + step + (j + 0.5) / (n + 2), (step * 7 + j * 13) % 100),
                 START + step + (j + 0.5) / (n + 2)) for j in range(n)]
        if extra and step in EXTRA_AT:
            t = START + step + (n + 0.5) / (n + 2)
            recs.append((_event("neighbour", t, 42), t))
        # a heartbeat in the next timestep's first instant completes this one even when it is empty
        hb = START + step + 1 + 1e-3
        recs.append((_event(f"hb{step}", hb, 99), hb))
        out.append(recs)
    return out


class ListKafka(FakeKafka):
    """The fake broker, serving an explicit list of records (one timestep's records per poll)."""

    def __init__(self, steps: list[list[tuple[bytes, float]]]) -> None:
        super().__init__(start=START, output_topic="out")
        self.records = [FakeRecord(o, v, None, int(round(r * 1000)))
                        for o, (v, r) in enumerate(x for s in steps for x in s)]
        self.cuts = [0]
        for s in steps:
            self.cuts.append(self.cuts[-1] + len(s))

    def record(self, offset: int) -> FakeRecord:
        return self.records[offset]


class ListReader(_FakeReader):
    """``InputReader`` over :class:`ListKafka`: each poll delivers the next timestep's records."""

    def arrive(self, pos: int) -> int:
        k = self.kafka
        return next((c for c in k.cuts if c > pos), len(k.records))


def settings_for(state_dir, decision: str, unit: str):  # type: ignore[no-untyped-def]
    privacy: dict[str, Any] = ({"unit": "w-event", "epsilon": 1, "w": 4} if unit == "w-event"
                               else {"unit": "user-level", "epsilon": 1, "horizon": 40, "cutoff": 6})
    return load_settings(None, **{
        "stream": {"id": "surfaces", "timestep": "1s", "start": "2023-11-14T22:13:20Z"},
        "schema": {"attributes": [{"name": "x", "kind": "numeric", "min": 0, "max": 100, "bins": 10,
                                   "out_of_range": "reject"}]},
        "privacy": {**privacy, "population": 100},
        "release": {"decision": decision, "mechanism": "lpa"},
        "randomness": {"seed": 11, "allow_seeded_noise": True},
        "kafka": {"input_topic": "in", "output_topic": "out", "record_time": "log-append-time",
                  "create_topics": False},
        # compact after every checkpoint: the compaction line (and its size field) is logged too
        "service": {"state_dir": str(state_dir), "poll_timeout": "10ms", "journal_compact_bytes": 1},
    })


@dataclass
class Surfaces:
    """What an operator sees of one run, and what the output topic says."""

    logs: list[dict[str, Any]]
    public_metrics: list[str]  # the exposition's public lines at the end of the run
    scrapes: list[list[str]]  # ... and after start-up and after every checkpoint (what a scrape could see)
    releases: list[dict[str, Any]] = field(default_factory=list)


def run_service(monkeypatch, state_dir, decision: str, unit: str, extra: bool) -> Surfaces:  # type: ignore[no-untyped-def]
    kafka = ListKafka(stream_of(extra))
    parts = fake_kafka_parts(kafka)
    parts["InputReader"] = lambda *a, **kw: ListReader(kafka)
    for name, value in parts.items():
        monkeypatch.setattr(loop_mod, name, value)
    sink = io.StringIO()
    setup_logging("DEBUG", sink)
    metrics = Metrics()
    scrapes: list[list[str]] = []

    def scraped(self):  # type: ignore[no-untyped-def]
        done = _CHECKPOINT(self)
        scrapes.append(_public(metrics))
        return done

    monkeypatch.setattr(loop_mod.Service, "_checkpoint", scraped)
    svc = loop_mod.Service(settings_for(state_dir, decision, unit), metrics=metrics, health=Health(),
                           stop=threading.Event(), max_timesteps=STEPS)
    try:
        svc.start()
        scrapes.append(_public(metrics))
        assert svc.run() == 0
    finally:
        svc.close()
        logging.getLogger("dpstream").handlers.clear()
    logs = [json.loads(line) for line in sink.getvalue().splitlines()]
    releases = [json.loads(v) for _, _, v in kafka.tail]
    return Surfaces(logs, _public(metrics), scrapes, [r for r in releases if r.get("message_type") == "release"])


_CHECKPOINT = loop_mod.Service._checkpoint
PUBLIC = {name for name, cls in CLASSES.items() if cls == "public"}


def _public(metrics: Metrics) -> list[str]:
    """The exposition lines of the families classed public. ``*_created`` samples are left out: they
    are the wall time the metric object was built (when the process started)."""
    exposition = generate_latest(metrics.registry).decode().splitlines()
    return [line for line in exposition if _family(line) in PUBLIC and "_created" not in line.split(" ")[0]]


def _family(line: str) -> str:
    """The metric family of an exposition line (``# HELP``/``# TYPE`` lines and samples alike)."""
    name = line.split()[2] if line.startswith("#") else line.split("{")[0].split()[0]
    for suffix in ("_total", "_created", "_info", "_count", "_sum", "_bucket"):
        if name.endswith(suffix) and name.removesuffix(suffix) in CLASSES:
            return name.removesuffix(suffix)
    return name


def _comparable(line: dict[str, Any]) -> dict[str, Any]:
    return {k: ("<volume>" if k in VOLUME_FIELDS else v) for k, v in line.items() if k != "ts"}


def _decisions(s: Surfaces) -> list[tuple[int, str]]:
    return [(r["timestep"]["index"], r["kind"]) for r in s.releases]


def assert_surfaces_identical(d: Surfaces, d2: Surfaces) -> None:
    assert [_comparable(x) for x in d.logs] == [_comparable(x) for x in d2.logs], "a log value differs"
    assert d.public_metrics == d2.public_metrics, "a public metric differs"
    assert len(d.scrapes) == len(d2.scrapes)
    for i, (a, b) in enumerate(zip(d.scrapes, d2.scrapes, strict=True)):
        assert a == b, f"a public metric differs after checkpoint {i}"


def assert_public_metrics_are_the_output(s: Surfaces) -> None:
    """The public metrics restate the output topic: releases by kind, timesteps sealed, the last index."""
    samples = {line.split()[0]: float(line.split()[1]) for line in s.public_metrics if not line.startswith("#")}
    kinds = Counter(r["kind"] for r in s.releases)
    assert samples["dpstream_timesteps_sealed_total"] == len(s.releases) == STEPS
    assert samples["dpstream_last_released_timestep"] == s.releases[-1]["timestep"]["index"]
    for kind in ("fresh", "republished"):
        assert samples[f'dpstream_releases_total{{kind="{kind}"}}'] == kinds[kind]


# decisions whose published decision sequence is data-independent, and data-dependent ones
CASES = [("uniform", "user-level"), ("fixed", "w-event"), ("sample", "w-event"), ("dsat", "user-level"),
         ("bd", "w-event")]


@pytest.mark.parametrize(("decision", "unit"), CASES)
def test_neighbours_give_identical_logs_and_public_metrics(decision, unit, tmp_path, monkeypatch):
    d = run_service(monkeypatch, tmp_path / "d", decision, unit, extra=False)
    d2 = run_service(monkeypatch, tmp_path / "d2", decision, unit, extra=True)
    # the runs really differ where it matters: the neighbour's timesteps hold different counts
    if decision == "uniform":  # fresh at every timestep: the releases differ
        assert [r["counts"] for r in d.releases] != [r["counts"] for r in d2.releases]
    assert _decisions(d) == _decisions(d2), "the seed gives different decisions: pick another for this method"
    events = Counter(x["event"] for x in d.logs)
    assert events["released"] >= 2 and events["compacted the journal"] >= 2 and events["started"] == 1
    assert_surfaces_identical(d, d2)
    assert_public_metrics_are_the_output(d)
    assert_public_metrics_are_the_output(d2)


# -- broken variants: a raw quantity on an operator surface ------------------------------------------
def _stash_events(monkeypatch, stash: dict[str, int]) -> None:  # type: ignore[no-untyped-def]
    """Remember the true event count of the last timestep released (what a careless change would log)."""
    real = loop_mod.Service._journaled_release

    def journaled(self, sealed):  # type: ignore[no-untyped-def]
        r = real(self, sealed)
        stash["events"] = int(r.audit.get("events", 0))
        return r

    monkeypatch.setattr(loop_mod.Service, "_journaled_release", journaled)


def _raw_log_field(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    stash: dict[str, int] = {}
    _stash_events(monkeypatch, stash)
    real = loop_mod.log

    def log(logger, level, event, **fields):  # type: ignore[no-untyped-def]
        if event == "released":
            fields["releases"] = stash.get("events", 0)  # an allowlisted name, a raw value
        real(logger, level, event, **fields)

    monkeypatch.setattr(loop_mod, "log", log)


def _raw_public_metric(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    stash: dict[str, int] = {}
    _stash_events(monkeypatch, stash)
    real = Metrics.set_budget

    def set_budget(self, **kw):  # type: ignore[no-untyped-def]
        real(self, **kw)
        self.epsilon_remaining.set(float(kw["remaining"]) + 1e-9 * stash.get("events", 0))

    monkeypatch.setattr(Metrics, "set_budget", set_budget)


def _volume_classed_public(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sys.modules[__name__], "PUBLIC", PUBLIC | {"dpstream_events_accepted"})


SURFACE_VARIANTS = {
    "raw count in an allowlisted log field": _raw_log_field,
    "raw value in a public metric": _raw_public_metric,
    "volume metric classed public": _volume_classed_public,
}


@pytest.mark.parametrize("variant", sorted(SURFACE_VARIANTS))
def test_broken_surface_is_caught(variant):
    """Each variant, planted by monkeypatching, makes the neighbours' surfaces differ (no fixtures: the
    audit catalogue calls this directly)."""
    with tempfile.TemporaryDirectory(prefix="surfaces-") as tmp, pytest.MonkeyPatch.context() as mp:
        SURFACE_VARIANTS[variant](mp)
        d = run_service(mp, Path(tmp) / "d", "uniform", "user-level", extra=False)
        d2 = run_service(mp, Path(tmp) / "d2", "uniform", "user-level", extra=True)
    with pytest.raises(AssertionError, match="differs"):
        assert_surfaces_identical(d, d2)
