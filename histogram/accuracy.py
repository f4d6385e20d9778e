"""Error figures of released histograms against the true ones (thesis §4.5.1–4.5.2).

The one implementation of the accuracy metrics, pure maths over counts and releases: the lab's
evaluation (:mod:`stream.lab`) and the planner that ``dpstream run`` consults at start-up
(:mod:`stream.planning.planner`, ``release.decision: auto``) both score what they published here,
so a planner's simulated error and an evaluation's are the same figure.

* absolute error of a count (or a range-count answer) ``|R − H|``, in records;
* relative error with the sanity bound ``s``: ``|R − H| / max(s, H)`` (thesis §4.5.2, ``s = 1``
  by default), dimensionless;
* averages are over every timestep and every bin (or query): the thesis's
  ``E^a = 1/(M·N) Σ_k Σ_i |Ã_i^k − A_i^k|``.

**Privacy**: the true histograms are the private input. Only the evaluation and the planner's
simulations (on synthetic or declared-public streams) hold a :class:`Workload`; the service never
builds one, and nothing here is published or logged. Drawing a random query workload is the
caller's job (:func:`histogram.query.random_range_queries`, :func:`histogram.query.sized_range_queries`
with the caller's seeded generator): randomness stays out of this module.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from histogram.query import RangeQueries

__all__ = ["QueryIndex", "RunErrors", "Workload", "stream_errors"]


def _prefix_sums(table: np.ndarray) -> None:
    """In-place inclusive prefix sums along every axis (short axes by slice adds: faster)."""
    for axis, n in enumerate(table.shape):
        if n > 64:
            np.cumsum(table, axis=axis, out=table)
            continue
        view = np.moveaxis(table, axis, 0)
        for i in range(1, n):
            view[i] += view[i - 1]


@dataclass(frozen=True)
class QueryIndex:
    """Range queries compiled for repeated answering (the same answers as
    :func:`histogram.query.answer_range_queries`, computed faster).

    The ``2^d`` inclusion–exclusion corners of every query are turned into flat
    indices into the prefix-sum table once; each histogram then costs one
    prefix-sum pass and one gather.
    """

    queries: RangeQueries
    shape: tuple[int, ...]
    corners: np.ndarray = field(repr=False)
    signs: np.ndarray = field(repr=False)

    @classmethod
    def compile(cls, queries: RangeQueries, shape: Sequence[int]) -> QueryIndex:
        shape = tuple(int(s) for s in shape)
        d = len(shape)
        if queries.lo.shape[1] != d:
            raise ValueError(f"queries have {queries.lo.shape[1]} attributes, the domain {d}")
        padded = tuple(s + 1 for s in shape)
        combos = list(itertools.product((0, 1), repeat=d))
        corners = np.empty((queries.lo.shape[0], len(combos)), dtype=np.int64)
        signs = np.empty(len(combos), dtype=np.float64)
        for c, bits in enumerate(combos):
            coords = tuple(
                queries.hi[:, a] + 1 if bit else queries.lo[:, a] for a, bit in enumerate(bits)
            )
            corners[:, c] = np.ravel_multi_index(coords, padded)
            signs[c] = -1.0 if (d - sum(bits)) % 2 else 1.0
        return cls(queries, shape, corners, signs)

    def answer(self, counts: np.ndarray) -> np.ndarray:
        """Answers (float64) on one flattened histogram."""
        table = np.zeros(tuple(s + 1 for s in self.shape), dtype=np.float64)
        table[tuple(slice(1, None) for _ in self.shape)] = np.asarray(counts).reshape(self.shape)
        _prefix_sums(table)
        return table.ravel()[self.corners] @ self.signs

    @functools.cached_property
    def _distinct(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The distinct queries' corners and, for each query, its row among them — when at most half
        of the queries are distinct (with one bin every query is the same one); ``None`` otherwise."""
        uniq, inverse = np.unique(self.corners, axis=0, return_inverse=True)
        if 2 * uniq.shape[0] > self.corners.shape[0]:
            return None
        return uniq, inverse.reshape(-1)

    def answer_batch(self, counts: np.ndarray) -> np.ndarray:
        """Answers for a ``(K, U)`` stack in one array pass: ``(K, M)`` (same values as :meth:`answer`).

        Identical queries are answered once (the same operations on the same corners, so the same
        values) and copied to every place they occur."""
        arr = np.asarray(counts, dtype=np.float64)
        distinct = self._distinct
        if distinct is not None:
            return self._answer(arr, distinct[0])[:, distinct[1]]
        return self._answer(arr, self.corners)

    @functools.cached_property
    def repeats(self) -> tuple[np.ndarray, np.ndarray] | None:
        """When at most half of the queries are distinct (:attr:`_distinct`): each distinct query's
        first place among the queries and how often it occurs (float64 weights); else ``None``."""
        distinct = self._distinct
        if distinct is None:
            return None
        first, counts = np.unique(distinct[1], return_index=True, return_counts=True)[1:]
        return first, counts.astype(np.float64)

    def answer_distinct(self, counts: np.ndarray) -> np.ndarray:
        """Answers of the distinct queries only (``(K, D)``, in :attr:`repeats`' order); requires
        :attr:`repeats`."""
        distinct = self._distinct
        assert distinct is not None
        return self._answer(np.asarray(counts, dtype=np.float64), distinct[0])

    def _answer(self, arr: np.ndarray, corners: np.ndarray) -> np.ndarray:
        out = np.empty((arr.shape[0], corners.shape[0]))
        step = max(1, (1 << 22) // max(1, corners.shape[0]))  # bound each gathered block to ~32 MB
        for lo in range(0, arr.shape[0], step):
            part = arr[lo:lo + step]
            k = part.shape[0]
            table = np.zeros((k, *(s + 1 for s in self.shape)), dtype=np.float64)
            table[(slice(None), *(slice(1, None) for _ in self.shape))] = part.reshape(k, *self.shape)
            for axis in range(1, table.ndim):
                np.cumsum(table, axis=axis, out=table)
            flat = table.reshape(k, -1)
            acc = self.signs[0] * flat[:, corners[:, 0]]
            for c in range(1, corners.shape[1]):
                acc += self.signs[c] * flat[:, corners[:, c]]
            out[lo:lo + k] = acc
        return out

    def answer_many(self, counts: np.ndarray) -> np.ndarray:
        """Answers for a ``(T, U)`` stack: ``(T, M)``."""
        return np.stack([self.answer(row) for row in np.asarray(counts)]) if len(counts) else np.zeros(
            (0, self.corners.shape[0])
        )


@dataclass(frozen=True)
class Workload:
    """The true histograms and what the errors are measured on (private: the evaluation's input).

    Attributes:
        truth: ``(T, U)`` int64 true counts, one row per timestep.
        shape: the domain's shape (for range queries).
        queries: the range-count workload, compiled (``None`` when ``M = 0``).
        truth_answers: ``(T, M)`` true answers of the workload.
        sanity: the relative-error sanity bound ``s``.
    """

    truth: np.ndarray
    shape: tuple[int, ...]
    queries: QueryIndex | None
    truth_answers: np.ndarray | None
    sanity: float = 1.0

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled (``evaluate --jobs`` sends the workload with every method) with each distinct
        query's true answers once: with one bin the ``(T, M)`` table is M copies of one column
        (8 MB at T = M = 1000). Unpickling rebuilds the same array; when the copies are not all
        equal (a hand-made workload) the table is sent whole."""
        q, answers = self.queries, self.truth_answers
        distinct = q._distinct if q is not None and answers is not None else None
        if distinct is not None:
            inverse = distinct[1]
            first = np.unique(inverse, return_index=True)[1]  # each distinct query's first place
            compact = answers[:, first]
            if np.array_equal(compact[:, inverse], answers):
                return _workload_from_compact, (self.truth, self.shape, q, compact, inverse, self.sanity)
        return Workload, (self.truth, self.shape, q, answers, self.sanity)

    @classmethod
    def build(
        cls,
        truth: np.ndarray,
        shape: Sequence[int],
        *,
        queries: RangeQueries | None = None,
        sanity: float = 1.0,
    ) -> Workload:
        """The workload of ``truth`` (``(timesteps, bins)`` integer counts over a domain of ``shape``),
        measured on ``queries`` (None: per-bin figures only) with sanity bound ``sanity`` (records).

        Raises:
            ValueError: ``truth`` is not a 2-D integer array, its bins do not match ``shape``, or
                ``sanity <= 0``.
        """
        truth = np.asarray(truth)
        if truth.ndim != 2 or truth.dtype.kind not in "iu":
            raise ValueError("true histograms must be a (timesteps, bins) integer array")
        shape = tuple(int(s) for s in shape)
        if int(np.prod(shape)) != truth.shape[1]:
            raise ValueError(f"histograms have {truth.shape[1]} bins, the domain {int(np.prod(shape))}")
        if sanity <= 0:
            raise ValueError(f"the sanity bound must be > 0, got {sanity}")
        if queries is None or queries.lo.shape[0] == 0:
            return cls(truth.astype(np.int64, copy=False), shape, None, None, float(sanity))
        index = QueryIndex.compile(queries, shape)
        answers = index.answer_batch(truth)  # whole counts: every partial sum is exact, as in answer_many
        return cls(truth.astype(np.int64, copy=False), shape, index, answers, float(sanity))

    @property
    def timesteps(self) -> int:
        return int(self.truth.shape[0])

    @property
    def bins(self) -> int:
        return int(self.truth.shape[1])

    @property
    def query_count(self) -> int:
        return 0 if self.queries is None else int(self.queries.corners.shape[0])

    def answers(self, counts: np.ndarray) -> np.ndarray | None:
        if self.queries is None:
            return None
        return self.queries.answer(counts)


def _workload_from_compact(truth: np.ndarray, shape: tuple[int, ...], queries: QueryIndex | None,
                           compact: np.ndarray, inverse: np.ndarray, sanity: float) -> Workload:
    """:meth:`Workload.__reduce__`'s inverse: every query's column from its distinct query's."""
    return Workload(truth, shape, queries, np.ascontiguousarray(compact[:, inverse]), sanity)


class RunErrors:
    """The error figures of a stack of runs against one workload's truth, fed timestep by timestep.

    The one implementation of the error metrics (thesis §4.5.1–4.5.2): every lab path (the engine
    stepped run by run, several runs stepped together, the non-private ``-true`` versions, the
    reference rows) and the planner's simulated candidates feed what they published here.

    Inputs: ``published`` holds the counts each run published (records per bin, any real
    dtype; a run with nothing published yet feeds the all-zero placeholder), shaped
    ``(runs, bins)`` for one timestep (:meth:`add`) or ``(runs, k, bins)`` for ``k`` consecutive
    timesteps (:meth:`add_block`); with ``runs == 1`` the leading axis may be left out. The truth
    of timestep ``t`` is ``workload.truth[t]`` and ``workload.truth_answers[t]``.

    Output (:meth:`metrics`, one dict per run), averaged over the timesteps fed and the bins (or
    queries): ``mae`` (records per bin), ``mre`` (``|R − H| / max(s, H)``, dimensionless, ``s``
    the workload's sanity bound), ``query_abs_error`` (records per range query) and
    ``query_rel_error`` (NaN without queries).

    Sums are kept per run in timestep order, each timestep's sum over bins taken first, so one run
    fed step by step gives the same floats whatever the stack or block it is fed in. Query answers
    are recomputed only for runs whose published counts changed since the previous timestep
    (republished counts are the same vector, so are their answers).
    """

    __slots__ = ("w", "runs", "abs_sum", "rel_sum", "qabs_sum", "qrel_sum", "steps", "_qsanity",
                 "_qtruth", "_repeats", "_last", "_last_answers")

    def __init__(self, workload: Workload, runs: int = 1) -> None:
        if runs < 1:
            raise ValueError(f"need at least one run, got {runs}")
        self.w = workload
        self.runs = int(runs)
        self.abs_sum = np.zeros(runs)
        self.rel_sum = np.zeros(runs)
        self.qabs_sum = np.zeros(runs)
        self.qrel_sum = np.zeros(runs)
        self.steps = 0
        # the relative error's denominators max(s, H) are taken per timestep (in add/add_block): a
        # (timesteps, bins) float copy of the truth would cost 8 bytes per count for the whole run
        # repeated queries (with one bin every query is the same one) are answered and compared once
        # and weighted by how often they occur: the same figures, to rounding
        self._repeats = workload.queries.repeats if workload.queries is not None else None
        qtruth = workload.truth_answers
        if qtruth is not None and self._repeats is not None:
            qtruth = qtruth[:, self._repeats[0]]
        self._qtruth = qtruth
        self._qsanity = None if qtruth is None else np.maximum(workload.sanity, qtruth)
        self._last: np.ndarray | None = None  # (runs, bins): the previous timestep's counts
        self._last_answers: np.ndarray | None = None  # (runs, M): their answers

    def add(self, t: int, published: np.ndarray) -> None:
        """Timestep ``t`` published ``published`` (``(runs, bins)``, or ``(bins,)`` for one run)."""
        w = self.w
        pub = np.asarray(published, dtype=np.float64)
        if pub.ndim == 1 and self.runs == 1:
            pub = pub[None]
        if pub.shape != (self.runs, w.bins):
            raise ValueError(f"published counts of shape {pub.shape}: expected (runs={self.runs}, bins={w.bins})")
        if not 0 <= t < w.timesteps:
            raise ValueError(f"timestep {t} is outside the workload's 0..{w.timesteps - 1}")
        err = np.abs(pub - w.truth[t])
        self.abs_sum += err.sum(axis=1)
        self.rel_sum += (err / np.maximum(w.sanity, w.truth[t])).sum(axis=1)
        if w.queries is not None and w.truth_answers is not None:
            last = self._last
            if last is not None and np.array_equal(last, pub):  # republished everywhere: the same answers
                answers = self._last_answers
            else:
                answers = self._answers(pub[:, None])[:, 0]
            qerr = np.abs(answers - self._qtruth[t])  # type: ignore[index]
            self.qabs_sum += self._qsum(qerr)
            self.qrel_sum += self._qsum(qerr / self._qsanity[t])  # type: ignore[index]
        self._last = pub.copy()  # the caller may reuse its buffer
        self.steps += 1

    def add_block(self, start: int, published: np.ndarray) -> None:
        """Timesteps ``start .. start + k - 1`` published ``published`` (``(runs, k, bins)``, or
        ``(k, bins)`` for one run)."""
        w = self.w
        pub = np.asarray(published, dtype=np.float64)
        if pub.ndim == 2 and self.runs == 1:
            pub = pub[None]
        if pub.ndim != 3 or pub.shape[0] != self.runs or pub.shape[2] != w.bins:
            raise ValueError(f"published counts of shape {pub.shape}: expected (runs={self.runs}, timesteps, "
                             f"bins={w.bins})")
        k = pub.shape[1]
        if not k:
            return
        stop = start + k
        if start < 0 or stop > w.timesteps:
            raise ValueError(f"timesteps {start}..{stop - 1} are outside the workload's 0..{w.timesteps - 1}")
        err = np.abs(pub - w.truth[start:stop])
        self._accumulate(self.abs_sum, self.rel_sum, err, np.maximum(w.sanity, w.truth[start:stop]))
        if w.queries is not None and w.truth_answers is not None:
            answers = self._answers(pub)
            qerr = np.abs(answers - self._qtruth[start:stop])  # type: ignore[index]
            self._accumulate(self.qabs_sum, self.qrel_sum, qerr, self._qsanity[start:stop],  # type: ignore[index]
                             None if self._repeats is None else self._repeats[1])
        self._last = pub[:, -1].copy()  # the caller may reuse its buffer
        self.steps += k

    def _qsum(self, qerr: np.ndarray) -> np.ndarray:
        """Sum over the (distinct, weighted) queries: the last axis."""
        if self._repeats is None:
            return qerr.sum(axis=-1)
        return (qerr * self._repeats[1]).sum(axis=-1)

    @staticmethod
    def _accumulate(abs_sum: np.ndarray, rel_sum: np.ndarray, err: np.ndarray, sanity: np.ndarray,
                    weights: np.ndarray | None = None) -> None:
        """Add ``err`` (``(runs, k, n)``) per run, one timestep's sum over ``n`` at a time, in order
        (each of the ``n`` entries times its weight, when given: repeated queries)."""
        if weights is None:
            a = err.sum(axis=2)
            r = (err / sanity).sum(axis=2)
        else:
            a = (err * weights).sum(axis=2)
            r = (err / sanity * weights).sum(axis=2)
        # timestep by timestep, left to right: an accumulate is sequential (unlike a reduction), so
        # these are the floats of adding one timestep at a time
        abs_sum[:] = np.cumsum(np.concatenate([abs_sum[:, None], a], axis=1), axis=1)[:, -1]
        rel_sum[:] = np.cumsum(np.concatenate([rel_sum[:, None], r], axis=1), axis=1)[:, -1]

    def _answers(self, pub: np.ndarray) -> np.ndarray:
        """The workload's query answers of every run and timestep of ``pub`` (``(runs, k, M)``)."""
        q = self.w.queries
        assert q is not None
        runs, k, _ = pub.shape
        if self._last is None:
            changed = np.ones((runs, k), dtype=bool)
            changed[:, 1:] = np.any(pub[:, :-1] != pub[:, 1:], axis=2)
        else:
            changed = np.any(np.concatenate([self._last[:, None], pub[:, :-1]], axis=1) != pub, axis=2)
        repeats = self._repeats
        out = np.empty((runs, k, q.corners.shape[0] if repeats is None else repeats[0].size))
        if changed.any():
            out[changed] = q.answer_batch(pub[changed]) if repeats is None else q.answer_distinct(pub[changed])
        if not changed.all():  # republished: the answers of the latest change (before the block: the last ones)
            latest = np.maximum.accumulate(np.where(changed, np.arange(k), -1), axis=1)
            copied = np.take_along_axis(out, np.maximum(latest, 0)[:, :, None], axis=1)
            if (latest < 0).any():
                copied[latest < 0] = np.broadcast_to(self._last_answers[:, None], out.shape)[latest < 0]  # type: ignore[index]
            out = np.where(changed[:, :, None], out, copied)
        self._last_answers = out[:, -1]
        return out

    def metrics(self) -> list[dict[str, float]]:
        """One dict of figures per run (see the class docstring for units)."""
        w, n = self.w, max(self.steps, 1)
        m = max(w.query_count, 1)
        return [{
            "mae": float(self.abs_sum[r]) / (n * w.bins),
            "mre": float(self.rel_sum[r]) / (n * w.bins),
            "query_abs_error": float(self.qabs_sum[r]) / (n * m) if w.query_count else math.nan,
            "query_rel_error": float(self.qrel_sum[r]) / (n * m) if w.query_count else math.nan,
        } for r in range(self.runs)]


def stream_errors(workload: Workload, published: np.ndarray) -> list[dict[str, float]]:
    """:class:`RunErrors` of whole runs at once: ``published`` is ``(runs, timesteps, bins)`` (or
    ``(timesteps, bins)`` for one run), every timestep of the workload; one dict per run."""
    pub = np.asarray(published)
    acc = RunErrors(workload, 1 if pub.ndim == 2 else pub.shape[0])
    acc.add_block(0, pub)
    return acc.metrics()
