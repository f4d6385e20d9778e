"""The re-plan of ``release.planner.online`` (issue 30 item 4): the planner's choice, re-run on the
stream's own released series.

:class:`controller.online.OnlinePolicy` calls the function :func:`replanner` builds every
``release.planner.online.every`` timesteps with the published series (forward-filled fresh
releases of the last ``release.planner.timesteps`` timesteps) and the ε behind each row. It
treats that series, averaged with the releases' declared noise scales (:func:`scenario_of`),
as the one public scenario (as a declared-public
history, :func:`stream.planning.planner.plan`) and simulates every candidate on it through the
engine, ``release.planner.runs`` seeded runs each, scoring each with the configured
``release.postprocess`` chain itself (:func:`scored_chain`: ``model+nonnegative`` is scored through
the model filter, ``kalman+nonnegative`` in that order, ``ewma`` as ``ewma``, as the service would
publish them, with ``release.delay`` k each timestep scored by the value the fixed-lag smoother
publishes for it k timesteps later; :func:`stream.planning.planner._chain_errors`). The candidate with the smallest mean
absolute error per bin (:class:`histogram.accuracy.RunErrors`' ``mae``) wins (ties: the
candidate's name), unless the current candidate is within :data:`HYSTERESIS` of it (a switch is
not free: the new method waits for the old one's charges to leave its windows).

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

from histogram.postprocess import chain_text, parse_chain
from stream.planning.planner import DISTANCE, NOISE_SEED, Candidate, _chain_errors, _simulate

__all__ = ["HYSTERESIS", "Replanner", "candidate_label", "replanner", "scenario_of", "scored_chain"]


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


def scored_chain(postprocess: str) -> str:
    """The chain a re-plan scores every candidate with: the configured ``release.postprocess``
    itself, in canonical text (``none`` for no post-processing), whatever its steps and order."""
    return chain_text(parse_chain(postprocess))


def _parse(label: str) -> tuple[str, bool | None]:
    decision, _, rest = label.partition("(")
    return decision, (rest.startswith("noise_floor") if decision in DISTANCE else None)


class Replanner:
    """The deterministic re-plan over ``labels`` (candidate names, in the policy's order): called
    as ``replan(series, epsilons, current)`` by :class:`controller.online.OnlinePolicy`.

    ``settings``: the stream's settings (``release.planner.online`` set). The candidates' settings
    are built lazily, at the first re-plan, without ``release.planner.online`` (so that loading a
    configuration does not simulate anything)."""

    def __init__(self, settings: Any, labels: tuple[str, ...]) -> None:
        self.settings = settings
        self.labels = tuple(labels)
        self.chain = scored_chain(settings.release.postprocess)
        self.runs = int(settings.release.planner.runs)
        self.delay = int(settings.release.delay)  # scored with the fixed-lag smoother the service publishes
        self._cache: dict[str, Any] = {}

    def _candidate(self, label: str) -> Any:
        if label not in self._cache:
            decision, floor = _parse(label)
            release: dict[str, Any] = {"decision": decision, "planner": {"online": None}}
            if floor is not None:
                release["noise_floor"] = floor
            self._cache[label] = self.settings.with_changes({"release": release})
        return self._cache[label]

    def scores(self, series: np.ndarray, epsilons: tuple[Fraction, ...]) -> tuple[float, ...]:
        """Each candidate's simulated mean absolute error per bin (records; ``inf``: unusable) on the
        scenario of ``series`` (:func:`scenario_of`), published through :attr:`chain`, mean over
        :attr:`runs` seeded runs."""
        truth = scenario_of(series, epsilons)
        out = []
        for label in self.labels:
            s = self._candidate(label)
            traces = [_simulate(s, truth, NOISE_SEED + r, ())[1] for r in range(self.runs)]
            mae = float(np.mean(_chain_errors(s, self.chain, [truth] * self.runs, traces, delay=self.delay)))
            out.append(mae if np.isfinite(mae) else np.inf)
        return tuple(out)

    def __call__(self, series: np.ndarray, epsilons: tuple[Fraction, ...], current: int) -> int:
        scores = self.scores(series, epsilons)
        best = min((m, label, i) for i, (m, label) in enumerate(zip(scores, self.labels, strict=True)))
        if scores[current] <= HYSTERESIS * best[0]:
            return current  # a switch costs up to w - 1 timesteps of reduced budget: only for a clear gain
        return best[2]


def replanner(settings: Any, labels: tuple[str, ...]) -> Callable[[np.ndarray, tuple[Fraction, ...], int], int]:
    """The :class:`Replanner` of ``settings`` over ``labels``."""
    return Replanner(settings, labels)
