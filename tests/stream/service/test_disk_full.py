"""A full disk stops releasing, says so, and resumes without a second noise draw (issue 19 item 4).

The service runs for real (``Service.start()`` / ``run()``, the real journal in ``tmp_path``) with
Kafka faked in process (:func:`stream.service.testing.fake_kafka_parts`). The journal's write is
made to fail with ENOSPC for a while — first after writing half the frame, as a disk filling up
mid-write does — and the test checks, while it fails, that nothing of the failing checkpoint was
published, that ``/readyz`` and the metric say so; and afterwards that every timestep was
published exactly once, with the bytes that are journaled, each drawn exactly once (one engine
step per timestep), and that the journal reopens intact.
"""

from __future__ import annotations

import errno
import json
import os
import threading

import pytest

import stream.service.loop as loop_mod
from stream.config import load_settings
from stream.service.http import Health
from stream.service.journal import Journal, JournalError
from stream.service.metrics import Metrics
from stream.service.testing import FakeKafka, fake_kafka_parts

START = 1_700_000_000.0


def _settings(state_dir):
    return load_settings(None, **{
        "stream": {"id": "full", "timestep": "1s", "start": "2023-11-14T22:13:20Z"},
        "schema": {"attributes": [{"name": "x", "kind": "numeric", "min": 0, "max": 100, "bins": 10,
                                   "out_of_range": "reject"}]},
        "privacy": {"unit": "w-event", "epsilon": 1, "w": 5, "population": 1000},
        "release": {"decision": "dsat", "mechanism": "lpa"},
        "kafka": {"input_topic": "in", "output_topic": "out", "record_time": "log-append-time",
                  "create_topics": False},
        "service": {"state_dir": str(state_dir), "poll_timeout": "10ms"},
    })


@pytest.fixture
def kafka(monkeypatch):
    k = FakeKafka(start=START, events_per_step=3, output_topic="out")
    for name, value in fake_kafka_parts(k).items():
        monkeypatch.setattr(loop_mod, name, value)
    return k


def _service(settings, max_timesteps=None):
    return loop_mod.Service(settings, metrics=Metrics(), health=Health(), stop=threading.Event(),
                            max_timesteps=max_timesteps)


def _count_steps(monkeypatch):
    steps: dict[int, int] = {}
    original = loop_mod.Service._on_sealed

    def counting(self, sealed):
        steps[sealed.index] = steps.get(sealed.index, 0) + 1
        return original(self, sealed)

    monkeypatch.setattr(loop_mod.Service, "_on_sealed", counting)
    return steps


def test_disk_full_stops_releasing_then_resumes_with_the_same_draws(tmp_path, kafka, monkeypatch):
    settings = _settings(tmp_path)
    steps = _count_steps(monkeypatch)
    svc = _service(settings, max_timesteps=30)
    svc.start()
    journal = svc.journal
    real_write = journal._os_write
    seen: list[dict] = []
    later: list[tuple] = []

    def disk(fd, data):
        calls = len(seen)
        if journal.last_seq == 12 and not later:  # the append after the blocked one succeeded
            later.append(svc.health.view()[:2])
        if journal.last_seq >= 10 and calls < 4:  # the 11th checkpoint meets a full disk 4 times
            released = kafka.released()
            seen.append({"ready": svc.health.view()[:2], "blocked": svc.metrics.journal_blocked._value.get(),
                         "published_up_to": max(released) if released else None,
                         "pending": [s.index for s, _ in svc.pending.releases] or None})
            if calls == 0:  # half of the frame reaches the disk, then it is full
                real_write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    journal._os_write = disk
    assert svc.run() == 0
    svc.close()

    assert len(seen) == 4
    # while blocked: not ready (and why), metric set after the first failure, nothing beyond the
    # last journaled checkpoint published
    assert all(s["ready"][0] is False and "No space left on device" in s["ready"][1] for s in seen[1:])
    assert [s["blocked"] for s in seen] == [0.0, 1.0, 1.0, 1.0]
    last_before = seen[0]["published_up_to"]
    assert all(s["published_up_to"] == last_before for s in seen)
    assert svc.metrics.journal_write_failures._value.get() == 4
    assert svc.metrics.journal_blocked._value.get() == 0.0
    assert later == [(True, "running")]  # ready again once the checkpoint committed

    released = kafka.released()
    assert sorted(released) == list(range(30)) or sorted(released)[:30] == list(range(30))
    assert all(len(copies) == 1 for copies in released.values())  # published once each
    assert all(n == 1 for n in steps.values()) and set(steps) >= set(range(30))  # one draw per timestep
    with Journal.open(tmp_path, "full") as j:  # intact: the half frame was cut away
        assert j.torn_bytes == 0 and j.last_timestep == max(released)
        journaled = {r.timestep: r.message for cp in j.checkpoints_on_disk() for r in cp.releases}
    assert all(journaled[t] == copies[0] for t, copies in released.items() if t in journaled)


def test_stopping_while_the_disk_is_full_publishes_nothing_unjournaled(tmp_path, kafka, monkeypatch):
    settings = _settings(tmp_path)
    svc = _service(settings)
    svc.start()
    journal = svc.journal
    real_write = journal._os_write

    def disk(fd, data):
        if journal.last_seq >= 5:
            svc.stop.set()  # SIGTERM arrives while the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    journal._os_write = disk
    with pytest.raises(JournalError, match="could not be journaled"):
        svc.run()
    svc.close()
    published = max(kafka.released())
    with Journal.open(tmp_path, "full") as j:
        assert j.last_seq == 5 and j.last_timestep == published  # nothing published beyond the journal
    # the next start continues from the journal (the unjournaled timesteps were never visible)
    again = _service(settings, max_timesteps=published + 5)
    again.start()
    assert again.pipeline.next_index == published + 1
    assert again.run() == 0
    again.close()
    assert all(len(c) == 1 for c in kafka.released().values())


def test_a_failed_compaction_keeps_the_journal_and_keeps_releasing(tmp_path, kafka, monkeypatch):
    settings = _settings(tmp_path).model_copy(update={"service": _settings(tmp_path).service.model_copy(
        update={"journal_compact_bytes": 0})})
    svc = _service(settings, max_timesteps=12)
    svc.start()
    journal = svc.journal
    real_write = journal._os_write
    failed = []

    def disk(fd, data):
        if data.startswith(b"DPJ1") and json.loads(data[12:12 + int.from_bytes(data[4:8], "big")]).get(
                "type") == "header" and not failed:
            failed.append(1)  # a compaction writes the header first: the disk is full for it once
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    journal._os_write = disk
    assert svc.run() == 0
    svc.close()
    assert failed and svc.metrics.journal_write_failures._value.get() == 1
    assert not (tmp_path / "full.journal.tmp").exists()
    assert sorted(kafka.released())[:12] == list(range(12))
    with Journal.open(tmp_path, "full") as j:
        assert j.last_timestep >= 11
