"""How the Kalman smoother's process share q was chosen, re-run on the one code path (issue 29).

    PYTHONPATH=. python3 benchmarks/kalman_share.py --runs 20 --json docs/figures/kalman_share.json

For each q in ``--shares``, :mod:`benchmarks.families` runs Uniform, fixed sampling and Sample,
plain and with the shipped chain ``nonnegative+kalman``, on the six families at ε ∈ {0.1, 1},
w ∈ {10, 50} (the lab's runner: the policies' own runs-axis rules, the service's filter with
``histogram.postprocess.PROCESS_SHARE`` set to q). At the shipped q it also runs the other order,
``kalman+nonnegative`` (clamping after the filter). Per setting, the best smoothed entry over the
best plain one; printed as JSON: per q the geometric mean of that ratio over the settings, the
worst ratio, and in how many settings smoothing is worse (> 1) or ≥ 20 % better (≤ 0.8).
The families are public test streams, so choosing q on them is in-sample for those shapes only.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAIN = ("uniform", "fixed", "sample")


def summarise(rows: list[dict], smoothed: list[str]) -> dict:
    ratios = []
    for row in rows:
        mae = row["mae"]
        ratios.append(min(mae[m] for m in smoothed) / min(mae[m] for m in PLAIN))
    return {"settings": len(ratios), "geometric_mean": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 4),
            "worst": round(max(ratios), 4), "worse_than_plain": sum(r > 1 for r in ratios),
            "at_least_20pct_better": sum(r <= 0.8 for r in ratios)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--shares", default="0.05,0.1,0.15,0.2,0.3,0.5")
    ap.add_argument("--shipped", type=float, default=0.2)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    before = [f"{m}+nonnegative+kalman" for m in PLAIN]
    after = [f"{m}+kalman+nonnegative" for m in PLAIN]
    out: dict = {"command": "PYTHONPATH=. python3 benchmarks/kalman_share.py " + " ".join(sys.argv[1:]),
                 "runs": args.runs, "shares": {}}
    for q in map(float, args.shares.split(",")):
        methods = [*PLAIN, *before, *(after if q == args.shipped else [])]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "rows.json"
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "families.py"), "--runs", str(args.runs),
                            "--methods", ",".join(methods), "--process-share", str(q), "--jobs", str(args.jobs),
                            "--json", str(path)], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
            rows = json.loads(path.read_text())["rows"]
        entry = {"clamp_then_filter": summarise(rows, before), "rows": rows}
        if q == args.shipped:
            entry["filter_then_clamp"] = summarise(rows, after)
        out["shares"][str(q)] = entry
        print(json.dumps({"q": q, **{k: v for k, v in entry.items() if k != "rows"}}), file=sys.stderr, flush=True)
    text = json.dumps(out, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(json.dumps({q: {k: v for k, v in e.items() if k != "rows"} for q, e in out["shares"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
