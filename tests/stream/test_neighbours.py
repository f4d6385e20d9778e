"""Neighbouring streams through the real ingest path: inclusion must not depend on other people.

Issue 11 §1 / ``docs/privacy.md`` §1.1. A stream D and D′ = D plus one person
whose events have arbitrary event times (fast clock, stale clock, a burst,
all late) go through validation (:func:`validate_batch`), windowing
(:meth:`Windower.offer_recorded`, completeness by :meth:`Windower.complete`)
and contribution bounding (:meth:`TimestepData.counts`), in an arrival order
consistent with record timestamps (monotone per partition, as a broker's
LogAppendTime is), cut into arbitrary batches. For every sealed timestep,
L1(H_t(D), H_t(D′)) must be at most the per-timestep contribution bound.

``test_through_the_service_one_person_changes_any_release_by_at_most_the_bound``
(kafka) runs drawn neighbours and the issue's fast clock through the whole
service on the embedded broker, comparing releases made with the same seeded
noise; ``tests/stream/service/test_service_inclusion.py`` shows the watermark
rule failing through the service.

``test_a_data_dependent_rule_is_caught`` runs the same harness with the
watermark rule main used before (largest event time − allowed_lateness seals
timesteps): hypothesis must find a neighbour that breaks the bound, so the
property is not vacuous.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, find, given, settings
from hypothesis import strategies as st

from stream.ingest.events import EventBatch, validate_batch
from stream.ingest.windowing import Grid, Windower
from stream.service.testing import small_settings
from tests.kafka_harness import broker  # noqa: F401 - the embedded broker (module scope), for the service case

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
STEP = 900.0  # the issue's scenario: timestep 15m, allowed_lateness 2m, max_future 10m
S = small_settings(stream={"timestep": "15m", "allowed_lateness": "2m", "max_future": "10m",
                           "start": "2026-01-01T00:00:00Z"})
K = S.privacy.contribution_bound
DOMAIN = S.domain()
HORIZON = 8 * STEP

Event = tuple[str, float, float, int, str]  # person, event time, record time, age, sex


def _batch(events: list[Event]) -> EventBatch:
    return EventBatch.from_records(
        [{"user_id": u, "event_time": t, "attributes": {"age": a, "sex": x}} for u, t, _, a, x in events])


def run_recorded(events: list[Event], cuts: list[int]) -> dict[int, np.ndarray]:
    """The rule under test: per-event inclusion, completeness from record-time progress."""
    w = Windower(Grid.from_settings(S))
    out: dict[int, np.ndarray] = {}
    bounds = sorted({0, len(events), *(c % (len(events) + 1) for c in cuts)})
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        part = events[a:b]
        valid, rej = validate_batch(_batch(part), DOMAIN)
        assert len(rej) == 0
        rec = np.array([part[i][2] for i in valid.position.tolist()], dtype=np.float64)
        w.offer_recorded(valid, rec)
        for c in w.complete(part[-1][2]):  # one partition: its last record time is its progress
            out[c] = w.take(c).counts(DOMAIN.size, K)
            w.advance()
    for c in w.complete(None, final=True):
        out[c] = w.take(c).counts(DOMAIN.size, K)
        w.advance()
    return out


def run_watermark(events: list[Event], cuts: list[int]) -> dict[int, np.ndarray]:
    """Main's rule before this change (data-dependent): the watermark seals timesteps."""
    w = Windower(Grid.from_settings(S))
    out: dict[int, np.ndarray] = {}
    bounds = sorted({0, len(events), *(c % (len(events) + 1) for c in cuts)})
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        part = events[a:b]
        valid, _ = validate_batch(_batch(part), DOMAIN)
        w.offer(valid, now=part[-1][2])
        for c in w.sealable():
            out[c] = w.take(c).counts(DOMAIN.size, K)
            w.advance()
    for c in w.sealable(final=True):
        out[c] = w.take(c).counts(DOMAIN.size, K)
        w.advance()
    return out


