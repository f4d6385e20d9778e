"""Neighbours at the inclusion deadline: records just past it, next to a newcomer that moves a seal.

Issue 27 item 7. ``tests/stream/test_neighbours.py`` draws honest delays and
newcomer record times over the whole horizon, so it almost never puts an
honest record *just past* a cell's deadline (``end + allowed_lateness``) in
the same stretch of arrivals as a newcomer whose own record, also just past
the deadline, ends a batch and so completes the cell one batch earlier. That
is exactly where a rule that adds ``allowed_lateness`` a second time on the
inclusion path (an event counts if its record time is at most
``end + 2·allowed_lateness``) leaks: without the newcomer the honest record
is counted (its cell is still open when it arrives); with the newcomer the
cell is complete first and the honest record is ``arrived_after_seal``. One
person then changes someone else's count.

The strategies below search that region on purpose: a cell ``c``, honest
records whose record times sit on a grid of offsets around the deadline
(exactly on it, one ulp past, a second past, just inside twice the lateness…),
a newcomer whose record time is just past the same deadline, and batch cuts
that include "every record its own batch". ``@example``s pin the boundary
cases. Under ``HYPOTHESIS_PROFILE=nightly`` (``tests/profiles.py``) the
property runs ten times as many examples.

``test_a_lenient_deadline_is_caught`` runs the same property against the
planted rule (the deadline counted twice, patched into
:meth:`Grid.inclusion`): hypothesis must find a counterexample, so this file
can fail.
"""

from __future__ import annotations

import bisect
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from stream.ingest import windowing
from stream.ingest.windowing import Grid
from tests.profiles import examples
from tests.stream.test_neighbours import STEP, T0, Event, K, S, run_recorded, worst_l1

GRID = Grid.from_settings(S)
LATENESS = GRID.allowed_lateness  # 120 s
CELLS = 7  # cells 0..6 have a deadline inside the drawn horizon


FIRST = GRID.cell_of(T0)  # grid cells count from the origin; the stream starts at T0


def deadline(c: int) -> float:
    """Record-time deadline of the stream's ``c``-th timestep (from the production grid)."""
    return float(GRID.deadline(FIRST + c))


#: record-time offsets from a deadline worth trying: on it, an ulp either side, just past, just inside
#: twice the lateness (where a doubled deadline would still accept), and the doubled deadline itself
OFFSETS = st.one_of(
    st.sampled_from([0.0, 1e-6, 1e-3, 0.5, 1.0, 30.0, LATENESS - 1, LATENESS, LATENESS + 1e-3, -1e-3, -1.0]),
    st.floats(-5.0, 2 * LATENESS + 5, allow_nan=False),
)


def _in_cell(draw, c: int) -> float:
    """An event time inside cell ``c``: its first instant, its last second, or anywhere."""
    start = T0 + c * STEP
    return draw(st.one_of(st.just(start), st.just(start + STEP - 1e-3), st.floats(start, start + STEP - 1e-3)))


Cuts = tuple[str, list[float]]  # ("index", positions in arrival order) or ("time", arrival times)


def l1(base: list[Event], extra: list[Event], cuts: Cuts) -> int:
    """Largest per-timestep L1 distance between D and D′ = D + extra through the production rule.

    Arrival order is record-time order (one partition, monotone record times). Batches are cut
    either at the same positions in both runs (as ``test_neighbours.worst_l1``) or at the same
    *arrival times* — a poll returns what had arrived by then, so in D′ the newcomer's record
    falls into the batch its arrival time puts it in."""
    kind, values = cuts
    if kind == "index":
        return worst_l1(run_recorded, base, extra, [int(v) for v in values])
    d = sorted(base, key=lambda e: e[2])
    d2 = sorted(base + extra, key=lambda e: e[2])
    at = lambda run: [bisect.bisect_right([e[2] for e in run], v) for v in values]  # noqa: E731
    h, h2 = run_recorded(d, at(d)), run_recorded(d2, at(d2))
    zero = np.zeros(S.domain().size, dtype=np.int64)
    return max((int(np.abs(h.get(c, zero) - h2.get(c, zero)).sum()) for c in set(h) | set(h2)), default=0)


