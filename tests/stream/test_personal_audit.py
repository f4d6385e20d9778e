"""Whole-pipeline audit of the personal guarantee (``docs/privacy.md`` §12.7–12.8), with broken variants.

For each PDP mechanism and a person at each tier, the *production* pipeline
(events with a consent attribute → validation → routing by tier and the
person's Sampling coin → windowing and contribution bounding →
:class:`controller.personal.PersonalEngine` → release message) runs on D and on
D′ = D + that person. What it hands the engine (the true counts per budget
level) and what the engine draws (the recorded noise scale of every part) are
captured; they show which part's count the person moves, and at which scale
it is released. The released count is then re-drawn vectorised
(``base + person·coin + DLap(scale)``, 200,000 runs per side, the event chosen
on a separate sample, Clopper–Pearson at α = 1e-6, :func:`tests.dp_audit.audit`),
with the person's coin from the sampler the pipeline itself calls
(``controller.personal.InclusionSampler``, one independent coin per run: each
run is a stream with a fresh coin key). The bound must stay ≤ what the
person's tier ledger says was spent on them (the ``personal`` block of the
production message), and every variant of :data:`BROKEN` must exceed it.

A person whose tier no part releases (Threshold below ε_t) must move no part's
counts at all: checked exactly. That the pipeline's keyed per-person coin is
the exact sampler's decision on the person's own drawer is checked in
``test_personal_pipeline.py``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

import controller.personal as personal_module
from controller.errors import InsufficientBudgetError
from histogram.noise import Randomness
from histogram.personalized.sampling import InclusionSampler
from histogram.testing import RecordingDrawer
from stream.config import load_settings
from stream.ingest.events import EventBatch
from stream.pipeline import ReleasePipeline
from tests.dp_audit import GeneratorSource, Outcomes, audit

F = Fraction
START = 1_704_067_200  # 2024-01-01T00:00:00Z
TIERS = {"basic": "0.5", "research": "2"}  # and default: privacy.epsilon = 1
PERSONS = {"basic": 3000, "default": 4000, "research": 3000}
MECHANISMS = {
    "minimum": {},
    "threshold": {"threshold": "1"},
    "sampling": {"threshold": "2"},
    "privacy_aware": {},
    "utility_based": {},
}


def make_settings(mechanism: str, unit: str = "user-level", seed: int = 1):
    return load_settings(
        privacy={"unit": unit, "epsilon": "1", "horizon": 1, "cutoff": 1, "w": 1,
                 "personal": {"mechanism": mechanism, "attribute": "consent", "tiers": TIERS,
                              "persons": PERSONS, **MECHANISMS[mechanism]}},
        schema={"attributes": [{"name": "a", "kind": "categorical", "values": ["x", "y"]}]},
        release={"decision": "uniform"},
        kafka={"record_time": "log-append-time"},
        stream={"start": "2024-01-01T00:00:00Z", "timestep": "1h"},
        randomness={"seed": seed, "allow_seeded_noise": True},
    )


def background() -> list[dict]:
    tiers = ["basic", "research", None, "basic", "unknown-tier"]
    return [{"user_id": f"p{i}", "event_time": START + 10 * i,
             "attributes": {"a": "xy"[i % 2], "consent": tiers[i % len(tiers)]}} for i in range(40)]


class _Recording:
    """A ``Randomness`` whose drawers record every call (the pipeline's release noise)."""

    def __init__(self, seed: int) -> None:
        self.inner = Randomness.seeded(seed)
        self.tapes: list[RecordingDrawer] = []

    def drawer(self, stream: str, timestep: int, purpose: str = "release") -> RecordingDrawer:
        d = RecordingDrawer(self.inner.drawer(stream, timestep, purpose))
        self.tapes.append(d)
        return d


def run_pipeline(mechanism: str, events: list[dict], *, seed: int = 1, tamper=None, unit: str = "user-level"):
    """(engine input counts, part scales, release message) of one production run over ``events``."""
    settings = make_settings(mechanism, unit, seed=seed)
    noise = _Recording(seed)
    pipe = ReleasePipeline(settings, noise=noise)
    if tamper is not None:
        tamper(pipe)
    inputs: list[np.ndarray] = []
    step = pipe.engine.step

    def recording_step(state, counts, drawer):
        inputs.append(np.array(counts))
        return step(state, counts, drawer)

    pipe.engine.step = recording_step  # type: ignore[method-assign]
    rejected = pipe.offer(EventBatch.from_records(events), whole_input=True)
    assert len(rejected) == 0, [r.reason for r in rejected]
    sealed = pipe.seal(final=True)
    assert len(sealed) == 1 and len(inputs) == 1
    scales = [d.scale for d in noise.tapes[0].tape if d.kind == "discrete_laplace"]
    assert len(scales) == len(pipe.engine.plan.parts), "one release draw per part (uniform, one timestep)"
    return pipe, inputs[0].reshape(pipe.engine.levels + 1, pipe.engine.bins), scales, json.loads(sealed[0].payload)


def person(tier: str | None) -> dict:
    return {"user_id": "target", "event_time": START + 5, "attributes": {"a": "x", "consent": tier}}


def where_person_lands(mechanism: str, tier: str | None, tamper=None, unit: str = "user-level",
                       ) -> tuple[int, int, set[int]]:
    """(level row the person is routed to when kept, bin, rows seen over several coin keys)."""
    rows_seen: set[int] = set()
    kept_row = None
    for seed in range(1, 80):
        pipe, with_p, _, _ = run_pipeline(mechanism, [*background(), person(tier)], seed=seed, tamper=tamper,
                                          unit=unit)
        _, base_s, _, _ = run_pipeline(mechanism, background(), seed=seed, tamper=tamper, unit=unit)
        diff = with_p - base_s
        assert diff.sum() == 1 and diff.min() == 0, "adding one person adds exactly one count"
        row, b = (int(x[0]) for x in np.nonzero(diff))
        rows_seen.add(row)
        if row != pipe.engine.levels:
            kept_row = row
        if kept_row is not None and (len(rows_seen) == 2 or pipe.engine.plan.parts[0].sample_below is None):
            break
    assert kept_row is not None, "the person was never kept"
    return kept_row, b, rows_seen


@contextlib.contextmanager
def no_variant() -> Iterator[None]:
    yield


def personal_audit(mechanism: str, tier: str | None, *, tamper=None, seed: int = 7, unit: str = "user-level"):
    """(lower bound on the person's loss, the ε their tier's ledger says was spent on them).

    ``unit`` w-event runs with w = 1: every part spends its whole ε in the one timestep's window.
    """
    pipe, base, scales, message = run_pipeline(mechanism, background(), tamper=tamper, unit=unit)
    _, _, _, message_p = run_pipeline(mechanism, [*background(), person(tier)], tamper=tamper, unit=unit)
    name = tier if tier in TIERS else "default"
    ledger = {t["tier"]: F(t["spent_exact"]) for t in message_p["personal"]["tiers"]}
    charged = ledger[name]
    assert charged <= F(TIERS.get(name, "1")), "the tier's ledger stays within the tier's budget"
    if unit == "w-event":  # the window's spend is the ledger's figure for the person
        charged = F(next(t for t in message_p["personal"]["tiers"] if t["tier"] == name)["window_spent_exact"])
    row, b, rows = where_person_lands(mechanism, tier, tamper=tamper, unit=unit)
    engine = pipe.engine
    part_of = engine.plan.part_of_level()
    k = int(part_of[row])
    if k < 0:  # released in no part: D and D′ give the parts identical counts (exact)
        return float("-inf"), charged
    part = engine.plan.parts[k]
    base_count = int(base[list(part.levels), b].sum())
    scale = scales[k]
    sampled = part.sample_below is not None and engine.plan.levels.epsilons[row] < part.sample_below
    if not sampled:
        assert rows == {row}, "a person above the threshold is always kept"

    def sample(s: np.random.SeedSequence, runs: int) -> dict[str, Outcomes]:
        noise_seed, coin_seed = s.spawn(2)
        noise = GeneratorSource(noise_seed).dlap(scale, runs)
        if sampled:
            sampler = personal_module.InclusionSampler.build(engine.plan.levels.epsilons, part.sample_below)
            coins = sampler.draw(np.full(runs, row, dtype=np.int64), GeneratorSource(coin_seed)._drawer).astype(np.int64)
        else:
            coins = np.ones(runs, dtype=np.int64)
        return {"pair": Outcomes(base_count + noise, base_count + coins + noise, lambda v: {"released": v})}

    return audit(sample, seed=seed, ordered=("released",))["pair"].lower_bound, charged


# -- broken variants ---------------------------------------------------------------------


def _route_basic_as_research(pipe: ReleasePipeline) -> None:
    decl = pipe.personal
    levels = dict(decl.tier_level)
    levels["basic"] = levels["research"]
    pipe.personal = replace(decl, tier_level=levels)


def _route_basic_as_default(pipe: ReleasePipeline) -> None:
    decl = pipe.personal
    levels = dict(decl.tier_level)
    levels["basic"] = levels["default"]
    pipe.personal = replace(decl, tier_level=levels)


class _RatioSampler(InclusionSampler):
    """Sampling with probability e^{ε_i}/e^t instead of (e^{ε_i} − 1)/(e^t − 1) (a common slip)."""

    def draw(self, budgets, noise):
        b = np.asarray(budgets, dtype=np.int64)
        a = self.numer[b]
        p = np.where(a < self.big_t, np.exp((a - self.big_t) / self.denominator), 1.0)
        return noise._gen.random(b.size) < p  # noqa: SLF001 - a deliberately broken sampler


@contextlib.contextmanager
def _patched(name: str, value) -> Iterator[None]:
    old = getattr(personal_module, name)
    setattr(personal_module, name, value)
    try:
        yield
    finally:
        setattr(personal_module, name, old)


def _part_at_the_default_budget(pipe: ReleasePipeline) -> None:
    """Minimum's one part released at the default tier's ε (1) instead of the smallest (1/2)."""
    from controller.method import build_engine

    s = pipe.settings
    wrong = build_engine(s.method_spec(), s.mechanism(), s.domain().size)  # unit ε = privacy.epsilon
    pipe.engine.engines = (wrong,)
    pipe._state = replace(pipe._state, parts=(wrong.initial_state(),))  # noqa: SLF001


#: broken variant → (mechanism, the person's tier, pipeline tamper, context that breaks the code,
#: what catches it: "audit" (the statistical bound exceeds the tier's ledger) or "ledger" (the
#: tier's ledger refuses the charge before the step's release exists))
BROKEN = {
    "tier counted in another tier's part (privacy-aware)":
        ("privacy_aware", "basic", _route_basic_as_research, no_variant, "audit"),
    "tier counted in another tier's part (utility-based)":
        ("utility_based", "basic", _route_basic_as_research, no_variant, "audit"),
    "threshold keeps the tier below ε_t": ("threshold", "basic", _route_basic_as_default, no_variant, "audit"),
    "sampling coin e^ε/e^t":
        ("sampling", "basic", None, lambda: _patched("InclusionSampler", _RatioSampler), "audit"),
    "minimum part released at another tier's ε":
        ("minimum", "basic", _part_at_the_default_budget, no_variant, "ledger"),
}


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
@pytest.mark.parametrize("tier", ["basic", None, "research"], ids=["basic-0.5", "default-1", "research-2"])
def test_personal_guarantee_holds_through_the_pipeline(mechanism, tier):
    lb, charged = personal_audit(mechanism, tier)
    assert lb <= charged, f"{mechanism}, tier {tier}: loss ≥ {lb:.3f} > charged {charged}"


@pytest.mark.parametrize("mechanism", ["sampling", "utility_based"])
@pytest.mark.parametrize("tier", ["basic", "research"], ids=["basic-0.5", "research-2"])
def test_personal_guarantee_holds_through_the_pipeline_per_window(mechanism, tier):
    lb, charged = personal_audit(mechanism, tier, unit="w-event")
    assert lb <= charged, f"w-event {mechanism}, tier {tier}: loss ≥ {lb:.3f} > charged {charged}"
    assert 0 < charged <= F(TIERS[tier])  # the window ledger charged the person, within their budget


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_personal_variant_is_caught(name):
    mechanism, tier, tamper, context, catcher = BROKEN[name]
    if catcher == "ledger":
        with pytest.raises(InsufficientBudgetError, match="would exceed the budget"):
            run_pipeline(mechanism, background(), tamper=tamper)
        return
    with context():
        lb, charged = personal_audit(mechanism, tier, tamper=tamper)
    assert lb > charged, f"{name}: the audit missed it (bound {lb:.3f} <= charged {charged})"


def test_the_twin_coin_is_the_pipeline_sampler():
    """The audit draws the coins with the very function the pipeline calls."""
    assert personal_module.InclusionSampler is InclusionSampler
