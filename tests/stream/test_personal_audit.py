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
counts at all: checked exactly.

w-event Sampling is audited exactly as well (:func:`window_coin_loss`): a w-event
neighbour keeps the person's records outside the window, so the loss is a
property of the releases of *several* timesteps together. The production
pipeline runs over two timesteps, the person present at both, D′ without
their second record (a neighbour for the window of the second timestep,
w = 1); the coins the engine draws are identified by the key of the drawer it
builds for them (equal keys: one coin; distinct keys: independent coins, the
keyed PRF's promise), every assignment of them is run, and the likelihood
ratio of the two releases is computed from the exact discrete Laplace pmfs at
the recorded scales and the exact inclusion probability. A coin for the
stream's lifetime (what main did under w-event) gives ln-ratio
ln((p·e⁴ + 1 − p)/(p·e² + 1 − p)) = 1.363 against a window ledger of 0.5 with
one release outside the window (p = (e^0.5 − 1)/(e² − 1)); more releases
outside it reveal the coin further and the loss tends to t = 2. That the pipeline's keyed per-person coin is
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
from histogram.noise import Randomness, discrete_laplace_pmf
from histogram.personalized.sampling import InclusionSampler, inclusion_probability
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


# -- w-event Sampling: the exact loss over the releases of two timesteps -----------------


class _TaggedDrawer:
    """Stands in for the coin's keyed drawer: carries its key, draws nothing."""

    def __init__(self, key: int) -> None:
        self.key = key


class _AssignedSampler:
    """Stands in for the production sampler: the coin of a drawer key is the audit's assignment.

    ``numer``/``big_t`` (which levels draw a coin) are the production sampler's own."""

    assignment: dict[int, bool] = {}
    seen: list[int] = []

    def __init__(self, real: InclusionSampler) -> None:
        self.numer, self.big_t = real.numer, real.big_t

    @classmethod
    def build(cls, levels, t):
        return cls(InclusionSampler.build(levels, t))

    def draw(self, budgets, drawer):
        if drawer.key not in self.seen:
            self.seen.append(drawer.key)
        return np.array([self.assignment.get(drawer.key, True)] * len(budgets))


def _window_events(second: bool) -> list[dict]:
    """Research-tier background (at t: never sampled) over two timesteps, and the basic-tier target."""
    out = [{"user_id": f"r{i}", "event_time": START + 3600 * h + 10 * i,
            "attributes": {"a": "xy"[i % 2], "consent": "research"}} for h in (0, 1) for i in range(6)]
    out.append({"user_id": "target", "event_time": START + 5, "attributes": {"a": "x", "consent": "basic"}})
    if second:
        out.append({"user_id": "target", "event_time": START + 3600 + 5, "attributes": {"a": "x", "consent": "basic"}})
    return out


def _window_run(events: list[dict], assignment: dict[int, bool], tamper) -> tuple[list, list, list]:
    """(per timestep: the sampled part's counts, its noise scale; the messages) of one production run."""
    settings = make_settings("sampling", "w-event", seed=11)
    noise = _Recording(11)
    _AssignedSampler.assignment = assignment
    with _patched("InclusionSampler", _AssignedSampler), _patched("GeneratorDrawer", _TaggedDrawer):
        pipe = ReleasePipeline(settings, noise=noise)
        if tamper is not None:
            tamper(pipe)
        inputs: list[np.ndarray] = []
        step = pipe.engine.step
        pipe.engine.step = lambda st, c, d: (inputs.append(np.array(c)), step(st, c, d))[1]  # type: ignore[method-assign]
        assert len(pipe.offer(EventBatch.from_records(events), whole_input=True)) == 0
        sealed = pipe.seal(final=True)
    engine = pipe.engine
    assert len(engine.plan.parts) == 1 and len(sealed) == len(inputs) == 2
    part = engine.plan.parts[0]
    counts = [c.reshape(engine.levels + 1, engine.bins)[list(part.levels)].sum(axis=0) for c in inputs]
    scales = [[d.scale for d in tape.tape if d.kind == "discrete_laplace"] for tape in noise.tapes]
    scales = [s for s in scales if s]
    assert len(scales) == 2 and all(len(s) == 1 for s in scales), "one release draw per timestep (uniform)"
    return counts, [s[0] for s in scales], [json.loads(r.payload) for r in sealed]


def window_coin_loss(tamper=None, *, reach: int = 40) -> tuple[float, Fraction]:
    """(exact privacy loss of the two releases, D vs D′, the largest window spend the target's tier ledger shows).

    D: the target at timesteps 0 and 1; D′: only at 0 (w = 1: the window of timestep 1). Every
    assignment of the coins the engine draws is run through the production pipeline; the pmf of
    the released counts is Σ_assignments P(assignment) · Π DLap(y − count; scale), exactly, over
    every output within ``reach`` of the counts; the loss is the largest |ln P_D(y)/P_D′(y)|.
    """
    _AssignedSampler.seen = []
    _window_run(_window_events(True), {}, tamper)  # which coins (drawer keys) exist
    keys = list(_AssignedSampler.seen)
    assert 1 <= len(keys) <= 2, f"the target's coins: {len(keys)} drawer keys"
    p = inclusion_probability(F(TIERS["basic"]), F(MECHANISMS["sampling"]["threshold"]))
    runs: dict[bool, list[tuple[float, list, list]]] = {True: [], False: []}
    charged = F(0)
    for bits in range(2 ** len(keys)):
        assignment = {k: bool(bits >> j & 1) for j, k in enumerate(keys)}
        weight = float(np.prod([p if v else 1 - p for v in assignment.values()]))
        for second in (True, False):
            counts, scales, messages = _window_run(_window_events(second), assignment, tamper)
            runs[second].append((weight, counts, scales))
            for m in messages:
                tier = next(t for t in m["personal"]["tiers"] if t["tier"] == "basic")
                charged = max(charged, F(tier["window_spent_exact"]))
    every = [r for side in runs.values() for r in side]
    # the outputs that can differ: (timestep, bin) where some run's count or scale differs
    moving = [(t, b) for t in range(2) for b in range(every[0][1][t].size)
              if len({(int(c[t][b]), s[t]) for _, c, s in every}) > 1]
    assert 1 <= len(moving) <= 2, f"the target moves one bin per timestep at most: {moving}"
    axes = []
    for t, b in moving:
        lo = min(int(c[t][b]) for _, c, _ in every) - reach
        hi = max(int(c[t][b]) for _, c, _ in every) + reach
        axes.append(np.arange(lo, hi + 1))
    grid = np.meshgrid(*axes, indexing="ij")

    def log_pmf(side: list[tuple[float, list, list]]) -> np.ndarray:
        terms = []
        for weight, counts, scales in side:
            if weight == 0:
                continue
            log = np.full(grid[0].shape, np.log(weight))
            for (t, b), y in zip(moving, grid, strict=True):
                log = log + np.log(discrete_laplace_pmf(y - int(counts[t][b]), scales[t]))
            terms.append(log)
        return np.logaddexp.reduce(np.stack(terms), axis=0)

    loss = float(np.max(np.abs(log_pmf(runs[True]) - log_pmf(runs[False]))))
    return loss, charged


def _lifetime_coin(pipe: ReleasePipeline) -> None:
    """main before issue 27: one coin per person for the stream's lifetime, also under w-event."""
    pipe.engine.coin_per_timestep = False


#: broken variants of w-event Sampling, caught by the exact loss of :func:`window_coin_loss`
WINDOW_BROKEN = {"w-event sampling: one coin for the stream's lifetime": _lifetime_coin}


def test_w_event_sampling_loss_is_exact_and_within_the_window_ledger():
    """A fresh coin per person and timestep: the exact loss reaches the tier's ε_i = 1/2 (the amplified
    bound is tight in the tail) and never passes what the window ledger charged."""
    loss, charged = window_coin_loss()
    assert charged == F(1, 2)
    assert 0.49 < loss <= charged + 1e-12, (loss, charged)


@pytest.mark.parametrize("name", sorted(WINDOW_BROKEN))
def test_broken_window_coin_is_caught(name):
    loss, charged = window_coin_loss(WINDOW_BROKEN[name])
    assert loss > charged + F(1, 2), f"{name}: exact loss {loss:.3f} vs the window ledger's {charged}"
