"""The privacy journal: format, crash safety (torn writes, checksums), recovery plans."""

from __future__ import annotations

import hashlib
import os
import stat
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream.service.journal import (
    Checkpoint,
    ConfigDriftError,
    Journal,
    JournalCorruptError,
    JournaledOutput,
    JournaledRelease,
    JournalError,
    JournalLockedError,
    RecoveryRefusedError,
    journal_path,
    plan_recovery,
)

FP = "f" * 64
VIEW = {"privacy": {"epsilon": "1", "cutoff": 5}, "stream": {"id": "s"}}


def _release(t: int, noise: int = 0) -> JournaledRelease:
    msg = b'{"release_id":"r%d","timestep":{"index":%d},"counts":[%d]}' % (t, t, 7 + noise)
    return JournaledRelease(t, f"r{t}", "fresh" if t % 2 == 0 else "republished", msg,
                            ({"seq": t, "start": t, "end": t, "epsilon": "1/10", "purpose": "publication"},),
                            {"timestep": t + 1, "secret": [noise]}, {"rows": 3})


def _cp(seq: int, releases=(), outputs=()) -> Checkpoint:
    return Checkpoint(seq, {0: 10 * (seq - 1), 1: 5 * (seq - 1)}, {0: 10 * seq, 1: 5 * seq},
                      tuple(releases), tuple(outputs), {"open": [seq], "watermark": seq * 1.5})


def _filled(tmp_path, n: int = 3) -> Journal:
    j = Journal.create(tmp_path, "s", fingerprint=FP, privacy_view=VIEW)
    for seq in range(1, n + 1):
        outs = [JournaledOutput("dead_letter", b"0:%d" % seq, b"\xff\x00raw", (("dpstream.reason", b"malformed_json"),))]
        j.append(_cp(seq, [_release(seq - 1)], outs))
    return j


def _plan(j, marker, committed=None, published=(), fp=FP, view=VIEW):
    return plan_recovery(j, stream_id="s", fingerprint=fp, privacy_view=view, marker=marker,
                         committed=committed or {}, published=list(published))


# -- format ------------------------------------------------------------------


def test_round_trip_and_permissions(tmp_path):
    j = _filled(tmp_path)
    j.close()
    path = journal_path(tmp_path, "s")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with Journal.open(tmp_path, "s") as j2:
        assert j2.last_seq == 3 and j2.fingerprint == FP and j2.torn_bytes == 0
        assert j2.last.windowing == {"open": [3], "watermark": 4.5}
        assert j2.last.outputs[0].value == b"\xff\x00raw"
        assert j2.last.outputs[0].headers == (("dpstream.reason", b"malformed_json"),)
        assert j2.engine == {"timestep": 3, "secret": [0]}
        assert set(j2.index) == {0, 1, 2}
        assert j2.index[1] == (hashlib.sha256(_release(1).message).hexdigest(), "r1")
        assert [cp.seq for cp in j2.checkpoints_on_disk()] == [1, 2, 3]
        assert j2.last.releases[0].message == _release(2).message


def test_out_of_sequence_append_is_refused(tmp_path):
    with _filled(tmp_path, 1) as j, pytest.raises(JournalError, match="out of sequence"):
        j.append(_cp(3))


def test_create_refuses_to_overwrite_and_lock_is_exclusive(tmp_path):
    j = _filled(tmp_path, 1)
    with pytest.raises(JournalLockedError):
        Journal.open(tmp_path, "s")
    j.close()
    with pytest.raises(JournalError, match="already exists"):
        Journal.create(tmp_path, "s", fingerprint=FP, privacy_view=VIEW)
    with pytest.raises(JournalError, match="no journal"):
        Journal.open(tmp_path, "other")


def _frame_bounds(path):
    from stream.service.journal import _scan

    frames, _ = _scan(path.read_bytes())
    return [(f.start, f.end) for f in frames]


