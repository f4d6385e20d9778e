"""Change detectors on a released query series (post-processing: they read releases only).

Each detector watches one declared query's released answers, one *fresh* release at a time: a
republished release repeats an earlier answer and adds no evidence, so the caller feeds only
fresh answers (:meth:`Detector.update` is never called for a republished timestep).

The noise of each release is known (its variance ``noise_var``, computed from the release's ε
and the public sensitivity; 0 for a true series). The baseline of a timestep is the mean of the
last ``baseline`` fresh answers one ``season`` apart before it (season 1: the previous answers;
season 24 on hourly data: the same hour of the previous days), or a declared ``target``. The
standardised residual is::

    z = (x - μ) / sqrt(v · (1 + 1/n)),   v = max(noise_var, sample variance of the baseline answers)

(the baseline mean's own error included; the release's known variance is a floor, so a quiet
true series never makes ``v`` zero). Detectors (one-sided: they watch for a *rise*):

* :class:`Threshold`: fires when the released answer exceeds ``above``.
* :class:`Cusum`: ``S = max(0, S + z - slack)``, fires when ``S > limit`` (then restarts at 0).
* :class:`Ewma`: ``E = weight·z + (1-weight)·E``, fires when ``E > limit·sqrt(weight/(2-weight))``
  (then restarts at 0).

Every value here is a function of released answers and public configuration; state round-trips
through :meth:`snapshot` / :meth:`restore` (JSON-ready).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from histogram.errors import MechanismError

__all__ = ["Baseline", "Detector", "Threshold", "Cusum", "Ewma", "Verdict", "make_detector"]


@dataclass(frozen=True)
class Verdict:
    """One update's outcome: the detector statistic after it, the limit it is compared with, and
    whether it fired (None statistic: not enough history yet)."""

    statistic: float | None
    limit: float
    fired: bool


@dataclass
class Baseline:
    """The in-control mean and variance of a query from its past fresh answers (see the module)."""

    baseline: int = 7
    season: int = 1
    target: float | None = None
    history: list[list[float]] = field(default_factory=list)  # [timestep, answer] of fresh releases

    def __post_init__(self) -> None:
        if self.baseline < 2 or self.season < 1:
            raise MechanismError("a detector baseline needs baseline >= 2 answers and season >= 1 timesteps")

    def residual(self, timestep: int, value: float, noise_var: float) -> float | None:
        """``z`` of ``value`` at ``timestep`` (None until ``baseline`` answers one season apart exist)."""
        past = [v for t, v in self.history if (timestep - t) % self.season == 0 and t < timestep]
        past = past[-self.baseline:]
        if len(past) < self.baseline and self.target is None:
            return None
        arr = np.asarray(past, dtype=np.float64)
        sample_var = float(arr.var(ddof=1)) if arr.size >= 2 else 0.0
        v = max(noise_var, sample_var)
        mean = self.target if self.target is not None else float(arr.mean())
        n = math.inf if self.target is not None else arr.size
        if v <= 0.0:
            return math.inf if value > mean else (0.0 if value == mean else -math.inf)
        return (value - mean) / math.sqrt(v * (1.0 + 1.0 / n))

    def add(self, timestep: int, value: float) -> None:
        self.history.append([int(timestep), float(value)])
        del self.history[: max(0, len(self.history) - self.baseline * self.season)]


class Detector:
    """Base: ``update`` one fresh answer, ``snapshot``/``restore`` the state."""

    kind = "detector"

    def update(self, timestep: int, value: float, noise_var: float) -> Verdict:  # pragma: no cover - abstract
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def restore(self, state: dict[str, Any]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass
class Threshold(Detector):
    """Fires when a fresh released answer is above ``above`` (a public, declared level)."""

    above: float
    kind = "threshold"

    def update(self, timestep: int, value: float, noise_var: float) -> Verdict:
        return Verdict(float(value), float(self.above), bool(value > self.above))

    def snapshot(self) -> dict[str, Any]:
        return {}

    def restore(self, state: dict[str, Any]) -> None:
        return None


@dataclass
class _Chart(Detector):
    limit: float
    base: Baseline
    statistic: float = 0.0

    def _step(self, z: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _limit(self) -> float:
        return float(self.limit)

    def update(self, timestep: int, value: float, noise_var: float) -> Verdict:
        z = self.base.residual(timestep, value, noise_var)
        self.base.add(timestep, value)
        if z is None:
            return Verdict(None, self._limit(), False)
        z = max(-1e6, min(1e6, z))
        self.statistic = self._step(z)
        fired = self.statistic > self._limit()
        verdict = Verdict(self.statistic, self._limit(), fired)
        if fired:
            self.statistic = 0.0
        return verdict

    def snapshot(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "history": [list(h) for h in self.base.history]}

    def restore(self, state: dict[str, Any]) -> None:
        self.statistic = float(state.get("statistic", 0.0))
        self.base.history = [[int(t), float(v)] for t, v in state.get("history", [])]


@dataclass
class Cusum(_Chart):
    """One-sided CUSUM on standardised residuals (``slack`` and ``limit`` in standard deviations)."""

    slack: float = 0.5
    kind = "cusum"

    def _step(self, z: float) -> float:
        return max(0.0, self.statistic + z - self.slack)


@dataclass
class Ewma(_Chart):
    """One-sided EWMA chart on standardised residuals (``limit`` in asymptotic standard deviations)."""

    weight: float = 0.2
    kind = "ewma"

    def __post_init__(self) -> None:
        if not 0.0 < self.weight <= 1.0:
            raise MechanismError(f"an EWMA weight lies in (0, 1], got {self.weight}")

    def _limit(self) -> float:
        return float(self.limit) * math.sqrt(self.weight / (2.0 - self.weight))

    def _step(self, z: float) -> float:
        return self.weight * z + (1.0 - self.weight) * self.statistic


def make_detector(kind: str, *, above: float | None = None, limit: float | None = None, slack: float = 0.5,
                  weight: float = 0.2, baseline: int = 7, season: int = 1, target: float | None = None) -> Detector:
    """A fresh detector of ``kind`` (threshold | cusum | ewma).

    Raises:
        MechanismError: a missing parameter (``above`` for threshold, ``limit`` for charts).
    """
    if kind == "threshold":
        if above is None:
            raise MechanismError("a threshold detector needs above")
        return Threshold(float(above))
    if limit is None or limit <= 0:
        raise MechanismError(f"a {kind} detector needs limit > 0 (in standard deviations)")
    base = Baseline(baseline, season, target)
    if kind == "cusum":
        return Cusum(float(limit), base, slack=float(slack))
    if kind == "ewma":
        return Ewma(float(limit), base, weight=float(weight))
    raise MechanismError(f"unknown detector {kind!r}: choose threshold, cusum or ewma")
