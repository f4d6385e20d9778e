"""``/api/query``: box and marginal queries from the released model or counts (issue 31 item 1).

The releases come from the service's own pipeline (copula, k-way marginals, LPA); the public app
answers from the release message alone. Checked against what the message itself publishes (a
box over one attribute is a sum of a released one-way table; a copula's two-way marginal is the
two-way table its pairwise release carries; an LPA box is a sum of released counts) and against
the model's closed forms; queries a release cannot answer are a 400 that says what to configure.
"""

from __future__ import annotations

import json
from itertools import product

import numpy as np
import pytest

from histogram.copula.model import GaussianCopula
from histogram.errors import MechanismError
from histogram.model_query import CopulaAnswers, CountsAnswers, TablesAnswers
from stream.ingest.events import EventBatch
from stream.pipeline import ReleasePipeline
from stream.service.public import ReleaseFeed, make_public_app
from stream.service.testing import small_settings

ATTRS = [{"name": "a", "kind": "categorical", "values": ["x", "y", "z"]},
         {"name": "b", "kind": "numeric", "min": 0, "max": 4, "bins": 4},
         {"name": "c", "kind": "categorical", "values": ["p", "q"]},
         {"name": "d", "kind": "numeric", "min": 0, "max": 5, "bins": 5}]
LEVELS = (3, 4, 2, 5)


def _app(release: dict):
    settings = small_settings(seed=2, schema={"attributes": ATTRS},
                              privacy={"epsilon": 20, "cutoff": 5, "horizon": 50, "population": 400},
                              release={"decision": "uniform", **release})
    p = ReleasePipeline(settings)
    rng = np.random.default_rng(0)
    z = rng.multivariate_normal(np.zeros(4), 0.6 * np.eye(4) + 0.4, size=800)
    events = [{"user_id": f"u{i}", "event_time": 1 + i * 0.05,
               "attributes": {"a": "xyz"[min(2, int((z[i, 0] + 2) / 4 * 3))], "b": float(np.clip(z[i, 1] + 2, 0, 3.9)),
                              "c": "pq"[int(z[i, 2] > 0)], "d": float(np.clip(z[i, 3] + 2.5, 0, 4.9))}}
              for i in range(800)]
    p.offer(EventBatch.from_records(events))
    sealed = p.seal(final=True)
    feed = ReleaseFeed()
    feed.add_many(s.payload for s in sealed)
    return make_public_app(feed, lambda: p.domain_message().to_bytes()), json.loads(sealed[-1].payload)


def _get(app, qs: str):
    out = {}

    def start(status, headers):
        out["status"] = int(status.split()[0])

    body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/api/query", "QUERY_STRING": qs}, start))
    return out["status"], json.loads(body)


def test_copula_answers_agree_with_its_own_message():
    app, msg = _app({"mechanism": "copula", "copula": {"min_records": 400}})
    tables = {tuple(t["attributes"]): np.array(t["counts"]) for t in msg["model"]["marginals"]}
    status, ans = _get(app, "where=b:1-2")
    assert status == 200 and ans["computed_from"] == "copula probability (exact)"
    probs = np.maximum(tables[("b",)], 0) / np.maximum(tables[("b",)], 0).sum()
    assert ans["answer"] == pytest.approx(msg["model"]["total"] * probs[1:3].sum(), rel=1e-5)
    status, ans = _get(app, "marginal=a,c")  # the pairwise release publishes this very table
    assert status == 200 and ans["query"]["shape"] == [3, 2]
    assert np.allclose(ans["answer"], tables[("a", "c")], atol=1e-5)
    status, flipped = _get(app, "marginal=c,a")  # attributes in the order asked
    assert np.allclose(np.reshape(flipped["answer"], (2, 3)), tables[("a", "c")].reshape(3, 2).T, atol=1e-5)
    status, ans = _get(app, "where=a:y&where=b:0-1&where=d:2-4")  # three attributes: quadrature
    assert status == 200 and ans["computed_from"] == "copula probability (quadrature)"
    assert ans["query"]["box"] == {"a": [1, 1], "b": [0, 1], "d": [2, 4]}
    status, err = _get(app, "where=a:y&where=b:0-1&where=c:q&where=d:2-4")  # four: needs a sample
    assert status == 400 and "release.copula.synthetic_size" in err["error"]
    assert ans["timestep"] == msg["timestep"]["index"] and ans["release_id"] == msg["release_id"]


