"""Post-processing of released counts: functions of released values and public facts only.

Anything computed from a differentially private release alone, without looking at the data
again, is exactly as private as the release (post-processing, Dwork & Roth Prop. 2.1), so
these cost no ε and change no proof. They only change accuracy, and only ship when they
measurably help (``docs/results.md``, "Post-processing").

* ``none``: the mechanism's counts as drawn.
* ``nonnegative``: every count below zero becomes zero. True counts are never negative, so
  this moves no count away from its true value: the absolute error of every bin is at most
  what it was (strictly less wherever the noise drove a count below zero), and the published
  interval ``count ± half_width`` still contains the true count whenever the unclamped one did
  (if ``c < 0 ≤ x ≤ c + h`` then ``0 − h ≤ x ≤ 0 + h``). The counts stay integers for LPA.
"""

from __future__ import annotations

import numpy as np

__all__ = ["POSTPROCESSORS", "postprocess"]

#: Names accepted by ``release.postprocess`` and ``dpstream evaluate --methods m+<name>``.
POSTPROCESSORS: tuple[str, ...] = ("none", "nonnegative")


def postprocess(name: str, counts: np.ndarray) -> np.ndarray:
    """``counts`` after the post-processor ``name`` (a new array; the input is not modified).

    Raises:
        ValueError: an unknown name (the list is :data:`POSTPROCESSORS`).
    """
    arr = np.asarray(counts)
    if name == "none":
        return arr
    if name == "nonnegative":
        return np.maximum(arr, arr.dtype.type(0))
    raise ValueError(f"unknown post-processor {name!r}: choose one of {', '.join(POSTPROCESSORS)}")
