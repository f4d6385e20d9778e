"""w-event mechanisms users compare against (Schäler et al., PVLDB 16(8), 2023).

* :class:`SamplePolicy` — **Sample**: the whole window budget ε at one
  timestep in every ``w`` (timesteps ``0, w, 2w, …``), the last release
  republished in between. Reads no data to decide; any ``w`` consecutive
  timesteps contain exactly one sampled timestep, so every window spends ε
  (``docs/privacy.md`` §4.3).
* :class:`PegasusPolicy` — **PeGaSus** (Chen, Machanavajjhala, Hay and
  Miklau, CCS 2017), window-split: every timestep spends ``ε/w``, of which
  ``ε_p = (4/5)·ε/w`` perturbs the histogram (the Perturber: a fresh LPA/PSD
  release) and ``ε_g = (1/5)·ε/w`` pays the Grouper's private deviation test;
  the Smoother (the mean of the group's perturbed histograms) is
  post-processing. The test reads only this timestep's histogram (its
  deviation from the group's *perturbed* mean), not the group's true values
  as the paper's grouper does: see ``docs/privacy.md`` §4.4 for why and for
  the proof.
* :class:`FastPolicy` — **FAST_w** (Fan and Xiong, CIKM 2012 / TKDE 2014):
  samples at ``ε/C`` each (``C = privacy.cutoff``, at most ``C`` per window
  of ``w``, enforced by the window ledger), a Kalman filter corrects each
  noisy sample against its prediction and is published, and a PID
  controller on the filter's relative error moves the sampling interval.
  Everything after the sample's noise is post-processing (§4.5).

Each policy is w-event only (its budget rule is per window) and charges
``ctx.accountant`` (a :class:`~controller.accountant.WindowAccountant`)
before any noise is drawn; the ledger refuses a step that would take any
window of ``w`` past ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any

import numpy as np

from controller.accountant import Accountant, WindowAccountant
from controller.errors import ConfigurationError, StateError
from controller.policies.base import (
    Decision,
    DecisionContext,
    RunsContext,
    RunsDecision,
    amounts_for,
    decide_one,
)
from controller.policies.baselines import (
    NO_RUNS,
    _Stateless,  # the no-memory state handling Uniform and Fixed share
    schedule_runs,
)
from controller.step import decode_array, encode_array
from controller.units import WEvent
from histogram.mechanism import NoisyHistogram

__all__ = ["SamplePolicy", "PegasusPolicy", "PegasusState", "PegasusRuns", "group_deviation", "FastPolicy", "FastState",
           "FastRuns", "FAST_MAX_EXPONENT"]

#: FAST_w's controller caps ``(control − ξ)/ξ`` here before ``exp`` (``exp(709.8)`` overflows a float).
FAST_MAX_EXPONENT = 700.0


def _require_w_event(unit: object, name: str) -> None:
    if not isinstance(unit, WEvent):
        raise ConfigurationError(f"{name} is a w-event mechanism: set privacy.unit: w-event and privacy.w")


@dataclass(frozen=True)
class SamplePolicy(_Stateless):
    """Sample: ε at timesteps ``0, w, 2w, …``; republish in between.

    Attributes:
        unit: the w-event unit (ε per window of ``w``); ``unit.cutoff`` is not
            used (Sample always spends the whole window budget at once).
    """

    unit: WEvent
    name: str = "sample"

    def __post_init__(self) -> None:
        _require_w_event(self.unit, self.name)

    @property
    def per_release(self) -> Fraction:
        """ε of each sampled release: the whole window budget."""
        return self.unit.epsilon

    def decide(self, state: None, ctx: DecisionContext) -> tuple[Decision, None]:
        return decide_one(self, state, ctx)

    def decide_runs(self, state: None, ctx: RunsContext) -> tuple[RunsDecision, None]:
        if ctx.timestep % self.unit.w != 0:
            return RunsDecision(NO_RUNS, NO_RUNS), None
        # the ledger check cannot fail with a fresh ledger; never overspend if it does
        return schedule_runs(ctx, self.per_release, "sample"), None

    def charges(self) -> tuple[Fraction, ...]:
        return (self.per_release,)

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "interval": self.unit.w, "per_release_epsilon": str(self.per_release)}


@dataclass(frozen=True)
class PegasusState:
    """The open group: its size and the sum of its members' *perturbed* histograms (the service's
    one run; journaled with :meth:`to_json`).

    Public given the releases' noise: both are functions of ε_p-DP perturbed
    values and of the ε_g-DP grouping decisions. ``joined`` records this
    timestep's decision (True: ``t`` joined the open group) for the smoother.
    """

    size: int = 0
    total: np.ndarray | None = None
    joined: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "total": None if self.total is None else encode_array(self.total),
                "joined": self.joined}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PegasusState:
        try:
            size = int(data["size"])
            total = None if data["total"] is None else decode_array(data["total"])
            joined = bool(data["joined"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed PeGaSus state: {exc}") from exc
        if size < 0 or (size == 0) != (total is None):
            raise StateError(f"malformed PeGaSus state: group of size {size} with{'out' if total is None else ''} a sum")
        return cls(size, total, joined)


@dataclass
class PegasusRuns:
    """The open groups of R runs (the lab's many runs, or the service's one): what
    :meth:`PegasusPolicy.decide_runs` and :meth:`PegasusPolicy.after_runs` read and update in place.

    Attributes:
        size: ``(R,)`` int64, each run's group size (0 before its first release).
        total: ``(R, U)`` the sum of each group's perturbed histograms (int64 while every release is
            an integer vector, else float64); None until the first release gives U. Rows of size 0
            are not read.
        joined: ``(R,)`` bool, whether this timestep's fresh release joins the open group (set by
            the decision of a fresh run, read by the smoother; other rows keep theirs).
        error_memo: (mechanism, bins, its expected absolute error per bin at ε_p): public, kept so
            the lab's timesteps do not recompute it in exact arithmetic.
    """

    size: np.ndarray
    total: np.ndarray | None
    joined: np.ndarray
    error_memo: tuple[Any, int, float] | None = field(default=None, compare=False)


ONE_RUN = np.zeros(1, dtype=np.int64)
ONE_RUN.setflags(write=False)


def _group_means(total: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Each row's group mean ``total[i] / size[i]``: for integer sums the exactly rounded integer
    ``floor(S/n + 1/2)``, else the float quotient (public: post-processing of releases)."""
    n = size[:, None]
    if total.dtype.kind in "iu":
        return (2 * total + n) // (2 * n)
    return total / n