def test_copula_with_a_sample_answers_wide_boxes_from_it():
    app, msg = _app({"mechanism": "copula", "copula": {"min_records": 400, "synthetic_size": 2000}})
    status, ans = _get(app, "where=a:y-z&where=b:0-1&where=c:q&where=d:2-4")
    assert status == 200 and ans["computed_from"] == "synthetic sample of 2000 records"
    sample = np.array(msg["model"]["synthetic"]["records"])
    inside = ((sample[:, 0] >= 1) & (sample[:, 1] <= 1) & (sample[:, 2] == 1) & (sample[:, 3] >= 2)).mean()
    assert ans["answer"] == pytest.approx(msg["model"]["total"] * inside, rel=1e-5)


def test_kway_answers_come_from_the_released_tables():
    app, msg = _app({"mechanism": "marginals", "marginals": {"k": 2}})
    tables = {tuple(t["attributes"]): np.array(t["counts"]).reshape(t["shape"]) for t in msg["model"]["marginals"]}
    status, ans = _get(app, "where=b:1-3&where=d:0-2")
    assert status == 200 and ans["computed_from"] == "released table 1×3"
    assert ans["answer"] == pytest.approx(max(0.0, tables[("b", "d")][1:4, 0:3].sum()), abs=1e-5)  # summed as released
    status, err = _get(app, "where=a:x&where=b:1&where=d:0")
    assert status == 400 and "release.marginals.synthetic_size" in err["error"]


def test_lpa_answers_are_sums_of_released_counts():
    app, msg = _app({"mechanism": "lpa"})
    counts = np.array(msg["counts"], dtype=float).reshape(LEVELS)
    status, ans = _get(app, "where=a:x-y&where=c:q")
    assert status == 200 and ans["computed_from"] == "released counts"
    assert ans["answer"] == pytest.approx(counts[0:2, :, 1:2, :].sum())
    status, ans = _get(app, f"marginal=d,a&timestep={msg['timestep']['index']}")
    assert np.allclose(np.reshape(ans["answer"], (5, 3)), counts.sum(axis=(1, 2)).T)


@pytest.mark.parametrize("qs, words", [
    ("", "ask for one thing"),
    ("where=a:x&marginal=a", "ask for one thing"),
    ("where=zz:1", "attribute of the domain"),
    ("where=a", "ATTRIBUTE:LOW-HIGH"),
    ("where=b:7", "out of range 0..3"),
    ("where=a:w", "one of x, y, z"),
    ("where=b:3-1", "low level is above"),
    ("where=a:x&where=a:y", "twice"),
    ("marginal=a,zz", "name attributes of the domain"),
    ("where=a:x&timestep=zz", "not a timestep index"),
])
def test_malformed_queries_say_what_to_write(qs, words):
    app, _ = _app({"mechanism": "lpa"})
    status, err = _get(app, qs)
    assert status == 400 and words in err["error"], err


def test_a_timestep_not_retained_is_404():
    app, _ = _app({"mechanism": "lpa"})
    status, err = _get(app, "where=a:x&timestep=999")
    assert status == 404 and "output topic" in err["error"]


