"""Throughput on one core, against the bare kafka-python consumer on the same topic; prints JSON.

    python benchmarks/bench_throughput.py [--events 1000000] [--people 50000] [--grid 100]
        [--timesteps 20] [--shapes batch_500,single_event,avro_single,protobuf_single] [--repeats 3] [--cpu 1]

In one run, against one embedded broker, and for each message shape (500-event JSON arrays,
one event per message), on the same input topic:

* ``bare_bytes``: a bare kafka-python consumer (same fetch settings as the service, the C
  CRC-32C active) reading every record and touching its bytes: the wire ceiling;
* ``bare_json`` and ``bare_msgspec``: the same plus decoding every value with ``json.loads``
  or with msgspec's untyped ``msgspec.json.decode`` (the fastest JSON parser for Python we
  know of): the ceiling of any Python consumer that looks at its events;
* ``service``: the service end to end, from the moment its consumer is positioned (after
  start-up and journal recovery) to the commit of the transaction that publishes the last
  timestep's release (the release is then read back from the output topic and counted).

Every measured run is a fresh subprocess pinned to one core (``--cpu``; the broker and this
driver stay off it), so a run's peak RSS (``VmHWM``) is its own. Each shape is measured
``--repeats`` times, rotating which kind runs first; medians and ratios are reported, each ratio
from runs seconds apart. The events: ``--people`` people, a ``--grid``² grid of bins (10⁴ by
default), ``--timesteps`` timesteps of 60 s; record timestamps are stamped like the broker's
LogAppendTime (``kafka.record_time: trusted-create-time``), and a last record stamped past
the final deadline completes the last timestep (as a live topic's next records do).

Shapes ``avro_single`` and ``protobuf_single`` (issue 32) write the same events one per record in
the Schema Registry wire format (schema id 1, read from a local schema file: ``input.schemas``)
and add ``bare_avro`` / ``bare_protobuf``: the bare consumer deserializing every record with the
same library the service uses (fastavro's ``schemaless_reader`` with the writer schema; protobuf's
upb ``FromString``). Goal: service ≥ 0.5 of that bare deserializing consumer.

Goals (issue 12): service ≥ 0.5 of ``bare_bytes`` and ≥ 300k events/s with batched messages;
≥ 0.5 of ``bare_bytes`` with one event per message; peak RSS bounded by open timesteps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

T0 = 1_704_067_200
STEP = 60
FETCH = {"max_poll_records": 2000}  # the service's default kafka.max_poll_records


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def settings_dict(bootstrap: str, topic: str, state: str, grid: int, timesteps: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    skew = int(time.time() - T0) + 30 * 86_400  # the wall clock never completes a 2024 timestep
    return {
        "stream": {"id": f"bench-{tag}", "timestep": f"{STEP}s", "start": T0, "clock_skew": f"{skew}s"},
        "schema": {"attributes": [
            {"name": "x", "kind": "numeric", "min": 0, "max": grid, "bins": grid},
            {"name": "y", "kind": "numeric", "min": 0, "max": grid, "bins": grid}]},
        "privacy": {"unit": "user-level", "epsilon": 1, "horizon": max(timesteps, 100), "cutoff": 100,
                    "population": 100_000},
        "release": {"decision": "dsat"},
        "kafka": {"bootstrap_servers": bootstrap, "input_topic": topic, "output_topic": f"{tag}.out",
                  "dead_letter_topic": f"{tag}.dead", "late_topic": f"{tag}.late",
                  "state_topic": f"{tag}.state", "group_id": f"{tag}.g",
                  "record_time": "trusted-create-time", **FETCH},
        # when-complete: the clock_skew above (years, so only record times complete a 2024 timestep) would
        # put the public release schedule (service.publish: on-schedule) a month ahead
        "service": {"state_dir": state, "http_port": 0, "commit_interval": "1s", "poll_timeout": "50ms",
                    "log_level": "WARNING", "max_events_per_message": 1000, "publish": "when-complete"},
    }


AVRO_SCHEMA = {"type": "record", "name": "Event", "namespace": "bench", "fields": [
    {"name": "user_id", "type": "string"}, {"name": "event_time", "type": "double"},
    {"name": "x", "type": "int"}, {"name": "y", "type": "int"}]}


def proto_file() -> Any:
    """``message Event {string user_id = 1; double event_time = 2; int32 x = 3; int32 y = 4;}``."""
    from google.protobuf import descriptor_pb2

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="bench/event.proto", package="bench", syntax="proto3")
    m = fdp.message_type.add(name="Event")
    for name, number, typ in (("user_id", 1, F.TYPE_STRING), ("event_time", 2, F.TYPE_DOUBLE),
                              ("x", 3, F.TYPE_INT32), ("y", 4, F.TYPE_INT32)):
        m.field.add(name=name, number=number, type=typ, label=F.LABEL_OPTIONAL)
    return fdp


def proto_class() -> Any:
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto_file())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Event"))


def write_schema(fmt: str, tmp: str) -> str:
    """The writer schema as the local file ``input.schemas`` points at (id 1)."""
    if fmt == "avro":
        path = Path(tmp) / "event.avsc"
        path.write_text(json.dumps(AVRO_SCHEMA))
    else:
        from google.protobuf import descriptor_pb2

        path = Path(tmp) / "event.desc"
        fds = descriptor_pb2.FileDescriptorSet()
        fds.file.append(proto_file())
        path.write_bytes(fds.SerializeToString())
    return str(path)


def encoder(fmt: str) -> Any:
    """``(user, time, x, y) -> record value`` in ``fmt`` (json: the one-event JSON object)."""
    if fmt == "avro":
        import io

        from fastavro import parse_schema, schemaless_writer

        parsed = parse_schema(AVRO_SCHEMA)

        def avro(u: str, t: float, x: int, y: int) -> bytes:
            buf = io.BytesIO()
            buf.write(b"\x00\x00\x00\x00\x01")
            schemaless_writer(buf, parsed, {"user_id": u, "event_time": t, "x": x, "y": y})
            return buf.getvalue()
        return avro
    if fmt == "protobuf":
        cls = proto_class()

        def proto(u: str, t: float, x: int, y: int) -> bytes:
            return b"\x00\x00\x00\x00\x01\x00" + cls(user_id=u, event_time=t, x=x, y=y).SerializeToString()
        return proto
    return lambda u, t, x, y: json.dumps({"user_id": u, "event_time": t, "attributes": {"x": x, "y": y}}).encode()


def produce(bootstrap: str, topic: str, *, events: int, people: int, grid: int, timesteps: int,
            per_message: int, partitions: int = 1, fmt: str = "json") -> int:
    """Write the input topic; returns the number of records. Events are in time order, each
    record stamped with its timestep's start (monotone, like LogAppendTime)."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=1 << 20, acks=1,
                      max_request_size=16 << 20)
    per_step = events // timesteps
    records = 0
    encode = encoder(fmt)
    buf: list[str] = []
    stamp = T0 * 1000
    for i in range(events):
        ts = min(i // per_step, timesteps - 1)
        u = (i * 7919) % people
        t = T0 + STEP * ts + (i % per_step) * (STEP / per_step)
        buf.append(f'{{"user_id":"u{u}","event_time":{t:.3f},"attributes":'
                   f'{{"x":{(u * 31 + ts) % grid},"y":{(u * 17 + 3 * ts) % grid}}}}}')
        stamp = (T0 + STEP * ts) * 1000
        if fmt != "json":  # one record per event, in the Schema Registry wire format
            p.send(topic, encode(f"u{u}", round(t, 3), (u * 31 + ts) % grid, (u * 17 + 3 * ts) % grid),
                   timestamp_ms=stamp, partition=records % partitions)
            records += 1
            buf = []
            continue
        if len(buf) == per_message:
            p.send(topic, (buf[0] if per_message == 1 else "[" + ",".join(buf) + "]").encode(), timestamp_ms=stamp,
                   partition=records % partitions)
            records += 1
            buf = []
    if buf:
        p.send(topic, ("[" + ",".join(buf) + "]").encode(), timestamp_ms=stamp, partition=records % partitions)
        records += 1
    # the next timestep's first record on every partition: its record time completes the last timestep
    end = T0 + STEP * timesteps
    for part in range(partitions):
        p.send(topic, encode("next", float(end + 1), 0, 0), timestamp_ms=(end + 1) * 1000, partition=part)
        records += 1
    p.flush()
    p.close()
    return records


# -- the measured runs (each in its own pinned subprocess) ------------------------------------

def run_bare(bootstrap: str, topic: str, records: int, decoder: str | None, schema: str | None = None) -> dict[str, Any]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed",
                      auto_offset_reset="earliest", **FETCH)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    c.beginning_offsets([tp])  # connected, as the service is when its clock starts
    if decoder == "msgspec":
        import msgspec

        decode = msgspec.json.Decoder().decode
    elif decoder == "avro":  # the same library and call the service uses, with the writer schema
        import io

        from fastavro import parse_schema, schemaless_reader

        parsed = parse_schema(json.loads(Path(schema).read_text()))  # type: ignore[arg-type]

        def decode(v: bytes) -> Any:
            buf = io.BytesIO(v)
            buf.seek(5)
            return schemaless_reader(buf, parsed, None)
    elif decoder == "protobuf":  # upb; the message indexes are the single byte 0 here
        parse = proto_class().FromString

        def decode(v: bytes) -> Any:
            return parse(v[6:])
    else:
        decode = json.loads
    got = nbytes = events = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while got < records:
        for recs in c.poll(timeout_ms=500).values():
            got += len(recs)
            for r in recs:
                v = r.value
                nbytes += len(v)
                if decoder is not None:
                    doc = decode(v)
                    events += len(doc) if type(doc) is list else 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    c.close()
    return {"records": got, "bytes": nbytes, "events_decoded": events, "wall_s": wall, "cpu_s": cpu}