def group_deviation(counts: np.ndarray, total: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The deviation test's query per row: ``⌊Σ_b |x_t[b] − m[b]|⌋`` with ``m`` the row's group
    mean rounded to integers (int64, ``(len(size),)``).

    ``m`` is public (post-processing of releases), so the query reads only this timestep's
    histogram ``counts``; it is 1-Lipschitz in L1, an integer, and moves by at most Δ between
    neighbours.
    """
    m = _group_means(total, size)
    if m.dtype.kind not in "iu":
        m = np.rint(m).astype(np.int64)
    return np.abs(np.asarray(counts, dtype=np.int64) - m).sum(axis=1)


@dataclass(frozen=True)
class PegasusPolicy:
    """PeGaSus, window-split: perturb at ε_p, test at ε_g, smooth for free, every timestep.

    The rule is written once over a runs axis (:meth:`decide_runs`, :meth:`after_runs` on
    :class:`PegasusRuns`); the service's :meth:`decide` and :meth:`smooth` run it with one run on
    the journaled :class:`PegasusState` (:meth:`to_runs`, :meth:`from_runs`).

    Attributes:
        unit: the w-event unit; each timestep spends ``ε/w``.
        sensitivity: per-person per-timestep contribution bound Δ (L1).
        perturb_share: ε_p's share of ``ε/w`` (the paper's 0.8; the rest, ε_g, tests).
        max_group: the longest group (public), or None (the default, as in
            the paper) for no limit; a limit bounds the smoother's lag on slow
            drift. The state is two numbers and one histogram either way.
    """

    unit: WEvent
    sensitivity: int = 1
    perturb_share: Fraction = Fraction(4, 5)
    max_group: int | None = None
    name: str = "pegasus"

    def __post_init__(self) -> None:
        _require_w_event(self.unit, self.name)
        share = Fraction(self.perturb_share)
        if not 0 < share < 1:
            raise ConfigurationError(f"PeGaSus perturb_share must lie strictly between 0 and 1, got {share}")
        object.__setattr__(self, "perturb_share", share)
        if self.max_group is not None and (
            isinstance(self.max_group, bool) or not isinstance(self.max_group, int) or self.max_group < 1
        ):
            raise ConfigurationError(f"PeGaSus max_group must be a whole number >= 1, got {self.max_group!r}")

    @cached_property
    def epsilon_p(self) -> Fraction:
        """ε of each timestep's perturbation (a fresh release)."""
        return self.unit.epsilon / self.unit.w * self.perturb_share

    @cached_property
    def epsilon_g(self) -> Fraction:
        """ε of each timestep's deviation test."""
        return self.unit.epsilon / self.unit.w - self.epsilon_p

    @cached_property
    def test_scale(self) -> Fraction:
        """Discrete Laplace scale of the deviation test: Δ/ε_g."""
        return Fraction(self.sensitivity) / self.epsilon_g

    def threshold(self, size: int | np.ndarray, bins: int, error_per_bin: float) -> Any:
        """Public threshold θ for a group of ``size`` perturbed histograms (one θ per entry of an
        array of sizes).

        The L1 distance between a constant stream and the mean of ``size``
        perturbed copies of it is about ``U·e/√size`` (``e`` the perturber's
        mean absolute error per bin); θ adds two standard deviations of that
        sum (``2·√U·e/√size``) and two test-noise scales, so a group closes on
        change rather than on noise. A function of public parameters only.
        """
        spread = error_per_bin / np.sqrt(np.asarray(size, dtype=np.float64))
        return bins * spread + 2 * math.sqrt(bins) * spread + 2 * float(self.test_scale)

    def new_accountant(self) -> Accountant:
        return WindowAccountant(self.unit.epsilon, self.unit.w)

    def reset(self) -> PegasusState:
        return PegasusState()

    def reset_runs(self, runs: int) -> PegasusRuns:
        return PegasusRuns(np.zeros(runs, dtype=np.int64), None, np.zeros(runs, dtype=bool))

    def to_runs(self, state: PegasusState) -> PegasusRuns:
        """The one run of ``state`` as :class:`PegasusRuns` (R = 1; the total is read, not copied)."""
        total = None if state.total is None else np.asarray(state.total)[None, :]
        return PegasusRuns(np.array([state.size], dtype=np.int64), total, np.array([state.joined]))

    def from_runs(self, runs: PegasusRuns) -> PegasusState:
        """Inverse of :meth:`to_runs` (the journaled form, byte for byte as before)."""
        size = int(runs.size[0])
        total = None
        if size and runs.total is not None:
            total = runs.total[0]
            total.setflags(write=False)
        return PegasusState(size, total, bool(runs.joined[0]))

    def deviation(self, counts: np.ndarray, state: PegasusState) -> int:
        """The test's query for the one run of ``state`` (:func:`group_deviation`)."""
        assert state.total is not None
        return int(group_deviation(counts, np.asarray(state.total)[None, :], np.array([state.size]))[0])

    def deviations(self, counts: np.ndarray, state: PegasusRuns, rows: np.ndarray) -> np.ndarray:
        """The test's query for the runs ``rows`` (all with an open group)."""
        assert state.total is not None
        return group_deviation(counts, state.total[rows], state.size[rows])

    def decide(self, state: PegasusState, ctx: DecisionContext) -> tuple[Decision, PegasusState]:
        decision, runs = decide_one(self, self.to_runs(state), ctx)
        return decision, self.from_runs(runs)

    def decide_runs(self, state: PegasusRuns, ctx: RunsContext) -> tuple[RunsDecision, PegasusRuns]:
        """Every run perturbs at ε_p; a run with an open group first tests (charged ε_g, before its
        noise is drawn) whether this timestep joins it. A run whose window cannot take the
        timestep's ε republishes (its state unchanged)."""
        t, ledger = ctx.timestep, ctx.ledger
        e_p, e_g = ledger.amount(self.epsilon_p), ledger.amount(self.epsilon_g)
        new = state.size == 0
        if self.max_group is not None:
            new = new | (state.size >= self.max_group)
        ok_new = new & ledger.can_spend(t, e_p)  # a new group: nothing to test
        tested = ~new & ledger.can_spend(t, e_g + e_p)
        state.joined[ok_new] = False
        rows = tested.nonzero()[0]
        if rows.size:
            assert ctx.counts is not None and ctx.noise is not None and ctx.mechanism is not None
            ledger.spend(t, rows, e_g, "test")
            noisy = self.deviations(ctx.counts, state, rows) + ctx.noise.laplace(rows, self.test_scale, None)
            bins = int(ctx.counts.size)
            memo = state.error_memo
            if memo is None or memo[0] is not ctx.mechanism or memo[1] != bins:
                memo = state.error_memo = (ctx.mechanism, bins, ctx.mechanism.expected_abs_error(self.epsilon_p, bins))
            theta = self.threshold(state.size[rows], bins, memo[2])
            state.joined[rows] = noisy <= theta
        fresh_rows = (ok_new | tested).nonzero()[0]
        reason = "joined group" if fresh_rows.size and state.joined[fresh_rows[0]] else "new group"
        return RunsDecision(fresh_rows, amounts_for(e_p, fresh_rows), reason), state

    def after_runs(self, state: PegasusRuns, ctx: RunsContext, rows: np.ndarray,
                   noisy: np.ndarray) -> tuple[np.ndarray, PegasusRuns]:
        """The Smoother for the fresh runs ``rows`` (post-processing: no data, no draws)."""
        return self._smooth_runs(state, rows, noisy), state

    def _smooth_runs(self, state: PegasusRuns, rows: np.ndarray, noisy: np.ndarray) -> np.ndarray:
        """Add each fresh run's perturbed histogram to its group (or open a new one) and return what
        it publishes: its own release for a group of one, else the group's mean."""
        joined = state.joined[rows]
        size = np.where(joined, state.size[rows] + 1, 1)
        total = state.total
        if total is None:
            total = np.zeros((state.size.size, noisy.shape[1]), dtype=noisy.dtype)
        both_int = total.dtype.kind in "iu" and noisy.dtype.kind in "iu"
        kind = np.dtype(np.int64) if both_int else np.dtype(np.float64)
        # a joined group sums in int64 while both are integers, else in float64; a new group's sum is
        # its release as it is (so the one run's journaled dtype is the release's, as it always was)
        any_joined = bool(joined.any())
        new_kind = kind if any_joined else noisy.dtype
        everyone = rows.size == state.size.size  # rows are distinct and ascending: rows = 0..R-1
        if not everyone:  # other runs keep their sums: never narrow the array
            new_kind = np.result_type(new_kind, total.dtype)
        if not any_joined:
            summed = noisy.astype(new_kind, copy=False)
            if summed is noisy and noisy.flags.writeable:  # the state shares no array the caller may write
                summed = noisy.copy()
        else:
            summed = (total if everyone else total[rows]).astype(kind, copy=False) + noisy.astype(kind, copy=False)
            if not joined.all():
                summed = np.where(joined[:, None], summed, noisy)
            summed = summed.astype(new_kind, copy=False)
        if everyone:
            state.total = summed
        else:
            if total.dtype != new_kind or not total.flags.writeable:
                total = total.astype(new_kind)
            total[rows] = summed
            state.total = total
        state.size[rows] = size
        state.joined[rows] = False
        ones = size == 1
        if ones.all():
            return noisy
        means = _group_means(summed, size)
        return means if not ones.any() else np.where(ones[:, None], noisy, means)

    def smooth(self, state: PegasusState, timestep: int, noisy: NoisyHistogram) -> tuple[NoisyHistogram, PegasusState]:
        """The Smoother for the service's one run (:meth:`after_runs` with R = 1)."""
        runs = self.to_runs(state)
        out = self._smooth_runs(runs, ONE_RUN, np.asarray(noisy.counts)[None, :])[0]
        new = self.from_runs(runs)
        if new.size == 1:
            return noisy, new
        out.setflags(write=False)
        # a group mean is biased by change inside the group: no interval is claimed (published as null)
        width = np.broadcast_to(np.float64(np.inf), out.shape)
        return NoisyHistogram(out, noisy.epsilon, width, noisy.confidence, {"smoothed_over": new.size}), new

    def charges(self) -> tuple[Fraction, ...]:
        """ε_p per perturbation, ε_g per grouping test."""
        return (self.epsilon_p, self.epsilon_g)

    def on_fresh(self, state: PegasusState, timestep: int) -> PegasusState:
        return state

    def state_to_json(self, state: PegasusState) -> dict[str, Any]:
        return state.to_json()

    def state_from_json(self, data: dict[str, Any]) -> PegasusState:
        return PegasusState.from_json(data)

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "epsilon_p": str(self.epsilon_p), "epsilon_g": str(self.epsilon_g),
                "max_group": self.max_group, "smoother": "mean"}


