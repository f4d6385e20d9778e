"""Model-based post-processing and a publication delay (issue 30 item 5): ``dpstream evaluate`` on
generated streams, side by side with every plain baseline, every published mechanism we ship,
DSAT/DSFT, ``auto`` from the configuration alone and the zero release. Prints JSON.

    PYTHONPATH=. nice -n 10 python3 benchmarks/bench_filters.py --runs 20 --jobs 2 \
        --rows rows.jsonl > filters.json
    # aggregate rows already written (e.g. after stopping a long grid):
    python3 benchmarks/bench_filters.py --from-rows rows.jsonl > filters.json
    # auto's choice per setting only (the planner from the configuration alone: no evaluate run):
    PYTHONPATH=. python3 benchmarks/bench_filters.py --choices --streams sine,census
    # re-measure auto alone and tabulate it over the other methods' rows (later files win):
    PYTHONPATH=. nice -n 10 python3 benchmarks/bench_filters.py --runs 10 --methods auto --delays "" \
        --rows auto.jsonl
    python3 benchmarks/bench_filters.py --from-rows rows.jsonl auto.jsonl --markdown

For each stream (the six ``dpstream generate`` families at scale 1000 with 1 bin; ``traffic``
with ``--population 2000 --grid 4``: 16 cells, 15-minute timesteps, commuter rush hours every
weekday, i.e. a real daily cycle of 96 timesteps; ``census`` with ``--population 2000
--dimensions 2``: age × gender, 192 bins) and each ε, w it writes the generated config with ε and
w set (w-event), runs ``dpstream evaluate --counts --jobs 1`` on ``--methods``, and, for each
``--delays`` k, the ``--delay-methods`` (model filters) with ``release.delay: k``. One JSON line
per setting goes to ``--rows`` as soon as it is measured (and to stderr). ``evaluate`` runs in
this process (the command's JSON, byte for byte), so the settings that share auto's public facts
(the six 1-bin families at one ε, w) simulate its plan once; ``--jobs N`` measures those groups
in N processes.

Goals (issue 30), computed per setting:
  (a) the best dpstream method or variant (anything but the plain baselines and the zero
      release: DSAT/DSFT, auto, the published mechanisms, the filters, delays included or not)
      beats the best plain baseline (uniform, fixed, sample, BD, BA) by >= 20 % of its MAE;
  (b) ``auto`` is within 1.1x of the best of everything measured without a delay (auto has
      none; the zero release included) and not more than 5 % worse than the zero release.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

PLAIN = ("uniform", "fixed", "sample", "bd", "ba")
PUBLISHED = ("pegasus", "fast", "adapub", "rescuedp")
METHODS = (*PLAIN, *PUBLISHED, "dsat", "dsft", "auto",
           "uniform+nonnegative+kalman", "uniform+ewma+nonnegative", "uniform+model+nonnegative",
           "uniform+model-perbin+nonnegative", "fixed+model+nonnegative", "sample+model+nonnegative",
           "adaptive-sample", "adaptive-sample+model+nonnegative")
DELAY_METHODS = ("uniform+model+nonnegative", "fixed+model+nonnegative")
ZERO = "zero-release"


def _cli(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "stream.commands.cli", *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit(f"dpstream {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")


def generate(kind: str, out: Path, timesteps: int) -> tuple[Path, Path]:
    extra = {"traffic": ["--population", "2000", "--grid", "4"],
             "census": ["--population", "2000", "--dimensions", "2"]}.get(kind, [])
    _cli("generate", kind, "--timesteps", str(timesteps), "--seed", "1", "--out", str(out), "--counts-only", *extra)
    counts = next(p for p in out.iterdir() if p.suffix == ".csv")
    return out / "config.yaml", counts


def _cli_here(*args: str) -> None:
    """``dpstream *args`` in this process (the same command as :func:`_cli`, the same JSON): the
    planner's cache (:func:`stream.planning.planner.plan`, keyed by the public facts) then lives on
    between settings, so the settings that share their public facts (the six 1-bin families at one
    ε, w) simulate ``auto``'s candidates once, not once each; no interpreter start-up per call."""
    from stream.commands.cli import main as cli_main

    err = io.StringIO()
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(err):
        code = cli_main(list(args))
    if code:
        raise SystemExit(f"dpstream {' '.join(args)} failed ({code}): {err.getvalue()[-2000:]}")