def run_service(cfg: dict[str, Any], timesteps: int) -> dict[str, Any]:
    import threading

    from stream.config import load_settings
    from stream.service.http import Health
    from stream.service.launcher import run_service as run
    from stream.service.metrics import Metrics

    settings = load_settings(None, **cfg)
    metrics = Metrics()
    stop = threading.Event()
    clock: dict[str, float] = {}
    sealed = metrics.timesteps_sealed
    original = sealed.inc
    count = [0]

    def inc(amount: float = 1) -> None:  # called in the service's thread: no polling thread competes
        original(amount)
        count[0] += int(amount)
        if count[0] >= timesteps and "end" not in clock:
            clock["end"], clock["end_cpu"] = time.perf_counter(), time.process_time()
            stop.set()

    sealed.inc = inc  # type: ignore[method-assign]

    def on_started(service: Any, server: Any) -> None:
        clock["start"], clock["start_cpu"] = time.perf_counter(), time.process_time()

    code = run(settings, stop=stop, metrics=metrics, health=Health(), install_signals=False, http=False,
               on_started=on_started)
    reg = metrics.registry
    return {"exit_code": code, "wall_s": clock["end"] - clock["start"], "cpu_s": clock["end_cpu"] - clock["start_cpu"],
            "events_accepted": reg.get_sample_value("dpstream_events_accepted_total"),
            "timesteps_sealed": count[0]}


