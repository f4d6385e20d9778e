"""Audit of private threshold alerts (issue 33 item 3; ``docs/privacy.md`` §14.1).

Exact, on a recorded engine run of the production :class:`~controller.private_alerts.AlertingPolicy`
(user-level DSAT + LPA, two private alerts, a stream that rises above one threshold): per alert,
the ledger charges its ε_a once, at timestep 0, before its first draw; exactly one draw at the
threshold scale (ρ) and one at the query scale per tested timestep; the ε those draws provide by
Lyu et al.'s bound (Δ/b_ρ + 2cΔ/b_ν, from the *recorded* scales) is at most the charge; each
published answer equals ``q + ν ≥ above + ρ`` recomputed from the recorded draws and the true
counts; nothing is tested at a fresh timestep or after c positives; the whole ledger stays within ε.

Statistical: the Clopper–Pearson lower bound (``tests/dp_audit.py``) over the adversarial SVT
pairs, with the noise scales the production alert draws, is at most the charged ε_a.

Broken variants, each caught: query noise not scaled by c; the instance charged half its ε; ρ redrawn
at every test.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from controller.private_alerts import AlertingPolicy, svt_positive
from controller.step import Engine
from histogram.noise import Randomness
from histogram.testing import RecordingDrawer
from stream.service.testing import small_settings
from tests.dp_audit import SVTParams, Variant, audit, svt_pairs, svt_sampler

EPSILON, SHARE = Fraction(8), Fraction(1, 4)


def _settings() -> Any:
    return small_settings(
        queries=[{"name": "f", "where": {"sex": "F"}, "private": {"above": 150, "max_alerts": 3}},
                 {"name": "old", "where": {"age": "7-9"}, "private": {"above": 10_000, "max_alerts": 2}}],
        alerts={"private_share": str(SHARE)}, release={"decision": "dsat"},
        privacy={"epsilon": int(EPSILON), "horizon": 30, "cutoff": 4})


def _counts(t: int) -> np.ndarray:
    c = np.zeros(20, dtype=np.int64)
    c[1::2] = 12 if t < 8 else 30  # sex F: 120, then 300 from timestep 8
    c[0::2] = 10
    return c


class _Undercharged(AlertingPolicy):
    """Broken: the instance is charged half its ε (its draws are those of the whole ε_a)."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        spend = ctx.accountant.spend
        ctx.accountant.spend = lambda t, e, purpose: spend(t, e / 2 if purpose.startswith("alert:") else e, purpose)
        try:
            return super().decide(state, ctx)
        finally:
            del ctx.accountant.spend  # the class's method again (a copy must not inherit the patch)


class _Redrawn(AlertingPolicy):
    """Broken: a fresh ρ at every test (charged once)."""

    def decide(self, state, ctx):  # type: ignore[no-untyped-def]
        if any(r is not None for r in state["rho"]):
            state = {**state, "rho": [int(ctx.noise.discrete_laplace(a.calibration.threshold_scale))
                                      for a in self.alerts]}
        return super().decide(state, ctx)


def _engine(variant: str) -> Engine:
    engine = _settings().engine()
    policy = engine.policy
    alerts = policy.alerts
    if variant == "query noise not scaled by c":
        alerts = tuple(replace(a, calibration=replace(a.calibration, query_factor=Fraction(2, a.calibration.cutoff)))
                       for a in alerts)
    cls = {"undercharged": _Undercharged, "threshold redrawn": _Redrawn}.get(variant, AlertingPolicy)
    return Engine(cls(policy.inner, alerts, policy.unit), engine.mechanism, engine.bins)


def _run(variant: str, timesteps: int = 20) -> tuple[Engine, list[Any], list[list[Any]]]:
    engine = _engine(variant)
    state = engine.initial_state()
    randomness = Randomness.seeded(3)
    releases, tapes = [], []
    for t in range(timesteps):
        drawer = RecordingDrawer(randomness.drawer("audit", t))
        release, state = engine.step(state, _counts(t), drawer)
        releases.append(release)
        tapes.append(drawer.tape)
    return engine, releases, tapes


