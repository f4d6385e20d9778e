"""The one module that draws randomness for dpstream.

Every noise value, threshold noise and random choice that can influence
released bytes is drawn here. Two sources, one code path:

* :meth:`Randomness.secure` (production): each drawer is an AES-128 counter
  generator (``randomgen.AESCounter``, AES-NI) keyed with 128 fresh bits from
  the operating system's CSPRNG (:func:`secrets.token_bytes`). AES-CTR is a
  cryptographically strong stream; a new key per (stream, timestep, purpose)
  means no state is shared between releases.
* :meth:`Randomness.seeded` (tests and evaluation only): the same generator,
  keyed with SHA-256(seed, stream, timestep, purpose). The same seed gives the
  same noise for the same timestep in any process, so an offline replay and
  the service agree bit for bit. Production configuration refuses it unless
  an explicitly named switch is set (see ``stream.config``).

Integer counts get *discrete* Laplace noise (the two-sided geometric
distribution), ``P(Z = z) ∝ exp(-|z| / b)`` for integers ``z``, sampled
**exactly**: every decision is an integer comparison against uniformly
random integers (Canonne, Kamath and Steinke, NeurIPS 2020, Algorithms 1
and 2, vectorised over numpy arrays). There is no floating-point arithmetic
between the random bits and the output, so the output pmf is the discrete
Laplace pmf exactly and the mechanisms built on it are pure ε-DP
(``docs/privacy.md`` §2.2). The same exact primitives, ``uniform_int`` and
``bernoulli_exp`` (``P(True) = exp(-γ)`` for a rational ``γ``), drive the
exponential mechanism of the PSD medians (``histogram.psd.median``).
"""

from __future__ import annotations

import functools
import hashlib
import math
import secrets
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol, runtime_checkable

import numpy as np
from randomgen import AESCounter

from histogram.errors import NoiseError

__all__ = [
    "NoiseDrawer",
    "RunsNoise",
    "DrawerNoise",
    "RunDrawer",
    "GeneratorDrawer",
    "Randomness",
    "exact_scale",
    "discrete_laplace_pmf",
    "discrete_laplace_tail",
    "discrete_laplace_half_width",
    "discrete_laplace_mean_abs",
    "discrete_laplace_variance",
]


@runtime_checkable
class NoiseDrawer(Protocol):
    """What mechanisms and decision policies draw from.

    All methods consume the drawer's stream in call order, so a step that
    makes the same calls gets the same values from a seeded drawer.
    """

    def discrete_laplace(self, scale: Fraction, size: int | None = None) -> np.ndarray | int:
        """Discrete Laplace noise with ``P(z) ∝ exp(-|z|/scale)``.

        Returns an ``int`` when ``size`` is None, else an int64 array.
        """
        ...

    def uniform_int(self, high: np.ndarray) -> np.ndarray:
        """One uniform integer in ``{0, …, high_i - 1}`` per entry of ``high`` (int64, all >= 1)."""
        ...

    def bernoulli_exp(self, numerator: np.ndarray, denominator: int) -> np.ndarray:
        """Independent booleans with ``P(True) = exp(-numerator_i / denominator)``, exactly.

        ``numerator`` is a non-negative int64 array, ``denominator`` a positive int.
        """
        ...


@runtime_checkable
class RunsNoise(Protocol):
    """Noise for R independent runs of one policy (a runs axis, :mod:`controller.policies.base`).

    Every value is exact discrete Laplace; where it comes from is the caller's choice: the service's
    one run draws from the timestep's own drawer (:class:`DrawerNoise`), the lab from a pooled or a
    replayable source (:mod:`stream.lab.noise`). A policy's rule is the same code either way.
    """

    def begin(self, t: int) -> None:
        """Timestep ``t`` starts (drawers of the previous one are done)."""
        ...

    def laplace(self, runs: np.ndarray, scale: Fraction, size: int | None) -> np.ndarray:
        """``DLap(scale)`` for each run in ``runs``: shape ``(len(runs),)`` or ``(len(runs), size)``."""
        ...

    def laplace_each(self, runs: np.ndarray, num: np.ndarray, den: np.ndarray, size: int) -> np.ndarray:
        """``(len(runs), size)`` values, row i of scale ``num[i]/den[i]`` (positive ints)."""
        ...