@st.composite
def boundary_case(draw) -> tuple[list[Event], list[Event], Cuts]:
    """(D's events, the newcomer's events, batch cuts) around the deadline of one cell."""
    c = draw(st.integers(0, CELLS - 1))
    dl = deadline(c)
    base: list[Event] = []
    for i in range(draw(st.integers(1, 8))):  # honest records of cell c around its deadline (distinct people)
        base.append((f"b{i}", _in_cell(draw, c), dl + draw(OFFSETS), draw(st.integers(0, 99)), draw(st.sampled_from("MF"))))
    for i in range(draw(st.integers(0, 6))):  # background: on-time records of cells c and c + 1
        t = _in_cell(draw, c + draw(st.integers(0, 1)))
        r = draw(st.floats(t, min(t + LATENESS, max(t, dl)), allow_nan=False))
        base.append((f"q{i}", t, r, draw(st.integers(0, 99)), draw(st.sampled_from("MF"))))
    m = draw(st.integers(1, 3))
    extra: list[Event] = []
    for _ in range(m):
        r = dl + draw(OFFSETS)
        where = draw(st.sampled_from(["next cell", "same cell", "own record time"]))
        if where == "same cell":  # counted in c only under a lenient deadline
            t = _in_cell(draw, c)
        elif where == "next cell":  # on time in c + 1
            t = _in_cell(draw, c + 1)
        else:  # stamped at its own record time (on time wherever that falls)
            t = r
        extra.append(("newcomer", t, r, draw(st.integers(0, 99)), draw(st.sampled_from("MF"))))
    n = len(base) + m
    cuts = draw(st.one_of(
        # a poll boundary right after a newcomer's record, or anywhere around the deadline
        st.lists(st.one_of(st.sampled_from([e[2] for e in extra]), st.builds(lambda o: dl + o, OFFSETS)),
                 min_size=1, max_size=4).map(lambda v: ("time", v)),
        st.just(("index", list(range(n + 1)))),  # every record its own batch
        st.lists(st.integers(0, n), max_size=n).map(lambda v: ("index", v)),
    ))
    return base, extra, cuts


def _case(c: int, honest: list[float], newcomer: list[tuple[float, float]]):
    """A pinned case: honest records of cell ``c`` at deadline + each offset; newcomer records (event time
    offset from the cell's start, record time offset from the deadline); a poll boundary right after
    each newcomer record."""
    dl, start = deadline(c), T0 + c * STEP
    base = [(f"b{i}", start + 10 * i, dl + o, 30 + i, "M") for i, o in enumerate(honest)]
    extra = [("newcomer", start + e, dl + r, 90, "F") for e, r in newcomer]
    return base, extra, ("time", [e[2] for e in extra])


# the boundary cases, pinned: honest records inside a doubled deadline, a newcomer past the deadline
# (on time in the next cell, or in the same cell) arriving just before them at the end of a poll
PINNED = [
    _case(0, [1.0, 2.0], [(STEP + 30, 0.5)]),          # newcomer on time in cell 1
    _case(3, [1e-3, 60.0], [(100.0, 1e-6)]),           # newcomer in cell 3 itself
    _case(2, [1e-6, LATENESS], [(STEP + 1, 0.0)]),     # newcomer exactly on the deadline: completes nothing
    _case(5, [LATENESS - 1, 1.0, 0.5], [(STEP + 5, 1e-3)]),
]


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(boundary_case())
@example(PINNED[0])
@example(PINNED[1])
@example(PINNED[2])
@example(PINNED[3])
def test_records_just_past_a_deadline_next_to_a_newcomer(case):
    assert l1(*case) <= K


def _doubled_inclusion(self: Grid, times, record_times):  # type: ignore[no-untyped-def]
    """The planted bug: the inclusion rule adds ``allowed_lateness`` to a deadline that already has it."""
    status, cells = original_inclusion(self, times, record_times)
    r = np.asarray(record_times, dtype=np.float64)
    lenient = (status == windowing.LATE) & (r <= self.deadline(cells) + self.allowed_lateness)
    status = status.copy()
    status[lenient] = windowing.ACCEPTED
    return status, cells


original_inclusion = Grid.inclusion


def test_a_lenient_deadline_is_caught():
    """The property fails on the pinned cases, and hypothesis's own search (no pinned example, no
    shrinking, a fixed seed) finds a counterexample within the everyday example budget."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(Grid, "inclusion", _doubled_inclusion)
    assert [l1(*case) > K for case in PINNED] == [True, True, False, True]
    found: list[tuple] = []

    @settings(max_examples=examples(150), deadline=None, database=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow])
    @given(boundary_case())
    def search(case):
        if l1(*case) > K:
            found.append(case)
            raise AssertionError("found")

    try:
        with pytest.raises(AssertionError, match="found"):
            search()
    finally:
        monkeypatch.undo()
    assert l1(*found[0]) <= K


def test_the_deadline_is_the_documented_one():
    """``Grid.deadline`` is the cell's end + ``allowed_lateness`` (once), and inclusion uses it as ``≤``."""
    for c in (0, 3):
        end = T0 + (c + 1) * STEP
        assert deadline(c) == end + LATENESS == 120 + T0 + (c + 1) * 900
        t = np.array([end - 1.0, end - 1.0])
        r = np.array([end + LATENESS, math.nextafter(end + LATENESS, math.inf)])
        status, _ = GRID.inclusion(t, r)
        assert status.tolist() == [windowing.ACCEPTED, windowing.LATE]


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(pytest.main([__file__, "-q"]))
