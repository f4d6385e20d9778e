"""Privacy units: what the promise protects, as small frozen value objects.

* :class:`UserLevel` — one person's whole presence over the horizon of ``N``
  timesteps is protected with total ε (thesis Def. 4.1.1); at most ``C``
  fresh releases.
* :class:`WEvent` — every window of ``w`` consecutive timesteps is protected
  with ε (Kellaris et al. 2014; thesis Def. 4.1.3), for an unbounded stream;
  DSAT aims at ``C`` fresh releases per window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from controller.errors import ConfigurationError
from histogram.exact import to_fraction

__all__ = ["UserLevel", "WEvent", "PrivacyUnit", "parse_epsilon"]


def parse_epsilon(value: object) -> Fraction:
    """ε as an exact Fraction; refuses ε <= 0, NaN, infinities and non-numbers."""
    try:
        eps = to_fraction(value, name="privacy.epsilon")
    except ValueError as exc:
        raise ConfigurationError(f"{exc}; give ε as a positive decimal such as 1.0 or 0.5") from exc
    if eps <= 0:
        raise ConfigurationError(f"privacy.epsilon must be > 0, got {eps}; a budget of 0 can release nothing")
    return eps


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return _positive_int(int(value), name)
        raise ConfigurationError(f"{name} must be a whole number, got {value!r}")
    if value < 1:
        raise ConfigurationError(f"{name} must be >= 1, got {value}")
    return value


@dataclass(frozen=True)
class UserLevel:
    """User-level ε-DP over a finite horizon.

    Attributes:
        epsilon: total budget for a person's whole presence.
        horizon: N, the number of timesteps the budget must cover.
        cutoff: C, the most fresh releases (1 <= C <= N).
    """

    epsilon: Fraction
    horizon: int
    cutoff: int
    name: str = "user-level"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", parse_epsilon(self.epsilon))
        object.__setattr__(self, "horizon", _positive_int(self.horizon, "privacy.horizon (N)"))
        object.__setattr__(self, "cutoff", _positive_int(self.cutoff, "privacy.cutoff (C)"))
        if self.cutoff > self.horizon:
            raise ConfigurationError(
                f"privacy.cutoff (C={self.cutoff}) must not exceed privacy.horizon (N={self.horizon}): "
                "there cannot be more fresh releases than timesteps"
            )

    def describe(self) -> dict[str, object]:
        return {"unit": self.name, "epsilon": str(self.epsilon), "horizon": self.horizon, "cutoff": self.cutoff}


@dataclass(frozen=True)
class WEvent:
    """w-event ε-DP: any ``w`` consecutive timesteps cost at most ε in total.

    Attributes:
        epsilon: budget of every window.
        w: window length in timesteps.
        cutoff: C, the most fresh releases DSAT makes in any window (1 <= C <= w).
    """

    epsilon: Fraction
    w: int
    cutoff: int = 1
    name: str = "w-event"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", parse_epsilon(self.epsilon))
        object.__setattr__(self, "w", _positive_int(self.w, "privacy.w"))
        object.__setattr__(self, "cutoff", _positive_int(self.cutoff, "privacy.cutoff (C)"))
        if self.cutoff > self.w:
            raise ConfigurationError(
                f"privacy.cutoff (C={self.cutoff}) must not exceed privacy.w (w={self.w}) in w-event mode"
            )

    def describe(self) -> dict[str, object]:
        return {"unit": self.name, "epsilon": str(self.epsilon), "w": self.w, "cutoff": self.cutoff}


PrivacyUnit = UserLevel | WEvent
