"""The lab next to the Java streamdp-benchmark: 20 runs of the nine w-event methods, whole process.

Prints one JSON object: wall-clock medians of ``--pairs`` rounds; each round runs ``dpstream
evaluate`` from every ``--root`` checkout and then the Java benchmark's nine mechanisms through our
driver ``benchmarks/java/LabVsJava.java`` (after one warm-up of each), and reports per root the
median of the per-round ratios to Java and, with two roots, of the first to the second (a before/after
pair measured under the same load).

The Java code is not in this repository: fetch github.com/chryenix/streamdp-benchmark and give its
checkout as ``--java-src`` (it is built here with ``javac`` against the jars in its ``lib/``).

Run::

    PYTHONPATH=. python3 benchmarks/bench_lab_vs_java.py --java-src /tmp/streamdp [--pairs 7]
    # after vs before in the same rounds: --root . --root /path/to/untouched/main

The input is the ``sine`` counts stream (``dpstream generate sine --timesteps 1000 --scale 1000
--seed 1 --counts-only``), generated into ``--work`` unless it is already there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

METHODS = "dsat,dsft,uniform,fixed,bd,ba,sample,pegasus,fast"
HERE = Path(__file__).resolve().parent


def _timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--java-src", type=Path, required=True, help="checkout of chryenix/streamdp-benchmark")
    ap.add_argument("--root", type=Path, action="append",
                    help="dpstream checkout to run (PYTHONPATH); repeat to pair checkouts (default: this one)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_lab_vs_java"))
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args(argv)
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    roots = [r.resolve() for r in (args.root or [HERE.parent])]
    envs = [{**os.environ, "PYTHONPATH": str(r)} for r in roots]
    env = envs[0]
    data = work / "sine"
    if not (data / "counts.csv").exists():
        subprocess.run([sys.executable, "-m", "stream.commands.cli", "generate", "sine", "--timesteps", "1000",
                        "--scale", "1000", "--seed", "1", "--counts-only", "--out", str(data)],
                       env=env, cwd=work, check=True, stdout=subprocess.DEVNULL)
    classes = work / "classes"
    classes.mkdir(exist_ok=True)
    src = args.java_src.resolve()
    sources = [str(p) for p in sorted((src / "src").rglob("*.java"))] + [str(HERE / "java" / "LabVsJava.java")]
    cp = f"{src / 'lib'}/*"
    subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", cp, *sources], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lab = [sys.executable, "-m", "stream.commands.cli", "evaluate", "--config", str(data / "config.yaml"),
           "--input", str(data / "counts.csv"), "--methods", METHODS, "--runs", str(args.runs),
           "--json", str(work / "lab.json"), "--progress", "off"]
    java = ["java", "-cp", f"{classes}:{cp}", "LabVsJava", str(data / "counts.csv"), str(args.runs), "10", "1.0"]
    for e in envs:  # warm-up: file cache, bytecode
        _timed(lab, e, work)
    _timed(java, env, work)
    labs: list[list[float]] = [[] for _ in roots]
    b = []
    for _ in range(args.pairs):
        for i, e in enumerate(envs):
            labs[i].append(_timed(lab, e, work))
        b.append(_timed(java, env, work))

    def spread(xs: list[float]) -> dict[str, float]:
        return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3)}

    out: dict[str, object] = {
        "rounds": args.pairs,
        "runs": args.runs,
        "java_wall_s_median": round(statistics.median(b), 3),
        "roots": [{"root": str(r), "lab_wall_s_median": round(statistics.median(a), 3),
                   "ratio_to_java": spread([x / y for x, y in zip(a, b, strict=True)])}
                  for r, a in zip(roots, labs, strict=True)],
    }
    if len(roots) == 2:
        out["first_over_second"] = spread([x / y for x, y in zip(labs[0], labs[1], strict=True)])
    print(json.dumps({
        **out,
        "load_average": os.getloadavg(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
