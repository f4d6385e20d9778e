"""Shared helpers for engine tests: small streams and engines for every method."""

from __future__ import annotations

import numpy as np

from controller.method import METHODS, W_EVENT_METHODS, MethodSpec, build_engine
from controller.step import Engine
from controller.units import UserLevel, WEvent
from histogram.lpa import LaplaceMechanism

BINS = 50
POPULATION = 2_000


def stream(timesteps: int, seed: int, bins: int = BINS, population: int = POPULATION) -> np.ndarray:
    """A changing population: a base histogram with bursts of change."""
    rng = np.random.default_rng(seed)
    base = rng.multinomial(population, np.ones(bins) / bins)
    out = []
    for t in range(timesteps):
        if t % 7 == 0:
            base = rng.multinomial(population, rng.dirichlet(np.ones(bins)))
        out.append(base.astype(np.int64))
    return np.asarray(out)


def jump_stream(timesteps: int, bins: int = 12, seed: int = 5) -> list[np.ndarray]:
    """Poisson counts (mean 40 a bin) that jump every 37 timesteps, with small changes in between:
    the stream the pinned-hash tests were recorded on (changing it changes every pin)."""
    rng = np.random.default_rng(seed)
    base, out = rng.poisson(40, bins), []
    for t in range(timesteps):
        if t % 37 == 0:
            base = rng.poisson(40, bins)
        out.append((base + rng.poisson(3, bins)).astype(np.int64))
    return out


def all_engines(unit_kind: str) -> list[tuple[str, Engine]]:
    unit = UserLevel(1, 40, 4) if unit_kind == "user-level" else WEvent(1, 8, 2)
    out = []
    for m in METHODS:
        if m in W_EVENT_METHODS and unit_kind == "user-level":
            continue
        spec = MethodSpec(m, unit, population=POPULATION, threshold=0.05)
        out.append((m, build_engine(spec, LaplaceMechanism(), BINS)))
    return out
