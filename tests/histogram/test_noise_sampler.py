"""N1: the production discrete Laplace sampler has the exact pmf (reliability catalogue N1).

For each scale b, 50,000 draws from the real path (``Randomness.secure()``,
AES-CTR keyed from the OS CSPRNG) are checked against
``P(z) = (1−a)/(1+a)·a^|z|``, ``a = e^{−1/b}``:

* chi-square over the integers whose expected count is >= 5, the two
  outermost bins absorbing the tails (so every bin has expected count >= 5);
* P(0) = (1−a)/(1+a) at z = 6;
* symmetry: a sign test (P(Z>0) = P(Z<0)) at z = 6 and a chi-square of the
  ±k pairs;
* the log-ratio slope ln P(k+1)/P(k) = ln a: its maximum-likelihood
  estimate solves mean|Z| = 2a/(1−a²), so a z = 6 test of mean|Z| tests the
  slope.

Rejection rule for a chi-square with ``df`` degrees of freedom: statistic >
``max(df + 6·sqrt(2·df), q)`` with ``P(χ²_df > q) = 1e-7``. The first term is the OpenDP
rule the catalogue names; alone it rejects a correct sampler with
probability 6e-5 at df = 10 (the chi-square is skewed at small df), so the
exact 1e-7 quantile is used where it is larger. z = 6 tests reject a correct
sampler with probability ~2e-9 (normal approximation; every count involved is
in the hundreds or more). Each assertion therefore flakes with probability
< 1e-6.

The same checker must reject deliberately wrong samplers: scale × 0.9 at
every scale, and a continuous Laplace rounded to the nearest integer at the
scales where 50,000 draws can tell it apart (b <= 2; at b = 10 its P(0)
differs from the discrete one by 2.4 % relative, 1.2 standard errors).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy.special import chdtri

from histogram.noise import GeneratorDrawer, Randomness, discrete_laplace_pmf
from histogram.testing import Draw, RecordingDrawer, ReplayDrawer, TapeMismatch

ROOT = Path(__file__).resolve().parents[2]
# integers, and rationals whose numerator and denominator both matter in the exact sampler
# (39225/1516 is a calibrated SVT threshold scale from docs/privacy.md §2.4)
SCALES = (Fraction(1, 2), Fraction(1), Fraction(2), Fraction(7, 3), Fraction(10), Fraction(39225, 1516), Fraction(100))
DRAWS = 50_000
Z = 6.0
CHI2_FLAKE = 1e-7


def chi2_limit(df: int) -> float:
    """Reject above this: OpenDP's df + 6·sqrt(2·df), or the exact 1e-7 quantile if larger."""
    exact = float(chdtri(df, CHI2_FLAKE))  # q with P(χ²_df > q) = 1e-7
    return max(df + 6.0 * math.sqrt(2.0 * df), exact)


@dataclass
class SamplerReport:
    scale: Fraction
    failures: list[str] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


