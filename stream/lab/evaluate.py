"""Offline evaluation: every method, R times, on the same true histograms.

``dpstream evaluate`` answers "what would each method have published on my
data, and how wrong would it have been?" It runs the service's release path:

1. the input is windowed once into true per-timestep histograms with the
   service's own reader, windowing and contribution bounding
   (:func:`stream.lab.inputs.load_truth`; a counts file is taken as already aggregated);
2. for each method, the configuration is re-validated with only
   ``release.decision`` changed, and ``settings.engine()`` is stepped over the
   timesteps with ``Engine.step``, drawing noise from
   ``Randomness.seeded(seed + r)`` for run ``r`` (the drawer of timestep
   ``t`` is ``drawer(stream.id, t)``, as the service draws it; ``dpstream
   replay --seed seed+r`` reproduces run ``r`` bit for bit) — or, for the
   methods of the lab fast paths below, the same decisions are made by an
   evaluation-only re-implementation over all runs at once;
3. each release is compared with the truth (:mod:`stream.lab.metrics`).

**Lab fast paths (evaluation only).** Under w-event privacy with LPA (every method) the runs
are not stepped one by one: :func:`stream.lab.vectorised.run_vectorised` runs all R runs of a
method in one array pass per timestep, with each run's state a row of an array and the window
ledger exact in whole units of ε (:class:`controller.ledger.UnitLedger`). Its noise is the same exact sampler
drawn in blocks, so the runs have the engine's distribution but not its values: ``replay --seed``
does not reproduce them. ``replayable=True`` (``evaluate --replayable``) is the same path with
another noise source: :class:`stream.lab.vectorised.EngineNoise`, the engine's own drawers
(``Randomness.seeded(seed + r).drawer(stream.id, t, "release")`` in the engine's call order), so
run ``r`` publishes what ``dpstream replay --seed seed+r`` publishes, bit for bit
(``tests/stream/lab/test_vectorised.py`` checks every kernel against the engine that way). The service never uses these paths. Smoothed
variants (``+kalman``, ``+ewma``) and other post-processors than ``none``/``nonnegative`` keep
the engine path.

Otherwise (user-level privacy, smoothed variants), methods whose decisions read neither data
nor noise (:data:`DATA_INDEPENDENT`: uniform, fixed) with LPA take a faster path (:func:`run_fast`): run 0 is the
engine's own run as above (decisions and every ε figure from its accountant),
and the other runs reuse those decisions and draw their noise in one array
pass with the same exact sampler: the same distribution as stepping the engine,
not the same values, so ``replay --seed seed+r`` reproduces run ``r`` of these
methods only for ``r = 0``. Methods run in parallel processes (``jobs``); the
result does not depend on how many.

The optional non-private "-true" versions (thesis §4.5.2: DSAT-true,
fixed-true) repeat each private run's fresh/republished decisions with the
exact histograms instead of noisy ones: their error is the update error of
those decisions alone.

Result (JSON-ready dict)::

    {"timesteps", "bins", "runs", "queries",
     "methods": {NAME: {"mae", "mre", "query_abs_error", "query_rel_error",
                        "fresh_releases", "epsilon_spent", "max_window_spend",
                        and NAME_ci = [lo, hi] for each}}}

``epsilon_spent`` is the total ε charged over the whole evaluated stream;
``max_window_spend`` the largest ε charged in any window of ``w`` timesteps
(w-event), or the total (user-level: the horizon is the one window). ``-true``
entries have ``null`` ε (they are not private).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from controller.method import METHODS
from histogram.noise import Randomness
from histogram.postprocess import POSTPROCESSORS, parse_chain, postprocess
from stream.config import Settings
from stream.lab.errors import EvaluationError, InputError
from stream.lab.metrics import Workload, stream_errors, summarise
from stream.lab.runs import RunTrace, check_methods, run_method, split_method

__all__ = [
    "EvaluationError",
    "parse_methods",
    "check_methods",
    "run_method",
    "evaluate",
    "evaluate_settings",
]

METRICS = (
    "mae",
    "mre",
    "query_abs_error",
    "query_rel_error",
    "fresh_releases",
    "epsilon_spent",
    "max_window_spend",
)




def parse_methods(text: str | Sequence[str]) -> list[str]:
    """``"dsat,dsft+nonnegative,uniform"`` → ``["dsat", "dsft+nonnegative", "uniform"]`` (checked,
    no repeats). ``+<chain>`` evaluates the method with that ``release.postprocess`` chain."""
    items = text.split(",") if isinstance(text, str) else list(text)
    names = [m.strip().lower() for m in items if m.strip()]
    if not names:
        raise EvaluationError("--methods is empty: list at least one of " + ", ".join(METHODS))
    unknown = [m for m in names if split_method(m)[0] not in (*METHODS, "auto")]
    if unknown:
        raise EvaluationError(f"unknown method(s) {', '.join(unknown)}: choose from {', '.join(METHODS)}, auto")
    if any(split_method(m)[0] == "auto" and split_method(m)[1] for m in names):
        raise EvaluationError("auto chooses its own post-processing: list it as 'auto', without '+'")
    for m in names:
        post = split_method(m)[1]
        try:
            parse_chain(post)
        except ValueError as exc:
            raise EvaluationError(f"--methods {m}: {exc} (after '+', steps from "
                                  f"{', '.join(POSTPROCESSORS[1:])})") from None
    if len(set(names)) != len(names):
        raise EvaluationError(f"--methods lists a method twice: {','.join(names)}")
    return names


#: Methods whose decisions read neither the data nor the noise (thesis §4.1.4: they "spend only on
#: publications"): every run makes the same decisions and spends the same ε, so the runs can share
#: one engine run's schedule and draw their noise in one array pass (:func:`run_fast`).
DATA_INDEPENDENT: frozenset[str] = frozenset({"uniform", "fixed", "sample"})


def re_planned(settings: Settings) -> bool:
    """``release.planner.online`` is set: the method may change mid-stream, so every run steps the engine."""
    return settings.release.planner is not None and settings.release.planner.online is not None


def fast_eligible(settings: Settings) -> bool:
    """Whether :func:`run_fast` applies: a data-independent decision method with LPA (not delayed, not
    re-planned)."""
    return (settings.release.decision in DATA_INDEPENDENT and settings.release.mechanism == "lpa"
            and not settings.release.delay and not re_planned(settings))


def run_fast(
    settings: Settings,
    workload: Workload,
    seed: int,
    runs: int,
    *,
    name: str = "",
    tick: Callable[[int], None] | None = None,
) -> list[RunTrace]:
    """``runs`` runs of a data-independent method: run 0 is the engine's own run, the others reuse
    its decisions and ε and draw their noise in one pass.

    Run 0 steps ``settings.engine()`` exactly as :func:`run_method` does (``Randomness.seeded(seed)``,
    bit for bit what ``dpstream replay --seed seed`` publishes), so the decisions and every ε figure
    (``epsilon_spent``, ``max_window_spend``, ``fresh_releases``) come from the engine's accountant.
    The decisions of these methods depend on neither data nor noise, so every other run makes the
    same ones and spends the same ε. Their noisy counts are ``true + DLap(Δ/ε)`` per bin and fresh
    timestep, as LPA releases them, drawn by the same exact sampler (one seeded drawer per
    evaluation, keyed apart from the release drawers) for all runs and timesteps at once: the same
    distribution as stepping the engine ``runs`` times, not the same values
    (``tests/stream/lab/test_fast_lab.py`` compares the two).
    """
    first = run_method(settings, workload, Randomness.seeded(seed), tick=tick)
    if runs == 1:
        return [first]
    mech = settings.mechanism()
    post = settings.postprocessor()
    fresh_ts = sorted(first.epsilons)
    rest = runs - 1
    noisy = np.empty((rest, len(fresh_ts), workload.bins), dtype=np.int64)
    drawer = Randomness.seeded(seed).drawer(settings.stream.id, 0, f"lab-fast:{name or settings.release.decision}")
    by_scale: dict[Fraction, list[int]] = {}
    for i, t in enumerate(fresh_ts):
        by_scale.setdefault(Fraction(mech.scale(first.epsilons[t])), []).append(i)  # type: ignore[attr-defined]
    for scale, idx in by_scale.items():
        rows = np.asarray(idx, dtype=np.int64)
        z = drawer.discrete_laplace(scale, rest * rows.size * workload.bins)
        noisy[:, rows, :] = workload.truth[np.asarray(fresh_ts, dtype=np.int64)[rows]][None] + np.asarray(z).reshape(
            rest, rows.size, workload.bins)
    released = noisy if post.stateful else postprocess(post.text, noisy)
    pos = {t: i for i, t in enumerate(fresh_ts)}
    src_index = np.asarray([-1 if s is None else pos[s] for s in first.sources], dtype=np.int64)
    traces = [first]
    fixed = {k: first.metrics[k] for k in ("fresh_releases", "epsilon_spent", "max_window_spend")}
    smoothed = None
    if post.stateful:  # sequential in time, one array pass over all runs at each timestep
        state = post.initial()
        widths = {t: float(mech.half_width(first.epsilons[t])) for t in fresh_ts}  # type: ignore[attr-defined]
        smoothed = np.zeros((rest, workload.timesteps, workload.bins))
        last_width = 0.0
        for t, i in enumerate(src_index.tolist()):
            if i < 0:
                continue  # the all-zero placeholder before the first release stays zero
            fresh = first.sources[t] == t
            last_width = widths[t] if fresh else last_width
            out, state = post.apply(state, released[:, i, :], np.float64(last_width), settings.release.confidence,
                                    fresh)
            smoothed[:, t, :] = out.counts
    if smoothed is None:  # row -1 of each run's table: the all-zero placeholder before the first release
        table = np.concatenate([released.astype(np.float64), np.zeros((rest, 1, workload.bins))], axis=1)
        smoothed = table[:, src_index]
    per_run = stream_errors(workload, smoothed)
    for r in range(rest):
        traces.append(RunTrace({**per_run[r], **fixed}, first.sources, first.epsilons))
        if tick is not None:
            tick(workload.timesteps)
    return traces


def true_version(workload: Workload, sources: Sequence[int | None]) -> dict[str, float | None]:
    """Metrics of the same decisions with exact (noise-free) histograms: the update error."""
    published = np.stack([np.zeros(workload.bins) if src is None else workload.truth[src] for src in sources])
    out: dict[str, float | None] = dict(stream_errors(workload, published)[0])
    out["fresh_releases"] = float(len({s for s in sources if s is not None}))
    out["epsilon_spent"] = None
    out["max_window_spend"] = None
    return out


#: The reference rows every evaluation carries (``result["references"]``), what each is, and
#: whether it is private. A mechanism worse than ``zero-release`` is worse than publishing nothing.
REFERENCES: dict[str, str] = {
    "zero-release": "publish all zeros at every timestep: uses no data, so it is private at any ε (ε = 0)",
    "previous-true": "NON-PRIVATE: publish the exact histogram of the previous timestep (zeros at the first); "
                     "how well 'no noise, one step stale' would do, for scale only",
}


def reference_rows(workload: Workload) -> dict[str, dict[str, Any]]:
    """The :data:`REFERENCES` on ``workload``: deterministic (no noise), so one run each.

    The :class:`stream.lab.metrics.RunErrors` figures of publishing all zeros, and the previous
    timestep's exact histogram (zeros at the first); without queries their query figures are None."""
    w = workload
    zeros = np.zeros((1, w.bins), dtype=np.int64)
    previous = np.vstack([zeros, w.truth[:-1]])
    out: dict[str, dict[str, Any]] = {}
    for name, published, private in (("zero-release", np.zeros_like(w.truth), True),
                                     ("previous-true", previous, False)):
        metrics: dict[str, Any] = dict(stream_errors(w, published)[0])
        if not w.query_count:
            metrics["query_abs_error"] = metrics["query_rel_error"] = None
        out[name] = {**metrics, "private": private, "what": REFERENCES[name]}
    return out