def test_every_truncation_of_the_last_frame_is_a_torn_tail(tmp_path):
    _filled(tmp_path, 3).close()
    path = journal_path(tmp_path, "s")
    data = path.read_bytes()
    start, end = _frame_bounds(path)[-1]
    step = max(1, (end - start) // 97)
    for cut in list(range(start + 1, end, step)) + [end - 1, start + 3, start + 8]:
        path.write_bytes(data[:cut])
        with Journal.open(tmp_path, "s") as j:
            assert j.last_seq == 2 and j.torn_bytes == cut - start
    # recovery truncates, and appending then works
    path.write_bytes(data[: start + 20])
    with Journal.open(tmp_path, "s") as j:
        with pytest.raises(JournalError, match="torn tail"):
            j.append(_cp(3))
        assert j.truncate_torn_tail() == 20
        j.append(_cp(3, [_release(2, noise=0)]))
    with Journal.open(tmp_path, "s") as j:
        assert j.last_seq == 3 and j.torn_bytes == 0


def test_zero_filled_tail_is_torn_not_corrupt(tmp_path):
    _filled(tmp_path, 2).close()
    path = journal_path(tmp_path, "s")
    with open(path, "ab") as f:
        f.write(b"\x00" * 4096)
    with Journal.open(tmp_path, "s") as j:
        assert j.last_seq == 2 and j.torn_bytes == 4096


def test_a_flipped_byte_in_an_earlier_frame_is_corruption(tmp_path):
    _filled(tmp_path, 3).close()
    path = journal_path(tmp_path, "s")
    data = path.read_bytes()
    bounds = _frame_bounds(path)
    for start, end in bounds[:-1]:
        for pos in (start, start + 5, (start + end) // 2, end - 1):
            bad = bytearray(data)
            bad[pos] ^= 0x41
            path.write_bytes(bytes(bad))
            with pytest.raises(JournalCorruptError):
                Journal.open(tmp_path, "s")
    path.write_bytes(data)
    Journal.open(tmp_path, "s").close()


def test_a_flipped_byte_in_the_last_frame_reads_as_an_interrupted_append(tmp_path):
    # Indistinguishable from a torn write; recovery then checks Kafka and the
    # output topic before dropping it (see test_plan_* below).
    _filled(tmp_path, 3).close()
    path = journal_path(tmp_path, "s")
    data = bytearray(path.read_bytes())
    start, end = _frame_bounds(path)[-1]
    data[(start + end) // 2] ^= 1
    path.write_bytes(bytes(data))
    with Journal.open(tmp_path, "s") as j:
        assert j.last_seq == 2 and j.torn_bytes == end - start


def test_a_removed_middle_frame_breaks_the_chain(tmp_path):
    _filled(tmp_path, 4).close()
    path = journal_path(tmp_path, "s")
    data = path.read_bytes()
    b = _frame_bounds(path)
    path.write_bytes(data[: b[2][0]] + data[b[2][1]:])  # drop checkpoint 2
    with pytest.raises(JournalCorruptError):
        Journal.open(tmp_path, "s")


def test_garbage_is_not_a_journal(tmp_path):
    path = journal_path(tmp_path, "s")
    path.write_bytes(b"not a journal at all, but long enough to have a header")
    with pytest.raises(JournalCorruptError):
        Journal.open(tmp_path, "s")


def test_compaction_keeps_what_recovery_needs(tmp_path):
    j = _filled(tmp_path, 6)
    before_size = j.size
    index, engine, last = dict(j.index), j.engine, j.last
    j.compact()
    assert j.size < before_size
    j.append(_cp(7))  # appends continue the chain after compaction
    j.close()
    with Journal.open(tmp_path, "s") as j2:
        assert j2.last_seq == 7 and j2.index == index and j2.engine == engine
        assert [cp.seq for cp in j2.checkpoints_on_disk()] == [6, 7]
        assert next(iter(j2.checkpoints_on_disk())).to_json() == last.to_json()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 6), cut=st.floats(0, 1))
def test_any_crash_during_append_leaves_a_valid_prefix(tmp_path, n, cut):
    """Property: truncating the file anywhere yields a prefix of the checkpoints, never an error."""
    d = tmp_path / uuid.uuid4().hex
    _filled(d, n).close()
    path = journal_path(d, "s")
    raw = path.read_bytes()
    header_end = _frame_bounds(path)[0][1]
    keep = header_end + int(cut * (len(raw) - header_end))
    path.write_bytes(raw[:keep])
    with Journal.open(d, "s") as j:
        complete = [e for _, e in _frame_bounds(path)]
        assert j.last_seq == len(complete) - 1
        assert j.size + j.torn_bytes == keep


# -- recovery plans -------------------------------------------------------------


def test_plan_new_stream(tmp_path):
    plan = _plan(None, None)
    assert plan.redo is None and plan.engine is None and plan.resume_offsets == {}


def test_plan_refuses_a_lost_journal(tmp_path):
    with pytest.raises(RecoveryRefusedError, match="journal was lost"):
        _plan(None, 4)
    with pytest.raises(RecoveryRefusedError, match="already holds 2 of its releases"):
        _plan(None, None, published=[(0, "a", "r0"), (1, "b", "r1")])


def test_plan_refuses_config_drift_and_says_what_changed(tmp_path):
    with _filled(tmp_path) as j, pytest.raises(ConfigDriftError) as info:
        _plan(j, 3, fp="0" * 64, view={"privacy": {"epsilon": "2", "cutoff": 5}, "stream": {"id": "s"}})
    assert "privacy.epsilon: '1' -> '2'" in str(info.value)
    assert "new stream id" in str(info.value)


def test_plan_resume_after_a_committed_checkpoint(tmp_path):
    with _filled(tmp_path) as j:
        plan = _plan(j, 3, {0: 30, 1: 15}, published=[(2, j.index[2][0], "r2")])
        assert plan.redo is None and plan.resume_offsets == {0: 30, 1: 15}
        assert plan.engine == {"timestep": 3, "secret": [0]} and plan.windowing["open"] == [3]


def test_plan_redo_when_the_last_checkpoint_did_not_commit(tmp_path):
    with _filled(tmp_path) as j:
        plan = _plan(j, 2, {0: 20, 1: 10})
        assert plan.redo is j.last and plan.resume_offsets == {0: 30, 1: 15}
        assert "re-sending" in plan.notes[0]
    d2 = tmp_path / "first"
    with _filled(d2, 1) as j:  # the very first transaction never committed
        assert _plan(j, None).redo.seq == 1


@pytest.mark.parametrize("marker", [5, 1, None])
def test_plan_refuses_when_journal_and_kafka_disagree(tmp_path, marker):
    with _filled(tmp_path) as j, pytest.raises(RecoveryRefusedError):
        _plan(j, marker)


def test_plan_refuses_moved_offsets(tmp_path):
    with _filled(tmp_path) as j, pytest.raises(RecoveryRefusedError, match="partition 0"):
        _plan(j, 3, {0: 12, 1: 15})


def test_plan_refuses_unknown_or_different_published_releases(tmp_path):
    with _filled(tmp_path) as j:
        with pytest.raises(RecoveryRefusedError, match="does not know"):
            _plan(j, 3, published=[(7, "x", "r7")])
        with pytest.raises(RecoveryRefusedError, match="bytes differ"):
            _plan(j, 3, published=[(1, "0" * 64, "r1")])


def test_plan_torn_tail_then_truncation(tmp_path):
    _filled(tmp_path, 3).close()
    path = journal_path(tmp_path, "s")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 10])
    with Journal.open(tmp_path, "s") as j:
        plan = _plan(j, 2, {0: 20, 1: 10})
        assert plan.truncate_torn and plan.redo is None  # checkpoint 3 was never produced
        assert _plan(j, 1, {0: 10, 1: 5}).redo.seq == 2
        # ...but if Kafka saw checkpoint 3, the journal is behind: refuse
        with pytest.raises(RecoveryRefusedError, match="behind"):
            _plan(j, 3)


def test_drop_last_checkpoint_is_only_a_test_tool(tmp_path):
    with _filled(tmp_path, 3) as j:
        dropped = j.drop_last_checkpoint()
        assert dropped.seq == 3 and j.last_seq == 2 and 2 not in j.index
        j.append(_cp(3))
    assert os.path.exists(journal_path(tmp_path, "s"))
