"""``service.publish: on-schedule``: releases at a public time, not when someone's record arrives.

The service runs for real (``Service.start()``/``run()``: journal, engine, the commit path) on an
in-process partition whose records arrive at scripted wall-clock times, read against an injected
manual clock that the polls move (a poll that finds nothing waits its whole timeout, as a consumer
does). The neighbouring pair is issue 27 item 5's: D′ = D plus one event right after timestep 0's
deadline. Under ``when-complete`` that record completes timestep 0 at once, so the release comes
about ``clock_skew`` earlier in D′ than in D: the timing says someone sent an event. On schedule
both are released at D(0) + clock_skew + margin exactly, with that time as the record timestamp.
"""

from __future__ import annotations

import io
import json
import logging
import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import stream.service.loop as loop_mod
from stream.config import ConfigError, load_settings
from stream.service.http import Health
from stream.service.logs import setup_logging
from stream.service.metrics import Metrics
from stream.service.schedule import PublishSchedule, record_timestamp_ms
from stream.service.testing import (
    FakeKafka,
    FakeRecord,
    ManualClock,
    fake_kafka_parts,
    small_settings,
)

T = 4_000_000_020  # a timestep boundary (a multiple of 60 s), in 2096: the real clock never reaches it
STEP = 60.0
SKEW, MARGIN = 5.0, 1.0
SCHEDULED_0 = T + STEP + SKEW + MARGIN  # D(0) + clock_skew + publish_margin


class _Partition:
    """One input partition whose records arrive at given wall times (``ManualClock``)."""

    partitions = [0]
    group_metadata = None
    control = None

    def __init__(self, clock: ManualClock, records: Sequence[tuple[float, float, bytes]], stop: threading.Event,
                 *, stall_until: float = -math.inf, give_up_at: float = T + 900, behind: bool = False) -> None:
        self.clock, self.stop = clock, stop
        self.records = sorted(records)  # (arrival wall time, record time, payload)
        self.pos = 0
        self.stall_until = stall_until  # broker lag: nothing can be fetched before this wall time
        self.give_up_at = give_up_at    # a test that never sees its release ends instead of hanging
        self.behind = behind            # a busy partition: the consumer never sees itself at the end

    def _arrived(self) -> int:
        return sum(1 for a, _, _ in self.records if a <= self.clock.now())

    def poll(self, timeout_s: float, max_records: int, positions: Mapping[int, int]) -> list[tuple[int, list[Any]]]:
        now = self.clock.now()
        if now >= self.give_up_at:
            self.stop.set()
            return []
        pos = positions.get(0, self.pos)
        n = self._arrived()
        if pos >= n or now < self.stall_until:  # nothing to fetch: wait for the next arrival, or the timeout
            nxt = self.records[n][0] if n < len(self.records) else math.inf
            self.clock.set(max(now, min(now + timeout_s, max(nxt, self.stall_until))))
            if self.clock.now() < self.stall_until or self._arrived() <= pos:
                return []
            n = self._arrived()
        end = min(n, pos + max_records)
        self.pos = end
        return [(0, [FakeRecord(o, self.records[o][2], None, int(round(self.records[o][1] * 1000)))
                     for o in range(pos, end)])]

    def seek(self, positions: Mapping[int, int]) -> None:
        self.pos = positions.get(0, 0)

    def observe(self, partition: int, max_event_time: float) -> None:
        pass

    def position(self, partition: int) -> int:
        return self.pos

    def caught_up(self, positions: Mapping[int, int]) -> bool:
        return not self.behind and self.clock.now() >= self.stall_until and positions.get(0, 0) >= self._arrived()

    def record_frontier(self, positions: Mapping[int, int], record_times: Mapping[int, float], now: float,
                        skew: float) -> float:
        seen = record_times.get(0, -math.inf)  # the production rule: read to its end → now − skew
        return max(seen, now - skew) if self.caught_up(positions) else seen

    def committed(self) -> dict[int, int | None]:
        return {0: None}

    def end_offsets(self) -> dict[int, int]:
        return {0: self._arrived()}

    def close(self) -> None:
        pass