class DrawerNoise:
    """One run's :class:`RunsNoise` over one timestep's :class:`NoiseDrawer` (the service's run).

    Each call is one call of the drawer's :meth:`~NoiseDrawer.discrete_laplace`, in the order the
    policy asks, so a rule written over runs draws exactly what the one-run rule drew before."""

    def __init__(self, drawer: NoiseDrawer) -> None:
        self.drawer = drawer

    def begin(self, t: int) -> None:
        return None

    def laplace(self, runs: np.ndarray, scale: Fraction, size: int | None) -> np.ndarray:
        n = len(runs)
        if n == 0:
            return np.zeros((0,) if size is None else (0, int(size)), dtype=np.int64)
        if n != 1:
            raise NoiseError(f"DrawerNoise serves one run, asked for {n}: use a lab noise source for R > 1")
        value = self.drawer.discrete_laplace(scale, size)
        if size is None:
            return np.array([int(value)], dtype=np.int64)
        return np.asarray(value, dtype=np.int64).reshape(1, int(size))

    def laplace_each(self, runs: np.ndarray, num: np.ndarray, den: np.ndarray, size: int) -> np.ndarray:
        if len(runs) == 0:
            return np.zeros((0, int(size)), dtype=np.int64)
        return self.laplace(runs, Fraction(int(num[0]), int(den[0])), size)


class RunDrawer:
    """One run of a :class:`RunsNoise` seen as a :class:`NoiseDrawer` (the inverse of :class:`DrawerNoise`).

    For a rule written for one run (AdaPub's, RescueDP's ``decide``) and the engine's grouped release
    (:func:`controller.grouped.release_groups`) stepped per run over a lab source: each
    :meth:`discrete_laplace` call is one call of the source for run ``run`` (``laplace_each`` for a
    vector: pooled by scale, so the many scales of RescueDP's budgets stay cheap), so over
    the engine's own drawers (``evaluate --replayable``) it draws what the engine draws, in its order.
    Only discrete Laplace values are served.
    """

    def __init__(self, noise: RunsNoise, run: int) -> None:
        self.noise = noise
        self.rows = np.array([run], dtype=np.int64)

    def discrete_laplace(self, scale: Fraction, size: int | None = None) -> np.ndarray | int:
        sc = Fraction(scale)
        if size is None:
            return int(self.noise.laplace(self.rows, sc, None)[0])
        values = self.noise.laplace_each(self.rows, np.array([sc.numerator]), np.array([sc.denominator]), int(size))
        return np.asarray(values[0], dtype=np.int64)

    def uniform_int(self, high: np.ndarray) -> np.ndarray:
        raise NoiseError("RunDrawer serves discrete Laplace values only (a runs-axis noise source has no others)")

    def bernoulli_exp(self, numerator: np.ndarray, denominator: int) -> np.ndarray:
        raise NoiseError("RunDrawer serves discrete Laplace values only (a runs-axis noise source has no others)")


def _check_scale(scale: Fraction) -> float:
    if not isinstance(scale, Fraction | int) or isinstance(scale, bool):
        raise NoiseError(f"noise scale must be an exact Fraction, got {type(scale).__name__} {scale!r}")
    if scale <= 0:
        raise NoiseError(f"noise scale must be > 0, got {scale}")
    value = float(scale)
    if not math.isfinite(value):
        raise NoiseError(f"noise scale {scale} is too large to sample")
    return value


# Largest integer the vectorised integer arithmetic handles without overflow:
# products such as ``denominator · K`` and ``U + t·V`` stay far below 2**63.
_EXACT_LIMIT = 2**40


