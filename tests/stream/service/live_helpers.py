"""A real service with a public port, on Kafka faked in process and paced like a live stream.

Shared by the public-port tests (``test_public.py``) and the browser tests (``test_live_page.py``):
:func:`paced_service` runs ``run_service`` (the real ``Service``: journal, engine, noise drawn
once, the commit path that feeds the public port) with :class:`stream.service.testing.FakeKafka`
patched in, and makes one timestep of input arrive every ``pace`` seconds, so releases appear
one by one while a test (or a browser) watches.
"""

from __future__ import annotations

import time
from typing import Any

import stream.service.launcher as launcher_mod
import stream.service.loop as loop_mod
from stream.config import load_settings
from stream.service.testing import FakeKafka, fake_kafka_parts, fake_launcher_parts
from tests.kafka_harness import InProcessService

START = 1_700_000_000.0  # 2023-11-14T22:13:20Z
ONE_D = [{"name": "x", "kind": "numeric", "min": 0, "max": 100, "bins": 10, "out_of_range": "reject"}]
TWO_D = [{"name": "x", "kind": "numeric", "min": 0, "max": 100, "bins": 8, "out_of_range": "reject"},
         {"name": "y", "kind": "numeric", "min": 0, "max": 100, "bins": 5, "out_of_range": "reject"}]


class _Paced:
    """The fake reader, but a new timestep of input arrives only every ``pace`` seconds."""

    def __init__(self, inner: Any, kafka: FakeKafka, pace: float, burst: int = 0) -> None:
        self.inner, self.kafka, self.pace = inner, kafka, pace
        self.due = 0.0
        self.burst = burst  # the first timesteps arrive at once (a history before the page opens)

    def poll(self, timeout_s: float, max_records: int, positions: Any) -> list[Any]:
        now = time.monotonic()
        if positions.get(0, self.inner.pos) >= self.kafka.available:
            if self.burst > 0:
                self.burst -= 1
            elif now < self.due:
                time.sleep(min(timeout_s, self.due - now))
                return []
            self.due = now + self.pace
        return self.inner.poll(timeout_s, max_records, positions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def settings_for(state_dir: Any, *, two_d: bool = False, unit: str = "user-level", **service: Any) -> Any:
    privacy = ({"unit": "user-level", "epsilon": 1, "horizon": 200, "cutoff": 12, "population": 1000}
               if unit == "user-level" else {"unit": "w-event", "epsilon": 1, "w": 5, "population": 1000})
    return load_settings(None, **{
        "stream": {"id": "live-" + ("2d" if two_d else "1d"), "timestep": "1s", "start": "2023-11-14T22:13:20Z"},
        "schema": {"attributes": TWO_D if two_d else ONE_D},
        "privacy": privacy,
        "release": {"decision": "dsat", "mechanism": "lpa"},
        "kafka": {"input_topic": "in", "output_topic": "out", "record_time": "log-append-time",
                  "create_topics": False},
        "service": {"state_dir": str(state_dir), "poll_timeout": "20ms", "http_port": 0, "public_port": 0,
                    **service},
    })


def paced_service(monkeypatch: Any, settings: Any, *, pace: float = 0.3, two_d: bool = False,
                  events_per_step: int = 60, kafka: FakeKafka | None = None,
                  burst: int = 0) -> tuple[InProcessService, FakeKafka]:
    """Patch FakeKafka into ``stream.service.loop`` (and ``launcher``) and return the (not yet started) service and its Kafka.

    ``burst``: the first timesteps of input arrive without waiting (history for a page to load)."""
    k = kafka or FakeKafka(start=START, events_per_step=events_per_step, two_d=two_d, output_topic="out")
    parts = fake_kafka_parts(k)
    make_reader = parts["InputReader"]
    parts["InputReader"] = lambda *a, **kw: _Paced(make_reader(*a, **kw), k, pace, burst)
    for name, value in parts.items():
        monkeypatch.setattr(loop_mod, name, value)
    for name, value in fake_launcher_parts().items():
        monkeypatch.setattr(launcher_mod, name, value)
    return InProcessService(settings), k


def public_url(svc: InProcessService) -> str:
    assert svc.service.public_server is not None, "the service started no public port"
    return svc.service.public_server.url
