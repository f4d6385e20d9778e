"""Temporal smoothing of a released series, measured in the lab before anything ships
(issue 13 item 2: "a post-processor that does not help anywhere is not shipped").

Both smoothers read only what a consumer of the output topic sees: the published counts, whether
each release is fresh or republished, and each release's published accuracy (``half_width`` at
``confidence``). They are post-processing of the releases (Dwork & Roth Prop. 2.1): no ε.

* ``kalman``: per bin, a random-walk state ``x_t = x_{t-1} + N(0, Q)`` observed at each fresh
  release as ``z_t = x_t + noise`` with the noise's variance ``R_t`` from the release's own
  published interval (Laplace: ``b = h / ln(1/(1-confidence))``, ``R = 2b²``); republished
  timesteps only predict. ``Q = (q · population / bins)²``: ``q`` (default 0.05) is the expected
  change per timestep as a share of the declared population spread over the bins (public).
* ``ewma``: exponential smoothing of the fresh releases, ``s ← s + α(z − s)`` with α = 0.3.

Evaluated as ``dpstream evaluate --methods m+kalman`` / ``m+ewma``; the figures are in
``docs/results.md`` ("Temporal smoothing").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["SMOOTHERS", "Smoother", "noise_variance"]

#: Smoothers the lab can evaluate (``+kalman``, ``+ewma``); not service options.
SMOOTHERS: tuple[str, ...] = ("kalman", "ewma")


def noise_variance(half_width: np.ndarray, confidence: float) -> np.ndarray:
    """Variance of Laplace noise whose ``confidence`` interval is ``± half_width`` (public)."""
    b = np.asarray(half_width, dtype=np.float64) / math.log(1.0 / (1.0 - confidence))
    return np.maximum(2.0 * b * b, 1e-12)


@dataclass
class Smoother:
    """One smoother's running state over one released series (mutable: one per run).

    Attributes:
        name: ``kalman`` or ``ewma``.
        process_sd: ``sqrt(Q)`` of ``kalman``, in counts per bin per timestep.
        alpha: ``ewma``'s weight of a fresh release.
    """

    name: str
    process_sd: float = 1.0
    alpha: float = 0.3
    _x: np.ndarray | None = field(default=None, repr=False)
    _p: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.name not in SMOOTHERS:
            raise ValueError(f"unknown smoother {self.name!r}: choose one of {', '.join(SMOOTHERS)}")

    @classmethod
    def for_stream(cls, name: str, population: int | None, bins: int, q: float = 0.05) -> Smoother:
        per_bin = (population or bins) / max(1, bins)
        return cls(name, process_sd=max(q * per_bin, 1e-6))

    def step(self, counts: np.ndarray, fresh: bool, half_width: np.ndarray, confidence: float) -> np.ndarray:
        """The smoothed counts published for this timestep (float64)."""
        z = np.asarray(counts, dtype=np.float64)
        if self._x is None:
            self._x = z.copy()
            self._p = noise_variance(np.broadcast_to(half_width, z.shape), confidence).copy()
            return self._x.copy()
        if self.name == "ewma":
            if fresh:
                self._x = self._x + self.alpha * (z - self._x)
            return self._x.copy()
        assert self._p is not None
        self._p = self._p + self.process_sd ** 2  # predict
        if fresh:
            r = noise_variance(np.broadcast_to(half_width, z.shape), confidence)
            gain = self._p / (self._p + r)
            self._x = self._x + gain * (z - self._x)
            self._p = (1.0 - gain) * self._p
        return self._x.copy()