def check_discrete_laplace(sample: np.ndarray, scale: Fraction) -> SamplerReport:
    """All N1 checks of ``sample`` against the discrete Laplace of ``scale``."""
    z = np.asarray(sample, dtype=np.int64)
    n = z.size
    report = SamplerReport(scale)
    a = math.exp(-1.0 / float(scale))

    # -- chi-square: bins -K..K with expected >= 5, tails merged into ±K
    k_max = 0
    while n * float(discrete_laplace_pmf(k_max + 1, scale)) >= 5:
        k_max += 1
    support = np.arange(-k_max, k_max + 1)
    expected = n * discrete_laplace_pmf(support, scale)
    tail = n * a ** (k_max + 1) / (1 + a)  # P(Z > K) = a^{K+1}/(1+a)
    expected[0] += tail
    expected[-1] += tail
    observed = np.bincount(np.clip(z, -k_max, k_max) + k_max, minlength=support.size)
    stat = float(((observed - expected) ** 2 / expected).sum())
    df = support.size - 1
    report.stats.update(chi2=stat, df=df, chi2_limit=chi2_limit(df))
    if df > 0 and stat > chi2_limit(df):
        report.failures.append(f"chi-square {stat:.1f} > {chi2_limit(df):.1f} (df={df})")

    # -- P(0)
    p0 = (1 - a) / (1 + a)
    z_p0 = (np.count_nonzero(z == 0) / n - p0) / math.sqrt(p0 * (1 - p0) / n)
    report.stats["z_p0"] = z_p0
    if abs(z_p0) > Z:
        report.failures.append(f"P(0): z = {z_p0:.1f}")

    # -- symmetry: sign test and ±k pairs
    pos, neg = np.count_nonzero(z > 0), np.count_nonzero(z < 0)
    z_sign = (pos - neg) / math.sqrt(pos + neg)
    report.stats["z_sign"] = z_sign
    if abs(z_sign) > Z:
        report.failures.append(f"sign symmetry: z = {z_sign:.1f}")
    counts_pos = np.bincount(np.clip(z, 0, None), minlength=k_max + 1)[1 : k_max + 1]
    counts_neg = np.bincount(np.clip(-z, 0, None), minlength=k_max + 1)[1 : k_max + 1]
    tot = counts_pos + counts_neg
    keep = tot >= 10
    if keep.any():
        sym = float(((counts_pos - counts_neg)[keep] ** 2 / tot[keep]).sum())
        sdf = int(keep.sum())
        report.stats.update(sym_chi2=sym, sym_df=sdf)
        if sym > chi2_limit(sdf):
            report.failures.append(f"±k symmetry chi-square {sym:.1f} > {chi2_limit(sdf):.1f} (df={sdf})")

    # -- log-ratio slope: MLE of ln a from mean|Z| = 2a/(1−a²)
    mean_abs = float(np.abs(z).mean())
    exp_abs = 2 * a / (1 - a * a)
    var_abs = 2 * a / (1 - a) ** 2 - exp_abs**2  # E Z² − (E|Z|)²
    z_slope = (mean_abs - exp_abs) / math.sqrt(var_abs / n)
    a_hat = (math.sqrt(1 + mean_abs**2) - 1) / mean_abs if mean_abs > 0 else 0.0
    report.stats.update(z_slope=z_slope, slope=math.log(a), slope_hat=math.log(a_hat) if a_hat > 0 else -math.inf)
    if abs(z_slope) > Z:
        report.failures.append(f"log-ratio slope {report.stats['slope_hat']:.4f} vs {math.log(a):.4f}: z = {z_slope:.1f}")
    return report


# ---------------------------------------------------------------------------
# samplers


def production(scale: Fraction, timestep: int) -> np.ndarray:
    drawer = Randomness.secure().drawer("n1-audit", timestep, "sampler-test")
    return np.asarray(drawer.discrete_laplace(scale, DRAWS))


def too_narrow(scale: Fraction, timestep: int) -> np.ndarray:
    """Deliberately wrong: the production sampler at 0.9 × the scale."""
    return production(scale * Fraction(9, 10), timestep)


def rounded_continuous(scale: Fraction, timestep: int) -> np.ndarray:
    """Deliberately wrong: continuous Laplace b·(E1 − E2) rounded to the nearest integer."""
    e = np.random.default_rng(1000 + timestep).standard_exponential(2 * DRAWS)
    return np.rint(float(scale) * (e[:DRAWS] - e[DRAWS:])).astype(np.int64)


def test_checker_closed_forms_agree_with_the_noise_module():
    for scale in SCALES:
        a = math.exp(-1 / float(scale))
        ks = np.arange(-20000, 20001)
        pmf = discrete_laplace_pmf(ks, scale)
        assert pmf.sum() == pytest.approx(1.0, abs=1e-9)
        assert float((np.abs(ks) * pmf).sum()) == pytest.approx(2 * a / (1 - a * a), rel=1e-9)
        assert float((ks**2 * pmf).sum()) == pytest.approx(2 * a / (1 - a) ** 2, rel=1e-9)


