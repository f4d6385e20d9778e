"""Domains, binning and histogram building (with contribution bounding)."""

from __future__ import annotations

import numpy as np
import pytest

from histogram.build import bound_contributions, build_histogram
from histogram.domain import CategoricalAttribute, Domain, NumericAttribute
from histogram.errors import DomainError


def census_domain() -> Domain:
    return Domain(
        (
            NumericAttribute("age", 0, 96, 96),
            CategoricalAttribute("gender", ("m", "f")),
            CategoricalAttribute("education", tuple(f"e{i}" for i in range(12))),
            CategoricalAttribute("insurance", ("yes", "no")),
            CategoricalAttribute("marital", ("single", "married")),
            CategoricalAttribute("income", ("low", "mid", "high")),
        )
    )


def test_census_domain_has_thesis_size():
    d = census_domain()
    assert d.shape == (96, 2, 12, 2, 2, 3)
    assert d.size == 27_648


def test_flat_index_is_row_major_in_attribute_order():
    d = Domain((CategoricalAttribute("a", ("x", "y", "z")), NumericAttribute("b", 0, 4, 4)))
    enc = d.encode({"a": ["x", "y", "z", "z"], "b": [0, 1.5, 3.99, 4.0]})
    assert enc.valid.all()
    assert enc.index.tolist() == [0 * 4 + 0, 1 * 4 + 1, 2 * 4 + 3, 2 * 4 + 3]
    assert np.array_equal(np.ravel_multi_index(d.unravel(enc.index), d.shape), enc.index)


def test_numeric_out_of_range_clip_versus_reject():
    clip = NumericAttribute("x", 0, 10, 5, "clip")
    rej = NumericAttribute("x", 0, 10, 5, "reject")
    values = [-3.0, 0.0, 9.99, 10.0, 12.0, np.nan, np.inf]
    c = clip.encode(values)
    assert c.index[c.valid].tolist() == [0, 0, 4, 4, 4]
    assert c.valid.tolist() == [True, True, True, True, True, False, False]
    r = rej.encode(values)
    assert r.valid.tolist() == [False, True, True, True, False, False, False]


def test_categorical_unknown_values_are_invalid_and_codes_are_supported():
    a = CategoricalAttribute("c", ("1", "2", "x"))
    enc = a.encode(np.array([1, 2, 3, "x"], dtype=object))
    assert enc.valid.tolist() == [True, True, False, True]
    assert enc.index[enc.valid].tolist() == [0, 1, 2]
    codes = a.encode([0, 2, 3, -1], codes=True)
    assert codes.valid.tolist() == [True, True, False, False]


@pytest.mark.parametrize(
    "make",
    [
        lambda: Domain(()),
        lambda: Domain((CategoricalAttribute("a", ("x",)), CategoricalAttribute("a", ("y",)))),
        lambda: CategoricalAttribute("a", ()),
        lambda: CategoricalAttribute("a", ("x", "x")),
        lambda: NumericAttribute("a", 1, 1, 3),
        lambda: NumericAttribute("a", 0, 1, 0),
        lambda: NumericAttribute("a", 0, float("inf"), 3),
        lambda: NumericAttribute("a", 0, 1, 3, "wrap"),  # type: ignore[arg-type]
        lambda: NumericAttribute("", 0, 1, 3),
    ],
)
def test_bad_domains_raise_clear_errors(make):
    with pytest.raises(DomainError):
        make()


def test_encode_rejects_missing_and_unknown_columns():
    d = census_domain()
    with pytest.raises(DomainError, match="missing"):
        d.encode({"age": [1]})


def test_describe_round_trips():
    d = census_domain()
    assert Domain.from_description(d.describe()) == d


def test_contribution_bounding_keeps_one_row_per_person_deterministically():
    d = Domain((NumericAttribute("x", 0, 10, 10),))
    users = np.array(["a", "a", "a", "b", "c", "c"])
    times = np.array([5.0, 1.0, 3.0, 2.0, 7.0, 7.0])
    xs = np.array([1, 2, 3, 4, 8, 6])
    h = build_histogram(d, {"x": xs}, user_ids=users, order_key=times)
    # a keeps its earliest record (x=2); c has a time tie: smallest bin (x=6) wins
    assert h.counts.tolist() == [0, 0, 1, 0, 1, 0, 1, 0, 0, 0]
    assert (h.rows, h.rejected, h.bounded_out, h.kept) == (6, 0, 3, 3)
    # any permutation of the rows gives the same counts
    rng = np.random.default_rng(3)
    for _ in range(20):
        p = rng.permutation(len(users))
        hp = build_histogram(d, {"x": xs[p]}, user_ids=users[p], order_key=times[p])
        assert hp.counts.tolist() == h.counts.tolist()


def test_flood_from_one_person_counts_once():
    d = Domain((NumericAttribute("x", 0, 10, 10),))
    n = 100_000
    h = build_histogram(d, {"x": np.full(n, 3.0)}, user_ids=np.zeros(n, dtype=np.int64))
    assert int(h.counts.sum()) == 1
    assert h.bounded_out == n - 1


def test_rejected_rows_do_not_displace_a_persons_valid_row():
    d = Domain((NumericAttribute("x", 0, 10, 10, "reject"),))
    h = build_histogram(d, {"x": [50.0, 4.0]}, user_ids=["u", "u"], order_key=[0.0, 1.0])
    assert h.counts[4] == 1 and h.rejected == 1 and h.bounded_out == 0


def test_bound_contributions_handles_empty_input():
    assert bound_contributions(np.array([]), np.array([], dtype=np.int64)).size == 0


def test_contribution_bound_above_one_keeps_the_earliest_rows():
    d = Domain((NumericAttribute("x", 0, 10, 10),))
    users = np.array(["p", "p", "p", "q"])
    h = build_histogram(d, {"x": [1, 2, 3, 4]}, user_ids=users, order_key=[3.0, 1.0, 2.0, 0.0], per_person=2)
    assert h.counts.tolist() == [0, 0, 1, 1, 1, 0, 0, 0, 0, 0]  # p keeps x=2 (t=1) and x=3 (t=2)
    assert h.bounded_out == 1
    rng = np.random.default_rng(1)
    for k in (1, 2, 5):
        u = rng.integers(0, 50, 2000)
        hk = build_histogram(d, {"x": rng.uniform(0, 10, 2000)}, user_ids=u, order_key=rng.uniform(0, 1, 2000), per_person=k)
        assert hk.counts.sum() == sum(min(k, c) for c in np.bincount(u))
