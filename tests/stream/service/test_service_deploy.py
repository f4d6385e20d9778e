"""deploy/: the example production config validates, alert rules name real metrics, units are sane."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from stream.config import load_settings
from stream.service.metrics import Metrics

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def test_production_config_is_valid_and_uses_secure_noise():
    settings = load_settings(DEPLOY / "config.production.yaml")
    assert settings.randomness.seed is None  # production noise is always the OS CSPRNG
    assert settings.kafka.transactional_id and not settings.kafka.create_topics
    assert settings.service.state_dir == "/var/lib/dpstream"


def test_alert_rules_only_use_metrics_that_exist():
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    known = {m.name for m in Metrics().registry.collect()}
    samples = set()
    for fam in Metrics().registry.collect():
        samples |= {s.name for s in fam.samples}
        if fam.type == "counter":  # a labelled counter has no sample before its first child
            samples |= {fam.name + "_total"}
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert exprs
    for expr in exprs:
        for name in re.findall(r"\b(dpstream_[a-z0-9_]+)", str(expr)):
            assert name in known or name in samples, f"alert uses unknown metric {name}"


def test_systemd_unit_does_not_restart_a_refusal():
    unit = (DEPLOY / "systemd" / "dpstream@.service").read_text()
    assert "RestartPreventExitStatus=2" in unit and "KillSignal=SIGTERM" in unit


def test_kubernetes_probes_and_single_writer():
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "dpstream.yaml").read_text()))
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    assert sts["spec"]["replicas"] == 1
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
