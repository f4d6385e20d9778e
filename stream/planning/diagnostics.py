"""Configuration diagnostics from public information only: warnings, never decisions.

:func:`threshold_below_noise_floor` answers the question behind a common surprise: "why do
DSFT and DSAT release exactly like fixed sampling?" A distance-based decision (DSFT, DSAT)
compares the L1 distance between the current histogram and the last release with the
threshold ``T × n`` (``release.threshold`` × ``privacy.population``, in counts). The last
release carries noise on every bin, so even when nothing changes that distance is about
``U × E|noise|`` (``U`` bins, at the ε of a fresh release): the *noise floor*. A threshold
below it is crossed by noise alone, every test says "fresh", and the method spends its budget
as fast as fixed sampling would, whatever the data does.

Everything here is computed from the configuration: the ε of the first fresh release comes
from stepping the engine on an all-zero histogram (no data) with seeded noise that is never
published, and the expected noise from the mechanism's own formula. Nothing reads events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["ThresholdDiagnosis", "threshold_below_noise_floor"]

#: Decision methods whose fresh/republish choice is a distance test against ``release.threshold``.
DISTANCE_METHODS = frozenset({"dsft", "dsat"})
#: Domains larger than this are not stepped (a warning is a convenience, not worth seconds).
MAX_BINS = 200_000


@dataclass(frozen=True)
class ThresholdDiagnosis:
    """The threshold sits below the distance's noise floor.

    Attributes:
        decision: the decision method (``dsft`` or ``dsat``).
        threshold_counts: ``T × n`` in counts (DSAT: its initial threshold).
        noise_floor_counts: expected L1 noise of a fresh release, ``U × E|Z|``, in counts.
        release_epsilon: ε of a fresh release (the first one).
        suggested_threshold: the ``release.threshold`` at the floor (capped at 2, the largest
            allowed): the test needs a margin above it to stay quiet on an unchanging stream.
    """

    decision: str
    threshold_counts: float
    noise_floor_counts: float
    release_epsilon: Fraction
    suggested_threshold: float

    def message(self) -> str:
        kind = "initial threshold" if self.decision == "dsat" else "threshold"
        return (f"release.threshold puts the {self.decision} {kind} at {self.threshold_counts:.4g} counts "
                f"(T x privacy.population), below the distance test's noise floor of about "
                f"{self.noise_floor_counts:.4g} counts (the expected L1 noise of a release at epsilon "
                f"{float(self.release_epsilon):.4g}): on a stream that does not change, the test fires on noise "
                f"alone and {self.decision} releases fresh whenever its budget allows, like fixed sampling. "
                f"Set release.noise_floor: true (the threshold is then measured above the floor), or raise "
                f"release.threshold above {self.suggested_threshold:.3g} (at the floor itself the noisy test "
                f"still fires about half the time; leave a margin)")

    def to_json(self) -> dict[str, Any]:
        return {"check": "threshold_below_noise_floor", "decision": self.decision,
                "threshold_counts": self.threshold_counts, "noise_floor_counts": self.noise_floor_counts,
                "release_epsilon": float(self.release_epsilon), "suggested_threshold": self.suggested_threshold,
                "message": self.message()}


def threshold_below_noise_floor(settings: Any, *, max_steps: int = 8) -> ThresholdDiagnosis | None:
    """The diagnosis when ``settings`` configures a DSFT/DSAT threshold below the noise floor, else None.

    None too when it does not apply: another decision method, ``release.noise_floor`` already
    on, no declared population, a domain over :data:`MAX_BINS` bins, or no fresh release in
    the first ``max_steps`` timesteps of an all-zero stream.
    """
    r, p = settings.release, settings.privacy
    if r.decision not in DISTANCE_METHODS or r.noise_floor or not p.population:
        return None
    bins = settings.domain().size
    if bins > MAX_BINS:
        return None
    from controller.runs import step_run
    from histogram.noise import Randomness

    engine = settings.engine()
    # a personalized stream's engine steps on one block of bins per budget level (every part's
    # release ε is then the largest part's: the lowest floor, so a threshold below it is below all)
    zeros = np.zeros(getattr(engine, "input_bins", bins), dtype=np.int64)
    noise = Randomness.seeded(0)  # never published: only the ε of a fresh release is read
    epsilon = None
    for _, release, _ in step_run(engine, lambda t, state: zeros, lambda t: noise.drawer("diagnostics", t),
                                  timesteps=max_steps):
        if release.kind == "fresh" and release.epsilon_release:
            epsilon = Fraction(release.epsilon_release)
            break
    if epsilon is None:
        return None
    floor = settings.mechanism().expected_abs_error(epsilon, bins) * bins
    threshold = float(r.threshold) * p.population
    if threshold >= floor:
        return None
    suggested = math.ceil(1000 * floor / p.population) / 1000
    return ThresholdDiagnosis(r.decision, threshold, floor, epsilon, min(suggested, 2.0))
