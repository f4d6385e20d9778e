"""The alert rules are unit-tested with ``promtool test rules`` (deploy/prometheus/alerts_test.yml):
a healthy service pages nobody; broker down, release loop stuck and process down page; budget
exhausted only informs; a restart is not a stall. The tests are shown to fail on broken rules."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from tests.deploy.promtool import PROMETHEUS, run

RULES = PROMETHEUS / "alerts.yml"
TESTS = PROMETHEUS / "alerts_test.yml"


def _alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_rules_are_valid():
    out = run("check", "rules", str(RULES), cwd=PROMETHEUS)
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests_pass():
    out = run("test", "rules", TESTS.name, cwd=PROMETHEUS)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_the_healthy_case_checks_every_alert_and_each_scenario_is_there():
    doc = yaml.safe_load(TESTS.read_text())
    by_name = {t["name"]: t for t in doc["tests"]}
    healthy = by_name["healthy service pages nobody"]
    silent = {c["alertname"] for c in healthy["alert_rule_test"] if c["exp_alerts"] == []}
    assert silent == {a["alert"] for a in _alerts()}, "the healthy case must assert silence for every alert"
    fired = {c["alertname"] for t in doc["tests"] for c in t["alert_rule_test"] if c["exp_alerts"]}
    assert {"DpstreamBrokerUnreachable", "DpstreamNotReady", "DpstreamReleasesStalled", "DpstreamDown",
            "DpstreamBudgetExhausted", "DpstreamQueryAlert"} <= fired
    exhausted = by_name["budget exhausted informs, does not page"]
    labels = [a["exp_labels"]["severity"] for c in exhausted["alert_rule_test"] for a in c["exp_alerts"]]
    assert labels == ["info"]


def test_every_page_alert_names_the_scrape_job():
    """Every selector in the rules carries job="dpstream": the job deploy/ scrapes (test_deploy.py)."""
    for rule in _alerts():
        for sel in re.findall(r"\b((?:dpstream_[a-z0-9_]+|up)(\{[^}]*\})?)", rule["expr"]):
            assert 'job="dpstream"' in sel[1], f"{rule['alert']}: {sel[0]} does not select the scrape job"


def _broken(tmp_path: Path, edit) -> str:
    tmp_path.mkdir()
    shutil.copy(TESTS, tmp_path / TESTS.name)
    (tmp_path / RULES.name).write_text(edit(RULES.read_text()))
    out = run("test", "rules", TESTS.name, cwd=tmp_path)
    assert out.returncode != 0, "promtool tests passed on broken rules: they test nothing"
    return out.stdout + out.stderr


def test_the_unit_tests_fail_on_broken_rules(tmp_path):
    # the shipped rules' old job label (the k8s pod-annotation job): broker/ready/down pages never fire
    text = _broken(tmp_path / "a", lambda s: s.replace('job="dpstream"', 'job="kubernetes-pods"'))
    assert "DpstreamBrokerUnreachable" in text
    # the stalled-release rule without the start-time guard pages after every restart
    text = _broken(tmp_path / "b", lambda s: re.sub(r" and \(time\(\) - dpstream_start_time_seconds[^)]*\)", "", s))
    assert "DpstreamReleasesStalled" in text
    # a NotReady rule on a gauge nobody sets (what main shipped): the healthy case pages
    text = _broken(tmp_path / "c", lambda s: s.replace('dpstream_ready{job="dpstream"} == 0',
                                                       'absent(dpstream_readiness{job="dpstream"})'))
    assert "DpstreamNotReady" in text
    # declared queries (issue 33): a rule that never sees the counted alert event stays silent on the rise
    text = _broken(tmp_path / "d", lambda s: s.replace('increase(dpstream_alerts_total{job="dpstream"}[15m]) > 0',
                                                       'dpstream_alerts_total{job="dpstream"} > 1'))
    assert "declared query rise notifies" in text
    # ... and one on the raw released answer (no noise model) notifies on a steady, noisy stream
    text = _broken(tmp_path / "e", lambda s: s.replace('increase(dpstream_alerts_total{job="dpstream"}[15m]) > 0',
                                                       'dpstream_query_value{job="dpstream"} > 102'))
    assert "declared query steady stream is quiet" in text