def run_scaled_member(spec: dict[str, Any]) -> dict[str, Any]:
    """One process of a scaled-out run: a worker (until SIGTERM) or the releaser (until it has
    released ``timesteps``). Prints ``ready`` once started; returns wall-clock marks (epoch
    seconds, comparable across the processes of one machine)."""
    import signal
    import threading

    from stream.config import load_settings
    from stream.service.http import Health
    from stream.service.launcher import run_service as run
    from stream.service.metrics import Metrics

    settings = load_settings(None, **spec["config"])
    metrics, stop, marks = Metrics(), threading.Event(), {}
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if spec["kind"] == "releaser":
        sealed, original = metrics.timesteps_sealed, metrics.timesteps_sealed.inc
        count = [0]

        def inc(amount: float = 1) -> None:
            original(amount)
            count[0] += int(amount)
            if count[0] >= spec["timesteps"] and "end" not in marks:
                marks["end"] = time.time()
                stop.set()

        sealed.inc = inc  # type: ignore[method-assign]
    else:
        from stream.service import worker as worker_module

        original_ingest = worker_module.Worker._ingest

        def ingest(self: Any, batch: Any) -> None:
            if batch and "first" not in marks:
                marks["first"] = time.time()
            original_ingest(self, batch)
            marks["last"] = time.time()

        worker_module.Worker._ingest = ingest  # type: ignore[method-assign]

    def on_started(*_: Any) -> None:
        print("ready", flush=True)

    profile_to = os.environ.get("BENCH_PROFILE_DIR")  # cProfile each member into this directory
    if profile_to:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    code = run(settings, stop=stop, metrics=metrics, health=Health(), install_signals=False, http=False,
               on_started=on_started)
    if profile_to:
        prof.disable()
        prof.dump_stats(f"{profile_to}/{spec['kind']}-{settings.service.worker_id or ''}-{os.getpid()}.prof")
    return {"exit_code": code, **marks, "cpu_s": time.process_time(),
            "events_accepted": metrics.registry.get_sample_value("dpstream_events_accepted_total") or 0.0}


