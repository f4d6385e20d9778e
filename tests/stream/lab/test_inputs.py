"""The lab's one input reader (:mod:`stream.lab.inputs`): evaluate, evaluate --mechanisms and
replay read an events CSV through the same loop, so they agree on every row."""

from __future__ import annotations

import ast
import csv
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from stream.lab.errors import InputError
from stream.lab.inputs import load_records, load_truth
from stream.lab.replay import ReplayError, replay
from stream.service.testing import small_settings

ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
STREAM = {"timestep": "15m", "allowed_lateness": "2m", "max_future": "10m", "start": "2026-01-01T00:00:00Z"}


def _names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    out |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    return out


def test_only_the_inputs_module_reads_csv_files_in_the_lab():
    """One loader: no other lab module opens the service's CSV readers itself."""
    readers = {"EventCsvReader", "read_counts", "read_events"}
    offenders = sorted(f"{p.relative_to(ROOT)}: {sorted(_names(p) & readers)}"
                       for p in (ROOT / "stream" / "lab").glob("*.py")
                       if p.name != "inputs.py" and _names(p) & readers)
    assert offenders == []


def _write(path: Path, *, arrival: bool) -> Path:
    """Rows in arrival order: good ones over 6 timesteps, an invalid time (line 5), an out-of-domain
    age (line 9), a person over the contribution bound, and (with arrival times) one row late."""
    rows = [(f"p{i % 40}", T0 + 17 * i, T0 + 17 * i + 3, i % 100, "MF"[i % 2]) for i in range(300)]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user_id", "event_time", *(["arrival"] if arrival else []), "age", "sex"])
        for n, (u, t, r, a, x) in enumerate(rows):
            if n == 3:
                w.writerow(["bad", "abc", *([repr(r)] if arrival else []), 30, "M"])
            if n == 6:
                w.writerow(["p1", repr(t), *([repr(r)] if arrival else []), 300, "M"])
            w.writerow([u, repr(t), *([repr(r)] if arrival else []), a, x])
        if arrival:  # event time in timestep 0, arriving long after its deadline: late
            w.writerow(["late", repr(T0 + 5), repr(T0 + 17 * 300 + 10), 1, "F"])
    return path


@pytest.mark.parametrize("arrival", [False, True])
def test_evaluate_records_and_replay_read_the_same_rows(tmp_path, arrival):
    schema = {"arrival_time": "arrival"} if arrival else {}
    s = small_settings(seed=7, stream=STREAM, schema=schema)
    path = _write(tmp_path / "events.csv", arrival=arrival)
    truth = load_truth(s, path)
    rec = load_records(s, path)
    summary = replay(s, path, None)
    rep = truth.report
    assert rep.rows == rec.report.rows == summary.rows_read == 302 + arrival
    assert rep.accepted == rec.report.accepted == summary.accepted
    assert rep.rejected == summary.rejected and rep.first_rows == summary.first_rows
    assert rep.first_rows["invalid_time"] == [5] and rep.first_rows["out_of_domain"] == [9]
    assert rep.late == summary.late == int(arrival)
    assert rec.report.rejected == rep.rejected  # the windowing's reasons counted by name there
    # the same timesteps with the same bounded records
    assert summary.timesteps == truth.counts.shape[0] == rec.timesteps
    size = s.domain().size
    hist = np.stack([np.bincount(np.ravel_multi_index(tuple(r.T), s.domain().shape), minlength=size)
                     for r in rec.records])
    assert np.array_equal(hist, truth.counts)
    assert rep.bounded_out == rec.report.bounded_out > 0


def test_strict_names_the_same_first_line_everywhere(tmp_path):
    s = small_settings(seed=7, stream=STREAM)
    path = _write(tmp_path / "events.csv", arrival=False)
    messages = []
    for call, error in ((lambda: load_truth(s, path, strict=True), InputError),
                        (lambda: load_records(s, path, strict=True), InputError),
                        (lambda: replay(s, path, None, strict=True), ReplayError)):
        with pytest.raises(error) as info:
            call()
        messages.append(str(info.value))
    assert len(set(messages)) == 1 and "line 5: invalid_time" in messages[0]
