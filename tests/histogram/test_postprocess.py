"""Post-processing (issue 13 item 2): ``nonnegative`` never moves a count away from a
non-negative truth and keeps the published interval's coverage; unknown names are refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from histogram.postprocess import POSTPROCESSORS, postprocess


def test_names_and_values() -> None:
    assert POSTPROCESSORS == ("none", "nonnegative")
    c = np.array([-3, 0, 5, -1], dtype=np.int64)
    assert postprocess("none", c) is c or np.array_equal(postprocess("none", c), c)
    out = postprocess("nonnegative", c)
    assert out.tolist() == [0, 0, 5, 0] and out.dtype == np.int64 and c.tolist() == [-3, 0, 5, -1]
    assert postprocess("nonnegative", np.array([-0.5, 2.25])).tolist() == [0.0, 2.25]
    with pytest.raises(ValueError, match="unknown post-processor 'smooth'"):
        postprocess("smooth", c)


@given(truth=st.lists(st.integers(0, 50), min_size=1, max_size=30),
       noise=st.lists(st.integers(-80, 80), min_size=30, max_size=30), half_width=st.integers(0, 60))
def test_nonnegative_never_increases_error_nor_loses_coverage(truth, noise, half_width) -> None:
    x = np.asarray(truth)
    c = x + np.asarray(noise[:len(truth)])
    p = postprocess("nonnegative", c)
    assert np.all(np.abs(p - x) <= np.abs(c - x))
    covered = np.abs(c - x) <= half_width
    assert np.all(np.abs(p - x)[covered] <= half_width)
