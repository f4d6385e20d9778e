"""``release.delay: k`` through the release path (:class:`stream.pipeline.ReleasePipeline`).

At timestep ``t`` the pipeline publishes the release of ``t − k`` (nothing while ``t < k``), its
counts the fixed-lag smoother's output at ``t`` (smoothed with the releases up to ``t``) and the
message saying so (``lag``); :meth:`ReleasePipeline.flush` publishes the last ``k`` at the end.
Every timestep is published once, in order; a pipeline restored from a snapshot (or a journal
entry) mid-stream publishes the same bytes as an uninterrupted one; ``dpstream replay`` writes
the same lines.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from controller.errors import StateError
from stream.messages import SCHEMA_DIR, parse_release
from stream.pipeline import ReleasePipeline
from stream.service.testing import small_settings

T = 30
K = 2


def _settings(delay: int = K, chain: str = "model+nonnegative"):
    return small_settings(privacy={"epsilon": 20}, release={"postprocess": chain, "delay": delay}).validate_all()


def _counts(bins: int) -> np.ndarray:
    rng = np.random.default_rng(3)
    level = np.where(np.arange(T) < 15, 20, 60)
    return (level[:, None] + rng.integers(0, 5, size=(T, bins))).astype(np.int64)


def _publish(pipe: ReleasePipeline, rows: np.ndarray, start: int = 0) -> list[list[bytes]]:
    """What each timestep publishes (one list per call)."""
    return [[p for _, p in pipe.release_counts(row).outputs] for row in rows[start:]]


def test_each_timestep_is_published_once_in_order_k_timesteps_late_with_the_smoothers_counts():
    s = _settings()
    pipe = ReleasePipeline(s)
    rows = _counts(pipe.domain.size)
    per_step = _publish(pipe, rows)
    assert per_step[:K] == [[]] * K  # nothing until t ≥ k (documented in docs/api.md)
    assert list(pipe.unpublished) == [T - K + i for i in range(K)]
    assert all(len(p) == 1 for p in per_step[K:])
    tail = [p for _, p in pipe.flush()]
    assert len(tail) == K and pipe.flush() == []  # flushed once
    assert list(pipe.unpublished) == []
    published = [m for step in per_step for m in step] + tail
    messages = [parse_release(p) for p in published]
    assert [m.timestep.index for m in messages] == list(range(T))
    validator = jsonschema.Draft202012Validator(json.loads((SCHEMA_DIR / "release.schema.json").read_text()))
    for i, (m, raw) in enumerate(zip(messages, published, strict=True)):
        validator.validate(json.loads(raw))
        assert m.to_bytes() == raw
        assert m.lag is not None and m.lag.delay == K
        assert m.lag.smoothed_through == min(i + K, T - 1)
    # the counts are the smoother's: at t the post-processor's output is timestep t − k's
    post, state = s.postprocessor(), s.postprocessor().initial()
    ref = ReleasePipeline(_settings(0, "none"))  # the same engine and noise, no post-processing
    expected = []
    for row in rows:
        raw = parse_release(ref.release_counts(row).payload)
        out, state = post.apply(state, np.asarray(raw.counts, dtype=float), np.asarray(raw.accuracy.half_width),
                                raw.accuracy.confidence, raw.kind == "fresh")
        expected.append(out.counts)
    for t in range(K, T):
        assert np.allclose(messages[t - K].counts, expected[t], rtol=0, atol=1e-6), t
    # a delayed jump is not the undelayed filter's output (the smoother looked ahead)
    assert any(not np.allclose(messages[t].counts, expected[t]) for t in range(T - K))


@pytest.mark.parametrize("cut", [1, K, 16, T - 1])
def test_a_restored_pipeline_publishes_the_same_bytes(cut):
    s = _settings()
    whole = ReleasePipeline(s)
    rows = _counts(whole.domain.size)
    expected = _publish(whole, rows) + [[p for _, p in whole.flush()]]
    first = ReleasePipeline(s)
    head = _publish(first, rows[:cut])
    snap = json.loads(json.dumps(first.snapshot()))  # through JSON, as journaled
    again = ReleasePipeline.restore(s, snap)
    got = head + _publish(again, rows, cut) + [[p for _, p in again.flush()]]
    assert got == expected
    # and from the journal entry of timestep cut − 1 (what the service resumes after)
    sealed = ReleasePipeline(s)
    entries = [sealed.release_counts(r).journal_entry() for r in rows[:cut]]
    resumed = ReleasePipeline.resume_after(s, json.loads(json.dumps(entries[-1])))
    assert head + _publish(resumed, rows, cut) + [[p for _, p in resumed.flush()]] == expected


def test_a_snapshot_that_lost_the_queue_is_refused():
    s = _settings()
    pipe = ReleasePipeline(s)
    for row in _counts(pipe.domain.size)[:5]:
        pipe.release_counts(row)
    snap = pipe.snapshot()
    assert len(snap["engine"]["delayed"]) == K
    snap["engine"]["delayed"] = snap["engine"]["delayed"][1:]
    with pytest.raises(StateError, match="waiting for publication"):
        ReleasePipeline.restore(s, snap)


def test_replay_writes_the_delayed_stream(tmp_path):
    from stream.lab.replay import replay

    s = _settings()
    rows = _counts(s.domain().size)
    src = tmp_path / "counts.csv"
    src.write_text("\n".join(",".join(str(v) for v in r) for r in rows) + "\n")
    out = tmp_path / "out.jsonl"
    replay(s, src, out, counts=True)
    lines = out.read_bytes().splitlines()
    pipe = ReleasePipeline(s)
    expected = [p for step in _publish(pipe, rows) for p in step] + [p for _, p in pipe.flush()]
    assert lines[1:] == expected


def test_noise_is_drawn_once_per_timestep_whatever_the_delay():
    """The delay is post-processing: the engine's releases (kind, ε) are those of the undelayed stream."""
    a, b = ReleasePipeline(_settings()), ReleasePipeline(_settings(0, "model+nonnegative"))
    rows = _counts(a.domain.size)
    for row in rows:
        sa, sb = a.release_counts(row), b.release_counts(row)
        assert sa.release.kind == sb.release.kind and sa.epsilon_spent == sb.epsilon_spent


