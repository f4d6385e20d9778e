"""Benchmark: ``dpstream replay`` end to end on the thesis's census domain.

Generates an events CSV (numpy + pyarrow, in a temporary directory), then runs
the replay (CSV → validation → windowing → bounding → DSAT/LPA engine →
JSONL) in fresh child processes pinned to one CPU, and prints JSON:

* ``events_per_second``: median over ``--runs`` runs (and every run's value),
  wall clock; ``events_per_cpu_second``: the same per CPU second of the
  replay process (what a dedicated core delivers when the machine is shared;
  the load average is printed too);
* ``peak_rss_mib``: the child's peak resident set size; ``rss_mib_every_10_timesteps``
  its current RSS through the run (flat: memory is bounded by the open
  timesteps and pyarrow's read-ahead, not by the file); and the peak for a
  file with a tenth of the events and of the timesteps (same events per
  timestep; lower only because the whole file fits in the read-ahead);
* what pyarrow bought, all on the same pinned CPU: pyarrow's streaming reader
  alone (the replay's options) versus the standard library's ``csv`` module
  splitting rows alone, and splitting them into per-column arrays (the least
  a stdlib-based replay has to do before any validation).

Domain: Age numeric 0–96 in 96 bins, Gender 2, Education 12, Health
insurance 2, Marital status 2, Income 3 (27,648 bins); 100 daily timesteps;
a fixed population of N/102 people: each sends one event per timestep and 2 %
of them a second one (contribution bounding has work to do).

Usage::

    python benchmarks/bench_replay.py                    # 10 million events, 3 runs
    python benchmarks/bench_replay.py --events 1000000 --runs 5
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EDUCATION = ["none", "grade-1-4", "grade-5-6", "grade-7-8", "grade-9", "grade-10", "grade-11",
             "grade-12", "high-school", "some-college", "bachelor", "graduate"]
ATTRIBUTES = [
    {"name": "age", "kind": "numeric", "min": 0, "max": 96, "bins": 96},
    {"name": "gender", "kind": "categorical", "values": ["female", "male"]},
    {"name": "education", "kind": "categorical", "values": EDUCATION},
    {"name": "health_insurance", "kind": "categorical", "values": ["yes", "no"]},
    {"name": "marital_status", "kind": "categorical", "values": ["married", "not-married"]},
    {"name": "income", "kind": "categorical", "values": ["negative", "0-28k", "over-28k"]},
]
START = 1_704_067_200  # 2024-01-01T00:00:00Z
DAY = 86_400


def write_config(path: Path, timesteps: int, population: int) -> None:
    import yaml

    config = {
        "stream": {"id": "census-bench", "timestep": "1d", "allowed_lateness": "0s",
                   "start": "2024-01-01T00:00:00+00:00"},
        "schema": {"user_id": "person_id", "event_time": "event_time", "attributes": ATTRIBUTES},
        "privacy": {"unit": "user-level", "epsilon": 1.0, "horizon": timesteps,
                    "cutoff": max(1, timesteps // 100), "population": population},
        "release": {"decision": "dsat", "mechanism": "lpa", "threshold": 0.025},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def generate(path: Path, events: int, timesteps: int, seed: int = 0) -> None:
    """Write ``events`` census events over ``timesteps`` days, one timestep at a time (bounded memory).

    A fixed population of P people: every timestep each person sends one event and 2 % of
    them a second one (P = events / timesteps / 1.02); event times uniform within the day,
    rows in time order.
    """
    rng = np.random.default_rng(seed)
    per_step = events // timesteps
    population = max(1, round(per_step / 1.02))
    options = pacsv.WriteOptions(include_header=True, quoting_style="none")
    writer = None
    with open(path, "wb") as fh:
        for t in range(timesteps):
            n = per_step + (1 if t < events - per_step * timesteps else 0)
            everyone = rng.permutation(population)
            people = np.concatenate([everyone, rng.choice(population, max(0, n - population))])[:n]
            ids = pc.binary_join_element_wise("p", pc.cast(pa.array(people), pa.string()), "")
            times = START + t * DAY + rng.integers(0, DAY, n)
            order = np.argsort(times, kind="stable")
            age = np.clip(rng.normal(40, 20, n), 0, 95.9).astype(np.int64)
            cols = {
                "person_id": ids.take(pa.array(order)),
                "event_time": pa.array(times[order]),
                "age": pa.array(age),
            }
            for a in ATTRIBUTES[1:]:
                vals = pa.array(a["values"])
                cols[a["name"]] = vals.take(pa.array(rng.integers(0, len(a["values"]), n)))
            table = pa.table(cols)
            if writer is None:
                writer = pacsv.CSVWriter(fh, table.schema, write_options=options)
            writer.write_table(table)
        if writer is not None:
            writer.close()


def _current_rss_mib() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return float("nan")


def _one_cpu(cpu: int) -> None:
    """Pin this process, and pyarrow's thread pools, to one CPU."""
    try:
        os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError):
        pass
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)


