"""Distances between the true histogram and the last release.

The decision stage compares the L1 distance in *count space*,
``d(H, R) = floor(Σ |H[b] - R[b]|)``. Adding or removing one person changes
one bin of ``H`` by at most Δ (the contribution bound), so ``d`` changes by at
most Δ; the floor keeps the value an integer (``|floor x - floor y| <= Δ``
when ``|x - y| <= Δ`` and Δ is an integer), which lets discrete noise absorb
the shift exactly.

The sum must be exact for that argument. Integer releases (LPA) are summed in
int64. A float release (PSD) is first rounded to the public fixed-point grid
of ``1/2^16`` — a post-processing of a published vector, so it is just as
public — and the distance is then computed exactly in integers; summing the
floats directly could round two neighbouring distances apart by more than Δ.
"""

from __future__ import annotations

import numpy as np

from histogram.errors import MechanismError

__all__ = ["l1_distance", "l1_distance_rows", "FIXED_POINT_BITS"]

FIXED_POINT_BITS = 16


def l1_distance(true_counts: np.ndarray, release: np.ndarray) -> int:
    """``floor(Σ_b |true[b] - release[b]|)`` as a Python int, computed exactly.

    Raw-data derived: use only inside a charged query.
    """
    if true_counts.shape != release.shape:
        raise MechanismError(f"histograms differ in shape: {true_counts.shape} vs {release.shape}")
    true = true_counts.astype(np.int64, copy=False)
    if release.dtype.kind in "iu":
        return int(np.abs(true - release.astype(np.int64, copy=False)).sum(dtype=np.int64))
    if not np.all(np.isfinite(release)):
        raise MechanismError("a release with NaN or infinite counts cannot be compared")
    scale = 1 << FIXED_POINT_BITS
    fixed = np.rint(np.asarray(release, dtype=np.float64) * scale).astype(np.int64)
    total = int(np.abs(true * scale - fixed).sum(dtype=np.int64))
    return total >> FIXED_POINT_BITS  # floor division by 2^16, exact


def l1_distance_rows(true_counts: np.ndarray, releases: np.ndarray) -> np.ndarray:
    """:func:`l1_distance` of one true histogram (``(U,)``) and each row of ``releases``
    (``(R, U)``, integer or float), as an int64 array of R values, each exactly what
    :func:`l1_distance` gives for that row (the same fixed-point rounding for float releases).

    Raw-data derived: use only inside a charged query.
    """
    releases = np.asarray(releases)
    if releases.ndim != 2 or releases.shape[1:] != true_counts.shape:
        raise MechanismError(f"releases of shape {releases.shape} do not match one histogram of shape "
                             f"{true_counts.shape}: pass (runs, bins)")
    true = true_counts.astype(np.int64, copy=False)
    if releases.dtype.kind in "iu":
        return np.abs(true - releases.astype(np.int64, copy=False)).sum(axis=1, dtype=np.int64)
    if not np.all(np.isfinite(releases)):
        raise MechanismError("a release with NaN or infinite counts cannot be compared")
    scale = 1 << FIXED_POINT_BITS
    fixed = np.rint(releases.astype(np.float64, copy=False) * scale).astype(np.int64)
    return np.abs(true * scale - fixed).sum(axis=1, dtype=np.int64) >> FIXED_POINT_BITS