def _split(tape: list[Any], policy: AlertingPolicy, tested: list[int]) -> tuple[list[Any], dict[int, Any]]:
    """The alerts' draws of one timestep: the leading scalar draws at an alert's threshold scale
    (ρ, drawn before the decision), and the last scalar draws, one per tested alert in alert order
    (ν, drawn after the decision, before the release's vector of noise)."""
    scalars = [d for d in tape if d.kind == "discrete_laplace" and d.size is None]
    thresholds = {a.calibration.threshold_scale for a in policy.alerts}
    lead = 0
    while lead < len(scalars) and scalars[lead].scale in thresholds:
        lead += 1
    tail = scalars[len(scalars) - len(tested):] if tested else []
    return scalars[:lead], dict(zip(tested, tail, strict=True))


def exact_violations(variant: str) -> list[str]:
    """Every way the recorded run breaks the rules the proof needs (empty: sound)."""
    engine, releases, tapes = _run(variant)
    policy = engine.policy
    out: list[str] = []
    if releases[-1].epsilon_spent > EPSILON:
        out.append(f"the ledger spent {releases[-1].epsilon_spent} > ε {EPSILON}")
    rho: dict[int, list[Any]] = {i: [] for i in range(len(policy.alerts))}
    nus: dict[int, list[Any]] = {i: [] for i in range(len(policy.alerts))}
    positives = [0] * len(policy.alerts)
    for t, (release, tape) in enumerate(zip(releases, tapes, strict=True)):
        tested = [i for i, o in enumerate(release.private_alerts) if o["tested"]]
        lead, tail = _split(tape, policy, tested)
        if t == 0 and len(lead) < len(policy.alerts):
            out.append("the thresholds were not drawn at timestep 0")
        for k, d in enumerate(lead):
            rho[k % len(policy.alerts)].append((t, d))
        for i in tested:
            a, o = policy.alerts[i], release.private_alerts[i]
            if release.kind == "fresh" or positives[i] >= a.calibration.cutoff:
                out.append(f"{a.name}: tested at timestep {t} (fresh or past its cutoff)")
            nu = tail[i]
            nus[i].append(nu)
            q = int(_counts(t)[list(a.bins)].sum())
            current = rho[i][-1][1].values.item()
            if bool(svt_positive(q, nu.values.item(), a.above, current)) != o["fired"]:
                out.append(f"{a.name}: the published answer at {t} is not q + ν ≥ above + ρ")
            positives[i] += int(o["fired"])
    for i, a in enumerate(policy.alerts):
        cal = a.calibration
        charges = [e for r in releases for e in r.ledger if e.purpose == f"alert:{a.name}"]
        charged = sum((e.epsilon for e in charges), Fraction(0))
        want = EPSILON * SHARE / len(policy.alerts)
        if charged != want or any(e.start != 0 for e in charges):
            out.append(f"{a.name}: charged {charged} (want {want}, once at timestep 0)")
        if len(rho[i]) != 1:
            out.append(f"{a.name}: {len(rho[i])} threshold draws (want one, at timestep 0)")
        # the ε the recorded draws provide (Lyu et al.: Δ/b_ρ + 2cΔ/b_ν), from the recorded scales
        delta = Fraction(cal.sensitivity)
        provided = sum((delta / Fraction(d.scale) for _, d in rho[i][:1]), Fraction(0))
        provided += max((2 * cal.cutoff * delta / Fraction(d.scale) for d in nus[i]), default=Fraction(0))
        if provided > charged:
            out.append(f"{a.name}: the draws provide ε {provided} > charged {charged}")
    return out


def test_the_production_alerts_are_sound_exactly() -> None:
    assert exact_violations("correct") == []
    _, releases, _ = _run("correct")
    fired = [r.timestep for r in releases if r.private_alerts[0]["fired"]]
    assert fired and min(fired) >= 8, "the rise at timestep 8 is caught between fresh releases"
    assert any(r.private_alerts[0]["tested"] for r in releases)


def test_the_statistical_bound_is_at_most_the_charge() -> None:
    cal = _engine("correct").policy.alerts[0].calibration
    variant = Variant("production", SVTParams.from_calibration(cal), cal.epsilon, False, "the shipped alert")
    results = audit(svt_sampler(variant, svt_pairs(cal.sensitivity)), seed=11, runs=100_000, select_runs=50_000)
    worst = max(r.lower_bound for r in results.values())
    assert worst <= float(cal.epsilon), f"lower bound {worst} > charged {cal.epsilon}"


VARIANTS = ("query noise not scaled by c", "undercharged", "threshold redrawn")


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_broken_private_alert_is_caught(variant: str) -> None:
    assert exact_violations(variant), f"{variant}: the exact audit found nothing"