def test_answerers_against_brute_force():
    rng = np.random.default_rng(3)
    counts = rng.integers(-3, 20, int(np.prod(LEVELS))).astype(float)
    h = counts.reshape(LEVELS)
    ans = CountsAnswers(counts, LEVELS)
    for lo in product(*(range(v) for v in LEVELS)):
        hi = tuple(min(v - 1, a + 1) for a, v in zip(lo, LEVELS, strict=True))
        want = h[tuple(slice(a, b + 1) for a, b in zip(lo, hi, strict=True))].sum()
        assert ans.box(lo, hi).value == pytest.approx(want)
    model = GaussianCopula(tuple(np.full(v, 1 / v) for v in LEVELS), np.eye(4) * 0.5 + 0.5, 1000.0)
    cop = CopulaAnswers(model)
    assert cop.box([0, 0, 0, 0], [0, 3, 1, 4]).value == pytest.approx(1000 / 3)  # one attribute: its marginal
    assert cop.marginal((1, 0)).value.shape == (4, 3)
    assert np.allclose(cop.marginal((1, 0)).value, model.marginal((0, 1)).T)
    tables = {(0,): np.array([10.0, 20, 30]), (1,): np.array([15.0, 15, 15, 15]), (0, 1): np.arange(12.0)}
    kw = TablesAnswers((3, 4), tables)
    assert kw.box([1, 0], [2, 3]).value == 50 and kw.box([0, 1], [0, 2]).value == 3
    assert kw.total == 60 and np.allclose(kw.marginal((1,)).value, [15, 15, 15, 15])
    assert np.allclose(kw.marginal((1, 0)).value, np.arange(12.0).reshape(3, 4).T)
    with pytest.raises(MechanismError, match="low <= high"):
        kw.box([2, 0], [1, 3])


def test_one_way_tables_answer_wider_queries_only_when_independence_is_asked() -> None:
    """R = 1 releases one-way tables only: the query API refuses a two-attribute box (configure a
    sample); the lab's evaluation asks for the independence estimate, which says it is one."""
    tables = {(0,): np.array([10.0, 20, 30]), (1,): np.array([30.0, 10, 10, 10])}
    with pytest.raises(MechanismError, match="synthetic_size"):
        TablesAnswers((3, 4), tables).box([1, 0], [2, 0])
    ind = TablesAnswers((3, 4), tables, independent=True)
    box = ind.box([1, 0], [2, 0])
    assert box.value == pytest.approx(60 * (50 / 60) * (30 / 60)) and "independent" in box.source
    table = ind.marginal((1, 0)).value
    assert table.shape == (4, 3) and np.allclose(table, 60 * np.outer([0.5, 1 / 6, 1 / 6, 1 / 6], [1 / 6, 1 / 3, 0.5]))
    assert ind.box([1, 0], [1, 3]).value == 20  # a one-attribute box still comes from its table


def test_released_tables_are_summed_as_released_and_only_the_answer_is_clamped() -> None:
    """A k-way release's consistent tables have negative cells (noise on empty cells). Clamping each
    cell before summing a box adds the positive part of every empty cell's noise: on a wide table
    that bias dominates (the lab measured 6x the error on 3-attribute boxes). The answer is the sum
    of the released cells, clamped at 0 as a whole; a marginal's cells are each clamped."""
    rng = np.random.default_rng(0)
    true = np.zeros((20, 20))
    true[3, 4] = 500.0
    noisy = true + rng.laplace(0, 10, size=true.shape)
    kw = TablesAnswers((20, 20), {(0,): noisy.sum(axis=1), (1,): noisy.sum(axis=0), (0, 1): noisy})
    box = kw.box([0, 0], [19, 18])  # 380 cells, one of them busy: the truth is 500
    assert box.value == pytest.approx(noisy[:, :19].sum())
    assert abs(box.value - 500) < abs(np.maximum(noisy[:, :19], 0).sum() - 500)
    assert kw.box([10, 10], [19, 18]).value >= 0.0  # empty box: clamped answer, never negative
    assert (kw.marginal((0, 1)).value >= 0).all()
    assert kw.total == pytest.approx(max(0.0, noisy.sum()))
