"""Audit of the whole PSD release: the ε its noise actually provides, per person, against the ε charged.

PSD composes many draws: a discrete Laplace count for every node of every
level and, on ``kd``/``hybrid`` trees, an exponential-mechanism median for
every cell of every median sub-step. One person's records sit in one node
per level (parallel composition inside a level) and one cell per median
sub-step, so the loss a release can cause for a person whose records lie in
bin ``x`` is at most

    Σ_levels Δ / scale(node of x at that level)  +  Σ_sub-steps ε_step · Δ / Δ_told,

where ``scale`` is the scale the production code actually passed to the
drawer and ``ε_step, Δ_told`` are what it actually passed to the median
sampler. The audit runs the production release (``PSDMechanism.release``)
with a recording drawer and a spy on the median sampler, recomputes that sum
for every bin in exact arithmetic, and asserts that its maximum is at most
the ε the accountant charged. The laws of the samplers themselves (that a
draw "at scale b" is DLap(b), that the median sampler is the exponential
mechanism) are audited statistically elsewhere:
``tests/histogram/test_noise_sampler.py`` and
``tests/histogram/psd/test_psd_median_audit.py``.

``BROKEN`` holds deliberately wrong versions of the production code, applied
with monkeypatch to the real modules (not to a copy); the audit must catch
every one: the noise scale of an inner level, of the leaves, the budget split
across the height, the median budget share and the median sensitivity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest

import histogram.psd.mechanism as psd_mechanism
import histogram.psd.tree as psd_tree
from histogram.noise import Randomness
from histogram.psd.budget import PSDBudget
from histogram.psd.mechanism import PSDMechanism
from histogram.testing import RecordingDrawer

EPSILON = Fraction(7, 10)

# name: (shape, variant, height, Δ)
TREES = {
    "kd 2-D": ((16, 16), "kd", 4, 1),
    "hybrid 2-D Δ=2": ((12, 20), "hybrid", 4, 2),
    "quad 1-D": ((64,), "quad", 6, 1),
}


def _data(shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    return rng.poisson(rng.gamma(0.7, 3.0, size)).astype(np.int64)


class _Audit:
    """Spies installed on the production modules for one release."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.levels: list = []
        self.median_calls: list[tuple[Fraction, int]] = []
        real_build, real_choice = psd_tree.build_tree, psd_tree.exponential_choice

        def build(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.levels = real_build(*args, **kwargs)
            return self.levels

        def choice(utility, sizes, epsilon, sensitivity, noise):  # type: ignore[no-untyped-def]
            self.median_calls.append((Fraction(epsilon), int(sensitivity)))
            return real_choice(utility, sizes, epsilon, sensitivity, noise)

        monkeypatch.setattr(psd_mechanism, "build_tree", build)
        monkeypatch.setattr(psd_tree, "exponential_choice", choice)

    def worst_path_epsilon(self, tape: list, shape: tuple[int, ...], delta: int) -> Fraction:
        """max over bins of the ε the recorded draws provide (exact)."""
        counts = [d for d in tape if d.kind == "discrete_laplace"]
        per_bin = np.zeros(shape, dtype=object)
        per_bin[...] = Fraction(0)
        pos = 0
        for level in self.levels:
            for mask in (~level.leaf, level.leaf):
                k = int(mask.sum())
                if not k:
                    continue
                draw = counts[pos]
                pos += 1
                assert draw.count == k, "the tape does not follow the documented draw order"
                loss = Fraction(delta) / Fraction(draw.scale)
                for j in np.flatnonzero(mask):
                    box = tuple(slice(int(level.lo[a, j]), int(level.hi[a, j]) + 1) for a in range(len(shape)))
                    per_bin[box] += loss
        assert pos == len(counts), "draws the audit could not attribute to a node"
        medians = sum((eps * delta / told for eps, told in self.median_calls), Fraction(0))
        return max(per_bin.ravel()) + medians


def audit(monkeypatch: pytest.MonkeyPatch, tree: str, broken: Callable | None = None, seed: int = 1) -> Fraction:
    """The worst per-person ε of one production release on ``tree`` (with ``broken`` applied)."""
    shape, variant, height, delta = TREES[tree]
    spies = _Audit(monkeypatch)
    if broken is not None:
        broken(monkeypatch)
    mech = PSDMechanism(shape, sensitivity=delta, variant=variant, height=height)
    drawer = RecordingDrawer(Randomness.seeded(seed).drawer(f"psd-audit/{tree}", 0))
    mech.release(_data(shape, seed), EPSILON, drawer)
    return spies.worst_path_epsilon(drawer.tape, shape, delta)


# ---------------------------------------------------------------------------
# deliberately broken versions of the production code


def _patch_budget(monkeypatch: pytest.MonkeyPatch, change: Callable[[PSDBudget], PSDBudget]) -> None:
    real = PSDMechanism.budget
    monkeypatch.setattr(PSDMechanism, "budget", lambda self, eps: change(real(self, eps)))


def inner_level_at_half_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    """Level 1's inner nodes get noise of half the scale; the leaves keep theirs."""

    class Budget(PSDBudget):
        def leaf(self, depth: int) -> Fraction:
            return sum(self.count[depth:], Fraction(0)) - (self.count[1] / 2 if depth <= 1 else 0)

    def change(b: PSDBudget) -> PSDBudget:
        count = list(b.count)
        count[1] *= 2
        return Budget(tuple(count), b.median_step, b.median_steps)

    _patch_budget(monkeypatch, change)


def leaves_at_half_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every leaf's noise at half its scale (the leaf budget doubled)."""

    class Budget(PSDBudget):
        def leaf(self, depth: int) -> Fraction:
            return 2 * sum(self.count[depth:], Fraction(0))

    _patch_budget(monkeypatch, lambda b: Budget(b.count, b.median_step, b.median_steps))


def height_split_overspends(monkeypatch: pytest.MonkeyPatch) -> None:
    """The count budget divided over h levels instead of h + 1 (each level ε_count/h)."""

    def change(b: PSDBudget) -> PSDBudget:
        total = sum(b.count, Fraction(0))
        h = len(b.count) - 1
        return dataclasses.replace(b, count=tuple(total / h for _ in b.count))

    _patch_budget(monkeypatch, change)


def median_share_doubled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each median sub-step runs with twice its share (the counts keep theirs)."""
    _patch_budget(monkeypatch, lambda b: dataclasses.replace(b, median_step=2 * b.median_step))


def median_sensitivity_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The median sampler told Δ = 1 whatever the contribution bound."""
    spy = psd_tree.exponential_choice
    monkeypatch.setattr(
        psd_tree, "exponential_choice", lambda u, sizes, eps, sens, noise: spy(u, sizes, eps, 1, noise)
    )


BROKEN: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], str]] = {
    "inner level at half scale": (inner_level_at_half_scale, "kd 2-D"),
    "leaves at half scale": (leaves_at_half_scale, "quad 1-D"),
    "height split overspends": (height_split_overspends, "quad 1-D"),
    "median share doubled": (median_share_doubled, "kd 2-D"),
    "median sensitivity ignored": (median_sensitivity_ignored, "hybrid 2-D Δ=2"),
}


