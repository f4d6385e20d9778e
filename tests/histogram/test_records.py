"""Model releases from the bounded records, never the count vector (issue 31 item 1).

:class:`histogram.records.RecordTable` must give the release the count vector gives (same rows,
same order: same bytes with the same noise) on every model mechanism, the view's tables must
equal those of the vector, and the engine must step a 10⁹-cell domain from records alone.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from controller.method import MethodSpec, build_engine
from controller.units import UserLevel
from histogram.copula import DPCopula
from histogram.errors import MechanismError
from histogram.lpa import LaplaceMechanism
from histogram.marginals import KWayMarginals
from histogram.model_release import CopulaModelMechanism, KWayModelMechanism, MarginalView
from histogram.noise import Randomness
from histogram.records import RecordTable

LEVELS = (3, 4, 2, 5)


def _cells(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, int(np.prod(LEVELS)), n)


def test_record_table_is_the_count_vector_read_back():
    cells = _cells(500)
    table = RecordTable.from_cells(cells, LEVELS)
    counts = np.bincount(cells, minlength=int(np.prod(LEVELS)))
    assert table.rows.shape == (500, 4) and not table.rows.flags.writeable
    again = np.bincount(np.ravel_multi_index(tuple(table.rows.T), LEVELS), minlength=counts.size)
    assert np.array_equal(again, counts)
    for view in (MarginalView.one_way(LEVELS), MarginalView.up_to(LEVELS, 2), MarginalView.up_to(LEVELS, 3, 2)):
        assert np.array_equal(view.of_records(table), view(counts))
    empty = RecordTable.from_cells(np.zeros(0, np.int64), LEVELS)
    assert len(empty) == 0 and np.array_equal(MarginalView.up_to(LEVELS, 2).of_records(empty),
                                              np.zeros(MarginalView.up_to(LEVELS, 2).size, np.int64))


def test_record_table_checks():
    with pytest.raises(MechanismError, match="cell indexes"):
        RecordTable.from_cells(np.array([int(np.prod(LEVELS))]), LEVELS)
    with pytest.raises(MechanismError, match="outside"):
        RecordTable(LEVELS, np.array([[0, 0, 2, 0]]))
    with pytest.raises(MechanismError, match="integer table"):
        RecordTable(LEVELS, np.zeros((3, 2), np.int64))


MECHANISMS = {
    "copula-kendall": lambda: CopulaModelMechanism(DPCopula(LEVELS, "kendall", min_records=50), synthetic_size=5),
    "copula-mle": lambda: CopulaModelMechanism(DPCopula(LEVELS, "mle", min_records=50)),
    "copula-median-one-way": lambda: CopulaModelMechanism(DPCopula(LEVELS, "median", min_records=50),
                                                          decision_space="one-way"),
    "marginals": lambda: KWayModelMechanism(KWayMarginals(LEVELS, 2), synthetic_size=5),
    "marginals-raw": lambda: KWayModelMechanism(KWayMarginals(LEVELS, 3), consistent=False),
}


def _engine(mech):
    spec = MethodSpec("dsat", UserLevel(Fraction(4), 10, 3), population=400 * mech.view.tables,
                      sensitivity=mech.view.sensitivity, threshold=0.05)
    return build_engine(spec, mech, int(np.prod(LEVELS)))


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_records_and_counts_publish_the_same_release(name):
    mech = MECHANISMS[name]()
    engine = _engine(mech)
    a = b = engine.initial_state()
    for t in range(4):
        cells = _cells(400, seed=t)
        ra, a = engine.step(a, np.bincount(cells, minlength=engine.bins), Randomness.seeded(9).drawer("s", t, "r"))
        rb, b = engine.step(b, RecordTable.from_cells(cells, LEVELS), Randomness.seeded(9).drawer("s", t, "r"))
        assert ra.kind == rb.kind and ra.model == rb.model
        assert np.array_equal(ra.counts, rb.counts) and np.array_equal(ra.half_width, rb.half_width)
    assert engine.snapshot(a) == engine.snapshot(b)


def test_a_histogram_mechanism_refuses_records():
    spec = MethodSpec("uniform", UserLevel(Fraction(4), 10, 3))
    engine = build_engine(spec, LaplaceMechanism(1), int(np.prod(LEVELS)))
    with pytest.raises(ValueError, match="count vector"):
        engine.step(engine.initial_state(), RecordTable.from_cells(_cells(10), LEVELS),
                    Randomness.seeded(1).drawer("s", 0, "r"))


def test_a_billion_cell_domain_steps_from_records():
    """8¹⁰ cells: the vector (8 GiB) is never built; the view's tables and the model are."""
    levels = (8,) * 10
    mech = CopulaModelMechanism(DPCopula(levels, "mle", min_records=1000))
    spec = MethodSpec("dsat", UserLevel(Fraction(4), 10, 3), population=2000 * mech.view.tables,
                      sensitivity=mech.view.sensitivity, threshold=0.05)
    engine = build_engine(spec, mech, 8**10)
    cells = np.random.default_rng(1).integers(0, 8**10, 2000)
    rel, _ = engine.step(engine.initial_state(), RecordTable.from_cells(cells, levels),
                         Randomness.seeded(1).drawer("s", 0, "r"))
    assert rel.kind == "fresh" and rel.counts.size == mech.view.size == 10 * 8 + 45 * 64


def test_a_table_summed_from_a_wider_one_equals_counting_the_records():
    """Narrower tables are sums of a wider table already counted (no second pass over the records):
    the same counts, in either order of asking, for every subset of up to three attributes."""
    from itertools import combinations

    rng = np.random.default_rng(5)
    levels = (3, 4, 2, 5)
    rows = np.stack([rng.integers(0, v, 500) for v in levels], axis=1)
    subsets = [s for k in (1, 2, 3) for s in combinations(range(4), k)]
    direct = {s: RecordTable(levels, rows)._count(s) for s in subsets}
    wide_first = RecordTable(levels, rows)
    for s in sorted(subsets, key=len, reverse=True):
        wide_first.table(s)
    for s in subsets:
        assert np.array_equal(wide_first.table(s), direct[s]), s
        assert wide_first.table(s).dtype == np.int64 and wide_first.table(s).flags.c_contiguous
    summed = RecordTable(levels, rows)
    summed.table((0, 2, 3))
    assert summed._from_superset((0, 3)) is not None and summed._from_superset((1,)) is None
    assert summed._from_superset((3, 0)) is None  # not increasing: counted, never summed in the wrong order
