"""Run-vectorised lab paths: every run of a method in one array pass per timestep (evaluation only).

``dpstream evaluate`` runs each method R times on the same true histograms. Stepping the service's
engine (:func:`stream.lab.evaluate.run_method`) costs about 0.75 ms per step in exact ``Fraction``
accounting and one-value exact noise draws, so 20 runs of 1,000 timesteps took ~15 s per method.
The runs are independent, so here all R runs of a method go in one pass per timestep: the state of
each run (its window ledger, SVT instance, PID controller, last release, group, filter) is a row of
an array. Uniform, fixed, Sample, DSAT and DSFT have no rule here: the kernel calls the policy's own
``decide_runs`` (the rule the service runs with one run); the ledger is
:class:`controller.ledger.UnitLedger` in units of the policy's declared ``charges()``; DSAT's PID
update is :meth:`controller.pid.PIDController.update_runs`; LPA's scale and expected error are the
mechanism's. BD/BA, PeGaSus and FAST_w are still written once more over arrays here (issue 29, not
finished).

**Evaluation only.** Nothing here publishes or is used by the service: the service (and ``dpstream
replay``) always steps :class:`controller.step.Engine`, whose accountant is the one that enforces
privacy. These kernels reproduce the engine's decisions and charges for the figures an evaluation
reports; they are checked against the engine bit for bit (``tests/stream/lab/test_vectorised.py``:
with :class:`EngineNoise`, which draws each run's noise from the very drawers the engine uses, every
release, decision and ε figure equals the engine's).

Exactness is kept where the engine has it:

* **ε** is counted in whole multiples of one public unit (the rational gcd of ε and the policy's
  declared charges), in int64 (:class:`controller.ledger.UnitLedger`): the window sums and the cap
  check are exact integer comparisons, and ``tests/controller/test_ledger_law.py`` holds them equal
  to the accountant's ``Fraction`` ones. Reported figures are converted back through ``Fraction``.
* **noise** is the same exact discrete Laplace sampler (:meth:`histogram.noise.GeneratorDrawer.
  discrete_laplace`). By default (:class:`PooledNoise`) it is drawn in blocks, one seeded drawer per
  noise scale, so the runs have the engine's distribution but not its values: ``dpstream replay
  --seed`` does not reproduce them. :class:`EngineNoise` (``evaluate --replayable``) draws from the
  engine's own drawers instead: the same path, and run r is what ``replay --seed seed+r`` publishes.
* **public floats** (DSAT's PID, FAST_w's filter and controller, the thresholds) use the same IEEE
  operations in the same order as the policies; ``math.exp`` and the ``Fraction(repr(x))`` threshold
  are evaluated exactly as the policies do.

Eligible (:func:`vector_eligible`): w-event DSAT/DSFT, BD, BA, Sample, PeGaSus, FAST_w, uniform and
fixed, with LPA and an element-wise ``release.postprocess`` (``none``, ``nonnegative``). Other
configurations take the engine path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from controller.ledger import UnitLedger
from controller.policies.base import RunsContext
from controller.policies.baselines import FixedPolicy, UniformPolicy
from controller.policies.kellaris import BudgetAbsorption, BudgetDistribution
from controller.policies.sampling import WEventSamplingPolicy
from controller.policies.wevent import FAST_MAX_EXPONENT, FastPolicy, PegasusPolicy, SamplePolicy
from histogram.noise import _EXACT_LIMIT, GeneratorDrawer, Randomness
from histogram.postprocess import parse_chain, postprocess
from stream.lab.metrics import QueryIndex, Workload

__all__ = ["LabNoise", "PooledNoise", "EngineNoise", "VectorResult", "vector_eligible", "run_vectorised"]

#: ``release.postprocess`` values that act on each count alone (so they apply to a stack of runs).
ELEMENTWISE_POST = frozenset({"none", "nonnegative"})

#: decision methods with a run-vectorised kernel (under w-event privacy)
VECTOR_METHODS = frozenset({"dsat", "dsft", "uniform", "fixed", "bd", "ba", "sample", "pegasus", "fast"})


class LabNoise(Protocol):
    """Where a kernel's noise comes from: exact discrete Laplace values for some runs."""

    def begin(self, t: int) -> None:
        """Timestep ``t`` starts (drawers of the previous one are done)."""
        ...

    def laplace(self, runs: np.ndarray, scale: Fraction, size: int | None) -> np.ndarray:
        """``DLap(scale)`` for each run in ``runs``: shape ``(len(runs),)`` or ``(len(runs), size)``."""
        ...

    def laplace_each(self, runs: np.ndarray, num: np.ndarray, den: np.ndarray, size: int) -> np.ndarray:
        """``(len(runs), size)`` values, row i of scale ``num[i]/den[i]`` (positive ints)."""
        ...