def process_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) a process has used so far (Linux /proc)."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scaled(bootstrap: str, tmp: str, topic: str, records_events: int, workers: int, args: argparse.Namespace,
           cores: list[int], broker_pid: int | None = None) -> dict[str, Any]:
    """Workers (each pinned to its own core, round robin) and a releaser over ``topic``: events per
    second from the first record any worker read to the releaser's last release."""
    base = settings_dict(bootstrap, topic, f"{tmp}/scaled-{workers}-{uuid.uuid4().hex[:6]}", args.grid, args.timesteps)
    base["kafka"].update({"max_poll_interval_ms": 3000, "session_timeout_ms": 6000, "heartbeat_interval_ms": 1000})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

    def spawn(kind: str, cfg: dict[str, Any], cpu: int | None) -> subprocess.Popen:
        spec = {"kind": kind, "config": cfg, "timesteps": args.timesteps}
        pre = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
        log = Path(cfg["service"]["state_dir"] + f"-{kind}-{cfg['service'].get('worker_id', '')}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],  # noqa: S603
                                stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env=env,
                                preexec_fn=pre)  # noqa: PLW1509
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if line.strip() != "ready":
            raise RuntimeError(f"{kind} did not start: {line}{log.read_text()[-2000:]}")
        return proc

    broker_cpu0 = process_cpu_s(broker_pid)
    releaser = spawn("releaser", {**base, "service": {**base["service"], "role": "releaser"}}, None)
    members = [spawn("worker", {**base, "service": {**base["service"], "role": "worker", "worker_id": f"w{i}"}},
                     cores[i % len(cores)]) for i in range(workers)]
    out, _ = releaser.communicate(timeout=300)
    rel = json.loads(out.strip().splitlines()[-1])
    results = []
    for proc in members:
        proc.send_signal(15)
        out, err = proc.communicate(timeout=60)
        results.append(json.loads(out.strip().splitlines()[-1]))
    first = min(r["first"] for r in results if "first" in r)
    return {"workers": workers, "wall_s": rel["end"] - first, "events_per_s": round(records_events / (rel["end"] - first)),
            "events_per_worker": [r["events_accepted"] for r in results],
            # process CPU seconds (start-up included): which process was busy all along
            "cpu_s": {"releaser": round(rel["cpu_s"], 2), "workers": [round(r["cpu_s"], 2) for r in results],
                      "broker": round(process_cpu_s(broker_pid) - broker_cpu0, 2)},
            "releases_read_back": released(bootstrap, base["kafka"]["output_topic"])}