def worst_l1(rule: Callable[[list[Event], list[int]], dict[int, np.ndarray]],
             base: list[Event], extra: list[Event], cuts: list[int]) -> int:
    """Largest L1 distance, over timesteps sealed in both runs, between D and D′ = D + extra."""
    d = sorted(base, key=lambda e: e[2])
    d2 = sorted(base + extra, key=lambda e: e[2])  # arrival order = record-time order (stable)
    h, h2 = rule(d, cuts), rule(d2, cuts)
    zero = np.zeros(DOMAIN.size, dtype=np.int64)
    return max((int(np.abs(h.get(c, zero) - h2.get(c, zero)).sum()) for c in set(h) | set(h2)), default=0)


# -- strategies -------------------------------------------------------------------------------
ages = st.integers(0, 99)
sexes = st.sampled_from("MF")


@st.composite
def population(draw) -> list[Event]:
    """Honest people: record time = event time + a delay (mostly small, sometimes past the deadline)."""
    n = draw(st.integers(1, 60))
    out = []
    for i in range(n):
        t = T0 + draw(st.floats(0, HORIZON - 1, allow_nan=False))
        delay = draw(st.one_of(st.floats(0, 30), st.floats(0, 400)))
        out.append((f"p{i % draw(st.integers(1, 40))}", t, t + delay, draw(ages), draw(sexes)))
    return out


@st.composite
def newcomer(draw) -> list[Event]:
    """One extra person: a fast clock, a stale clock, a burst, or all late."""
    kind = draw(st.sampled_from(["fast", "stale", "burst", "late", "any"]))
    m = draw(st.integers(1, 30 if kind == "burst" else 4))
    out = []
    for _ in range(m):
        r = T0 + draw(st.floats(0, HORIZON, allow_nan=False))  # the broker stamps the record time
        if kind == "fast":
            t = r + draw(st.floats(0, 3 * 86400))
        elif kind == "stale":
            t = r - draw(st.floats(0, 3 * 86400))
        elif kind == "burst":
            t = r + draw(st.floats(-5, 5))
        elif kind == "late":
            t = r - draw(st.floats(STEP + 121, 4 * STEP))
        else:
            t = T0 + draw(st.floats(-STEP, 2 * HORIZON, allow_nan=False))
        out.append(("newcomer", t, r, draw(ages), draw(sexes)))
    return out


