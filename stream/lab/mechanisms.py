"""``dpstream evaluate --mechanisms``: release mechanisms side by side on range and marginal queries (issue 15).

The decision-method evaluation (:mod:`stream.lab.evaluate`) steps the engine,
which needs the full histogram of every timestep. Over a high-dimensional
domain (10⁶–10¹² cells) that histogram does not fit, and the mechanisms this
module compares do not need it: DPCopula (:class:`histogram.copula.DPCopula`)
and DP k-way marginals (:class:`histogram.marginals.KWayMarginals`) release
from the record table, and answer queries from their model. So this path keeps
the *records* of every timestep (:func:`stream.lab.inputs.load_records`: the service's CSV
reader, row validation, windowing and contribution bounding, as
:func:`stream.lab.inputs.load_truth`, without an engine) and computes the
true answers from them. LPA and PSD need the histogram: they are built from
the records only when the domain has at most ``max_cells`` cells, and skipped
(with the reason in the result) otherwise.

Every mechanism runs behind the service's own engine (:func:`_run_engine`, the one run primitive
here): ``schedule`` is the decision method in front of it, stepped as ``release.decision`` in
``settings.engine()`` with ``release.mechanism`` the service's form of the lab mechanism. The
schedules ``fixed`` (:class:`controller.policies.baselines.FixedPolicy`: ε/C every ``⌈w/C⌉``
timesteps under w-event, every ``N // C`` under user-level, at most C releases) and ``uniform``
(ε/w, or ε/N, every timestep) are public and data-independent: every run and mechanism gets the
same one, reported as ``schedule.fresh_epsilon``. With ``schedule`` one of :data:`ENGINE_DECISIONS`
the decision is data-dependent (DSAT/DSFT with their distance test in the mechanism's decision
space). Either way the engine charges its accountant before any noise is drawn, is stepped on
what the service steps on — the bounded records (:class:`histogram.records.RecordTable`) for a
model, the histogram for LPA and PSD (only where it fits, ``max_cells``) — with the drawers
``dpstream replay --seed seed+r`` uses for run ``r``, and the lab answers the queries from the very
model the engine released, with the query API's own answerers (:mod:`histogram.model_query`: what a
dashboard gets from the release message; k-way R = 1 with ``independent=True``, its one-way tables
taken as independent for wider queries); between fresh releases the last one is republished (its answers are
compared with the current truth). The synthetic samples the models answer wide boxes with use
their own drawers (``synthetic/<mechanism>``).

Queries (public, :func:`stream.lab.highdim.query_workload`): ``queries`` random
boxes of each kind ``range1``, ``range2``, ``range3`` (1, 2, 3 constrained
attributes) and ``range_all`` (every attribute constrained), and every 1-way
(``marg1``) and 2-way (``marg2``) marginal. Metrics per kind, averaged over
timesteps and runs: mean absolute error of the box counts (records) and their
mean relative error with the sanity bound; for marginals the L1 error of the
table divided by the number of records (0 = exact, 2 = disjoint).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from controller.runs import step_run
from histogram.model_query import Answer, CopulaAnswers, CountsAnswers, TablesAnswers
from histogram.noise import Randomness
from histogram.records import RecordTable
from stream.config import Settings
from stream.lab.errors import EvaluationError
from stream.lab.inputs import RecordTruth
from stream.lab.metrics import summarise

__all__ = [
    "MECHANISMS",
    "QUERY_KINDS",
    "evaluate_mechanisms",
    "parse_mechanisms",
]

#: what each ``--mechanisms`` name releases
MECHANISMS: dict[str, str] = {
    "lpa": "Laplace on every cell of the full histogram (needs the histogram)",
    "psd": "private spatial decomposition over the full histogram (needs the histogram; release.psd options)",
    "copula": "DPCopula, Kendall's tau (the paper's main variant), n0 = 0.9 x privacy.population",
    "copula-kendall": "DPCopula, Kendall's tau, n0 = 0.9 x privacy.population",
    "copula-mle": "DPCopula, subsample-and-aggregate normal-scores correlation (20 parts)",
    "copula-median": "DPCopula, noisy median-split 2x2 tables (seed 001's Bayes posterior mean)",
    "marginals": "DP k-way marginals, all tables up to R = 2, consistent, Bayesian-network synthesis",
    "marginals-1": "DP k-way marginals, R = 1",
    "marginals-2": "DP k-way marginals, R = 2",
    "marginals-3": "DP k-way marginals, R = 3",
}
HISTOGRAM_MECHANISMS = frozenset({"lpa", "psd"})
QUERY_KINDS = ("range1", "range2", "range3", "range_all", "marg1", "marg2")
SCHEDULES = ("fixed", "uniform")
#: data-dependent decisions that may run in front of a mechanism: the service's own engine decides
#: (its distance test on the mechanism's decision space, ``docs/privacy.md`` §11.4), on the records
#: of every timestep for a model, on the histogram for LPA and PSD (at most ``max_cells`` cells)
ENGINE_DECISIONS = ("dsat", "dsft")
DEFAULT_MAX_CELLS = 2_000_000  # PSD peaked at 12 GiB RSS on 1.7M cells (docs/results.md, issue 15)
DEFAULT_SYNTHETIC = 100_000


def parse_mechanisms(text: str) -> list[str]:
    """``"lpa,copula"`` → ``["lpa", "copula"]`` (known names, no repeats)."""
    names = [m.strip().lower() for m in text.split(",") if m.strip()]
    if not names:
        raise EvaluationError("--mechanisms is empty: list at least one of " + ", ".join(MECHANISMS))
    unknown = [m for m in names if m not in MECHANISMS]
    if unknown:
        raise EvaluationError(f"unknown mechanism(s) {', '.join(unknown)}: choose from {', '.join(MECHANISMS)}")
    if len(set(names)) != len(names):
        raise EvaluationError(f"--mechanisms lists a mechanism twice: {','.join(names)}")
    return names


# -- the true answers ---------------------------------------------------------------


def _table(x: np.ndarray, levels: tuple[int, ...], attrs: tuple[int, ...]) -> np.ndarray:
    shape = tuple(levels[a] for a in attrs)
    flat = np.ravel_multi_index(tuple(x[:, a] for a in attrs), shape) if x.shape[0] else np.zeros(0, np.int64)
    return np.bincount(flat, minlength=math.prod(shape)).reshape(shape).astype(np.float64)


def _box_counts(x: np.ndarray, levels: tuple[int, ...], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Exact number of records in each box (``lo``, ``hi``: ``(q, m)``, inclusive), from the records."""
    top = np.asarray(levels) - 1
    out = np.empty(lo.shape[0], dtype=np.float64)
    for q in range(lo.shape[0]):
        inside = np.ones(x.shape[0], dtype=bool)
        for j in np.flatnonzero((lo[q] > 0) | (hi[q] < top)):
            inside &= (x[:, j] >= lo[q, j]) & (x[:, j] <= hi[q, j])
        out[q] = float(inside.sum())
    return out


