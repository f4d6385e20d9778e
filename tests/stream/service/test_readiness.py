"""Readiness tells the truth: it follows the broker, the journal and the release loop.

* against the real embedded broker: the broker stops answering (frozen with SIGSTOP: a hung
  host or a network partition, its data intact) → ``/readyz`` 503 within 30 s, one ERROR log
  line, ``dpstream_broker_connected`` 0 and ``dpstream_ready`` 0 on ``/metrics``, and the
  service keeps running (a timed-out transaction is retried, not fatal); the broker answers
  again → ready again (``test_broker_loss_and_return``). A broker that comes back *without* the
  stream's data stops the service instead (``test_cluster_loss.py``);
* ``dpstream_ready`` is set (it agrees with ``/readyz`` at every scrape);
* the probe's state machine and the loop-stall rule, without Kafka.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from stream.service.http import Health, HttpServer, make_app
from stream.service.metrics import Metrics
from stream.service.probe import BrokerProbe
from tests.kafka_harness import InProcessService, service_config, settings_from, wait_for


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - loopback test
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _sample(metrics_text: bytes, name: str) -> float | None:
    for line in metrics_text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.kafka
@pytest.mark.slow
def test_broker_loss_and_return(tmp_path):
    from stream.service.broker import EmbeddedBroker

    broker = EmbeddedBroker.start()
    lines = _Lines()
    probe_log = logging.getLogger("dpstream.probe")
    probe_log.addHandler(lines)
    cfg = service_config(broker.bootstrap, tmp_path / "state")
    settings = settings_from(cfg)
    try:
        with InProcessService(settings) as svc:
            base = svc.server.url
            wait_for(lambda: _get(base + "/readyz")[0] == 200, what="ready")
            m = _get(base + "/metrics")[1]
            assert _sample(m, "dpstream_ready") == 1.0 and _sample(m, "dpstream_broker_connected") == 1.0

            # the broker stops answering (frozen: a network partition, a hung host) but keeps its data;
            # a broker that comes back *without* the stream's data is another matter (the service
            # stops: tests/stream/service/test_cluster_loss.py)
            os.kill(broker.process.pid, signal.SIGSTOP)
            lost = time.monotonic()
            wait_for(lambda: _get(base + "/readyz")[0] == 503, timeout=30, interval=0.25,
                     what="/readyz 503 after the broker stopped")
            took = time.monotonic() - lost
            status, body = _get(base + "/readyz")
            doc = json.loads(body)
            assert status == 503 and "Kafka broker unreachable" in doc["state"], doc
            assert doc["checks"]["broker"].startswith("Kafka broker unreachable"), doc
            m = _get(base + "/metrics")[1]
            assert _sample(m, "dpstream_broker_connected") == 0.0
            assert _sample(m, "dpstream_ready") == 0.0
            assert (_sample(m, "dpstream_broker_probe_failures_total") or 0) >= 2
            assert _get(base + "/healthz")[0] == 200  # liveness never depends on the broker
            errors = [r for r in lines.records if r.levelno >= logging.ERROR]
            assert len(errors) == 1 and "lost the Kafka broker" in errors[0].getMessage()
            print(f"broker lost -> /readyz 503 after {took:.1f} s")

            os.kill(broker.process.pid, signal.SIGCONT)  # the same broker answers again, data intact
            back = time.monotonic()
            wait_for(lambda: _get(base + "/readyz")[0] == 200, timeout=30, interval=0.25,
                     what="/readyz 200 after the broker came back")
            print(f"broker back -> /readyz 200 after {time.monotonic() - back:.1f} s")
            m = _get(base + "/metrics")[1]
            assert _sample(m, "dpstream_broker_connected") == 1.0 and _sample(m, "dpstream_ready") == 1.0
            assert any("reachable again" in r.getMessage() for r in lines.records)
            assert len([r for r in lines.records if r.levelno >= logging.ERROR]) == 1  # logged once, not per probe
        assert took < 30
    finally:
        probe_log.removeHandler(lines)
        os.kill(broker.process.pid, signal.SIGCONT)
        broker.stop()


# -- without Kafka --------------------------------------------------------------------------


class _FlakyConsumer:
    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers

    def end_offsets(self, tps: Any, timeout_ms: int) -> dict[Any, int]:
        if not self.answers.pop(0):
            raise TimeoutError(f"no answer in {timeout_ms} ms")
        return dict.fromkeys(tps, 0)

    def close(self, autocommit: bool = False) -> None:
        pass


def _probe(answers: list[bool], health: Health, metrics: Metrics) -> BrokerProbe:
    from stream.config import KafkaSection

    k = KafkaSection(bootstrap_servers="127.0.0.1:1", input_topic="in", output_topic="out",
                     dead_letter_topic="dead", late_topic="late", state_topic="state", group_id="g")
    consumer = _FlakyConsumer(answers)
    return BrokerProbe(k, lambda: ["tp"], health=health, metrics=metrics, consumer_factory=lambda: consumer)


def test_probe_marks_down_after_consecutive_failures_and_up_on_success():
    health, metrics = Health(), Metrics()
    metrics.track_ready(health.is_ready)
    health.set(True, "running")
    probe = _probe([True, False, True, False, False, False, True], health, metrics)

    def step() -> tuple[bool, float, float]:
        probe.observe(probe.probe_once())
        r = metrics.registry
        return health.is_ready(), r.get_sample_value("dpstream_broker_connected"), r.get_sample_value("dpstream_ready")

    assert step() == (True, 1.0, 1.0)
    assert step() == (True, 1.0, 1.0)  # one failure is not an outage
    assert step() == (True, 1.0, 1.0)  # and a success resets the count
    assert step() == (True, 1.0, 1.0)
    assert step() == (False, 0.0, 0.0)  # two in a row: down
    ready, reason, _ = health.view()
    assert "Kafka broker unreachable" in reason and "TimeoutError" in reason
    assert step() == (False, 0.0, 0.0)
    assert step() == (True, 1.0, 1.0)
    assert metrics.registry.get_sample_value("dpstream_broker_probe_failures_total") == 4


def test_ready_gauge_follows_readyz_and_every_check():
    health, metrics = Health(), Metrics()
    metrics.track_ready(health.is_ready)
    server = HttpServer(make_app(metrics.registry, health), "127.0.0.1", 0).start()
    try:
        def state() -> tuple[int, float | None]:
            return _get(server.url + "/readyz")[0], _sample(_get(server.url + "/metrics")[1], "dpstream_ready")

        assert state() == (503, 0.0)  # starting
        health.set(True, "running")
        assert state() == (200, 1.0)
        health.check("broker", False, "Kafka broker unreachable: test")
        assert state() == (503, 0.0)
        body = json.loads(_get(server.url + "/readyz")[1])
        assert body["checks"] == {"loop": "ok", "broker": "Kafka broker unreachable: test"}
        health.check("broker", True)
        assert state() == (200, 1.0)
        health.set(False, "journal write failed (ENOSPC): releases stopped")  # the journal, via the loop
        assert state() == (503, 0.0)
        assert "journal write failed" in json.loads(_get(server.url + "/readyz")[1])["checks"]["loop"]
    finally:
        server.stop()


def test_a_stalled_loop_is_not_ready():
    health = Health(stall_after=0.2)
    health.set(True, "running")
    health.tick()
    assert health.is_ready()
    time.sleep(0.3)
    ready, reason, idle = health.view()
    assert not ready and "release loop stalled" in reason and idle >= 0.2
    health.tick()
    assert health.is_ready()
    # without stall_after (the default) an idle loop stays ready: the rule is opt-in and the service sets it
    lazy = Health()
    lazy.set(True, "running")
    lazy.last_loop -= 3600
    assert lazy.is_ready()


def test_run_service_arms_the_stall_rule_and_the_ready_gauge(tmp_path, monkeypatch):
    """run_service wires the stall rule and dpstream_ready before anything can fail."""
    from stream.service import launcher, loop

    captured: dict[str, Any] = {}

    def fake_start(self: Any) -> None:
        captured["stall"] = self.health.stall_after
        raise loop.JournalError("stop here")

    monkeypatch.setattr(loop.Service, "start", fake_start)
    settings = settings_from(service_config("127.0.0.1:1", tmp_path / "state"))
    metrics, health = Metrics(), Health()
    assert launcher.run_service(settings, metrics=metrics, health=health, install_signals=False, http=False) == 2
    assert captured["stall"] == max(launcher.LOOP_STALL_MIN_S, 3 * settings.kafka.request_timeout_ms / 1000)
    health.set(True, "running")
    assert metrics.registry.get_sample_value("dpstream_ready") == 1.0
