"""Private spatial decomposition (PSD) of a grid-shaped histogram.

The mechanism (:mod:`histogram.psd.mechanism`) builds a quad, kd or hybrid
tree (:mod:`histogram.psd.tree`) with private split medians
(:mod:`histogram.psd.median`), splits ε exactly across medians and levels
(:mod:`histogram.psd.budget`) and makes the noisy counts consistent
(:mod:`histogram.psd.consistency`).
"""

from histogram.psd.mechanism import (
    DEFAULT_HEIGHT,
    DEFAULT_MEDIAN_SHARE,
    DEFAULT_VARIANT,
    PSD_OPTIONS,
    PSDMechanism,
    PSDRelease,
)

__all__ = ["PSDMechanism", "PSDRelease", "PSD_OPTIONS", "DEFAULT_HEIGHT", "DEFAULT_MEDIAN_SHARE", "DEFAULT_VARIANT"]
