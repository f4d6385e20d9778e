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
fixed, and user-level DSAT/DSFT, uniform and fixed, with LPA and an element-wise ``release.postprocess`` (``none``, ``nonnegative``). Other
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
from controller.policies.sampling import DistanceSamplingPolicy, WEventSamplingPolicy
from controller.policies.wevent import FastPolicy, PegasusPolicy, SamplePolicy
from histogram.noise import _EXACT_LIMIT, GeneratorDrawer, Randomness
from histogram.postprocess import STATEFUL, parse_chain, postprocess
from stream.lab.metrics import RunErrors, Workload

__all__ = ["LabNoise", "PooledNoise", "EngineNoise", "VectorResult", "vector_eligible", "run_vectorised"]

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
    """A block buffer in front of :class:`stream.lab.metrics.RunErrors` (the one implementation of
    the error figures): what every run published at each timestep is kept for a block of timesteps
    and handed to :meth:`RunErrors.add_block` in one array pass.

    Timesteps may arrive out of order (``release.delay`` publishes timestep ``t − k`` at ``t``): those
    beyond the current block wait aside; a block is handed on once all of its timesteps are in.
    Every timestep must be added exactly once."""

    BLOCK = 128

    def __init__(self, workload: Workload, runs: int) -> None:
        self.errors = RunErrors(workload, runs)
        self.timesteps = workload.timesteps
        self.block = max(1, min(self.BLOCK, (1 << 22) // max(1, runs * workload.bins)))
        self.buf = np.zeros((runs, self.block, workload.bins))
        self.start = 0
        self.filled = np.zeros(self.block, dtype=bool)
        self.count = 0
        self.later: dict[int, np.ndarray] = {}  # timesteps past the current block (a delay)

    def add(self, t: int, published: np.ndarray) -> None:
        """Timestep ``t`` published ``published`` (``(R, U)``) in every run (copied)."""
        j = t - self.start
        if j >= self.block:
            if t in self.later:
                raise ValueError(f"timestep {t} was added twice")
            self.later[t] = np.array(published, dtype=np.float64)
            return
        if j < 0 or self.filled[j]:
            raise ValueError(f"timestep {t} was added twice")
        self.buf[:, j] = published
        self.filled[j] = True
        self.count += 1
        if self.count == min(self.block, self.timesteps - self.start):
            self._hand_on()

    def _hand_on(self) -> None:
        k = self.count
        self.errors.add_block(self.start, self.buf[:, :k])
        self.start += k
        self.filled[:] = False
        self.count = 0
        for t in sorted(x for x in self.later if x < self.start + self.block):
            self.add(t, self.later.pop(t))

    def flush(self) -> None:
        """Hand on the rest (all timesteps must have been added)."""
        if self.later or not self.filled[:self.count].all() or self.start + self.count != self.timesteps:
            raise ValueError(f"timesteps from {self.start} on were not all published")
        if self.count:
            self._hand_on()

    def metrics(self, r: int) -> dict[str, float]:
        return self.errors.metrics()[r]


#: decision methods whose decisions read neither the data nor the noise (thesis §4.1.4: they "spend
#: only on publications"): every run makes the same decisions at the same ε, so a stateful
#: post-processor (smoother, structural model, ``release.delay``) can step all runs at once
SHARED_DECISIONS = frozenset({"uniform", "fixed", "sample"})

#: decision methods the runner takes under user-level privacy (one total budget: a unit ledger
#: whose window spans the stream, :meth:`controller.ledger.UnitLedger.for_unit`)
USER_LEVEL_METHODS = frozenset({"uniform", "fixed", "dsat", "dsft"})


def vector_eligible(settings: Any) -> bool:
    """Whether :func:`run_vectorised` applies to these settings: LPA; w-event with a method of
    :data:`VECTOR_METHODS` or user-level with one of :data:`USER_LEVEL_METHODS`; no online
    re-planning and no personalized budgets; and any ``release.postprocess`` chain (with
    ``release.delay``) for the methods of :data:`SHARED_DECISIONS`, a stateless one (``none``,
    ``nonnegative``, ``integer``) for the others, whose runs decide apart."""
    r, p = settings.release, settings.privacy
    if r.mechanism != "lpa" or p.personal is not None or (r.planner is not None and r.planner.online is not None):
        return False
    methods = VECTOR_METHODS if p.unit == "w-event" else USER_LEVEL_METHODS if p.unit == "user-level" else ()
    if r.decision not in methods:
        return False
    return r.decision in SHARED_DECISIONS or not any(step in STATEFUL for step in parse_chain(r.postprocess))


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




_KERNELS: dict[type, type[_Kernel]] = {
    UniformPolicy: _PolicyKernel,
    FixedPolicy: _PolicyKernel,
    SamplePolicy: _PolicyKernel,
    WEventSamplingPolicy: _PolicyKernel,
    DistanceSamplingPolicy: _PolicyKernel,
    BudgetDistribution: _PolicyKernel,
    BudgetAbsorption: _PolicyKernel,
    PegasusPolicy: _PolicyKernel,
    FastPolicy: _PolicyKernel,
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
    """``runs`` runs of ``settings``' method on ``workload``, all at once (evaluation only).

    Each timestep: the method's rule decides for every run (charging the unit ledger of the privacy
    unit, :meth:`controller.ledger.UnitLedger.for_unit`), the fresh runs are charged their release
    and draw it (LPA's scale), and each run publishes what the service would after
    ``release.postprocess``: a stateless chain on each fresh release; a stateful one (the
    smoothers, the structural model, with ``release.delay`` its fixed lag and, at the end, the
    last ``delay`` timesteps smoothed as far as they go) applied over the stack of runs at every
    timestep after the first release, as :func:`stream.lab.runs.run_method` applies it to its one
    run. The error figures are :class:`stream.lab.metrics.RunErrors`'."""
    if not vector_eligible(settings):
        raise ValueError(f"no vectorised lab path for {settings.release.decision} under these settings")
    engine = settings.engine()
    policy, mech = engine.policy, engine.mechanism
    kernel_type = _KERNELS[type(policy)]
    T, U = workload.timesteps, workload.bins
    post = settings.postprocessor()
    chain = post.text if post.chain else ""
    ledger = UnitLedger.for_unit(policy.unit, runs, T, policy.charges())  # the policy's privacy map
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
    truth = workload.truth
    smoother = _Smoother(post, mech, runs) if post.stateful else None

    def publish(t: int, counts: np.ndarray) -> None:
        acc.add(t, counts)
        if kept is not None:
            kept[:, t] = counts

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
            if smoother is None:
                published[rows] = postprocess(chain, out) if chain else out
            src[rows] = t
            fresh_eps[rows, t] = eps
        sources[:, t] = src
        if smoother is None:
            publish(t, published)
        else:
            smoother.step(t, run, rows, eps, unit, publish)
        if tick is not None and (t + 1) % 25 == 0:
            tick(25 * runs)
    if tick is not None and T % 25:
        tick((T % 25) * runs)
    if smoother is not None:
        smoother.finish(T, publish)
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


class _Smoother:
    """A stateful ``release.postprocess`` (:class:`histogram.postprocess.PostProcessor`) over the
    stack of runs of a method whose runs decide alike (:data:`SHARED_DECISIONS`).

    :func:`stream.lab.runs.run_method` applies the post-processor at every timestep after the first
    release to the engine's release (the last fresh counts, their half-width, fresh or not); here
    the same call takes the ``(R, U)`` stack of the runs' last releases, and the filters act on each
    row alone (:meth:`PostProcessor.apply`: any leading axes, bins last). Before the first release
    the all-zero placeholder is published and the filter is not called. With ``release.delay`` k,
    the call at ``t`` gives timestep ``t − k``'s counts (those before the first release keep their
    placeholder), and the last k come from :meth:`PostProcessor.pending` at the end."""

    def __init__(self, post: Any, mech: Any, runs: int) -> None:
        self.post = post
        self.mech = mech
        self.state = post.initial()
        self.width = np.float64(0.0)
        self.widths: dict[int, np.float64] = {}
        self.first = -1  # the timestep of the first release (the same in every run)
        self.zeros: np.ndarray | None = None
        self.runs = runs

    def step(self, t: int, run: _Run, rows: np.ndarray, eps: np.ndarray, unit: Fraction,
             publish: Callable[[int, np.ndarray], None]) -> None:
        if rows.size not in (0, self.runs):
            raise RuntimeError(f"{rows.size} of {self.runs} runs released fresh at timestep {t}: a stateful "
                               "post-processor steps all runs at once, so their decisions must be shared")
        if rows.size:
            e = int(eps[0])
            if np.any(eps != e):
                raise RuntimeError(f"the runs released at different ε at timestep {t}: decisions not shared")
            width = self.widths.get(e)
            if width is None:  # LPA's half-width at this ε (the engine's release.half_width)
                width = self.widths[e] = np.float64(self.mech.half_width(Fraction(e) * unit))
            self.width = width
            if self.first < 0:
                self.first = t
        if self.first < 0:
            if self.zeros is None:
                self.zeros = np.zeros((self.runs, run.U))
            publish(t, self.zeros)
            return
        out, self.state = self.post.apply(self.state, run.last, self.width, self.mech.confidence, rows.size > 0)
        k = self.post.delay
        if not k:
            publish(t, out.counts)
        elif t - k >= self.first:
            publish(t - k, out.counts)

    def finish(self, timesteps: int, publish: Callable[[int, np.ndarray], None]) -> None:
        """With a delay k: the last k timesteps (after the first release), smoothed as far as they go."""
        if not self.post.delay or self.first < 0:
            return
        tail = self.post.pending(self.state, (self.runs, -1))
        if tail is None:
            return
        k = self.post.delay
        for j in range(k):
            t = timesteps - k + j
            if t >= self.first:
                publish(t, tail[j])
