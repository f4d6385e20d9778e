"""``release.delay: k`` through the Kafka service (``Service.start()``/``run()``, the real journal,
Kafka faked in process, seeded noise).

The step that seals timestep ``t`` publishes timestep ``t − k``'s message; the last ``k`` go out in
the final checkpoint's transaction at a clean end (``--max-timesteps``). A stop (the stop flag,
as SIGTERM sets it) keeps them queued in the journaled engine snapshot, and a crash between
journal and commit re-sends the journaled checkpoint byte for byte: either way the output topic
ends up with every timestep exactly once, in order, with the bytes of an uninterrupted run. The
same through the embedded broker with kill -9s is ``test_delay_kafka.py``.
"""

from __future__ import annotations

import json
import threading

import pytest

import stream.service.loop as loop_mod
from stream.config import load_settings
from stream.service.http import Health
from stream.service.journal import Journal
from stream.service.metrics import Metrics
from stream.service.testing import FakeKafka, fake_kafka_parts

START = 1_700_000_000.0
TIMESTEPS = 14
K = 2


class _Crash(BaseException):
    """Stands in for kill -9 at a failpoint."""


def _settings(state_dir, delay: int = K, chain: str = "model+nonnegative", service=None, **extra):
    return load_settings(None, **extra, **{
        "stream": {"id": "lagged", "timestep": "1s", "start": "2023-11-14T22:13:20Z"},
        "schema": {"attributes": [{"name": "x", "kind": "numeric", "min": 0, "max": 100, "bins": 5,
                                   "out_of_range": "reject"}]},
        "privacy": {"unit": "w-event", "epsilon": 1, "w": 4, "cutoff": 2, "population": 100},
        "release": {"decision": "uniform", "mechanism": "lpa", "postprocess": chain, "delay": delay},
        "randomness": {"seed": 7, "allow_seeded_noise": True},
        "kafka": {"input_topic": "in", "output_topic": "out", "record_time": "log-append-time",
                  "create_topics": False},
        "service": {"state_dir": str(state_dir), "poll_timeout": "10ms", **(service or {})},
    })


def _run(monkeypatch, state_dir, *, stops=(), crash=None, delay: int = K,
         runs_to: int = TIMESTEPS, service=None) -> tuple[FakeKafka, list[Metrics]]:
    """Run to ``runs_to`` timesteps (a clean end). ``stops``: set the stop flag at these
    ``after_noise`` hits (counted over all runs; a stop, not an end: nothing is flushed), then
    restart; ``crash``: (failpoint, n): die there at the n-th hit, then restart."""
    kafka = FakeKafka(start=START, events_per_step=20, output_topic="out")
    for name, value in fake_kafka_parts(kafka).items():
        monkeypatch.setattr(loop_mod, name, value)
    hits: dict[str, int] = {}
    pending_stops = sorted(stops)
    metrics: list[Metrics] = []
    svc: loop_mod.Service | None = None

    def failpoint(name: str) -> None:
        hits[name] = hits.get(name, 0) + 1
        if crash is not None and name == crash[0] and hits[name] == crash[1]:
            raise _Crash(name)
        if name == "after_noise" and pending_stops and hits[name] >= pending_stops[0]:
            pending_stops.pop(0)
            assert svc is not None
            svc.stop.set()

    for _ in range(len(stops) + 2 + (crash is not None)):
        metrics.append(Metrics())
        svc = loop_mod.Service(_settings(state_dir, delay, service=service), metrics=metrics[-1], health=Health(),
                               stop=threading.Event(), max_timesteps=runs_to, failpoint=failpoint)
        svc.start()
        try:
            assert svc.run() == 0
        except _Crash:
            pass
        svc.close()
    return kafka, metrics


def _records(kafka: FakeKafka) -> list[bytes]:
    """Every release record on the output topic, in order (re-sent copies included)."""
    return [v for _, _, v in kafka.tail if json.loads(v).get("message_type") == "release"]


