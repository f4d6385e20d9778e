"""The broker probe: is the Kafka cluster answering? (readiness, a log line, a metric).

kafka-python's consumer does not raise when the broker goes away: ``poll`` just
returns nothing, so a service whose broker is gone would look idle, not broken.
A daemon thread therefore asks the cluster, every ``interval_s``, for the end
offsets of the input topic (one ListOffsets request to each partition's leader,
through its own consumer without a group, bounded by ``timeout_s``) — the
question the service cannot work without an answer to.

After ``failures_to_down`` consecutive failures it marks the broker down:
``dpstream_broker_connected`` 0, the ``broker`` check of :class:`Health` failing
(so ``/readyz`` answers 503 and ``dpstream_ready`` is 0) and one ERROR log line;
the first success afterwards sets everything back and logs once. Every failure
counts in ``dpstream_broker_probe_failures_total``. With the defaults (5 s, 5 s,
2) a broker lost right after a successful probe is reported within
``interval + failures × (timeout + interval) = 25 s`` at worst (tested: under 30 s).

The probe reads offsets only, never records: it sees no data and publishes
nothing but up/down.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kafka import TopicPartition

from stream.config import KafkaSection
from stream.service.kafka_io import make_consumer
from stream.service.logs import get_logger, log
from stream.service.metrics import Metrics

__all__ = ["BrokerProbe", "PROBE_INTERVAL_S", "PROBE_TIMEOUT_S", "FAILURES_TO_DOWN"]

PROBE_INTERVAL_S = 5.0
PROBE_TIMEOUT_S = 5.0
FAILURES_TO_DOWN = 2
CHECK = "broker"

_log = get_logger("probe")


class BrokerProbe:
    """Probes the cluster from a daemon thread; ``start()`` / ``stop()``.

    Args:
        k: the Kafka section (bootstrap servers, security options).
        partitions: the partitions to ask about (the input topic's); called before each probe.
        health, metrics: where the result goes.
        interval_s: seconds between the end of one probe and the start of the next.
        timeout_s: bound of one probe (seconds).
        failures_to_down: consecutive failures before the broker counts as lost.
        consumer_factory: builds the probe's consumer (tests inject failures here).
    """

    def __init__(self, k: KafkaSection, partitions: Callable[[], Sequence[TopicPartition]], *, health: Any,
                 metrics: Metrics, interval_s: float = PROBE_INTERVAL_S, timeout_s: float = PROBE_TIMEOUT_S,
                 failures_to_down: int = FAILURES_TO_DOWN,
                 consumer_factory: Callable[[], Any] | None = None) -> None:
        if interval_s <= 0 or timeout_s <= 0 or failures_to_down < 1:
            raise ValueError(f"broker probe needs interval_s > 0, timeout_s > 0 and failures_to_down >= 1; got "
                             f"{interval_s}, {timeout_s}, {failures_to_down}")
        self.k = k
        self.partitions = partitions
        self.health = health
        self.metrics = metrics
        self.interval_s = float(interval_s)
        self.timeout_s = float(timeout_s)
        self.failures_to_down = int(failures_to_down)
        self._factory = consumer_factory or (lambda: make_consumer(k, group=False,
                                                                   reconnect_backoff_max_ms=1000))
        self._consumer: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dpstream-broker-probe", daemon=True)
        self.failures = 0
        self.last_error = ""
        self.connected = True  # the service only starts the probe after it reached the broker
        metrics.broker_connected.set(1)

    def start(self) -> BrokerProbe:
        """Start probing. The probe's consumer is built here, while the caller knows the broker answers:
        built later, after the broker is gone, its bootstrap would block far longer than one probe."""
        try:
            self._consumer = self._factory()
        except Exception as exc:  # noqa: BLE001 - retried by the first probe, which then counts as failed
            self.last_error = f"{type(exc).__name__}: {exc}"
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        self._thread.join(self.timeout_s + 2 if timeout is None else timeout)

    def probe_once(self) -> bool:
        """One probe: True when every partition's leader answered within ``timeout_s``."""
        try:
            if self._consumer is None:
                self._consumer = self._factory()
            tps = list(self.partitions())
            if not tps:
                return False
            self._consumer.end_offsets(tps, timeout_ms=int(self.timeout_s * 1000))
            return True
        except Exception as exc:  # noqa: BLE001 - any failure is "not answering"; the reason is logged
            self.last_error = f"{type(exc).__name__}: {exc}"
            return False

    def observe(self, ok: bool) -> None:
        """Account one probe result (separate from I/O so the state machine is testable alone)."""
        if ok:
            self.failures = 0
            if not self.connected:
                self.connected = True
                self.metrics.broker_connected.set(1)
                self.health.check(CHECK, True)
                log(_log, logging.WARNING, "Kafka broker reachable again; ready", bootstrap=self.k.bootstrap_servers)
            return
        self.failures += 1
        self.metrics.broker_probe_failures.inc()
        if self.connected and self.failures >= self.failures_to_down:
            self.connected = False
            self.metrics.broker_connected.set(0)
            reason = (f"Kafka broker unreachable: {self.failures} probes of {self.k.bootstrap_servers} failed "
                      f"({self.last_error or 'no answer'}); check the brokers and the network, the "
                      "service resumes by itself when they answer")
            self.health.check(CHECK, False, reason)
            log(_log, logging.ERROR, "lost the Kafka broker; not ready until it answers again",
                bootstrap=self.k.bootstrap_servers, failed_probes=self.failures,
                error=self.last_error)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                self.observe(self.probe_once())
        finally:
            if self._consumer is not None:
                try:
                    self._consumer.close(autocommit=False)
                except Exception:  # noqa: BLE001, S110 - best effort on the way out
                    pass
