"""PSD: private spatial decompositions (Cormode, Procopiuc, Srivastava, Shen, Yu, ICDE 2012).

The second release mechanism of dpstream (thesis §4.5). The domain is split
recursively into boxes of bins; every node of the tree gets a noisy count; the
noisy tree is made consistent by least squares and non-negative; the leaves
are spread evenly over their bins, so the output is a count vector over the
same bins as LPA's and the decision stage, the release message and range
queries treat both mechanisms alike. The leaves themselves are published in
``details["tree"]``.

Variants (``variant``):

* ``"quad"`` (default) — every split is at the midpoint of the node's bin
  range (data-independent, no budget for splits): the paper's quadtree, used
  with its geometric budget and least-squares post-processing ("quad-opt");
* ``"kd"`` — every split is a private median (exponential mechanism,
  :mod:`histogram.psd.median`);
* ``"hybrid"`` — the paper's kd-hybrid: private medians on the top
  ``switch_level`` levels, midpoints below.

Each level splits every attribute once, in attribute order (fanout up to
``2^d``, as the paper's 2-D trees have fanout 4), for any number of
attributes. Numeric and ordered attributes are split along their bin order;
categorical attributes along their listed value order.

Privacy map (ε-DP for neighbours at L1 distance Δ = ``sensitivity``; proof in
``docs/privacy.md`` §7): one release spends exactly ``ε``:
``ε = ε_median + Σ_ℓ ε_ℓ``. Each median sub-step is ε-DP with its share by
the exponential mechanism (utility sensitivity Δ) and parallel composition
over the disjoint cells it splits; each count level adds discrete Laplace
noise of scale ``Δ/ε_ℓ`` to counts of disjoint boxes (L1 sensitivity Δ);
sequential composition over sub-steps and levels sums the shares. Least
squares, non-negativity and spreading are post-processing.

Defaults: geometric count allocation (the paper's), ``median_share = 3/10``
of ε for medians in ``kd``/``hybrid`` (the setting of the authors' code,
``ε_count = 0.7 ε``), switch level ``height // 2`` (their 5 of 10). The
variant and height defaults are ours, measured on binned data (see
``docs/privacy.md`` §7.6): on a histogram the finest useful leaf is one bin,
and there the quadtree beat kd and hybrid trees on every query class we
tried; height ``min(8, h_max)`` (``h_max``: depth at which every quadtree
leaf is one bin) was best or close to best on a 1024 × 1024 grid at ε = 1 and
ε = 0.1, where the paper's 10 is too deep.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from histogram.errors import MechanismError
from histogram.exact import to_fraction
from histogram.mechanism import NoisyHistogram
from histogram.noise import NoiseDrawer
from histogram.psd.budget import PSDBudget, TreePlan, allocate, make_plan, max_height
from histogram.psd.consistency import least_squares, nonnegative
from histogram.psd.tree import PSDTree, build_tree, discrete_laplace_variance

__all__ = [
    "PSDMechanism",
    "PSDRelease",
    "PSD_OPTIONS",
    "DEFAULT_HEIGHT",
    "DEFAULT_MEDIAN_SHARE",
    "DEFAULT_VARIANT",
]

VARIANTS = ("kd", "quad", "hybrid")
ALLOCATIONS = ("geometric", "uniform")
PSD_OPTIONS = ("variant", "height", "count_allocation", "median_share", "switch_level")
DEFAULT_HEIGHT = 8  # measured on binned data; the paper used 10 on continuous coordinates
DEFAULT_MEDIAN_SHARE = Fraction(3, 10)  # the authors' setting: 30 % of ε for the split medians
DEFAULT_VARIANT = "quad"


@dataclass(frozen=True)
class PSDRelease:
    """Everything one PSD release produced (all of it safe to publish)."""

    histogram: NoisyHistogram
    tree: PSDTree
    budget: PSDBudget


@dataclass(frozen=True)
class PSDMechanism:
    """Private spatial decomposition over a fixed domain shape.

    Attributes:
        shape: bins per attribute (the domain's ``shape``); the count vector
            is flattened row-major over it.
        sensitivity: Δ, the per-person per-timestep L1 contribution bound.
        confidence: probability the reported intervals refer to.
        variant: ``"quad"`` (default), ``"kd"`` or ``"hybrid"``.
        height: number of split levels; default ``min(8, h_max)`` with
            ``h_max`` the depth at which every quadtree leaf is a single bin.
        count_allocation: ``"geometric"`` (default) or ``"uniform"``.
        median_share: fraction of ε spent on medians (exact); default 3/10 for
            ``kd``/``hybrid``, 0 for ``quad`` (which has no medians).
        switch_level: for ``hybrid``, the number of top levels split at
            private medians; default ``max(1, height // 2)``.
    """

    shape: tuple[int, ...]
    sensitivity: int = 1
    confidence: float = 0.95
    variant: str = DEFAULT_VARIANT
    height: int | None = None
    count_allocation: str = "geometric"
    median_share: Fraction | None = None
    switch_level: int | None = None
    name: str = field(default="psd", init=False)
    plan: TreePlan = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        shape = self.shape
        if isinstance(shape, int | np.integer) or not hasattr(shape, "__iter__"):
            raise MechanismError(f"shape must be a tuple of bin counts, got {shape!r}")
        shape = tuple(shape)
        if not shape or any(
            isinstance(s, bool) or not isinstance(s, int | np.integer) or s < 1 for s in shape
        ):
            raise MechanismError(
                f"shape must be a non-empty tuple of integers >= 1, got {self.shape!r}"
            )
        shape = tuple(int(s) for s in shape)
        object.__setattr__(self, "shape", shape)
        if (
            isinstance(self.sensitivity, bool)
            or not isinstance(self.sensitivity, int)
            or self.sensitivity < 1
        ):
            raise MechanismError(f"sensitivity must be an integer >= 1, got {self.sensitivity!r}")
        if (
            isinstance(self.confidence, bool)
            or not isinstance(self.confidence, int | float)
            or not 0.0 < self.confidence < 1.0
        ):
            raise MechanismError(f"confidence must lie in (0, 1), got {self.confidence!r}")
        if self.variant not in VARIANTS:
            raise MechanismError(
                f"variant must be one of {', '.join(VARIANTS)}, got {self.variant!r}"
            )
        if self.count_allocation not in ALLOCATIONS:
            raise MechanismError(
                f"count_allocation must be one of {', '.join(ALLOCATIONS)}, got {self.count_allocation!r}"
            )
        cap = max_height(shape, self.variant)
        height = self.height
        if height is None:
            height = min(DEFAULT_HEIGHT, max_height(shape, "quad"))
        elif isinstance(height, bool) or not isinstance(height, int | np.integer) or height < 0:
            raise MechanismError(f"height must be an integer >= 0, got {height!r}")
        elif height > cap:
            raise MechanismError(
                f"height {height} is too deep for shape {shape}: at depth {cap} every {self.variant} leaf "
                f"is already a single bin; use height <= {cap}"
            )
        height = int(height)
        object.__setattr__(self, "height", height)
        switch = self.switch_level
        if self.variant == "hybrid":
            if switch is None:
                switch = max(1, height // 2) if height else 0
            elif (
                isinstance(switch, bool)
                or not isinstance(switch, int | np.integer)
                or not 1 <= switch <= height
            ):
                raise MechanismError(
                    f"switch_level must be an integer in [1, height={height}], got {switch!r}"
                )
            median_levels = int(switch)
        else:
            if switch is not None:
                raise MechanismError(
                    f"switch_level only applies to variant 'hybrid', not {self.variant!r}"
                )
            median_levels = height if self.variant == "kd" else 0
        object.__setattr__(self, "switch_level", None if switch is None else int(switch))
        plan = make_plan(shape, height, median_levels)
        object.__setattr__(self, "plan", plan)
        share = self.median_share
        if share is None:
            share = DEFAULT_MEDIAN_SHARE if plan.median_steps else Fraction(0)
        else:
            try:
                share = to_fraction(share, name="median_share")
            except ValueError as exc:
                raise MechanismError(str(exc)) from exc
            if plan.median_steps == 0 and share != 0:
                raise MechanismError(
                    f"median_share must be 0 (or unset): variant {self.variant!r} with height {height} "
                    "has no median splits"
                )
            if plan.median_steps and not 0 < share < 1:
                raise MechanismError(f"median_share must lie strictly between 0 and 1, got {share}")
        object.__setattr__(self, "median_share", share)

    # -- construction from configuration -------------------------------------
    @classmethod
    def from_options(
        cls,
        shape: tuple[int, ...],
        *,
        sensitivity: int = 1,
        confidence: float = 0.95,
        options: Mapping[str, object] | None = None,
    ) -> PSDMechanism:
        """Build from the ``release.psd`` configuration mapping.

        Raises:
            MechanismError: an unknown key (the message lists the allowed
                ones) or an invalid value.
        """
        options = {} if options is None else options
        if not isinstance(options, Mapping):
            raise MechanismError(
                f"release.psd must be a mapping of options, got {type(options).__name__}"
            )
        unknown = sorted(str(k) for k in options if k not in PSD_OPTIONS)
        if unknown:
            raise MechanismError(
                f"unknown release.psd option(s) {unknown}; allowed keys: {', '.join(PSD_OPTIONS)}"
            )
        kwargs: dict[str, object] = {}
        for key in ("height", "switch_level"):
            if options.get(key) is not None:
                value = options[key]
                if isinstance(value, bool) or not isinstance(value, int):
                    raise MechanismError(f"release.psd.{key} must be an integer, got {value!r}")
                kwargs[key] = value
        for key in ("variant", "count_allocation"):
            if options.get(key) is not None:
                kwargs[key] = options[key]
        if options.get("median_share") is not None:
            kwargs["median_share"] = options["median_share"]
        return cls(tuple(shape), sensitivity, confidence, **kwargs)  # type: ignore[arg-type]

    # -- privacy map ---------------------------------------------------------
    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def budget(self, epsilon: Fraction) -> PSDBudget:
        """The exact split of ``epsilon`` over median sub-steps and count levels."""
        return allocate(
            self.plan, _check_epsilon(epsilon), Fraction(self.median_share), self.count_allocation
        )  # type: ignore[arg-type]

    def epsilon(self, budget: PSDBudget) -> Fraction:
        """Privacy map: the ε of a release with this budget (sequential composition)."""
        return budget.total

    # -- accuracy ------------------------------------------------------------
    def expected_abs_error(self, epsilon: Fraction, bins: int | None = None) -> float:
        """Public estimate of the expected absolute *noise* error of one bin.

        Computed for a balanced tree of this plan (every node split at the
        middle of every attribute it can split, no early leaves): the exact
        variance ``P`` of a leaf's least-squares estimate, turned into an
        expected absolute value with the normal approximation
        ``E|X| ≈ sqrt(2P/π)`` (for a sum dominated by one Laplace term the
        true value is up to 11 % lower, ``σ/√2``), divided by the leaf's
        number of bins. It does
        not include the error of spreading a leaf evenly over its bins, which
        depends on the data. ``bins`` is accepted for the protocol; the domain
        is this mechanism's own.
        """
        budget = self.budget(epsilon)
        delta = Fraction(self.sensitivity)
        var = [discrete_laplace_variance(delta / e) for e in budget.count]
        fan = _balanced_fanouts(self.shape, self.plan.height)
        # upward: s_h = var_h; s_l = 1 / (1/var_l + 1/(f_l s_{l+1}))
        s = [0.0] * (self.plan.height + 1)
        s[-1] = var[-1]
        for lvl in range(self.plan.height - 1, -1, -1):
            s[lvl] = 1.0 / (1.0 / var[lvl] + 1.0 / (fan[lvl] * s[lvl + 1]))
        post = s[0]
        for lvl in range(1, self.plan.height + 1):
            f = fan[lvl - 1]
            post = s[lvl] - (f * s[lvl] - post) / (f * f)
        leaves = math.prod(fan)
        volume = self.size / leaves
        return math.sqrt(2.0 * post / math.pi) / volume

    # -- release -------------------------------------------------------------
    def release(self, counts: np.ndarray, epsilon: Fraction, noise: NoiseDrawer) -> NoisyHistogram:
        """Release ``counts`` with ε-DP (exactly ``epsilon`` is spent).

        Returns a :class:`NoisyHistogram` whose ``counts`` are float64,
        non-negative, and sum per leaf to the leaf's released count.
        ``half_width[b]`` is a worst-case statement for bin ``b``: with
        probability at least ``confidence`` over the count noise (given the
        released splits), the true count of ``b`` lies in
        ``counts[b] ± half_width[b]``. It comes from the interval
        ``[lower, upper]`` of the true count of ``b``'s leaf (Chebyshev's
        inequality on the exact variance of the leaf's least-squares
        estimate, clipped at 0): the bin's count lies in ``[0, upper]``, or in
        ``[lower, upper]`` when the leaf is the bin alone. No assumption about
        how records spread inside a leaf is made, so wide leaves have wide
        intervals. ``details["tree"]`` is :meth:`PSDTree.describe`.
        """
        return self.release_tree(counts, epsilon, noise).histogram

    def release_tree(self, counts: np.ndarray, epsilon: Fraction, noise: NoiseDrawer) -> PSDRelease:
        """Like :meth:`release`, also returning the tree and the budget split."""
        eps = _check_epsilon(epsilon)
        true = np.asarray(counts)
        if true.ndim != 1 or true.dtype.kind not in "iu":
            raise MechanismError("PSD releases a 1-D integer count vector")
        if true.size != self.size:
            raise MechanismError(
                f"expected {self.size} counts for shape {self.shape}, got {true.size}"
            )
        if true.size and true.min() < 0:
            raise MechanismError("counts must be non-negative")
        budget = self.budget(eps)
        hist = true.astype(np.int64, copy=False).reshape(self.shape)
        levels = build_tree(hist, self.plan, budget, self.sensitivity, noise)
        parents = [lv.parent for lv in levels]
        beta, post = least_squares(
            parents, [lv.noisy for lv in levels], [lv.variance for lv in levels]
        )
        final = nonnegative(parents, beta)
        masks = [slice(None) if lv.leaf.all() else lv.leaf for lv in levels]
        lo = np.concatenate(
            [lv.lo[:, k] for lv, k in zip(levels, masks, strict=True)], axis=1
        ).T  # (leaves, d)
        hi = np.concatenate([lv.hi[:, k] for lv, k in zip(levels, masks, strict=True)], axis=1).T
        leaf_count = np.concatenate([f[k] for f, k in zip(final, masks, strict=True)])
        leaf_beta = np.concatenate([b[k] for b, k in zip(beta, masks, strict=True)])
        leaf_var = np.concatenate([p[k] for p, k in zip(post, masks, strict=True)])
        spread = np.sqrt(np.maximum(leaf_var, 0.0) / (1.0 - self.confidence))
        upper = np.maximum(leaf_beta + spread, 0.0)
        lower = np.maximum(leaf_beta - spread, 0.0)
        tree = PSDTree(self.shape, lo, hi, leaf_count, lower, upper, self.confidence)
        ids = tree.leaf_of_bin()
        out = tree.to_bins(ids)
        single = tree.volume == 1
        bin_lower = np.where(single, lower, 0.0)[ids]
        width = np.maximum(out - bin_lower, upper[ids] - out)
        out.setflags(write=False)
        width.setflags(write=False)
        details = {
            "tree": {
                "variant": self.variant,
                "height": self.plan.height,
                "switch_level": self.switch_level,
                "count_allocation": self.count_allocation,
                "median_share": str(self.median_share),
                "count_epsilon": [str(e) for e in budget.count],
                "median_epsilon": str(budget.median),
                **tree.describe(),
            }
        }
        histogram = NoisyHistogram(out, eps, width, self.confidence, details)
        return PSDRelease(histogram, tree, budget)


def _check_epsilon(epsilon: Fraction) -> Fraction:
    if isinstance(epsilon, bool) or not isinstance(epsilon, Fraction | int) or epsilon <= 0:
        raise MechanismError(f"epsilon must be a positive Fraction, got {epsilon!r}")
    return Fraction(epsilon)


def _balanced_fanouts(shape: tuple[int, ...], height: int) -> list[int]:
    """Fanout of each level of a tree split at midpoints (public; for accuracy estimates)."""
    widths = list(shape)
    fan = []
    for _ in range(height):
        f = 1
        for a, w in enumerate(widths):
            if w >= 2:
                f *= 2
                widths[a] = w - w // 2
        fan.append(f)
    return fan