class _Block:
    """Values of one kind handed out in order from a seeded drawer, refilled in growing blocks."""

    __slots__ = ("fill", "buf", "pos", "chunk")

    def __init__(self, fill: Callable[[int], np.ndarray]) -> None:
        self.fill = fill
        self.buf = np.zeros(0, dtype=np.int64)
        self.pos = 0
        self.chunk = 256

    def take(self, n: int) -> np.ndarray:
        if self.pos + n > self.buf.size:
            while self.chunk < 4 * n:
                self.chunk *= 2
            self.buf = np.concatenate([self.buf[self.pos:], self.fill(self.chunk)])
            self.pos = 0
            self.chunk = min(self.chunk * 2, 1 << 20)
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out


class PooledNoise:
    """Exact discrete Laplace values drawn in blocks (the lab default).

    A scale ``t/s`` asked for a third time gets a block of its own: values of
    :meth:`histogram.noise.GeneratorDrawer.discrete_laplace` from a drawer keyed by (seed, stream,
    method, scale), handed out in order. Rarer scales (BD's releases, whose ε is rarely the same
    twice) are assembled from blocks that do not depend on ``s``: ``X`` with ``P(X = x) ∝ e^{−x/t}``
    (:meth:`~histogram.noise.GeneratorDrawer.discrete_exponential`, one block per ``t``) and fair
    signs; ``⌊X/s⌋`` with its sign, ``(−, 0)`` rejected and redrawn, is ``DLap(t/s)`` exactly (CKS
    Algorithm 2's last step). Either way the values depend on the seed and the method's decisions
    only. Same law as the engine's draws, other values.
    """

    POOL_AFTER = 3

    def __init__(self, seed: int, stream: str, name: str) -> None:
        self._rnd = Randomness.seeded(seed)
        self._stream = stream
        self._name = name
        self._blocks: dict[tuple[str, int, int], _Block] = {}
        self._seen: dict[tuple[int, int], int] = {}
        self._fixed: dict[int, tuple[Fraction, _Block]] = {}

    def begin(self, t: int) -> None:
        return None

    def _block(self, kind: str, a: int, b: int) -> _Block:
        key = (kind, a, b)
        block = self._blocks.get(key)
        if block is None:
            drawer = self._rnd.drawer(self._stream, 0, f"lab-vector:{self._name}:{kind}:{a}/{b}")
            if kind == "dlap":
                scale = Fraction(a, b)
                block = _Block(lambda n: drawer.discrete_laplace(scale, n))  # type: ignore[misc]
            elif kind == "x":
                block = _Block(lambda n: drawer.discrete_exponential(a, n))
            else:
                block = _Block(lambda n: drawer.fair_bits(n).astype(np.int64))
            self._blocks[key] = block
        return block

    def laplace(self, runs: np.ndarray, scale: Fraction, size: int | None) -> np.ndarray:
        """A scale every timestep asks for (decision noise): straight from its block."""
        k = int(runs.size)
        hit = self._fixed.get(id(scale))  # the kernels pass the same scale objects every timestep
        if hit is None or hit[0] is not scale:
            sc = Fraction(scale)
            hit = self._fixed[id(scale)] = (scale, self._block("dlap", sc.numerator, sc.denominator))
        block = hit[1]
        z = block.take(k * (1 if size is None else size))
        return z if size is None else z.reshape(k, size)

    def laplace_each(self, runs: np.ndarray, num: np.ndarray, den: np.ndarray, size: int) -> np.ndarray:
        k = int(runs.size)
        nl, dl = num.tolist(), den.tolist()
        if k and nl.count(nl[0]) == k and dl.count(dl[0]) == k:
            # every row at one scale (all methods but BD's releases): one group, no fancy indexing
            a, b = nl[0], dl[0]
            g = math.gcd(a, b)
            key = (a // g, b // g)
            seen = self._seen[key] = self._seen.get(key, 0) + 1
            if seen >= self.POOL_AFTER or key[0] >= _EXACT_LIMIT or key[1] >= _EXACT_LIMIT:
                return self._block("dlap", *key).take(k * size).reshape(k, size)
            n = k * size
            return self._assembled(np.full(n, key[0], dtype=np.int64), np.full(n, key[1], dtype=np.int64)).reshape(-1, size)
        keys = []
        for a, b in zip(nl, dl, strict=True):
            g = math.gcd(a, b)
            keys.append((a // g, b // g))
        groups: dict[tuple[int, int], list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        out = np.empty((k, size), dtype=np.int64)
        rare: list[int] = []
        for key, idx in groups.items():
            seen = self._seen[key] = self._seen.get(key, 0) + 1
            if seen >= self.POOL_AFTER or key[0] >= _EXACT_LIMIT or key[1] >= _EXACT_LIMIT:
                out[idx] = self._block("dlap", *key).take(len(idx) * size).reshape(len(idx), size)
            else:
                rare.extend(idx)
        if rare:
            t = np.repeat(np.array([keys[i][0] for i in rare], dtype=np.int64), size)
            s = np.repeat(np.array([keys[i][1] for i in rare], dtype=np.int64), size)
            out[rare] = self._assembled(t, s).reshape(-1, size)
        return out

    def _assembled(self, t: np.ndarray, s: np.ndarray) -> np.ndarray:
        """One ``DLap(t_i/s_i)`` per entry from the ``X`` blocks of each ``t`` and the sign block."""
        out = np.empty(t.size, dtype=np.int64)
        todo = np.arange(t.size)
        while todo.size:
            tt = t[todo]
            if todo.size <= 64:  # few entries (one bin): group them in Python, in np.unique's order
                where: dict[int, list[int]] = {}
                for i, tv in enumerate(tt.tolist()):
                    where.setdefault(tv, []).append(i)
                if len(where) == 1:
                    x = self._block("x", next(iter(where)), 1).take(todo.size)
                else:
                    x = np.empty(todo.size, dtype=np.int64)
                    for tv in sorted(where):
                        x[where[tv]] = self._block("x", tv, 1).take(len(where[tv]))
            else:
                x = np.empty(todo.size, dtype=np.int64)
                for tv in sorted(set(tt.tolist())):
                    sel = np.flatnonzero(tt == tv)
                    x[sel] = self._block("x", tv, 1).take(sel.size)
            y = x // s[todo]
            negative = self._block("sign", 0, 1).take(todo.size).astype(bool)
            ok = ~(negative & (y == 0))
            out[todo[ok]] = np.where(negative, -y, y)[ok]
            todo = todo[~ok]
        return out


class EngineNoise:
    """The engine's own draws: run ``r`` at timestep ``t`` draws from
    ``Randomness.seeded(seed + r).drawer(stream, t, "release")``, in the engine's call order.

    With it a kernel publishes exactly what ``dpstream replay --seed seed+r`` publishes (slow: one
    drawer and one-value draws per run and timestep; the tests use it to check the kernels).
    """

    def __init__(self, seed: int, stream: str) -> None:
        self._seed = seed
        self._stream = stream
        self._t = -1
        self._drawers: dict[int, GeneratorDrawer] = {}

    def begin(self, t: int) -> None:
        self._t = t
        self._drawers = {}

    def laplace(self, runs: np.ndarray, scale: Fraction, size: int | None) -> np.ndarray:
        out = []
        for r in runs.tolist():
            d = self._drawers.get(r)
            if d is None:
                d = self._drawers[r] = Randomness.seeded(self._seed + r).drawer(self._stream, self._t, "release")
            out.append(d.discrete_laplace(scale, size))
        if size is None:
            return np.asarray(out, dtype=np.int64).reshape(len(out))
        return np.asarray(out, dtype=np.int64).reshape(len(out), size)

    def laplace_each(self, runs: np.ndarray, num: np.ndarray, den: np.ndarray, size: int) -> np.ndarray:
        return np.vstack([self.laplace(runs[i:i + 1], Fraction(int(a), int(b)), size)
                          for i, (a, b) in enumerate(zip(num.tolist(), den.tolist(), strict=True))])


@dataclass
class VectorResult:
    """R runs of one method: metrics per run, and each run's decisions.

    ``sources[r, t]`` is the timestep whose release run r published at t (-1: the all-zero placeholder);
    ``fresh_units[r, t]`` the ε of a fresh release at t in whole ``unit``s (0: none; see
    :meth:`epsilons`). ``published`` (only when asked) is ``(R, T, U)``.
    """

    metrics: list[dict[str, float]]
    sources: np.ndarray
    fresh_units: np.ndarray
    unit: Fraction
    published: np.ndarray | None = None

    def epsilons(self, r: int) -> dict[int, Fraction]:
        """Run ``r``'s fresh timesteps and the ε of each (as :class:`stream.lab.evaluate.RunTrace`)."""
        row = self.fresh_units[r]
        return {int(t): Fraction(int(row[t])) * self.unit for t in np.flatnonzero(row)}


class _Metrics:
    """The figures of :class:`stream.lab.metrics.RunErrors` for R runs, buffered in blocks.

    The published counts of every run are buffered for a block of timesteps and compared with the
    truth in one pass per block. Identical range queries are answered once and weighted by how often
    they occur (with one bin every query is the same one). Still a second implementation of the
    error figures (issue 29): it goes with the kernels, or becomes a buffer in front of
    ``RunErrors.add_block``."""

    BLOCK = 128

    def __init__(self, workload: Workload, runs: int) -> None:
        self.w = workload
        self.abs = np.zeros(runs)
        self.rel = np.zeros(runs)
        self.qabs = np.zeros(runs)
        self.qrel = np.zeros(runs)
        self.q: QueryIndex | None = None
        if workload.queries is not None and workload.truth_answers is not None:
            corners, first, counts = np.unique(workload.queries.corners, axis=0, return_index=True,
                                               return_counts=True)[:3]
            self.q = QueryIndex(workload.queries.queries, workload.queries.shape, corners, workload.queries.signs)
            self.weight = counts.astype(np.float64)
            self.truth_answers = workload.truth_answers[:, first]
            self.sanity_answers = np.maximum(workload.sanity, self.truth_answers)
        self.sanity_truth = np.maximum(workload.sanity, workload.truth)
        self.block = max(1, min(self.BLOCK, (1 << 22) // max(1, runs * workload.bins)))
        self.buf = np.zeros((runs, self.block, workload.bins))
        self.start = 0
        self.filled = 0

    def add(self, t: int, published: np.ndarray) -> None:
        """Timestep ``t`` (the next one) published ``published`` (``(R, U)``) in every run."""
        self.buf[:, self.filled] = published
        self.filled += 1
        if self.filled == self.block:
            self.flush()

    def flush(self) -> None:
        k = self.filled
        if not k:
            return
        lo, hi = self.start, self.start + k
        pub = self.buf[:, :k]
        err = np.abs(pub - self.w.truth[lo:hi])
        self.abs += err.sum(axis=(1, 2))
        self.rel += (err / self.sanity_truth[lo:hi]).sum(axis=(1, 2))
        if self.q is not None:
            runs, bins = pub.shape[0], pub.shape[2]
            answers = self.q.answer_batch(pub.reshape(runs * k, bins)).reshape(runs, k, -1)
            qerr = np.abs(answers - self.truth_answers[lo:hi])
            self.qabs += (qerr @ self.weight).sum(axis=1)
            self.qrel += ((qerr / self.sanity_answers[lo:hi]) @ self.weight).sum(axis=1)
        self.start, self.filled = hi, 0

    def metrics(self, r: int) -> dict[str, float]:
        w, n = self.w, max(self.w.timesteps, 1)
        m = max(w.query_count, 1)
        return {
            "mae": float(self.abs[r]) / (n * w.bins),
            "mre": float(self.rel[r]) / (n * w.bins),
            "query_abs_error": float(self.qabs[r]) / (n * m) if w.query_count else math.nan,
            "query_rel_error": float(self.qrel[r]) / (n * m) if w.query_count else math.nan,
        }


def vector_eligible(settings: Any) -> bool:
    """Whether :func:`run_vectorised` applies to these settings."""
    return (settings.privacy.unit == "w-event" and settings.release.mechanism == "lpa"
            and settings.release.decision in VECTOR_METHODS
            and settings.release.postprocess in ELEMENTWISE_POST)


@dataclass
class _Run:
    """What every kernel shares: sizes, truth, noise, ledger and each run's last release."""

    R: int
    T: int
    U: int
    truth: np.ndarray
    noise: LabNoise
    ledger: UnitLedger
    unit: Fraction
    mech: Any
    last: np.ndarray = field(init=False)  # (R, U): the counts the decisions compare with (int64 or float)
    has_last: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.last = np.zeros((self.R, self.U), dtype=np.int64)
        self.has_last = np.zeros(self.R, dtype=bool)
        self._same: dict[int, np.ndarray] = {}

    def same(self, e: int, n: int) -> np.ndarray:
        """``n`` copies of ``e`` (read-only: a slice of one array kept per value)."""
        arr = self._same.get(e)
        if arr is None:
            arr = self._same[e] = np.full(self.R, e, dtype=np.int64)
            arr.flags.writeable = False
        return arr[:n]

    def units(self, eps: Fraction) -> int:
        q = eps / self.unit
        assert q.denominator == 1, "an amount off the method's unit grid"
        return int(q)

    def l1(self, t: int, rows: np.ndarray) -> np.ndarray:
        """``histogram.distance.l1_distance`` of the truth at ``t`` and each run's last release."""
        last = self.last[rows]
        if last.dtype.kind in "iu":
            return np.abs(self.truth[t] - last).sum(axis=1)
        fixed = np.rint(last * float(1 << 16)).astype(np.int64)
        return np.abs(self.truth[t] * (1 << 16) - fixed).sum(axis=1) >> 16


class _Kernel:
    """One method's decision rule over R runs. ``decide`` returns the runs that publish fresh at ``t``
    and the ε of each (in units), after drawing any decision noise; ``after`` may replace the
    releases (PeGaSus's smoother, FAST_w's filter)."""

    published_float = False

    def __init__(self, policy: Any, run: _Run) -> None:
        self.p = policy
        self.run = run


    def decide(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def after(self, t: int, rows: np.ndarray, noisy: np.ndarray, eps: np.ndarray) -> np.ndarray:
        return noisy


class _PolicyKernel(_Kernel):
    """A policy that decides over a runs axis itself (:class:`controller.policies.base.RunsPolicy`):
    its own ``decide_runs`` (the rule the service runs with one run), its optional ``reset_runs(R)``
    (state for R runs; default None) and ``after_runs(state, ctx, rows, noisy)`` (what the fresh runs
    publish, e.g. a smoother; default the noisy release). No rule of its own here."""

    def __init__(self, policy: Any, run: _Run) -> None:
        super().__init__(policy, run)
        reset = getattr(policy, "reset_runs", None)
        self.state = reset(run.R) if reset is not None else None
        self.fresh_count = np.zeros(run.R, dtype=np.int64)
        self.published_float = bool(getattr(policy, "runs_publish_float", False))
        self.ctx: RunsContext | None = None

    def decide(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        run = self.run
        self.ctx = RunsContext(t, run.R, run.ledger, self.fresh_count, counts=run.truth[t], last=run.last,
                               has_last=run.has_last, noise=run.noise, mechanism=run.mech)
        decision, self.state = self.p.decide_runs(self.state, self.ctx)
        self.fresh_count[decision.rows] += 1
        return decision.rows, decision.amounts

    def after(self, t: int, rows: np.ndarray, noisy: np.ndarray, eps: np.ndarray) -> np.ndarray:
        after = getattr(self.p, "after_runs", None)
        if after is None:
            return noisy
        out, self.state = after(self.state, self.ctx, rows, noisy)
        return out


class _Kellaris(_Kernel):
    """BD and BA (:mod:`controller.policies.kellaris`)."""


    def __init__(self, policy: Any, run: _Run) -> None:
        super().__init__(policy, run)
        R = run.R
        self.bd = isinstance(policy, BudgetDistribution)
        self.pub = np.zeros((R, run.T), dtype=np.int64)  # publication ε by timestep (units)
        self.last_pub = np.full(R, -1, dtype=np.int64)
        self.nullified = np.zeros(R, dtype=np.int64)
        self.e_test = run.units(policy.test_epsilon)
        self.test_scale = Fraction(policy.sensitivity) / policy.test_epsilon
        if self.bd:
            self.budget = run.units(policy.publication_budget)
            self.grid = run.units(policy.grid)
        else:
            self.share = run.units(policy.share)
        self.errors: dict[int, float] = {}

    def _error(self, units: np.ndarray) -> np.ndarray:
        """``mech.expected_abs_error(ε) · bins`` per run, as the policy computes it (cached by ε)."""
        errors = self.errors
        keys = units.tolist()
        run = self.run
        for u in set(keys).difference(errors):
            errors[u] = run.mech.expected_abs_error_in_units(u, run.unit) * run.U
        return np.array([errors[u] for u in keys], dtype=np.float64)

    def decide(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        run, w = self.run, self.p.unit.w
        if self.bd:
            remaining = self.budget - self.pub[:, max(0, t - w + 1):t].sum(axis=1)
            potential = np.where(remaining > 0, remaining // (2 * self.grid) * self.grid, 0)
            ok = (potential > 0) & run.ledger.can_spend(t, self.e_test + potential)
        else:
            active = t - self.last_pub > self.nullified
            available = np.minimum(t - (self.last_pub + self.nullified), w)
            potential = self.share * available
            ok = active & run.ledger.can_spend(t, self.e_test + potential)
        rows = ok.nonzero()[0]
        none = np.zeros(0, dtype=np.int64)
        if not rows.size:
            return none, none
        run.ledger.spend(t, rows, self.e_test, "test")
        noisy = run.l1(t, rows) + run.noise.laplace(rows, self.test_scale, None)
        pot = potential[rows]
        fresh = noisy > self._error(pot)
        fresh_rows = rows[fresh]
        eps = pot[fresh]
        self.pub[fresh_rows, t] = eps
        self.last_pub[fresh_rows] = t
        if not self.bd:
            self.nullified[fresh_rows] = available[fresh_rows] - 1
        return fresh_rows, eps


class _Pegasus(_Kernel):
    """PeGaSus (:class:`controller.policies.wevent.PegasusPolicy`): perturb, group, smooth."""


    def __init__(self, policy: PegasusPolicy, run: _Run) -> None:
        super().__init__(policy, run)
        R = run.R
        self.size = np.zeros(R, dtype=np.int64)
        self.total = np.zeros((R, run.U), dtype=np.int64)
        self.joined = np.zeros(R, dtype=bool)
        self.e_p = run.units(policy.epsilon_p)
        self.e_g = run.units(policy.epsilon_g)
        self.err = run.mech.expected_abs_error(policy.epsilon_p, run.U)
        self.test_scale = policy.test_scale
        self.test_term = 2 * float(policy.test_scale)

    def decide(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        p, run = self.p, self.run
        ledger = run.ledger
        new = (self.size == 0) | ((self.size >= p.max_group) if p.max_group is not None else False)
        ok_new = new & ledger.can_spend(t, self.e_p)
        test = ~new & ledger.can_spend(t, self.e_g + self.e_p)
        rows = test.nonzero()[0]
        self.joined[:] = False
        if rows.size:
            ledger.spend(t, rows, self.e_g, "test")
            size = self.size[rows]
            m = (2 * self.total[rows] + size[:, None]) // (2 * size[:, None])
            dev = np.abs(run.truth[t] - m).sum(axis=1)
            noisy = dev + run.noise.laplace(rows, self.test_scale, None)
            spread = self.err / np.sqrt(size.astype(np.float64))
            theta = run.U * spread + 2 * math.sqrt(run.U) * spread + self.test_term
            self.joined[rows] = noisy <= theta
        fresh_rows = (ok_new | test).nonzero()[0]
        return fresh_rows, run.same(self.e_p, fresh_rows.size)

    def after(self, t: int, rows: np.ndarray, noisy: np.ndarray, eps: np.ndarray) -> np.ndarray:
        joined = self.joined[rows]
        size = np.where(joined, self.size[rows] + 1, 1)
        total = np.where(joined[:, None], self.total[rows] + noisy, noisy)
        self.size[rows] = size
        self.total[rows] = total
        mean = (2 * total + size[:, None]) // (2 * size[:, None])
        return np.where((size == 1)[:, None], noisy, mean)


class _Fast(_Kernel):
    """FAST_w (:class:`controller.policies.wevent.FastPolicy`): scheduled samples, Kalman filter, PID."""

    published_float = True


    def __init__(self, policy: FastPolicy, run: _Run) -> None:
        super().__init__(policy, run)
        R = run.R
        self.e = run.units(policy.per_sample)
        self.variance = np.zeros(R)
        self.last_sample = np.full(R, -1, dtype=np.int64)
        self.interval = np.full(R, policy.base_interval, dtype=np.int64)
        self.next_sample = np.zeros(R, dtype=np.int64)
        # each run's last pid_window errors, oldest first, right-aligned: the unfilled slots on the
        # left hold 0.0, which adds nothing to the sum (0 + 0.0 + … + e0 + e1 = sum((e0, e1)) exactly)
        self.errors = np.zeros((R, policy.pid_window))
        self.n_errors = np.zeros(R, dtype=np.int64)
        b = float(Fraction(policy.sensitivity) / policy.per_sample)
        self.r = 2.0 * b * b

    def decide(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        ok = (t >= self.next_sample) & self.run.ledger.can_spend(t, self.e)
        rows = ok.nonzero()[0]
        return rows, self.run.same(self.e, rows.size)

    def after(self, t: int, rows: np.ndarray, noisy: np.ndarray, eps: np.ndarray) -> np.ndarray:
        p, run, r = self.p, self.run, self.r
        z = noisy.astype(np.float64)
        first = ~run.has_last[rows]
        prior = run.last[rows].astype(np.float64)
        pv = self.variance[rows] + p.process_ratio * r * (t - self.last_sample[rows])
        gain = pv / (pv + r)
        posterior = np.where(first[:, None], z, prior + gain[:, None] * (z - prior))
        variance = np.where(first, r, (1 - gain) * pv)
        floor = run.U * math.sqrt(r / 2.0)
        change = np.maximum(0.0, np.abs(z - prior).sum(axis=1) - floor)
        error = np.where(first, 0.0, change / np.maximum(np.abs(posterior).sum(axis=1), 1.0))
        # the controller, over the runs with the policy's IEEE operations in its order (sum(errors) is
        # the left-to-right sum; only exp is taken per run, with math.exp as the policy does)
        errs = np.concatenate((self.errors[rows, 1:], error[:, None]), axis=1)
        self.errors[rows] = errs
        n = np.minimum(self.n_errors[rows] + 1, p.pid_window)
        self.n_errors[rows] = n
        last = self.last_sample[rows]
        total = 0 + errs[:, 0]
        for j in range(1, errs.shape[1]):
            total = total + errs[:, j]
        moved = (n >= 2) & (last >= 0)
        derivative = np.where(moved, (errs[:, -1] - errs[:, -2]) / np.where(moved, t - last, 1), 0.0)
        control = p.cp * errs[:, -1] + p.ci * total / n + p.cd * derivative
        exponent = np.minimum((control - p.xi) / p.xi, FAST_MAX_EXPONENT)
        step = p.theta * (1.0 - np.array([math.exp(x) for x in exponent.tolist()], dtype=np.float64))
        # max(1, int(i + step)): int() truncates, and below 1 the interval is 1 either way
        interval = np.maximum(1.0, self.interval[rows] + step).astype(np.int64)
        self.interval[rows] = interval
        self.next_sample[rows] = t + interval
        self.variance[rows] = variance
        self.last_sample[rows] = t
        return posterior


_KERNELS: dict[type, type[_Kernel]] = {
    UniformPolicy: _PolicyKernel,
    FixedPolicy: _PolicyKernel,
    SamplePolicy: _PolicyKernel,
    WEventSamplingPolicy: _PolicyKernel,
    BudgetDistribution: _Kellaris,
    BudgetAbsorption: _Kellaris,
    PegasusPolicy: _Pegasus,
    FastPolicy: _Fast,
}


def run_vectorised(
    settings: Any,
    workload: Workload,
    runs: int,
    noise: LabNoise,
    *,
    keep_published: bool = False,
    tick: Callable[[int], None] | None = None,
) -> VectorResult:
    """``runs`` runs of ``settings``' method on ``workload``, all at once (evaluation only)."""
    if not vector_eligible(settings):
        raise ValueError(f"no vectorised lab path for {settings.release.decision} under these settings")
    engine = settings.engine()
    policy, mech = engine.policy, engine.mechanism
    kernel_type = _KERNELS[type(policy)]
    T, U = workload.timesteps, workload.bins
    post = settings.release.postprocess
    ledger = UnitLedger(policy.unit.epsilon, policy.unit.w, runs, T, policy.charges())  # the policy's privacy map
    unit = ledger.unit
    run = _Run(runs, T, U, workload.truth, noise, ledger, unit, mech)
    kernel = kernel_type(policy, run)
    acc = _Metrics(workload, runs)
    sources = np.full((runs, T), -1, dtype=np.int64)
    src = np.full(runs, -1, dtype=np.int64)
    fresh_eps = np.zeros((runs, T), dtype=np.int64)
    published = np.zeros((runs, U), dtype=np.float64)
    kept = np.zeros((runs, T, U)) if keep_published else None
    if kernel.published_float:
        run.last = run.last.astype(np.float64)
    chain = parse_chain(post)
    truth = workload.truth
    for t in range(T):
        noise.begin(t)
        rows, eps = kernel.decide(t)
        if rows.size:
            ledger.spend(t, rows, eps, "publication")
            num, den = mech.scale_in_units(eps, unit)  # LPA's own scale Δ/ε, reduced by the sampler
            noisy = truth[t] + noise.laplace_each(rows, num, den, U)
            out = kernel.after(t, rows, noisy, eps)
            run.last[rows] = out
            run.has_last[rows] = True
            published[rows] = postprocess(post, out) if chain else out
            src[rows] = t
            fresh_eps[rows, t] = eps
        sources[:, t] = src
        acc.add(t, published)
        if kept is not None:
            kept[:, t] = published
        if tick is not None and (t + 1) % 25 == 0:
            tick(25 * runs)
    if tick is not None and T % 25:
        tick((T % 25) * runs)
    acc.flush()
    metrics = []
    spent = ledger.total
    fresh_count = (fresh_eps > 0).sum(axis=1)
    for r in range(runs):
        m = acc.metrics(r)
        m["fresh_releases"] = float(fresh_count[r])
        m["epsilon_spent"] = float(Fraction(int(spent[r])) * unit)
        m["max_window_spend"] = float(Fraction(int(ledger.max[r])) * unit)
        metrics.append(m)
    return VectorResult(metrics, sources, fresh_eps, unit, kept)
