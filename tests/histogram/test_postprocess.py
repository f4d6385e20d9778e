"""Post-processing (issue 13 item 2): ``nonnegative`` never moves a count away from a
non-negative truth and keeps the published interval's coverage; ``integer`` rounds with the
released total kept; ``kalman``/``ewma`` are the filters they claim to be and continue bit for
bit from a JSON snapshot; unknown names and bad chains are refused."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from histogram.postprocess import (
    POSTPROCESSORS,
    PostProcessor,
    PostState,
    noise_variance,
    parse_chain,
    postprocess,
)


def test_names_and_values() -> None:
    assert POSTPROCESSORS == ("none", "nonnegative", "integer", "kalman", "ewma", "model", "model-perbin", "model-trend")
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


def test_chains_parse_and_bad_ones_are_refused() -> None:
    assert parse_chain("none") == () and parse_chain(None) == () and parse_chain([]) == ()
    assert parse_chain("Kalman+nonnegative") == ("kalman", "nonnegative")
    assert parse_chain(["nonnegative", "integer"]) == ("nonnegative", "integer")
    for bad, msg in (("kalman+ewma", "two smoothers"), ("integer+integer", "twice"),
                     ("none+kalman", "unknown post-processor 'none'"), ("round", "unknown post-processor 'round'")):
        with pytest.raises(ValueError, match=msg):
            parse_chain(bad)
    with pytest.raises(ValueError, match="carries state"):
        postprocess("kalman", np.zeros(3))
    with pytest.raises(ValueError, match="needs privacy.population"):
        PostProcessor.for_stream("kalman", population=None, bins=4)
    assert PostProcessor.for_stream("ewma", population=1000, bins=4, contribution_bound=2, share=0.1).process_sd == 50.0


@given(values=st.lists(st.floats(-1e4, 1e4, allow_nan=False), min_size=1, max_size=40))
def test_integer_rounding_moves_each_count_less_than_one_and_keeps_the_released_total(values) -> None:
    c = np.asarray(values, dtype=np.float64)
    r = postprocess("integer", c)
    assert r.dtype == np.int64
    assert np.all(np.abs(r - c) < 1.0)
    assert int(r.sum()) == int(np.rint(c.sum()))
    # each count is its floor or its ceiling, and the largest remainders are the ones raised
    low = np.floor(c)
    up = r - low == 1
    if up.any() and (~up).any():
        frac = c - low
        assert frac[up].min() >= frac[~up].max()


def test_integer_rounding_is_row_wise_and_leaves_whole_counts_alone() -> None:
    c = np.array([[0.4, 0.4, 0.4], [1.5, 2.5, -0.5]])
    r = postprocess("integer", c)
    assert r.tolist() == [[1, 0, 0], [2, 3, -1]]  # ties: the lower bin first; totals 1.2 → 1, 3.5 → 4
    whole = np.array([3, -2, 7], dtype=np.int64)
    assert postprocess("integer", whole) is whole
    p = PostProcessor(("integer",))
    out, _ = p.apply(p.initial(), np.array([0.4, 0.6]), np.array([2.0, 2.0]), 0.95, True)
    assert out.half_width.tolist() == [3.0, 3.0]  # every count moved by < 1: the interval widens by 1
    out, _ = p.apply(p.initial(), whole, np.array(2.0), 0.95, True)
    assert out.half_width.tolist() == [2.0, 2.0, 2.0]


def _scalar_kalman(zs, fresh, r, q):
    """An independent textbook random-walk Kalman filter for one bin (lists, no numpy)."""
    x = p = None
    out = []
    for z, f in zip(zs, fresh, strict=True):
        if x is None:
            if f:
                x, p = z, r
            out.append(z)
            continue
        p = p + q
        if f:
            k = p / (p + r)
            x = x + k * (z - x)
            p = (1 - k) * p
        out.append(x)
    return out


def test_kalman_is_the_textbook_filter_and_claims_no_interval() -> None:
    rng = np.random.default_rng(3)
    zs = rng.normal(50, 10, 30)
    fresh = [t % 3 != 1 for t in range(30)]
    fresh[0] = False  # the placeholder before the first fresh release passes through
    h, conf = 7.0, 0.9
    r = float(noise_variance(np.array(h), conf))
    assert math.isclose(r, 2 * (h / math.log(10)) ** 2)
    post = PostProcessor(("kalman",), process_sd=3.0)
    state = post.initial()
    got = []
    for z, f in zip(zs, fresh, strict=True):
        out, state = post.apply(state, np.array([z, z]), np.array(h), conf, f)
        got.append(out.counts[0])
        if state.estimate is not None:
            assert np.all(np.isinf(out.half_width))
    assert np.allclose(got, _scalar_kalman(list(zs), fresh, r, 9.0), rtol=0, atol=1e-9)


def test_ewma_uses_the_steady_state_gain_and_holds_on_republished_timesteps() -> None:
    post = PostProcessor(("ewma",), process_sd=2.0)
    h, conf = 10.0, 0.95
    r = float(noise_variance(np.array(h), conf))
    alpha = (-4 + math.sqrt(16 + 16 * r)) / (2 * r)
    assert math.isclose(alpha ** 2 / (1 - alpha), 4 / r)
    out, s = post.apply(post.initial(), np.array([10.0]), np.array(h), conf, True)
    out, s = post.apply(s, np.array([20.0]), np.array(h), conf, True)
    assert math.isclose(out.counts[0], 10 + alpha * 10)
    held, s2 = post.apply(s, np.array([99.0]), np.array(h), conf, False)
    assert held.counts[0] == out.counts[0] and s2 == s


@pytest.mark.parametrize("chain", ["kalman+nonnegative", "nonnegative+ewma+integer"])
def test_a_restored_state_continues_bit_for_bit(chain) -> None:
    post = PostProcessor(parse_chain(chain), process_sd=1.7)
    rng = np.random.default_rng(5)
    zs = rng.laplace(5, 4, (40, 6))
    fresh = rng.random(40) < 0.6
    state, outs = post.initial(), []
    for t in range(40):
        if t == 20:  # through JSON text, as the journal keeps it
            state = post.state_from_json(json.loads(json.dumps(post.state_to_json(state))), 6)
        out, state = post.apply(state, zs[t], np.full(6, 3.3), 0.95, bool(fresh[t]))
        outs.append(out.counts)
    state2, outs2 = post.initial(), []
    for t in range(40):
        out, state2 = post.apply(state2, zs[t], np.full(6, 3.3), 0.95, bool(fresh[t]))
        outs2.append(out.counts)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(outs, outs2, strict=True))
    assert state == state2
    with pytest.raises(ValueError, match="is for"):
        PostProcessor(("ewma",)).state_from_json(post.state_to_json(state), 6)
    with pytest.raises(ValueError, match="values"):
        post.state_from_json(post.state_to_json(PostState(np.zeros(4), np.zeros(4))), 6)
