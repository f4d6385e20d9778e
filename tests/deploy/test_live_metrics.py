"""A running service (embedded broker, a few releases) exports every metric the alert rules and the
dashboard use, and its real /metrics page — fed to ``promtool test rules`` as the input series —
pages nobody (main's ``dpstream_ready`` stayed 0 and paged DpstreamNotReady on a healthy service:
the same page with ``dpstream_ready`` forced to 0 is shown to fire)."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.metric_names import DASHBOARDS, alert_exprs, dashboard_exprs, names_in
from tests.deploy.promtool import PROMETHEUS, promtool, run
from tests.kafka_harness import (  # noqa: F401 - fixtures
    InProcessService,
    broker,
    event,
    heartbeat,
    produce,
    service_config,
    settings_from,
    wait_for,
)

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def scrape(broker, tmp_path_factory) -> str:  # noqa: F811
    cfg = service_config(broker.bootstrap, tmp_path_factory.mktemp("live") / "state", seed=3)
    # a declared query with detectors (issue 33): its dpstream_query_* and dpstream_alerts series
    # must be on the page (the alert rule and the dashboard panels use them), and it pages nobody
    cfg["queries"] = [{"name": "young_f", "where": {"age": "0-2", "sex": "F"},
                       "detectors": [{"kind": "threshold", "above": 1.0e9}, {"kind": "cusum", "limit": 5}]}]
    settings = settings_from(cfg)
    with InProcessService(settings) as svc:
        topic = settings.kafka.input_topic
        produce(broker.bootstrap, topic, [json.dumps(event(f"u{i}", t)).encode() for t in range(3) for i in range(5)]
                + [b"not json"])
        heartbeat(broker.bootstrap, topic, 3)
        wait_for(lambda: svc.published() >= 3, timeout=60, what="three releases")
        wait_for(lambda: svc.metrics.registry.get_sample_value("dpstream_consumer_lag_records", {"partition": "0"})
                 is not None
                 and svc.health.is_ready(), what="lag measured and ready")
        with urllib.request.urlopen(svc.server.url + "/metrics", timeout=5) as r:  # noqa: S310 - loopback
            return r.read().decode()


def _exported(text: str) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_every_alert_and_dashboard_metric_is_on_a_running_services_metrics_page(scrape):
    exported = _exported(scrape)
    used = set().union(*(names_in(e) for e in alert_exprs()))
    for path in DASHBOARDS:
        used |= set().union(*(names_in(e) for e in dashboard_exprs(path)))
    missing = sorted(used - exported)
    assert not missing, f"used by alerts/dashboards but not exported by a running service: {missing}"
    values = {s.name: s.value for fam in text_string_to_metric_families(scrape) for s in fam.samples if not s.labels}
    assert values["dpstream_ready"] == 1 and values["dpstream_broker_connected"] == 1
    assert values["dpstream_last_release_timestamp_seconds"] > 0 and values["dpstream_start_time_seconds"] > 0
    labelled = {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(scrape) for s in fam.samples}
    value = labelled[("dpstream_query_value", (("query", "young_f"),))]
    width = labelled[("dpstream_query_half_width", (("query", "young_f"),))]
    assert value == value and width > 0, "a released answer and its interval, not the NaN placeholders"
    assert labelled[("dpstream_alerts_total", (("detector", "threshold"), ("query", "young_f")))] == 0
    # bounded cardinality: one series per declared query (and detector), never per bin
    assert sum(1 for k in labelled if k[0] == "dpstream_query_value") == 1
    assert sum(1 for k in labelled if k[0] == "dpstream_query_detector_statistic") == 2


def _series(text: str, ready: float | None = None) -> list[dict[str, str]]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            value = ready if (ready is not None and s.name == "dpstream_ready") else s.value
            labels = {**s.labels, "job": "dpstream", "instance": "live:8000"}
            sel = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
            text = " ".join(["NaN"] * 41) if value != value else f"{value!r}x40"  # a detector before its baseline
            out.append({"series": f"{s.name}{{{sel}}}", "values": text})
    out.append({"series": 'up{instance="live:8000",job="dpstream"}', "values": "1x40"})
    return out


def _promtool_on(tmp_path: Path, series: list[dict[str, str]]) -> Any:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    names = [r["alert"] for g in rules["groups"] for r in g["rules"]]
    doc = {"rule_files": ["alerts.yml"], "evaluation_interval": "1m",
           "tests": [{"name": "live service", "interval": "1m", "input_series": series,
                      "alert_rule_test": [{"eval_time": "30m", "alertname": n, "exp_alerts": []} for n in names]}]}
    shutil.copy(PROMETHEUS / "alerts.yml", tmp_path / "alerts.yml")
    (tmp_path / "live_test.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return run("test", "rules", "live_test.yml", cwd=tmp_path)


def test_a_healthy_running_service_pages_nobody(scrape, tmp_path):
    promtool()
    out = _promtool_on(tmp_path, _series(scrape))
    assert out.returncode == 0, out.stdout + out.stderr
    (tmp_path / "broken").mkdir()
    broken = _promtool_on(tmp_path / "broken", _series(scrape, ready=0.0))  # main: ready never set
    assert broken.returncode != 0 and "DpstreamNotReady" in broken.stdout + broken.stderr
