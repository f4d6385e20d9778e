"""Detectors on declared queries (issue 33 item 4): detection delay and false-alarm rate, printed as JSON.

Three streams, one declared query each (its true series from the generators of ``dpstream
generate``): ``census`` (people aged 65+ without health insurance: 4,464 of 27,648 bins),
``traffic`` (objects in the 16×16 city centre of a 64×64 grid, 15-minute timesteps: rush hours)
and ``daily`` (a count with a daily cycle, hourly timesteps: 1000·(1 + 0.5·sin) on 10 bins).
Each run releases every timestep fresh with LPA at the given per-timestep ε (what the service
publishes under ``release.decision: uniform``): the query's released answer is its true value
plus the sum of its bins' discrete Laplace noise, and the release states that noise's variance
(``histogram.declared``). An outbreak-style injection multiplies the true query by 1 + rise for
``duration`` timesteps from ``t0``. The same detectors (``histogram.detectors``, the service's own
code, default settings: CUSUM limit 5 slack 0.5, EWMA limit 3 weight 0.2, baseline 7 answers one
season apart; threshold: the baseline period's mean + 4 sd of the released answers) run on the
released series and, as the reference, on the true series.

* false alarms: alarms per 100 timesteps before ``t0`` (after the baseline filled);
* detection: the share of runs with an alarm in ``[t0, t0 + duration + 5)``, and the median delay
  (timesteps from ``t0`` to the first such alarm; 0 = the first injected timestep).

Usage: ``python benchmarks/bench_alerts.py [--runs 20] [--quick]`` (JSON on stdout).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from histogram.declared import discrete_laplace_variance  # noqa: E402
from histogram.detectors import make_detector  # noqa: E402
from stream.lab.generate import census_stream, traffic_stream  # noqa: E402

EPSILONS = (0.1, 0.5, 1.0)
RISES = (0.2, 0.5, 1.0)
DURATIONS = (1, 3, 5)
DETECTORS = ("threshold", "cusum", "ewma")


def census_series(timesteps: int, seed: int) -> tuple[np.ndarray, int, int]:
    """People aged 65..95 without health insurance (age bins 65..95 × insurance 'no'): 4,464 bins."""
    q = np.empty(timesteps)
    for chunk in census_stream(timesteps, 100_000, seed):
        c = chunk.codes
        q[chunk.timestep] = np.count_nonzero((c[:, 0] >= 65) & (c[:, 3] == 1))
    return q, 31 * 2 * 12 * 1 * 2 * 3, 1


def traffic_series(timesteps: int, seed: int) -> tuple[np.ndarray, int, int]:
    """Objects in the 16×16 centre of the 64×64 grid (256 bins); 15-minute timesteps, a daily season of 96."""
    q = np.empty(timesteps)
    for chunk in traffic_stream(timesteps, 20_000, seed):
        c = chunk.codes
        q[chunk.timestep] = np.count_nonzero((c[:, 0] >= 24) & (c[:, 0] < 40) & (c[:, 1] >= 24) & (c[:, 1] < 40))
    return q, 256, 96


def daily_series(timesteps: int, seed: int) -> tuple[np.ndarray, int, int]:
    """A Poisson count with mean 1000·(1 + 0.5·sin(2πt/24)) on 10 bins; hourly, a season of 24."""
    rng = np.random.default_rng([seed, 0xDA1])
    t = np.arange(timesteps)
    return rng.poisson(1000 * (1 + 0.5 * np.sin(2 * np.pi * t / 24))).astype(float), 10, 24


STREAMS = {"census": (census_series, 240, 200), "traffic": (traffic_series, 960, 900),
           "daily": (daily_series, 400, 360)}  # (series, timesteps, t0)


def _noise(rng: np.random.Generator, epsilon: float, bins: int, size: int) -> np.ndarray:
    """The sum of ``bins`` discrete Laplace(1/ε) draws, ``size`` times (difference of geometrics)."""
    a = math.exp(-epsilon)
    out = np.zeros(size)
    left = bins
    while left:
        n = min(left, 4096)
        out += (rng.geometric(1 - a, (size, n)) - rng.geometric(1 - a, (size, n))).sum(axis=1)
        left -= n
    return out


def _run(series: np.ndarray, var: float, season: int, t0: int, warm: int, duration: int) -> dict[str, list[int]]:
    """Alarm timesteps of each detector on one series (``var``: the release's known noise variance)."""
    base = series[warm - 7 * season:warm] if warm >= 7 * season else series[:warm]
    above = float(base.mean() + 4 * math.sqrt(max(var, float(base.var(ddof=1)))))
    dets = {"threshold": make_detector("threshold", above=above),
            "cusum": make_detector("cusum", limit=5, slack=0.5, baseline=7 if season == 1 else 3, season=season),
            "ewma": make_detector("ewma", limit=3, weight=0.2, baseline=7 if season == 1 else 3, season=season)}
    alarms: dict[str, list[int]] = {k: [] for k in dets}
    for t in range(min(len(series), t0 + duration + 5)):
        for k, d in dets.items():
            if d.update(t, float(series[t]), var).fired and t >= warm:
                alarms[k].append(t)
    return alarms


def measure(name: str, runs: int, epsilons: tuple[float, ...], rises: tuple[float, ...],
            durations: tuple[int, ...]) -> list[dict]:
    make, timesteps, t0 = STREAMS[name]
    cache = [make(timesteps, 1000 + r) for r in range(runs)]  # the true series: public workload
    rows = []
    for epsilon in (None, *epsilons):  # None: the true series (the reference)
        for rise in rises:
            for duration in durations:
                stats = {k: {"false": 0, "steady": 0, "hit": 0, "delays": []} for k in DETECTORS}
                for r in range(runs):
                    true, bins, season = cache[r]
                    warm = 3 * season + 1 if season > 1 else 8
                    x = true.copy()
                    x[t0:t0 + duration] *= 1 + rise
                    var = 0.0
                    if epsilon is not None:
                        rng = np.random.default_rng([r, int(epsilon * 1000), int(rise * 100), duration])
                        x = x + _noise(rng, epsilon, bins, len(x))
                        var = bins * discrete_laplace_variance(1 / epsilon)
                    alarms = _run(x, var, season, t0, warm, duration)
                    for k, ts in alarms.items():
                        s = stats[k]
                        s["false"] += sum(1 for t in ts if t < t0)
                        s["steady"] += t0 - warm
                        hits = [t for t in ts if t0 <= t < t0 + duration + 5]
                        if hits:
                            s["hit"] += 1
                            s["delays"].append(hits[0] - t0)
                for k, s in stats.items():
                    rows.append({"stream": name, "epsilon": epsilon, "series": "true" if epsilon is None else "released",
                                 "rise": rise, "duration": duration, "detector": k, "runs": runs,
                                 "false_alarms_per_100": round(100 * s["false"] / max(1, s["steady"]), 3),
                                 "detected": round(s["hit"] / runs, 3),
                                 "median_delay": None if not s["delays"] else float(np.median(s["delays"]))})
    return rows


def private_vs_waiting(runs: int, epsilons: tuple[int, ...] = (1, 4), rises: tuple[float, ...] = (0.5, 1.0),
                       decisions: tuple[str, ...] = ("fixed", "dsat")) -> list[dict]:
    """A private threshold alert against waiting for the next fresh release (the real engine).

    User-level ε over N = 240 hourly timesteps, C = 12 fresh releases; a 10-bin daily-cycle stream
    (Poisson, 100·(1 + 0.5 sin) per bin), the query = 4 bins (peak mean 600). ``above`` = 1.3 ×
    the peak mean = 780 for both: the free threshold detector on fresh releases (the whole ε on
    releases) and the private alert (``alerts.private_share`` 1/4, ``max_alerts`` 3). The outbreak
    multiplies the query's bins by 1 + rise for 6 timesteps from t0 = 181 (6 hours around a peak).
    Detected: an alarm in [t0, t0 + 6); false alarms: alarms before t0, per run.
    """
    from histogram.noise import Randomness
    from stream.service.testing import small_settings

    attrs = [{"name": "x", "kind": "categorical", "values": [f"v{i}" for i in range(10)]}]
    bins, above, t0, dur, horizon = [0, 1, 2, 3], 780.0, 181, 6, 240
    rows = []
    for eps in epsilons:
        for decision in decisions:
            for rise in rises:
                res = {"waiting": {"hit": 0, "delays": [], "false": 0},
                       "private": {"hit": 0, "delays": [], "false": 0}}
                for r in range(runs):
                    rng = np.random.default_rng([r, 0xA1])
                    lam = 100 * (1 + 0.5 * np.sin(2 * np.pi * (np.arange(horizon) - 6) / 24))
                    counts = rng.poisson(np.repeat(lam[:, None], 10, axis=1)).astype(np.int64)
                    counts[t0:t0 + dur, :4] = np.round(counts[t0:t0 + dur, :4] * (1 + rise)).astype(np.int64)
                    for mode in ("waiting", "private"):
                        q = {"name": "q", "where": {"x": [f"v{i}" for i in bins]},
                             **({"private": {"above": above, "max_alerts": 3}} if mode == "private" else {})}
                        s = small_settings(schema={"attributes": attrs}, queries=[q],
                                           alerts={"private_share": "1/4"} if mode == "private" else {},
                                           release={"decision": decision},
                                           privacy={"epsilon": eps, "horizon": horizon, "cutoff": 12,
                                                    "population": 1000})
                        engine, noise = s.engine(), Randomness.seeded(10_000 + r)
                        state = engine.initial_state()
                        alarms = []
                        for t in range(t0 + dur):
                            rel, state = engine.step(state, counts[t], noise.drawer("bench", t))
                            if mode == "private":
                                fired = bool(rel.private_alerts and rel.private_alerts[0]["fired"])
                            else:
                                fired = rel.kind == "fresh" and float(rel.counts[bins].sum()) > above
                            if fired:
                                alarms.append(t)
                        out = res[mode]
                        out["false"] += sum(1 for t in alarms if t < t0)
                        hits = [t for t in alarms if t >= t0]
                        if hits:
                            out["hit"] += 1
                            out["delays"].append(hits[0] - t0)
                for mode, out in res.items():
                    rows.append({"comparison": "private-vs-waiting", "epsilon": eps, "decision": decision,
                                 "rise": rise, "mode": mode, "runs": runs, "detected": round(out["hit"] / runs, 3),
                                 "median_delay": None if not out["delays"] else float(np.median(out["delays"])),
                                 "false_alarms_per_run": round(out["false"] / runs, 3)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--streams", default="census,traffic,daily")
    ap.add_argument("--quick", action="store_true", help="2 runs, ε 1, rise 0.5, duration 3 (a smoke test)")
    ap.add_argument("--private", action="store_true",
                    help="instead: a private threshold alert against waiting for the next fresh release")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    eps, rises, durs, runs = ((1.0,), (0.5,), (3,), 2) if args.quick else (EPSILONS, RISES, DURATIONS, args.runs)
    if args.private:
        rows = private_vs_waiting(2 if args.quick else args.runs)
    else:
        rows = [row for name in args.streams.split(",") for row in measure(name, runs, eps, rises, durs)]
    print(json.dumps({"benchmark": "alerts", "rows": rows, "seconds": round(time.perf_counter() - started, 1)},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