@dataclass(frozen=True)
class _Truth:
    boxes: dict[str, np.ndarray]
    marginals: dict[tuple[int, ...], np.ndarray]
    n: int


def _truth(x: np.ndarray, levels: tuple[int, ...], workload: dict[str, tuple[np.ndarray, np.ndarray]],
           pairs: Sequence[tuple[int, ...]]) -> _Truth:
    boxes = {k: _box_counts(x, levels, lo, hi) for k, (lo, hi) in workload.items()}
    margs = {a: _table(x, levels, a) for a in pairs}
    return _Truth(boxes, margs, int(x.shape[0]))


# -- one release and its answers ----------------------------------------------------


class _Zeros:
    """Before the first release: nothing published, every answer 0."""

    def __init__(self, levels: tuple[int, ...]) -> None:
        self.levels = levels

    def box(self, lo, hi) -> Answer:
        return Answer(0.0, "nothing published")

    def marginal(self, attrs) -> Answer:
        return Answer(np.zeros(tuple(self.levels[a] for a in attrs)), "nothing published")


#: what answers the workload from one release: the query API's own answerers
#: (:mod:`histogram.model_query`, what a dashboard gets from the release message), or nothing yet
_Answers = CountsAnswers | CopulaAnswers | TablesAnswers | _Zeros


def _kway_answers(rel: Any, synthetic: np.ndarray | None, levels: tuple[int, ...]) -> TablesAnswers:
    """A k-way release's tables; with R = 1 (no synthetic sample) wider queries take the attributes
    as independent (:attr:`TablesAnswers.independent`)."""
    return TablesAnswers(levels, rel.tables, synthetic, independent=True)


def _check_order(name: str, levels: tuple[int, ...]) -> None:
    """``marginals-R`` needs at most as many attributes as the domain has."""
    if name not in HISTOGRAM_MECHANISMS and not name.startswith("copula"):
        order = int(name.partition("-")[2] or 2)
        if order > len(levels):
            raise EvaluationError(f"{name}: R = {order} is more than the {len(levels)} attributes of the domain")


# -- the engine: a decision method (a schedule or DSAT/DSFT) in front of the mechanism ----


