"""Journal compaction (issue 19 item 2): bounded size, bounded index, and kill -9 at every point.

Each crash test compacts a journal in a child process armed with a compaction failpoint
(``DPSTREAM_FAILPOINT``, the service's own :class:`~stream.service.failpoints.Failpoints`), so the
child dies by SIGKILL exactly there: half-way through writing the new file, after it was written
and fsync'd but before the rename, and right after the rename. The parent then reopens the
journal as a restarting service would and checks that recovery is the same as without the crash:
the same last checkpoint (so the same next timestep and input offsets), the same engine snapshot
(the ledger), the same recent release digests, and, when the last checkpoint had not been
committed, the same records re-sent byte for byte. A deliberately broken compaction (rewriting
the journal in place instead of renaming a new file over it) runs through the same crash and
must be caught.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stream.service.journal import (
    COMPACTION_POINTS,
    INDEX_KEEP,
    MIN_COMPACT_BYTES,
    Checkpoint,
    Journal,
    JournaledOutput,
    JournaledRelease,
    JournalError,
    journal_path,
    plan_recovery,
)
from stream.service.loop import checkpoint_records
from stream.service.testing import small_settings

FP = "c" * 64
VIEW = {"privacy": {"epsilon": "1", "w": 20}, "stream": {"id": "s"}}
ROOT = Path(__file__).resolve().parents[3]


def _release(t: int, bins: int = 64) -> JournaledRelease:
    counts = ",".join(str((t * 7 + i) % 13) for i in range(bins))
    msg = b'{"release_id":"r%d","timestep":{"index":%d},"counts":[%s]}' % (t, t, counts.encode())
    ledger = ({"seq": t, "start": t, "end": t, "epsilon": "1/40", "purpose": "publication"},)
    engine = {"timestep": t + 1, "accountant": {"entries": [t - k for k in range(min(t + 1, 20))]},
              "last": counts}
    return JournaledRelease(t, f"r{t}", "fresh", msg, ledger, engine, {"events": 3}, 1000 + t)


def _cp(seq: int, releases: int = 1) -> Checkpoint:
    first = (seq - 1) * releases
    return Checkpoint(seq, {0: 4 * (seq - 1)}, {0: 4 * seq},
                      tuple(_release(first + i) for i in range(releases)),
                      (JournaledOutput("dead_letter", b"0:%d" % seq, b"\xffraw", (("dpstream.reason", b"x"),)),),
                      {"window": {"next_index": first + releases}, "open_events": {}})


def _journal(d: Path, checkpoints: int, *, releases: int = 1, index_keep: int = INDEX_KEEP) -> Journal:
    j = Journal.create(d, "s", fingerprint=FP, privacy_view=VIEW, index_keep=index_keep)
    for seq in range(1, checkpoints + 1):
        j.append(_cp(seq, releases))
    return j


def _plan(j: Journal, marker: int):
    return plan_recovery(j, stream_id="s", fingerprint=FP, privacy_view=VIEW, marker=marker,
                         committed={0: j.last.offsets[0] if marker == j.last_seq else j.last.base_offsets[0]},
                         published=[(t, sha, rid) for t, (sha, rid) in list(j.index.items())[-50:]])


def _recovery_view(d: Path, marker_lag: int) -> dict:
    """Everything a restart depends on, as plain data."""
    with Journal.open(d, "s") as j:
        if j.last is None:  # every checkpoint is gone: the stream could not resume
            return {"last_seq": j.last_seq, "last": None}
        plan = _plan(j, j.last_seq - marker_lag)
        settings = small_settings()
        return {
            "last_seq": j.last_seq,
            "last_timestep": j.last_timestep,
            "last": j.last.to_json(),
            "engine": j.engine,
            "recent_index": list(j.index.items())[-200:],
            "resume": plan.resume_offsets,
            "windowing": plan.windowing,
            "redo": None if plan.redo is None else [(r.topic, r.key, r.value, r.headers)
                                                   for r in checkpoint_records(plan.redo, settings)],
        }


CHILD = textwrap.dedent("""
    import sys
    from stream.service.journal import Journal
    from stream.service.failpoints import Failpoints
    import os
    j = Journal.open(sys.argv[1], "s")
    j.failpoint = Failpoints(os.environ["DPSTREAM_FAILPOINT"])
    broken = sys.argv[2] == "broken"
    if broken:
        # the deliberately broken compaction: rewrite the journal in place (no new file, no rename)
        from stream.service import journal as jm
        out = bytearray()
        prev = jm.GENESIS
        summary = {"type": "summary", "through_seq": j.last.seq - 1,
                   "index": {str(t): list(v) for t, v in j.index.items()}, "engine": j.engine}
        for payload in (j.header, summary, j.last.to_json()):
            frame, prev = jm._frame(prev, jm.canonical_json(payload))
            out += frame
        fd = os.open(j.path, os.O_WRONLY | os.O_TRUNC)
        os.write(fd, bytes(out[: len(out) // 2]))
        os.fsync(fd)
        j.failpoint("compact_mid_write")
        os.write(fd, bytes(out[len(out) // 2:]))
        os.close(fd)
    else:
        j.compact()
    print("compacted without reaching the failpoint")
""")


def _crash_compaction(d: Path, point: str, *, broken: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "DPSTREAM_FAILPOINT": point, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", CHILD, str(d), "broken" if broken else "ok"], env=env,
                          capture_output=True, timeout=60, check=False)


@pytest.mark.parametrize("marker_lag", [0, 1], ids=["committed", "uncommitted"])
@pytest.mark.parametrize("point", COMPACTION_POINTS)
def test_kill_9_at_each_compaction_point_restarts_the_same(tmp_path, point, marker_lag):
    d = tmp_path / "state"
    _journal(d, 40, releases=3).close()
    reference = tmp_path / "reference"
    shutil.copytree(d, reference)
    with Journal.open(reference, "s") as j:  # the same journal, compacted without a crash
        j.compact()
    expected = _recovery_view(reference, marker_lag)
    assert expected == _recovery_view(d, marker_lag)  # compaction itself changes nothing recovery sees

    done = _crash_compaction(d, point)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    assert _recovery_view(d, marker_lag) == expected
    size = journal_path(d, "s").stat().st_size
    if point == "compact_after_rename":
        assert size == journal_path(reference, "s").stat().st_size  # the new file is in place
    else:
        assert size > journal_path(reference, "s").stat().st_size  # still the old file
    # and the stream carries on: append, compact again over the stale .tmp, reopen
    with Journal.open(d, "s") as j:
        j.append(_cp(41, releases=3))
        j.compact()
    with Journal.open(d, "s") as j:
        assert j.last_seq == 41 and j.last_timestep == 41 * 3 - 1


def test_the_crash_test_catches_an_in_place_compaction(tmp_path):
    """Broken variant: rewriting the file in place loses the journal when killed half-way."""
    d = tmp_path / "state"
    _journal(d, 40, releases=3).close()
    expected = _recovery_view(d, 0)
    done = _crash_compaction(d, "compact_mid_write", broken=True)
    assert done.returncode == -signal.SIGKILL
    try:
        seen = _recovery_view(d, 0)
    except JournalError:
        return  # caught: the journal is unusable (corrupt or missing its checkpoints)
    assert seen != expected


def test_size_and_index_stay_bounded_over_a_long_stream(tmp_path):
    """10⁴ timesteps: the file never exceeds the compaction limit (+ one checkpoint), the in-memory
    index never exceeds ``index_keep``, and reopening reads only the bounded file."""
    j = _journal(tmp_path, 0, index_keep=300)
    sizes, compactions = [], 0
    for seq in range(1, 10_001):
        j.append(_cp(seq))
        compactions += j.maybe_compact()
        assert len(j.index) <= 300
        sizes.append(j.size)
    limit = j.compact_limit()
    assert compactions >= 3
    assert max(sizes[2_000:]) <= max(MIN_COMPACT_BYTES, limit) + 2 * len(_cp(1).to_json().__repr__())
    assert max(sizes[-2_000:]) <= max(sizes[1_000:3_000]) * 1.1  # flat, not growing with the stream
    assert j.last_timestep == 9_999 and j.index_floor == 9_700
    j.close()
    with Journal.open(tmp_path, "s", index_keep=300) as again:
        assert again.last_seq == 10_000 and again.last_timestep == 9_999
        assert len(again.index) <= 300 and again.knows(5) and not again.knows(10_000)


def test_a_published_release_older_than_the_kept_digests_is_refused_with_the_fix(tmp_path):
    with _journal(tmp_path, 30, index_keep=10) as j:
        with pytest.raises(JournalError, match="startup_tail_records"):
            plan_recovery(j, stream_id="s", fingerprint=FP, privacy_view=VIEW, marker=30,
                          committed={0: j.last.offsets[0]}, published=[(3, "0" * 64, "r3")])
