"""The re-plan of ``release.planner.online`` (issue 30 item 4): the planner's choice, re-run on the
stream's own released series.

:class:`controller.online.OnlinePolicy` calls the function :func:`replanner` builds every
``release.planner.online.every`` timesteps with the published series (forward-filled fresh
releases of the last ``release.planner.timesteps`` timesteps) and the ε behind each row. It
treats that series, averaged with the releases' declared noise scales (:func:`scenario_of`),
as the one public scenario (as a declared-public
history, :func:`stream.planning.planner.plan`) and simulates every candidate on it through the
engine, ``release.planner.runs`` seeded runs each, scoring each with the configured
``release.postprocess`` (``none``, ``nonnegative`` or the ``+kalman`` chain). The candidate with
the smallest mean absolute error per bin wins (ties: the candidate's name), unless the current
candidate is within :data:`HYSTERESIS` of it (a switch is not free: the new method waits for the
old one's charges to leave its windows).

**Privacy** (``docs/privacy.md`` §13.1): the input is published values and public configuration
only; the simulation noise is seeded from constants and never published, so the choice is a
deterministic function of the releases (restart = same choice) and costs no ε.

**Bias** (measured in ``docs/results.md``): the scenario is the (averaged) released series, not
the truth: at small ε it is still rougher than the data, and the averaging smooths jumps.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from stream.planning.planner import DISTANCE, NOISE_SEED, Candidate, _simulate

__all__ = ["HYSTERESIS", "candidate_label", "replanner", "scenario_of", "scored_post"]


#: Keep the current candidate unless the best one's simulated error is below ``current / HYSTERESIS``
#: (the planner's tolerance: within 1.1x counts as "as good").
HYSTERESIS = 1.1
#: Rows a scenario row averages (centred), weighted by each row's ε² (inverse noise variance).
SMOOTHING = 5


def scenario_of(series: np.ndarray, epsilons: tuple[Fraction, ...]) -> np.ndarray:
    """The public scenario a re-plan simulates on: the released ``series`` averaged over
    :data:`SMOOTHING` centred rows with weights ε² (a release's discrete Laplace variance is
    ∝ 1/ε², so the weights are its inverse; rows repeating one release repeat its weight), clamped
    at 0 and rounded. Averaging removes most of the release noise the candidates' own simulated
    noise would otherwise be added to; it smears a jump over ``SMOOTHING`` timesteps."""
    x = np.asarray(series, dtype=np.float64)
    weights = np.array([float(e) ** 2 for e in epsilons], dtype=np.float64)
    if weights.size != x.shape[0] or not np.all(weights > 0):
        weights = np.ones(x.shape[0])
    half = SMOOTHING // 2
    out = np.empty_like(x)
    for t in range(x.shape[0]):
        lo, hi = max(0, t - half), min(x.shape[0], t + half + 1)
        w = weights[lo:hi]
        out[t] = (w[:, None] * x[lo:hi]).sum(axis=0) / w.sum()
    return np.rint(np.clip(out, 0, None)).astype(np.int64)


def candidate_label(decision: str, noise_floor: bool | None) -> str:
    """The planner's name of a candidate (:attr:`stream.planning.planner.Candidate.name`)."""
    return Candidate(decision, noise_floor=noise_floor if decision in DISTANCE else None).name


def scored_post(postprocess: str) -> str:
    """The planner's post-processing closest to ``release.postprocess`` (what the re-plan scores)."""
    if "kalman" in postprocess:
        return "kalman"
    return "nonnegative" if "nonnegative" in postprocess else "none"


def _parse(label: str) -> tuple[str, bool | None]:
    decision, _, rest = label.partition("(")
    return decision, (rest.startswith("noise_floor") if decision in DISTANCE else None)


def replanner(settings: Any, labels: tuple[str, ...]) -> Callable[[np.ndarray, tuple[Fraction, ...]], int]:
    """The deterministic re-plan over ``labels`` (candidate names, in the policy's order).

    ``settings``: the stream's settings (``release.planner.online`` set). The candidates' settings
    are built lazily, at the first re-plan, without ``release.planner.online`` (so that loading a
    configuration does not simulate anything)."""
    post = scored_post(settings.release.postprocess)
    runs = settings.release.planner.runs
    cache: dict[str, Any] = {}

    def candidate_settings(label: str) -> Any:
        if label not in cache:
            decision, floor = _parse(label)
            release: dict[str, Any] = {"decision": decision, "planner": {"online": None}}
            if floor is not None:
                release["noise_floor"] = floor
            cache[label] = settings.with_changes({"release": release})
        return cache[label]

    def replan(series: np.ndarray, epsilons: tuple[Fraction, ...], current: int) -> int:
        truth = scenario_of(series, epsilons)
        scores = []
        for i, label in enumerate(labels):
            s = candidate_settings(label)
            errs = [_simulate(s, truth, NOISE_SEED + r, (post,))[0][post] for r in range(runs)]
            mae = float(np.mean(errs))
            scores.append((mae if np.isfinite(mae) else np.inf, label, i))
        best = min(scores)
        if scores[current][0] <= HYSTERESIS * best[0]:
            return current  # a switch costs up to w - 1 timesteps of reduced budget: only for a clear gain
        return best[2]

    return replan
