"""The lab's run primitives: per-method settings and one run of a method through the engine.

Everything the lab runs steps :class:`controller.step.Engine` (the service's code):
:func:`run_method` steps it once (:func:`controller.runs.step_run`, the step loop the planner shares) over a workload with the service's noise drawers
(``Randomness.seeded(seed)``; ``dpstream replay --seed seed`` publishes the same), and the
lab's runner (:mod:`stream.lab.runner`) steps the same policies' rules over R runs.
:mod:`stream.lab.evaluate`, :mod:`stream.lab.personal` and :mod:`stream.lab.recommend` import
these from here (none of them imports back from ``evaluate``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from controller.method import W_EVENT_METHODS
from controller.runs import step_run
from histogram.accuracy import RunErrors, Workload
from histogram.noise import Randomness
from stream.config import ConfigError, Settings
from stream.lab.errors import EvaluationError

__all__ = ["EvaluationError", "RunTrace", "check_methods", "run_method", "split_method"]


def split_method(name: str) -> tuple[str, str | None]:
    """``"dsat+nonnegative"`` → ``("dsat", "nonnegative")``; ``"uniform+kalman+nonnegative"`` →
    ``("uniform", "kalman+nonnegative")``; ``"dsat"`` → ``("dsat", None)`` (None: the config's own
    ``release.postprocess``)."""
    base, _, post = name.partition("+")
    return base, (post or None)


def check_methods(settings: Settings, methods: Iterable[str]) -> dict[str, Settings]:
    """Per-method settings; a method that cannot run under this config is a clear error."""
    out: dict[str, Settings] = {}
    unit = settings.privacy.unit
    for m in methods:
        base, post = split_method(m)
        if base == "auto":  # the planner's choice from the configuration alone (stream.planning.planner)
            from stream.planning.planner import PlannerError, auto_method

            try:
                name, planned = auto_method(settings)
            except PlannerError as exc:
                raise EvaluationError(f"method auto: {exc}") from None
            out[name] = planned
            continue
        release: dict[str, Any] = {"decision": base}
        if post is not None:
            release["postprocess"] = post
        try:
            out[m] = settings.with_changes({"release": release})
        except ConfigError as exc:
            text = str(exc)
            if base in W_EVENT_METHODS and unit != "w-event":
                raise EvaluationError(
                    f"method {m} is a w-event mechanism and this config's privacy unit is "
                    f"{unit}: set privacy.unit: w-event and privacy.w, or drop {m} from --methods"
                ) from None
            raise EvaluationError(f"method {m} cannot run with this configuration: {text}") from None
    return out


def _frac_float(x: Fraction | None) -> float:
    return 0.0 if x is None else float(x)


@dataclass
class RunTrace:
    """One run of one method: metrics, the decisions (source timestep per timestep) and the ε of
    each fresh release (by timestep)."""

    metrics: dict[str, float]
    sources: list[int | None]
    epsilons: dict[int, Fraction] = field(default_factory=dict)


def run_method(
    settings: Settings,
    workload: Workload,
    randomness: Randomness,
    *,
    tick: Callable[[int], None] | None = None,
    tick_every: int = 25,
    engine: Any = None,
    inputs: Callable[[int, Any], np.ndarray] | None = None,
) -> RunTrace:
    """Step ``settings.engine()`` over every timestep once; errors against the truth of what the
    service publishes (``release.postprocess`` applied, smoothers included).

    ``engine`` (default ``settings.engine()``) and ``inputs(t, state)`` (default ``workload.truth[t]``):
    what is stepped on what, for engines whose input is not the histogram itself (a personalized
    stream's counts per budget level, :mod:`stream.lab.personal`)."""
    engine = settings.engine() if engine is None else engine
    stream_id = settings.stream.id
    acc = RunErrors(workload)
    placeholder = np.zeros(workload.bins)  # published before the first release
    post = settings.postprocessor()  # what the service would publish (free post-processing)
    post_state = post.initial()
    sources: list[int | None] = []
    epsilons: dict[int, Fraction] = {}
    max_window: Fraction = Fraction(0)
    release = None
    pending = 0
    steps = step_run(engine, workload.truth if inputs is None else inputs,
                     lambda t: randomness.drawer(stream_id, t, "release"), timesteps=workload.timesteps)
    for t, release, _ in steps:
        src = release.source_timestep
        sources.append(src)
        if release.kind == "fresh":
            epsilons[t] = release.epsilon_release
        if src is None:
            acc.add(t, placeholder)
        elif post.delay:  # release.delay: this call gives timestep t - delay's counts (fixed lag)
            out, post_state = post.apply(post_state, release.counts, release.half_width, release.confidence,
                                         release.kind == "fresh")
            if t - post.delay >= 0 and sources[t - post.delay] is not None:
                acc.add(t - post.delay, out.counts)
        else:
            out, post_state = post.apply(post_state, release.counts, release.half_width, release.confidence,
                                         release.kind == "fresh")
            acc.add(t, out.counts)
        window = release.window_spend if release.window_spend is not None else release.epsilon_spent
        if window > max_window:
            max_window = window
        pending += 1
        if tick is not None and pending >= tick_every:
            tick(pending)
            pending = 0
    if tick is not None and pending:
        tick(pending)
    tail = post.pending(post_state, np.shape(release.counts)) if release is not None else None
    for j, counts in enumerate([] if tail is None else tail):  # the last `delay` timesteps, smoothed as far as they go
        t = workload.timesteps - post.delay + j
        if t >= 0 and sources[t] is not None:
            acc.add(t, counts)
    metrics = acc.metrics()[0]
    metrics["fresh_releases"] = float(release.fresh_count) if release else 0.0
    metrics["epsilon_spent"] = _frac_float(release.epsilon_spent if release else None)
    metrics["max_window_spend"] = float(max_window)
    return RunTrace(metrics, sources, epsilons)