@pytest.mark.parametrize("tree", sorted(TREES))
def test_every_person_is_charged_for_all_the_noise_of_a_psd_release(monkeypatch, tree):
    worst = audit(monkeypatch, tree)
    assert worst <= EPSILON, f"{tree}: a person's records can cost {worst} > charged {EPSILON}"
    # the split is exact: the worst path spends the whole budget, not less
    assert worst == EPSILON


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_psd_variant_is_caught(name):
    # its own monkeypatch context, so the audit catalogue can call it directly
    broken, tree = BROKEN[name]
    with pytest.MonkeyPatch.context() as monkeypatch:
        worst = audit(monkeypatch, tree, broken)
    assert worst > EPSILON, f"{name}: the audit saw {worst} <= {EPSILON}"


def test_the_audit_follows_the_draw_order_it_documents(monkeypatch):
    """A draw the audit cannot attribute (an extra noise call) is an error, not a silent pass."""
    real = psd_tree.build_tree

    def extra(hist, plan, budget, sensitivity, noise):  # type: ignore[no-untyped-def]
        levels = real(hist, plan, budget, sensitivity, noise)
        noise.discrete_laplace(Fraction(1), 3)
        return levels

    monkeypatch.setattr(psd_tree, "build_tree", extra)
    with pytest.raises(AssertionError, match="could not attribute"):
        audit(monkeypatch, "quad 1-D")