def child(config: str, events_csv: str, output: str, cpu: int) -> None:
    """One replay in this process, pinned to one CPU; prints JSON."""
    _one_cpu(cpu)
    from stream.config import load_settings
    from stream.lab.replay import replay
    from stream.service.allocator import tune_allocator

    tune_allocator()  # as `dpstream` does at start-up

    settings = load_settings(config, randomness={"seed": 1, "allow_seeded_noise": True})
    samples: list[float] = []

    def sample(sealed) -> None:  # current RSS every 10 timesteps: flat if memory is bounded
        if sealed.index % 10 == 0:
            samples.append(_current_rss_mib())

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    summary = replay(settings, events_csv, output, on_release=sample)
    seconds = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    peak = r1.ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "rows": summary.rows_read,
                      "accepted": summary.accepted,
                      "timesteps": summary.timesteps, "fresh": summary.fresh, "peak_rss_mib": peak,
                      "rss_samples_mib": samples,
                      "rejected": summary.rejected}))


def child_read(events_csv: str, cpu: int) -> None:
    """pyarrow's reader alone, with the replay's options (every column as text), on one CPU."""
    _one_cpu(cpu)
    from stream.ingest.csvio import DEFAULT_BLOCK_SIZE, read_header

    header = read_header(events_csv)
    t0 = time.perf_counter()
    n = 0
    reader = pacsv.open_csv(
        events_csv,
        read_options=pacsv.ReadOptions(block_size=DEFAULT_BLOCK_SIZE, use_threads=False),
        parse_options=pacsv.ParseOptions(ignore_empty_lines=False, invalid_row_handler=lambda r: "skip"),
        convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(header, pa.string()),
                                             strings_can_be_null=True, null_values=[""], check_utf8=False),
    )
    for rb in reader:
        n += rb.num_rows
    print(json.dumps({"rows": n, "seconds": time.perf_counter() - t0}))


def run_child(config: Path, events_csv: Path, output: Path, cpu: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(config), str(events_csv), str(output), str(cpu)],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def stdlib_rates(path: Path, limit: int, block: int = 100_000) -> tuple[float, float]:
    """Rows/s of ``csv.reader`` splitting rows; and splitting them into per-column numpy arrays."""
    t0 = time.perf_counter()
    n = 0
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        next(reader)
        for _ in reader:
            n += 1
            if n >= limit:
                break
    split = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    n = 0
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        next(reader)
        rows: list[list[str]] = []
        for row in reader:
            rows.append(row)
            if len(rows) == block:
                cols = list(zip(*rows, strict=True))
                _ = [np.asarray(c) for c in cols]
                n += len(rows)
                rows = []
                if n >= limit:
                    break
    return split, n / (time.perf_counter() - t0)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5], int(sys.argv[5]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--child-read":
        child_read(sys.argv[2], int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--timesteps", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=None, help="CPU to pin the replay to (default: the last one)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed after)")
    args = ap.parse_args()
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        d = Path(tmp)
        config, config_tenth = d / "config.yaml", d / "config_tenth.yaml"
        tenth_steps = max(1, args.timesteps // 10)
        write_config(config, args.timesteps, max(1, round(args.events / args.timesteps / 1.02)))
        write_config(config_tenth, tenth_steps, max(1, round(args.events / args.timesteps / 1.02)))
        t0 = time.perf_counter()
        big, small = d / "events.csv", d / "events_tenth.csv"
        generate(big, args.events, args.timesteps, seed=0)
        generate(small, max(1, args.events // 10), tenth_steps, seed=1)
        gen_seconds = time.perf_counter() - t0
        runs = [run_child(config, big, d / "releases.jsonl", cpu) for _ in range(args.runs)]
        tenth = run_child(config_tenth, small, d / "releases_tenth.jsonl", cpu)
        reads = []
        for _ in range(args.runs):
            out = subprocess.run([sys.executable, __file__, "--child-read", str(big), str(cpu)],
                                 check=True, capture_output=True, text=True)
            reads.append(json.loads(out.stdout.strip().splitlines()[-1]))
        rates = [r["rows"] / r["seconds"] for r in runs]
        cpu_rates = [r["rows"] / r["cpu_seconds"] for r in runs]
        try:
            os.sched_setaffinity(0, {cpu})
        except (AttributeError, OSError):
            pass
        split, columns = stdlib_rates(big, min(args.events, 1_000_000))
        print(json.dumps({
            "events": args.events,
            "timesteps": args.timesteps,
            "bins": 27_648,
            "file_mib": round(big.stat().st_size / (1 << 20), 1),
            "generate_seconds": round(gen_seconds, 2),
            "runs": args.runs,
            "seconds": [round(r["seconds"], 3) for r in runs],
            "events_per_second": round(statistics.median(rates)),
            "events_per_second_runs": [round(x) for x in rates],
            "cpu_seconds": [round(r["cpu_seconds"], 3) for r in runs],
            "events_per_cpu_second": round(statistics.median(cpu_rates)),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "timesteps_released": runs[0]["timesteps"],
            "fresh_releases": runs[0]["fresh"],
            "rejected": runs[0]["rejected"],
            "peak_rss_mib": round(max(r["peak_rss_mib"] for r in runs), 1),
            "rss_mib_every_10_timesteps": runs[0]["rss_samples_mib"],
            "peak_rss_mib_tenth_file_same_density": round(tenth["peak_rss_mib"], 1),
            "events_per_second_tenth_file": round(tenth["rows"] / tenth["seconds"]),
            "pyarrow_reader_alone_rows_per_second": round(statistics.median(r["rows"] / r["seconds"] for r in reads)),
            "stdlib_csv_split_rows_per_second": round(split),
            "stdlib_csv_to_columns_rows_per_second": round(columns),
            "cpu": cpu,
        }, indent=2))


if __name__ == "__main__":
    main()