class _Writer:
    """Commits: each release record with the wall time of its commit and its Kafka timestamp (the
    record's own, else the producer's clock, as kafka-python stamps a record without one)."""

    def __init__(self, kafka: FakeKafka, clock: ManualClock) -> None:
        self.kafka, self.clock = kafka, clock
        self.producer: Any = None
        self.in_transaction = False
        self.releases: list[tuple[float, int, bytes]] = []

    def warm_up(self, seq: int) -> None:
        pass

    def commit(self, records: Sequence[Any], offsets: Mapping[Any, int], seq: int) -> None:
        now = self.clock.now()
        for r in records:
            if r.topic == self.kafka.output_topic and json.loads(r.value).get("message_type") == "release":
                stamp = getattr(r, "timestamp_ms", None)
                self.releases.append((now, round(now * 1000) if stamp is None else stamp, r.value))
        self.kafka.marker = seq


def _settings(tmp_path: Any, **service: Any) -> Any:
    return small_settings(
        stream={"id": "sched", "timestep": f"{int(STEP)}s", "start": T, "clock_skew": f"{int(SKEW)}s"},
        kafka={"record_time": "log-append-time", "input_topic": "in", "output_topic": "out",
               "create_topics": False},
        service={"state_dir": str(tmp_path), "poll_timeout": "200ms", **service})


def _event(user: str, t: float, age: int = 30) -> bytes:
    return json.dumps({"user_id": user, "event_time": t, "attributes": {"age": age, "sex": "F"}}).encode()


def _timestep0() -> list[tuple[float, float, bytes]]:
    """20 people in timestep 0, each record arriving (and stamped) 2 s after its event."""
    return [(T + 2 + 2 * i, T + 2 + 2 * i, _event(f"u{i}", T + 2 * i, age=5 * i)) for i in range(20)]


def _run(monkeypatch: Any, settings: Any, records: Sequence[tuple[float, float, bytes]], *, start: float = T,
         timesteps: int = 1, output_type: str = "CreateTime",
         **partition: Any) -> tuple[list[tuple[float, int, bytes]], Metrics]:
    clock = ManualClock(start)
    stop = threading.Event()
    kafka = FakeKafka(start=T, output_topic="out")
    writer = _Writer(kafka, clock)
    parts = fake_kafka_parts(kafka)
    parts["InputReader"] = lambda *a, **kw: _Partition(clock, records, stop, **partition)
    parts["TransactionalWriter"] = lambda *a, **kw: writer
    parts["topic_timestamp_type"] = lambda k, topic: "LogAppendTime" if topic == k.input_topic else output_type
    for name, value in parts.items():
        monkeypatch.setattr(loop_mod, name, value)
    metrics = Metrics()
    svc = loop_mod.Service(settings, metrics=metrics, health=Health(), stop=stop, max_timesteps=timesteps)
    svc.clock = clock  # the wall clock the service reads (main ignores it and reads time.time())
    svc.start()
    try:
        svc.run()
    finally:
        svc.close()
    return writer.releases, metrics


def _value(metrics: Metrics, name: str) -> float:
    return metrics.registry.get_sample_value(name) or 0.0


def test_a_record_just_past_the_deadline_does_not_move_the_release(tmp_path, monkeypatch):
    """Neighbours D and D′ = D + one event right after timestep 0's deadline (in timestep 1): the
    release of timestep 0 is committed at the same wall time, carries the same record timestamp
    (the schedule's) and the same bytes. On main (published as soon as complete) D′'s release
    came at T+60.5, the moment the newcomer's record was read, and D's only once the wall clock
    passed the deadline + clock_skew."""
    d = _timestep0()
    newcomer = (T + STEP + 0.5, T + STEP + 0.5, _event("newcomer", T + STEP + 0.5))
    out_d, m_d = _run(monkeypatch, _settings(tmp_path / "d"), d)
    out_d2, m_d2 = _run(monkeypatch, _settings(tmp_path / "d2"), [*d, newcomer])
    assert len(out_d) == len(out_d2) == 1, (out_d, out_d2)
    (when_d, stamp_d, value_d), (when_d2, stamp_d2, value_d2) = out_d[0], out_d2[0]
    assert when_d == when_d2 and SCHEDULED_0 <= when_d < SCHEDULED_0 + 0.01, (when_d - T, when_d2 - T)
    assert stamp_d == stamp_d2 == SCHEDULED_0 * 1000
    assert value_d == value_d2  # the newcomer is in timestep 1; same seeded noise: same release
    assert _value(m_d, "dpstream_timesteps_behind_schedule_total") == 0
    assert _value(m_d2, "dpstream_timesteps_behind_schedule_total") == 0