def worse_than_zero(result: Mapping[str, Any]) -> list[str]:
    """Methods whose mean MAE is above the zero release's: they publish worse than nothing."""
    zero = result.get("references", {}).get("zero-release", {}).get("mae")
    if zero is None:
        return []
    return [name for name, m in result.get("methods", {}).items()
            if not name.endswith("-true") and m.get("mae") is not None and m["mae"] > zero]


def _progress(total: int, enabled: bool | None, desc: str, unit: str = "step") -> Any:
    """A progress bar on stderr: on a terminal (``enabled=None``) or when asked; quiet otherwise."""
    from stream.lab.progress import progress_bar

    return progress_bar(total, enabled, desc, unit)


def _jobs(jobs: int | None, methods: int) -> int:
    import os

    if jobs is None:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if jobs < 1:
        raise EvaluationError(f"--jobs must be >= 1, got {jobs}")
    return max(1, min(jobs, methods))


def _evaluate_method(
    name: str,
    s: Settings,
    workload: Workload,
    runs: int,
    seed: int,
    want_true: bool,
    confidence: float,
    tick: Callable[[int], None] | None,
    replayable: bool = False,
    personal: Any = None,
) -> dict[str, Any]:
    """``{name: summary}`` (and ``{name-true: …}`` when asked) for one method."""
    from stream.lab.vectorised import EngineNoise, PooledNoise, run_vectorised, vector_eligible

    if s.privacy.personal is not None:  # the engine for every run: run r is replay --seed seed+r
        from stream.lab.personal import run_personal

        traces = [run_personal(s, personal, workload, Randomness.seeded(seed + r), tick=tick) for r in range(runs)]
    elif re_planned(s):  # the online planner switches methods: only the engine knows which runs
        traces = [run_method(s, workload, Randomness.seeded(seed + r), tick=tick) for r in range(runs)]
    elif vector_eligible(s):
        # one run path, two noise sources: replayable = the engine's own drawers (run r publishes
        # what replay --seed seed+r publishes), else block draws keyed by the base method ("m" and
        # "m+nonnegative" draw the same noise and make the same decisions)
        noise = (EngineNoise(seed, s.stream.id) if replayable
                 else PooledNoise(seed, s.stream.id, split_method(name)[0]))
        res = run_vectorised(s, workload, runs, noise, tick=tick)
        traces = [RunTrace(res.metrics[r], [None if x < 0 else x for x in res.sources[r].tolist()])
                  for r in range(runs)]
    elif replayable:
        traces = [run_method(s, workload, Randomness.seeded(seed + r), tick=tick) for r in range(runs)]
    elif fast_eligible(s):
        traces = run_fast(s, workload, seed, runs, name=name, tick=tick)
    else:
        traces = [run_method(s, workload, Randomness.seeded(seed + r), tick=tick) for r in range(runs)]
    out = {name: summarise([tr.metrics for tr in traces], confidence)}
    if want_true:
        out[f"{name}-true"] = summarise([true_version(workload, tr.sources) for tr in traces], confidence)
    return out


