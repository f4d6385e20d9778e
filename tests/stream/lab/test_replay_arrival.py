"""Replay with ``schema.arrival_time``: the per-event rule of docs/privacy.md §1.1, offline."""

from __future__ import annotations

import csv
from datetime import UTC, datetime

import pytest

from stream.ingest.csvio import CsvError
from stream.lab.replay import replay
from stream.service.testing import small_settings

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
S = small_settings(seed=7, stream={"timestep": "15m", "allowed_lateness": "2m", "max_future": "10m",
                                   "start": "2026-01-01T00:00:00Z"},
                   schema={"arrival_time": "arrival"})


def _write(path, rows, *, arrival=True):
    """Rows in arrival order; with or without the arrival column."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user_id", "event_time", *(["arrival"] if arrival else []), "age", "sex"])
        for u, t, r, a, x in sorted(rows, key=lambda e: e[2]):
            w.writerow([u, repr(t), *([repr(r)] if arrival else []), a, x])
    return path


BASE = [(f"p{i}", T0 + i, T0 + i + 2, i % 100, "MF"[i % 2]) for i in range(2700)]
FAST = ("newcomer", T0 + 700 + 597, T0 + 700, 30, "M")  # the scenario: a clock ~10 min fast


def _releases(settings, path, tmp_path, name):
    out = tmp_path / f"{name}.jsonl"
    summary = replay(settings, path, out)
    return out.read_bytes().splitlines(), summary


def test_a_fast_clock_person_changes_no_other_timestep_in_replay(tmp_path):
    d = _write(tmp_path / "d.csv", BASE)
    d2 = _write(tmp_path / "d2.csv", [*BASE, FAST])
    a, sa = _releases(S, d, tmp_path, "a")
    b, sb = _releases(S, d2, tmp_path, "b")
    assert sa.late == sb.late == 0
    assert sb.accepted == sa.accepted + 1
    assert len(a) == len(b)
    # the newcomer's event is in timestep 1; timesteps 0 and 2 are byte-identical (same seeded noise)
    assert a[1] == b[1] and a[3] == b[3]


def test_without_arrival_times_every_event_counts_in_its_event_time_timestep(tmp_path):
    """No arrival column: the whole file is known, so nothing is late, whatever the row order, and one
    person's fast clock changes only their own timestep. The legacy watermark rule on the same rows
    (what replay did before) sends many other people's events late: the check is not vacuous."""
    plain = small_settings(seed=7, stream={"timestep": "15m", "allowed_lateness": "2m", "max_future": "10m",
                                           "start": "2026-01-01T00:00:00Z"})
    d = _write(tmp_path / "d.csv", BASE, arrival=False)
    d2 = _write(tmp_path / "d2.csv", [*BASE, FAST], arrival=False)  # the fast row sits early in the file
    a, sa = _releases(plain, d, tmp_path, "a")
    b, sb = _releases(plain, d2, tmp_path, "b")
    assert sa.late == sb.late == 0 and sa.accepted == len(BASE) and sb.accepted == len(BASE) + 1
    # the newcomer's event time is in timestep 1: every other timestep is byte-identical
    assert len(a) == len(b) and a[1] == b[1] and all(a[i] == b[i] for i in range(3, len(a)))
    # a stale row at the very end still counts in its (early) timestep
    _, sc = _releases(plain, _write(tmp_path / "c.csv", [*BASE, ("stale", T0 + 1, T0 + 9e9, 1, "F")],
                                    arrival=False), tmp_path, "c")
    assert sc.late == 0 and sc.accepted == len(BASE) + 1
    # the legacy rule: the same rows through the watermark path
    from stream.ingest.csvio import EventCsvReader
    from stream.pipeline import ReleasePipeline

    pipe = ReleasePipeline(plain)
    late = sum(pipe.offer(block.batch).counts().get("timestep_sealed", 0) for block in EventCsvReader(d2, plain))
    assert late > 100


def test_late_by_its_own_arrival_time_and_unsorted_files_are_refused(tmp_path):
    rows = [("a", T0 + 10, T0 + 11, 30, "M"), ("b", T0 + 20, T0 + 900 + 121, 30, "M")]  # b after the deadline
    _, s = _releases(S, _write(tmp_path / "l.csv", rows), tmp_path, "l")
    assert s.late == 1 and s.accepted == 1
    bad = tmp_path / "unsorted.csv"
    bad.write_text(f"user_id,event_time,arrival,age,sex\na,{T0 + 5},{T0 + 9},30,M\nb,{T0 + 5},{T0 + 8},30,M\n")
    with pytest.raises(CsvError, match="sort the file"):
        replay(S, bad, None)


def test_the_in_memory_service_loop_follows_record_times_like_replay(tmp_path):
    """run_in_memory with record-time settings (the default mode) and each message's record time:
    byte-identical releases to replay with the arrival column; without record times it refuses."""
    from stream.service.testing import MemorySource, payloads, run_in_memory

    rec = small_settings(seed=7, stream={"timestep": "15m", "allowed_lateness": "2m", "max_future": "10m",
                                         "start": "2026-01-01T00:00:00Z"},
                         kafka={"record_time": "trusted-create-time"})
    rows = sorted([*BASE, FAST, ("b", T0 + 20, T0 + 900 + 121, 30, "M")], key=lambda e: e[2])  # b: late
    events = [{"user_id": u, "event_time": t, "attributes": {"age": a, "sex": x}} for u, t, _, a, x in rows]
    res = run_in_memory(rec, MemorySource(payloads(events), max_records=97, record_times=[r[2] for r in rows]))
    offline, summary = _releases(S, _write(tmp_path / "d.csv", rows), tmp_path, "d")
    assert [r.payload for r in res.releases] == offline[1:]
    assert summary.late == 1 and sum(1 for r in res.rejections if r.late) == 1
    with pytest.raises(ValueError, match="record_times"):
        run_in_memory(rec, MemorySource(payloads(events)))
