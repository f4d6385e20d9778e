"""Distances between the true histogram and the last release.

The decision stage compares the L1 distance in *count space*,
``d(H, R) = floor(Σ |H[b] - R[b]|)``. Adding or removing one person changes
one bin of ``H`` by at most Δ (the contribution bound), so ``d`` changes by at
most Δ; the floor keeps the value an integer (``|floor x - floor y| <= 1``
when ``|x - y| <= 1``), which lets discrete noise absorb the shift exactly.
"""

from __future__ import annotations

import numpy as np

from histogram.errors import MechanismError

__all__ = ["l1_distance"]


def l1_distance(true_counts: np.ndarray, release: np.ndarray) -> int:
    """``floor(Σ_b |true[b] - release[b]|)`` as a Python int. Raw-data derived."""
    if true_counts.shape != release.shape:
        raise MechanismError(f"histograms differ in shape: {true_counts.shape} vs {release.shape}")
    if release.dtype.kind in "iu":
        return int(np.abs(true_counts - release).sum())
    return int(np.floor(np.abs(true_counts - release).sum()))