def evaluate_settings(
    per_method: Mapping[str, Settings],
    workload: Workload,
    *,
    runs: int,
    seed: int,
    true_versions: Iterable[str] = (),
    confidence: float = 0.95,
    progress: bool | None = None,
    desc: str = "evaluate",
    jobs: int | None = 1,
    replayable: bool = False,
    personal: Any = None,
) -> dict[str, Any]:
    """Evaluate already-validated per-method settings on one workload (the JSON result).

    ``jobs``: methods evaluated in parallel processes (``None``: one per core, at most one per
    method). Each method's runs are the same whatever ``jobs`` is (each run's noise is keyed by
    the seed, never by the process), so the result does not depend on it. ``replayable``: draw each
    run's noise from the engine's own drawers (slower), so ``replay --seed seed+r`` reproduces run ``r``."""
    if runs < 1:
        raise EvaluationError(f"--runs must be >= 1, got {runs}")
    if seed < 0:
        raise EvaluationError(f"--seed must be >= 0, got {seed}")
    if workload.timesteps < 1:
        raise EvaluationError("the input has no timesteps: nothing to evaluate")
    true_set = set(true_versions)
    jobs = _jobs(jobs, len(per_method))
    methods: dict[str, Any] = {}
    if jobs > 1:
        # parallel over methods: one process per method at a time; the bar counts finished methods
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        bar = _progress(len(per_method), progress, desc, unit="method")
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        done: dict[str, dict[str, Any]] = {}
        try:
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
                futures = {pool.submit(_evaluate_method, name, s, workload, runs, seed, name in true_set,
                                       confidence, None, replayable, personal): name
                           for name, s in per_method.items()}
                for fut in as_completed(futures):
                    done[futures[fut]] = fut.result()
                    if bar is not None:
                        bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        for name in per_method:  # the listed order, whatever order they finished in
            methods.update(done[name])
    else:
        bar = _progress(len(per_method) * runs * workload.timesteps, progress, desc, unit="timestep")
        tick = bar.update if bar is not None else None
        try:
            for name, s in per_method.items():
                if bar is not None:
                    bar.set_description(f"{desc} {name}")
                methods.update(_evaluate_method(name, s, workload, runs, seed, name in true_set, confidence, tick,
                                                replayable, personal))
        finally:
            if bar is not None:
                bar.close()
    result: dict[str, Any] = {
        "timesteps": workload.timesteps,
        "bins": workload.bins,
        "runs": runs,
        "queries": workload.query_count,
        "methods": methods,
        "references": reference_rows(workload),
    }
    result["worse_than_zero_release"] = worse_than_zero(result)
    return result


