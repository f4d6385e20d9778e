"""Private threshold alerts: a sparse-vector test on a declared query between fresh releases (issue 33 item 3).

A query that must be watched at every timestep cannot wait for the next fresh release (DSAT
may republish for many timesteps). :class:`AlertingPolicy` wraps the stream's decision policy
and, for each declared private alert, runs one AboveThreshold instance (SVT, Lyu et al. Alg. 1,
with the corrections ``docs/privacy.md`` §3 proves for the decision stage, calibrated by
:class:`controller.svt.SVTCalibration`) over the whole stream:

* at timestep 0, before anything else, the instance is charged its ε_a to the stream's one
  accountant (purpose ``alert:<name>``) and its threshold noise ρ ~ DLap(Δ/ε_t) is drawn once;
* at every timestep the wrapped policy republishes, the query's true answer ``q`` (the sum of the
  true counts over the query's bins: sensitivity Δ, the per-timestep contribution bound) is
  tested: positive iff ``q + ν ≥ above + ρ`` with ν ~ DLap(2cΔ/ε_q) (the factor 2 kept although a
  count is monotone: the same calibration as the decision stage);
* after ``max_alerts`` (= c) positives the instance stops testing (answers "not tested").

The wrapped policy runs with the budget ``ε·(1 − share)`` and the instances share ``ε·share``
equally, so the accountant's cap ε holds by construction (user-level only). Which timesteps are
tested depends only on the wrapped policy's published decisions. Each timestep's outcome per
alert (tested, positive, positives so far, what it charged) is public: the engine puts it in
:attr:`controller.step.Release.private_alerts` and the release message publishes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from controller.accountant import Accountant, UserLevelAccountant
from controller.errors import ConfigurationError
from controller.policies.base import Decision, DecisionContext, DecisionPolicy
from controller.svt import SVTCalibration
from controller.units import UserLevel

__all__ = ["PrivateAlert", "AlertingPolicy", "svt_positive"]


def svt_positive(answer: int | np.ndarray, nu: int | np.ndarray, above: float, rho: int | np.ndarray) -> Any:
    """The AboveThreshold comparison ``answer + ν ≥ above + ρ`` (vectorised; exact on integers)."""
    return np.asarray(answer) + np.asarray(nu) >= above + np.asarray(rho)


@dataclass(frozen=True)
class PrivateAlert:
    """One private threshold alert (public configuration).

    Attributes:
        name: the declared query's name.
        bins: the flat histogram indexes the query sums (sorted, distinct).
        above: the public threshold, in counts.
        calibration: the SVT instance's ε_a, cutoff c (``max_alerts``) and sensitivity Δ.
    """

    name: str
    bins: tuple[int, ...]
    above: float
    calibration: SVTCalibration

    def describe(self) -> dict[str, Any]:
        c = self.calibration
        return {"name": self.name, "bins": len(self.bins), "above": self.above, "epsilon": str(c.epsilon),
                "max_alerts": c.cutoff, "threshold_share": str(c.threshold_share)}


@dataclass
class AlertingPolicy:
    """A decision policy plus private threshold alerts, charged in its one accountant (see the module)."""

    inner: DecisionPolicy
    alerts: tuple[PrivateAlert, ...]
    unit: UserLevel
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.inner.name
        total = sum((a.calibration.epsilon for a in self.alerts), Fraction(0))
        inner_eps = getattr(self.inner.unit, "epsilon", None)
        if not isinstance(self.unit, UserLevel) or inner_eps is None or inner_eps + total != self.unit.epsilon:
            raise ConfigurationError("private alerts need user-level privacy, and the decision policy's budget "
                                     "plus the alerts' budgets must equal privacy.epsilon")

    def __getattr__(self, name: str) -> Any:  # the wrapped policy's public extras (e.g. a smoother)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def new_accountant(self) -> Accountant:
        return UserLevelAccountant(self.unit.epsilon)

    def reset(self) -> dict[str, Any]:
        return {"inner": self.inner.reset(), "rho": [None] * len(self.alerts), "positives": [0] * len(self.alerts),
                "last": []}

    def decide(self, state: dict[str, Any], ctx: DecisionContext) -> tuple[Decision, dict[str, Any]]:
        rho, positives = list(state["rho"]), list(state["positives"])
        charged = [Fraction(0)] * len(self.alerts)
        for i, a in enumerate(self.alerts):
            if rho[i] is None:  # the instance starts: charge, then draw its threshold noise once
                ctx.accountant.spend(ctx.timestep, a.calibration.epsilon, f"alert:{a.name}")
                charged[i] = a.calibration.epsilon
                rho[i] = int(ctx.noise.discrete_laplace(a.calibration.threshold_scale))
        decision, inner_state = self.inner.decide(state["inner"], ctx)
        last = []
        for i, a in enumerate(self.alerts):
            tested = not decision.fresh and positives[i] < a.calibration.cutoff
            fired = False
            if tested:
                q = int(np.asarray(ctx.counts)[list(a.bins)].sum())
                nu = int(ctx.noise.discrete_laplace(a.calibration.query_scale))
                fired = bool(svt_positive(q, nu, a.above, rho[i]))
                positives[i] += int(fired)
            last.append({"name": a.name, "tested": tested, "fired": fired, "positives": positives[i],
                         "max_alerts": a.calibration.cutoff, "charged_exact": str(charged[i]),
                         "epsilon_exact": str(a.calibration.epsilon)})
        return decision, {"inner": inner_state, "rho": rho, "positives": positives, "last": last}

    def on_fresh(self, state: dict[str, Any], timestep: int) -> dict[str, Any]:
        return {**state, "inner": self.inner.on_fresh(state["inner"], timestep)}

    def outcomes(self, state: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        """The public outcome of the last :meth:`decide` per alert (no ρ, no ν, no true answer)."""
        return tuple(dict(o) for o in state.get("last", ()))

    def state_to_json(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"inner": self.inner.state_to_json(state["inner"]), "rho": list(state["rho"]),
                "positives": list(state["positives"]), "last": list(state.get("last", []))}

    def state_from_json(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"inner": self.inner.state_from_json(data["inner"]),
                "rho": [None if r is None else int(r) for r in data["rho"]],
                "positives": [int(p) for p in data["positives"]], "last": list(data.get("last", []))}

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "private_alerts": [a.describe() for a in self.alerts]}