@dataclass(frozen=True)
class FastState:
    """Public state of FAST_w: the filter, the controller and the schedule.

    Attributes:
        estimate: the filter's posterior (the counts last published), or None before the first sample.
        variance: the posterior variance P per bin (one number: R and Q are the same for every bin).
        last_sample: timestep of the last sample (-1 before any).
        interval: the sampling interval I (timesteps, >= 1).
        next_sample: the timestep at which the next sample is due.
        errors: the last ``window`` PID errors (newest last).
    """

    estimate: np.ndarray | None = None
    variance: float = 0.0
    last_sample: int = -1
    interval: int = 1
    next_sample: int = 0
    errors: tuple[float, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"estimate": None if self.estimate is None else encode_array(self.estimate),
                "variance": repr(self.variance), "last_sample": self.last_sample, "interval": self.interval,
                "next_sample": self.next_sample, "errors": [repr(e) for e in self.errors]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FastState:
        try:
            est = None if data["estimate"] is None else decode_array(data["estimate"])
            out = cls(est, float(data["variance"]), int(data["last_sample"]), int(data["interval"]),
                      int(data["next_sample"]), tuple(float(e) for e in data["errors"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed FAST_w state: {exc}") from exc
        if out.interval < 1 or not math.isfinite(out.variance) or out.variance < 0:
            raise StateError("malformed FAST_w state: interval < 1 or a bad variance")
        return out


@dataclass
class FastRuns:
    """The filters, controllers and schedules of R runs of FAST_w (the lab's many runs, or the
    service's one): what :meth:`FastPolicy.decide_runs` reads and :meth:`FastPolicy.after_runs`
    updates in place. All public (functions of released samples).

    Attributes:
        estimate: ``(R, U)`` float64 posteriors (what each run last published); None until the
            first sample gives U. Rows without ``has_estimate`` are not read.
        has_estimate: ``(R,)`` whether a run has a posterior yet.
        variance: ``(R,)`` posterior variance P per run.
        last_sample, interval, next_sample: ``(R,)`` int64, as in :class:`FastState`.
        errors: ``(R, pid_window)`` each run's last PID errors, oldest first and right-aligned: the
            unfilled slots on the left hold 0.0, which adds nothing to their left-to-right sum.
        n_errors: ``(R,)`` how many of a run's slots hold errors.
    """

    estimate: np.ndarray | None
    has_estimate: np.ndarray
    variance: np.ndarray
    last_sample: np.ndarray
    interval: np.ndarray
    next_sample: np.ndarray
    errors: np.ndarray
    n_errors: np.ndarray


@dataclass(frozen=True)
class FastPolicy:
    """FAST_w: PID-driven sampling at ε/C per sample, Kalman-filtered releases.

    The rule is written once over a runs axis (:meth:`decide_runs`, :meth:`after_runs` on
    :class:`FastRuns`); the service's :meth:`decide` and :meth:`smooth` run it with one run on the
    journaled :class:`FastState` (:meth:`to_runs`, :meth:`from_runs`).

    Attributes:
        unit: the w-event unit; ``unit.cutoff`` is M, the most samples in any window of ``w``.
        sensitivity: per-person per-timestep contribution bound Δ.
        cp, ci, cd: PID gains (Fan and Xiong's defaults 0.9, 0.1, 0).
        theta: the interval step θ (timesteps); ``xi`` the PID set point ξ.
        pid_window: T_i, how many recent errors the integral term averages.
        process_ratio: the filter's process variance Q as a fraction of the
            sample noise variance R (FAST's defaults have Q/R = 0.1).
    """

    unit: WEvent
    sensitivity: int = 1
    cp: float = 0.9
    ci: float = 0.1
    cd: float = 0.0
    theta: float = 5.0
    xi: float = 0.1
    pid_window: int = 5
    process_ratio: float = 0.1
    name: str = "fast"

    def __post_init__(self) -> None:
        _require_w_event(self.unit, self.name)
        for field_name in ("cp", "ci", "cd", "theta", "xi", "process_ratio"):
            v = getattr(self, field_name)
            if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise ConfigurationError(f"FAST_w {field_name} must be a finite number >= 0, got {v!r}")
        if self.xi <= 0 or self.process_ratio <= 0 or self.pid_window < 1:
            raise ConfigurationError("FAST_w needs xi > 0, process_ratio > 0 and pid_window >= 1")

    @cached_property
    def per_sample(self) -> Fraction:
        """ε of each sample: the window budget over M = C samples."""
        return self.unit.epsilon / self.unit.cutoff

    @property
    def base_interval(self) -> int:
        """The interval at which C samples fill a window exactly: ⌈w/C⌉ (the start value)."""
        return -(-self.unit.w // self.unit.cutoff)

    def new_accountant(self) -> Accountant:
        return WindowAccountant(self.unit.epsilon, self.unit.w)

    def reset(self) -> FastState:
        return FastState(interval=self.base_interval)

    def reset_runs(self, runs: int) -> FastRuns:
        return FastRuns(None, np.zeros(runs, dtype=bool), np.zeros(runs), np.full(runs, -1, dtype=np.int64),
                        np.full(runs, self.base_interval, dtype=np.int64), np.zeros(runs, dtype=np.int64),
                        np.zeros((runs, self.pid_window)), np.zeros(runs, dtype=np.int64))

    def to_runs(self, state: FastState) -> FastRuns:
        """The one run of ``state`` as :class:`FastRuns` (R = 1). Only the last ``pid_window``
        errors can ever be read again, so only they are kept."""
        kept = state.errors[len(state.errors) - min(len(state.errors), self.pid_window):]
        errors = np.zeros((1, self.pid_window))
        if kept:
            errors[0, self.pid_window - len(kept):] = kept
        estimate = None if state.estimate is None else np.asarray(state.estimate, dtype=np.float64)[None, :]
        return FastRuns(estimate, np.array([state.estimate is not None]), np.array([state.variance]),
                        np.array([state.last_sample], dtype=np.int64), np.array([state.interval], dtype=np.int64),
                        np.array([state.next_sample], dtype=np.int64), errors,
                        np.array([len(kept)], dtype=np.int64))

    def from_runs(self, runs: FastRuns) -> FastState:
        """Inverse of :meth:`to_runs` (the journaled form, byte for byte as before)."""
        estimate = None
        if runs.estimate is not None and runs.has_estimate[0]:
            estimate = runs.estimate[0]
            estimate.setflags(write=False)
        n = int(runs.n_errors[0])
        errors = tuple(float(e) for e in runs.errors[0, self.pid_window - n:].tolist()) if n else ()
        return FastState(estimate, float(runs.variance[0]), int(runs.last_sample[0]), int(runs.interval[0]),
                         int(runs.next_sample[0]), errors)

    def decide(self, state: FastState, ctx: DecisionContext) -> tuple[Decision, FastState]:
        decision, _ = decide_one(self, self.to_runs(state), ctx)
        return decision, state  # deciding changes no state (the filter runs after the sample)

    def decide_runs(self, state: FastRuns, ctx: RunsContext) -> tuple[RunsDecision, FastRuns]:
        """A run samples at ε/C when its schedule says so and its window can take it; otherwise it
        publishes the prediction (= its last posterior). Reads no data."""
        if ctx.timestep < state.next_sample.min():  # no run is due (most timesteps): nothing to ask
            return RunsDecision(NO_RUNS, NO_RUNS, "scheduled sample"), state
        amount = ctx.ledger.amount(self.per_sample)
        rows = ((ctx.timestep >= state.next_sample) & ctx.ledger.can_spend(ctx.timestep, amount)).nonzero()[0]
        return RunsDecision(rows, amounts_for(amount, rows), "scheduled sample"), state

    @cached_property
    def noise_variance(self) -> float:
        """R: the variance of one count's sample noise (public: Δ and ε/C), ``2·(Δ·C/ε)²``."""
        b = float(Fraction(self.sensitivity) / self.per_sample)
        return 2.0 * b * b

    #: the published releases are the filter's float posteriors
    runs_publish_float = True

    def after_runs(self, state: FastRuns, ctx: RunsContext, rows: np.ndarray,
                   noisy: np.ndarray) -> tuple[np.ndarray, FastRuns]:
        """The filter and the controller for the sampled runs ``rows`` (post-processing)."""
        return self._filter_runs(state, ctx.timestep, rows, noisy), state

    def _filter_runs(self, state: FastRuns, t: int, rows: np.ndarray, noisy: np.ndarray) -> np.ndarray:
        """Kalman correction of each sampled run's release against its prior, then the PID update of
        its sampling interval; returns the posteriors ``(len(rows), U)`` (what the runs publish).

        The IEEE operations are the one-run rule's, in its order: the sum of the errors is the
        left-to-right sum over the window (the zeros of unfilled slots add nothing), and ``exp`` is
        ``math.exp`` per run."""
        r = self.noise_variance
        z = noisy.astype(np.float64)
        if state.estimate is None:
            state.estimate = np.zeros((state.variance.size, z.shape[1]))
        elif not state.estimate.flags.writeable:  # the one run's journaled posterior: never changed
            state.estimate = state.estimate.copy()
        first = ~state.has_estimate[rows]
        prior = state.estimate[rows]
        last = state.last_sample[rows]
        p = state.variance[rows] + self.process_ratio * r * (t - last)
        gain = p / (p + r)
        posterior = np.where(first[:, None], z, prior + gain[:, None] * (z - prior))
        variance = np.where(first, r, (1 - gain) * p)
        # relative change beyond the sample noise's expected L1 (public), FAST's feedback error
        floor = z.shape[1] * math.sqrt(r / 2.0)
        change = np.maximum(0.0, np.abs(z - prior).sum(axis=1) - floor)
        error = np.where(first, 0.0, change / np.maximum(np.abs(posterior).sum(axis=1), 1.0))
        errs = np.concatenate((state.errors[rows, 1:], error[:, None]), axis=1)
        n = np.minimum(state.n_errors[rows] + 1, self.pid_window)
        total = 0 + errs[:, 0]
        for j in range(1, errs.shape[1]):
            total = total + errs[:, j]
        moved = (n >= 2) & (last >= 0)
        if self.pid_window >= 2:
            derivative = np.where(moved, (errs[:, -1] - errs[:, -2]) / np.where(moved, t - last, 1), 0.0)
        else:
            derivative = np.zeros(rows.size)
        control = self.cp * errs[:, -1] + self.ci * total / n + self.cd * derivative
        # the exponent is capped where exp would overflow (a large error): the step is then hugely
        # negative either way and the interval falls to 1, as it would without the cap
        exponent = np.minimum((control - self.xi) / self.xi, FAST_MAX_EXPONENT)
        step = self.theta * (1.0 - np.array([math.exp(x) for x in exponent.tolist()], dtype=np.float64))
        # max(1, int(i + step)): int() truncates, and below 1 the interval is 1 either way
        interval = np.maximum(1.0, state.interval[rows] + step).astype(np.int64)
        state.estimate[rows] = posterior
        state.has_estimate[rows] = True
        state.variance[rows] = variance
        state.last_sample[rows] = t
        state.interval[rows] = interval
        state.next_sample[rows] = t + interval
        state.errors[rows] = errs
        state.n_errors[rows] = n
        return posterior

    def smooth(self, state: FastState, timestep: int, noisy: NoisyHistogram) -> tuple[NoisyHistogram, FastState]:
        """The filter and the controller for the service's one run (:meth:`after_runs` with R = 1)."""
        runs = self.to_runs(state)
        self._filter_runs(runs, timestep, ONE_RUN, np.asarray(noisy.counts)[None, :])
        new = self.from_runs(runs)
        posterior = new.estimate
        assert posterior is not None
        width = np.broadcast_to(np.float64(np.inf), posterior.shape)  # a filtered estimate: no interval claimed
        r = self.noise_variance
        details = {"kalman_gain": round(1.0 - new.variance / r, 6) if state.estimate is not None else 1.0}
        return NoisyHistogram(posterior, noisy.epsilon, width, noisy.confidence, details), new

    def charges(self) -> tuple[Fraction, ...]:
        return (self.per_sample,)

    def on_fresh(self, state: FastState, timestep: int) -> FastState:
        return state

    def state_to_json(self, state: FastState) -> dict[str, Any]:
        return state.to_json()

    def state_from_json(self, data: dict[str, Any]) -> FastState:
        return FastState.from_json(data)

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "per_sample_epsilon": str(self.per_sample), "max_samples": self.unit.cutoff,
                "pid": [self.cp, self.ci, self.cd, self.theta, self.xi, self.pid_window],
                "process_ratio": self.process_ratio}
