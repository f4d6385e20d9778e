"""The PID controller that moves DSAT's public threshold (thesis §4.2.2).

Inputs are public: the number of fresh releases so far and the timestep.
Nothing here reads data, so adjusting the threshold costs no privacy budget
(thesis Thm 4.2.2) — as long as the threshold stays a function of what was
published. The *noisy* comparison happens elsewhere, against
``public threshold + secret threshold noise``; the clamp to ``[lower, upper]``
is applied to the public threshold only (``docs/privacy.md`` §3).

With the thesis's definitions (Eq. 4.2.2–4.2.5), at timestep ``i`` (1-based):

* feedback error ``E_i = |C_i/i − target|`` (target = C/N, or C/w per window),
* error ``e_i = |E_i − δ| / δ``,
* output ``u_i = θ_P·e_i + θ_I·Σ_{last window} e + θ_D·(e_i − e_j)/(i − j)``
  (``j`` the last sampling timestep),
* threshold ``T_i = clamp(T_{i−1} + sign(C_i/i − target)·θ·u_i)``.

The thesis's setting is θ_P = 1, θ_I = θ_D = 0, θ = 0.5, δ = 0.05.
Arithmetic is in floats: the threshold is public, and IEEE-754 ``+ − × ÷``
are deterministic, so the service and an offline replay agree exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from controller.errors import ConfigurationError, StateError

__all__ = ["PIDGains", "PIDState", "PIDController"]


def _where(cond: Any, a: Any, b: Any) -> Any:
    """``np.where`` over runs; for one run (a Python bool) the plain choice."""
    return np.where(cond, a, b) if isinstance(cond, np.ndarray) else (a if cond else b)


@dataclass(frozen=True)
class PIDGains:
    """Gains and set point of the controller (all public, unitless)."""

    theta_p: float = 1.0
    theta_i: float = 0.0
    theta_d: float = 0.0
    theta: float = 0.5
    delta: float = 0.05
    integral_window: int = 10

    def __post_init__(self) -> None:
        for name in ("theta_p", "theta_i", "theta_d", "theta"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value < 0 or value != value or value == float("inf"):
                raise ConfigurationError(f"PID gain {name} must be a finite number >= 0, got {value!r}")
        if not 0 < self.delta < 1:
            raise ConfigurationError(f"PID set point delta must lie in (0, 1), got {self.delta!r}")
        if self.integral_window < 1:
            raise ConfigurationError(f"PID integral_window must be >= 1, got {self.integral_window}")


@dataclass(frozen=True)
class PIDState:
    """Everything the controller remembers (all public)."""

    threshold: float
    errors: tuple[float, ...] = ()
    last_sample_error: float = 0.0
    last_sample_time: int = 0
    updates: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "threshold": repr(self.threshold),
            "errors": [repr(e) for e in self.errors],
            "last_sample_error": repr(self.last_sample_error),
            "last_sample_time": self.last_sample_time,
            "updates": self.updates,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PIDState:
        try:
            return cls(
                float(data["threshold"]),
                tuple(float(e) for e in data["errors"]),
                float(data["last_sample_error"]),
                int(data["last_sample_time"]),
                int(data["updates"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed PID state: {exc}") from exc


@dataclass(frozen=True)
class PIDController:
    """Adjusts a public threshold towards a target rate of fresh releases.

    Attributes:
        gains: PID gains and set point.
        initial: the starting threshold T (thesis units: normalised L1, [0, 2]).
        lower, upper: the clamp of the public threshold.
    """

    gains: PIDGains = field(default_factory=PIDGains)
    initial: float = 0.025
    lower: float = 0.0
    upper: float = 2.0

    def __post_init__(self) -> None:
        if not self.lower <= self.initial <= self.upper:
            raise ConfigurationError(
                f"initial threshold {self.initial} must lie in [{self.lower}, {self.upper}]"
            )

    def reset(self) -> PIDState:
        """The state before any update."""
        return PIDState(float(self.initial))

    def get(self, state: PIDState) -> float:
        """The current public threshold."""
        return state.threshold

    def update(
        self,
        state: PIDState,
        *,
        fresh_so_far: int,
        timestep: int,
        target_rate: float,
        rate_over: int | None = None,
    ) -> PIDState:
        """One controller step at 1-based ``timestep`` given ``fresh_so_far`` releases.

        ``rate_over`` is the number of timesteps the rate is measured over
        (default ``timestep``; w-event mode passes ``min(timestep, w)`` with
        the window's count). The derivative term always uses real times.
        """
        threshold, errors = self.update_runs(
            state.threshold, list(state.errors), state.last_sample_error, state.last_sample_time,
            fresh_so_far=fresh_so_far, timestep=timestep, target_rate=target_rate, rate_over=rate_over)
        return replace(state, threshold=float(threshold), errors=tuple(errors), updates=state.updates + 1)

    def update_runs(
        self,
        threshold: np.ndarray,
        errors: list[np.ndarray],
        last_sample_error: np.ndarray,
        last_sample_time: np.ndarray,
        *,
        fresh_so_far: np.ndarray,
        timestep: int,
        target_rate: float,
        rate_over: int | None = None,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """:meth:`update` for R runs at once (the one implementation; ``update`` is its R = 1 case).

        Arrays of shape ``(R,)``: each run's threshold, its last ``integral_window`` errors (oldest
        first, one array per past update), its last sampling error and time, and its fresh count;
        or the same as Python numbers for one run (what :meth:`update` passes: no array overhead
        on the service's step). Returns the new thresholds and error list. The same IEEE operations
        in the same order for every run (element-wise ``+ − × ÷``; the integral is the
        left-to-right sum), so a run's threshold is bit for bit what a run stepped alone gets.
        """
        if timestep < 1:
            raise ValueError("timestep is 1-based")
        g = self.gains
        rate = fresh_so_far / (timestep if rate_over is None else max(1, rate_over))
        feedback = abs(rate - target_rate)
        e = abs(feedback - g.delta) / g.delta
        errors = (errors + [e])[-g.integral_window :]
        derivative: Any = 0.0
        if g.theta_d:
            moved = timestep != last_sample_time
            derivative = _where(moved, (e - last_sample_error) / _where(moved, timestep - last_sample_time, 1), 0.0)
        total = 0 + errors[0]
        for x in errors[1:]:
            total = total + x
        u = g.theta_p * e + g.theta_i * total + g.theta_d * derivative
        step = g.theta * u
        down = rate - target_rate <= 0
        if isinstance(down, np.ndarray):
            return np.where(down, np.maximum(self.lower, threshold - step), np.minimum(self.upper, threshold + step)), errors
        return (max(self.lower, threshold - step) if down else min(self.upper, threshold + step)), errors

    def sampled(self, state: PIDState, timestep: int) -> PIDState:
        """Record that ``timestep`` was a sampling (fresh) timestep, for the derivative term.

        The error recorded is the one of the latest :meth:`update`. The
        policies update the controller before every data-driven decision, so
        that is this timestep's error; the only fresh releases without an
        update at their own timestep are the first timestep (no error exists
        yet: 0 is recorded) and the last timestep of the user-level horizon
        (no later update reads it).
        """
        last_error = state.errors[-1] if state.errors else 0.0
        return replace(state, last_sample_error=last_error, last_sample_time=timestep)

