"""PSD's tree plan and its privacy-budget split, in exact rational arithmetic.

The tree (see :mod:`histogram.psd.tree`) has levels ``0`` (the root, the whole
domain) to ``h`` (the deepest leaves). Going from level ``ℓ`` to ``ℓ + 1``
every attribute is split once, in attribute order ("sub-steps"), so a node has
up to ``2^d`` children, as in the paper's 2-D trees (fanout 4). A sub-step
splits at a *private median* (kd levels) or at the *midpoint* of the node's
bin range (quadtree levels, data-independent, free).

The budget ``ε`` of one release is split exactly (``fractions.Fraction``):

* ``ε_median = median_share · ε`` is divided evenly over the median sub-steps
  (Cormode et al. divide the split budget uniformly over the levels that use
  medians);
* ``ε_count = ε − ε_median`` is divided over the ``h + 1`` levels of counts,
  uniformly (``ε/(h+1)`` each) or geometrically: Cormode et al. (ICDE 2012,
  §III, the geometric budget) show that for a range query on a 2-D quadtree
  of height ``h`` the count variance is minimised with ``ε_ℓ ∝ 2^{ℓ/3}``
  (leaves get the most), because a query cuts at most ``O(2^ℓ)`` nodes at
  depth ``ℓ`` and minimising ``Σ n_ℓ / ε_ℓ²`` subject to ``Σ ε_ℓ = ε`` gives
  ``ε_ℓ ∝ n_ℓ^{1/3}``. We apply the same rule to any number of attributes:
  ``n_ℓ`` is the number of depth-``ℓ`` cells a query boundary can cut,
  ``Σ_a Π_{b≠a} c_b(ℓ)`` with ``c_b(ℓ) = min(2^ℓ, bins_b)`` cells along
  attribute ``b`` (attributes with one bin have no boundary). For two large
  attributes this is ``2·2^ℓ`` — the paper's ``2^{ℓ/3}`` exactly; for one
  attribute it is constant, i.e. uniform (as Hay et al. use for 1-D).

The cube roots are irrational: each weight is rounded to a rational (six
decimal places) and the level budgets are ``ε_count · w_ℓ / Σ w``, so they sum
to ``ε_count`` exactly. The rounding only moves budget between levels; it never
changes the total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from histogram.errors import MechanismError

__all__ = ["SubStep", "TreePlan", "PSDBudget", "make_plan", "allocate"]

SplitKind = Literal["median", "midpoint"]
Allocation = Literal["geometric", "uniform"]


@dataclass(frozen=True)
class SubStep:
    """One split of every current cell on one attribute."""

    attribute: int
    kind: SplitKind


@dataclass(frozen=True)
class TreePlan:
    """The public shape of the tree: which split happens where.

    Attributes:
        shape: bins per attribute.
        height: number of split levels (leaves at depth ``height`` at most).
        levels: for each level ``ℓ < height``, the sub-steps that take a node
            of depth ``ℓ`` to its children. Only sub-steps that can split some
            node are listed (an attribute is skipped once every node is
            necessarily one bin wide on it).
        geometric_weights: rational weight of each level's counts under the
            geometric allocation (``height + 1`` values).
    """

    shape: tuple[int, ...]
    height: int
    levels: tuple[tuple[SubStep, ...], ...]
    geometric_weights: tuple[Fraction, ...]

    @property
    def median_steps(self) -> int:
        """Number of median sub-steps (each gets ``ε_median / median_steps``)."""
        return sum(1 for level in self.levels for step in level if step.kind == "median")


@dataclass(frozen=True)
class PSDBudget:
    """The exact split of one release's ε.

    Attributes:
        count: ``ε_ℓ`` of the counts at depth ``ℓ = 0 … height``.
        median_step: ε of each median sub-step (0 when there are none).
        median_steps: how many median sub-steps there are.
    """

    count: tuple[Fraction, ...]
    median_step: Fraction
    median_steps: int

    @property
    def median(self) -> Fraction:
        return self.median_step * self.median_steps

    @property
    def total(self) -> Fraction:
        return sum(self.count, Fraction(0)) + self.median

    def leaf(self, depth: int) -> Fraction:
        """Count budget of a leaf at ``depth``: its own level and every level below.

        A node that cannot be split (one bin) stops early; the budget of the
        levels it does not reach is given to its count, so every person's
        path through the tree still spends exactly ``Σ_ℓ ε_ℓ``.
        """
        return sum(self.count[depth:], Fraction(0))


def max_height(shape: tuple[int, ...], variant: str) -> int:
    """Deepest useful level: below it every node is a single bin."""
    widest = max(shape)
    if variant == "quad":
        return math.ceil(math.log2(widest)) if widest > 1 else 0
    return widest - 1  # a data-dependent split can shave off a single bin per level


def make_plan(shape: tuple[int, ...], height: int, median_levels: int) -> TreePlan:
    """Plan a tree: medians on levels ``< median_levels``, midpoints below."""
    widths = list(shape)  # largest width any node can have on each attribute
    levels: list[tuple[SubStep, ...]] = []
    for level in range(height):
        kind: SplitKind = "median" if level < median_levels else "midpoint"
        steps = []
        for a, w in enumerate(widths):
            if w < 2:
                continue
            steps.append(SubStep(a, kind))
            widths[a] = w - 1 if kind == "median" else w - w // 2
        levels.append(tuple(steps))
    weights = []
    split_attrs = [a for a, b in enumerate(shape) if b >= 2]
    for level in range(height + 1):
        cells = [min(2**level, b) for b in shape]
        boundary = sum(math.prod(cells[b] for b in split_attrs if b != a) for a in split_attrs)
        boundary = max(boundary, 1)
        weights.append(Fraction(round(boundary ** (1.0 / 3.0) * 1_000_000), 1_000_000))
    return TreePlan(tuple(shape), height, tuple(levels), tuple(weights))


def allocate(
    plan: TreePlan, epsilon: Fraction, median_share: Fraction, allocation: Allocation
) -> PSDBudget:
    """Split ``epsilon`` exactly over the median sub-steps and the count levels."""
    if not isinstance(epsilon, Fraction | int) or isinstance(epsilon, bool) or epsilon <= 0:
        raise MechanismError(f"epsilon must be a positive Fraction, got {epsilon!r}")
    epsilon = Fraction(epsilon)
    steps = plan.median_steps
    if steps == 0 and median_share != 0:
        raise MechanismError("this tree has no median splits, so median_share must be 0")
    eps_median = epsilon * median_share
    eps_count = epsilon - eps_median
    levels = plan.height + 1
    if allocation == "uniform":
        weights = [Fraction(1)] * levels
    elif allocation == "geometric":
        weights = list(plan.geometric_weights)
    else:
        raise MechanismError(
            f"count_allocation must be 'geometric' or 'uniform', got {allocation!r}"
        )
    total_w = sum(weights, Fraction(0))
    count = tuple(eps_count * w / total_w for w in weights)
    budget = PSDBudget(count, eps_median / steps if steps else Fraction(0), steps)
    if budget.total != epsilon:  # pragma: no cover - exact arithmetic makes this impossible
        raise MechanismError(f"internal error: PSD budget sums to {budget.total}, not {epsilon}")
    return budget
