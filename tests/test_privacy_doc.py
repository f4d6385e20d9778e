"""docs/privacy.md and the code agree on the calibration constants."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest

from controller.method import MethodSpec, build_policy
from controller.policies.sampling import DistanceSamplingPolicy, WEventSamplingPolicy
from controller.svt import SVTCalibration, optimal_decision_share, user_level_k
from controller.units import UserLevel, WEvent

DOC = Path(__file__).resolve().parents[1] / "docs" / "privacy.md"


def table_rows() -> list[list[str]]:
    text = DOC.read_text()
    block = re.search(r"<!-- calibration-table -->(.*?)<!-- /calibration-table -->", text, re.S)
    assert block, "docs/privacy.md lost its calibration table"
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in block.group(1).strip().splitlines()[2:]
    ]
    assert len(rows) >= 4
    return rows


@pytest.mark.parametrize("row", table_rows(), ids=lambda r: "-".join(r[:4]))
def test_calibration_table_matches_code(row):
    eps1, c, delta, split, share, t_scale, q_scale = row
    cal = SVTCalibration.build(Fraction(eps1), int(c), int(delta), split)  # type: ignore[arg-type]
    assert cal.threshold_share == Fraction(share)
    assert cal.threshold_scale == Fraction(t_scale)
    assert cal.query_scale == Fraction(q_scale)
    # Lyu et al.'s bound for non-monotonic queries: Δ/b_t + 2cΔ/b_q = ε₁, exactly
    assert cal.privacy_loss_bound() == Fraction(eps1)
    assert int(delta) / cal.threshold_scale + 2 * int(c) * int(delta) / cal.query_scale == Fraction(eps1)


def test_thesis_calibration_costs_one_and_a_half_epsilon():
    """The printed calibration (threshold Lap(2Δ/ε₁), query Lap(2cΔ/ε₁)) under-charges."""
    eps1, c = Fraction(1, 2), 3
    thesis = SVTCalibration(eps1, c, 1, Fraction(1, 2), query_factor=Fraction(1))
    assert thesis.threshold_scale == 2 / eps1 and thesis.query_scale == 2 * c / eps1
    assert thesis.privacy_loss_bound() == Fraction(3, 2) * eps1


def test_user_level_budget_split_adds_up():
    policy = build_policy(MethodSpec("dsat", UserLevel(1, 500, 5), population=500_000), 27_648)
    assert isinstance(policy, DistanceSamplingPolicy)
    assert policy.epsilon_decision + policy.unit.cutoff * policy.per_release == 1
    assert policy.calibration.cutoff == 4  # c = C - 1
    assert abs(float(policy.k) - 0.0535) < 0.001  # the value quoted in §3.1 item 5


def test_w_event_allocation_fills_every_window_exactly():
    policy = build_policy(MethodSpec("dsat", WEvent(1, 20, 3), population=1000), 400)
    assert isinstance(policy, WEventSamplingPolicy)
    assert (policy.unit.cutoff + 1) * policy.per_instance + policy.unit.cutoff * policy.per_release == 1
    assert policy.calibration.cutoff == 1


def test_k_formula_is_the_minimiser():
    a, b = 37.0, 5000.0
    k = optimal_decision_share(a, b)
    f = lambda x: a / x**2 + b / (1 - x) ** 2  # noqa: E731
    assert f(k) <= min(f(k * 0.99), f(k * 1.01))
    assert float(user_level_k(100, 10, 20, 1, "lyu")) <= 1 - 10 / 20 + 1e-4


def test_the_timing_section_states_the_shipped_schedule():
    """§1.3 says what the timing of releases reveals; its formula and default must be the code's."""
    from datetime import timedelta

    from stream.config import ServiceSection
    from stream.service.schedule import PublishSchedule
    from stream.service.testing import small_settings

    text = DOC.read_text()
    section = re.search(r"### 1\.3 When releases are published.*?(?=\n## 2\.)", text, re.S)
    assert section, "docs/privacy.md lost §1.3 (what the timing of releases reveals)"
    body = section.group(0)
    assert "**`on-schedule`** (the default)" in body and ServiceSection().publish == "on-schedule"
    assert "`S(c) = D(c) + clock_skew + publish_margin`" in body
    for mode in ("when-complete", "log-append-time", "trusted-create-time", "watermark", "replay"):
        assert mode in body, f"§1.3 does not say what the timing reveals under {mode}"
    s = small_settings(stream={"timestep": "60s", "allowed_lateness": "7s", "clock_skew": "5s", "start": 0},
                       kafka={"record_time": "log-append-time"}, service={"publish_margin": "2s"})
    sched = PublishSchedule.from_settings(s)
    assert sched is not None and sched.release_us(0) == (60 + 7 + 5 + 2) * 10**6  # D(0) + skew + margin
    assert ServiceSection().publish_margin == timedelta(seconds=1)
