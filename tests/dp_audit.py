"""Helpers of the statistical privacy tests (reliability catalogue N1, A1–A5).

* Noise sources for the twins: :class:`GeneratorSource` draws discrete
  Laplace noise with the production exact sampler
  (:meth:`histogram.noise.GeneratorDrawer.discrete_laplace`) over any numpy
  bit generator, vectorised;
  :class:`TapeSource` replays noise recorded from the production code by
  :class:`histogram.testing.RecordingDrawer`, checking kind, scale and size.
* :class:`SVTTwin`: the decision stage of ``DistanceSamplingPolicy`` (one SVT
  instance: threshold noise drawn once, query noise per query, fresh iff
  ``d + ν − ρ >= T``, no answers after ``c`` positives), vectorised over runs,
  with switches for the deliberately broken variants. With ``c = 1`` it is
  the AboveThreshold instance of ``WEventSamplingPolicy``.
* :class:`UserLevelTwin` / :class:`WEventTwin`: sequential copies of the
  whole release engine (policy + ledger + LPA) built on :class:`SVTTwin`,
  replayed from a production noise tape in the A5 equivalence test.
* The catalogues: adversarial neighbouring pairs (:func:`svt_pairs`) and
  broken variants (:func:`svt_variants`).
* :func:`audit`: choose an event on one sample, test it on a fresh sample with
  two-sided Clopper–Pearson intervals; returns a lower bound on the privacy
  loss ``ln(P[M(D) ∈ E] / P[M(D') ∈ E])`` (or the reverse ratio) per pair.
  Events are ``feature == v``, ``>= v`` or ``<= v`` over the whole answer
  vector and its summaries (number of positives, of negatives, index of the
  first positive).

Why an audit assertion "lower bound <= ε" flakes with probability < 1e-6:
the event is a function of the selection sample only, so on the independent
test sample it is a fixed event E. The bound exceeds the true
``ln(p / p')`` (which is <= ε for an ε-DP mechanism) only if the lower
Clopper–Pearson limit of ``p`` lies above ``p`` or the upper limit of ``p'``
lies below ``p'``; each has probability at most α/2 (Clopper–Pearson is
conservative), so the union is at most α = 1e-6. The tests also use fixed
seeds, so each run is deterministic; the argument says the seeds were not
chosen to make the correct mechanisms pass.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np
from scipy.special import betaincinv

from controller.pid import PIDController, PIDState
from controller.svt import SVTCalibration
from histogram.noise import GeneratorDrawer
from histogram.testing import Draw, TapeMismatch

ALPHA = 1e-6
RUNS = 200_000  # per side, for the bound
SELECT_RUNS = 100_000  # per side, to choose the event

# ---------------------------------------------------------------------------
# Noise sources


class GeneratorSource:
    """Discrete Laplace for the twins, drawn the way ``GeneratorDrawer`` draws it."""

    def __init__(self, seed: int | np.random.SeedSequence | np.random.BitGenerator) -> None:
        bits = seed if isinstance(seed, np.random.BitGenerator) else np.random.PCG64(seed)
        # the production sampler over this bit generator (PCG64 is faster than AES-CTR and
        # the twins need no secrecy); an AES-CTR bit generator reproduces production exactly
        self._drawer = GeneratorDrawer.__new__(GeneratorDrawer)
        self._drawer._gen = np.random.Generator(bits)
        self._drawer.draws = 0

    def dlap(self, scale: Fraction, n: int) -> np.ndarray:
        """``n`` draws of ``P(z) ∝ exp(-|z|/scale)``; scale 0 means no noise (broken variants)."""
        if scale == 0:
            return np.zeros(n, dtype=np.int64)
        return np.asarray(self._drawer.discrete_laplace(Fraction(scale), n), dtype=np.int64)


class TapeSource:
    """Replays a production noise tape into a twin (one run), checking every call."""

    def __init__(self, tape: Iterable[Draw]) -> None:
        self._tape = list(tape)
        self._pos = 0

    def dlap(self, scale: Fraction, n: int) -> np.ndarray:
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        if self._pos >= len(self._tape):
            raise TapeMismatch(f"the twin asks for discrete_laplace(scale={scale}, n={n}) after the tape ended")
        entry = self._tape[self._pos]
        if entry.kind != "discrete_laplace":
            raise TapeMismatch(f"draw {self._pos}: twin wants discrete Laplace, production drew {entry.kind}")
        if Fraction(entry.scale) != Fraction(scale):  # type: ignore[arg-type]
            raise TapeMismatch(f"draw {self._pos}: twin scale {scale} != production scale {entry.scale}")
        if entry.count != n or (entry.size is None and n != 1):
            raise TapeMismatch(f"draw {self._pos}: twin wants {n} values, production drew size={entry.size}")
        self._pos += 1
        return entry.values.astype(np.int64)

    def assert_exhausted(self) -> None:
        if self._pos != len(self._tape):
            raise TapeMismatch(f"the twin used {self._pos} of {len(self._tape)} recorded draws")


# ---------------------------------------------------------------------------
# SVT twin (decision stage)


@dataclass(frozen=True)
class SVTParams:
    """One SVT instance's noise and stopping rule.

    ``threshold_scale``/``query_scale`` of 0 mean "no such noise" and
    ``cutoff=None`` "never stops" (broken variants only). ``redraw_threshold``
    draws a fresh ρ for every query (broken unless every query is charged);
    ``restart_after_positive`` starts a new instance (fresh ρ, no positives)
    after every positive, as w-event DSAT does (sound only if every instance
    is charged).
    """

    threshold_scale: Fraction
    query_scale: Fraction
    cutoff: int | None
    redraw_threshold: bool = False
    restart_after_positive: bool = False

    @classmethod
    def from_calibration(cls, cal: SVTCalibration) -> SVTParams:
        return cls(cal.threshold_scale, cal.query_scale, cal.cutoff)


class SVTTwin:
    """``runs`` independent SVT instances, as ``DistanceSamplingPolicy`` runs one.

    Per query: rows that have not yet given ``cutoff`` positives are asked;
    an asked row without threshold noise (first query, or after
    :meth:`restart`) takes a new ρ, then every asked row takes ν; the answer
    is ``d + ν − ρ >= T`` (1 above, 0 below, −1 not asked).
    """

    def __init__(self, params: SVTParams, runs: int, dtype: type = np.int64) -> None:
        self.params = params
        self.rho = np.zeros(runs, dtype=dtype)
        self.has_rho = np.zeros(runs, dtype=bool)
        self.positives = np.zeros(runs, dtype=np.int32)

    @property
    def exhausted(self) -> np.ndarray:
        if self.params.cutoff is None:
            return np.zeros(self.positives.shape, dtype=bool)
        return self.positives >= self.params.cutoff

    def restart(self, rows: np.ndarray | None = None) -> None:
        """Start a new instance (fresh ρ at its first query, no positives yet)."""
        if rows is None:
            self.has_rho[:] = False
            self.positives[:] = 0
        else:
            self.has_rho &= ~rows
            self.positives *= ~rows

    def _masks(self) -> tuple[np.ndarray, np.ndarray]:
        asked = ~self.exhausted
        need = asked & ~self.has_rho if not self.params.redraw_threshold else asked
        return asked, need

    def _take_rho(self, need: np.ndarray, values: np.ndarray) -> None:
        """Rows in ``need`` take a new ρ: ``values`` holds one per such row, or one per row."""
        if values.size == self.rho.size:
            np.copyto(self.rho, values, where=need)
        else:
            self.rho[need] = values
        self.has_rho |= need

    def _answer(self, asked: np.ndarray, nu: np.ndarray, distance: int, threshold: Fraction | int) -> np.ndarray:
        """Above/below for the asked rows (a bool array; not-asked rows are False)."""
        # integers compared with a rational threshold: x >= T  <=>  x >= ceil(T)
        # (rearranged as ν − ρ >= ceil(T) − d, the same integer comparison)
        above = nu - self.rho >= math.ceil(Fraction(threshold)) - int(distance)
        above &= asked
        self.positives += above
        if self.params.restart_after_positive:
            self.restart(above)
        return above

    def query(
        self, source: GeneratorSource | TapeSource, distance: int, threshold: Fraction | int
    ) -> np.ndarray:
        """One query, drawing ρ (where needed) and then ν for the asked rows only, like production.

        Returns 1 (above), 0 (below) or −1 (not asked: the instance stopped) per row.
        """
        p = self.params
        asked, need = self._masks()
        if need.any():
            self._take_rho(need, source.dlap(p.threshold_scale, int(need.sum())))
        nu = np.zeros(self.rho.shape, dtype=np.int64)
        nu[asked] = source.dlap(p.query_scale, int(asked.sum()))
        above = self._answer(asked, nu, distance, threshold)
        return np.where(asked, above.astype(np.int8), np.int8(-1))

    def query_with(
        self, rho_all: np.ndarray | None, nu_all: np.ndarray, distance: int, threshold: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """One query with noise drawn for every row beforehand (common noise for an audit).

        Rows that are not asked, or already hold ρ, ignore their entries, so
        the answers have the same distribution as :meth:`query`'s. Returns
        ``(asked, above)``.
        """
        asked, need = self._masks()
        if need.any():
            assert rho_all is not None
            self._take_rho(need, rho_all)
        return asked, self._answer(asked, nu_all, distance, threshold)


def draw_svt_noise(
    params: SVTParams, queries: int, runs: int, source: GeneratorSource
) -> tuple[list[np.ndarray | None], list[np.ndarray]]:
    """ρ candidates and ν for every row and query (ρ only where an instance may need a new one).

    Stored as int32 for speed (the values are small; checked).
    """

    def draw(scale: Fraction) -> np.ndarray:
        z = source.dlap(scale, runs)
        assert np.abs(z).max(initial=0) < 2**20
        return z.astype(np.int32)

    rhos: list[np.ndarray | None] = []
    nus: list[np.ndarray] = []
    for i in range(queries):
        fresh_rho = i == 0 or params.redraw_threshold or params.restart_after_positive
        rhos.append(draw(params.threshold_scale) if fresh_rho else None)
        nus.append(draw(params.query_scale))
    return rhos, nus


def run_svt_codes(
    params: SVTParams, distances: tuple[int, ...], threshold: int, noise: tuple[list, list]
) -> np.ndarray:
    """The answer vectors of all rows, each as one base-3 code (digit i = answer i + 1)."""
    rhos, nus = noise
    twin = SVTTwin(params, nus[0].size, dtype=nus[0].dtype)
    code = np.zeros(nus[0].size, dtype=np.int32)
    for i, d in enumerate(distances):
        asked, above = twin.query_with(rhos[i], nus[i], d, threshold)
        # digit: 0 = not asked, 1 = below, 2 = above
        code += (asked.view(np.uint8) + above.view(np.uint8)) * np.int32(3**i)
    return code


@functools.cache
def svt_code_table(queries: int) -> dict[str, np.ndarray]:
    """Feature lookup tables indexed by answer code."""
    digits = (np.arange(3**queries)[:, None] // 3 ** np.arange(queries)) % 3
    pos = digits == 2
    return {
        "positives": pos.sum(axis=1),
        "negatives": (digits == 1).sum(axis=1),
        "first_positive": np.where(pos.any(axis=1), pos.argmax(axis=1), queries),
    }


SVT_ORDERED = ("positives", "negatives", "first_positive")


# ---------------------------------------------------------------------------
# Adversarial neighbouring pairs and broken variants

#: Public threshold (counts) of the component audits: only d − T matters.
THRESHOLD = 40


@dataclass(frozen=True)
class Pair:
    """Two distance sequences of user-level neighbours (each query moves by at most Δ)."""

    name: str
    first: tuple[int, ...]
    second: tuple[int, ...]
    description: str

    def check(self, delta: int) -> None:
        assert len(self.first) == len(self.second)
        assert max(abs(a - b) for a, b in zip(self.first, self.second, strict=True)) <= delta


def svt_pairs(delta: int = 1, threshold: int = THRESHOLD) -> tuple[Pair, ...]:
    t, m = threshold, 10
    pairs = (
        Pair("at-threshold-minus", (t,) * m, (t - delta,) * m,
             "10 queries at the threshold; the neighbour lowers every distance by Δ"),
        Pair("at-threshold-plus", (t,) * m, (t + delta,) * m,
             "10 queries at the threshold; the neighbour raises every distance by Δ"),
        Pair("swap-blocks", (t - delta,) * 4 + (t,) * 6, (t,) * 4 + (t - delta,) * 6,
             "non-monotone: 4 distances go up by Δ, then 6 go down by Δ"),
        Pair("swap-alternating", (t, t + delta) * (m // 2), (t + delta, t) * (m // 2),
             "non-monotone: alternate distances go up / down by Δ"),
        Pair("shifted-ramp", tuple(t - m // 2 + i for i in range(m)),
             tuple(t - m // 2 + i + delta for i in range(m)),
             "a ramp crossing the threshold, shifted by Δ"),
    )
    for p in pairs:
        p.check(delta)
    return pairs


@dataclass(frozen=True)
class Variant:
    """A mechanism to audit: its noise, the ε it claims, and whether it is broken."""

    name: str
    params: SVTParams
    claimed: Fraction
    broken: bool
    description: str


def svt_variants(cal: SVTCalibration) -> dict[str, Variant]:
    """The correct instance of ``cal`` and the catalogue of broken ones (claiming ``cal.epsilon``)."""
    eps, c, delta = cal.epsilon, cal.cutoff, cal.sensitivity
    ok = SVTParams.from_calibration(cal)
    out = {
        "correct": Variant("correct", ok, eps, False, "Lyu Alg. 1 as calibrated by controller.svt"),
        "no-query-noise": Variant(
            "no-query-noise", replace(ok, query_scale=Fraction(0)), eps, True, "ν = 0 (Lyu Alg. 5 analogue)"
        ),
        "no-threshold-noise": Variant(
            "no-threshold-noise", replace(ok, threshold_scale=Fraction(0)), eps, True, "ρ = 0"
        ),
        "no-cutoff": Variant(
            "no-cutoff", replace(ok, cutoff=None), eps, True, "keeps answering after c positives"
        ),
        "threshold-redrawn": Variant(
            "threshold-redrawn", replace(ok, redraw_threshold=True), eps, True,
            "fresh ρ at every query, charged once",
        ),
        "thesis-calibration": Variant(
            "thesis-calibration",
            SVTParams.from_calibration(
                SVTCalibration(eps, c, delta, Fraction(1, 2), query_factor=Fraction(1))
            ),
            eps, True, "thesis Alg. 7: ρ ~ Lap(2Δ/ε₁), ν ~ Lap(2cΔ/ε₁), claimed ε₁ (true 1.5·ε₁)",
        ),
        "monotone-factor": Variant(
            "monotone-factor",
            SVTParams.from_calibration(replace(cal, query_factor=Fraction(1))),
            eps, True, "ν ~ Lap(cΔ/ε_q): the monotone-query scale on non-monotone distances",
        ),
    }
    if c > 1:
        out["query-noise-not-scaled-by-c"] = Variant(
            "query-noise-not-scaled-by-c",
            SVTParams.from_calibration(replace(cal, query_factor=Fraction(2, c))),
            eps, True, "ν ~ Lap(2Δ/ε_q) instead of Lap(2cΔ/ε_q)",
        )
    return out


def w_event_variants(cal: SVTCalibration) -> dict[str, Variant]:
    """Variants of one AboveThreshold instance (c = 1) of w-event DSAT, claiming ``cal.epsilon``."""
    assert cal.cutoff == 1
    out = {k: v for k, v in svt_variants(cal).items() if k != "no-cutoff"}
    ok = out["correct"].params
    out["no-halt"] = Variant(
        "no-halt", replace(ok, cutoff=None), cal.epsilon, True,
        "does not halt after a positive: keeps ρ and answers, charged as one instance",
    )
    out["restart-uncharged"] = Variant(
        "restart-uncharged", replace(ok, restart_after_positive=True), cal.epsilon, True,
        "restarts with a fresh ρ after each positive but charges only one instance",
    )
    return out


@dataclass(frozen=True)
class Outcomes:
    """Outputs of ``runs`` executions on each input of a pair, as integer codes.

    ``features`` maps distinct output codes to named integer features (the
    events an audit may choose are ``feature == v``, ``>= v`` or ``<= v``).
    """

    first: np.ndarray
    second: np.ndarray
    features: Callable[[np.ndarray], dict[str, np.ndarray]]


Sampler = Callable[[np.random.SeedSequence, int], Mapping[str, Outcomes]]


def svt_sampler(variant: Variant, pairs: Iterable[Pair], threshold: int = THRESHOLD) -> Sampler:
    """``sample(seed, runs)`` for :func:`audit`: the answer vectors on both sides of every pair.

    All pairs and both sides of a pair share the same noise draws (common
    random numbers). That is harmless: each side's Clopper–Pearson interval
    uses only that side's runs, which are i.i.d. draws of the mechanism's
    output, and the selection and test samples are independent.
    """
    pairs = tuple(pairs)
    queries = {len(p.first) for p in pairs}
    assert len(queries) == 1
    m = queries.pop()
    table = svt_code_table(m)

    def features(codes: np.ndarray) -> dict[str, np.ndarray]:
        return {"answers": codes, **{k: v[codes] for k, v in table.items()}}

    def sample(seed: np.random.SeedSequence, runs: int) -> dict[str, Outcomes]:
        noise = draw_svt_noise(variant.params, m, runs, GeneratorSource(seed))
        return {
            p.name: Outcomes(
                run_svt_codes(variant.params, p.first, threshold, noise),
                run_svt_codes(variant.params, p.second, threshold, noise),
                features,
            )
            for p in pairs
        }

    return sample


def lpa_sampler(count: int, delta: int, scale: Fraction) -> Sampler:
    """One count released with discrete Laplace of ``scale``; the neighbour's count is ``count + Δ``."""

    def sample(seed: np.random.SeedSequence, runs: int) -> dict[str, Outcomes]:
        noise = GeneratorSource(seed).dlap(scale, runs)
        return {
            f"{count} vs {count + delta}": Outcomes(count + noise, count + delta + noise, lambda v: {"released": v})
        }

    return sample


