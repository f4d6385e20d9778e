"""Model releases through the engine: DPCopula and DP k-way marginals behind the ``Mechanism`` interface.

A *model release* publishes a statistical model of the timestep (released
marginal tables, a copula correlation matrix, optionally a synthetic sample)
instead of a count per bin of the full domain. The engine's decision stage
then compares the current data with the last release in the space the model
releases, not over the full histogram (``docs/privacy.md`` §11.4):

:class:`MarginalView` is that space: the public linear map from the timestep's
histogram (row-major over the public domain) to the concatenation of the
released marginal tables (one-way tables for DPCopula; every table of order
1..R for k-way marginals), in a fixed, documented order. One person with at
most ``c`` records moves one cell of each table by at most ``c`` per record,
so its L1 sensitivity is ``c × (number of tables)``: that is the ``Δ`` the
decision policies are calibrated with (:attr:`MarginalView.sensitivity`).

:class:`CopulaModelMechanism` and :class:`KWayModelMechanism` implement
:class:`~histogram.mechanism.Mechanism`; their ``counts`` are the released
tables in the view's order (what the decision compares with and what a
republished timestep repeats), and ``details["model"]`` holds the rest of the
model (JSON-ready: correlation matrix, DP total, synthetic sample). Privacy is
the wrapped mechanism's (§11.1, §11.2): everything published is a function of
its noisy output. Each draws from the engine's drawer only after the engine
charged the ε (§11.1.1).

Both read a timestep as a :class:`~histogram.records.RecordTable` (its bounded
records: the service's path, whatever the domain's size; the view's tables are
counted from the records, :meth:`MarginalView.of_records`) or as the full count
vector read back as the records it stands for (counts files, small domains);
the two give the same rows in the same order, so the same release.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from typing import Any

import numpy as np

from histogram.copula.histogram_release import records_of_counts
from histogram.copula.mechanism import DPCopula
from histogram.errors import MechanismError
from histogram.marginals.kway import KWayMarginals
from histogram.mechanism import NoisyHistogram
from histogram.noise import NoiseDrawer, discrete_laplace_half_width, discrete_laplace_mean_abs
from histogram.records import RecordTable

__all__ = ["MarginalView", "CopulaModelMechanism", "KWayModelMechanism", "COPULA_DECISION_SPACES", "MAX_SYNTHETIC"]

#: the largest synthetic sample a model release carries (records; each is one int per attribute)
MAX_SYNTHETIC = 10_000
DECIMALS = 6

Subset = tuple[int, ...]


@dataclass(frozen=True)
class MarginalView:
    """The public map histogram → concatenated marginal tables (the decision space of a model release).

    Attributes:
        levels: levels per attribute (the domain's shape, row-major).
        subsets: the attribute sets whose tables are released, in publication order; each
            table is flattened row-major over its attributes in increasing index order.
        contribution: c, records per person per timestep.
    """

    levels: tuple[int, ...]
    subsets: tuple[Subset, ...]
    contribution: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "levels", tuple(int(v) for v in self.levels))
        subs = tuple(tuple(int(a) for a in s) for s in self.subsets)
        m = len(self.levels)
        if not subs or any(not s or list(s) != sorted(set(s)) or s[0] < 0 or s[-1] >= m for s in subs):
            raise MechanismError(f"subsets must be non-empty increasing attribute index tuples in 0..{m - 1}")
        if len(set(subs)) != len(subs):
            raise MechanismError("subsets must be distinct")
        object.__setattr__(self, "subsets", subs)
        if isinstance(self.contribution, bool) or not isinstance(self.contribution, int) or self.contribution < 1:
            raise MechanismError(f"contribution must be an integer >= 1, got {self.contribution!r}")

    @classmethod
    def one_way(cls, levels: tuple[int, ...], contribution: int = 1) -> MarginalView:
        return cls(tuple(levels), tuple((j,) for j in range(len(levels))), contribution)

    @classmethod
    def up_to(cls, levels: tuple[int, ...], order: int, contribution: int = 1) -> MarginalView:
        """Every attribute set of size 1..order (by size, then lexicographic: ``KWayMarginals.subsets``)."""
        m = len(levels)
        return cls(tuple(levels), tuple(s for k in range(1, order + 1) for s in combinations(range(m), k)),
                   contribution)

    def shape(self, subset: Subset) -> tuple[int, ...]:
        return tuple(self.levels[a] for a in subset)

    @property
    def size(self) -> int:
        """Length of the released vector (sum of the tables' cells)."""
        return sum(int(np.prod(self.shape(s))) for s in self.subsets)

    @property
    def tables(self) -> int:
        return len(self.subsets)

    @property
    def sensitivity(self) -> int:
        """L1 sensitivity of :meth:`__call__` for one person (c records): ``c × tables``."""
        return self.contribution * self.tables

    def __call__(self, counts: np.ndarray) -> np.ndarray:
        """The true tables of a histogram, concatenated (int64). Raw-data derived: charge before using."""
        h = np.asarray(counts, dtype=np.int64).reshape(self.levels)
        m = len(self.levels)
        parts = [h.sum(axis=tuple(a for a in range(m) if a not in s)).ravel() for s in self.subsets]
        return np.concatenate(parts).astype(np.int64, copy=False)

    def of_records(self, records: RecordTable) -> np.ndarray:
        """The true tables of a record table, concatenated (int64): ``self(counts)`` of the count vector
        the records make, without building it. Raw-data derived: charge before using."""
        if records.levels != self.levels:
            raise MechanismError(f"records over levels {records.levels} for a view over {self.levels}")
        for s in sorted(self.subsets, key=len, reverse=True):  # wider first: narrower ones are sums of them
            records.table(s)
        return np.concatenate([records.table(s) for s in self.subsets]).astype(np.int64, copy=False)

    def observe(self, data: np.ndarray | RecordTable) -> np.ndarray:
        """The view of a timestep given as a count vector or as a :class:`RecordTable`."""
        return self.of_records(data) if isinstance(data, RecordTable) else self(data)

    def split(self, vector: np.ndarray) -> list[np.ndarray]:
        """A released vector back into its tables (each shaped over its attributes)."""
        v = np.asarray(vector)
        if v.shape != (self.size,):
            raise MechanismError(f"a released vector of this view has {self.size} values, got shape {v.shape}")
        out, at = [], 0
        for s in self.subsets:
            shape = self.shape(s)
            n = int(np.prod(shape))
            out.append(v[at:at + n].reshape(shape))
            at += n
        return out


def _records(data: np.ndarray | RecordTable, levels: tuple[int, ...]) -> np.ndarray | RecordTable:
    """The ``(n, m)`` records of a timestep given as a :class:`RecordTable` (huge domains: the
    vector is never built) or as the row-major count vector (same rows, same order)."""
    if isinstance(data, RecordTable):
        if data.levels != tuple(levels):
            raise MechanismError(f"records over levels {data.levels} for a mechanism over {tuple(levels)}")
        return data  # the mechanisms count its tables once, shared with the view (RecordTable.table)
    true = np.asarray(data)
    bins = int(np.prod(levels))
    if true.shape != (bins,) or true.dtype.kind not in "iu" or (true.size and true.min() < 0):
        raise MechanismError(f"a model release reads a non-negative integer count vector of {bins} bins")
    return records_of_counts(true, levels)


def _synthetic_size(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SYNTHETIC:
        raise MechanismError(f"synthetic_size must be an integer in 0..{MAX_SYNTHETIC}, got {value!r}")
    return value


#: the decision spaces of a copula release (``release.copula.decision_space``, ``docs/privacy.md`` §11.4)
COPULA_DECISION_SPACES = ("pairwise", "one-way")


@dataclass(frozen=True)
class CopulaModelMechanism:
    """DPCopula published as a model: one-way noisy marginal counts, correlation matrix, optional sample.

    Attributes:
        copula: the DPCopula configuration (levels, correlation estimator, ratio, n₀, c).
        synthetic_size: records sampled from the released copula into the message (0 = none).
        confidence: the probability the marginal counts' half-width refers to.
        decision_space: what the decision stage compares. ``pairwise`` (default): every one-way
            table and every two-way table, so a change of dependence alone (marginals fixed, a
            correlation flipped) moves the distance; ``one-way``: the one-way tables only.

    ``counts`` of a release are the noisy integer one-way counts (the view's order: attribute 0's
    levels first), their half-width the discrete Laplace interval of scale ``c·m/ε₁``; with
    ``pairwise`` they are followed by the released model's two-way tables (``total`` × the
    copula's cell probabilities: computed from the release, post-processing, no interval claimed).
    ``sensitivity`` is the decision space's Δ = c × tables (c·m one-way, c·(m + m(m−1)/2)
    pairwise); the release itself is ε-DP for one person with up to c records (§11.1).
    """

    copula: DPCopula
    synthetic_size: int = 0
    confidence: float = 0.95
    decision_space: str = "pairwise"
    name: str = "copula"

    def __post_init__(self) -> None:
        _synthetic_size(self.synthetic_size)
        if not 0 < self.confidence < 1:
            raise MechanismError(f"confidence must lie strictly between 0 and 1, got {self.confidence}")
        if self.decision_space not in COPULA_DECISION_SPACES:
            raise MechanismError(f"decision_space must be one of {', '.join(COPULA_DECISION_SPACES)}, "
                                 f"got {self.decision_space!r}")

    @property
    def view(self) -> MarginalView:
        levels, c = self.copula.levels, self.copula.sensitivity
        if self.decision_space == "one-way" or len(levels) < 2:
            return MarginalView.one_way(levels, c)
        return MarginalView.up_to(levels, 2, c)

    @property
    def sensitivity(self) -> int:
        return self.view.sensitivity

    @property
    def bins(self) -> int:
        return int(np.prod(self.copula.levels))

    def release(self, counts: np.ndarray | RecordTable, epsilon: Fraction, noise: NoiseDrawer) -> NoisyHistogram:
        """The model release of a timestep (count vector or :class:`RecordTable`) at ``epsilon``
        (charged by the caller before this call)."""
        rel = self.copula.release(_records(counts, self.copula.levels), Fraction(epsilon), noise)
        vector = np.concatenate([np.asarray(v, dtype=np.int64) for v in rel.marginal_counts])
        width = np.broadcast_to(np.float64(discrete_laplace_half_width(
            self.copula.marginal_scale(Fraction(epsilon)), self.confidence)), vector.shape)
        pairs = [s for s in self.view.subsets if len(s) == 2]
        if pairs:  # the model's two-way tables: functions of the release (post-processing)
            implied = [np.round(rel.model.marginal(s).ravel(), DECIMALS) + 0.0 for s in pairs]
            vector = np.concatenate([vector.astype(np.float64), *implied])
            width = np.concatenate([width, np.full(vector.size - width.size, np.inf)])
        vector.setflags(write=False)
        synthetic = rel.model.sample(self.synthetic_size, noise).tolist() if self.synthetic_size else None
        model = {
            "kind": "gaussian-copula",
            "correlation_estimator": rel.variant,
            "correlation": (np.round(rel.model.correlation, DECIMALS) + 0.0).tolist(),
            "total": round(float(rel.model.total), DECIMALS),
            "synthetic": synthetic,
        }
        return NoisyHistogram(vector, rel.epsilon, width, self.confidence, {"model": model})

    def expected_abs_error(self, epsilon: Fraction, bins: int = 1) -> float:
        """Mean |noise| of one released marginal count (public)."""
        return discrete_laplace_mean_abs(self.copula.marginal_scale(Fraction(epsilon)))


@dataclass(frozen=True)
class KWayModelMechanism:
    """DP k-way marginals published as a model: every table of order 1..R, optional sample.

    Attributes:
        kway: the k-way marginals configuration (levels, R, shares, c).
        consistent: make overlapping tables agree (PriView; post-processing). The counts are
            then floats (6 decimals) and claim no interval (half-width null); without it they
            are the noisy integers with their discrete Laplace intervals.
        synthetic_size: records synthesised from the tables into the message (0 = none; R ≥ 2).
        confidence: the probability the half-widths refer to.
    """

    kway: KWayMarginals
    consistent: bool = True
    synthetic_size: int = 0
    confidence: float = 0.95
    name: str = "marginals"

    def __post_init__(self) -> None:
        _synthetic_size(self.synthetic_size)
        if self.synthetic_size and self.kway.max_order < 2 and len(self.kway.levels) > 1:
            raise MechanismError("a synthetic sample from k-way marginals needs k >= 2")
        if not 0 < self.confidence < 1:
            raise MechanismError(f"confidence must lie strictly between 0 and 1, got {self.confidence}")

    @property
    def view(self) -> MarginalView:
        return MarginalView.up_to(self.kway.levels, self.kway.max_order, self.kway.sensitivity)

    @property
    def sensitivity(self) -> int:
        return self.view.sensitivity

    @property
    def bins(self) -> int:
        return int(np.prod(self.kway.levels))

    def _orders(self) -> np.ndarray:
        view = self.view
        return np.concatenate([np.full(int(np.prod(view.shape(s))), len(s)) for s in view.subsets])

    def release(self, counts: np.ndarray | RecordTable, epsilon: Fraction, noise: NoiseDrawer) -> NoisyHistogram:
        """The model release of a timestep (count vector or :class:`RecordTable`) at ``epsilon``
        (charged by the caller before this call)."""
        rel = self.kway.release(_records(counts, self.kway.levels), Fraction(epsilon), noise,
                                consistent=self.consistent)
        subsets = self.view.subsets
        if self.consistent:
            vector = np.round(np.concatenate([rel.tables[s].ravel() for s in subsets]), DECIMALS) + 0.0
            width = np.broadcast_to(np.float64(np.inf), vector.shape)
            confidence = 0.0
        else:
            vector = np.concatenate([rel.noisy[s].ravel() for s in subsets]).astype(np.int64)
            per_order = {k: float(discrete_laplace_half_width(self.kway.scale(k, Fraction(epsilon)), self.confidence))
                         for k in range(1, self.kway.max_order + 1)}
            width = np.array([per_order[int(k)] for k in self._orders()], dtype=np.float64)
            confidence = self.confidence
        vector.setflags(write=False)
        synthetic = rel.synthesize(self.synthetic_size, noise).tolist() if self.synthetic_size else None
        model: dict[str, Any] = {
            "kind": "kway-marginals",
            "max_order": self.kway.max_order,
            "consistent": self.consistent,
            "correlation": None,
            "total": round(rel.total, DECIMALS),
            "synthetic": synthetic,
        }
        return NoisyHistogram(vector, rel.epsilon, width, confidence, {"model": model})

    def expected_abs_error(self, epsilon: Fraction, bins: int = 1) -> float:
        """Mean |noise| of one released cell, averaged over the released cells (public)."""
        orders = self._orders()
        per = {k: discrete_laplace_mean_abs(self.kway.scale(k, Fraction(epsilon)))
               for k in range(1, self.kway.max_order + 1)}
        return float(np.mean([per[int(k)] for k in orders]))
