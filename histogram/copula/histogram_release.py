"""DPCopula behind the engine's :class:`~histogram.mechanism.Mechanism` interface (materialisable domains).

:class:`CopulaHistogramMechanism` takes the engine's true count vector
(row-major over the public domain, as :mod:`histogram.domain` flattens it),
turns it into the record table it represents, releases a DP Gaussian
copula (:class:`~histogram.copula.mechanism.DPCopula`, at the ε the engine
charged), and publishes the histogram of ``round(n̂)`` synthetic records
sampled from it, with the model in ``details``. Privacy is the DPCopula
release's (``docs/privacy.md`` §11): the counts, the model and the synthetic
sample are post-processing of it.

Accuracy: a model release claims no per-bin interval, so ``half_width`` is
infinite and ``confidence`` 0 (the message schema already encodes that as
``null``, like the placeholder before the first release).
``expected_abs_error`` is a public heuristic for the decision stage's noise
floor and for BD/BA's publication estimate: the mean absolute noise of one
released marginal count, divided by the number of levels it spreads over.

This adapter needs the full histogram (the engine's interface); for domains
too large to materialise use :class:`DPCopula` on the record table directly
and the model's queries (issue 15's model-release message is a later slice).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from histogram.copula.mechanism import DPCopula
from histogram.errors import MechanismError
from histogram.mechanism import NoisyHistogram
from histogram.noise import NoiseDrawer, discrete_laplace_mean_abs

__all__ = ["CopulaHistogramMechanism", "records_of_counts"]


def records_of_counts(counts: np.ndarray, levels: tuple[int, ...]) -> np.ndarray:
    """The ``(n, m)`` record table a row-major count vector over ``levels`` stands for."""
    flat = np.repeat(np.arange(counts.size, dtype=np.int64), np.asarray(counts, dtype=np.int64))
    return np.stack(np.unravel_index(flat, levels), axis=1).astype(np.int64) if flat.size else np.zeros((0, len(levels)), np.int64)


@dataclass(frozen=True)
class CopulaHistogramMechanism:
    """A DPCopula release published as a synthetic histogram.

    Attributes:
        copula: the DPCopula configuration (domain levels, variant, k, n₀, c).
    """

    copula: DPCopula
    name: str = "dpcopula"

    @property
    def sensitivity(self) -> int:
        return self.copula.sensitivity

    @property
    def bins(self) -> int:
        return int(np.prod(self.copula.levels))

    def release(self, counts: np.ndarray, epsilon: Fraction, noise: NoiseDrawer) -> NoisyHistogram:
        """Synthetic-histogram release of ``counts`` at ``epsilon`` (charged by the caller)."""
        true = np.asarray(counts)
        if true.shape != (self.bins,) or true.dtype.kind not in "iu" or (true.size and true.min() < 0):
            raise MechanismError(
                f"DPCopula releases a non-negative integer count vector of {self.bins} bins (the product of its levels)"
            )
        rel = self.copula.release(records_of_counts(true, self.copula.levels), Fraction(epsilon), noise)
        model = rel.model
        synthetic = model.sample(int(round(model.total)), noise)
        hist = np.bincount(np.ravel_multi_index(tuple(synthetic.T), self.copula.levels), minlength=self.bins).astype(np.int64)
        hist.setflags(write=False)
        width = np.broadcast_to(np.float64(np.inf), hist.shape)
        details = {
            "model": {
                "kind": "gaussian-copula",
                "variant": rel.variant,
                "levels": list(self.copula.levels),
                "marginal_counts": [v.tolist() for v in rel.marginal_counts],
                "correlation": np.round(model.correlation, 6).tolist(),
                "total": round(model.total, 3),
            }
        }
        return NoisyHistogram(hist, rel.epsilon, width, 0.0, details)

    def expected_abs_error(self, epsilon: Fraction, bins: int = 1) -> float:
        """Public heuristic (no data): mean |noise| of one marginal count over the mean number of levels."""
        mean_levels = float(np.mean(self.copula.levels))
        return discrete_laplace_mean_abs(self.copula.marginal_scale(Fraction(epsilon))) / mean_levels
