"""``dpstream demo [--timesteps K]``: the whole service on your machine in one command.

Starts the embedded broker, creates the topics, produces a live synthetic
traffic stream (objects moving on a grid, one event per object and tick,
event time = now), runs the service against it with secure noise (the OS
CSPRNG, as in production) and prints where to see the releases, metrics and
health — until Ctrl-C, or until K timesteps were released.

The traffic is public synthetic input, generated here with numpy (it is not
noise and never protects anyone). The privacy journal goes to a fresh
temporary directory unless ``--state-dir`` is given: the embedded broker
keeps nothing across runs, and a stream whose journal outlives its topics
refuses to restart (that is the fail-closed rule working).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

import numpy as np

from stream.commands import port_number, print_error
from stream.commands import positive_int as _positive_int

__all__ = ["register", "run", "demo_config", "TrafficGenerator"]




def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "demo",
        help="run broker + synthetic traffic + the service, and show where the releases are",
        description="Start the embedded broker, produce a live synthetic traffic stream (objects moving on a "
                    "grid), run the service on it with secure noise, and print where to see releases, "
                    "metrics and health. Stops on Ctrl-C or after --timesteps releases.",
    )
    p.add_argument("--timesteps", type=_positive_int, default=None,
                   help="stop after this many timesteps were released (default: run until Ctrl-C)")
    p.add_argument("--timestep", default="2s", help="timestep length (default 2s)")
    p.add_argument("--objects", type=_positive_int, default=1000, help="moving objects (default 1000)")
    p.add_argument("--grid", type=_positive_int, default=16, help="grid cells per side (default 16: 256 bins)")
    p.add_argument("--port", type=port_number, default=0, help="broker port (default: a free one)")
    p.add_argument("--http-port", type=port_number, default=0, help="metrics/health port (default: a free one)")
    p.add_argument("--public-port", type=port_number, default=0,
                   help="the live page and release API port (default: a free one)")
    p.add_argument("--state-dir", default=None, help="privacy journal directory (default: a temporary one)")
    p.add_argument("--quiet", action="store_true", help="do not print one line per release")
    p.set_defaults(func=run, handler=run)
    return p


def demo_config(bootstrap: str, state_dir: str, *, grid: int, objects: int, timestep: str,
                http_port: int, public_port: int = 0) -> dict[str, Any]:
    """The demo's configuration: w-event privacy (the budget renews: fine for an endless stream), DSAT."""
    from stream.config import parse_duration

    step = parse_duration(timestep).total_seconds()
    # the demo's generator is the operator's own producer stamping the wall clock: its CreateTime is
    # trusted (the embedded broker cannot stamp LogAppendTime); the first timestep is public: now's
    return {
        "stream": {"id": f"demo-{uuid.uuid4().hex[:8]}", "timestep": timestep,
                   "start": math.floor(time.time() / step) * step, "clock_skew": "1s"},
        "schema": {"attributes": [
            {"name": "x", "kind": "numeric", "min": 0, "max": grid, "bins": grid, "out_of_range": "clip"},
            {"name": "y", "kind": "numeric", "min": 0, "max": grid, "bins": grid, "out_of_range": "clip"},
        ]},
        "privacy": {"unit": "w-event", "epsilon": 1, "w": 10, "cutoff": 3, "population": objects},
        "release": {"decision": "dsat", "mechanism": "lpa"},
        "kafka": {"bootstrap_servers": bootstrap, "record_time": "trusted-create-time",
                  "max_poll_interval_ms": 3000, "session_timeout_ms": 6000,
                  "heartbeat_interval_ms": 1000},
        "service": {"state_dir": state_dir, "http_port": http_port, "public_port": public_port,
                    "log_level": "WARNING"},
    }


class TrafficGenerator:
    """Objects doing a biased random walk on a grid, with a rush that comes and goes.

    Every tick each object emits ``{"user_id", "event_time": now, "attributes": {"x", "y"}}``;
    events go out as JSON arrays of up to 200.
    """

    def __init__(self, bootstrap: str, topic: str, *, objects: int, grid: int, tick: float) -> None:
        self.bootstrap, self.topic, self.grid, self.tick = bootstrap, topic, grid, tick
        self.rng = np.random.default_rng()  # public synthetic workload, not noise
        self.pos = self.rng.uniform(0, grid, size=(objects, 2))
        self.ids = [f"obj-{i}" for i in range(objects)]
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, name="demo-traffic", daemon=True)

    def _step(self, t: float) -> None:
        centre = self.grid / 2 + self.grid / 3 * np.array([np.cos(t / 20), np.sin(t / 20)])
        drift = (centre - self.pos) * 0.05
        self.pos = np.clip(self.pos + drift + self.rng.normal(0, 0.6, size=self.pos.shape), 0, self.grid - 1e-9)

    def _run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=10, acks="all")
        try:
            t0 = time.time()
            while not self.stop.is_set():
                now = time.time()
                self._step(now - t0)
                events = [{"user_id": uid, "event_time": now, "attributes": {"x": float(x), "y": float(y)}}
                          for uid, (x, y) in zip(self.ids, self.pos.tolist(), strict=True)]
                for i in range(0, len(events), 200):
                    producer.send(self.topic, json.dumps(events[i:i + 200]).encode())
                self.sent += len(events)
                producer.flush()
                self.stop.wait(self.tick)
        finally:
            producer.close(timeout=2)


