"""Decisions and accounting for dpstream (imports :mod:`histogram` only).

Privacy units and budgets, exact accountants, the SVT calibration, the PID
controller, the decision policies (DSFT, DSAT, uniform, fixed, BD, BA, Sample, PeGaSus, FAST_w) and
the single step function that runs any of them.
"""

from controller.accountant import LedgerEntry, UserLevelAccountant, WindowAccountant
from controller.errors import (
    ConfigurationError,
    ControllerError,
    InsufficientBudgetError,
    StateError,
)
from controller.method import METHODS, MethodSpec, build_engine, build_policy
from controller.pid import PIDController, PIDGains
from controller.step import Engine, EngineState, Release
from controller.units import UserLevel, WEvent

__all__ = [
    "METHODS",
    "ConfigurationError",
    "ControllerError",
    "Engine",
    "EngineState",
    "InsufficientBudgetError",
    "LedgerEntry",
    "MethodSpec",
    "PIDController",
    "PIDGains",
    "Release",
    "StateError",
    "UserLevel",
    "UserLevelAccountant",
    "WEvent",
    "WindowAccountant",
    "build_engine",
    "build_policy",
]