def exact_scale(scale: Fraction) -> Fraction:
    """The discrete Laplace scale actually sampled for ``scale``.

    ``scale`` itself when its numerator and denominator are below 2⁴⁰ (every
    scale calibrated from a decimal ε is). Otherwise the smallest fraction
    ``≥ scale`` on a power-of-two grid that fits: more noise than asked, so
    the ε the accountant charged for ``scale`` still holds (``Δ/b' ≤ Δ/b``).
    """
    _check_scale(scale)
    b = Fraction(scale)
    if b.numerator < _EXACT_LIMIT and b.denominator < _EXACT_LIMIT:
        return b
    whole = -(-b.numerator // b.denominator)  # ceil(b)
    grid = 2 ** max(0, 39 - whole.bit_length())
    rounded = Fraction(-(-b.numerator * grid // b.denominator), grid)
    if rounded.numerator >= _EXACT_LIMIT:
        raise NoiseError(f"noise scale {float(b):.3g} is too large to sample exactly (limit 2**39)")
    return rounded


@functools.lru_cache(maxsize=256)
def _threshold_plan(denominator: int) -> tuple[int, tuple[int, ...]]:
    """``(L, (0!, …, L!))`` with ``d^L·L! < 2^62`` and ``L`` as large as possible (at most 20)."""
    factorials = [1]
    depth = 0
    while depth < 20 and denominator ** (depth + 1) * factorials[-1] * (depth + 1) < 2**62:
        depth += 1
        factorials.append(factorials[-1] * depth)
    return depth, tuple(factorials)


class GeneratorDrawer:
    """A :class:`NoiseDrawer` over one AES-CTR keyed generator.

    Only the generator's bounded-integer method is used (``Generator.integers``,
    Lemire's unbiased rejection method), so every sampler below is exact given
    uniformly random bits.
    """

    __slots__ = ("_gen", "draws")

    def __init__(self, key: int) -> None:
        if not 0 <= key < 2**128:
            raise NoiseError("AES key must be a 128-bit non-negative integer")
        self._gen = np.random.Generator(AESCounter(key=key, counter=0))
        self.draws = 0  # number of values drawn, for accounting checks in tests

    # -- exact primitives ---------------------------------------------------

    def _below(self, high: int, numerator: np.ndarray) -> np.ndarray:
        """``U_i < numerator_i`` with ``U_i`` uniform on ``{0, …, high-1}``: Bernoulli(numerator_i/high)."""
        return self._gen.integers(0, high, size=numerator.size, dtype=np.int64) < numerator

    def _bernoulli_exp_unit(self, numerator: np.ndarray, denominator: int, constant: bool = False) -> np.ndarray:
        """Bernoulli(exp(-γ_i)) for ``γ_i = numerator_i/denominator ∈ [0, 1]`` (CKS Algorithm 1).

        The algorithm draws ``A_k ~ Bernoulli(γ/k)`` for k = 1, 2, … until the
        first ``A_k = 0`` and answers True iff that ``K`` is odd: ``P(K > k) =
        γ^k/k!`` so ``P(K odd) = Σ_k (-γ)^k/k! = exp(-γ)``. Only the law of
        ``K`` matters, so its first ``L`` steps are taken with ONE uniform
        integer ``U`` on ``{0, …, N-1}``, ``N = d^L·L!``: ``K > k`` iff ``U <
        T_k = a^k·d^(L-k)·L!/k!`` (an integer; ``P(U < T_k) = γ^k/k!`` exactly,
        and the ``T_k`` decrease in k). Entries with ``K > L`` continue with
        fresh draws of ``A_{L+1}, …``, which is the same law. ``constant``
        promises that every entry has the same numerator (one threshold table).
        """
        n = numerator.size
        if n == 0:
            return np.zeros(0, dtype=bool)
        d = int(denominator)
        depth, factorials = _threshold_plan(d)
        if not constant:
            depth = min(depth, 3)  # per-entry thresholds cost a pass each; 3 leaves at most 1/6 to continue
        top = d**depth * factorials[depth]
        if not constant and depth == 3:
            return self._bernoulli_exp_depth3(numerator, d, top)
        u = self._gen.integers(0, top, size=n, dtype=np.int64)
        if constant:
            a = int(numerator[0])
            ascending = np.array(
                [a**k * d ** (depth - k) * (factorials[depth] // factorials[k]) for k in range(depth, 0, -1)],
                dtype=np.int64,
            )
            passed = depth - np.searchsorted(ascending, u, side="right")  # #{k <= L : U < T_k} = min(K-1, L)
        else:
            passed = np.zeros(n, dtype=np.int64)
            power = np.ones(n, dtype=np.int64)
            for k in range(1, depth + 1):
                power *= numerator
                passed += u < power * (d ** (depth - k) * (factorials[depth] // factorials[k]))
        out = (passed % 2) == 0  # K = passed + 1 is odd
        active = np.flatnonzero(passed == depth)
        self._continue(out, active, numerator[active], d, depth + 1)
        return out

    def _continue(self, out: np.ndarray, active: np.ndarray, num: np.ndarray, d: int, k: int) -> None:
        """Entries known to have ``K >= k``: draw ``A_k, A_{k+1}, …`` until each stops; set ``K odd``."""
        while active.size:
            go_on = self._below(d * k, num)
            out[active[~go_on]] = k % 2 == 1
            active = active[go_on]
            num = num[go_on]
            k += 1

    def _bernoulli_exp_depth3(self, numerator: np.ndarray, d: int, top: int) -> np.ndarray:
        """:meth:`_bernoulli_exp_unit` with ``L = 3`` and per-entry numerators, in as few passes as possible.

        ``T_1 = 6a·d², T_2 = 3a²·d, T_3 = a³`` (nested events ``U < T_3 ⊂ U < T_2 ⊂ U < T_1``):
        ``K = 1`` if ``U ≥ T_1`` (True), ``K = 2`` if ``T_2 ≤ U < T_1`` (False), ``K = 3`` if
        ``T_3 ≤ U < T_2`` (True), and ``U < T_3`` continues at ``k = 4``. 32-bit arithmetic when
        ``N = 6d³`` fits (``d ≤ 703``), else 64-bit.
        """
        dtype = np.int32 if top < 2**31 else np.int64
        a = numerator.astype(dtype, copy=False)
        u = self._gen.integers(0, top, size=a.size, dtype=dtype)
        a2 = a * a
        out = u >= a * dtype(6 * d * d)
        out |= u < a2 * dtype(3 * d)
        deep = np.flatnonzero(u < a2 * a)
        out[deep] = False  # provisional; decided below
        if deep.size:
            self._continue(out, deep, numerator[deep], d, 4)
        return out

    def _bernoulli_inv_e(self, n: int) -> np.ndarray:
        """``n`` independent Bernoulli(e⁻¹): :meth:`_bernoulli_exp_unit` with ``γ = 1``, specialised.

        With ``N = 20!`` and ``T_k = 20!/k!``, ``U < T_1`` always and the
        answer is True iff the number of ``k`` with ``U < T_k`` is even. Two
        comparisons settle ``U ≥ T_3`` (probability 5/6); the rest look up
        the whole table, and ``U < T_20`` (``U = 0``) continues sequentially.
        """
        depth, factorials = _threshold_plan(1)
        top = factorials[depth]
        u = self._gen.integers(0, top, size=n, dtype=np.int64)
        out = (u < top // 2) & (u >= top // 6)
        deep = np.flatnonzero(u < top // 6)
        if deep.size:
            ascending = np.array([top // factorials[k] for k in range(depth, 0, -1)], dtype=np.int64)
            passed = depth - np.searchsorted(ascending, u[deep], side="right")
            out[deep] = (passed % 2) == 0
            rest = deep[passed == depth]
            k = depth + 1
            while rest.size:
                go_on = self._gen.integers(0, k, size=rest.size, dtype=np.int64) == 0
                out[rest[~go_on]] = k % 2 == 1
                rest = rest[go_on]
                k += 1
        return out

    def _geometric(self, n: int) -> np.ndarray:
        """``V`` with ``P(V = v) = (1 - e⁻¹)·e^{-v}``: successes of Bernoulli(e⁻¹) before the first failure.

        Each round draws one trial for every entry still running.
        """
        v = np.zeros(n, dtype=np.int64)
        active = np.arange(n)
        while active.size:
            active = active[self._bernoulli_inv_e(active.size)]
            v[active] += 1
        return v

    def uniform_int(self, high: np.ndarray) -> np.ndarray:
        high = np.asarray(high, dtype=np.int64)
        if high.size and int(high.min()) < 1:
            raise NoiseError("uniform_int needs every bound >= 1")
        self.draws += int(high.size)
        if high.size == 0:
            return np.zeros(0, dtype=np.int64)
        return self._gen.integers(0, high, dtype=np.int64)

    def bernoulli_exp(self, numerator: np.ndarray, denominator: int) -> np.ndarray:
        num = np.asarray(numerator, dtype=np.int64).reshape(-1)
        den = int(denominator)
        if den < 1 or den >= _EXACT_LIMIT:
            raise NoiseError(f"bernoulli_exp denominator must lie in [1, 2**40), got {denominator}")
        if num.size and int(num.min()) < 0:
            raise NoiseError("bernoulli_exp needs non-negative numerators (γ >= 0)")
        self.draws += int(num.size)
        whole, rest = np.divmod(num, den)
        out = np.ones(num.size, dtype=bool)
        # exp(-γ) = exp(-1)^⌊γ⌋ · exp(-(γ - ⌊γ⌋)): ⌊γ⌋ Bernoulli(e⁻¹) all true, stopping at the first false.
        active = np.flatnonzero(whole > 0)
        left = whole[active]
        while active.size:
            ok = self._bernoulli_inv_e(active.size)
            out[active[~ok]] = False
            left = left[ok] - 1
            active = active[ok]
            keep = left > 0
            active, left = active[keep], left[keep]
        frac = np.flatnonzero(out & (rest > 0))
        out[frac] = self._bernoulli_exp_unit(rest[frac], den)
        return out

    def discrete_laplace(self, scale: Fraction, size: int | None = None) -> np.ndarray | int:
        """Exact ``DLap(b)`` (CKS Algorithm 2, vectorised) with ``b = exact_scale(scale) = t/s``.

        One trial: ``U`` uniform on ``{0, …, t-1}``, kept with probability
        ``exp(-U/t)``; ``V`` geometric as in :meth:`_geometric`; ``X = U + tV``
        has ``P(X = x) ∝ e^{-x/t}``; ``Y = ⌊X/s⌋`` has ``P(Y = y) ∝ e^{-y·s/t}``;
        a fair sign ``B``, rejecting ``(B = 1, Y = 0)``, gives ``(1-2B)·Y``.
        Accepted trials are i.i.d. ``DLap(t/s)`` and fill the output in order.
        """
        b = exact_scale(scale)
        t, s = b.numerator, b.denominator
        n = 1 if size is None else int(size)
        if n < 0:
            raise NoiseError(f"size must be >= 0, got {size}")
        out = np.empty(n, dtype=np.int64)
        filled = 0
        rate = 0.6  # share of trials accepted; re-estimated each round (it depends on t/s only)
        while filled < n:
            want = n - filled
            m = int(want / rate * 1.05) + 16
            if t == 1:
                u = np.zeros(m, dtype=np.int64)  # U is uniform on {0}: always kept (e^0 = 1)
            else:
                u = self._gen.integers(0, t, size=m, dtype=np.int64)
                u = u[self._bernoulli_exp_unit(u, t)]
            y = (u + t * self._geometric(u.size)) // s
            negative = self._gen.integers(0, 2, size=y.size, dtype=np.int8).astype(bool)
            keep = ~(negative & (y == 0))
            z = np.where(negative, -y, y)[keep]
            rate = max(z.size / m, 0.05)
            z = z[:want]
            out[filled : filled + z.size] = z
            filled += z.size
        self.draws += n
        return int(out[0]) if size is None else out

    def discrete_exponential(self, t: int, size: int) -> np.ndarray:
        """``size`` exact draws of ``X`` with ``P(X = x) = (1 − e^{−1/t})·e^{−x/t}``, ``x = 0, 1, …``.

        The first stage of :meth:`discrete_laplace` (CKS Algorithm 2) on its own: ``U`` uniform on
        ``{0, …, t−1}`` kept with probability ``exp(−U/t)``, ``V`` geometric, ``X = U + tV``. It
        depends on ``t`` only, so one block of draws serves every scale ``t/s``: ``⌊X/s⌋`` with a fair
        sign, ``(−, 0)`` rejected, is ``DLap(t/s)`` exactly (how the lab draws many scales that each
        occur once, :class:`stream.lab.noise.PooledNoise`). ``t`` is a positive int below 2⁴⁰.
        """
        if isinstance(t, bool) or not isinstance(t, int | np.integer) or not 0 < int(t) < _EXACT_LIMIT:
            raise NoiseError(f"discrete_exponential needs an integer 0 < t < 2**40, got {t!r}")
        t = int(t)
        out = np.empty(int(size), dtype=np.int64)
        filled = 0
        while filled < out.size:
            m = int((out.size - filled) * 1.7) + 16
            if t == 1:
                u = np.zeros(m, dtype=np.int64)
            else:
                u = self._gen.integers(0, t, size=m, dtype=np.int64)
                u = u[self._bernoulli_exp_unit(u, t)]
            x = (u + t * self._geometric(u.size))[: out.size - filled]
            out[filled : filled + x.size] = x
            filled += x.size
        self.draws += out.size
        return out

    def fair_bits(self, size: int) -> np.ndarray:
        """``size`` independent fair booleans (one bounded integer in {0, 1} each)."""
        self.draws += int(size)
        return self._gen.integers(0, 2, size=int(size), dtype=np.int8).astype(bool)


@dataclass(frozen=True)
class Randomness:
    """Factory of per-(stream, timestep, purpose) noise drawers.

    Use :meth:`secure` in production and :meth:`seeded` only when a caller
    explicitly asks for reproducibility (tests, evaluation, replay with
    ``--seed``).
    """

    seed: int | None = None

    @classmethod
    def secure(cls) -> Randomness:
        """Fresh 128-bit keys from the OS CSPRNG for every drawer."""
        return cls(None)

    @classmethod
    def seeded(cls, seed: int) -> Randomness:
        """Reproducible drawers keyed from ``seed``. Never for production releases."""
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise NoiseError(f"seed must be a non-negative integer, got {seed!r}")
        return cls(seed)

    @property
    def reproducible(self) -> bool:
        return self.seed is not None

    def describe(self) -> str:
        return "secure" if self.seed is None else "seeded"

    def drawer(self, stream: str, timestep: int, purpose: str = "release") -> GeneratorDrawer:
        """A drawer for one purpose at one timestep of one stream."""
        if self.seed is None:
            key = int.from_bytes(secrets.token_bytes(16), "little")
        else:
            digest = hashlib.sha256(
                f"dpstream-noise-v1\x00{self.seed}\x00{stream}\x00{int(timestep)}\x00{purpose}".encode()
            ).digest()
            key = int.from_bytes(digest[:16], "little")
        return GeneratorDrawer(key)


# ---------------------------------------------------------------------------
# Closed forms of the discrete Laplace distribution (public maths, no data).


def _alpha(scale: Fraction | float) -> float:
    return math.exp(-1.0 / float(scale))


def discrete_laplace_pmf(z: np.ndarray | int, scale: Fraction | float) -> np.ndarray:
    """``P(Z = z) = (1 - a)/(1 + a) · a^|z|`` with ``a = exp(-1/scale)``."""
    a = _alpha(scale)
    return (1 - a) / (1 + a) * np.power(a, np.abs(np.asarray(z, dtype=np.float64)))


def discrete_laplace_variance(scale: Fraction | float) -> float:
    """``Var Z = 2a / (1 − a)²`` with ``a = exp(−1/scale)``, in counts² (``expm1`` for the small-scale end)."""
    x = 1.0 / float(scale)
    one_minus_a = -math.expm1(-x)
    return 2.0 * math.exp(-x) / (one_minus_a * one_minus_a)


def discrete_laplace_tail(k: int, scale: Fraction | float) -> float:
    """``P(|Z| >= k)``: 1 for k <= 0, else ``2·a^k / (1 + a)``."""
    if k <= 0:
        return 1.0
    a = _alpha(scale)
    return 2.0 * a**k / (1.0 + a)


def discrete_laplace_half_width(scale: Fraction | float, confidence: float) -> int:
    """Smallest integer ``h >= 0`` with ``P(|Z| <= h) >= confidence``.

    This is the accuracy of a count released with discrete Laplace noise of
    this scale: the true count lies within ``released ± h`` with the stated
    probability (over the noise, for that timestep).
    """
    if not 0.0 < confidence < 1.0:
        raise NoiseError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    beta = 1.0 - confidence
    a = _alpha(scale)
    # P(|Z| > h) = P(|Z| >= h+1) = 2a^{h+1}/(1+a) <= beta
    k = math.ceil(math.log(beta * (1.0 + a) / 2.0) / math.log(a)) if a > 0 else 1
    h = max(0, k - 1)
    # guard against rounding in the closed form
    while discrete_laplace_tail(h + 1, scale) > beta:
        h += 1
    while h > 0 and discrete_laplace_tail(h, scale) <= beta:
        h -= 1
    return h


def discrete_laplace_mean_abs(scale: Fraction | float) -> float:
    """``E|Z| = 2a / (1 - a²)``: the expected absolute error of one noisy count."""
    a = _alpha(scale)
    return 2.0 * a / (1.0 - a * a)