def test_when_complete_releases_at_the_newcomers_record(tmp_path, monkeypatch):
    """The old behaviour, kept behind ``service.publish: when-complete``: the timing channel is open."""
    d = _timestep0()
    newcomer = (T + STEP + 0.5, T + STEP + 0.5, _event("newcomer", T + STEP + 0.5))
    s = lambda p: _settings(p, publish="when-complete")  # noqa: E731
    (when_d, _, _), = _run(monkeypatch, s(tmp_path / "d"), d)[0]
    (when_d2, _, _), = _run(monkeypatch, s(tmp_path / "d2"), [*d, newcomer])[0]
    assert when_d2 == T + STEP + 0.5  # the newcomer's arrival
    assert T + STEP + SKEW < when_d < SCHEDULED_0  # the wall clock − skew passed the deadline


def test_a_busy_partition_is_released_on_schedule_not_at_the_next_commit_interval(tmp_path, monkeypatch):
    """Records arrive every half second and the consumer never reports itself at the end (a busy
    partition): timestep 0 is complete from the first record past its deadline, and its release is
    committed at S(0), not up to ``service.commit_interval`` later (whether the consumer is caught
    up is input volume)."""
    records = [(T + 0.5 * i, T + 0.5 * i, _event(f"b{i}", T + 0.5 * i, age=i % 100)) for i in range(1, 200)]
    out, m = _run(monkeypatch, _settings(tmp_path, commit_interval="1h"), records, behind=True)
    (when, stamp, _), = out
    assert SCHEDULED_0 <= when < SCHEDULED_0 + 0.01 and stamp == SCHEDULED_0 * 1000
    assert _value(m, "dpstream_timesteps_behind_schedule_total") == 0


def test_broker_lag_waits_for_completeness_and_is_counted(tmp_path, monkeypatch):
    """Correctness first: a timestep not complete by its scheduled time (the consumer cannot fetch
    until T+80) is released once complete, not before; operators see it behind schedule. Its
    record timestamp is still the scheduled time (within a timestep of it)."""
    late = T + 80
    out, m = _run(monkeypatch, _settings(tmp_path), _timestep0(), stall_until=late)
    (when, stamp, _), = out
    assert when >= late and stamp == SCHEDULED_0 * 1000
    assert _value(m, "dpstream_timesteps_behind_schedule_total") == 1
    assert _value(m, "dpstream_release_behind_schedule_seconds") == 0  # released: on schedule again


def test_a_backlog_is_released_as_soon_as_it_is_complete(tmp_path, monkeypatch):
    """Timesteps long past their schedule (the service starts at T+600 with everything written)
    are released at once, in order: timesteps 0..8 (deadline before T+600 − clock_skew). Records
    more than a minute behind their schedule keep the producer's clock (an old scheduled time could
    be deleted at once by the output topic's time-based retention); timestep 8 (54 s behind) keeps
    its scheduled time."""
    records = _timestep0() + [(T + STEP + 2 + i, T + STEP + 2 + i, _event(f"v{i}", T + STEP + i)) for i in range(5)]
    out, _ = _run(monkeypatch, _settings(tmp_path), records, start=T + 600, timesteps=9)
    assert [when for when, _, _ in out] == [T + 600] * 9
    assert [stamp for _, stamp, _ in out] == [(T + 600) * 1000] * 8 + [(SCHEDULED_0 + 8 * STEP) * 1000]
    assert [json.loads(v)["timestep"]["index"] for _, _, v in out] == list(range(9))


def test_the_schedule_is_exact_and_public():
    s = small_settings(stream={"timestep": "60s", "allowed_lateness": "30s", "clock_skew": "5s",
                               "start": T}, kafka={"record_time": "log-append-time"},
                       service={"publish_margin": "250ms"})
    sched = PublishSchedule.from_settings(s)
    assert sched is not None
    c = T // 60
    assert sched.release_us(c) == (T + 60 + 30 + 5) * 10**6 + 250_000
    assert sched.release_ms(c) == (T + 95) * 1000 + 250
    assert not sched.is_due(c, T + 95.249999) and sched.is_due(c, T + 95.25)
    assert sched.first_not_due(T + 95.25) == c + 1 and sched.first_not_due(T + 95.25 + 60) == c + 2
    # on time (within max(timestep, 1 min) of S): S exactly; a backlog's release: the producer's clock
    assert record_timestamp_ms(sched, c, T + 95.3, 60) == (T + 95) * 1000 + 250
    assert record_timestamp_ms(sched, c, T + 95.25 + 61, 60) is None
    assert record_timestamp_ms(sched, None, T, 60) is None and record_timestamp_ms(None, c, T, 60) is None
    off = small_settings(kafka={"record_time": "log-append-time"}, service={"publish": "when-complete"})
    assert PublishSchedule.from_settings(off) is None


