"""The lab's runner: R runs of one method in one array pass per timestep, each through the
policy's own runs-axis rule (evaluation only).

``dpstream evaluate`` runs each method R times on the same true histograms. Every decision policy
the runner takes writes its rule once, over a runs axis (:class:`controller.policies.base.RunsPolicy`:
``reset_runs``, ``decide_runs``, ``after_runs``); the service runs the same rule with one run
(:func:`controller.policies.base.decide_one`, the engine's exact accountant and its timestep's
drawer). Here all R runs go at once: the policy's state is arrays with a leading runs axis, the
ledger is :class:`controller.ledger.UnitLedger` in units of the policy's declared ``charges()``
(``tests/controller/test_ledger_law.py`` holds it equal to the exact accountant), the release is
LPA's (its own scale, :meth:`histogram.lpa.LaplaceMechanism.scale_in_units`), and the error figures
are :class:`histogram.accuracy.RunErrors`'. No decision rule lives in this module.

The noise is a choice of source (:mod:`stream.lab.noise`): pooled blocks by default, or the
engine's own drawers (``--replayable``: run ``r`` is what ``dpstream replay --seed seed+r``
publishes; ``tests/stream/lab/test_runner.py`` checks every method against the engine that way, and
the policy conformance suite checks each rule with R = 4 against R engine runs).

**Evaluation only.** Nothing here publishes: the service (and ``dpstream replay``) always steps
:class:`controller.step.Engine`, whose accountant is the one that enforces privacy.

AdaPub and RescueDP are plain per-run loops of their own one-run rule
(:mod:`controller.policies.per_run`); each run's group sums are released by
:func:`controller.grouped.release_groups`, as the engine releases them.

Eligible (:func:`runner_eligible`): LPA, w-event with a method of :data:`RUNNER_METHODS` or
user-level with one of :data:`USER_LEVEL_METHODS`; other configurations step the engine once per
run (:func:`stream.lab.runs.run_method`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from controller.grouped import release_groups
from controller.ledger import UnitLedger
from controller.policies.base import RunsContext, RunsPolicy
from histogram.accuracy import RunErrors, Workload
from histogram.noise import RunDrawer, RunsNoise
from histogram.postprocess import STATEFUL, parse_chain, postprocess

__all__ = ["ManyRuns", "RUNNER_METHODS", "SHARED_DECISIONS", "USER_LEVEL_METHODS", "runner_eligible", "run_many"]


#: decision methods the runner takes under w-event privacy (each decides over a runs axis)
RUNNER_METHODS = frozenset({"dsat", "dsft", "uniform", "fixed", "bd", "ba", "sample", "pegasus", "fast",
                            "adapub", "rescuedp", "adaptive-sample"})


@dataclass
class ManyRuns:
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


class _ErrorBuffer:
    """A block buffer in front of :class:`histogram.accuracy.RunErrors` (the one implementation of
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


def runner_eligible(settings: Any) -> bool:
    """Whether :func:`run_many` applies to these settings: LPA; w-event with a method of
    :data:`RUNNER_METHODS` or user-level with one of :data:`USER_LEVEL_METHODS`; no online
    re-planning and no personalized budgets; and any ``release.postprocess`` chain (with
    ``release.delay``) for the methods of :data:`SHARED_DECISIONS`, a stateless one (``none``,
    ``nonnegative``, ``integer``) for the others, whose runs decide apart."""
    r, p = settings.release, settings.privacy
    if r.mechanism != "lpa" or p.personal is not None or (r.planner is not None and r.planner.online is not None):
        return False
    methods = RUNNER_METHODS if p.unit == "w-event" else USER_LEVEL_METHODS if p.unit == "user-level" else ()
    if r.decision not in methods:
        return False
    return r.decision in SHARED_DECISIONS or not any(step in STATEFUL for step in parse_chain(r.postprocess))


class _Runner:
    """The runs' shared state and the policy's own rule over them: its ``decide_runs`` (the rule the
    service runs with one run), its optional ``reset_runs(R)`` (default state None) and
    ``after_runs(state, ctx, rows, noisy)`` (what the fresh runs publish, e.g. a smoother; default the
    noisy release). ``last``/``has_last``: each run's last release (int64, or float for a filter)."""

    def __init__(self, policy: RunsPolicy, mech: Any, truth: np.ndarray, runs: int, noise: RunsNoise,
                 ledger: UnitLedger) -> None:
        self.policy, self.mech, self.truth, self.runs, self.noise, self.ledger = policy, mech, truth, runs, noise, ledger
        self.U = truth.shape[1]
        reset = getattr(policy, "reset_runs", None)
        self.state = reset(runs) if reset is not None else None
        self.fresh_count = np.zeros(runs, dtype=np.int64)
        floats = bool(getattr(policy, "runs_publish_float", False))
        self.last = np.zeros((runs, self.U), dtype=np.float64 if floats else np.int64)
        self.has_last = np.zeros(runs, dtype=bool)
        self._after = getattr(policy, "after_runs", None)
        self.ctx: RunsContext | None = None
        #: the fresh runs' group labels ``(len(rows), U)`` from the last :meth:`decide` (None: the
        #: mechanism's release; AdaPub and RescueDP release noisy sums over public groups)
        self.groups: np.ndarray | None = None

    def decide(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """The runs that publish fresh at ``t`` and the ε of each (ledger units), decision noise drawn."""
        self.ctx = RunsContext(t, self.runs, self.ledger, self.fresh_count, counts=self.truth[t], last=self.last,
                               has_last=self.has_last, noise=self.noise, mechanism=self.mech)
        decision, self.state = self.policy.decide_runs(self.state, self.ctx)
        self.groups = decision.groups
        self.fresh_count[decision.rows] += 1
        return decision.rows, decision.amounts

    def after(self, rows: np.ndarray, noisy: np.ndarray) -> np.ndarray:
        """What the fresh runs ``rows`` publish given their noisy releases (recorded as their last)."""
        out = noisy
        if self._after is not None:
            out, self.state = self._after(self.state, self.ctx, rows, noisy)
        self.last[rows] = out
        self.has_last[rows] = True
        return out


def run_many(
    settings: Any,
    workload: Workload,
    runs: int,
    noise: RunsNoise,
    *,
    keep_published: bool = False,
    tick: Callable[[int], None] | None = None,
) -> ManyRuns:
    """``runs`` runs of ``settings``' method on ``workload``, all at once (evaluation only).

    Each timestep: the method's rule decides for every run (charging the unit ledger of the privacy
    unit, :meth:`controller.ledger.UnitLedger.for_unit`), the fresh runs are charged their release
    and draw it (LPA's scale), and each run publishes what the service would after
    ``release.postprocess``: a stateless chain on each fresh release; a stateful one (the
    smoothers, the structural model, with ``release.delay`` its fixed lag and, at the end, the
    last ``delay`` timesteps smoothed as far as they go) applied over the stack of runs at every
    timestep after the first release, as :func:`stream.lab.runs.run_method` applies it to its one
    run. The error figures are :class:`histogram.accuracy.RunErrors`'."""
    if not runner_eligible(settings):
        raise ValueError(f"the lab's runner does not take {settings.release.decision} under these settings: "
                         "step the engine once per run (stream.lab.runs.run_method)")
    engine = settings.engine()
    policy, mech = engine.policy, engine.mechanism
    if not isinstance(policy, RunsPolicy):
        raise ValueError(f"{type(policy).__name__} has no runs-axis rule (decide_runs)")
    T, U = workload.timesteps, workload.bins
    post = settings.postprocessor()
    chain = post.text if post.chain else ""
    ledger = UnitLedger.for_unit(policy.unit, runs, T, policy.charges())  # the policy's privacy map
    unit = ledger.unit
    run = _Runner(policy, mech, workload.truth, runs, noise, ledger)
    acc = _ErrorBuffer(workload, runs)
    sources = np.full((runs, T), -1, dtype=np.int64)
    src = np.full(runs, -1, dtype=np.int64)
    fresh_eps = np.zeros((runs, T), dtype=np.int64)
    published = np.zeros((runs, U), dtype=np.float64)
    kept = np.zeros((runs, T, U)) if keep_published else None
    truth = workload.truth
    smoother = _Smoother(post, mech, runs) if post.stateful else None

    def publish(t: int, counts: np.ndarray) -> None:
        acc.add(t, counts)
        if kept is not None:
            kept[:, t] = counts

    for t in range(T):
        noise.begin(t)
        rows, eps = run.decide(t)
        if rows.size:
            ledger.spend(t, rows, eps, "publication")
            if run.groups is None:
                num, den = mech.scale_in_units(eps, unit)  # LPA's own scale Δ/ε, reduced by the sampler
                noisy = truth[t] + noise.laplace_each(rows, num, den, U)
            else:  # each run's noisy sums over its public groups: the engine's grouped release, one per run
                confidence = getattr(mech, "confidence", 0.95)
                noisy = [release_groups(truth[t], g, Fraction(int(e)) * unit, mech.sensitivity, RunDrawer(noise, r),
                                        confidence) for r, g, e in zip(rows.tolist(), run.groups, eps, strict=True)]
            out = run.after(rows, noisy)
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
    return ManyRuns(metrics, sources, fresh_eps, unit, kept)


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

    def step(self, t: int, run: _Runner, rows: np.ndarray, eps: np.ndarray, unit: Fraction,
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
