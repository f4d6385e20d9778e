"""The five PDP release mechanisms for histograms (thesis ch. 5), as one planned shape.

Every mechanism is a public *plan* over the budget levels: a list of parts,
each released with discrete Laplace noise of scale ``1/ε_part`` (LPA,
contribution bound 1) over the counts of the persons it holds, plus, for
Jorgensen et al.'s Sampling mechanism, an exact inclusion coin per person.
The plan is computed in the constructor from public information only
(:class:`~histogram.personalized.budgets.BudgetLevels`), and so is the
per-level ε each person is charged (:attr:`PersonalizedMechanism.personal_epsilon`,
exact Fractions for the caller's accountant). The constructor refuses any
plan that would charge a person more than their budget.

* :func:`minimum` — everyone, one release at the smallest declared ε.
* :func:`threshold` — persons with ε_i ≥ ε_t, one release at ε_t; the
  others are left out (charged 0).
* :func:`sampling` — Jorgensen et al.: keep a person with ε_i < t with
  probability ``(e^{ε_i} − 1)/(e^t − 1)`` (exact coin), one release at t.
* :func:`partitioned` — groups of levels (privacy-aware or utility-based
  partition), each released at its smallest ε.

Estimates of the whole population's histogram are post-processing with public
constants: ``Σ_parts w_p · H̃_p · N / E_p`` where ``E_p`` is the expected
number of registered persons in part ``p`` (after sampling), ``N`` the
registry size and ``w_p`` public weights summing to 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from histogram.errors import MechanismError
from histogram.lpa import LaplaceMechanism
from histogram.mechanism import NoisyHistogram
from histogram.noise import NoiseDrawer
from histogram.personalized.budgets import BudgetLevels
from histogram.personalized.partition import (
    BudgetPartition,
    CountUtility,
    _dlap_variance,
    privacy_aware_partition,
    utility_based_partition,
)
from histogram.personalized.sampling import inclusion_probability, sample_inclusion

__all__ = [
    "Part",
    "PersonalizedMechanism",
    "PersonalizedRelease",
    "minimum",
    "threshold",
    "sampling",
    "partitioned",
    "privacy_aware",
    "utility_based",
    "MECHANISMS",
]

MECHANISMS = ("minimum", "threshold", "sampling", "privacy-aware", "utility-based")


@dataclass(frozen=True)
class Part:
    """One release of a plan.

    Attributes:
        levels: indices of the budget levels whose persons this part counts.
        epsilon: the ε of its discrete Laplace release (noise scale ``1/ε``).
        sample_below: if set, persons of a level with ε_i < ``sample_below``
            are kept only with probability ``(e^{ε_i} − 1)/(e^{sample_below} − 1)``
            (Jorgensen et al.); ``sample_below`` equals ``epsilon``.
    """

    levels: tuple[int, ...]
    epsilon: Fraction
    sample_below: Fraction | None = None


@dataclass(frozen=True)
class PersonalizedRelease:
    """What one PDP release publishes.

    Attributes:
        parts: the DP releases, one per part of the plan (safe to publish).
        estimate: float64 estimate of the whole population's count per bin
            (post-processing of ``parts`` with public constants).
        personal_epsilon: per budget level, the ε charged to each person at
            that level (exact; never above the level's budget).
    """

    parts: tuple[NoisyHistogram, ...]
    estimate: np.ndarray
    personal_epsilon: tuple[Fraction, ...]


@dataclass(frozen=True)
class PersonalizedMechanism:
    """A PDP plan over public budget levels (see the module docstring).

    Attributes:
        name: one of :data:`MECHANISMS`.
        levels: the public budget levels and head counts.
        parts: the releases; every level is in at most one part.
        weights: public combination weights, one per part, summing to 1.
        confidence: the probability the parts' half-widths refer to.
    """

    name: str
    levels: BudgetLevels
    parts: tuple[Part, ...]
    weights: tuple[float, ...]
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not self.parts:
            raise MechanismError(f"{self.name}: a plan needs at least one part")
        if len(self.weights) != len(self.parts) or abs(sum(self.weights) - 1.0) > 1e-9:
            raise MechanismError(
                f"{self.name}: one weight per part, summing to 1, got {self.weights}"
            )
        seen: set[int] = set()
        for p in self.parts:
            if p.epsilon <= 0:
                raise MechanismError(f"{self.name}: part ε must be > 0, got {p.epsilon}")
            if p.sample_below is not None and p.sample_below != p.epsilon:
                raise MechanismError(f"{self.name}: a sampling part is released at its threshold")
            for i in p.levels:
                if i in seen or not 0 <= i < self.levels.size:
                    raise MechanismError(f"{self.name}: level {i} is in two parts or out of range")
                seen.add(i)
                own = self.levels.epsilons[i]
                if p.sample_below is None and p.epsilon > own:
                    raise MechanismError(
                        f"{self.name}: persons at budget {own} would be released at ε={p.epsilon} > their budget; "
                        "release their part at its smallest budget"
                    )

    # -- public maths ----------------------------------------------------------
    @property
    def personal_epsilon(self) -> tuple[Fraction, ...]:
        """Per level: what one person at that level is charged (exact, ≤ their budget).

        A level in a sampling part below its threshold is charged its own ε
        (``ln(1 + p·(e^t − 1)) = ε_i`` exactly); a level in another part the
        part's ε; a level in no part 0.
        """
        out = [Fraction(0)] * self.levels.size
        for p in self.parts:
            for i in p.levels:
                own = self.levels.epsilons[i]
                out[i] = own if p.sample_below is not None and own < p.sample_below else p.epsilon
        return tuple(out)

    def part_of_level(self) -> np.ndarray:
        """int64 part index per level (−1: not released)."""
        out = np.full(self.levels.size, -1, dtype=np.int64)
        for k, p in enumerate(self.parts):
            out[list(p.levels)] = k
        return out

    def expected_members(self) -> tuple[float, ...]:
        """Per part, the expected number of registered persons it counts (public head counts × inclusion)."""
        out = []
        for p in self.parts:
            e = 0.0
            for i in p.levels:
                q = (
                    1.0
                    if p.sample_below is None
                    else inclusion_probability(self.levels.epsilons[i], p.sample_below)
                )
                e += self.levels.counts[i] * q
            out.append(e)
        return tuple(out)

    def query_variance(self, frequency: float, query_bins: float = 1.0) -> float:
        """Predicted variance of the plan's estimate of a count query's *relative frequency*.

        Public maths for planning and evaluation (floats; never for a coin or a
        charge). A query covers ``query_bins`` bins of the released histogram
        (its noise is their sum: 1 when the query itself is released) and holds
        a share ``frequency`` of the registered persons. Averaged over the
        PDP assumption that budgets are assigned independently of the records
        (a random assignment of the public head counts to persons), with
        ``a_i = w_k / E_k`` the weight of person ``i``'s part and ``p_i`` their
        inclusion probability (1 outside sampling parts, 0 outside every part):

            Var = Σ_k w_k² · query_bins · V(ε_k) / E_k²          (noise)
                + f · Σ_i a_i² p_i (1 − p_i)                      (inclusion coins)
                + f (1 − f) · (Σ_i (a_i p_i)² − 1/N)              (who lands in which part)

        with ``V(ε) = 2e^{−ε}/(1 − e^{−ε})²`` the discrete Laplace variance
        and ``N`` the registry size. Exact in this model up to the finite-
        population factor N/(N − 1); ``docs/results.md`` (Personalized DP)
        compares it with measured errors.

        Raises:
            MechanismError: if ``frequency`` is outside [0, 1] or
                ``query_bins`` is not positive.
        """
        f = float(frequency)
        if not 0.0 <= f <= 1.0 or not query_bins > 0:
            raise MechanismError(
                f"query_variance needs 0 <= frequency <= 1 and query_bins > 0, got {frequency}, {query_bins}"
            )
        total = float(self.levels.total)
        expected = self.expected_members()
        noise = coins = spread = 0.0
        for k, p in enumerate(self.parts):
            if expected[k] <= 0:
                continue
            a = self.weights[k] / expected[k]
            eps = float(p.epsilon)
            noise += (
                self.weights[k] ** 2
                * query_bins
                * float(_dlap_variance(np.array(eps)))
                / expected[k] ** 2
            )
            for i in p.levels:
                q = (
                    1.0
                    if p.sample_below is None
                    else inclusion_probability(self.levels.epsilons[i], p.sample_below)
                )
                c = self.levels.counts[i]
                coins += c * a * a * q * (1.0 - q)
                spread += c * (a * q) ** 2
        return noise + f * coins + f * (1.0 - f) * (spread - 1.0 / total)

    # -- release ---------------------------------------------------------------
    def release(
        self, bins: np.ndarray, budgets: np.ndarray, size: int, noise: NoiseDrawer
    ) -> PersonalizedRelease:
        """Release the histogram of ``size`` bins of the persons present.

        Args:
            bins: int64 bin of each present person (one record per person).
            budgets: int64 budget level index of each present person (from
                the public declaration, never from their record).
            size: number of bins of the domain (public).
            noise: the drawer; coins first (sampling parts), then one noise
                vector per part in plan order.
        """
        bins = np.asarray(bins, dtype=np.int64).reshape(-1)
        budgets = np.asarray(budgets, dtype=np.int64).reshape(-1)
        if bins.shape != budgets.shape:
            raise MechanismError("bins and budgets need one entry per present person")
        if bins.size and (bins.min() < 0 or bins.max() >= size):
            raise MechanismError(f"bins must lie in [0, {size})")
        if budgets.size and (budgets.min() < 0 or budgets.max() >= self.levels.size):
            raise MechanismError(f"budget level indices must lie in [0, {self.levels.size})")
        part = self.part_of_level()[budgets]
        lpa = LaplaceMechanism(sensitivity=1, confidence=self.confidence)
        expected = self.expected_members()
        total = float(self.levels.total)
        releases = []
        estimate = np.zeros(size, dtype=np.float64)
        for k, p in enumerate(self.parts):
            members = np.flatnonzero(part == k)
            if p.sample_below is not None:
                members = members[
                    sample_inclusion(budgets[members], self.levels.epsilons, p.sample_below, noise)
                ]
            counts = np.bincount(bins[members], minlength=size).astype(np.int64)
            out = lpa.release(counts, p.epsilon, noise)
            releases.append(out)
            if expected[k] > 0:
                estimate += self.weights[k] * out.counts * (total / expected[k])
        estimate.setflags(write=False)
        return PersonalizedRelease(tuple(releases), estimate, self.personal_epsilon)


# -- the five constructors (public inputs only) -----------------------------------


def minimum(levels: BudgetLevels) -> PersonalizedMechanism:
    """Everyone, released once at the smallest declared budget."""
    return PersonalizedMechanism(
        "minimum", levels, (Part(tuple(range(levels.size)), levels.minimum),), (1.0,)
    )


def threshold(levels: BudgetLevels, epsilon_t: object) -> PersonalizedMechanism:
    """Persons with budget ≥ ``epsilon_t``, released once at ``epsilon_t``; the rest are left out."""
    t = Fraction(epsilon_t) if isinstance(epsilon_t, Fraction | int) else Fraction(str(epsilon_t))
    keep = tuple(i for i, e in enumerate(levels.epsilons) if e >= t)
    if not keep:
        raise MechanismError(
            f"threshold {t} is above every declared budget; nobody would be released"
        )
    return PersonalizedMechanism("threshold", levels, (Part(keep, t),), (1.0,))


def sampling(levels: BudgetLevels, epsilon_t: object) -> PersonalizedMechanism:
    """Jorgensen et al.'s Sampling mechanism with threshold ``epsilon_t``."""
    t = Fraction(epsilon_t) if isinstance(epsilon_t, Fraction | int) else Fraction(str(epsilon_t))
    if t <= 0:
        raise MechanismError(f"sampling threshold must be > 0, got {t}")
    return PersonalizedMechanism(
        "sampling", levels, (Part(tuple(range(levels.size)), t, sample_below=t),), (1.0,)
    )


def partitioned(
    name: str, partition: BudgetPartition, utility: CountUtility | None = None
) -> PersonalizedMechanism:
    """One release per group of ``partition`` at the group's smallest ε.

    Weights: proportional to ``utility`` of each group (inverse-variance
    combination, thesis §5.2.4), or, without a utility, proportional to the
    group's head count (the plain sum of the groups' noisy counts: unbiased
    whatever the link between budgets and data).
    """
    parts = tuple(Part(g, e) for g, e in zip(partition.groups, partition.epsilons, strict=True))
    counts = np.array(partition.counts, dtype=np.float64)
    if utility is None:
        w = counts
    else:
        w = utility(counts, np.array([float(e) for e in partition.epsilons]))
    if not w.sum() > 0:
        raise MechanismError(
            f"{name}: every group of the partition is empty; declare head counts per level"
        )
    weights = tuple(float(x) for x in w / w.sum())
    return PersonalizedMechanism(name, partition.levels, parts, weights)


def privacy_aware(
    levels: BudgetLevels, min_size: int, utility: CountUtility | None = None
) -> PersonalizedMechanism:
    """Privacy-aware partitioning (thesis Alg. 10, k by eq. 5.2.3), groups combined by ``utility``."""
    return partitioned("privacy-aware", privacy_aware_partition(levels, min_size), utility)


def utility_based(
    levels: BudgetLevels, utility: CountUtility, min_size: int = 1
) -> PersonalizedMechanism:
    """Utility-based partitioning (thesis Alg. 11, eq. 5.2.6), groups combined by the same utility."""
    return partitioned("utility-based", utility_based_partition(levels, utility, min_size), utility)
