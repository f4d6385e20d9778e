"""``release.planner.online`` (issue 30 item 4): :class:`controller.online.OnlinePolicy` switches
between w-event methods from the released series only, and every window stays ≤ ε.

* the switch: whatever the switch points and the sequence of methods (hypothesis), every window of
  the exact ledger replayed from the releases' ledger entries holds at most ε;
* the re-plan reads releases only: neighbouring (indeed arbitrary) true inputs with the same public
  context give the same re-plan inputs, the same choices and the same public state;
* the broken variants (:data:`BROKEN`) are caught by those two checks (audit catalogue).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.accountant import LedgerEntry
from controller.method import MethodSpec, build_engine, build_policy
from controller.online import OnlinePolicy, OnlineState
from controller.policies.base import DecisionContext
from controller.step import Engine
from controller.units import WEvent
from histogram.lpa import LaplaceMechanism
from histogram.noise import Randomness

BINS = 4
POPULATION = 200
METHODS = ("sample", "uniform", "fixed", "bd", "ba", "dsat", "dsft", "adapub")


def _unit(eps: Fraction = Fraction(1), w: int = 5, cutoff: int = 2) -> WEvent:
    return WEvent(eps, w, cutoff)


def _policy(script: list[int], every: int, unit: WEvent, methods=METHODS, cls=OnlinePolicy,
            seen: list | None = None) -> OnlinePolicy:
    """An online policy whose re-plan follows ``script`` (cycled), recording what it read in ``seen``."""
    cands = tuple(build_policy(MethodSpec(m, unit, population=POPULATION), BINS) for m in methods)
    calls = iter(range(10**9))

    def replan(series, eps, current):
        if seen is not None:
            seen.append((series.copy(), eps))
        return script[next(calls) % len(script)] % len(cands)

    return cls(cands, methods, 0, replan, every, 1, 50)


def _engine(policy: OnlinePolicy) -> Engine:
    base = build_engine(MethodSpec("uniform", policy.unit), LaplaceMechanism(), BINS)
    return replace(base, policy=policy)


def _run(engine: Engine, counts: np.ndarray, seed: int = 0):
    state = engine.initial_state()
    noise = Randomness.seeded(seed)
    releases = []
    for t in range(counts.shape[0]):
        release, state = engine.step(state, counts[t], noise.drawer("online", t))
        releases.append(release)
    return releases, state


def window_violations(releases, epsilon: Fraction, w: int) -> list[tuple[int, Fraction]]:
    """Windows ``[s, s+w-1]`` whose exact ledger (every entry the releases report, at its final
    span) sums above ε: replayed from the releases, not from the accountant under test."""
    entries: dict[int, LedgerEntry] = {}
    for r in releases:
        for e in r.ledger:
            entries[e.seq] = e
    last = releases[-1].timestep
    out = []
    for s in range(-w + 1, last + 1):
        total = sum((e.epsilon for e in entries.values() if e.start <= s + w - 1 and e.end >= s), Fraction(0))
        if total > epsilon:
            out.append((s, total))
    return out


def _stream(t: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    level = np.where(np.arange(t) < t // 2, 40, 0) + rng.integers(0, 80, size=t) * (np.arange(t) >= t // 2)
    return np.maximum(0, level[:, None] + rng.integers(-5, 6, size=(t, BINS))).astype(np.int64)


@settings(max_examples=40, deadline=None)
@given(script=st.lists(st.integers(0, len(METHODS) - 1), min_size=1, max_size=12),
       every=st.integers(1, 7), w=st.integers(1, 8), cutoff=st.integers(1, 3), seed=st.integers(0, 5))
def test_every_window_stays_within_epsilon_whatever_the_switches(script, every, w, cutoff, seed) -> None:
    unit = _unit(Fraction(1), w, min(cutoff, w))
    policy = _policy(script, every, unit)
    releases, state = _run(_engine(policy), _stream(40, seed), seed)
    assert window_violations(releases, unit.epsilon, w) == []
    assert max(r.window_spend for r in releases) <= unit.epsilon
    assert [c for _, c in state.policy.switches] == [c for c in _changes(script, 39 // every) if c is not None]


def _changes(script: list[int], replans: int) -> list[int | None]:
    """The choices the scripted re-plans switch to (None: the same as before)."""
    out, current = [], 0
    for i in range(replans):
        c = script[i % len(script)]
        out.append(None if c == current else c)
        current = c
    return out


def test_switches_happen_where_the_script_says_and_are_public_state() -> None:
    policy = _policy([3, 0, 5], 10, _unit())
    releases, state = _run(_engine(policy), _stream(40, 1))
    assert [c for _, c in state.policy.switches] == [3, 0, 5]
    assert [t for t, _ in state.policy.switches] == [10, 20, 30]
    assert window_violations(releases, Fraction(1), 5) == []


# -- the re-plan reads releases only ----------------------------------------------------------


def replan_inputs(cls=OnlinePolicy) -> tuple[list, list]:
    """Drive two policies through the same public contexts with different true counts (the same
    noise drawer keys), and return what each one's re-plan read."""
    unit = _unit()
    public = np.random.default_rng(7).integers(0, 100, size=(24, BINS))  # the releases: the same for both
    out = []
    for counts_seed in (1, 2):
        seen: list = []
        policy = _policy([1, 2, 0], 3, unit, methods=("uniform", "fixed", "sample"), cls=cls, seen=seen)
        acct = policy.new_accountant()
        state = policy.reset()
        truth = np.random.default_rng(counts_seed).integers(0, 100, size=(24, BINS)).astype(np.int64)
        fresh_count, last_eps = 0, Fraction(0)
        noise = Randomness.seeded(3)
        for t in range(24):
            ctx = DecisionContext(t, truth[t], public[t], fresh_count, acct, noise.drawer("n", t),
                                  LaplaceMechanism(), last_eps)
            decision, state = policy.decide(state, ctx)
            if decision.fresh:
                acct.spend(t, decision.epsilon, "publication")
                fresh_count, last_eps = fresh_count + 1, decision.epsilon
                state = policy.on_fresh(state, t)
        out.append((seen, state))
    return out[0], out[1]


