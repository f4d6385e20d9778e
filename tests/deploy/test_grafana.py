"""The Grafana dashboard: valid JSON, every query names only metrics the service declares
(stream/service/metrics.py), every panel has a query. The live check against a running service's
/metrics is tests/deploy/test_live_metrics.py."""

from __future__ import annotations

import json

from stream.service.metrics import Metrics
from tests.deploy.metric_names import DASHBOARDS, dashboard_exprs, declared, names_in


def test_there_is_a_dashboard_and_every_panel_queries_something():
    assert DASHBOARDS
    for path in DASHBOARDS:
        dash = json.loads(path.read_text())
        assert dash["uid"] and dash["title"]
        for p in dash["panels"]:
            if p["type"] == "row":
                continue
            assert p.get("targets"), f"{path.name}: panel {p['title']!r} has no query"
            for t in p["targets"]:
                assert names_in(t["expr"]), f"{path.name}: {p['title']!r} queries no dpstream metric: {t['expr']}"
        ids = [p["id"] for p in dash["panels"]]
        assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_every_dashboard_query_names_a_declared_metric():
    known = declared(Metrics().registry)
    for path in DASHBOARDS:
        used = set().union(*(names_in(e) for e in dashboard_exprs(path)))
        assert used, path
        unknown = sorted(used - known)
        assert not unknown, f"{path.name} queries metrics the service does not export: {unknown}"


def test_the_check_is_not_vacuous():
    known = declared(Metrics().registry)
    assert "dpstream_releases_total" in known and "dpstream_seal_to_publish_seconds_bucket" in known
    assert names_in('rate(dpstream_release_total{job="dpstream"}[5m])') - known == {"dpstream_release_total"}