def test_the_service_publishes_each_timestep_once_k_late_and_flushes_the_last_k_at_the_end(tmp_path, monkeypatch):
    kafka, metrics = _run(monkeypatch, tmp_path / "a")
    records = _records(kafka)
    docs = [json.loads(v) for v in records]
    assert [d["timestep"]["index"] for d in docs] == list(range(TIMESTEPS))  # once each, in order
    assert all(d["lag"]["delay"] == K for d in docs)
    assert [d["lag"]["smoothed_through"] for d in docs] == [min(t + K, TIMESTEPS - 1) for t in range(TIMESTEPS)]
    # the bytes are the release path's: ReleasePipeline over the same counts publishes them (dpstream
    # replay writes that stream; tests/stream/test_delay_pipeline.py)
    assert metrics[0].registry.get_sample_value("dpstream_last_published_timestep") == TIMESTEPS - 1
    assert metrics[0].registry.get_sample_value("dpstream_last_released_timestep") == TIMESTEPS - 1
    with Journal.open(tmp_path / "a", "lagged") as j:
        cps = list(j.checkpoints_on_disk())
        assert sorted(j.index) == list(range(TIMESTEPS))  # digests of what was published, by its timestep
        assert j.last_timestep == TIMESTEPS - 1
    flushes = [cp for cp in cps if cp.flush is not None]
    assert len(flushes) == 1  # once; the last timestep's checkpoint carries it, in the same transaction
    last = flushes[0]
    assert last.releases and last.releases[-1].timestep == TIMESTEPS - 1
    assert last.flush is not None and [p.timestep for p in last.flush.published] == [TIMESTEPS - 2, TIMESTEPS - 1]
    assert last.engine["delayed"] == [] and last.engine["delay_flushed_through"] == TIMESTEPS
    first = next(cp for cp in cps if cp.releases)
    assert first.releases[0].timestep == 0 and first.releases[0].published == ()  # nothing before t >= k
    # the later runs find the stream ended: nothing sealed, nothing published again
    assert len(records) == TIMESTEPS


@pytest.mark.parametrize("stops", [(1,), (2,), (3, 7), (5, 9, 13)])
def test_a_stop_keeps_the_queue_and_the_restart_publishes_the_bytes_of_an_uninterrupted_run(
        tmp_path, monkeypatch, stops):
    whole, _ = _run(monkeypatch, tmp_path / "a")
    stopped, _ = _run(monkeypatch, tmp_path / "b", stops=stops)
    assert _records(stopped) == _records(whole)  # no copy, no gap, no flush at a stop


@pytest.mark.parametrize(("failpoint", "nth"), [("after_journal", 1), ("after_journal", 3), ("after_journal", 6),
                                                ("after_noise", 4), ("after_journal", TIMESTEPS),
                                                ("after_journal", TIMESTEPS + 1)])
def test_a_crash_resends_the_journaled_checkpoint_and_the_topic_equals_an_uninterrupted_run(
        tmp_path, monkeypatch, failpoint, nth):
    """``after_journal`` at the n-th checkpoint (one per timestep here: the first carries the domain
    message and timestep 0, which publishes nothing; the third publishes timestep 0; the
    TIMESTEPS-th seals the last timestep and carries the flush; the one after it only offsets):
    journaled, not committed, re-sent at the restart byte for byte. The fake broker shows only
    committed records, so the topic must equal the uninterrupted run's record for record."""
    whole, _ = _run(monkeypatch, tmp_path / "a")
    crashed, metrics = _run(monkeypatch, tmp_path / "b", crash=(failpoint, nth))
    assert _records(crashed) == _records(whole)
    resent = sum(m.registry.get_sample_value("dpstream_recoveries_total") for m in metrics)
    assert resent == (0 if failpoint == "after_noise" else 1)  # the restart re-sent the journaled checkpoint