def scale_out(bootstrap: str, tmp: str, args: argparse.Namespace, broker_pid: int | None = None) -> dict[str, Any]:
    """500-event messages over ``--partitions`` partitions; per worker count, ``--repeats`` runs."""
    from stream.config import KafkaSection
    from stream.service.kafka_io import ensure_topics

    topic = f"bench-{uuid.uuid4().hex[:8]}.scaled"
    ensure_topics(KafkaSection(bootstrap_servers=bootstrap), {topic: args.partitions})
    records = produce(bootstrap, topic, events=args.events, people=args.people, grid=args.grid,
                      timesteps=args.timesteps, per_message=500, partitions=args.partitions)
    cores = sorted(os.sched_getaffinity(0) | {args.cpu})
    counts = [int(w) for w in args.workers.split(",")]
    runs: dict[int, list[dict[str, Any]]] = {w: [] for w in counts}
    for r in range(args.repeats):
        for w in (counts if r % 2 == 0 else counts[::-1]):
            res = scaled(bootstrap, tmp, topic, args.events + args.partitions, w, args, cores, broker_pid)
            runs[w].append(res)
            print("scale_out", json.dumps(res), file=sys.stderr, flush=True)
    med = {w: statistics.median(x["events_per_s"] for x in runs[w]) for w in counts}
    out: dict[str, Any] = {"partitions": args.partitions, "records": records, "cores": len(cores),
                           "events_per_s": {str(w): round(v) for w, v in med.items()}, "runs": {str(w): runs[w] for w in counts}}
    if len(counts) > 1:
        out["speedup"] = round(med[counts[-1]] / med[counts[0]], 3)
    return out


def child(args: argparse.Namespace) -> int:
    spec = json.loads(args.child)
    if spec["kind"] in ("worker", "releaser"):
        out = run_scaled_member(spec)
        out["peak_rss_mb"] = peak_rss_mb()
        print(json.dumps(out))
        return 0
    if spec["kind"] == "service":
        out = run_service(spec["config"], spec["timesteps"])
    else:
        out = run_bare(spec["bootstrap"], spec["topic"], spec["records"],
                       {"bare_bytes": None, "bare_json": "json", "bare_msgspec": "msgspec", "bare_avro": "avro",
                        "bare_protobuf": "protobuf"}[spec["kind"]], spec.get("schema"))
    out["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(out))
    return 0


def measure(spec: dict[str, Any], cpu: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False,  # noqa: S603
                          preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))  # noqa: PLW1509
    if proc.returncode != 0:
        raise RuntimeError(f"{spec['kind']} run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def released(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False,
                      auto_offset_reset="earliest")
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    ids: set[str] = set()
    deadline = time.monotonic() + 20
    end = c.end_offsets([tp])[tp]
    while time.monotonic() < deadline and c.position(tp) < end:
        for recs in c.poll(timeout_ms=200).values():
            for r in recs:
                doc = json.loads(r.value)
                if doc.get("message_type") == "release":
                    ids.add(doc["release_id"])
    c.close()
    return len(ids)


