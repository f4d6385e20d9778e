"""ReleasePipeline: determinism, noise keys, step hook, journal substitution, snapshots."""

from __future__ import annotations

import json

import numpy as np
import pytest

from controller.errors import StateError
from histogram.noise import Randomness
from stream.ingest.events import EventBatch
from stream.pipeline import ReleasePipeline, _checksum
from stream.service.testing import (
    ManualClock,
    MemorySource,
    payloads,
    run_in_memory,
    small_settings,
)

S = small_settings(seed=11, release={"decision": "dsat"}, privacy={"cutoff": 5})


def make_events(n=600, seed=0, span=1800.0, users=80):
    rng = np.random.default_rng(seed)
    times = np.sort(rng.uniform(0, span, n))
    return [
        {"user_id": f"u{int(rng.integers(users))}", "event_time": float(t),
         "attributes": {"age": int(rng.integers(0, 100)), "sex": "MF"[int(rng.integers(2))]}}
        for t in times
    ]


def replay(settings, events, cuts=(), **kw):
    p = ReleasePipeline(settings, **kw)
    bounds = sorted({0, len(events), *cuts})
    out = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        p.offer(EventBatch.from_records(events[a:b], first_row=a))
        out += p.seal()
    out += p.seal(final=True)
    return p, out


class NoNoise:
    """A randomness source that fails if anything is drawn."""

    def drawer(self, *args, **kwargs):
        raise AssertionError("noise drawn during a recovery")


def test_same_seed_same_bytes_across_runs_and_batchings():
    events = make_events()
    _, a = replay(S, events)
    _, b = replay(S, events)
    _, c = replay(S, events, cuts=(1, 99, 100, 401))
    assert len(a) == 30 and [r.index for r in a] == list(range(30))
    assert [r.payload for r in a] == [r.payload for r in b] == [r.payload for r in c]
    _, d = replay(small_settings(seed=12, release={"decision": "dsat"}, privacy={"cutoff": 5}), events)
    assert [r.payload for r in a] != [r.payload for r in d]


def test_noise_comes_from_the_stream_timestep_release_drawer():
    events = make_events(200)
    p, out = replay(S, events)
    engine = S.engine()
    state = engine.initial_state()
    q = ReleasePipeline(S)
    q.offer(EventBatch.from_records(events))
    for sealed in out:
        data = q.window.take(sealed.cell)
        q.window.advance()
        rel, state = engine.step(state, data.counts(S.domain().size),
                                 Randomness.seeded(11).drawer("t", sealed.index, "release"))
        np.testing.assert_array_equal(rel.counts, sealed.release.counts)


def test_service_loop_on_json_payloads_matches_replay():
    events = make_events(300)
    _, direct = replay(S, events)
    for per_message in (1, 7, 500):
        res = run_in_memory(S, MemorySource(payloads(events, per_message=per_message), max_records=13))
        assert [r.payload for r in res.releases] == [r.payload for r in direct]
        assert res.sink.values(S.kafka.output_topic) == [r.payload for r in direct]


def test_step_hook_runs_before_advancing_and_a_failing_hook_changes_nothing():
    events = make_events(300)
    _, reference = replay(S, events)
    seen = []
    fail_at = {4}

    def hook(sealed):
        assert p.next_index == sealed.index  # not advanced yet
        if sealed.index in fail_at:
            fail_at.clear()
            raise RuntimeError("journal unavailable")
        seen.append(sealed.payload)

    p = ReleasePipeline(S, step_hook=hook)
    p.offer(EventBatch.from_records(events))
    with pytest.raises(RuntimeError):
        p.seal(final=True)
    assert p.next_index == 4
    p.seal(final=True)
    assert seen == [r.payload for r in reference]


def test_recall_resends_journaled_bytes_without_drawing():
    events = make_events(400)
    journal = {}
    secure = small_settings(seed=None, release={"decision": "dsat"}, privacy={"cutoff": 5})
    _, first = replay(secure, events, step_hook=lambda s: journal.__setitem__(s.index, json.loads(
        json.dumps(s.journal_entry()))))
    assert len(journal) == len(first)
    # a restarted service: restored to before timestep 0, nothing may be drawn for journaled timesteps
    p, again = replay(secure, events, noise=NoNoise(), recall=journal.get)
    assert [r.payload for r in again] == [r.payload for r in first]
    assert all(r.recovered and r.release is None for r in again)
    assert p.stats.recovered == len(first)
    assert p.engine.snapshot(p.engine_state) == first[-1].engine_snapshot()


def test_recall_of_a_prefix_then_fresh_steps_continue_identically():
    events = make_events(400)
    journal = {}
    _, first = replay(S, events, step_hook=lambda s: journal.__setitem__(s.index, s.journal_entry()))
    partial = {i: e for i, e in journal.items() if i < 10}
    _, again = replay(S, events, recall=partial.get)
    assert [r.payload for r in again] == [r.payload for r in first]
    assert [r.recovered for r in again] == [i < 10 for i in range(len(first))]


def test_recall_refuses_a_foreign_or_shifted_entry():
    events = make_events(100)
    journal = {}
    replay(S, events, step_hook=lambda s: journal.__setitem__(s.index, s.journal_entry()))
    with pytest.raises(StateError, match="index"):
        replay(S, events, recall=lambda i: journal[i + 1] if i + 1 in journal else None)
    other = small_settings(seed=11, release={"decision": "dsat"}, privacy={"cutoff": 5, "epsilon": 2})
    with pytest.raises(StateError, match="configuration"):
        replay(other, events, recall=journal.get)
    tampered = dict(journal[0])
    tampered["payload"] = tampered["payload"].replace('"kind":"fresh"', '"kind":"republished"')
    with pytest.raises(StateError, match="checksum"):
        replay(S, events, recall=lambda i: tampered if i == 0 else None)
    tampered["checksum"] = _checksum(tampered)  # a consistent entry with a non-canonical payload
    tampered["payload"] = tampered["payload"].replace('{"accuracy"', '{ "accuracy"')
    tampered["checksum"] = _checksum(tampered)
    with pytest.raises(StateError, match="canonical"):
        replay(S, events, recall=lambda i: tampered if i == 0 else None)


