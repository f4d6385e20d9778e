"""Grouped releases: noisy sums over public groups of bins (the engine's policy-planned release).

A policy may answer a fresh decision with ``groups``: one label per bin, a group
number ``0 … G−1`` or ``−1`` for a bin this timestep does not measure. The
engine then charges the decision's ε (as for any fresh release) and, instead of
the mechanism, draws *one* vector of discrete Laplace noise of scale ``Δ/ε``,
one value per group, on the groups' true sums (:func:`release_groups`). The
policy's ``smooth`` turns those ``G`` noisy sums into the published histogram
(a per-group average, a filtered estimate, the last value for unmeasured bins):
post-processing, since it sees only the noisy sums and its own public state.

Privacy (``docs/privacy.md`` §4.6): the groups are disjoint, so adding or
removing one person moves the vector of group sums by at most Δ in L1 (their
records move the bins by at most Δ in L1, and each bin is in at most one group);
discrete Laplace noise of scale Δ/ε per sum is then ε-DP, whatever the
grouping — *provided the labels are a function of public values* (earlier
releases, public parameters, public randomness). That is the policy's burden,
and the audits in ``tests/controller/test_grouped_audit.py`` check it by
coupling.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from controller.errors import StateError
from histogram.mechanism import NoisyHistogram
from histogram.noise import NoiseDrawer, discrete_laplace_half_width

__all__ = ["check_groups", "release_groups"]


def check_groups(groups: np.ndarray, bins: int) -> int:
    """Validate a grouping (labels per bin); return the number of groups ``G``.

    Raises :class:`~controller.errors.StateError` (a policy bug) unless ``groups``
    is an integer vector of length ``bins`` whose labels are ``−1`` or ``0 … G−1``
    with every group non-empty and at least one bin measured.
    """
    g = np.asarray(groups)
    if g.shape != (bins,) or g.dtype.kind not in "iu":
        raise StateError(f"a grouped release needs one integer label per bin ({bins}), got {g.dtype} {g.shape}")
    measured = g[g >= 0]
    if measured.size == 0 or int(g.min()) < -1:
        raise StateError("a grouped release must measure at least one bin; labels are -1 or a group number")
    n = int(measured.max()) + 1
    if np.unique(measured).size != n:
        raise StateError(f"group labels must be 0 … G−1 with no group empty, got {np.unique(measured)[:10]} …")
    return n


def release_groups(counts: np.ndarray, groups: np.ndarray, epsilon: Fraction, sensitivity: int,
                   noise: NoiseDrawer, confidence: float = 0.95) -> NoisyHistogram:
    """Noisy sums of ``counts`` over ``groups``: ``Σ_{b∈g} x[b] + DLap(Δ/ε)`` for each group ``g``.

    ε-DP for neighbours at L1 distance ``sensitivity`` (the caller has charged ε).
    Returns a :class:`NoisyHistogram` of the ``G`` noisy sums (group order), their
    half-widths at ``confidence`` and ``details = {"groups": G}``: an intermediate
    the policy's ``smooth`` must turn into a histogram of every bin.
    """
    n = check_groups(groups, counts.size)
    labels = np.asarray(groups, dtype=np.int64)
    measured = labels >= 0
    sums = np.zeros(n, dtype=np.int64)
    np.add.at(sums, labels[measured], np.asarray(counts, dtype=np.int64)[measured])
    scale = Fraction(sensitivity) / Fraction(epsilon)
    noisy = sums + np.asarray(noise.discrete_laplace(scale, n), dtype=np.int64)
    noisy.setflags(write=False)
    width = np.broadcast_to(np.float64(discrete_laplace_half_width(scale, confidence)), noisy.shape)
    return NoisyHistogram(noisy, Fraction(epsilon), width, confidence, {"groups": n})
