"""Empty timesteps are data like any other: no decision method may special-case them (issue 27 item 7).

A policy that treats an all-zero histogram differently (skips the test,
republishes, releases zeros without noise) leaks that the timestep was
empty: its neighbour with one person in that timestep is treated the
normal way. The neighbouring pair here is exactly that: D with empty
timesteps (the very first one, one on Sample's schedule, a run of
consecutive ones), and D′_s = D plus one person with one record in the
empty timestep ``s``. Every method of :data:`controller.method.METHODS`
runs through ``Engine.step`` (user-level and w-event where defined).

* **Exact, on the same recorded noise** (D records, D′_s replays): at
  every timestep up to ``s`` the draw calls (kind, exact scale, size) and
  the ledger charges are identical — wherever the decisions so far agree
  (a noisy decision may legitimately flip at ``s``). For methods whose
  published decision is data-independent (uniform, fixed, Sample, and those
  that are fresh at every timestep: PeGaSus, AdaPub, RescueDP) the decision
  sequence must be identical at every timestep, and the draws too (the
  grouped methods' group sums follow released values, so theirs only up to
  ``s``). An empty-skipping policy draws less (or decides differently) on D
  than on D′: caught.
* **Statistical, for data-dependent decisions** (DSAT, DSFT, BD, BA,
  FAST): D′ adds one person in each of three consecutive empty timesteps
  (a neighbour under user-level and, the span being < w, w-event); over
  independent runs the Clopper–Pearson lower bound (α = 10⁻⁶, as
  ``tests/dp_audit.py``) on ln P[E|D]/P[E|D′], for E = "fresh at t" and
  "republished at t" at the timestep chosen on a separate pilot sample,
  must stay at most the unit's ε. A policy that republishes every empty
  timestep (still drawing its noise, so the exact check's draws match)
  makes P[fresh|D] = 0 and is caught here.

``EMPTY_VARIANTS`` lists the broken policies (wrappers around the
production ones) the two checks must catch, for every method;
``tests/test_audit_catalogue.py`` runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from controller.method import GROUPED_METHODS, METHODS, W_EVENT_METHODS, MethodSpec, build_engine
from controller.policies.base import REPUBLISH
from controller.step import Engine
from controller.units import UserLevel, WEvent
from histogram.lpa import LaplaceMechanism
from histogram.testing import RecordingDrawer, ReplayThenFresh
from stream.service.testing import small_settings
from tests.dp_audit import loss_lower_bound

BINS = 20
POPULATION = 5000
W = 4
EPSILON = 1
NOISE = small_settings(1).noise_source()  # seeded, keyed by (stream, timestep): the same for D and D′

#: published decision independent of the data by construction (schedule, or fresh at every timestep)
DATA_INDEPENDENT = frozenset({"uniform", "fixed", "sample", "pegasus", "adapub", "rescuedp"})
DATA_DEPENDENT = frozenset(METHODS) - DATA_INDEPENDENT
CASES = [(m, u) for m in METHODS for u in ("user-level", "w-event") if not (m in W_EVENT_METHODS and u == "user-level")]


def engine(method: str, unit: str) -> Engine:
    u = UserLevel(EPSILON, 12, 6) if unit == "user-level" else WEvent(EPSILON, W, 2)
    return build_engine(MethodSpec(method, u, population=POPULATION, threshold=0.05), LaplaceMechanism(), BINS)


def busy(rng: np.random.Generator) -> np.ndarray:
    return rng.multinomial(POPULATION, rng.dirichlet(np.ones(BINS))).astype(np.int64)


def exact_stream() -> tuple[np.ndarray, list[int]]:
    """12 timesteps; empty at 0 (the first), 4 and 8 (Sample's schedule, w = 4), 9, 10 (a run)."""
    rng = np.random.default_rng(27)
    d = np.stack([busy(rng) for _ in range(12)])
    empty = [0, 4, 8, 9, 10]
    d[empty] = 0
    return d, empty


def with_person(d: np.ndarray, timesteps: list[int], bin_: int = 7) -> np.ndarray:
    d2 = d.copy()
    d2[timesteps, bin_] += 1
    return d2


# -- exact: the same recorded noise ---------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    kind: str
    ledger: tuple[Any, ...]


def run_recorded(e: Engine, d: np.ndarray) -> tuple[list[Step], list[list[Any]]]:
    """D with recorded noise: each timestep's decision, charges and draw tape."""
    state, steps, tapes = e.initial_state(), [], []
    for t, counts in enumerate(d):
        drawer = RecordingDrawer(NOISE.drawer("empty", t))
        release, state = e.step(state, counts, drawer)
        tapes.append(drawer.tape)
        steps.append(Step(release.kind, tuple(x.to_json() for x in release.ledger)))
    return steps, tapes


def exact_violations(e: Engine, method: str) -> list[str]:
    """Where D′_s (one person in the empty timestep s) is treated differently from D on the same noise
    although the method's rule says it must not be."""
    d, empty = exact_stream()
    base, tapes = run_recorded(e, d)
    independent = method in DATA_INDEPENDENT
    bad = []
    for s in empty:
        until = s if (not independent or method in GROUPED_METHODS) else len(d) - 1
        state, d2 = e.initial_state(), with_person(d, [s])
        for t in range(until + 1):
            drawer = ReplayThenFresh(tapes[t], NOISE.drawer("empty'", t))
            release, state = e.step(state, d2[t], drawer)
            mismatch = drawer.finish()
            ledger = tuple(x.to_json() for x in release.ledger)
            if release.kind != base[t].kind:
                if independent:
                    bad.append(f"s={s} t={t}: {base[t].kind} on D, {release.kind} on D'")
                break  # a data-dependent decision flipped on its noise: legitimate, audited elsewhere
            if mismatch is not None:
                bad.append(f"s={s} t={t}: same decision, different draws ({mismatch})")
            elif ledger != base[t].ledger:
                bad.append(f"s={s} t={t}: same decision, different charges")
    return bad


@pytest.mark.parametrize(("method", "unit"), CASES, ids=["-".join(c) for c in CASES])
def test_an_empty_timestep_is_treated_like_its_neighbour_on_the_same_noise(method, unit):
    assert exact_violations(engine(method, unit), method) == []


# -- statistical: data-dependent decisions ---------------------------------------------------------
STAT_STEPS = 6  # busy 0..2, empty 3..5 (D′: one person in each: span 3 < w, a w-event neighbour)
PILOT, RUNS = 30, 100


def stat_stream() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    d = np.stack([busy(rng) for _ in range(STAT_STEPS)])
    d[3:] = 0
    return d, with_person(d, [3, 4, 5])


def fresh_counts(e: Engine, d: np.ndarray, runs: int, stream: str) -> np.ndarray:
    """How often each timestep is fresh over ``runs`` independent runs."""
    out = np.zeros(len(d), dtype=np.int64)
    for r in range(runs):
        state = e.initial_state()
        for t, counts in enumerate(d):
            release, state = e.step(state, counts, NOISE.drawer(f"{stream}/{r}", t))
            out[t] += release.kind == "fresh"
    return out


def empty_timestep_loss(e: Engine) -> float:
    """Largest CP lower bound on the privacy loss of "fresh at t" / "republished at t" between D and D′,
    at the timestep and direction chosen on a separate pilot sample."""
    d, d2 = stat_stream()
    p, p2 = fresh_counts(e, d, PILOT, "pilot D"), fresh_counts(e, d2, PILOT, "pilot D'")
    # pilot: the empty timestep and event with the largest gap (ties: the first)
    gaps = [(abs(int(p[t]) - int(p2[t])), t) for t in range(3, STAT_STEPS)]
    t = max(gaps, key=lambda g: (g[0], -g[1]))[1]
    f, f2 = fresh_counts(e, d, RUNS, "D"), fresh_counts(e, d2, RUNS, "D'")
    k, k2 = np.array([f[t], RUNS - f[t]]), np.array([f2[t], RUNS - f2[t]])
    both = np.concatenate([loss_lower_bound(k, k2, RUNS), loss_lower_bound(k2, k, RUNS)])
    return float(np.max(both))


STAT_CASES = [c for c in CASES if c[0] in DATA_DEPENDENT]


@pytest.mark.parametrize(("method", "unit"), STAT_CASES, ids=["-".join(c) for c in STAT_CASES])
def test_an_empty_timestep_decision_is_within_the_bound(method, unit):
    assert empty_timestep_loss(engine(method, unit)) <= EPSILON


# -- broken variants: an empty histogram special-cased ----------------------------------------------
@dataclass(frozen=True)
class EmptySpecialCase:
    """Wraps a production policy; on an all-zero histogram it does ``how`` instead of deciding."""

    inner: Any
    how: str

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        if ctx.counts.any() or ctx.timestep == 0:
            return self.inner.decide(state, ctx)
        if self.how == "republish, no draw":
            return REPUBLISH, state
        decision, new_state = self.inner.decide(state, ctx)  # draws (and charges) as usual...
        return REPUBLISH, new_state  # ...but an empty histogram is never published


def broken(method: str, unit: str, how: str) -> Engine:
    e = engine(method, unit)
    return Engine(EmptySpecialCase(e.policy, how), e.mechanism, e.bins)


EMPTY_VARIANTS: dict[str, Callable[[str, str], Engine]] = {
    "republish, no draw": lambda m, u: broken(m, u, "republish, no draw"),
    "republish, draws kept": lambda m, u: broken(m, u, "republish, draws kept"),
}


@pytest.mark.parametrize("variant", sorted(EMPTY_VARIANTS))
@pytest.mark.parametrize(("method", "unit"), CASES, ids=["-".join(c) for c in CASES])
def test_broken_empty_variant_is_caught(method, unit, variant):
    """Every method, both variants: the exact check catches it, or (data-dependent methods, draws kept)
    the statistical one does."""
    e = EMPTY_VARIANTS[variant](method, unit)
    if exact_violations(e, method):
        return
    assert method in DATA_DEPENDENT, "the exact check missed a data-independent method's special case"
    assert empty_timestep_loss(e) > EPSILON
