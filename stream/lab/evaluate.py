"""Offline evaluation: every method, R times, on the same true histograms.

``dpstream evaluate`` answers "what would each method have published on my
data, and how wrong would it have been?" It runs the service's release path:

1. the input is windowed once into true per-timestep histograms with the
   service's own reader, windowing and contribution bounding
   (:func:`stream.lab.inputs.load_truth`; a counts file is taken as already aggregated);
2. for each method, the configuration is re-validated with only
   ``release.decision`` changed, and the method is run ``runs`` times on the same truth through
   one of two paths over the service's own code (one dispatch, :func:`_evaluate_method`):
   the runner (:func:`stream.lab.runner.run_many`) steps the policy's own
   ``decide_runs`` over all runs at once, with an exact integer ledger
   (:class:`controller.ledger.UnitLedger`) and LPA's exact sampler; where it cannot go, the engine
   (``settings.engine()``, ``Engine.step``) is stepped once per run with
   ``Randomness.seeded(seed + r)`` (:func:`stream.lab.runs.run_method`);
3. each release is compared with the truth (:class:`histogram.accuracy.RunErrors`).

**Noise source.** The engine path draws from the service's drawers (the drawer of timestep ``t``
is ``drawer(stream.id, t)``, as the service draws it), so ``dpstream replay --seed seed+r``
reproduces run ``r`` bit for bit. The runner by default draws the same exact sampler in blocks
(:class:`stream.lab.noise.PooledNoise`): the engine's distribution, not its values.
``replayable=True`` (``evaluate --replayable``) gives the runner the engine's own drawers
(:class:`stream.lab.noise.EngineNoise`), so its run ``r`` too is what ``replay --seed
seed+r`` publishes (``tests/stream/lab/test_runner.py`` checks every method that way). The
service never uses the runner. Methods run in parallel processes (``jobs``); the result does
not depend on how many.

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
from typing import Any

import numpy as np

from controller.method import METHODS
from histogram.accuracy import Workload, stream_errors
from histogram.noise import Randomness
from histogram.postprocess import POSTPROCESSORS, parse_chain
from stream.config import Settings
from stream.lab.errors import EvaluationError, InputError
from stream.lab.metrics import build_workload, summarise
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

    The :class:`histogram.accuracy.RunErrors` figures of publishing all zeros, and the previous
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
    """``{name: summary}`` (and ``{name-true: …}`` when asked) for one method.

    One dispatch, two run paths over the same engine code:

    * **the runner** (:func:`stream.lab.runner.run_many`) for every configuration it
      covers (:func:`~stream.lab.runner.runner_eligible`: LPA, the w-event methods, user-level
      DSAT, DSFT, uniform and fixed, any ``release.postprocess`` and ``release.delay`` for the methods whose
      runs decide alike): the policies' own ``decide_runs`` over all R runs at once. The noise is a
      choice of source: block draws keyed by the base method by default (:class:`PooledNoise`: "m"
      and "m+nonnegative" draw the same noise and make the same decisions; the engine's law, not
      its values), or with ``replayable`` the engine's own drawers (:class:`EngineNoise`: run r
      publishes what ``dpstream replay --seed seed+r`` publishes);
    * **the engine stepped once per run** (:func:`run_method`, with ``Randomness.seeded(seed + r)``:
      run r is ``replay --seed seed+r`` whatever ``replayable`` says) where the runner cannot go:
      personalized budgets (:mod:`stream.lab.personal`: one sub-stream per budget level), online
      re-planning (the method changes mid-stream, per run), mechanisms other than LPA (PSD, the
      copula, marginals), and a stateful post-processor behind a data-dependent method (its runs release
      fresh at different timesteps, so the filter cannot step them as one stack).
    """
    from stream.lab.noise import EngineNoise, PooledNoise
    from stream.lab.runner import run_many, runner_eligible

    if runner_eligible(s):
        noise = (EngineNoise(seed, s.stream.id) if replayable
                 else PooledNoise(seed, s.stream.id, split_method(name)[0]))
        res = run_many(s, workload, runs, noise, tick=tick)
        traces = [RunTrace(res.metrics[r], [None if x < 0 else x for x in res.sources[r].tolist()])
                  for r in range(runs)]
    elif s.privacy.personal is not None:
        from stream.lab.personal import run_personal

        traces = [run_personal(s, personal, workload, Randomness.seeded(seed + r), tick=tick) for r in range(runs)]
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
        workload = build_workload(
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