def test_on_schedule_timestep_t_minus_k_is_published_at_the_scheduled_time_of_t(tmp_path, monkeypatch):
    """``service.publish: on-schedule``: the step of timestep ``t`` runs at ``S(c_t)`` and publishes
    timestep ``t − k``, with ``S(c_t)`` as the record timestamp; the last ``k`` go out with the last
    timestep, at ``S`` of its cell. A function of the public schedule only: a neighbouring input
    (one more event, right after a deadline) gives the same publication times and timestamps."""
    from stream.ingest.windowing import Grid
    from stream.service.schedule import PublishSchedule
    from stream.service.testing import small_settings
    from tests.stream.service.test_publish_schedule import SKEW, STEP, T, _event
    from tests.stream.service.test_publish_schedule import _run as run_on_schedule

    n = 6

    def settings(path):
        return small_settings(
            stream={"id": "sched-lag", "timestep": f"{int(STEP)}s", "start": T, "clock_skew": f"{int(SKEW)}s"},
            kafka={"record_time": "log-append-time", "input_topic": "in", "output_topic": "out",
                   "create_topics": False},
            release={"postprocess": "model+nonnegative", "delay": K},
            service={"state_dir": str(path), "poll_timeout": "200ms"})

    records = [(T + STEP * t + 2 + i, T + STEP * t + 2 + i, _event(f"u{t}-{i}", T + STEP * t + 1 + i, age=7 * i))
               for t in range(n) for i in range(10)]
    newcomer = (T + STEP + 0.5, T + STEP + 0.5, _event("newcomer", T + STEP + 0.5))
    out, _ = run_on_schedule(monkeypatch, settings(tmp_path / "d"), records, timesteps=n)
    out2, _ = run_on_schedule(monkeypatch, settings(tmp_path / "d2"), sorted([*records, newcomer]), timesteps=n)
    s = settings(tmp_path / "d")
    sched, first = PublishSchedule.from_settings(s), Grid.from_settings(s).start_cell
    assert sched is not None and first is not None
    indexes = [json.loads(v)["timestep"]["index"] for _, _, v in out]
    assert indexes == list(range(n))
    for t, (when, stamp, _) in enumerate(out):
        step = min(t + K, n - 1)  # the step that publishes t (the last one flushes the final k)
        assert sched.release_time(first + step) <= when < sched.release_time(first + step) + 0.01, (t, when - T)
        assert stamp == sched.release_ms(first + step), t
    assert [(w, st) for w, st, _ in out2] == [(w, st) for w, st, _ in out]  # the data moves no time
    assert [v for _, _, v in out2] != [v for _, _, v in out]  # though the newcomer was counted


def test_checkpoint_records_send_what_each_step_publishes_with_the_steps_scheduled_time(tmp_path):
    """The records of a checkpoint under ``release.delay``: each journaled step's published messages
    (not its own release), then the flush's, each stamped ``S`` of the cell of the step that sends
    it (the flush: the last timestep's cell); the same bytes for a first send and a re-send."""
    from stream.service.journal import Checkpoint, JournaledFlush, JournaledRelease, Published
    from stream.service.schedule import PublishSchedule
    from stream.service.testing import small_settings

    s = small_settings(stream={"id": "recs", "timestep": "60s", "start": 4_000_000_020, "clock_skew": "5s"},
                       kafka={"record_time": "log-append-time", "output_topic": "out"},
                       release={"postprocess": "model+nonnegative", "delay": K})
    sched = PublishSchedule.from_settings(s)
    assert sched is not None
    c5 = 4_000_000_020 // 60 + 5
    pub = lambda t: Published(t, f"id{t}", f'{{"message_type":"release","t":{t}}}'.encode())  # noqa: E731
    own = JournaledRelease(5, "id5", "fresh", b'{"own":5}', (), {}, {}, c5, (pub(3),))
    quiet = JournaledRelease(1, "id1", "fresh", b'{"own":1}', (), {}, {}, c5 - 4, ())  # t < k: nothing
    cp = Checkpoint(7, {0: 0}, {0: 1}, (quiet, own), (), None, 0.0, JournaledFlush((pub(4), pub(5)), {}, c5))
    assert [p.timestep for p in cp.published] == [3, 4, 5]
    records = loop_mod.checkpoint_records(cp, s, now=sched.release_time(c5) + 1)
    assert [r.value for r in records] == [pub(3).message, pub(4).message, pub(5).message]
    assert [r.timestamp_ms for r in records] == [sched.release_ms(c5)] * 3
    assert loop_mod.checkpoint_records(Checkpoint.from_json(json.loads(json.dumps(cp.to_json()))), s,
                                       now=sched.release_time(c5) + 1) == records  # journaled, re-sent: same