def _same(a, b) -> bool:
    (seen_a, state_a), (seen_b, state_b) = a, b
    return (len(seen_a) == len(seen_b) and all(np.array_equal(x[0], y[0]) and x[1] == y[1]
                                                for x, y in zip(seen_a, seen_b, strict=True))
            and state_a.switches == state_b.switches and state_a.releases == state_b.releases)


def test_the_replan_reads_releases_only() -> None:
    a, b = replan_inputs()
    assert a[0], "the re-plan was never called"
    assert _same(a, b)


class ReadsTheCounts(OnlinePolicy):
    """Broken: the re-plan's series is the true counts (``ctx.counts``), not the releases."""

    def decide(self, state: OnlineState, ctx: DecisionContext):
        rel = state.releases
        if ctx.timestep % self.every == 0 and rel:
            from controller.online import FreshRelease

            state = replace(state, releases=(*rel[:-1], FreshRelease(rel[-1].timestep,
                                                                     tuple(float(x) for x in ctx.counts),
                                                                     rel[-1].epsilon)))
        return super().decide(state, ctx)


class FreshLedgerOnSwitch(OnlinePolicy):
    """Broken: a switch starts the new method on an empty window ledger (the old charges dropped)."""

    def decide(self, state: OnlineState, ctx: DecisionContext):
        decision, new = super().decide(state, ctx)
        if new.choice != state.choice:
            ctx.accountant.entries.clear()
            ctx.accountant._live_sum = Fraction(0)
            decision, inner = self.current(new).decide(self.current(new).reset(), ctx)
            new = replace(new, inner=inner)
        return decision, new


BROKEN = {"re-plan reads the true counts": ReadsTheCounts,
          "switch starts an empty ledger": FreshLedgerOnSwitch}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_online_variant_is_caught(name) -> None:
    cls = BROKEN[name]
    if cls is ReadsTheCounts:
        a, b = replan_inputs(cls)
        assert not _same(a, b), "reading the true counts should change the re-plan's input"
        return
    unit = _unit(Fraction(1), 5, 2)
    policy = _policy([1, 0], 5, unit, methods=("sample", "uniform"), cls=cls)
    releases, _ = _run(_engine(policy), _stream(30, 0))
    assert window_violations(releases, unit.epsilon, unit.w), "an empty ledger at a switch should overspend a window"