def test_snapshot_restore_continues_identically():
    events = make_events(500)
    _, reference = replay(S, events)
    p = ReleasePipeline(S)
    p.offer(EventBatch.from_records(events[:250]))
    head = p.seal()
    snap = json.loads(json.dumps(p.snapshot(include_buffers=True)))
    q = ReleasePipeline.restore(S, snap)
    assert q.next_index == p.next_index and q.first_cell == p.first_cell
    q.offer(EventBatch.from_records(events[250:], first_row=250))
    tail = q.seal(final=True)
    assert [r.payload for r in head + tail] == [r.payload for r in reference]
    # resume from the last journal entry of the head (no buffers): the open events must be re-offered
    r = ReleasePipeline.resume_after(S, head[-1].journal_entry())
    assert r.next_index == head[-1].index + 1


def test_restore_refuses_mismatched_state():
    p, out = replay(S, make_events(100))
    snap = p.snapshot()
    other = small_settings(seed=11, release={"decision": "dsat"}, privacy={"cutoff": 5, "horizon": 60})
    with pytest.raises(StateError, match="fingerprint"):
        ReleasePipeline.restore(other, snap)
    bad = dict(snap)
    bad["window"] = dict(snap["window"], next_index=snap["window"]["next_index"] - 1)
    with pytest.raises(StateError, match="refusing"):
        ReleasePipeline.restore(S, bad)
    with pytest.raises(StateError, match="window state"):
        ReleasePipeline(S, engine_state=snap["engine"])


def test_offer_reports_rows_and_keeps_totals():
    p = ReleasePipeline(S)
    b = EventBatch.from_records([
        {"user_id": "a", "event_time": 10, "attributes": {"age": 30, "sex": "M"}},
        {"user_id": "b", "event_time": 200, "attributes": {"age": 130, "sex": "M"}},
        {"user_id": "c", "event_time": 200, "attributes": {"age": 30, "sex": "M"}},
        {"user_id": "d", "event_time": 20, "attributes": {"age": 30, "sex": "F"}},
        {"user_id": "", "event_time": 20, "attributes": {"age": 30, "sex": "F"}},
        {"user_id": "e", "event_time": 1e9, "attributes": {"age": 30, "sex": "F"}},
    ], first_row=2)
    rej = p.offer(b)
    assert sorted((r.row, r.reason) for r in rej) == [
        (3, "out_of_domain"), (5, "timestep_sealed"), (6, "invalid_user_id"), (7, "far_future")]
    assert p.stats.events_offered == 6 and p.stats.events_accepted == 2 and p.stats.late == 1


def test_counts_path_equals_event_path():
    events = make_events(300)
    _, reference = replay(S, events)
    q = ReleasePipeline(S)
    q.offer(EventBatch.from_records(events))
    truth = []
    for c in q.window.sealable(final=True):
        truth.append(q.window.take(c).counts(S.domain().size))
        q.window.advance()
    p = ReleasePipeline(S)
    out = [p.release_counts(c) for c in truth]
    assert [r.payload for r in out] == [r.payload for r in reference]


def test_idle_sealing_with_a_manual_clock():
    s = small_settings(seed=3, stream={"idle_timeout": "10s", "allowed_lateness": "5m"})
    clock = ManualClock(1_000_000.0)
    p = ReleasePipeline(s)
    p.offer(EventBatch.from_records(make_events(50, span=170)), now=clock())
    assert p.seal(now=clock()) == []
    clock.advance(10)
    out = p.seal(now=clock())
    assert [r.index for r in out] == [0, 1, 2]


def test_w_event_psd_messages():
    s = small_settings(seed=5, privacy={"unit": "w-event", "w": 4, "cutoff": 2, "horizon": None},
                       release={"decision": "dsat", "mechanism": "psd"})
    _, out = replay(s, make_events(200, span=600))
    fresh = [r for r in out if r.fresh]
    assert fresh and all(r.message.window_epsilon_spent is not None for r in out)
    counts = fresh[0].message.counts
    assert all(isinstance(c, float) and round(c, 6) == c for c in counts)
    assert fresh[0].message.details is not None


def test_recall_accepts_an_entry_rebuilt_without_checksum():
    events = make_events(100)
    journal = {}
    _, first = replay(S, events, step_hook=lambda s: journal.__setitem__(s.index, s.journal_entry()))
    stripped = {i: {k: v for k, v in e.items() if k not in ("checksum", "window")} for i, e in journal.items()}
    _, again = replay(S, events, noise=NoNoise(), recall=stripped.get)
    assert [r.payload for r in again] == [r.payload for r in first]


def test_idle_clock_starts_after_a_restore():
    s = small_settings(seed=3, stream={"idle_timeout": "10s", "allowed_lateness": "5m"})
    p = ReleasePipeline(s)
    p.offer(EventBatch.from_records(make_events(50, span=170)))  # no wall clock (e.g. before a crash)
    q = ReleasePipeline.restore(s, json.loads(json.dumps(p.snapshot(include_buffers=True))))
    assert q.seal(now=5_000.0) == []  # starts the idle clock
    assert [r.index for r in q.seal(now=5_010.0)] == [0, 1, 2]
