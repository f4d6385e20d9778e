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

Each policy is w-event only (its budget rule is per window) and charges
``ctx.accountant`` (a :class:`~controller.accountant.WindowAccountant`)
before any noise is drawn; the ledger refuses a step that would take any
window of ``w`` past ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from controller.accountant import Accountant, WindowAccountant
from controller.errors import ConfigurationError, StateError
from controller.policies.base import REPUBLISH, Decision, DecisionContext, fresh
from controller.step import decode_array, encode_array
from controller.units import WEvent
from histogram.mechanism import NoisyHistogram

__all__ = ["SamplePolicy", "PegasusPolicy", "PegasusState"]


def _require_w_event(unit: object, name: str) -> None:
    if not isinstance(unit, WEvent):
        raise ConfigurationError(f"{name} is a w-event mechanism: set privacy.unit: w-event and privacy.w")


@dataclass(frozen=True)
class SamplePolicy:
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

    def new_accountant(self) -> Accountant:
        return WindowAccountant(self.unit.epsilon, self.unit.w)

    def reset(self) -> None:
        return None

    def decide(self, state: None, ctx: DecisionContext) -> tuple[Decision, None]:
        if ctx.timestep % self.unit.w != 0:
            return REPUBLISH, None
        if not ctx.accountant.can_spend(ctx.timestep, self.per_release):
            return REPUBLISH, None  # cannot happen with a fresh ledger; never overspend if it does
        return fresh(self.per_release, "sample"), None

    def on_fresh(self, state: None, timestep: int) -> None:
        return None

    def state_to_json(self, state: None) -> dict[str, Any]:
        return {}

    def state_from_json(self, data: dict[str, Any]) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "interval": self.unit.w, "per_release_epsilon": str(self.per_release)}


@dataclass(frozen=True)
class PegasusState:
    """The open group: its size and the sum of its members' *perturbed* histograms.

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


@dataclass(frozen=True)
class PegasusPolicy:
    """PeGaSus, window-split: perturb at ε_p, test at ε_g, smooth for free, every timestep.

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

    @property
    def epsilon_p(self) -> Fraction:
        """ε of each timestep's perturbation (a fresh release)."""
        return self.unit.epsilon / self.unit.w * self.perturb_share

    @property
    def epsilon_g(self) -> Fraction:
        """ε of each timestep's deviation test."""
        return self.unit.epsilon / self.unit.w - self.epsilon_p

    @property
    def test_scale(self) -> Fraction:
        """Discrete Laplace scale of the deviation test: Δ/ε_g."""
        return Fraction(self.sensitivity) / self.epsilon_g

    def threshold(self, size: int, bins: int, error_per_bin: float) -> float:
        """Public threshold θ for a group of ``size`` perturbed histograms.

        The L1 distance between a constant stream and the mean of ``size``
        perturbed copies of it is about ``U·e/√size`` (``e`` the perturber's
        mean absolute error per bin); θ adds two standard deviations of that
        sum (``2·√U·e/√size``) and two test-noise scales, so a group closes on
        change rather than on noise. A function of public parameters only.
        """
        spread = error_per_bin / math.sqrt(size)
        return bins * spread + 2 * math.sqrt(bins) * spread + 2 * float(self.test_scale)

    def new_accountant(self) -> Accountant:
        return WindowAccountant(self.unit.epsilon, self.unit.w)

    def reset(self) -> PegasusState:
        return PegasusState()

    @staticmethod
    def _mean(state: PegasusState) -> np.ndarray:
        assert state.total is not None
        if state.total.dtype.kind in "iu":  # exact rounding of an integer mean: floor(S/n + 1/2)
            return (2 * state.total + state.size) // (2 * state.size)
        return state.total / state.size

    def deviation(self, counts: np.ndarray, state: PegasusState) -> int:
        """The test's query: ``⌊Σ_b |x_t[b] − m[b]|⌋`` with ``m`` the group's rounded perturbed mean.

        ``m`` is public (post-processing of releases), so the query reads only
        this timestep's histogram; it is 1-Lipschitz in L1, an integer, and
        moves by at most Δ between neighbours.
        """
        m = np.rint(self._mean(state)).astype(np.int64)
        return int(np.abs(counts.astype(np.int64) - m).sum())

    def decide(self, state: PegasusState, ctx: DecisionContext) -> tuple[Decision, PegasusState]:
        t = ctx.timestep
        if state.size == 0 or (self.max_group is not None and state.size >= self.max_group):
            need = self.epsilon_p  # a new group: nothing to test
            if not ctx.accountant.can_spend(t, need):
                return REPUBLISH, state
            return fresh(self.epsilon_p, "new group"), replace(state, joined=False)
        if not ctx.accountant.can_spend(t, self.epsilon_g + self.epsilon_p):
            return REPUBLISH, state
        ctx.accountant.spend(t, self.epsilon_g, "test")
        noisy = self.deviation(ctx.counts, state) + int(ctx.noise.discrete_laplace(self.test_scale))
        theta = self.threshold(state.size, ctx.bins, ctx.mechanism.expected_abs_error(self.epsilon_p, ctx.bins))
        joined = noisy <= theta
        return fresh(self.epsilon_p, "joined group" if joined else "new group"), replace(state, joined=joined)

    def smooth(self, state: PegasusState, timestep: int, noisy: NoisyHistogram) -> tuple[NoisyHistogram, PegasusState]:
        """The Smoother: publish the mean of the group's perturbed histograms (post-processing)."""
        perturbed = np.asarray(noisy.counts)
        if state.joined and state.total is not None:
            kind = np.int64 if perturbed.dtype.kind in "iu" and state.total.dtype.kind in "iu" else np.float64
            new = PegasusState(state.size + 1, state.total.astype(kind) + perturbed.astype(kind), False)
        else:
            new = PegasusState(1, perturbed.copy(), False)
        new.total.setflags(write=False)  # type: ignore[union-attr]
        if new.size == 1:
            return noisy, new
        out = self._mean(new)
        out.setflags(write=False)
        # a group mean is biased by change inside the group: no interval is claimed (published as null)
        width = np.broadcast_to(np.float64(np.inf), out.shape)
        return NoisyHistogram(out, noisy.epsilon, width, noisy.confidence, {"smoothed_over": new.size}), new

    def on_fresh(self, state: PegasusState, timestep: int) -> PegasusState:
        return state

    def state_to_json(self, state: PegasusState) -> dict[str, Any]:
        return state.to_json()

    def state_from_json(self, data: dict[str, Any]) -> PegasusState:
        return PegasusState.from_json(data)

    def describe(self) -> dict[str, Any]:
        return {"decision": self.name, "epsilon_p": str(self.epsilon_p), "epsilon_g": str(self.epsilon_g),
                "max_group": self.max_group, "smoother": "mean"}