def _watch(bootstrap: str, topic: str, stop: threading.Event, quiet: bool) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False, group_id=None)
    seen: set[str] = set()
    try:
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=300).values():
                for r in records:
                    doc = json.loads(r.value)
                    if doc.get("message_type") != "release" or doc["release_id"] in seen or quiet:
                        continue
                    seen.add(doc["release_id"])  # consumers drop duplicates by release_id
                    counts = doc["counts"]
                    busiest = max(range(len(counts)), key=counts.__getitem__)
                    print(f"  release t={doc['timestep']['index']:<4} {doc['kind']:<11} "
                          f"window ε spent {doc['window_epsilon_spent']:.3f} / {doc['epsilon_budget_exact']}  "
                          f"busiest cell {busiest} (±{doc['accuracy']['half_width']})", flush=True)
    finally:
        consumer.close()


def run(args: argparse.Namespace) -> int:
    from stream.config import ConfigError, load_settings, parse_duration
    from stream.service.broker import BrokerError, EmbeddedBroker, EmbeddedBrokerMissing
    from stream.service.launcher import run_service
    from stream.service.logs import setup_logging

    try:
        step_s = parse_duration(args.timestep).total_seconds()
    except ValueError as exc:
        print(f"dpstream demo: error: --timestep: {exc}", file=sys.stderr)
        return 2
    if step_s <= 0:
        print(f"dpstream demo: error: --timestep {args.timestep}: must be > 0; e.g. --timestep 2s",
              file=sys.stderr)
        return 2
    try:
        broker = EmbeddedBroker.start(args.port or None)
    except BrokerError as exc:
        print(f"dpstream demo: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, EmbeddedBrokerMissing) else 1  # a missing extra: the person installs it
    temp_state = args.state_dir is None
    state_dir = args.state_dir or tempfile.mkdtemp(prefix="dpstream-demo-")
    stop_watch = threading.Event()
    traffic: TrafficGenerator | None = None
    try:
        cfg = demo_config(broker.bootstrap, state_dir, grid=args.grid, objects=args.objects,
                          timestep=args.timestep, http_port=args.http_port, public_port=args.public_port)
        try:
            settings = load_settings(None, **cfg)
        except ConfigError as exc:
            print_error("demo", exc)
            return 2
        setup_logging(settings.service.log_level)
        k = settings.kafka
        traffic = TrafficGenerator(broker.bootstrap, k.input_topic, objects=args.objects, grid=args.grid,
                                   tick=max(0.05, step_s / 4))

        def started(service: Any, server: Any) -> None:
            url = server.url if server is not None else "(no HTTP server)"
            page = service.public_server.url + "/" if service.public_server is not None else "(no public port)"
            print(f"""
dpstream demo is running (stop with Ctrl-C)
  broker     {broker.bootstrap}  (embedded, memory only)
  input      {k.input_topic}: {args.objects} objects on a {args.grid}x{args.grid} grid, an event per object \
every {max(0.05, step_s / 4):g}s
  privacy    w-event, ε = 1 per {settings.privacy.w} timesteps of {args.timestep}; DSAT + Laplace; secure noise
  releases   topic {k.output_topic} (key {settings.stream.id}); dead letters {k.dead_letter_topic}, late \
{k.late_topic}
  live page  {page}  (release API: {page}api)
  metrics    {url}/metrics
  health     {url}/healthz  {url}/readyz
  domain     {url}/domain
  journal    {state_dir}
""", flush=True)
            traffic.thread.start()  # type: ignore[union-attr]
            threading.Thread(target=_watch, args=(broker.bootstrap, k.output_topic, stop_watch, args.quiet),
                             name="demo-watch", daemon=True).start()

        code = run_service(settings, max_timesteps=args.timesteps, on_started=started)
        time.sleep(0.5)  # let the watcher print the last release
        return code
    finally:
        stop_watch.set()
        if traffic is not None:
            traffic.stop.set()
            if traffic.thread.is_alive():
                traffic.thread.join(5)
        broker.stop()
        if temp_state:
            shutil.rmtree(state_dir, ignore_errors=True)