@pytest.mark.parametrize("scale", SCALES, ids=str)
def test_production_sampler_has_the_exact_pmf(scale):
    report = check_discrete_laplace(production(scale, 1), scale)
    assert report.ok, (report.failures, report.stats)


@pytest.mark.parametrize("scale", SCALES, ids=str)
def test_checker_rejects_a_sampler_at_0_9_times_the_scale(scale):
    report = check_discrete_laplace(too_narrow(scale, 2), scale)
    assert not report.ok, report.stats
    # the slope test alone has power ~20 standard errors at every scale
    assert abs(report.stats["z_slope"]) > 2 * Z, report.stats


@pytest.mark.parametrize("scale", [s for s in SCALES if s <= 2], ids=str)
def test_checker_rejects_a_rounded_continuous_laplace(scale):
    report = check_discrete_laplace(rounded_continuous(scale, 3), scale)
    # expected |z| of the P(0) test: 68 at b = 1/2, 31 at b = 1, 12 at b = 2
    assert not report.ok, report.stats
    assert abs(report.stats["z_p0"]) > Z, report.stats


def test_rounded_continuous_laplace_is_indistinguishable_at_large_scales():
    """Documented limit of N1: at b >= 10 rounding differs from the exact pmf by ~1 standard error."""
    for scale in (Fraction(10), Fraction(100)):
        a = math.exp(-1 / float(scale))
        exact_p0 = (1 - a) / (1 + a)
        rounded_p0 = 1 - math.exp(-0.5 / float(scale))
        assert abs(exact_p0 - rounded_p0) < 2 * math.sqrt(exact_p0 / DRAWS)


# ---------------------------------------------------------------------------
# reproducibility of the two sources


def test_seeded_drawers_are_reproducible_and_keyed_by_every_coordinate():
    scale = Fraction(5)

    def draw(seed=11, stream="s", timestep=3, purpose="release"):
        return np.asarray(Randomness.seeded(seed).drawer(stream, timestep, purpose).discrete_laplace(scale, 200))

    base = draw()
    assert np.array_equal(base, draw())
    highs = np.array([2, 3, 1000, 2**40])
    assert (
        Randomness.seeded(11).drawer("s", 3).uniform_int(highs).tolist()
        == Randomness.seeded(11).drawer("s", 3).uniform_int(highs).tolist()
    )
    for other in (draw(timestep=4), draw(seed=12), draw(stream="t"), draw(purpose="decision")):
        assert not np.array_equal(base, other)
    # a drawer is a stream: consecutive calls continue it (they do not restart it), and the
    # same sequence of calls on a new drawer with the same key gives the same values
    d1, d2 = (Randomness.seeded(11).drawer("s", 3, "release") for _ in range(2))
    first = [d1.discrete_laplace(scale, 100), d1.discrete_laplace(scale), d1.discrete_laplace(scale, 100)]
    again = [d2.discrete_laplace(scale, 100), d2.discrete_laplace(scale), d2.discrete_laplace(scale, 100)]
    assert not np.array_equal(first[0], first[2])
    for x, y in zip(first, again, strict=True):
        assert np.array_equal(x, y)


