"""The service process: refuse early what cannot run (missing codecs, a shared population over
its cap), arm readiness, failpoints, signals and the shutdown watchdog, then run the role
``service.role`` names: ``single`` (:class:`stream.service.loop.Service`), ``releaser``
(:class:`stream.service.releaser.Releaser`) or ``worker`` (:func:`stream.service.worker.run_worker`),
with its HTTP surfaces and the broker probe. Returns the process exit code.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from controller.errors import StateError
from stream.config import Settings
from stream.service import shutdown
from stream.service.failpoints import Failpoints
from stream.service.http import Health, HttpServer, make_app
from stream.service.journal import JournalError
from stream.service.kafka_io import KafkaIOError
from stream.service.logs import get_logger, log
from stream.service.loop import EXIT_FAILED, EXIT_REFUSED, Service, ServiceError
from stream.service.metrics import Metrics
from stream.service.probe import BrokerProbe
from stream.service.public import start_public
from stream.service.releaser import Releaser
from stream.service.worker import run_worker

__all__ = ["LOOP_STALL_MIN_S", "run_service"]

#: not ready when the loop ran no iteration for max(this, 3 × kafka.request_timeout_ms): one
#: iteration may legitimately wait on a Kafka request (end offsets, a transaction) that long
LOOP_STALL_MIN_S = 120.0

_log = get_logger("service")


def run_service(
    settings: Settings,
    *,
    stop: threading.Event | None = None,
    metrics: Metrics | None = None,
    health: Health | None = None,
    install_signals: bool = True,
    http: bool = True,
    max_timesteps: int | None = None,
    on_started: Callable[[Service, HttpServer | None], None] | None = None,
) -> int:
    """Run the service until stopped; returns the process exit code.

    0: stopped (SIGTERM/SIGINT or ``max_timesteps``); 2: refused to start
    (configuration drift, lost or inconsistent journal: fail closed); 1: a
    fatal error (fenced by another instance, Kafka unusable, …).
    """
    from stream.service.codecs import (
        SLOW_CRC_WARNING,
        crc32c_accelerated,
        missing_codecs,
        missing_codecs_message,
    )

    missing = missing_codecs()
    if missing:  # a compressed upstream batch would stop the stream later: refuse now
        log(_log, logging.ERROR, "refusing to start", error=missing_codecs_message(missing),
            error_type="MissingCodec")
        return EXIT_REFUSED
    if not crc32c_accelerated():  # correct but slow: warn, with the consequence and the fix
        log(_log, logging.WARNING, SLOW_CRC_WARNING)
    shared = settings.privacy.shared_population
    if shared is not None:  # streams over the same people add up (docs/privacy.md §10)
        from stream.service.population import (
            PopulationRefused,
            entry_for,
            ledger_path,
            register_stream,
        )

        try:
            register_stream(ledger_path(settings), shared.name, shared.cap, entry_for(settings))
        except PopulationRefused as exc:
            log(_log, logging.ERROR, "refusing to start", error=str(exc), error_type="PopulationRefused")
            return EXIT_REFUSED
    stop = stop or threading.Event()
    metrics = metrics or Metrics()
    health = health or Health()
    # readiness also follows the loop (stalled: not ready) and the broker (stream/service/probe.py);
    # dpstream_ready reads /readyz's answer at every scrape
    health.stall_after = max(LOOP_STALL_MIN_S, 3 * settings.kafka.request_timeout_ms / 1000)
    metrics.track_ready(health.is_ready)
    probe: BrokerProbe | None = None
    failpoints = Failpoints(os.environ.get("DPSTREAM_FAILPOINT"))
    if install_signals and threading.current_thread() is threading.main_thread():
        shutdown.install_signals(stop)
    finished = threading.Event()
    threading.Thread(target=shutdown.watchdog, args=(stop, finished, settings.service.shutdown_timeout.total_seconds(),
                                            EXIT_FAILED),
                     name="dpstream-watchdog", daemon=True).start()
    if settings.service.role == "worker":  # scale-out: no journal, no noise (stream/service/worker.py)
        # /metrics, /healthz, /readyz as for any process (a worker publishes no domain: /domain 404s)
        worker_server = HttpServer(make_app(metrics.registry, health, lambda: None), settings.service.http_host,
                                   settings.service.http_port).start() if http else None

        def started(worker: Any, _server: Any) -> None:
            nonlocal probe  # a worker's partitions move with the group: probe the ones it owns now
            probe = BrokerProbe(settings.kafka, worker.probe_partitions, health=health, metrics=metrics).start()
            if on_started is not None:
                on_started(worker, worker_server)

        try:
            return run_worker(settings, stop=stop, metrics=metrics, health=health, on_started=started)
        finally:
            finished.set()
            if probe is not None:
                probe.stop()
            if worker_server is not None:
                worker_server.stop()
    if settings.service.role == "releaser":  # scale-out: the one process that releases
        service: Service = Releaser(settings, metrics=metrics, health=health, stop=stop, failpoint=failpoints,
                                    max_timesteps=max_timesteps)
    else:
        service = Service(settings, metrics=metrics, health=health, stop=stop, failpoint=failpoints,
                          max_timesteps=max_timesteps)
    server = None
    if http:
        server = HttpServer(make_app(metrics.registry, health, lambda: service.domain_bytes or None),
                            settings.service.http_host, settings.service.http_port).start()
    try:
        if http:
            service.public, service.public_server = start_public(settings, lambda: service.domain_bytes or None)
        try:
            service.start()
        except JournalError as exc:
            health.set(False, f"refused to start: {exc}")
            log(_log, logging.ERROR, "refusing to start", error=str(exc), error_type=type(exc).__name__)
            return EXIT_REFUSED
        reader = service.reader
        probe = BrokerProbe(settings.kafka, lambda: reader.tps if reader is not None else [],
                            health=health, metrics=metrics).start()
        if on_started is not None:
            on_started(service, server)
        return service.run()
    except (KafkaIOError, ServiceError, StateError, JournalError) as exc:
        health.set(False, f"failed: {exc}")
        log(_log, logging.ERROR, "service failed", error=str(exc), error_type=type(exc).__name__)
        return EXIT_FAILED
    finally:
        finished.set()
        if probe is not None:
            probe.stop()
        service.close()
        if server is not None:
            server.stop()
        if service.public_server is not None:
            service.public_server.stop()
