"""Declared queries and their detectors (issue 33 items 1-2), in memory.

Each release message carries the declared queries' answers, equal to what the message's own
counts (or model) give; the interval and variance follow from the release's ε and the public
sensitivity; the configuration refuses malformed queries saying what to write; detectors are fed
fresh releases only (a republished release adds no evidence), and alert events are a function of
the release messages and public configuration alone.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from histogram.declared import discrete_laplace_variance, sum_half_width
from histogram.detectors import Cusum, Ewma, make_detector
from stream.config import ConfigError
from stream.ingest.events import EventBatch
from stream.pipeline import ReleasePipeline
from stream.service.alerts import AlertWatch
from stream.service.metrics import Metrics
from stream.service.testing import small_settings

QUERIES = [{"name": "old_f", "where": {"age": "6-9", "sex": "F"},
            "detectors": [{"kind": "threshold", "above": 0}, {"kind": "cusum", "limit": 1, "baseline": 2}]},
           {"name": "everyone"}]


def _events(n: int = 400, steps: int = 4, rise: int | None = None) -> EventBatch:
    ev = []
    for t in range(steps):
        k = n * (3 if t == rise else 1)
        ev += [{"user_id": f"u{t}-{i}", "event_time": t * 60 + 1 + i * 50 / k,
                "attributes": {"age": float(i % 100), "sex": "MF"[i % 2]}} for i in range(k)]
    return EventBatch.from_records(ev)


def _releases(settings, events: EventBatch) -> list[dict]:
    p = ReleasePipeline(settings)
    p.offer(events)
    return [json.loads(s.payload) for s in p.seal(final=True)]


def test_each_release_carries_the_declared_answers_and_their_accuracy() -> None:
    s = small_settings(queries=QUERIES, privacy={"epsilon": 4, "horizon": 4, "cutoff": 4})
    for r in _releases(s, _events()):
        counts = np.asarray(r["counts"]).reshape(10, 2)
        old_f, everyone = r["queries"]
        assert old_f["name"] == "old_f" and old_f["bins"] == 4
        assert old_f["value"] == counts[6:10, 1].sum() and everyone["value"] == counts.sum()
        scale = 1 / (4 / 4)  # LPA: sensitivity 1 over each fresh release's ε (uniform: 4 / 4 timesteps)
        assert old_f["variance"] == pytest.approx(4 * discrete_laplace_variance(scale), rel=1e-6)
        assert old_f["half_width"] == pytest.approx(sum_half_width(scale, 4, 0.95), rel=1e-6)
        assert everyone["half_width"] == pytest.approx(sum_half_width(scale, 20, 0.95), rel=1e-6)


def test_no_declared_query_leaves_the_message_unchanged() -> None:
    plain = _releases(small_settings(), _events(steps=1))[0]
    assert "queries" not in plain
    declared = small_settings(queries=QUERIES)
    assert declared.fingerprint() != small_settings().fingerprint(), "the answers change what a release says"


def test_a_model_release_answers_from_its_model_without_an_interval() -> None:
    s = small_settings(queries=[{"name": "f", "where": {"sex": "F"}}],
                       release={"decision": "uniform", "mechanism": "marginals"},
                       privacy={"epsilon": 40, "horizon": 4, "cutoff": 4})
    for r in _releases(s, _events(steps=2)):
        (q,) = r["queries"]
        sex = next(t for t in r["model"]["marginals"] if t["attributes"] == ["sex"])
        assert q["value"] == pytest.approx(max(0, sex["counts"][1]), abs=1e-6)
        assert q["half_width"] is None and q["variance"] is None


@pytest.mark.parametrize(("where", "says"), [
    ({"colour": "red"}, "not attributes of the domain"),
    ({"sex": "X"}, "is not one of"),
    ({"age": "8-12"}, "outside levels 0..9"),
])
def test_a_malformed_query_is_refused_saying_what_to_write(where, says) -> None:
    with pytest.raises(ConfigError, match=says):
        small_settings(queries=[{"name": "q", "where": where}]).validate_all()


def test_detector_settings_say_what_is_missing() -> None:
    with pytest.raises(ConfigError, match="needs above"):
        small_settings(queries=[{"name": "q", "detectors": [{"kind": "threshold"}]}])
    with pytest.raises(ConfigError, match="needs limit"):
        small_settings(queries=[{"name": "q", "detectors": [{"kind": "cusum"}]}])
    with pytest.raises(ConfigError, match="names must be distinct"):
        small_settings(queries=[{"name": "q"}, {"name": "q"}]).validate_all()


def test_cusum_and_ewma_fire_on_a_rise_and_not_on_noise() -> None:
    rng = np.random.default_rng(5)
    for det in (make_detector("cusum", limit=5, baseline=7), make_detector("ewma", limit=3, baseline=7)):
        quiet = [det.update(t, 100 + rng.normal(0, 5), 25.0).fired for t in range(200)]
        assert sum(quiet) <= 2, f"{det.kind}: {sum(quiet)} false alarms in 200 steady timesteps"
        risen = [det.update(200 + t, 150 + rng.normal(0, 5), 25.0).fired for t in range(5)]
        assert any(risen), f"{det.kind} missed a +50% rise"


def test_the_known_noise_variance_is_a_floor() -> None:
    """A series whose answers happen to be flat still carries the release's noise: a rise of one
    noise sd is not an alarm (without the floor, the sample variance 0 makes it infinitely large)."""
    c = Cusum(3.0, make_detector("cusum", limit=3).base)  # type: ignore[attr-defined]
    for t in range(7):
        c.update(t, 100.0, 100.0)
    assert not c.update(7, 110.0, 100.0).fired
    e = Ewma(3.0, make_detector("ewma", limit=3).base)  # type: ignore[attr-defined]
    for t in range(7):
        e.update(t, 100.0, 0.0)
    assert e.update(7, 110.0, 0.0).fired  # a true series with no noise at all: any rise is evidence


def test_republished_releases_add_no_evidence_and_resent_ones_are_not_fed_twice() -> None:
    s = small_settings(queries=QUERIES, release={"decision": "dsat"},
                       privacy={"epsilon": 4, "horizon": 20, "cutoff": 4})
    releases = _releases(s, _events(steps=12))
    kinds = [r["kind"] for r in releases]
    assert "republished" in kinds and "fresh" in kinds
    watch = AlertWatch(s, Metrics())
    out = watch.observe([json.dumps(r).encode() for r in releases])
    fresh = [r["timestep"]["index"] for r in releases if r["kind"] == "fresh"]
    thresholds = sorted(json.loads(o.value)["timestep"] for o in out if json.loads(o.value)["detector"] == "threshold")
    assert set(thresholds) <= set(fresh), "an alert on a republished release"
    fired_on = [r["timestep"]["index"] for r in releases if r["kind"] == "fresh" and r["queries"][0]["value"] > 0]
    assert thresholds == fired_on
    # the whole checkpoint again (a journaled redo): nothing new
    assert watch.observe([json.dumps(r).encode() for r in releases]) == []
    # a restart resumes from the snapshot: the same alerts as an uninterrupted run
    a = AlertWatch(s, Metrics())
    first = a.observe([json.dumps(r).encode() for r in releases[:6]])
    b = AlertWatch(s, Metrics(), json.loads(json.dumps(a.snapshot())))
    rest = b.observe([json.dumps(r).encode() for r in releases[6:]])
    assert [o.value for o in first + rest] == [o.value for o in out]


def test_metrics_show_committed_answers_only() -> None:
    s = small_settings(queries=QUERIES, privacy={"epsilon": 4, "horizon": 4, "cutoff": 4})
    releases = _releases(s, _events(steps=2))
    m = Metrics()
    watch = AlertWatch(s, m)
    get = m.registry.get_sample_value
    assert math.isnan(get("dpstream_query_value", {"query": "old_f"}))
    watch.observe([json.dumps(r).encode() for r in releases])
    assert math.isnan(get("dpstream_query_value", {"query": "old_f"})), "shown before the commit"
    watch.committed()
    assert get("dpstream_query_value", {"query": "old_f"}) == releases[-1]["queries"][0]["value"]
    assert get("dpstream_query_half_width", {"query": "everyone"}) == releases[-1]["queries"][1]["half_width"]
    fired = sum(1 for r in releases if r["queries"][0]["value"] > 0)
    assert get("dpstream_alerts_total", {"query": "old_f", "detector": "threshold"}) == fired


PRIVATE = [{"name": "f", "where": {"sex": "F"}, "private": {"above": 150, "max_alerts": 2}}]


def test_private_alerts_are_charged_published_and_become_alert_events() -> None:
    """Issue 33 item 3: the alert's ε is in the release's ledger and ε spent, each timestep says
    whether it was tested and what it answered, and a positive is an alert event (detector
    "private"); the share and the alert are part of the fingerprint."""
    s = small_settings(queries=PRIVATE, alerts={"private_share": "1/4"}, release={"decision": "dsat"},
                       privacy={"epsilon": 8, "horizon": 20, "cutoff": 4})
    ev = [{"user_id": f"u{t}-{i}", "event_time": t * 60 + 1 + i * 0.1, "attributes": {"age": 5.0, "sex": "MF"[i % 2]}}
          for t in range(12) for i in range(200 if t < 6 else 500)]
    releases = _releases(s, EventBatch.from_records(ev))
    first = releases[0]
    assert first["private_alerts"][0]["charged_exact"] == "2" and first["private_alerts"][0]["epsilon_exact"] == "2"
    assert all(r["private_alerts"][0]["charged_exact"] == "0" for r in releases[1:])
    assert all(not r["private_alerts"][0]["tested"] for r in releases if r["kind"] == "fresh")
    fired = [r["timestep"]["index"] for r in releases if r["private_alerts"][0]["fired"]]
    assert fired and len(fired) <= 2 and min(fired) >= 6
    from fractions import Fraction
    assert all(Fraction(r["epsilon_spent_exact"]) <= 8 for r in releases)
    watch = AlertWatch(s, Metrics())
    events = [json.loads(o.value) for o in watch.observe([json.dumps(r).encode() for r in releases])]
    assert sorted(e["timestep"] for e in events if e["detector"] == "private") == fired
    # a journaled checkpoint re-sent after a crash is not fed again: its private positives stay single
    assert watch.observe([json.dumps(r).encode() for r in releases]) == []
    other = small_settings(queries=PRIVATE, alerts={"private_share": "1/5"}, release={"decision": "dsat"},
                           privacy={"epsilon": 8, "horizon": 20, "cutoff": 4})
    assert other.fingerprint() != s.fingerprint()


@pytest.mark.parametrize(("sections", "says"), [
    ({}, "alerts.private_share is not set"),
    ({"alerts": {"private_share": "1/4"}, "privacy": {"unit": "w-event", "epsilon": 1, "w": 5, "cutoff": 2}}, "user-level"),
    ({"alerts": {"private_share": "1/4"}, "release": {"decision": "uniform", "mechanism": "marginals"}}, "lpa or psd"),
])
def test_private_alerts_refuse_what_the_proof_does_not_cover(sections, says) -> None:
    with pytest.raises(ConfigError, match=says):
        small_settings(queries=PRIVATE, **sections).validate_all()
    with pytest.raises(ConfigError, match="strictly between 0 and 1"):
        small_settings(queries=PRIVATE, alerts={"private_share": "1"})


def test_a_restored_engine_continues_the_private_alerts_exactly() -> None:
    """The SVT instance (ρ, positives) is in the engine snapshot the journal keeps: a restart
    continues it (same answers on the same noise), never redraws ρ or recharges."""
    from histogram.noise import Randomness

    s = small_settings(queries=[{"name": "f", "where": {"sex": "F"}, "private": {"above": 60, "max_alerts": 3}}],
                       alerts={"private_share": "1/4"}, release={"decision": "dsat"},
                       privacy={"epsilon": 8, "horizon": 20, "cutoff": 4})
    engine, noise = s.engine(), Randomness.seeded(4)
    counts = [np.full(20, 4 if t < 5 else 9, dtype=np.int64) for t in range(12)]
    state = engine.initial_state()
    straight = []
    for t in range(12):
        release, state = engine.step(state, counts[t], noise.drawer("x", t))
        straight.append(release)
        if t == 5:
            saved = json.loads(json.dumps(engine.snapshot(state)))
    state = engine.restore(saved)
    for t in range(6, 12):
        release, state = engine.step(state, counts[t], noise.drawer("x", t))
        assert release.private_alerts == straight[t].private_alerts and release.ledger == straight[t].ledger
    assert any(r.private_alerts[0]["fired"] for r in straight[6:])


def test_noise_floor_warning_uses_the_epsilon_left_after_the_private_alerts() -> None:
    """check-config's DSAT noise-floor diagnosis reads the release ε of the engine the service runs:
    with half the budget given to private alerts the fresh release's ε halves and the floor rises."""
    from stream.planning.diagnostics import threshold_below_noise_floor

    base = {"release": {"decision": "dsat", "threshold": 0.0001},
            "privacy": {"epsilon": 8, "horizon": 20, "cutoff": 4, "population": 1000}}
    plain = threshold_below_noise_floor(small_settings(**base))
    shared = threshold_below_noise_floor(small_settings(queries=PRIVATE, alerts={"private_share": "1/2"}, **base))
    assert plain is not None and shared is not None
    assert shared.release_epsilon == plain.release_epsilon / 2
    assert shared.noise_floor_counts > plain.noise_floor_counts