# ---------------------------------------------------------------------------
# Clopper–Pearson audit


def cp_lower(k: np.ndarray, n: int, alpha: float = ALPHA) -> np.ndarray:
    """Lower limit of the two-sided Clopper–Pearson interval (level 1 − α)."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(all="ignore"):
        lo = betaincinv(np.maximum(k, 1e-300), n - k + 1, alpha / 2)  # Beta(k, n−k+1) quantile
    return np.where(k > 0, lo, 0.0)


def cp_upper(k: np.ndarray, n: int, alpha: float = ALPHA) -> np.ndarray:
    """Upper limit of the two-sided Clopper–Pearson interval (level 1 − α)."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(all="ignore"):
        hi = betaincinv(k + 1, np.maximum(n - k, 1e-300), 1 - alpha / 2)  # Beta(k+1, n−k) quantile
    return np.where(k < n, hi, 1.0)


def loss_lower_bound(k_num: np.ndarray, k_den: np.ndarray, n: int, alpha: float = ALPHA) -> np.ndarray:
    """``ln(lower(p_num) / upper(p_den))``: a lower bound on ``ln(p_num/p_den)``."""
    lo = cp_lower(k_num, n, alpha)
    hi = cp_upper(k_den, n, alpha)
    with np.errstate(divide="ignore"):
        return np.log(lo) - np.log(hi)