def test_timesteps_before_the_first_fresh_release_keep_their_placeholder_and_stay_in_order():
    """A stream whose first fresh release comes at timestep 3 (the engine republishes the all-zero
    placeholder before it): those timesteps are published as released, k late, and timestep 3 onwards
    with the smoother's counts; every timestep once, in order, and a restore in the middle agrees."""
    from dataclasses import replace

    first_fresh = 3

    class LateStart:
        """The real engine, but its first releases are the placeholder (no fresh release yet)."""

        def __init__(self, engine):
            self.real = engine

        def __getattr__(self, name):
            return getattr(self.real, name)

        def step(self, state, counts, drawer):
            release, after = self.real.step(state, counts, drawer)
            if release.timestep < first_fresh:
                release = replace(release, kind="republished", source_timestep=None,
                                  counts=np.zeros_like(release.counts))
            return release, after

    def late_start(pipe: ReleasePipeline) -> ReleasePipeline:
        pipe.engine = LateStart(pipe.engine)
        return pipe

    s = _settings()
    pipe = late_start(ReleasePipeline(s))
    rows = _counts(pipe.domain.size)
    per_step = _publish(pipe, rows[:12])
    out = [parse_release(p) for step in per_step for p in step] + [m for m, _ in pipe.flush()]
    assert [m.timestep.index for m in out] == list(range(12))
    assert all(m.counts == [0] * pipe.domain.size for m in out[:first_fresh])
    assert all(sum(m.counts) > 0 for m in out[first_fresh:])
    whole = [p for step in per_step for p in step]
    first = late_start(ReleasePipeline(s))
    head = [p for step in _publish(first, rows[:4]) for p in step]
    again = late_start(ReleasePipeline.restore(s, json.loads(json.dumps(first.snapshot()))))
    assert head + [p for step in _publish(again, rows[:12], 4) for p in step] == whole


def test_a_recalled_timestep_resends_what_its_step_published():
    """``recall`` (a timestep the journal already holds) re-sends, without drawing, the messages that
    step published (timestep ``index − k``'s), not its own release; an entry that does not say what
    it published is refused."""
    s = _settings()
    first = ReleasePipeline(s)
    rows = _counts(first.domain.size)
    sealed = [first.release_counts(r) for r in rows[:6]]
    entries = [json.loads(json.dumps(x.journal_entry())) for x in sealed]
    assert [len(e["published"]) for e in entries] == [0, 0, 1, 1, 1, 1]
    again = ReleasePipeline.resume_after(s, entries[3], recall=lambda i: entries[i] if i < 6 else None)
    got = [again.release_counts(r) for r in rows[4:6]]
    assert all(x.recovered for x in got)
    assert [[p for _, p in x.outputs] for x in got] == [[p for _, p in x.outputs] for x in sealed[4:6]]
    assert [parse_release(x.outputs[0][1]).timestep.index for x in got] == [2, 3]
    assert [p for _, p in again.flush()] == [p for _, p in first.flush()]  # and the same queue after them
    entry = {k: v for k, v in entries[4].items() if k not in ("published", "checksum")}
    lost = ReleasePipeline.resume_after(s, entries[3], recall=lambda i: entry)
    with pytest.raises(StateError, match="does not say what it published"):
        lost.release_counts(rows[4])


def test_check_config_says_what_the_delay_does_to_publication():
    from stream.commands.check_config import delay_lines

    (line,) = delay_lines(_settings())
    assert line.startswith(f"release.delay {K}: timestep t is published with the release of t + {K}")
    assert "nothing during the first 2 timesteps" in line and "stream's end" in line
    assert delay_lines(_settings(0, "model")) == []
