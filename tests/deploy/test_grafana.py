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


def test_grouping_labels_exist_on_the_metrics_queried():
    """``sum by (kind)`` over a metric without a ``kind`` label draws one anonymous line: catch it."""
    import re

    m = Metrics()
    m.consumer_lag.labels("0").set(0)
    labels: dict[str, set[str]] = {}
    for fam in m.registry.collect():
        for s in fam.samples:
            labels.setdefault(s.name, set()).update(s.labels)
    for path in DASHBOARDS:
        for expr in dashboard_exprs(path):
            for group in re.findall(r"\bby \(([^)]*)\)", expr):
                have = set().union(*(labels.get(n, set()) for n in names_in(expr))) | {"le", "job", "instance"}
                for label in (g.strip() for g in group.split(",")):
                    assert label in have, f"{path.name}: groups by {label!r} in {expr}"
