"""Model-based post-processing (issue 30): ``dpstream evaluate`` on generated streams, as JSON.

    PYTHONPATH=. nice -n 10 python3 benchmarks/bench_filters.py --runs 20 > filters.json

For each stream (``dpstream generate`` families, traffic with its rush hours) and each ε, w it
writes the generated config with ε and w set, runs ``dpstream evaluate --counts`` on the plain
baselines and the post-processed variants, and, for ``--delays``, ``uniform+model`` with
``release.delay: k``. Prints one JSON object: MAE per bin per method per setting, the best plain
baseline, the best dpstream variant and its gain, the zero release, and the goal counts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

PLAIN = ("uniform", "fixed", "sample", "bd", "ba")


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "stream.commands.cli", *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def generate(kind: str, out: Path, timesteps: int) -> tuple[Path, Path]:
    extra = ["--population", "2000", "--grid", "4"] if kind == "traffic" else []
    _cli("generate", kind, "--timesteps", str(timesteps), "--seed", "1", "--out", str(out), "--counts-only", *extra)
    counts = next(p for p in out.iterdir() if p.suffix == ".csv")
    return out / "config.yaml", counts


def evaluate(config: dict, counts: Path, methods: list[str], runs: int, work: Path) -> dict:
    cfg, res = work / "c.yaml", work / "r.json"
    cfg.write_text(yaml.safe_dump(config))
    _cli("evaluate", "-c", str(cfg), "--input", str(counts), "--counts", "--methods", ",".join(methods),
         "--runs", str(runs), "--queries", "0", "--json", str(res), "--progress", "off")
    data = json.loads(res.read_text())
    out = {m: v["mae"] for m, v in data["methods"].items()}
    out["zero-release"] = data["references"]["zero-release"]["mae"] if "zero-release" in data.get("references", {}) \
        else None
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--streams", default="exponential,sine,lognormal,trend,randomwalk,sudden,traffic")
    ap.add_argument("--epsilons", default="0.1,1")
    ap.add_argument("--ws", default="10,50")
    ap.add_argument("--methods", default="uniform,fixed,sample,bd,ba,uniform+nonnegative+kalman,"
                    "uniform+model+nonnegative,sample+model+nonnegative,bd+model+nonnegative,"
                    "uniform+model-perbin+nonnegative")
    ap.add_argument("--delays", default="1,2")
    ap.add_argument("--timesteps", type=int, default=1000)
    args = ap.parse_args()
    methods = args.methods.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for stream in args.streams.split(","):
            cfg_path, counts = generate(stream, work / stream, args.timesteps)
            base = yaml.safe_load(cfg_path.read_text())
            for eps in [float(e) for e in args.epsilons.split(",")]:
                for w in [int(x) for x in args.ws.split(",")]:
                    config = json.loads(json.dumps(base))
                    config["privacy"].update({"epsilon": eps, "unit": "w-event", "w": w})
                    maes = evaluate(config, counts, methods, args.runs, work)
                    for k in [int(d) for d in args.delays.split(",") if d]:
                        delayed = json.loads(json.dumps(config))
                        delayed["release"].update({"postprocess": "model+nonnegative", "delay": k})
                        maes[f"uniform+model+nonnegative delay {k}"] = evaluate(
                            delayed, counts, ["uniform+model+nonnegative"], args.runs, work)["uniform+model+nonnegative"]
                    plain = min(maes[m] for m in PLAIN if m in maes)
                    ours = {m: v for m, v in maes.items() if m not in PLAIN and m != "zero-release" and v is not None}
                    best = min(ours, key=ours.get)
                    rows.append({"stream": stream, "epsilon": eps, "w": w, "mae": maes, "best_plain": plain,
                                 "best_variant": best, "gain": 1 - ours[best] / plain})
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    met = sum(r["gain"] >= 0.2 for r in rows)
    print(json.dumps({"runs": args.runs, "settings": len(rows), "beats_best_plain_by_20pct": met,
                      "goal_half_of_settings": met >= len(rows) / 2, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