def evaluate(
    settings: Settings,
    truth: np.ndarray,
    methods: Sequence[str],
    *,
    runs: int = 10,
    queries: int = 1000,
    seed: int = 0,
    sanity: float = 1.0,
    query_size: int | None = None,
    true_versions: Iterable[str] = (),
    progress: bool | None = None,
    jobs: int | None = 1,
    replayable: bool = False,
    personal: Any = None,
    personal_mechanisms: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Evaluate ``methods`` on the true histograms ``truth`` (``(T, U)`` ints) under ``settings``.

    A personalized stream (``privacy.personal``) needs ``personal``, the routed rows of
    :attr:`stream.lab.inputs.Truth.personal`; ``personal_mechanisms`` (PDP mechanisms) then evaluates every method
    under each of them, as rows ``method@mechanism`` (:mod:`stream.lab.personal`)."""
    names = parse_methods(methods)
    per_method = _personal_methods(settings, names, personal, personal_mechanisms)
    truth = np.asarray(truth)
    bins = settings.domain().size
    if truth.ndim != 2 or truth.shape[1] != bins:
        raise InputError(
            f"the input has {truth.shape[-1] if truth.ndim else 0} bins per timestep but the config's domain has "
            f"{bins}: use the config the data was produced with"
        )
    try:
        workload = Workload.build(
            truth, settings.domain().shape, queries=queries, seed=seed, sanity=sanity, query_size=query_size
        )
    except ValueError as exc:
        raise EvaluationError(str(exc)) from None
    unknown = set(true_versions) - set(names)
    if unknown:
        raise EvaluationError(f"--true lists {', '.join(sorted(unknown))}, which --methods does not")
    true_versions = [row for row in per_method if row.partition("@")[0] in set(true_versions)]
    result = evaluate_settings(
        per_method,
        workload,
        runs=runs,
        seed=seed,
        true_versions=true_versions,
        confidence=settings.release.confidence,
        progress=progress,
        jobs=jobs,
        replayable=replayable,
        personal=personal,
    )
    if "auto" in names:  # why auto chose what it ran (public information only)
        from stream.planning.planner import plan

        result["plan"] = plan(settings).to_json()
    return result


def _personal_methods(settings: Settings, names: Sequence[str], personal: Any,
                      mechanisms: Sequence[str] | None) -> dict[str, Settings]:
    """:func:`check_methods`, and for a personalized stream one row per method and PDP mechanism."""
    if settings.privacy.personal is None:
        if mechanisms:
            raise EvaluationError("--personal compares PDP mechanisms: the configuration has no privacy.personal")
        return check_methods(settings, names)
    from stream.lab.personal import personal_names, with_pdp_mechanism

    if personal is None:
        raise EvaluationError("a personalized stream (privacy.personal) is evaluated from its events file: its "
                              "engine counts each budget tier apart, which a counts file cannot tell")
    variants: dict[str | None, Settings] = {}
    out: dict[str, Settings] = {}
    for row, method, mechanism in personal_names(names, mechanisms):
        if mechanism not in variants:
            variants[mechanism] = settings if mechanism is None else with_pdp_mechanism(settings, mechanism)
        out[row] = check_methods(variants[mechanism], [method])[method]
    return out