def test_on_schedule_is_the_default_and_the_margin_is_validated():
    base = {"privacy": {"unit": "user-level", "epsilon": 1, "horizon": 10, "cutoff": 2, "population": 10},
            "schema": {"attributes": [{"name": "sex", "kind": "categorical", "values": ["M", "F"]}]}}
    s = load_settings(None, **base)
    assert s.service.publish == "on-schedule" and s.service.publish_margin.total_seconds() == 1
    for bad in (-1, 0):
        with pytest.raises(ConfigError, match=rf"publish_margin is {bad}s: .*set it above 0"):
            load_settings(None, **base, service={"publish_margin": bad})
    with pytest.raises(ConfigError, match=r"publish_margin is set but service.publish is when-complete.*remove"):
        load_settings(None, **base, service={"publish": "when-complete", "publish_margin": "2s"})
    with pytest.raises(ConfigError, match="publish"):
        load_settings(None, **base, service={"publish": "asap"})


def test_the_scale_out_releaser_keeps_the_same_schedule(tmp_path):
    """The releaser seals from the workers' frontiers: complete is not enough before S(c)."""
    from stream.pipeline import ReleasePipeline
    from stream.service.releaser import Releaser

    settings = _settings(tmp_path, role="releaser")
    clock = ManualClock(T + STEP + 2)  # both partitions already past D(0) = T+60
    rel = Releaser(settings, metrics=Metrics(), health=Health(), stop=threading.Event())
    rel.clock = clock
    rel.pipeline = ReleasePipeline(rel.settings)
    rel.input_partitions = [0, 1]
    rel.record_times = {0: T + STEP + 1, 1: T + STEP + 1.5}
    rel._seal()
    assert rel.pipeline.next_index == 0  # complete, but its time has not come
    clock.set(SCHEDULED_0 - 0.001)
    rel._seal()
    assert rel.pipeline.next_index == 0
    clock.set(SCHEDULED_0)
    rel._seal()
    assert rel.pipeline.next_index == 1
    # a partition behind: timestep 1 is due at S(1) but not complete; counted once, gauge grows
    clock.set(SCHEDULED_0 + STEP + 3)
    rel._seal()
    rel._seal()
    assert rel.pipeline.next_index == 1
    assert _value(rel.metrics, "dpstream_timesteps_behind_schedule_total") == 1
    assert _value(rel.metrics, "dpstream_release_behind_schedule_seconds") == pytest.approx(3)


@pytest.mark.parametrize("publish, output_type, warned", [
    ("on-schedule", "LogAppendTime", True), ("on-schedule", "CreateTime", False),
    ("on-schedule", None, False), ("when-complete", "LogAppendTime", False)])
def test_an_output_topic_that_overwrites_the_scheduled_timestamp_is_said_once_started(
        tmp_path, monkeypatch, publish, output_type, warned):
    """Under on-schedule each release is stamped S(c); an output topic with LogAppendTime replaces
    that with the append time. The service says so (one WARNING naming the fix, after the start can
    no longer fail) and still releases; it says nothing when the topic keeps CreateTime, when the
    cluster does not say (None: the embedded broker), or with when-complete."""
    sink = io.StringIO()
    setup_logging("WARNING", sink)  # the service's own JSON log lines (not caplog: the logger does not propagate)
    try:
        out, _ = _run(monkeypatch, _settings(tmp_path, publish=publish), _timestep0(), output_type=output_type)
    finally:
        logging.getLogger("dpstream").handlers.clear()
    assert len(out) == 1
    lines = [json.loads(line) for line in sink.getvalue().splitlines()]
    said = [d for d in lines if "message.timestamp.type=LogAppendTime" in d.get("event", "")]
    assert len(said) == (1 if warned else 0), lines
    if warned:
        assert "message.timestamp.type=CreateTime" in said[0]["event"] and said[0]["level"] == "WARNING"
