"""Windowing: grid, watermark, lateness, idle sealing, far future, contribution bounding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.errors import StateError
from stream.ingest.events import EventBatch, validate_batch
from stream.ingest.windowing import ACCEPTED, BEFORE_START, FAR_FUTURE, LATE, Grid, Windower
from stream.service.testing import small_settings

S = small_settings()
DOMAIN = S.domain()


def ev(uid, t, age=30, sex="M"):
    return {"user_id": uid, "event_time": t, "attributes": {"age": age, "sex": sex}}


def batch(events, first_row=0):
    return EventBatch.from_records(events, first_row=first_row)


def bin_of(age, sex):
    return int(age // 10) * 2 + (0 if sex == "M" else 1)


def run(settings, batches, *, now=None, seal_between=True, final=True):
    """Window ``batches``; return (statuses per row, {cell: true counts})."""
    w = Windower(Grid.from_settings(settings))
    status: dict[int, int] = {}
    out: dict[int, np.ndarray] = {}

    def drain(**kw):
        for c in w.sealable(**kw):
            out[c] = w.take(c).counts(DOMAIN.size)
            w.advance()

    for b in batches:
        valid, rej = validate_batch(b, DOMAIN)
        assert len(rej) == 0
        st_ = w.offer(valid, now=now)
        for row, code in zip(b.rows[valid.position].tolist(), st_.tolist(), strict=True):
            status[row] = code
        if seal_between:
            drain()
    if final:
        drain(final=True)
    return status, out, w


def test_watermark_seals_in_order_and_late_events_are_reported():
    events = [ev("a", 10), ev("b", 70), ev("c", 130), ev("d", 20)]  # d arrives after the watermark passed cell 0
    status, out, _ = run(S, [batch(events)])
    assert status == {0: ACCEPTED, 1: ACCEPTED, 2: ACCEPTED, 3: LATE}
    assert sorted(out) == [0, 1, 2]
    assert out[0].sum() == 1  # d never changed timestep 0


def test_late_event_does_not_change_releases():
    from stream.pipeline import ReleasePipeline

    base = [ev("a", 10), ev("b", 70), ev("c", 130)]
    p1, p2 = ReleasePipeline(S), ReleasePipeline(S)
    p1.offer(batch(base))
    r1 = p1.seal(final=True)
    p2.offer(batch(base[:2]))
    r2 = p2.seal()
    rej = p2.offer(batch([ev("c", 130), ev("late", 5, 90, "F")], first_row=2))
    assert [r.reason for r in rej] == ["timestep_sealed"] and rej[0].row == 3
    r2 += p2.seal(final=True)
    assert [r.payload for r in r1] == [r.payload for r in r2]


def test_out_of_order_within_lateness_gives_identical_histograms():
    s = small_settings(stream={"allowed_lateness": "120s"})
    events = [ev(f"u{i}", t, age=(i * 7) % 100, sex="MF"[i % 2]) for i, t in enumerate(range(0, 600, 13))]
    rng = np.random.default_rng(1)
    # shuffle within blocks of 5 consecutive events: displacement < 5·13 s < lateness
    shuffled = []
    for i in range(0, len(events), 5):
        block = events[i:i + 5]
        shuffled += [block[j] for j in rng.permutation(len(block))]
    st1, out1, _ = run(s, [batch(events)])
    st2, out2, _ = run(s, [batch(shuffled)])
    assert set(st1.values()) == {ACCEPTED} and set(st2.values()) == {ACCEPTED}
    assert sorted(out1) == sorted(out2)
    for c in out1:
        np.testing.assert_array_equal(out1[c], out2[c])


def test_gaps_produce_empty_timesteps():
    status, out, w = run(S, [batch([ev("a", 10), ev("b", 5 * 60 + 1)])])
    assert sorted(out) == [0, 1, 2, 3, 4, 5]
    assert [int(out[c].sum()) for c in range(6)] == [1, 0, 0, 0, 0, 1]
    assert w.next_index == 6 and w.first_cell == 0


def test_first_timestep_is_the_smallest_cell_before_the_first_seal():
    s = small_settings(stream={"allowed_lateness": "300s"})
    status, out, w = run(s, [batch([ev("a", 400), ev("b", 130)])])
    assert w.first_cell == 2 and sorted(out) == [2, 3, 4, 5, 6]


def test_start_fixes_the_first_timestep_and_earlier_events_are_dead_lettered():
    s = small_settings(stream={"start": 120})
    status, out, w = run(s, [batch([ev("a", 100), ev("b", 300)])])
    assert status == {0: BEFORE_START, 1: ACCEPTED}
    assert sorted(out) == [2, 3, 4, 5] and w.first_cell == 2


def test_idle_timeout_seals_the_last_timesteps():
    s = small_settings(stream={"idle_timeout": "30s", "allowed_lateness": "60s"})
    w = Windower(Grid.from_settings(s))
    valid, _ = validate_batch(batch([ev("a", 10), ev("b", 100)]), DOMAIN)
    w.offer(valid, now=1000.0)
    assert list(w.sealable(now=1029.9)) == []  # watermark 40 s: nothing sealed, not idle yet
    assert list(w.sealable(now=1030.0)) == [0, 1]  # idle: up to the cell of the largest event time
    for c in w.sealable(now=1030.0):
        w.take(c)
        w.advance()
    valid, _ = validate_batch(batch([ev("c", 110)]), DOMAIN)
    assert w.offer(valid, now=1031.0).tolist() == [LATE]  # its timestep was sealed by the idle rule


def test_far_future_is_relative_to_the_largest_event_time_and_now():
    s = small_settings(stream={"max_future": "1h"})
    events = [ev("a", 1000), ev("b", 1000 + 3601), ev("c", 1000 + 3599), ev("d", 1000 + 3599 + 3600)]
    status, _, _ = run(s, [batch(events)], final=False)
    # b is too far; c is fine and raises the maximum, so d (3600 s after c) is fine too
    assert status == {0: ACCEPTED, 1: FAR_FUTURE, 2: ACCEPTED, 3: ACCEPTED}
    status, _, _ = run(s, [batch([ev("a", 1000), ev("b", 9000)])], now=8000.0, final=False)
    assert status == {0: ACCEPTED, 1: ACCEPTED}
    status, _, _ = run(s, [batch([ev("a", 20000)])], now=8000.0, final=False)
    assert status == {0: FAR_FUTURE}


def test_several_events_per_person_count_once_and_the_same_record_is_kept():
    # person p has three records in timestep 0: the earliest (t=5, age 50) is kept, in any order
    events = [ev("p", 30, 10), ev("p", 5, 50), ev("q", 7, 50, "F"), ev("p", 50, 90, "F")]
    for perm in ([0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]):
        _, out, _ = run(S, [batch([events[i] for i in perm])])
        expected = np.zeros(DOMAIN.size, np.int64)
        expected[bin_of(50, "M")] = 1
        expected[bin_of(50, "F")] = 1
        np.testing.assert_array_equal(out[0], expected)


def test_ties_on_time_keep_the_smaller_bin():
    _, out, _ = run(S, [batch([ev("p", 5, 90), ev("p", 5, 10)])])
    assert int(out[0][bin_of(10, "M")]) == 1 and int(out[0].sum()) == 1


def test_a_flood_from_one_user_changes_a_count_by_at_most_one():
    rng = np.random.default_rng(3)
    others = [ev(f"u{i}", float(rng.uniform(0, 60)), int(rng.integers(0, 100)), "MF"[i % 2]) for i in range(200)]
    flood = [ev("attacker", float(rng.uniform(0, 60)), int(rng.integers(0, 100)), "MF"[i % 2]) for i in range(5000)]
    _, without, _ = run(S, [batch(others)])
    mixed = others + flood
    order = rng.permutation(len(mixed))
    _, with_flood, _ = run(S, [batch([mixed[i] for i in order])])
    assert int(np.abs(with_flood[0] - without[0]).sum()) == 1


def test_batching_and_seal_calls_do_not_change_the_result():
    s = small_settings(stream={"allowed_lateness": "90s"})
    rng = np.random.default_rng(5)
    times = np.sort(rng.uniform(0, 1200, 400)) + rng.normal(0, 60, 400)  # noisy order, some late
    events = [ev(f"u{i % 50}", float(t), int(rng.integers(0, 100)), "MF"[i % 2]) for i, t in enumerate(times)]
    whole_status, whole, _ = run(s, [batch(events)], seal_between=False)
    cuts = [0, 1, 7, 50, 51, 200, 333, 400]
    parts = [batch(events[a:b], first_row=a) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    part_status, parted, _ = run(s, parts, seal_between=True)
    assert whole_status == part_status
    assert LATE in whole_status.values()
    assert sorted(whole) == sorted(parted)
    for c in whole:
        np.testing.assert_array_equal(whole[c], parted[c])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 900), st.integers(0, 99)), min_size=1, max_size=60),
    st.lists(st.integers(1, 59), max_size=5),
)
def test_property_any_batching_gives_the_same_windows(raw, cuts):
    s = small_settings(stream={"allowed_lateness": "45s", "max_future": "300s"})
    events = [ev(f"u{u}", t, a, "MF"[a % 2]) for u, t, a in raw]
    whole_status, whole, _ = run(s, [batch(events)], seal_between=False)
    bounds = sorted({0, len(events), *[c for c in cuts if c < len(events)]})
    parts = [batch(events[a:b], first_row=a) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    part_status, parted, _ = run(s, parts)
    assert whole_status == part_status
    assert sorted(whole) == sorted(parted) and all(np.array_equal(whole[c], parted[c]) for c in whole)
    # every cell from the first to the last sealed got exactly one histogram
    if whole:
        assert sorted(whole) == list(range(min(whole), max(whole) + 1))


def test_snapshot_round_trip_with_buffers():
    s = small_settings(stream={"allowed_lateness": "120s"})
    w = Windower(Grid.from_settings(s))
    valid, _ = validate_batch(batch([ev("a", 10), ev("b", 70), ev("a", 75, 50)]), DOMAIN)
    w.offer(valid)
    snap = w.snapshot(include_buffers=True)
    w2 = Windower.restore(Grid.from_settings(s), snap)
    assert w2.snapshot(include_buffers=True) == snap
    for c in w.sealable(final=True):
        np.testing.assert_array_equal(w.take(c).counts(DOMAIN.size), w2.take(c).counts(DOMAIN.size))
        w.advance()
        w2.advance()
    with pytest.raises(StateError):
        Windower.restore(Grid.from_settings(s), {"version": 99})


def test_grid_bounds_are_exact():
    s = small_settings(stream={"origin": "2024-01-01T00:00:00Z", "timestep": "1h"})
    g = Grid.from_settings(s)
    start, end = g.bounds(3)
    assert start.isoformat() == "2024-01-01T03:00:00+00:00" and (end - start).total_seconds() == 3600
    assert g.cell_of(start.timestamp()) == 3 and g.cell_of(start.timestamp() - 1e-3) == 2


def test_restored_windower_restarts_the_idle_clock():
    # Downtime is not idle time: a windower restored a day later still waits idle_timeout of its own.
    s = small_settings(stream={"idle_timeout": "30s", "allowed_lateness": "60s"})
    w = Windower(Grid.from_settings(s))
    valid, _ = validate_batch(batch([ev("a", 10), ev("b", 100)]), DOMAIN)
    w.offer(valid, now=1000.0)
    assert list(w.sealable(now=1030.0)) == [0, 1]  # the live windower would be idle by now
    w2 = Windower.restore(Grid.from_settings(s), w.snapshot(include_buffers=True))
    later = 1000.0 + 86400
    assert list(w2.sealable(now=later)) == []  # the first call with a clock starts the idle timer
    assert list(w2.sealable(now=later + 29.9)) == []
    assert list(w2.sealable(now=later + 30.0)) == [0, 1]


def test_catching_up_bounds_the_far_future_by_the_data_not_the_clock():
    # A backlog of week-old events; one event stamped "now" must not jump the watermark a week ahead.
    s = small_settings(stream={"max_future": "1h", "allowed_lateness": "0s"})
    now = 1_000_000.0
    old = [ev(f"u{i}", 1000 + 30 * i) for i in range(10)]  # cells 16..21
    w = Windower(Grid.from_settings(s))
    w.catching_up = True
    valid, _ = validate_batch(batch(old + [ev("bogus", now - 5)]), DOMAIN)
    assert w.offer(valid, now=now).tolist() == [ACCEPTED] * 10 + [FAR_FUTURE]
    assert list(w.sealable(now=now)) == [16, 17, 18, 19, 20]  # the watermark stayed with the data
    for c in w.sealable(now=now):
        w.take(c)
        w.advance()
    # within max_future of the data is fine, and moves the watermark by at most max_future
    valid, _ = validate_batch(batch([ev("c", 1270 + 3600)], first_row=11), DOMAIN)
    assert w.offer(valid, now=now).tolist() == [ACCEPTED]
    assert len(w.sealable(now=now)) <= 3600 // 60 + 1
    # and the clock still caps the bound (never later than now + max_future)
    w2 = Windower(Grid.from_settings(s))
    w2.catching_up = True
    valid, _ = validate_batch(batch([ev("a", now + 3000), ev("b", now + 3000 + 3000)]), DOMAIN)
    assert w2.offer(valid, now=now).tolist() == [ACCEPTED, FAR_FUTURE]
    # live (caught up), the clock may extend the bound: after a real quiet period, events near
    # the clock are new data, not a jump
    w3 = Windower(Grid.from_settings(s))
    valid, _ = validate_batch(batch(old + [ev("new", now - 5)]), DOMAIN)
    assert w3.offer(valid, now=now).tolist() == [ACCEPTED] * 11


def test_bounding_parts_first_gives_the_same_counts() -> None:
    """Scale-out workers bound their own rows before the releaser bounds the union: the counts
    must equal bounding the union directly, for any split of the rows (per_person = 1)."""
    import pyarrow as pa

    from stream.ingest.windowing import TimestepData

    @settings(max_examples=200, deadline=None)
    @given(rows=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 7), st.integers(0, 3)), max_size=40),
           parts=st.lists(st.integers(0, 2), min_size=40, max_size=40))
    def check(rows, parts) -> None:
        users = pa.array([f"u{r[0]}" for r in rows], type=pa.string())
        flat = np.array([r[1] for r in rows], dtype=np.int64)
        time = np.array([float(r[2]) for r in rows])
        whole = TimestepData(0, flat, time, users)
        pieces = []
        for k in range(3):
            idx = np.array([i for i in range(len(rows)) if parts[i] == k], dtype=np.int64)
            part = TimestepData(0, flat[idx], time[idx], users.take(pa.array(idx, type=pa.int64())))
            pieces.append(part.bounded(1))
        merged = TimestepData(0, np.concatenate([p.flat for p in pieces]), np.concatenate([p.time for p in pieces]),
                              pa.concat_arrays([p.user_id for p in pieces]))
        assert np.array_equal(merged.counts(8), whole.counts(8))
        assert len(whole.bounded(1)) == len(set(users.to_pylist()))

    check()