def test_secure_drawers_are_not_reproducible():
    r = Randomness.secure()
    assert not r.reproducible
    a = np.asarray(r.drawer("s", 3, "release").discrete_laplace(Fraction(5), 200))
    b = np.asarray(Randomness.secure().drawer("s", 3, "release").discrete_laplace(Fraction(5), 200))
    c = np.asarray(r.drawer("s", 3, "release").discrete_laplace(Fraction(5), 200))
    # P(two independent draws agree) <= (max pmf)^200 = 0.1^200
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_sampler_refuses_bad_scales():
    from histogram.errors import NoiseError

    d = GeneratorDrawer(1)
    for bad in (0, -1, 0.5, Fraction(-1, 2), True):
        with pytest.raises(NoiseError):
            d.discrete_laplace(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# histogram.testing: the tape drawers


def test_recording_and_replaying_a_tape():
    rec = RecordingDrawer(Randomness.seeded(5).drawer("s", 0))
    x = rec.discrete_laplace(Fraction(3))
    y = rec.discrete_laplace(Fraction(7, 2), 4)
    u = rec.uniform_int(np.array([5, 6, 7]))
    b = rec.bernoulli_exp(np.array([0, 3]), 2)
    assert [d.kind for d in rec.tape] == ["discrete_laplace", "discrete_laplace", "uniform_int", "bernoulli_exp"]
    assert rec.draws == 1 + 4 + 3 + 2
    rep = ReplayDrawer(rec.tape)
    assert rep.discrete_laplace(Fraction(3)) == x and isinstance(x, int)
    assert np.array_equal(rep.discrete_laplace(Fraction(7, 2), 4), y)
    assert np.array_equal(rep.uniform_int(np.array([5, 6, 7])), u)
    with pytest.raises(TapeMismatch):
        ReplayDrawer(rec.tape[3:]).bernoulli_exp(np.array([0, 3]), 3)  # another denominator
    assert np.array_equal(rep.bernoulli_exp(np.array([0, 3]), 2), b)
    rep.assert_exhausted()
    with pytest.raises(TapeMismatch):
        rep.uniform_int(np.array([1]))


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.discrete_laplace(Fraction(4)),  # wrong scale
        lambda r: r.discrete_laplace(Fraction(3), 1),  # wrong size (array instead of scalar)
        lambda r: r.uniform_int(np.array([2])),  # wrong kind
    ],
)
def test_replay_refuses_a_call_that_was_not_recorded(call):
    tape = [Draw("discrete_laplace", Fraction(3), None, np.array([2]))]
    with pytest.raises(TapeMismatch):
        call(ReplayDrawer(tape))
    with pytest.raises(TapeMismatch):
        ReplayDrawer(tape).assert_exhausted()


def test_no_production_module_imports_the_test_drawers():
    offenders = []
    for package in ("histogram", "controller", "stream"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "histogram" / "testing.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    mod = node.module or ""
                    if node.level:  # relative import: resolve against the module's package
                        base = path.relative_to(ROOT).parts[: -node.level]
                        mod = ".".join((*base, mod) if mod else base)
                    names = [mod] + [f"{mod}.{a.name}" for a in node.names]
                if any(n == "histogram.testing" or n.startswith("histogram.testing.") for n in names):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


# ---------------------------------------------------------------------------
# exactness: only bounded integers come out of the generator, and the primitives have their laws


class IntegersOnly:
    """A generator stand-in that offers bounded integers and nothing else (no floats to lean on)."""

    def __init__(self, inner: np.random.Generator) -> None:
        self._inner = inner
        self.calls = 0

    def integers(self, low, high, size=None, dtype=np.int64):  # type: ignore[no-untyped-def]
        self.calls += 1
        return self._inner.integers(low, high, size=size, dtype=dtype)


def test_every_sampler_uses_only_bounded_integers():
    d = Randomness.seeded(3).drawer("exact", 0)
    only = IntegersOnly(d._gen)
    d._gen = only  # type: ignore[assignment]
    d.discrete_laplace(Fraction(39225, 1516), 1000)
    d.discrete_laplace(Fraction(1, 3))
    d.bernoulli_exp(np.array([0, 1, 5, 37]), 10)
    d.uniform_int(np.array([3, 9]))
    d.discrete_exponential(39225, 100)
    d.fair_bits(10)
    assert only.calls > 0  # and nothing else was reachable: any float method raises AttributeError


def _z(hits: int, n: int, p: float) -> float:
    return (hits - n * p) / math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(37, 10), Fraction(9, 1000)], ids=str)
