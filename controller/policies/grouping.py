"""w-event mechanisms that release noisy sums over public groups of bins.

Both use the engine's grouped release (:mod:`controller.grouped`): the policy
plans disjoint groups of bins from public values, the engine charges ε and
draws one discrete Laplace value of scale Δ/ε per group sum, and the policy's
``smooth`` publishes a function of those noisy sums and of its own public state.

* :class:`AdaPubPolicy` — **AdaPub** (Wang, Yang, Ren, Zhao and Lam, "Adaptive
  differentially private data stream publishing in spatio-temporal monitoring
  of IoT", IPCCC 2019): every timestep spends ``ε/w``; *DimParti* groups bins
  whose last released values fall between the same random pivots and perturbs
  each group's sum at ``ε_p = (4/5)·ε/w`` (each bin gets the group average);
  *AdaCluster* keeps a time group per bin, closed by a private per-bin
  deviation test at ``ε_c = (1/5)·ε/w`` against a PID-adapted threshold; the
  release is the median of the bin's time group. ``docs/privacy.md`` §4.6.
* :class:`RescueDPPolicy` — **RescueDP** (Wang, Zhang, Lu, Wang, Qin and Ren,
  INFOCOM 2016 / TDSC 2018): per-bin adaptive sampling intervals (PID on the
  filtered releases), an adaptive budget ``min(p·ε_rm, ε_max)`` per sampling
  timestep from the window's remaining budget, dynamic grouping of sampled
  bins with small estimates, and a Kalman filter per bin. The paper keeps a
  budget per region; that is unsound under w-event neighbouring (one person
  moves between regions), so here every timestep's groups share one ε,
  charged once to the stream's window ledger. ``docs/privacy.md`` §4.7.

Every charge happens before its draw, and every decision that reads no data
republishes. All state is public (noisy sums, bits, schedules) and journaled.

Runs axis (the lab's runner): ``decide_runs`` / ``after_runs`` step the very
``decide`` / ``smooth`` above once per run (:mod:`controller.policies.per_run`);
the runner releases each fresh run's group sums with the engine's
:func:`controller.grouped.release_groups`.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from controller.accountant import Accountant, WindowAccountant
from controller.errors import ConfigurationError, StateError
from controller.policies.base import (
    REPUBLISH,
    Decision,
    DecisionContext,
    fresh,
)
from controller.policies.per_run import PerRunLoop
from controller.policies.wevent import _require_w_event
from controller.step import decode_array, encode_array
from controller.units import WEvent
from histogram.mechanism import NoisyHistogram
from histogram.noise import discrete_laplace_mean_abs

__all__ = ["AdaPubPolicy", "AdaPubState", "RescueDPPolicy", "RescueDPState"]

#: RescueDP's budgets are multiples of ε/2²⁰, so the exact ledger stays small on endless streams
BUDGET_GRID = 2**20



def _public_uniform(timestep: int, count: int, high: int) -> np.ndarray:
    """``count`` public, data-independent integers in ``[0, high)`` keyed by ``timestep`` (BLAKE2b).

    Not noise: anyone can recompute them. AdaPub's pivots only need to be
    spread independently of the data (so no DimParti boundary is fixed).
    """
    return np.array([word % high for word in _public_words(timestep, count)], dtype=np.int64)


@functools.lru_cache(maxsize=64)
def _public_words(timestep: int, count: int) -> tuple[int, ...]:
    """The BLAKE2b words behind :func:`_public_uniform` (the same for every run at a timestep: the
    lab's runs share them)."""
    return tuple(int.from_bytes(hashlib.blake2b(f"adapub-pivot:{timestep}:{k}".encode(), digest_size=8).digest(),
                                "little") for k in range(count))


def _median_rows(members: np.ndarray) -> np.ndarray:
    """``np.nanmedian(members, axis=1)`` (the same floats) for rows that each hold a value: the
    middle of each row's sorted values (NaN sorts last), or the half-sum of the two middle ones.

    ``nanmedian`` on short rows goes through masked arrays, most of AdaPub's time in the lab;
    ``tests/controller/test_grouped_pinned.py`` holds the two equal bit for bit."""
    n = members.shape[1] - np.isnan(members).sum(axis=1)
    if members.shape[1] == 0 or not n.all():
        return np.nanmedian(members, axis=1)
    ordered = np.sort(members, axis=1)
    rows = np.arange(members.shape[0])
    high = n // 2
    low = np.where(n % 2 == 1, high, high - 1)
    return (ordered[rows, low] + ordered[rows, high]) / 2.0


def _positive(name: str, value: object, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):  # type: ignore[operator]
        raise ConfigurationError(f"{name} must be a finite number {'>= 0' if allow_zero else '> 0'}, got {value!r}")


def _whole(name: str, value: object, low: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigurationError(f"{name} must be a whole number >= {low}, got {value!r}")


def _dlap_variance(scale: Fraction) -> float:
    """Variance of discrete Laplace noise of this scale: ``2a/(1−a)²``, ``a = e^{−1/scale}``."""
    a = math.exp(-1.0 / float(scale))
    return 2.0 * a / (1.0 - a) ** 2


def _arr(data: Any, name: str) -> np.ndarray | None:
    return None if data is None else decode_array(data)


def _enc(arr: np.ndarray | None) -> dict[str, Any] | None:
    return None if arr is None else encode_array(np.ascontiguousarray(arr).reshape(-1))


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr


def _pid(errors: np.ndarray, kp: float, ki: float) -> np.ndarray:
    """``kp·(newest error) + ki·(mean of the kept errors)`` per row; rows hold NaN for missing errors."""
    newest = errors[:, -1]
    kept = ~np.isnan(errors)
    count = kept.sum(axis=1)
    mean = np.where(count > 0, np.where(kept, errors, 0.0).sum(axis=1) / np.maximum(count, 1), 0.0)
    return kp * np.nan_to_num(newest, nan=0.0) + ki * mean


def _push(errors: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Shift ``values`` into the newest column of ``errors`` at ``rows`` (a copy)."""
    out = errors.copy()
    out[rows, :-1] = out[rows, 1:]
    out[rows, -1] = values
    return out


# ---------------------------------------------------------------------------
# AdaPub


@dataclass(frozen=True)
class AdaPubState:
    """AdaPub's public state, per bin.

    Attributes:
        released: the counts last published (None before the first release).
        members: ``bins × max_group`` perturbed values of each bin's open time
            group (oldest first, NaN beyond the group's size).
        sizes: each bin's time-group size (0 before the first release).
        errors: ``bins × pid_window`` feedback errors (newest last, NaN = none yet).
        labels, joined: this timestep's dimension groups and join bits, set by
            ``decide`` for ``smooth`` (None between timesteps).
    """

    released: np.ndarray | None = None
    members: np.ndarray | None = None
    sizes: np.ndarray | None = None
    errors: np.ndarray | None = None
    labels: np.ndarray | None = None
    joined: np.ndarray | None = None

    def to_json(self) -> dict[str, Any]:
        shape = None if self.members is None else list(self.members.shape)
        eshape = None if self.errors is None else list(self.errors.shape)
        return {"released": _enc(self.released), "members": _enc(self.members), "members_shape": shape,
                "sizes": _enc(self.sizes), "errors": _enc(self.errors), "errors_shape": eshape,
                "labels": _enc(self.labels), "joined": _enc(self.joined)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AdaPubState:
        try:
            members = _arr(data["members"], "members")
            errors = _arr(data["errors"], "errors")
            if members is not None:
                members = _frozen(members.reshape(tuple(int(x) for x in data["members_shape"])).copy())
            if errors is not None:
                errors = _frozen(errors.reshape(tuple(int(x) for x in data["errors_shape"])).copy())
            out = cls(_arr(data["released"], "released"), members, _arr(data["sizes"], "sizes"), errors,
                      _arr(data["labels"], "labels"), _arr(data["joined"], "joined"))
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed AdaPub state: {exc}") from exc
        if (out.released is None) != (out.sizes is None) or (out.sizes is not None and (
                out.members is None or out.errors is None or int(out.sizes.min(initial=0)) < 0
                or int(out.sizes.max(initial=0)) > out.members.shape[1])):
            raise StateError("malformed AdaPub state: inconsistent released values, groups or sizes")
        return out


@dataclass(frozen=True)
class AdaPubPolicy(PerRunLoop):
    """AdaPub, window-split: DimParti grouping over bins, AdaCluster grouping over time.

    Attributes:
        unit: the w-event unit; every timestep spends ``ε/w``.
        sensitivity: per-person per-timestep contribution bound Δ (L1).
        perturb_share: ε_p's share of ``ε/w`` (the paper's 0.8; the rest, ε_c, tests).
        pivots: g, the number of random pivots of DimParti (the paper's 20).
        max_group: the longest time group (public; default ``w``): bounds the
            state (``bins × max_group`` values) and the median smoother's lag.
        kp, ki: PID gains of the threshold controller (the paper's 0.9, 0.1).
        pid_window: how many feedback errors the integral term averages.
        gamma: the floor of the relative feedback error's denominator (the paper's 1).
    """

    unit: WEvent
    sensitivity: int = 1
    perturb_share: Fraction = Fraction(4, 5)
    pivots: int = 20
    max_group: int | None = None
    kp: float = 0.9
    ki: float = 0.1
    pid_window: int = 5
    gamma: float = 1.0
    name: str = "adapub"

    def __post_init__(self) -> None:
        _require_w_event(self.unit, self.name)
        share = Fraction(self.perturb_share)
        if not 0 < share < 1:
            raise ConfigurationError(f"AdaPub perturb_share must lie strictly between 0 and 1, got {share}")
        object.__setattr__(self, "perturb_share", share)
        if self.max_group is None:
            object.__setattr__(self, "max_group", self.unit.w)
        _whole("AdaPub max_group", self.max_group)
        _whole("AdaPub pivots", self.pivots, 0)
        _whole("AdaPub pid_window", self.pid_window)
        for name in ("kp", "ki"):
            _positive(f"AdaPub {name}", getattr(self, name), allow_zero=True)
        _positive("AdaPub gamma", self.gamma)

    @functools.cached_property
    def epsilon_p(self) -> Fraction:
        """ε of each timestep's perturbation (noisy sums of the dimension groups)."""
        return self.unit.epsilon / self.unit.w * self.perturb_share

    @functools.cached_property
    def epsilon_c(self) -> Fraction:
        """ε of each timestep's per-bin deviation tests (all bins together: they are disjoint)."""
        return self.unit.epsilon / self.unit.w - self.epsilon_p

    @functools.cached_property
    def test_scale(self) -> Fraction:
        """Discrete Laplace scale of each bin's test noise: Δ/ε_c."""
        return Fraction(self.sensitivity) / self.epsilon_c

    @functools.cached_property
    def perturb_error(self) -> float:
        """Expected absolute error of one bin's perturbed value alone (public): E|DLap(Δ/ε_p)|."""
        return discrete_laplace_mean_abs(Fraction(self.sensitivity) / self.epsilon_p)

    def thresholds(self, state: AdaPubState) -> np.ndarray:
        """θ per bin, from public state only.

        The deviation of a constant bin from its group's median is about
        ``e/√n`` (``e`` the perturbation's mean absolute error, ``n`` the group's
        size); θ adds two test-noise scales, and the PID output ``u`` of the
        relative feedback error shrinks it (``θ/(1+u)``): when the perturbed
        values keep leaving the published median by more than noise, groups
        close sooner.
        """
        assert state.sizes is not None and state.errors is not None
        n = np.maximum(state.sizes, 1).astype(np.float64)
        base = self.perturb_error / np.sqrt(n) + 2.0 * float(self.test_scale)
        return base / (1.0 + _pid(state.errors, self.kp, self.ki))

    def dimension_groups(self, released: np.ndarray | None, ctx: DecisionContext) -> np.ndarray:
        """DimParti: group bins whose last released values lie between the same pivots.

        ``g`` pivots are spread uniformly over the whole numbers of ``[min, max]``
        of the last release by a *public* hash sequence keyed by the timestep
        (anyone can recompute them; they need no secrecy, only independence of
        the data, so they take nothing from the noise drawer); each bin's group is the number of pivots below its released
        value. Every bin is its own group before the first release or with ``g = 0``.
        """
        bins = ctx.bins
        if released is None or self.pivots == 0:
            return np.arange(bins, dtype=np.int64)
        lo = math.floor(float(released.min()))
        hi = math.ceil(float(released.max()))
        pivots = np.sort(lo + _public_uniform(ctx.timestep, self.pivots, hi - lo + 1)).astype(np.float64)
        key = np.searchsorted(pivots, released, side="left")
        _, labels = np.unique(key, return_inverse=True)
        return labels.astype(np.int64).reshape(bins)

    def new_accountant(self) -> Accountant:
        return WindowAccountant(self.unit.epsilon, self.unit.w)

    def reset(self) -> AdaPubState:
        return AdaPubState()

    def decide(self, state: AdaPubState, ctx: DecisionContext) -> tuple[Decision, AdaPubState]:
        t, bins = ctx.timestep, ctx.bins
        if state.sizes is None:  # the first release: nothing to test, no release to group by
            if not ctx.accountant.can_spend(t, self.epsilon_p):
                return REPUBLISH, state
            return fresh(self.epsilon_p, "first release", self.dimension_groups(None, ctx)), replace(
                state, labels=None, joined=np.zeros(bins, dtype=bool))
        eligible = state.sizes < self.max_group  # type: ignore[operator]
        need = self.epsilon_p + (self.epsilon_c if eligible.any() else 0)
        if not ctx.accountant.can_spend(t, need):
            return REPUBLISH, state
        joined = np.zeros(bins, dtype=bool)
        if eligible.any():
            ctx.accountant.spend(t, self.epsilon_c, "test")
            assert state.released is not None
            # per bin |x_t[b] − round(r[b])|: 1-Lipschitz in x_t[b], the bins disjoint, so the vector moves by ≤ Δ in L1
            deviation = np.abs(ctx.counts.astype(np.int64) - np.rint(state.released).astype(np.int64))
            noisy = deviation + np.asarray(ctx.noise.discrete_laplace(self.test_scale, bins), dtype=np.int64)
            joined = eligible & (noisy <= self.thresholds(state))
        labels = self.dimension_groups(state.released, ctx)
        return fresh(self.epsilon_p, "perturb", labels), replace(state, labels=labels, joined=joined)

    def smooth(self, state: AdaPubState, timestep: int, noisy: NoisyHistogram) -> tuple[NoisyHistogram, AdaPubState]:
        """Each bin's perturbed value is its dimension group's noisy average; publish its time group's median."""
        sums = np.asarray(noisy.counts, dtype=np.float64)
        labels = state.labels if state.labels is not None else np.arange(sums.size, dtype=np.int64)
        width = np.bincount(labels, minlength=sums.size).astype(np.float64)
        perturbed = sums[labels] / width[labels]
        bins = perturbed.size
        if state.sizes is None:
            members = np.full((bins, self.max_group), np.nan)  # type: ignore[arg-type]
            sizes = np.zeros(bins, dtype=np.int64)
            errors = np.full((bins, self.pid_window), np.nan)
        else:
            assert state.members is not None and state.errors is not None and state.released is not None
            members, sizes = state.members.copy(), state.sizes.copy()
            # relative feedback error beyond the perturbation's expected error (public: releases only)
            excess = np.maximum(0.0, np.abs(perturbed - state.released) - self.perturb_error)
            errors = _push(state.errors, np.arange(bins), excess / np.maximum(np.abs(state.released), self.gamma))
        joined = state.joined if state.joined is not None else np.zeros(bins, dtype=bool)
        restart = ~joined
        members[restart] = np.nan
        sizes[restart] = 0
        members[np.arange(bins), sizes] = perturbed
        sizes = sizes + 1
        released = _median_rows(members)
        new = AdaPubState(_frozen(released.copy()), _frozen(members), _frozen(sizes), _frozen(errors))
        out = _frozen(released)
        inf = np.broadcast_to(np.float64(np.inf), out.shape)  # a median over a group: no interval claimed
        details = {"smoothed_over": int(sizes.max()), "dimension_groups": int(sums.size)}
        return NoisyHistogram(out, noisy.epsilon, inf, noisy.confidence, details), new

    def charges(self) -> tuple[Fraction, ...]:
        """ε_p per perturbation, ε_c per round of deviation tests."""
        return (self.epsilon_p, self.epsilon_c)

    def on_fresh(self, state: AdaPubState, timestep: int) -> AdaPubState:
        return state

    def state_to_json(self, state: AdaPubState) -> dict[str, Any]:
        return state.to_json()

    def state_from_json(self, data: dict[str, Any]) -> AdaPubState:
        return AdaPubState.from_json(data)

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "epsilon_p": str(self.epsilon_p), "epsilon_c": str(self.epsilon_c),
                "pivots": self.pivots, "max_group": self.max_group, "pid": [self.kp, self.ki, self.pid_window],
                "gamma": self.gamma, "smoother": "median"}


# ---------------------------------------------------------------------------
# RescueDP


@dataclass(frozen=True)
class RescueDPState:
    """RescueDP's public state, per bin.

    Attributes:
        estimate: the Kalman posterior (what is published), None before the first sample.
        variance: the posterior variance P.
        last_sample: timestep of each bin's last sample (−1 before any).
        interval: each bin's sampling interval I (real, >= 1).
        next_sample: the timestep at which each bin is next due.
        errors: ``bins × pid_window`` feedback errors (newest last, NaN = none yet).
        process: each bin's process variance Q per timestep, learnt from its innovations.
        labels: this timestep's groups (set by ``decide`` for ``smooth``; None between timesteps).
        next_scale: λ_r, the noise scale the next sample can expect (set by ``decide``).
    """

    estimate: np.ndarray | None
    variance: np.ndarray
    last_sample: np.ndarray
    interval: np.ndarray
    next_sample: np.ndarray
    errors: np.ndarray
    process: np.ndarray
    labels: np.ndarray | None = None
    next_scale: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"estimate": _enc(self.estimate), "variance": _enc(self.variance),
                "last_sample": _enc(self.last_sample), "interval": _enc(self.interval),
                "next_sample": _enc(self.next_sample), "errors": _enc(self.errors),
                "errors_shape": list(self.errors.shape), "process": _enc(self.process), "labels": _enc(self.labels),
                "next_scale": repr(self.next_scale)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RescueDPState:
        try:
            errors = decode_array(data["errors"]).reshape(tuple(int(x) for x in data["errors_shape"])).copy()
            out = cls(_arr(data["estimate"], "estimate"), decode_array(data["variance"]),
                      decode_array(data["last_sample"]), decode_array(data["interval"]),
                      decode_array(data["next_sample"]), _frozen(errors), decode_array(data["process"]),
                      _arr(data["labels"], "labels"),
                      float(data["next_scale"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed RescueDP state: {exc}") from exc
        n = out.variance.size
        if any(a.size != n for a in (out.last_sample, out.interval, out.next_sample, out.process)) \
                or out.errors.shape[0] != n \
                or (out.interval.size and float(out.interval.min()) < 1.0) or not math.isfinite(out.next_scale):
            raise StateError("malformed RescueDP state: arrays of different sizes or an interval below 1")
        return out


@dataclass(frozen=True)
class RescueDPPolicy(PerRunLoop):
    """RescueDP: adaptive sampling, adaptive budget, dynamic grouping, perturbation, Kalman filtering.

    Attributes:
        unit: the w-event unit (ε per window of ``w``).
        sensitivity: per-person per-timestep contribution bound Δ (L1).
        phi, p_max: the budget portion ``p = min(φ·ln(I+1), p_max)`` of the
            window's remaining budget (the paper's 0.2 and 0.6).
        max_share: ``ε_max = max_share·ε``, the most one sample spends (the paper's ε/5).
        theta: the interval step θ (the paper's 10).
        kp, ki: PID gains on the feedback error (the paper's 0.9, 0.1).
        pid_window: π, the feedback errors the integral averages (the paper's 3).
        process_ratio: the floor (and start) of the filter's process variance Q
            per timestep, as a fraction of the noise variance of one sample at ε_max.
        q_rate: how fast each bin's Q follows its innovations: ``Q ← (1−a)·Q + a·q̂``
            with ``q̂ = max(0, (innovation² − R − P)/Δt)`` (adaptive Kalman filtering
            from the noisy samples only: post-processing).
        group_factor: a sampled bin whose estimate is below ``group_factor·Δ/ε_t``
            (the sample's noise scale) is grouped with other such bins until the
            group's estimated sum reaches that level.
    """

    unit: WEvent
    sensitivity: int = 1
    phi: float = 0.2
    p_max: float = 0.6
    max_share: Fraction = Fraction(1, 5)
    theta: float = 10.0
    kp: float = 0.9
    ki: float = 0.1
    pid_window: int = 3
    process_ratio: float = 0.1
    q_rate: float = 0.2
    group_factor: float = 1.0
    name: str = "rescuedp"

    def __post_init__(self) -> None:
        _require_w_event(self.unit, self.name)
        for name in ("phi", "p_max", "theta", "process_ratio"):
            _positive(f"RescueDP {name}", getattr(self, name))
        if not 0 <= self.q_rate <= 1:
            raise ConfigurationError(f"RescueDP q_rate must lie in [0, 1], got {self.q_rate!r}")
        for name in ("kp", "ki", "group_factor"):
            _positive(f"RescueDP {name}", getattr(self, name), allow_zero=True)
        if self.p_max > 1:
            raise ConfigurationError(f"RescueDP p_max must lie in (0, 1], got {self.p_max}")
        share = Fraction(self.max_share)
        if not 0 < share <= 1:
            raise ConfigurationError(f"RescueDP max_share must lie in (0, 1], got {share}")
        object.__setattr__(self, "max_share", share)
        _whole("RescueDP pid_window", self.pid_window)

    @functools.cached_property
    def epsilon_max(self) -> Fraction:
        return self.unit.epsilon * self.max_share

    @functools.cached_property
    def process_variance(self) -> float:
        """Q per timestep (public): ``process_ratio`` × the noise variance of one count at ε_max."""
        return self.process_ratio * _dlap_variance(Fraction(self.sensitivity) / self.epsilon_max)

    def portion(self, interval: float) -> float:
        """p = min(φ·ln(I+1), p_max): the share of the remaining window budget a sample takes."""
        return min(self.phi * math.log(interval + 1.0), self.p_max)

    def budget(self, remaining: Fraction, interval: float) -> Fraction:
        """ε_t = min(p·ε_rm, ε_max), rounded down to a multiple of ε/2²⁰ (exact, public)."""
        grid = self.unit.epsilon / BUDGET_GRID
        portion = Fraction(math.floor(self.portion(interval) * BUDGET_GRID), BUDGET_GRID)
        want = min(portion * remaining, self.epsilon_max)
        return (want // grid) * grid

    def new_accountant(self) -> Accountant:
        return WindowAccountant(self.unit.epsilon, self.unit.w)

    def reset(self) -> RescueDPState:
        return RescueDPState(None, np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64),
                             np.zeros((0, self.pid_window)), np.zeros(0))

    def _sized(self, state: RescueDPState, bins: int) -> RescueDPState:
        if state.variance.size == bins:
            return state
        return RescueDPState(None, np.zeros(bins), np.full(bins, -1, dtype=np.int64), np.ones(bins),
                             np.zeros(bins, dtype=np.int64), np.full((bins, self.pid_window), np.nan),
                             np.full(bins, self.process_variance))

    def groups(self, due: np.ndarray, estimate: np.ndarray | None, scale: float) -> np.ndarray:
        """Dynamic grouping of the due bins from their estimates (public): labels per bin, −1 if not due.

        A due bin whose estimate reaches ``τ = group_factor·scale`` is its own
        group. The others, in order of estimate, are packed into groups whose
        estimated sum reaches τ (a last group below τ joins the one before), so
        small counts are measured together rather than drowned one by one.
        """
        labels = np.full(due.size, -1, dtype=np.int64)
        idx = np.flatnonzero(due)
        if estimate is None or self.group_factor == 0:
            labels[idx] = np.arange(idx.size)
            return labels
        tau = self.group_factor * scale
        est = np.maximum(estimate[idx], 0.0)
        big, small = idx[est >= tau], idx[est < tau]
        labels[big] = np.arange(big.size)
        nxt, acc, members = big.size, 0.0, 0
        for b in small[np.argsort(np.maximum(estimate[small], 0.0), kind="stable")]:
            labels[b] = nxt
            acc += max(float(estimate[b]), 0.0)
            members += 1
            if acc >= tau:
                nxt, acc, members = nxt + 1, 0.0, 0
        if members and nxt > big.size:  # the last, short group joins the one before it
            labels[labels == nxt] = nxt - 1
        return labels

    def decide(self, state: RescueDPState, ctx: DecisionContext) -> tuple[Decision, RescueDPState]:
        t = ctx.timestep
        state = self._sized(state, ctx.bins)
        due = state.next_sample <= t
        if not due.any():
            return REPUBLISH, state  # the filter's prediction is its last posterior: republish; reads no data
        remaining = ctx.accountant.remaining(t)
        eps = self.budget(remaining, float(state.interval[due].max()))
        if eps <= 0 or not ctx.accountant.can_spend(t, eps):
            return REPUBLISH, state  # due bins stay due
        scale = float(Fraction(self.sensitivity) / eps)
        labels = self.groups(due, state.estimate, scale)
        # λ_r: the noise scale the next sample can at least expect (the window's budget after this one)
        after = min(remaining - eps, self.epsilon_max)
        next_scale = float(Fraction(self.sensitivity) / after) if after > 0 else float(Fraction(self.sensitivity) / eps)
        return fresh(eps, "sample", labels), replace(state, labels=labels, next_scale=next_scale)

    def smooth(self, state: RescueDPState, timestep: int, noisy: NoisyHistogram) -> tuple[NoisyHistogram, RescueDPState]:
        """Average each group's noisy sum over its bins, Kalman-correct each sampled bin, move its interval."""
        assert state.labels is not None
        labels = state.labels
        measured = np.flatnonzero(labels >= 0)
        sums = np.asarray(noisy.counts, dtype=np.float64)
        size = np.bincount(labels[measured], minlength=sums.size).astype(np.float64)
        z = sums[labels[measured]] / size[labels[measured]]
        r = _dlap_variance(Fraction(self.sensitivity) / noisy.epsilon) / size[labels[measured]] ** 2
        bins = labels.size
        estimate = np.zeros(bins) if state.estimate is None else state.estimate.copy()
        variance, last = state.variance.copy(), state.last_sample.copy()
        interval, next_sample = state.interval.copy(), state.next_sample.copy()
        seen = last[measured] >= 0
        prior = estimate[measured]
        dt = np.maximum(timestep - last[measured], 1)
        process = state.process.copy()
        q = process[measured]
        p = np.where(seen, variance[measured] + q * dt, 0.0)
        gain = np.where(seen, p / (p + r), 1.0)
        post = prior + gain * (z - prior)
        learnt = np.maximum(0.0, ((z - prior) ** 2 - r - variance[measured]) / dt)
        process[measured] = np.where(seen, np.maximum((1 - self.q_rate) * q + self.q_rate * learnt,
                                                      self.process_variance), q)
        estimate[measured] = post
        variance[measured] = np.where(seen, (1.0 - gain) * p, r)
        # adaptive sampling: PID on |this release − the last one| per bin, against the next sample's noise λ_r
        errors = _push(state.errors, measured[seen], np.abs(post - prior)[seen])
        control = _pid(errors[measured], self.kp, self.ki)
        ratio = (control / state.next_scale) ** 2 if state.next_scale > 0 else np.zeros_like(control)
        stepped = np.maximum(1.0, interval[measured] + self.theta * (1.0 - ratio))
        interval[measured] = np.where(seen, stepped, interval[measured])
        next_sample[measured] = timestep + np.floor(interval[measured]).astype(np.int64)
        last[measured] = timestep
        new = RescueDPState(_frozen(estimate.copy()), _frozen(variance), _frozen(last), _frozen(interval),
                            _frozen(next_sample), _frozen(errors), _frozen(process))
        out = _frozen(estimate)
        inf = np.broadcast_to(np.float64(np.inf), out.shape)  # a filtered estimate: no interval claimed
        details = {"sampled_bins": int(measured.size), "groups": int(sums.size)}
        return NoisyHistogram(out, noisy.epsilon, inf, noisy.confidence, details), new

    def charges(self) -> tuple[Fraction, ...]:
        """Every sample's ε is rounded down to a whole multiple of ε/2²⁰ (:meth:`budget`)."""
        return (self.unit.epsilon / BUDGET_GRID,)

    def on_fresh(self, state: RescueDPState, timestep: int) -> RescueDPState:
        return state

    def state_to_json(self, state: RescueDPState) -> dict[str, Any]:
        return state.to_json()

    def state_from_json(self, data: dict[str, Any]) -> RescueDPState:
        return RescueDPState.from_json(data)

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "epsilon_max": str(self.epsilon_max), "phi": self.phi, "p_max": self.p_max,
                "theta": self.theta, "pid": [self.kp, self.ki, self.pid_window],
                "process_ratio": self.process_ratio, "q_rate": self.q_rate, "group_factor": self.group_factor,
                "filter": "kalman"}