def evaluate(config: dict, counts: Path, methods: list[str], runs: int, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    cfg, res = work / "c.yaml", work / "r.json"
    cfg.write_text(yaml.safe_dump(config))
    _cli_here("evaluate", "-c", str(cfg), "--input", str(counts), "--counts", "--methods", ",".join(methods),
              "--runs", str(runs), "--queries", "0", "--json", str(res), "--progress", "off", "--jobs", "1")
    data = json.loads(res.read_text())
    out = {m: v["mae"] for m, v in data["methods"].items()}
    out[ZERO] = data.get("references", {}).get(ZERO, {}).get("mae")
    auto = [m for m in out if m == "auto" or m.startswith("auto+")]
    for m in auto:  # the row is named after the planner's filter (auto+kalman): keep it as "auto"
        out["auto"] = out.pop(m)
    if "plan" in data:
        out["_auto_choice"] = data["plan"].get("choice", {}).get("name")
    return out


def choice(config: dict, work: Path) -> tuple[str, float]:
    """The planner's choice for ``config`` with ``release.decision: auto`` (from the configuration
    alone, as ``evaluate --methods auto`` runs it) and the seconds it took."""
    from stream.config import load_settings
    from stream.planning.planner import plan

    cfg = work / "auto.yaml"
    cfg.write_text(yaml.safe_dump({**config, "release": {**config.get("release", {}), "decision": "auto"}}))
    started = time.monotonic()
    chosen = plan(load_settings(cfg)).choice.name
    return chosen, round(time.monotonic() - started, 1)


def merge(rows: list[dict]) -> list[dict]:
    """Rows of the same setting (stream, ε, w) merged in order: a later row's values win (e.g. auto
    re-measured alone over a grid's rows); the first row's position is kept."""
    out: dict[tuple, dict] = {}
    for r in rows:
        key = (r["stream"], r["epsilon"], r["w"])
        if key in out:
            out[key] = {**out[key], **{k: v for k, v in r.items() if k != "mae"},
                        "mae": {**out[key]["mae"], **r["mae"]}}
        else:
            out[key] = r
    return list(out.values())


def judgeable(row: dict) -> bool:
    """Whether ``row`` alone has what :func:`judge` compares: a plain baseline and one of our methods
    without a delay (a re-measure of ``auto`` or of the delayed columns alone has not)."""
    return any(m in row["mae"] for m in PLAIN) and any(
        m not in PLAIN and m != ZERO and " delay " not in m and not m.startswith("_") for m in row["mae"])


def judge(row: dict) -> dict:
    """The goal figures of one measured setting (see the module docstring)."""
    mae = {m: v for m, v in row["mae"].items() if not m.startswith("_") and v is not None}
    plain = min(mae[m] for m in PLAIN if m in mae)
    ours = {m: v for m, v in mae.items() if m not in PLAIN and m != ZERO}
    undelayed = {m: v for m, v in ours.items() if " delay " not in m}
    best = min(ours, key=ours.get)
    best_nd = min(undelayed, key=undelayed.get)
    everything = {m: v for m, v in mae.items() if " delay " not in m}
    best_all = min(everything, key=everything.get)
    auto, zero = mae.get("auto"), mae.get(ZERO)
    return {"best_plain": plain, "best_plain_method": min((m for m in PLAIN if m in mae), key=mae.get),
            "best_variant": best, "gain": 1 - ours[best] / plain,
            "best_variant_no_delay": best_nd, "gain_no_delay": 1 - undelayed[best_nd] / plain,
            "best_overall_no_delay": best_all,
            "auto_vs_best": None if auto is None else auto / everything[best_all],
            "auto_vs_zero": None if auto is None or not zero else auto / zero}


def summary(rows: list[dict], runs: int) -> dict:
    n = len(rows)
    a = sum(r["gain"] >= 0.2 for r in rows)
    a_nd = sum(r["gain_no_delay"] >= 0.2 for r in rows)
    within = sum(r["auto_vs_best"] is not None and r["auto_vs_best"] <= 1.1 for r in rows)
    worse_zero = sum(r["auto_vs_zero"] is not None and r["auto_vs_zero"] > 1.05 for r in rows)
    return {"runs": runs, "settings": n,
            "goal_a": {"beats_best_plain_by_20pct": a, "without_delay": a_nd, "met": a >= n / 2,
                       "met_without_delay": a_nd >= n / 2},
            "goal_b": {"auto_within_1_1x_of_best": within, "auto_more_than_5pct_worse_than_zeros": worse_zero,
                       "met": within >= 0.8 * n and worse_zero == 0},
            "rows": rows}


TABLE_1 = (*PLAIN, *PUBLISHED, "dsat", "dsft", "auto", ZERO)
TABLE_2 = ("uniform+nonnegative+kalman", "uniform+ewma+nonnegative", "uniform+model+nonnegative",
           "uniform+model-perbin+nonnegative", "fixed+model+nonnegative", "sample+model+nonnegative",
           "uniform+model+nonnegative delay 1", "uniform+model+nonnegative delay 2",
           "fixed+model+nonnegative delay 1", "fixed+model+nonnegative delay 2")


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def _ratio(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}×"


def markdown(rows: list[dict]) -> str:
    """The two tables of docs/results.md: mechanisms (auto's choice in brackets), then the filters."""
    head1 = "| stream | ε | w | " + " | ".join(TABLE_1) + " | auto / best | auto / zeros |"
    out = [head1, "|" + "---|" * (len(TABLE_1) + 5)]
    for r in rows:
        m = r["mae"]
        cells = [_fmt(m.get(k)) + (f" ({m['_auto_choice']})" if k == "auto" and m.get("_auto_choice") else "")
                 for k in TABLE_1]
        out.append(f"| {r['stream']} | {r['epsilon']:g} | {r['w']} | " + " | ".join(cells)
                   + f" | {_ratio(r['auto_vs_best'])} | {_ratio(r['auto_vs_zero'])} |")
    short = [k.replace("+nonnegative", "").replace(" delay ", ", delay ") for k in TABLE_2]
    out += ["", "| stream | ε | w | best plain | " + " | ".join(short) + " | best variant vs best plain |",
            "|" + "---|" * (len(TABLE_2) + 5)]
    for r in rows:
        m = r["mae"]
        cells = [_fmt(m.get(k)) for k in TABLE_2]
        best = r["best_variant"].replace("+nonnegative", "")
        out.append(f"| {r['stream']} | {r['epsilon']:g} | {r['w']} | {_fmt(r['best_plain'])} ({r['best_plain_method']}) | "
                   + " | ".join(cells) + f" | {r['gain']:.0%} ({best}; {r['gain_no_delay']:.0%} without delay) |")
    return "\n".join(out)


def plan_groups(grid: list[tuple], work: Path) -> list[list[tuple]]:
    """The settings grouped by the planner's public facts (:func:`stream.planning.planner.public_facts`:
    what ``auto``'s plan is a function of), largest group first: each group is measured in one
    process, so its plan is simulated once (the six 1-bin families share theirs at each ε, w)."""
    from stream.config import load_settings
    from stream.planning.planner import public_facts

    groups: dict[str, list[tuple]] = {}
    for setting in grid:
        stream, eps, w, config, _ = setting
        cfg = work / f"facts-{stream}-{eps}-{w}.yaml"
        cfg.write_text(yaml.safe_dump(config))
        key = json.dumps(public_facts(load_settings(cfg)), sort_keys=True, default=str)
        groups.setdefault(key, []).append(setting)
    return sorted(groups.values(), key=len, reverse=True)


_LOCK = None  # the rows file's lock when settings are measured in parallel processes


def _share_lock(lock) -> None:  # type: ignore[no-untyped-def]
    global _LOCK
    _LOCK = lock


class Measure:
    """Measures a group of settings in turn (one process): ``evaluate`` on the methods, then the
    delay methods with each ``release.delay``; each row goes to ``rows`` (and stderr) at once."""

    def __init__(self, methods: list[str], delay_methods: list[str], delays: list[int], runs: int,
                 work: Path, rows: Path | None) -> None:
        self.methods, self.delay_methods, self.delays = methods, delay_methods, delays
        self.runs, self.work, self.rows = runs, work, rows

    def __call__(self, group: list[tuple]) -> list[dict]:
        out = []
        for stream, eps, w, config, counts in group:
            started = time.monotonic()
            here = self.work / f"run-{stream}-{eps}-{w}"
            maes = evaluate(config, counts, self.methods, self.runs, here)
            for k in self.delays:
                delayed = json.loads(json.dumps(config))
                delayed.setdefault("release", {}).update({"postprocess": "model+nonnegative", "delay": k})
                got = evaluate(delayed, counts, self.delay_methods, self.runs, here)
                for m in self.delay_methods:
                    maes[f"{m} delay {k}"] = got[m]
            row = {"stream": stream, "epsilon": eps, "w": w, "runs": self.runs, "mae": maes,
                   "seconds": round(time.monotonic() - started, 1)}
            line = json.dumps(row)
            with _LOCK if _LOCK is not None else contextlib.nullcontext():
                print(line, file=sys.stderr, flush=True)
                if self.rows:
                    with self.rows.open("a") as fh:
                        fh.write(line + "\n")
            out.append(row)
        return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--streams", default="exponential,sine,lognormal,trend,randomwalk,sudden,traffic,census")
    ap.add_argument("--epsilons", default="0.1,1")
    ap.add_argument("--ws", default="10,50")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--delay-methods", default=",".join(DELAY_METHODS))
    ap.add_argument("--delays", default="1,2")
    ap.add_argument("--timesteps", type=int, default=1000)
    ap.add_argument("--rows", type=Path, help="append one JSON line per measured setting here")
    ap.add_argument("--from-rows", type=Path, nargs="+", help="only aggregate the JSON lines of earlier --rows files")
    ap.add_argument("--markdown", action="store_true", help="with --from-rows: print the docs/results.md tables")
    ap.add_argument("--jobs", type=int, default=1,
                    help="settings measured in this many processes at once (each evaluate runs --jobs 1); the "
                         "settings sharing auto's public facts stay in one process (its plan is computed once)")
    ap.add_argument("--choices", action="store_true",
                    help="only print auto's choice per setting (the planner alone, no evaluate run)")
    args = ap.parse_args()
    if args.from_rows:
        rows = merge([json.loads(line) for f in args.from_rows for line in f.read_text().splitlines() if line.strip()])
        rows = [{**r, **judge(r)} for r in rows]
        print(markdown(rows) if args.markdown else json.dumps(summary(rows, rows[0]["runs"] if rows else 0), indent=1))
        return 0
    methods = args.methods.split(",")
    done = set()  # settings already in --rows (a grid restarted after a stop): not measured again
    if args.rows and args.rows.exists():
        done = {(r["stream"], r["epsilon"], r["w"]) for r in map(json.loads, args.rows.read_text().splitlines())}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        grid = []  # (stream, ε, w, config, counts), in the grid's order
        for stream in args.streams.split(","):
            cfg_path, counts = generate(stream, work / stream, args.timesteps)
            base = yaml.safe_load(cfg_path.read_text())
            for eps in [float(e) for e in args.epsilons.split(",")]:
                for w in [int(x) for x in args.ws.split(",")]:
                    if (stream, eps, w) in done:
                        continue
                    config = json.loads(json.dumps(base))
                    config["privacy"].update({"epsilon": eps, "unit": "w-event", "w": w})
                    grid.append((stream, eps, w, config, counts))
        if args.choices:
            for stream, eps, w, config, _ in grid:
                chosen, seconds = choice(config, work)
                print(json.dumps({"stream": stream, "epsilon": eps, "w": w, "choice": chosen,
                                  "seconds": seconds}), flush=True)
            return 0
        job = Measure(methods, args.delay_methods.split(","), [int(d) for d in args.delays.split(",") if d],
                      args.runs, work, args.rows)
        groups = plan_groups(grid, work)
        if args.jobs > 1 and len(groups) > 1:
            import multiprocessing

            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(min(args.jobs, len(groups)), initializer=_share_lock, initargs=(ctx.Lock(),)) as pool:
                measured = [r for rs in pool.imap_unordered(job, groups) for r in rs]
        else:
            measured = [r for g in groups for r in job(g)]
        order = {(s_, e_, w_): i for i, (s_, e_, w_, _, _) in enumerate(grid)}
        for row in sorted(measured, key=lambda r: order[(r["stream"], r["epsilon"], r["w"])]):
            if judgeable(row):  # (auto alone, or delayed columns alone: judged with --from-rows over a grid's rows)
                rows.append({**row, **judge(row)})
    print(json.dumps(summary(rows, args.runs), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