def test_bernoulli_exp_has_probability_exp_minus_gamma(gamma):
    n = 400_000
    d = Randomness.seeded(7).drawer("bexp", 0)
    # mixed numerators exercise the per-entry threshold path as well as the constant one
    num = np.tile(np.array([gamma.numerator, 0], dtype=np.int64), n)
    out = d.bernoulli_exp(num, gamma.denominator)
    assert out[1::2].all()  # γ = 0 is always True
    constant = d.bernoulli_exp(np.full(n, gamma.numerator, dtype=np.int64), gamma.denominator)
    if gamma == 0:
        assert out.all() and constant.all()
        return
    assert abs(_z(int(out[0::2].sum()), n, math.exp(-float(gamma)))) < Z
    assert abs(_z(int(constant.sum()), n, math.exp(-float(gamma)))) < Z


def test_bernoulli_exp_law_is_exact_for_a_hand_checked_case():
    """γ = 1/2 with the threshold table enumerated: the probability is the alternating series."""
    from histogram.noise import _threshold_plan

    depth, fact = _threshold_plan(2)
    # P(K > k) = T_k / N must equal (1/2)^k / k! exactly for every k the table covers
    top = 2**depth * fact[depth]
    for k in range(1, depth + 1):
        assert Fraction(2 ** (depth - k) * (fact[depth] // fact[k]), top) == Fraction(1, 2**k * fact[k])


def test_uniform_int_is_uniform_and_checks_bounds():
    from histogram.errors import NoiseError

    d = Randomness.seeded(8).drawer("uint", 0)
    x = d.uniform_int(np.full(300_000, 6))
    counts = np.bincount(x, minlength=6)
    assert counts.size == 6
    stat = float(((counts - 50_000) ** 2 / 50_000).sum())
    assert stat < chi2_limit(5)
    with pytest.raises(NoiseError):
        d.uniform_int(np.array([3, 0]))
    with pytest.raises(NoiseError):
        d.bernoulli_exp(np.array([-1]), 2)


def test_exact_scale_keeps_small_fractions_and_rounds_huge_ones_up():
    from histogram.noise import exact_scale

    assert exact_scale(Fraction(39225, 1516)) == Fraction(39225, 1516)
    tiny = Fraction(1, 3) + Fraction(1, 2**70)  # denominator beyond the exact range
    rounded = exact_scale(tiny)
    assert rounded >= tiny and rounded - tiny < Fraction(1, 2**36)
    assert rounded.numerator < 2**40 and rounded.denominator < 2**40
    report = check_discrete_laplace(production(tiny, 9), tiny)
    assert report.ok, (report.failures, report.stats)


# ---------------------------------------------------------------------------
# the first stage on its own (the lab assembles many scales from it)


@pytest.mark.parametrize("t", [1, 3, 40], ids=str)
def test_discrete_exponential_has_the_geometric_law(t):
    """``P(X = x) = (1 − a)·a^x`` with ``a = e^{−1/t}``: P(0) and the mean within 4 standard errors."""
    x = Randomness.secure().drawer("n1-audit", 6, "exp").discrete_exponential(t, DRAWS)
    a = math.exp(-1 / t)
    p0 = 1 - a
    assert abs(np.count_nonzero(x == 0) / DRAWS - p0) <= 4 * math.sqrt(p0 * (1 - p0) / DRAWS)
    mean, var = a / (1 - a), a / (1 - a) ** 2
    assert abs(float(x.mean()) - mean) <= 4 * math.sqrt(var / DRAWS)
    assert int(x.min()) >= 0


def test_discrete_exponential_checks_t_and_fair_bits_are_fair():
    from histogram.errors import NoiseError

    d = Randomness.seeded(3).drawer("s", 1, "exp")
    for bad in (0, -1, 2**40, 1.5, True):
        with pytest.raises(NoiseError, match="0 < t < 2"):
            d.discrete_exponential(bad, 3)  # type: ignore[arg-type]
    bits = d.fair_bits(100_000)
    assert abs(int(bits.sum()) - 50_000) <= 4 * math.sqrt(25_000)
    again = Randomness.seeded(3).drawer("s", 1, "exp")
    assert np.array_equal(Randomness.seeded(3).drawer("s", 2, "e").discrete_exponential(7, 50),
                          Randomness.seeded(3).drawer("s", 2, "e").discrete_exponential(7, 50))
    assert again.fair_bits(5).dtype == bool
