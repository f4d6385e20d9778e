"""Statistical audits of the personal guarantee (docs/privacy.md §12.6), with broken variants.

For every mechanism and a person at each of three tiers, D and D′ = D + that
person differ only in the count of the part the person lands in (every other
part's counts and noise are identical, §12.4 lemma), so the audit looks at
that one released count: ``base + coin + DLap(1/ε_part)``, where ``coin`` is
1 (no sampling), or the production exact coin
(:func:`histogram.personalized.sampling.sample_inclusion`, vectorised over
runs: one independent coin per run). The part and its ε come from the
production plan; ``test_mechanisms.py::test_each_part_is_noised_at_exactly_its_epsilon``
shows the production release draws exactly those scales.

The bound (CP lower limit at α = 1e-6 on a fresh sample) must be ≤ the
person's charged ε for the shipped mechanisms, and > it for every variant in
:data:`VARIANTS`.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from histogram.noise import GeneratorDrawer
from histogram.personalized import (
    BudgetLevels,
    BudgetPartition,
    CountUtility,
    Part,
    PersonalizedMechanism,
    minimum,
    partitioned,
    privacy_aware,
    sampling,
    threshold,
    utility_based,
)
from histogram.personalized.sampling import sample_inclusion
from tests.dp_audit import GeneratorSource, Outcomes, audit

F = Fraction
# large budgets so that the audit has power; the proofs do not depend on their size
TIERS = BudgetLevels((F(1, 2), F(1), F(2)), (3000, 4000, 3000))
BASE = 10
TIER_IDS = ["tier-0.5", "tier-1", "tier-2"]


def _drawer(seed: np.random.SeedSequence) -> GeneratorDrawer:
    d = GeneratorDrawer.__new__(GeneratorDrawer)
    d._gen = np.random.Generator(np.random.PCG64(seed))
    d.draws = 0
    return d


def exact_coins(mech: PersonalizedMechanism, part: Part, level: int, runs: int, seed) -> np.ndarray:
    """The production sampler, one coin per run."""
    return sample_inclusion(
        np.full(runs, level, dtype=np.int64), mech.levels.epsilons, part.sample_below, _drawer(seed)
    )


def float_ratio_coins(
    mech: PersonalizedMechanism, part: Part, level: int, runs: int, seed
) -> np.ndarray:
    """Broken: keep with probability e^{ε_i}/e^t (= exp(−(t − ε_i))), drawn exactly."""
    eps = mech.levels.epsilons[level]
    if eps >= part.sample_below:
        return np.ones(runs, dtype=bool)
    gap = part.sample_below - eps
    return _drawer(seed).bernoulli_exp(
        np.full(runs, gap.numerator, dtype=np.int64), gap.denominator
    )


def person_sampler(mech: PersonalizedMechanism, level: int, coins=exact_coins):
    """``sample(seed, runs)`` for :func:`audit`: the released count of the person's part, without and with them."""
    k = int(mech.part_of_level()[level])
    part = mech.parts[k]

    def sample(seed: np.random.SeedSequence, runs: int) -> dict[str, Outcomes]:
        s_noise, s_coin = seed.spawn(2)
        noise = GeneratorSource(s_noise).dlap(1 / part.epsilon, runs)
        if part.sample_below is not None:
            present = coins(mech, part, level, runs, s_coin).astype(np.int64)
        else:
            present = np.ones(runs, dtype=np.int64)
        return {
            "without vs with": Outcomes(
                BASE + noise, BASE + present + noise, lambda v: {"released": v}
            )
        }

    return sample


def bound(mech: PersonalizedMechanism, level: int, seed: int, coins=exact_coins) -> float:
    res = audit(person_sampler(mech, level, coins), seed=seed, ordered=("released",))
    return res["without vs with"].lower_bound


def shipped() -> list[PersonalizedMechanism]:
    util = CountUtility(query_bins=10_000, sampling_variance=0.01)
    return [
        minimum(TIERS),
        threshold(TIERS, F(1)),
        sampling(TIERS, F(2)),
        privacy_aware(TIERS, min_size=1000, utility=util),
        utility_based(TIERS, util, min_size=1000),  # three groups here
        # a group of two tiers released at its smallest budget (what a coarser utility may choose)
        partitioned("two-groups", BudgetPartition(TIERS, (0, 2)), util),
    ]


def _unchecked(name: str, parts: tuple[Part, ...]) -> PersonalizedMechanism:
    """A plan the constructor would refuse (the broken variants), built without its checks."""
    m = object.__new__(PersonalizedMechanism)
    for field, value in (
        ("name", name),
        ("levels", TIERS),
        ("parts", parts),
        ("weights", (1.0 / len(parts),) * len(parts)),
        ("confidence", 0.95),
    ):
        object.__setattr__(m, field, value)
    return m


# Broken variants: (mechanism, audited level, coins) — each must be caught.
VARIANTS = {
    # (a) a tier noised at another tier's ε: one group released at its largest budget
    "group released at its largest budget": (
        _unchecked("partition-max", (Part((0, 1), F(1)), Part((2,), F(2)))),
        0,
        exact_coins,
    ),
    # (a) Minimum run at the mean declared budget instead of the smallest
    "minimum at the mean budget": (
        _unchecked("minimum-mean", (Part((0, 1, 2), TIERS.mean()),)),
        0,
        exact_coins,
    ),
    # (a) Threshold that keeps the tier below the threshold
    "threshold keeps the lower tier": (
        _unchecked("threshold-all", (Part((0, 1, 2), F(1)),)),
        0,
        exact_coins,
    ),
    # (b) sampling probabilities off: e^{ε_i}/e^t instead of (e^{ε_i} − 1)/(e^t − 1)
    "sampling with e^eps/e^t": (sampling(TIERS, F(2)), 0, float_ratio_coins),
}


@pytest.mark.parametrize("level", range(3), ids=TIER_IDS)
@pytest.mark.parametrize("mech", shipped(), ids=lambda m: m.name)
def test_personal_guarantee_holds_at_every_tier(mech, level):
    charged = mech.personal_epsilon[level]
    assert charged <= TIERS.epsilons[level]
    if mech.part_of_level()[level] < 0:
        assert charged == 0  # not released: the output does not depend on this person at all
        return
    lb = bound(mech, level, seed=100 + level)
    assert lb <= float(charged), (
        f"{mech.name}, person at ε={TIERS.epsilons[level]}: loss ≥ {lb:.3f} > charged {charged}"
    )


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_broken_variant_is_caught(name):
    mech, level, coins = VARIANTS[name]
    budget = float(TIERS.epsilons[level])
    lb = bound(mech, level, seed=7, coins=coins)
    assert lb > budget, f"{name}: the audit did not catch it (bound {lb:.3f} <= budget {budget})"


def test_sampling_audit_is_tight_enough_to_matter():
    """The correct Sampling mechanism's person at ε = 1/2 shows a loss close to 1/2, not far below."""
    lb = bound(sampling(TIERS, F(2)), 0, seed=11)
    assert 0.3 < lb <= 0.5


PLAN_VARIANTS = sorted(n for n, (_, _, coins) in VARIANTS.items() if coins is exact_coins)


@pytest.mark.parametrize("name", PLAN_VARIANTS)
def test_broken_plans_are_refused_exactly(name):
    """(a′) The exact guard: the constructor refuses every plan that noises a tier above its budget."""
    mech, _, _ = VARIANTS[name]
    with pytest.raises(ValueError, match="> their budget"):
        PersonalizedMechanism(mech.name, mech.levels, mech.parts, mech.weights)