class _Recorder:
    """Stands in for a mechanism's DPCopula / KWayMarginals and keeps its last release, so the lab
    answers queries from the model the engine published (not from its rounded message)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.last: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def release(self, *args: Any, **kwargs: Any) -> Any:
        self.last = self.inner.release(*args, **kwargs)
        return self.last


def engine_settings(settings: Settings, name: str, decision: str) -> Settings:
    """``settings`` with ``release.decision`` = ``decision`` and ``release.mechanism`` = the service's
    form of lab mechanism ``name`` (the copula with the lab's public floor n₀ = 0.9 × population)."""

    release: dict[str, Any] = {"decision": decision, "copula": None, "marginals": None}
    if name in HISTOGRAM_MECHANISMS:
        release["mechanism"] = name
    elif name.startswith("copula"):
        pop = settings.privacy.population
        release.update(mechanism="copula", copula={"correlation": name.partition("-")[2] or "kendall",
                                                   "min_records": max(2, (9 * pop) // 10) if pop else 100})
    else:
        release.update(mechanism="marginals", marginals={"k": int(name.partition("-")[2] or 2)})
    return settings.with_changes({"release": release})


@dataclass
class _Run:
    """One run of a mechanism (behind a schedule or the engine's decision): what it published at
    each timestep, and its ledger's figures."""

    published: list[_Published]
    kinds: list[str]
    models: list[Any]
    fresh: int
    epsilon_spent: Fraction
    max_window_spend: Fraction
    seconds: float
    epsilons: list[Fraction | None] = field(default_factory=list)  # ε of each timestep's fresh release


def _run_engine(settings: Settings, name: str, decision: str, truth: RecordTruth, workload, tables,
                rnd: Randomness, synthetic: int, progress: Callable[[int], None] | None = None) -> _Run:
    """Step the service's engine (``decision``, a schedule or DSAT/DSFT, in front of mechanism
    ``name``; :func:`controller.runs.step_run`) over what the service steps on (the records for a model, the histogram for LPA/PSD)
    with ``replay``'s drawers; answers from each fresh release's own model."""
    from dataclasses import replace

    from stream.config.building import build_engine

    s = engine_settings(settings, name, decision)
    levels = truth.levels
    cells = math.prod(levels)
    mech: Any = s.mechanism()
    recorder = None
    if name.startswith("copula"):
        recorder = _Recorder(mech.copula)
        mech = replace(mech, copula=recorder)
    elif name not in HISTOGRAM_MECHANISMS:
        recorder = _Recorder(mech.kway)
        mech = replace(mech, kway=recorder)
    engine = build_engine(s, mechanism=mech)
    stream_id = s.stream.id
    published = _publish(_Zeros(levels), workload, tables)
    out = _Run([], [], [], 0, Fraction(0), Fraction(0), 0.0)
    clock = [0.0]  # CPU time when the step started (after its input was built)

    def data_at(t: int, _state: Any) -> Any:
        x = truth.records[t]
        flat = np.ravel_multi_index(tuple(x.T), levels) if x.shape[0] else np.zeros(0, np.int64)
        # what the service steps on (stream.pipeline): a model's bounded records, else the histogram
        data = (np.bincount(flat, minlength=cells).astype(np.int64) if recorder is None
                else RecordTable.from_cells(flat, levels))
        clock[0] = time.process_time()
        return data

    for t, release, _ in step_run(engine, data_at, lambda t: rnd.drawer(stream_id, t, "release"),
                                  timesteps=truth.timesteps):
        start = clock[0]
        model = None
        if release.kind == "fresh":
            syn = rnd.drawer(stream_id, t, f"synthetic/{name}")
            if recorder is None:
                answers: _Answers = CountsAnswers(np.asarray(release.counts), levels)
            elif name.startswith("copula"):
                model = recorder.last.model
                answers = CopulaAnswers(model, model.sample(synthetic, syn))
            else:
                model = recorder.last
                answers = _kway_answers(model, model.synthesize(synthetic, syn) if model.max_order >= 2 else None,
                                       levels)
            published = _publish(answers, workload, tables)
            out.fresh += 1
        out.seconds += time.process_time() - start
        out.published.append(published)
        out.kinds.append(release.kind)
        out.models.append(model)
        out.epsilons.append(Fraction(release.epsilon_release) if release.kind == "fresh" else None)
        window = release.window_spend if release.window_spend is not None else release.epsilon_spent
        out.max_window_spend = max(out.max_window_spend, Fraction(window))
        out.epsilon_spent = Fraction(release.epsilon_spent)
        if progress is not None:
            progress(1)
    return out


# -- the evaluation -----------------------------------------------------------------


@dataclass(frozen=True)
class _Published:
    """Every answer of one release to the workload (computed once, reused while it is republished)."""

    boxes: dict[str, np.ndarray]
    marginals: dict[tuple[int, ...], np.ndarray]


def _publish(ans: _Answers, workload, tables) -> _Published:
    boxes = {kind: np.array([ans.box(lo[q], hi[q]).value for q in range(lo.shape[0])])
             for kind, (lo, hi) in workload.items()}
    return _Published(boxes, {a: np.asarray(ans.marginal(a).value, dtype=np.float64) for a in tables})


def _errors(pub: _Published, truth: _Truth, workload, sanity: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for kind in workload:
        err = np.abs(pub.boxes[kind] - truth.boxes[kind])
        out[f"{kind}_abs"] = float(err.mean())
        out[f"{kind}_rel"] = float((err / np.maximum(sanity, truth.boxes[kind])).mean())
    n = max(1, truth.n)
    for order in (1, 2):
        tables = [a for a in truth.marginals if len(a) == order]
        if tables:
            out[f"marg{order}"] = float(np.mean([np.abs(pub.marginals[a] - truth.marginals[a]).sum() / n
                                                 for a in tables]))
    return out


def zero_release(truths: Sequence[_Truth], workload, levels: tuple[int, ...], tables, sanity: float) -> dict[str, float]:
    """The errors of publishing nothing (every answer 0) at every timestep: private at any ε (ε = 0).

    A mechanism whose error is not below this one's is no better than releasing nothing."""
    zero = _publish(_Zeros(levels), workload, tables)
    sums: dict[str, float] = {}
    series: dict[str, list[float]] = {}
    for tr in truths:
        for k, v in _errors(zero, tr, workload, sanity).items():
            sums[k] = sums.get(k, 0.0) + v
            series.setdefault(k, []).append(round(v, 6))
    return {**{k: v / max(1, len(truths)) for k, v in sums.items()}, "per_timestep": series}


def evaluate_mechanisms(
    settings: Settings,
    truth: RecordTruth,
    mechanisms: Sequence[str],
    *,
    runs: int = 3,
    queries: int = 200,
    seed: int = 0,
    sanity: float = 1.0,
    schedule: str = "fixed",
    max_cells: int = DEFAULT_MAX_CELLS,
    synthetic: int = DEFAULT_SYNTHETIC,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Every mechanism, ``runs`` times, on the same records, queries, schedule and ε (the JSON result)."""
    from stream.lab.highdim import query_workload

    names = parse_mechanisms(",".join(mechanisms)) if not isinstance(mechanisms, str) else parse_mechanisms(mechanisms)
    if schedule not in (*SCHEDULES, *ENGINE_DECISIONS):
        raise EvaluationError(f"the schedule must be one of {', '.join((*SCHEDULES, *ENGINE_DECISIONS))}, "
                              f"got {schedule!r}")
    engine_path = schedule in ENGINE_DECISIONS
    if runs < 1 or queries < 1 or synthetic < 1:
        raise EvaluationError("--runs, --queries and the synthetic sample size must be >= 1")
    levels = truth.levels
    cells = math.prod(levels)
    workload = query_workload(levels, queries, seed)
    m = len(levels)
    tables = [(j,) for j in range(m)] + list(combinations(range(m), 2))
    truths = [_truth(x, levels, workload, tables) for x in truth.records]
    plan: list[Fraction | None] | None = None  # the public schedule, from the first run (the same in every run)
    methods: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for name in names:
        if name in HISTOGRAM_MECHANISMS and cells > max_cells:
            skipped[name] = (f"the domain has {cells:,} cells, more than --max-cells {max_cells:,}: {name} needs "
                             "the full histogram (raise --max-cells if it fits in memory)")
            continue
        _check_order(name, levels)
        per_run = []
        series: dict[str, np.ndarray] = {}  # per-timestep errors, summed over runs (averaged below)
        fresh_at = np.zeros(truth.timesteps)
        for r in range(runs):
            run = _run_engine(settings, name, schedule, truth, workload, tables, Randomness.seeded(seed + r),
                              synthetic, progress)
            if not engine_path and plan is None:
                plan = run.epsilons
            sums: dict[str, float] = {}
            for t, pub in enumerate(run.published):
                for k, v in _errors(pub, truths[t], workload, sanity).items():
                    sums[k] = sums.get(k, 0.0) + v
                    series.setdefault(k, np.zeros(truth.timesteps))[t] += v
            fresh_at += np.asarray([kind == "fresh" for kind in run.kinds], dtype=float)
            row = {k: v / truth.timesteps for k, v in sums.items()}
            row.update(fresh_releases=float(run.fresh), epsilon_spent=float(run.epsilon_spent),
                       max_window_spend=float(run.max_window_spend),
                       cpu_seconds_per_release=run.seconds / max(1, run.fresh))
            per_run.append(row)
        methods[name] = {**summarise(per_run, settings.release.confidence), "what": MECHANISMS[name],
                         # accuracy over time: each timestep's error and share of fresh releases, mean over runs
                         "per_timestep": {**{k: [round(float(v) / runs, 6) for v in vals] for k, vals in series.items()},
                                          "fresh_share": [round(float(v) / runs, 6) for v in fresh_at]}}
    result: dict[str, Any] = {
        "mode": "mechanisms",
        "timesteps": truth.timesteps,
        "cells": cells,
        "attributes": m,
        "records_per_timestep": float(np.mean([x.shape[0] for x in truth.records])),
        "runs": runs,
        "queries_per_kind": queries,
        "schedule": {"name": schedule, "fresh_epsilon": None if plan is None else
                     [None if e is None else str(e) for e in plan],
                     **({"decided_by": "the service's engine (data-dependent; ε per release in each run)"}
                        if engine_path else {})},
        "methods": methods,
        "skipped": skipped,
        "references": {"zero-release": {**zero_release(truths, workload, levels, tables, sanity), "private": True,
                                        "what": "publish nothing: every answer 0 (uses no data, ε = 0)"}},
    }
    if "lpa" in methods:
        lpa = methods["lpa"]
        keys = [f"{k}_abs" for k in workload] + ["marg1", "marg2"]
        result["ratio_to_lpa"] = {
            name: {k: (None if not lpa.get(k) or row.get(k) is None else row[k] / lpa[k]) for k in keys}
            for name, row in methods.items()
        }
    return result


def mechanisms_table(result: dict[str, Any]) -> str:
    """A plain-text table of the main errors (one row per mechanism)."""
    kinds = [k for k in ("range1_abs", "range2_abs", "range3_abs", "range_all_abs", "marg1", "marg2")
             if any(k in row for row in result["methods"].values())]
    head = ["mechanism", *kinds, "fresh", "eps"]
    rows = [head]
    for name, row in result["methods"].items():
        rows.append([name, *(f"{row[k]:.4g}" if row.get(k) is not None else "-" for k in kinds),
                     f"{row['fresh_releases']:.0f}", f"{row['epsilon_spent']:.4g}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    zero = result.get("references", {}).get("zero-release")
    if zero:
        cells = ["zero-release", *(f"{zero[k]:.4g}" if zero.get(k) is not None else "-" for k in kinds), "0", "0"]
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))
    for name, why in result.get("skipped", {}).items():
        lines.append(f"{name}: skipped: {why}")
    return "\n".join(lines)


def plot_mechanisms(result: dict[str, Any], path: str | Path, *, title: str = "", relative_to: str = "lpa") -> None:
    """Bars of each mechanism's error per query kind, divided by LPA's (``relative_to="lpa"``, when LPA
    ran) or by the zero release's (``"zero-release"``, log scale); absolute errors otherwise."""
    from stream.lab.plot import _pyplot

    plt = _pyplot()
    kinds = [k for k in ("range1_abs", "range2_abs", "range3_abs", "range_all_abs", "marg1", "marg2")
             if any(row.get(k) is not None for row in result["methods"].values())]
    names = list(result["methods"])
    base: dict[str, Any] | None = None
    if relative_to == "lpa" and "lpa" in result["methods"]:
        base = result["methods"]["lpa"]
    elif relative_to == "zero-release":
        base = result.get("references", {}).get("zero-release")
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(kinds), 4.0))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        row = result["methods"][name]
        vals = [(row[k] / base[k] if base and base.get(k) else row[k]) or 0.0 for k in kinds]
        xs = np.arange(len(kinds)) + (i - (len(names) - 1) / 2) * width
        ax.bar(xs, vals, width, label=name)
    ax.set_xticks(np.arange(len(kinds)))
    ax.set_xticklabels([k.replace("_abs", "") for k in kinds])
    if base is not None and relative_to == "lpa":
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(0.5, color="grey", linewidth=0.8, linestyle="--")
        ax.set_ylabel("error / LPA's error")
    elif base is not None:
        ax.set_yscale("log")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel("error / zero release's error (log)")
    else:
        ax.set_ylabel("mean error")
    ax.set_title(title or f"{result['attributes']} attributes, {result['cells']:,} cells", fontsize=9)
    ax.legend(fontsize=7, ncol=min(len(names), 4), loc="upper center", bbox_to_anchor=(0.5, -0.1), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