cut_lists = st.lists(st.integers(0, 200), max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(population(), newcomer(), cut_lists)
def test_one_person_changes_any_sealed_timestep_by_at_most_the_bound(base, extra, cuts):
    assert worst_l1(run_recorded, base, extra, cuts) <= K


def test_the_issue_scenario_fast_clock_changes_nothing_else():
    """Timestep 15m, allowed_lateness 2m, max_future 10m: one person's one fast-clock event."""
    base = [(f"p{i}", T0 + 7 * i, T0 + 7 * i + 3, i % 100, "MF"[i % 2]) for i in range(900)]
    fast = [("newcomer", T0 + 2 * STEP + 600, T0 + 100, 30, "M")]  # 10 min ahead of its own record time
    assert worst_l1(run_recorded, base, fast, []) == 0  # far_future by its own record time: dropped
    assert worst_l1(run_watermark, base, fast, []) > 100  # the old rule: many others go late


@pytest.mark.nightly  # a hypothesis search of up to 2,000 examples (a counterexample comes within ~10)
def test_a_data_dependent_rule_is_caught():
    """Hypothesis finds a counterexample for the watermark rule: the property above can fail.

    Generation only, no shrinking: the claim is that the search finds one, and the first it finds
    is checked below exactly as a shrunk one would be. Shrinking took the rest of the time (the
    first counterexample came at the 9th example, 0.8 s; shrinking ran 300 s at load 7 until
    hypothesis gave up on it), a twentieth of the whole suite's test time."""
    found = find(
        st.tuples(population(), newcomer(), cut_lists),
        lambda x: worst_l1(run_watermark, *x) > K,
        settings=settings(max_examples=2000, deadline=None, database=None, phases=[Phase.generate]),
    )
    assert worst_l1(run_watermark, *found) > K
    assert worst_l1(run_recorded, *found) <= K


def test_restart_gives_identical_decisions():
    """Snapshot/restore in the middle of the stream: the same releases as one uninterrupted run."""
    rng = np.random.default_rng(5)
    ts = np.sort(rng.uniform(0, HORIZON, 400)) + T0
    events = [(f"p{int(rng.integers(50))}", float(t), float(t + rng.uniform(0, 300)), int(rng.integers(100)), "M")
              for t in ts]
    events.sort(key=lambda e: e[2])
    whole = run_recorded(events, [])
    g = Grid.from_settings(S)
    w = Windower(g)
    out: dict[int, np.ndarray] = {}
    for i in range(0, len(events), 37):
        part = events[i:i + 37]
        valid, _ = validate_batch(_batch(part), DOMAIN)
        w.offer_recorded(valid, np.array([e[2] for e in part])[valid.position])
        for c in w.complete(part[-1][2]):
            out[c] = w.take(c).counts(DOMAIN.size, K)
            w.advance()
        w = Windower.restore(g, w.snapshot(include_buffers=True))
    for c in w.complete(None, final=True):
        out[c] = w.take(c).counts(DOMAIN.size, K)
        w.advance()
    assert sorted(out) == sorted(whole)
    assert all((out[c] == whole[c]).all() for c in out)


# -- the same property through the service on the embedded broker -------------------------------
def _service_releases(bootstrap: str, state_dir, stream_id: str, events: list[Event]) -> dict[int, np.ndarray]:
    """Run the service (record-time inclusion) over ``events`` stamped with their record times; the
    released counts per timestep (seeded noise keyed by stream id and timestep: the same in D and D′)."""
    import json
    import time as _time

    from kafka import KafkaProducer

    from stream.service.kafka_io import ensure_topics
    from tests.kafka_harness import (
        InProcessService,
        read_all,
        service_config,
        settings_from,
        wait_for,
    )

    cfg = service_config(bootstrap, state_dir, stream_id=stream_id, seed=17,
                         stream={"timestep": "15m", "allowed_lateness": "2m", "max_future": "10m",
                                 "start": "2026-01-01T00:00:00Z",
                                 "clock_skew": f"{int(_time.time() - T0) + 30 * 86400}s"},
                         privacy={"horizon": 20, "cutoff": 20},
                         kafka={"record_time": "trusted-create-time", "topic_partitions": 1})
    s = settings_from(cfg)
    ensure_topics(s.kafka, {s.kafka.input_topic: 1})
    beat_r = T0 + HORIZON + STEP + 121  # past the deadline of timestep 8: timesteps 0..8 complete
    stream = [*sorted(events, key=lambda e: e[2]), ("heartbeat", beat_r, beat_r, 1, "F")]
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    try:
        for u, t, r, a, x in stream:  # arrival order = record-time order, one partition (monotone)
            doc = {"user_id": u, "event_time": t, "attributes": {"age": a, "sex": x}}
            p.send(s.kafka.input_topic, value=json.dumps(doc).encode(), partition=0, timestamp_ms=int(r * 1000))
        p.flush()
    finally:
        p.close()
    with InProcessService(s) as svc:
        wait_for(lambda: svc.published() >= 9, 60, what="timesteps 0..8 released")
    out = {}
    for rec in read_all(bootstrap, s.kafka.output_topic):
        doc = json.loads(rec.value)
        if doc.get("message_type") == "release":
            out[doc["timestep"]["index"]] = np.asarray(doc["counts"])
    return out


@pytest.mark.kafka
@settings(max_examples=3, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(population(), newcomer())
@example([(f"p{i}", T0 + 7 * i, T0 + 7 * i + 3, i % 100, "MF"[i % 2]) for i in range(300)],
         [("newcomer", T0 + 2 * STEP + 600, T0 + 100, 30, "M")])  # the issue's fast clock
def test_through_the_service_one_person_changes_any_release_by_at_most_the_bound(broker, tmp_path_factory,  # noqa: F811
                                                                                  base, extra):
    """D and D′ = D + one person through the whole service (decode, per-event inclusion, per-partition
    completeness, bounding, release) with the same seeded noise: every released timestep's counts
    differ by at most the bound (the noise cancels; clamping can only shrink the difference)."""
    sid = f"nb-{uuid.uuid4().hex[:8]}"
    d = _service_releases(broker.bootstrap, tmp_path_factory.mktemp("d"), sid, base)
    d2 = _service_releases(broker.bootstrap, tmp_path_factory.mktemp("d2"), sid, base + extra)
    assert sorted(d) == sorted(d2) == list(range(9))
    assert max(int(np.abs(d[c] - d2[c]).sum()) for c in d) <= K