@dataclass(frozen=True)
class Event:
    """``feature op value``, and which side is in the numerator of the ratio."""

    feature: str
    op: str
    value: int
    first_over_second: bool

    def apply(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
        """Which outputs (given their features) are in the event."""
        x = features[self.feature]
        if self.op == "==":
            return x == self.value
        if self.op == ">=":
            return x >= self.value
        return x <= self.value

    def __str__(self) -> str:
        ratio = "P[D]/P[D']" if self.first_over_second else "P[D']/P[D]"
        return f"{self.feature} {self.op} {self.value} ({ratio})"


@dataclass(frozen=True)
class AuditResult:
    """Outcome of one audit: the bound from the fresh sample and the event it used."""

    lower_bound: float
    event: Event
    hits: tuple[int, int]  # (numerator side, denominator side) on the test sample
    runs: int
    selection_bound: float = field(default=float("nan"))

    def __str__(self) -> str:
        return (
            f"lb={self.lower_bound:.3f} on {self.event} "
            f"[{self.hits[0]}/{self.runs} vs {self.hits[1]}/{self.runs}]"
        )


def _value_counts(x0: np.ndarray, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct values of ``x0 ∪ x1`` and how often each occurs in ``x0`` and in ``x1``."""
    lo = int(min(x0.min(), x1.min()))
    hi = int(max(x0.max(), x1.max()))
    if hi - lo <= 4 * (x0.size + x1.size):
        k0 = np.bincount(x0 - lo, minlength=hi - lo + 1)
        k1 = np.bincount(x1 - lo, minlength=hi - lo + 1)
        seen = np.flatnonzero(k0 + k1)
        return seen + lo, k0[seen], k1[seen]
    vals, inv = np.unique(np.concatenate([x0, x1]), return_inverse=True)
    return vals, np.bincount(inv[: x0.size], minlength=vals.size), np.bincount(inv[x0.size :], minlength=vals.size)


def choose_event(out: Outcomes, n: int, alpha: float, ordered: Iterable[str]) -> tuple[Event, float]:
    """The event (and direction) with the largest Clopper–Pearson bound on this sample."""
    ordered = set(ordered)
    codes, c0, c1 = _value_counts(out.first, out.second)
    events: list[tuple[str, str, np.ndarray, bool]] = []
    nums: list[np.ndarray] = []
    dens: list[np.ndarray] = []
    for name, per_code in out.features(codes).items():
        vals, inv = np.unique(per_code, return_inverse=True)
        k0 = np.bincount(inv, weights=c0, minlength=vals.size).astype(np.int64)
        k1 = np.bincount(inv, weights=c1, minlength=vals.size).astype(np.int64)
        families = [("==", k0, k1)]
        if name in ordered:
            families += [(">=", k0[::-1].cumsum()[::-1], k1[::-1].cumsum()[::-1]), ("<=", k0.cumsum(), k1.cumsum())]
        for op, a, b in families:
            for forward, num, den in ((True, a, b), (False, b, a)):
                keep = num > 0
                events.append((name, op, vals[keep], forward))
                nums.append(num[keep])
                dens.append(den[keep])
    lb = loss_lower_bound(np.concatenate(nums), np.concatenate(dens), n, alpha)
    i = int(np.argmax(lb))
    for name, op, vals, forward in events:
        if i < vals.size:
            return Event(name, op, int(vals[i]), forward), float(lb.max())
        i -= vals.size
    raise AssertionError("no event was observed")


def count_event(out: Outcomes, event: Event) -> tuple[int, int]:
    """How many runs on each input land in ``event``."""
    codes, c0, c1 = _value_counts(out.first, out.second)
    inside = event.apply(out.features(codes))
    return int(c0[inside].sum()), int(c1[inside].sum())


def audit(
    sample: Sampler,
    *,
    seed: int,
    runs: int = RUNS,
    select_runs: int = SELECT_RUNS,
    alpha: float = ALPHA,
    ordered: Iterable[str] = (),
) -> dict[str, AuditResult]:
    """Lower bounds on the privacy loss of a mechanism, one per neighbouring pair.

    ``sample(seed, runs)`` returns, per pair, the outputs of ``runs``
    executions on the first and on the second input. Each pair's event is
    chosen on one sample (``select_runs`` per side) and its bound computed on
    a fresh, independent one (``runs`` per side).
    """
    ordered = tuple(ordered)
    s_select, s_test = np.random.SeedSequence([seed]).spawn(2)
    events = {name: choose_event(out, select_runs, alpha, ordered) for name, out in sample(s_select, select_runs).items()}
    results = {}
    for name, out in sample(s_test, runs).items():
        event, sel_bound = events[name]
        hit0, hit1 = count_event(out, event)
        num, den = (hit0, hit1) if event.first_over_second else (hit1, hit0)
        lb = float(loss_lower_bound(np.array([num]), np.array([den]), runs, alpha)[0])
        results[name] = AuditResult(lb, event, (num, den), runs, sel_bound)
    return results


# ---------------------------------------------------------------------------
# Engine twins (A5): the whole release step, replayable from a noise tape


@dataclass(frozen=True)
class TwinRelease:
    """What the twin publishes at one timestep, and what it charges."""

    fresh: bool
    counts: np.ndarray
    charges: tuple[tuple[str, Fraction], ...]


def _threshold_counts(threshold: float, population: int) -> Fraction:
    return Fraction(repr(float(threshold))) * population


def _l1(counts: np.ndarray, last: np.ndarray) -> int:
    return int(np.abs(counts.astype(np.int64) - last.astype(np.int64)).sum())


def threshold_share(cutoff: int, split: str) -> Fraction:
    """ε_t/ε₁: Lyu et al.'s 1 : (2c)^{2/3} for non-monotonic queries (nearest rational), or 1/2."""
    if split == "even":
        return Fraction(1, 2)
    return Fraction(repr(1.0 / (1.0 + (2 * cutoff) ** (2.0 / 3.0)))).limit_denominator(10_000)


@dataclass
class UserLevelTwin:
    """User-level DSFT/DSAT + LPA (thesis Alg. 7/8 with the sound SVT), one run.

    The SVT scales are derived here from ε₁ = kε and the threshold share:
    ``b_t = Δ/(s·ε₁)``, ``b_q = 2cΔ/((1−s)·ε₁)``, ``c = C − 1``; the public
    DSAT threshold comes from the (public) PID controller fed only with the
    published fresh/republished sequence.
    """

    epsilon: Fraction
    horizon: int
    cutoff: int
    k: Fraction
    population: int
    threshold: float
    share: Fraction
    sensitivity: int
    bins: int
    adaptive: bool = False
    pid: PIDController | None = None
    burn_in: int = 0

    def __post_init__(self) -> None:
        c = self.cutoff - 1
        self.eps1 = self.k * self.epsilon if c >= 1 else Fraction(0)
        self.per_release = (self.epsilon - self.eps1) / self.cutoff
        self.svt: SVTTwin | None = None
        if c >= 1:
            b_t = Fraction(self.sensitivity) / (self.share * self.eps1)
            b_q = 2 * c * Fraction(self.sensitivity) / ((1 - self.share) * self.eps1)
            self.svt = SVTTwin(SVTParams(b_t, b_q, c), runs=1)
        self.spent = Fraction(0)
        self.fresh_count = 0
        self.last = np.zeros(self.bins, dtype=np.int64)
        self.pid_state: PIDState | None = self.pid.reset() if self.adaptive and self.pid else None

    def step(self, t: int, counts: np.ndarray, source: TapeSource | GeneratorSource) -> TwinRelease:
        charges: list[tuple[str, Fraction]] = []
        release_eps: Fraction | None = None
        exhausted = self.svt is None or bool(self.svt.exhausted[0])
        if t == 0:
            release_eps = self.per_release
        elif t >= self.horizon or exhausted:
            pass
        elif t == self.horizon - 1:
            rest = self.epsilon - self.spent
            release_eps = rest if rest > 0 else None
        elif self.adaptive and t <= self.burn_in:
            pass
        else:
            assert self.svt is not None
            public = self.threshold
            if self.adaptive:
                assert self.pid is not None and self.pid_state is not None
                self.pid_state = self.pid.update(
                    self.pid_state,
                    fresh_so_far=self.fresh_count,
                    timestep=t + 1,
                    target_rate=self.cutoff / self.horizon,
                )
                public = self.pid_state.threshold
            if not self.svt.has_rho[0]:
                charges.append(("decision", self.eps1))
            d = _l1(counts, self.last)
            answer = self.svt.query(source, d, _threshold_counts(public, self.population))
            if answer[0] == 1:
                release_eps = self.per_release
        if release_eps is not None:
            charges.append(("publication", release_eps))
            scale = Fraction(self.sensitivity) / release_eps
            self.last = counts.astype(np.int64) + source.dlap(scale, self.bins)
            self.fresh_count += 1
            if self.adaptive and self.pid_state is not None:
                assert self.pid is not None
                self.pid_state = self.pid.sampled(self.pid_state, t + 1)
        self.spent += sum((e for _, e in charges), Fraction(0))
        assert self.spent <= self.epsilon
        return TwinRelease(release_eps is not None, self.last.copy(), tuple(charges))


@dataclass
class WEventTwin:
    """w-event DSAT/DSFT + LPA: AboveThreshold instances restarted after every positive, one run.

    Its own window ledger: entries ``[start, end, ε]``; an instance's entry
    grows with each query and counts, in full, in every window it touches;
    nothing is charged or drawn unless every window containing ``t`` stays
    within ε.
    """

    epsilon: Fraction
    w: int
    cutoff: int
    k: Fraction
    population: int
    threshold: float
    share: Fraction
    sensitivity: int
    bins: int
    adaptive: bool = True
    pid: PIDController | None = None
    burn_in: int = 0

    def __post_init__(self) -> None:
        self.per_instance = self.k * self.epsilon / (self.cutoff + 1)
        self.per_release = (1 - self.k) * self.epsilon / self.cutoff
        b_t = Fraction(self.sensitivity) / (self.share * self.per_instance)
        b_q = 2 * Fraction(self.sensitivity) / ((1 - self.share) * self.per_instance)
        self.svt = SVTTwin(SVTParams(b_t, b_q, 1), runs=1)
        self.ledger: list[list] = []  # [start, end, epsilon]
        self.last_charge = -1  # latest timestep anything was charged or extended at
        self.instance: int | None = None  # index of the live instance's ledger entry
        self.recent: list[int] = []
        self.last = np.zeros(self.bins, dtype=np.int64)
        self.pid_state: PIDState | None = self.pid.reset() if self.adaptive and self.pid else None

    def _used(self, t: int) -> Fraction:
        lo = t - self.w + 1
        return sum((e[2] for e in self.ledger if e[1] >= lo and e[0] <= t), Fraction(0))

    def _charge(self, t: int, eps: Fraction) -> int:
        assert self._used(t) + eps <= self.epsilon
        self.ledger.append([t, t, eps])
        self.last_charge = max(self.last_charge, t)
        return len(self.ledger) - 1

    def step(self, t: int, counts: np.ndarray, source: TapeSource | GeneratorSource) -> TwinRelease:
        charges: list[tuple[str, Fraction]] = []
        fresh = False
        self.recent = [s for s in self.recent if s > t - self.w]
        if t == 0:
            fresh = self._used(0) + self.per_release <= self.epsilon
        elif self.adaptive and t <= self.burn_in:
            pass
        else:
            in_window = len(self.recent)
            public = self.threshold
            if self.adaptive:
                assert self.pid is not None and self.pid_state is not None
                self.pid_state = self.pid.update(
                    self.pid_state,
                    fresh_so_far=in_window,
                    timestep=min(t + 1, self.w),
                    target_rate=self.cutoff / self.w,
                )
                public = self.pid_state.threshold
            if in_window < self.cutoff:
                fresh = self._decide(t, counts, source, public, charges)
        if fresh:
            self._charge(t, self.per_release)
            charges.append(("publication", self.per_release))
            scale = Fraction(self.sensitivity) / self.per_release
            self.last = counts.astype(np.int64) + source.dlap(scale, self.bins)
            self.recent.append(t)
            if self.adaptive and self.pid_state is not None:
                assert self.pid is not None
                self.pid_state = self.pid.sampled(self.pid_state, min(t + 1, self.w))
        return TwinRelease(fresh, self.last.copy(), tuple(charges))

    def _decide(self, t: int, counts: np.ndarray, source, public: float, charges: list) -> bool:
        lo = t - self.w + 1
        idx = self.instance
        live = idx is not None and self.ledger[idx][1] >= self.last_charge - self.w + 1
        reuse = False
        if idx is not None and live:
            entry = self.ledger[idx]
            used_if_extended = self._used(t) + (entry[2] if entry[1] < lo else 0)
            if used_if_extended <= self.epsilon:
                if used_if_extended + self.per_release > self.epsilon:
                    return False  # a positive could not be published: do not query
                entry[1] = t
                self.last_charge = t
                reuse = True
        if not reuse:
            if self._used(t) + self.per_instance + self.per_release > self.epsilon:
                self.instance = None
                return False
            self.instance = self._charge(t, self.per_instance)
            charges.append(("decision", self.per_instance))
            self.svt.restart()
        answer = self.svt.query(source, _l1(counts, self.last), _threshold_counts(public, self.population))
        if answer[0] == 1:
            self.instance = None  # AboveThreshold halts; the next query starts a new instance
            return True
        return False


# ---------------------------------------------------------------------------
# The audit catalogue: every shipped mechanism, its audit and its broken variants


@dataclass(frozen=True)
class Catch:
    """A broken variant and the test call that must catch it: ``module.function(**kwargs)`` passes."""

    function: str
    kwargs: Mapping[str, object]


@dataclass(frozen=True)
class AuditEntry:
    """One shipped mechanism (or engine-wide rule) and the audit that covers it.

    Attributes:
        kind: ``decision`` (a method of :data:`controller.method.METHODS`),
            ``release`` (a ``release.mechanism``), ``personal`` (a
            ``privacy.personal.mechanism``), or ``engine`` (a rule every
            method relies on).
        module: dotted name of the audit's test module.
        registry: name of the module's dict of broken variants (its keys must
            equal ``variants``), or None when the variants are listed only here.
        variants: broken variant name -> the call that must catch it.
        pending: the audit module is written on another branch (PSD only):
            the catalogue test skips this entry while the module is absent.
    """

    kind: str
    module: str
    registry: str | None
    variants: Mapping[str, Catch]
    statistic: str
    pending: bool = False


def _named(function: str, names: Iterable[str], key: str = "name") -> dict[str, Catch]:
    return {n: Catch(function, {key: n}) for n in names}


_SVT_USER_LEVEL = _named(
    "test_broken_svt_variant_is_caught",
    ("monotone-factor", "no-cutoff", "no-query-noise", "no-threshold-noise",
     "query-noise-not-scaled-by-c", "thesis-calibration", "threshold-redrawn"),
)
_SVT_W_EVENT = _named(
    "test_broken_above_threshold_variant_is_caught", ("no-halt", "no-query-noise", "restart-uncharged")
)
_KELLARIS_TEST = {
    f"{m}: {v}": Catch("test_dissimilarity_audit_catches", {"name": m, "variant": v})
    for m in ("bd", "ba")
    for v in ("charges half of the test", "scale ignores sensitivity", "scale ignores w")
}
_BA_BUDGET = _named(
    "test_budget_audit_catches",
    ("ba absorbs one share too many", "ba does not nullify", "ba nullifies too short"), key="variant"
)
_BD_BUDGET = _named(
    "test_budget_audit_catches", ("bd spends the whole remainder", "bd forgets its publications"), key="variant"
)
_DRAW_THEN_CHARGE = {
    "draw-then-charge": Catch("test_reverse_order_is_caught", {"unit": "w-event", "name": "uniform"})
}

_PERSONAL = "tests.stream.test_personal_audit"
_PERSONAL_STAT = (
    "whole pipeline (consent routing, coins, windowing, one sub-stream per part): CP lower bound on one "
    "released count of the person's part, D vs D + the person, vs the ε their tier's ledger says was spent"
)


def _personal(*names: str) -> dict[str, Catch]:
    return _named("test_broken_personal_variant_is_caught", names)


CATALOGUE: dict[str, AuditEntry] = {
    "dsft": AuditEntry(
        "decision", "tests.controller.test_privacy_audit", "VARIANT_AUDITS",
        {**_SVT_USER_LEVEL, **{f"w-event {k}": v for k, v in _SVT_W_EVENT.items()}},
        "Clopper–Pearson lower bound on ln P[E|D]/P[E|D'] over adversarial SVT pairs, event chosen on a separate sample",
    ),
    "dsat": AuditEntry(
        "decision", "tests.controller.test_privacy_audit", "VARIANT_AUDITS",
        {**_SVT_USER_LEVEL, **{f"w-event {k}": v for k, v in _SVT_W_EVENT.items()}},
        "as dsft: the PID threshold is public, so DSAT's private part is the same SVT instance",
    ),
    "bd": AuditEntry(
        "decision", "tests.controller.test_kellaris_audit", None, {**_KELLARIS_TEST, **_BD_BUDGET},
        "dissimilarity test: CP lower bound on the loss of 'publish' vs the charged ε/(2w); budget: exact ledger replay",
    ),
    "ba": AuditEntry(
        "decision", "tests.controller.test_kellaris_audit", None, {**_KELLARIS_TEST, **_BA_BUDGET},
        "dissimilarity test: CP lower bound vs the charged ε/(2w); absorption/nullification: exact ledger replay",
    ),
    "uniform": AuditEntry(
        "decision", "tests.controller.test_charge_before_draw", None, _DRAW_THEN_CHARGE,
        "no private decision: its release is the LPA audit; the charge-before-draw order is audited",
    ),
    "fixed": AuditEntry(
        "decision", "tests.controller.test_charge_before_draw", None,
        {"draw-then-charge": Catch("test_reverse_order_is_caught", {"unit": "w-event", "name": "fixed"})},
        "no private decision: its release is the LPA audit; the charge-before-draw order is audited",
    ),
    "sample": AuditEntry(
        "decision", "tests.controller.test_wevent_audit", "SAMPLE_VARIANTS",
        {v: Catch("test_sample_audit_catches", {"variant": v}) for v in (
            "charges eps/w, draws noise for eps", "samples off schedule", "samples twice in a window (lenient ledger)")},
        "exact: draws' Δ/scale vs ledger charges per timestep, window sums from the ledger, the schedule; "
        "CP lower bound on one released count vs the charged ε",
    ),
    "pegasus": AuditEntry(
        "decision", "tests.controller.test_wevent_audit", "PEGASUS_VARIANTS",
        {v: Catch("test_pegasus_audit_catches", {"variant": v}) for v in (
            "deviation from the group's true values", "perturbation noise for eps/w, charged eps_p",
            "test noise for the whole eps/w", "test uncharged")},
        "exact: draws vs charges, window sums, schedule, locality by coupling (later releases and test flip points "
        "unchanged by a neighbour at s); CP lower bound on the deviation test vs ε_g",
    ),
    "fast": AuditEntry(
        "decision", "tests.controller.test_wevent_audit", "FAST_VARIANTS",
        {v: Catch("test_fast_audit_catches", {"variant": v}) for v in (
            "charges eps/w per sample, draws noise for eps", "filter corrects with the true counts",
            "samples beyond M per window (lenient ledger)")},
        "exact: draws vs charges, window sums, at most M samples per window, locality by coupling; "
        "CP lower bound on one sampled count vs ε/M",
    ),
    "adaptive-sample": AuditEntry(
        "decision", "tests.controller.test_adaptive_sample", "VARIANTS",
        {v: Catch("test_adaptive_sample_audit_catches", {"variant": v}) for v in (
            "interval chosen from the true counts", "moves without asking the window (lenient ledger)",
            "charges eps/w, draws noise for eps/c")},
        "exact: draws vs charges, window sums, charges in {ε/c : c | w}, locality by coupling (later releases, and "
        "the journaled state after a read-back, unchanged by a neighbour); CP lower bound on one released count",
    ),
    "adapub": AuditEntry(
        "decision", "tests.controller.test_grouped_audit", "ADAPUB_VARIANTS",
        {v: Catch("test_adapub_audit_catches", {"variant": v}) for v in (
            "DimParti on the previous timestep's true counts", "deviation from the time group's true values (the paper)",
            "perturbs at eps/w and tests on top (lenient ledger)", "test budget split over bins", "tests uncharged")},
        "exact: draws vs charges, window sums, locality by coupling (releases after s unchanged by a neighbour at s "
        "once s's noisy values are); CP lower bound on one group sum vs ε_p",
    ),
    "rescuedp": AuditEntry(
        "decision", "tests.controller.test_grouped_audit", "RESCUE_VARIANTS",
        {v: Catch("test_rescuedp_audit_catches", {"variant": v}) for v in (
            "Kalman Q from the raw stream's variance (the benchmark's Java)",
            "grouping on the previous timestep's true counts", "per-region window budgets (the paper; lenient ledger)")},
        "exact: draws vs charges, window sums, locality by coupling; CP lower bound on one group sum vs ε_t",
    ),
    "lpa": AuditEntry(
        "release", "tests.controller.test_privacy_audit", None,
        {f"whole publication budget per release (ε₂={e}, C={c})":
         Catch("test_publication_noise_for_the_whole_publication_budget_is_caught", {"eps2": Fraction(e), "cutoff": c})
         for e, c in ((4, 4), (1, 4))},
        "CP lower bound on the loss of one released count between neighbours c and c+Δ vs ε₂/C",
    ),
    "psd": AuditEntry(
        "release", "tests.histogram.psd.test_psd_audit", "BROKEN",
        _named("test_broken_psd_variant_is_caught",
               ("height split overspends", "inner level at half scale", "leaves at half scale",
                "median sensitivity ignored", "median share doubled")),
        "exact: the ε the recorded draws and median calls provide along every root-to-leaf path vs the charged ε",
    ),
    "psd-median": AuditEntry(
        "release", "tests.histogram.psd.test_psd_median_audit", "BROKEN",
        _named("test_every_broken_variant_is_caught", ("no factor 2", "no noise", "sensitivity ignored")),
        "CP lower bound on the loss of one split point of the private median (exponential mechanism)",
    ),
    # issue 15: not yet a release.mechanism (engine wiring pending); audited already
    "dpcopula": AuditEntry(
        "release", "tests.histogram.copula.test_copula_audit", "BROKEN",
        {**_named("test_broken_copula_variant_is_caught",
                  ("dependence scale ignores the pair count", "kendall sensitivity halved",
                   "kendall without the public denominator floor", "marginal scale ignores m",
                   "split spends ε on each part")),
         "kendall sensitivity halved (statistical)": Catch(
             "test_broken_kendall_release_is_caught_by_the_statistical_audit", {})},
        "exact sensitivity search + ε of the recorded draws vs the charge; CP bound on the extremal Kendall pair",
    ),
    "kway-marginals": AuditEntry(
        "release", "tests.histogram.marginals.test_kway", "BROKEN",
        _named("test_broken_privacy_map_is_caught",
               ("each order gets all of ε", "order sensitivity ignores C(m,k)", "order sensitivity ignores c")),
        "exact: ε the recorded draws provide with the enumerated record sensitivity c·C(m,k) vs the charge",
    ),
    # issue 15 item 3: the model releases in the service; the releases themselves are dpcopula /
    # kway-marginals above, the new part is the decision space's sensitivity (docs/privacy.md §11.4)
    **{mech: AuditEntry(
        "release", "tests.histogram.test_model_release", "BROKEN",
        _named("test_broken_view_is_caught", ("sensitivity forgets the tables", "sensitivity forgets c")),
        "exact: the largest L1 change of the released-table view over every enumerated one-person neighbour "
        "vs the Δ the decision is calibrated with",
    ) for mech in ("copula", "marginals")},
    # issue 16: privacy.personal (personalized DP), one entry per privacy.personal.mechanism
    "personal:minimum": AuditEntry(
        "personal", _PERSONAL, None, _personal("minimum part released at another tier's ε"), _PERSONAL_STAT),
    "personal:threshold": AuditEntry(
        "personal", _PERSONAL, None, _personal("threshold keeps the tier below ε_t"), _PERSONAL_STAT),
    "personal:sampling": AuditEntry(
        "personal", _PERSONAL, "WINDOW_BROKEN",
        {**_personal("sampling coin e^ε/e^t"),
         # issue 27.2: under w-event a coin shared with timesteps outside the window amplifies nothing
         **_named("test_broken_window_coin_is_caught", ("w-event sampling: one coin for the stream's lifetime",))},
        _PERSONAL_STAT + "; w-event: the exact loss of two timesteps' releases (exact pmfs over every coin "
        "assignment the production engine draws) vs the tier's window ledger"),
    "personal:privacy_aware": AuditEntry(
        "personal", _PERSONAL, None, _personal("tier counted in another tier's part (privacy-aware)"), _PERSONAL_STAT),
    "personal:utility_based": AuditEntry(
        "personal", _PERSONAL, "BROKEN",
        _personal("tier counted in another tier's part (utility-based)", "minimum part released at another tier's ε",
                  "threshold keeps the tier below ε_t", "sampling coin e^ε/e^t",
                  "tier counted in another tier's part (privacy-aware)"),
        _PERSONAL_STAT),
    # issue 30 item 4: release.planner.online switches methods from the releases alone, on one ledger
    "online-planner": AuditEntry(
        "engine", "tests.controller.test_online_policy", "BROKEN",
        _named("test_broken_online_variant_is_caught",
               ("re-plan reads the true counts", "switch starts an empty ledger")),
        "exact: the re-plan's inputs and choices for different true inputs with the same releases and noise "
        "(identical); every window of the ledger replayed from the releases ≤ ε over hypothesis switch points",
    ),
    "charge-before-draw": AuditEntry(
        "engine", "tests.controller.test_charge_before_draw", None,
        {"draw-then-charge": Catch("test_reverse_order_is_caught", {"unit": "user-level", "name": "dsat"}),
         "decision noise drawn before its charge": Catch("test_decision_drawn_before_its_charge_is_caught", {})},
        "exact: a failure injected at every ledger charge; no draw it pays for precedes it",
    ),
    # issue 27 items 1 and 4: which events count depends on each event alone, *and* a timestep is
    # declared complete only when no on-time event can still be read (docs/privacy.md §1.1)
    "inclusion-completeness": AuditEntry(
        "engine", "tests.stream.service.test_reader_neighbours", "BROKEN",
        _named("test_broken_reader_is_caught",
               ("cached high watermark as the end", "last stable offset as the end (read_committed end offsets)")),
        "exact: D and D′ (one extra event, up to max_future ahead) through the production InputReader and "
        "Windower on a simulated multi-partition broker; L1 of every timestep sealed in both ≤ Δ and no on-time "
        "event read after its seal",
    ),
    "released-metadata": AuditEntry(
        "engine", "tests.stream.test_release_metadata", "BROKEN",
        {
            **{v: Catch("test_broken_metadata_is_caught", {"variant": v, "decision": "uniform"})
               for v in ("half_width from the raw counts", "kind from the raw total",
                         "confidence from the raw total", "details keyed on raw zeros")},
            "psd half_width from the raw counts": Catch("test_psd_width_from_raw_counts_is_caught", {}),
        },
        "exact: neighbours on the same recorded noise give byte-identical metadata (PSD widths recomputed from the release)",
    ),
    # issue 27 item 7: checks for bugs that passed the whole non-Kafka suite before
    "inclusion-deadline": AuditEntry(
        "engine", "tests.stream.test_neighbours_deadline", None,
        {"allowed_lateness counted twice on the inclusion path": Catch("test_a_lenient_deadline_is_caught", {})},
        "hypothesis property at the deadline: honest records just past it, a newcomer completing the cell one "
        "poll earlier; L1 per sealed timestep ≤ the contribution bound (pinned @examples, nightly profile)",
    ),
    "operator-surfaces": AuditEntry(
        "engine", "tests.stream.service.test_operator_surfaces", "SURFACE_VARIANTS",
        _named("test_broken_surface_is_caught", ("raw count in an allowlisted log field",
                                                 "raw value in a public metric", "volume metric classed public"),
               key="variant"),
        "exact: the real service loop on neighbours with the same seeded noise; every log field and every public "
        "metric (scraped after each checkpoint) byte-identical",
    ),
    "empty-timesteps": AuditEntry(
        "engine", "tests.controller.test_empty_timesteps", "EMPTY_VARIANTS",
        {"republish, no draw": Catch("test_broken_empty_variant_is_caught",
                                     {"method": "sample", "unit": "w-event", "variant": "republish, no draw"}),
         "republish, draws kept": Catch("test_broken_empty_variant_is_caught",
                                        {"method": "dsat", "unit": "user-level", "variant": "republish, draws kept"})},
        "exact on the same recorded noise (draws, charges, data-independent decisions) and a CP bound on the "
        "decision of data-dependent methods, an empty timestep vs one person in it, every method",
    ),
    "planner-inputs": AuditEntry(
        "engine", "tests.stream.planning.test_planner_inputs", None,
        {"planner reads the input's population":
         Catch("test_a_planner_reading_the_input_population_is_caught", {})},
        "exact: the whole plan for two inputs that differ from each other and from the declared population "
        "equals the plan from configuration alone",
    ),
    "private-alerts": AuditEntry(
        "engine", "tests.controller.test_private_alert_audit", None,
        {v: Catch("test_a_broken_private_alert_is_caught", {"variant": v})
         for v in ("query noise not scaled by c", "undercharged", "threshold redrawn")},
        "exact, on a recorded engine run (DSAT + two private alerts): one charge of ε_a per alert at timestep 0, "
        "one ρ draw, one ν per tested (republished, below-cutoff) timestep, each answer = q + ν ≥ above + ρ from "
        "the recorded draws, Lyu's bound from the recorded scales ≤ the charge; CP lower bound over the SVT "
        "pairs at the production scales ≤ ε_a",
    ),
    "bd-rounding": AuditEntry(
        "engine", "tests.controller.test_bd_rounding", None,
        {"publication ε rounded up": Catch("test_rounding_up_is_caught", {})},
        "exact: BD's publication ε vs ⌊(remaining/2)/g⌋·g recomputed from the public state, remaining an odd "
        "number of grid steps",
    ),
}