def shape(bootstrap: str, tmp: str, name: str, per_message: int, args: argparse.Namespace) -> dict[str, Any]:
    from stream.service.kafka_io import ensure_topics

    topic = f"bench-{uuid.uuid4().hex[:8]}.{name}"
    from stream.config import KafkaSection

    ensure_topics(KafkaSection(bootstrap_servers=bootstrap), {topic: 1})
    fmt = name.split("_")[0] if name.split("_")[0] in ("avro", "protobuf") else "json"
    schema = write_schema(fmt, tmp) if fmt != "json" else None
    t = time.perf_counter()
    records = produce(bootstrap, topic, events=args.events, people=args.people, grid=args.grid,
                      timesteps=args.timesteps, per_message=per_message, fmt=fmt)
    produce_s = time.perf_counter() - t
    kinds = ["bare_bytes", "bare_json", "bare_msgspec", "service"] if fmt == "json" else \
        ["bare_bytes", f"bare_{fmt}", "service"]
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(args.repeats):
        order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
        for kind in order:
            if kind == "service":
                cfg = settings_dict(bootstrap, topic, f"{tmp}/{name}-{r}", args.grid, args.timesteps)
                if fmt != "json":
                    cfg["input"] = {"format": fmt, "schemas": {1: schema}}
                out = measure({"kind": "service", "config": cfg, "timesteps": args.timesteps}, args.cpu)
                out["releases_read_back"] = released(bootstrap, cfg["kafka"]["output_topic"])
            else:
                out = measure({"kind": kind, "bootstrap": bootstrap, "topic": topic, "records": records,
                               "schema": schema}, args.cpu)
            runs[kind].append(out)
            print(name, kind, json.dumps(out), file=sys.stderr, flush=True)
    events = args.events + 1

    def rate(kind: str) -> float:
        return statistics.median(events / o["wall_s"] for o in runs[kind])

    ratios = [s["wall_s"] and b["wall_s"] / s["wall_s"] for s, b in zip(runs["service"], runs["bare_bytes"], strict=True)]
    if fmt != "json":  # the goal: service over the bare consumer deserializing with the same library
        same = [s["wall_s"] and b["wall_s"] / s["wall_s"]
                for s, b in zip(runs["service"], runs[f"bare_{fmt}"], strict=True)]
        return {
            "events": events, "records": records, "events_per_message": 1, "format": fmt,
            "produce_s": round(produce_s, 1), "events_per_s": {k: round(rate(k)) for k in kinds},
            f"service_over_bare_{fmt}": {"median": round(statistics.median(same), 3), "min": round(min(same), 3),
                                         "max": round(max(same), 3)},
            # CPU seconds too: on a shared machine the pinned core's other tenants inflate wall times
            f"service_over_bare_{fmt}_cpu": round(statistics.median(
                b["cpu_s"] / s["cpu_s"] for s, b in zip(runs["service"], runs[f"bare_{fmt}"], strict=True)), 3),
            "service_over_bare_bytes": {"median": round(statistics.median(ratios), 3)},
            "peak_rss_mb": {k: statistics.median(o["peak_rss_mb"] for o in runs[k]) for k in kinds},
            "releases_read_back": [o["releases_read_back"] for o in runs["service"]],
        }
    result: dict[str, Any] = {
        "events": events, "records": records, "events_per_message": per_message, "produce_s": round(produce_s, 1),
        "events_per_s": {k: round(rate(k)) for k in kinds},
        "service_over_bare_bytes": {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
                                    "max": round(max(ratios), 3)},
        "service_over_bare_json": round(rate("service") / rate("bare_json"), 3),
        "service_over_bare_msgspec": round(rate("service") / rate("bare_msgspec"), 3),
        "bare_msgspec_over_bare_bytes": round(rate("bare_msgspec") / rate("bare_bytes"), 3),
        "peak_rss_mb": {k: statistics.median(o["peak_rss_mb"] for o in runs[k]) for k in kinds},
        "releases_read_back": [o["releases_read_back"] for o in runs["service"]],
        "service_cpu_over_wall": round(statistics.median(o["cpu_s"] / o["wall_s"] for o in runs["service"]), 3),
    }
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--people", type=int, default=50_000)
    ap.add_argument("--grid", type=int, default=100, help="bins per axis (grid² bins)")
    ap.add_argument("--timesteps", type=int, default=20)
    ap.add_argument("--shapes", default="batch_500,single_event")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)), help="the core every measured run is pinned to")
    ap.add_argument("--workers", default="", help="also run the scale-out path with these worker counts (e.g. 1,2)")
    ap.add_argument("--partitions", type=int, default=4, help="input partitions of the scale-out topic")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    from kafka.record import util as kafka_record_util

    from stream.service.broker import EmbeddedBroker

    others = set(os.sched_getaffinity(0)) - {args.cpu}
    out: dict[str, Any] = {"crc32c_c": kafka_record_util.crc32c_c is not None, "cpu": args.cpu,
                           "cores": len(os.sched_getaffinity(0)),
                           "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory() as tmp:
        if others:
            os.sched_setaffinity(0, others)  # the driver and the broker it starts stay off the measured core
        with EmbeddedBroker.start() as broker:
            shapes = {"batch_500": 500, "single_event": 1, "avro_single": 1, "protobuf_single": 1}
            for name in [s for s in args.shapes.split(",") if s.strip()]:
                out[name.strip()] = shape(broker.bootstrap, tmp, name.strip(), shapes[name.strip()], args)
            if args.workers:
                out["scale_out"] = scale_out(broker.bootstrap, tmp, args, broker.process.pid)
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