def test_stops_and_a_crash_with_the_journal_compacted_after_every_checkpoint(tmp_path, monkeypatch):
    """Compaction keeps the digests of what was published (by the timestep each message carries)
    and the last sealed timestep: the start-up check against the output topic still passes, and
    the topic is the uninterrupted run's."""
    whole, _ = _run(monkeypatch, tmp_path / "a")
    compact = {"journal_compact_bytes": 0}
    crashed, _ = _run(monkeypatch, tmp_path / "b", stops=(4, 9), crash=("after_journal", 7), service=compact)
    assert _records(crashed) == _records(whole)
    with Journal.open(tmp_path / "b", "lagged") as j:
        assert j.index_floor is not None and max(j.index) == TIMESTEPS - 1 and j.last_timestep == TIMESTEPS - 1
        assert len(list(j.checkpoints_on_disk())) == 1  # compacted: header, summary, the last checkpoint


def test_the_detectors_read_the_published_messages_and_their_alerts_go_out_with_them(tmp_path, monkeypatch):
    """Declared queries on a delayed stream: the alert events of a checkpoint are about the timesteps
    its transaction publishes (``t − k``, and the flushed ones), each timestep's once — never about
    a timestep whose message is not out yet."""
    kafka = FakeKafka(start=START, events_per_step=20, output_topic="out")
    for name, value in fake_kafka_parts(kafka).items():
        monkeypatch.setattr(loop_mod, name, value)
    s = _settings(tmp_path, queries=[{"name": "low", "where": {"x": "0-1"},
                                      "detectors": [{"kind": "threshold", "above": -1.0e9}]}],
                  alerts={"topic": "out.alerts"})
    svc = loop_mod.Service(s, metrics=Metrics(), health=Health(), stop=threading.Event(), max_timesteps=TIMESTEPS)
    svc.start()
    assert svc.run() == 0
    svc.close()
    seen = []
    with Journal.open(tmp_path, "lagged") as j:
        for cp in j.checkpoints_on_disk():
            alerts = [json.loads(o.value)["timestep"] for o in cp.outputs if o.role == "alert"]
            assert alerts == [p.timestep for p in cp.published], cp.seq
            seen += alerts
    assert seen == list(range(TIMESTEPS))


def test_a_stream_continued_after_its_end_publishes_each_timestep_once(tmp_path, monkeypatch):
    """``--max-timesteps 8`` ends the stream (8 − k..7 flushed with it); a later run to 14 continues
    it: timestep 8 is published k late again (at 10), 12 and 13 at the new end. And a run whose
    bound is already behind what was released (a lowered ``--max-timesteps``) flushes at once."""
    kafka = FakeKafka(start=START, events_per_step=20, output_topic="out")
    for name, value in fake_kafka_parts(kafka).items():
        monkeypatch.setattr(loop_mod, name, value)

    def run(limit: int | None, stop_after: int | None = None) -> None:
        stop = threading.Event()
        hits = {"n": 0}

        def failpoint(name: str) -> None:
            if name == "after_noise" and stop_after is not None:
                hits["n"] += 1
                if hits["n"] == stop_after:
                    stop.set()

        svc = loop_mod.Service(_settings(tmp_path), metrics=Metrics(), health=Health(), stop=stop,
                               max_timesteps=limit, failpoint=failpoint)
        svc.start()
        assert svc.run() == 0
        svc.close()

    run(8)
    assert [json.loads(v)["timestep"]["index"] for v in _records(kafka)] == list(range(8))
    run(14)
    docs = [json.loads(v) for v in _records(kafka)]
    assert [d["timestep"]["index"] for d in docs] == list(range(14))
    assert [d["lag"]["smoothed_through"] for d in docs] == [*(min(t + K, 7) for t in range(8)),
                                                          *(min(t + K, 13) for t in range(8, 14))]
    run(None, stop_after=4)  # no bound: 14..17 sealed, 14 and 15 published, then a stop (no flush)
    assert [json.loads(v)["timestep"]["index"] for v in _records(kafka)] == list(range(16))
    run(10)  # the bound is behind what was released: the end, at once
    assert [json.loads(v)["timestep"]["index"] for v in _records(kafka)] == list(range(18))
    run(10)
    assert len(_records(kafka)) == 18
