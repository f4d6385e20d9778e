"""Metrics names and units, the HTTP endpoints, and log hygiene (no raw statistics)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from fractions import Fraction

from prometheus_client import CollectorRegistry, generate_latest

from stream.service.http import Health, HttpServer, make_app
from stream.service.metrics import NAMESPACE, Metrics

NAME = re.compile(r"^dpstream_[a-z0-9_]+$")


def _families(registry: CollectorRegistry) -> dict[str, str]:
    return {m.name: m.type for m in registry.collect()}


def test_every_metric_is_namespaced_and_conventional():
    m = Metrics()
    fams = _families(m.registry)
    assert fams, "no metrics registered"
    for name, kind in fams.items():
        assert NAME.match(name), name
        assert "_ms" not in name and "total_" not in name, name
        if kind == "histogram":
            assert name.endswith("_seconds"), name
    text = generate_latest(m.registry).decode()
    for line in text.splitlines():
        if line.startswith("dpstream_") and " " in line:
            sample = line.split("{")[0].split(" ")[0]
            if fams.get(sample.removesuffix("_total")) == "counter":
                assert sample.endswith("_total"), sample


def test_the_required_metrics_exist():
    names = set(_families(Metrics().registry))
    for required in ("dpstream_events_consumed", "dpstream_dead_letters", "dpstream_late_events",
                     "dpstream_timesteps_sealed", "dpstream_releases", "dpstream_epsilon_spent",
                     "dpstream_epsilon_remaining", "dpstream_consumer_lag_records",
                     "dpstream_step_duration_seconds", "dpstream_budget_exhausted",
                     "dpstream_seal_to_publish_seconds"):
        assert required in names, required


def test_registry_is_injected_not_global():
    from prometheus_client import REGISTRY

    before = set(_families(REGISTRY))
    a, b = Metrics(), Metrics()  # two instances do not clash
    a.events_consumed.inc(3)
    assert b.registry.get_sample_value("dpstream_events_consumed_total") == 0
    assert set(_families(REGISTRY)) == before


def test_budget_gauges_and_labels():
    m = Metrics()
    m.set_budget(budget=Fraction(1), spent=Fraction(1, 3), remaining=Fraction(2, 3), exhausted=False)
    assert abs(m.registry.get_sample_value("dpstream_epsilon_remaining") - 2 / 3) < 1e-12
    m.set_budget(budget=Fraction(1), spent=Fraction(1), remaining=Fraction(0), exhausted=True)
    assert m.registry.get_sample_value("dpstream_budget_exhausted") == 1
    m.count_rejections({"malformed_json": 2, "timestep_sealed": 5})
    assert m.registry.get_sample_value("dpstream_dead_letters_total", {"reason": "malformed_json"}) == 2
    assert m.registry.get_sample_value("dpstream_late_events_total") == 5
    assert m.registry.get_sample_value("dpstream_releases_total", {"kind": "republished"}) == 0
    assert NAMESPACE == "dpstream"


def test_http_server_endpoints_without_kafka():
    m, health = Metrics(), Health()
    server = HttpServer(make_app(m.registry, health, lambda: b'{"message_type":"domain"}'), "127.0.0.1", 0).start()
    try:
        def get(path: str) -> tuple[int, bytes, str]:
            try:
                with urllib.request.urlopen(server.url + path, timeout=5) as r:  # noqa: S310 - loopback
                    return r.status, r.read(), r.headers.get("Content-Type", "")
            except urllib.error.HTTPError as err:
                return err.code, err.read(), ""

        assert get("/healthz")[0] == 200  # liveness never depends on the broker
        status, body, _ = get("/readyz")
        assert status == 503 and json.loads(body)["state"] == "starting"
        health.set(True, "running")
        assert get("/readyz")[0] == 200
        status, body, ctype = get("/metrics")
        assert status == 200 and b"dpstream_events_consumed_total" in body and ctype.startswith("text/plain")
        assert get("/domain")[1] == b'{"message_type":"domain"}'
        assert get("/missing")[0] == 404
        req = urllib.request.Request(server.url + "/metrics", method="POST", data=b"x")
        try:
            urllib.request.urlopen(req, timeout=5)  # noqa: S310
            raise AssertionError("POST accepted")
        except urllib.error.HTTPError as err:
            assert err.code == 405
    finally:
        server.stop()


def _classify(registry: CollectorRegistry) -> list[str]:
    """Problems: families without a class, labels outside the closed set."""
    from stream.service.metrics import CLASSES, LABELS

    problems = []
    for family in registry.collect():
        if family.name not in CLASSES:
            problems.append(f"{family.name}: no class in stream.service.metrics.CLASSES")
        if family.type == "info":
            continue  # build info: its labels are public configuration (stream id, method)
        for sample in family.samples:
            extra = set(sample.labels) - LABELS - ({"le"} if family.type == "histogram" else set())
            if extra:
                problems.append(f"{family.name}: labels {sorted(extra)} outside the closed set")
    return problems


def test_every_metric_is_classified_and_labelled_from_a_closed_set():
    from prometheus_client import Counter

    from stream.service.metrics import CLASSES

    m = Metrics()
    m.info.info({"stream": "s", "decision": "dsat"})
    m.consumer_lag.labels("0").set(3)
    assert _classify(m.registry) == []
    assert set(CLASSES) == set(_families(m.registry)), "CLASSES lists a metric that no longer exists"
    # an unclassified family, and a label that could carry a timestep, are both caught
    Counter("last_timestep_late_events", "raw figure", ["timestep"], namespace="dpstream",
            registry=m.registry).labels("7").inc(3)
    problems = _classify(m.registry)
    assert any("last_timestep_late_events: no class" in p for p in problems)
    assert any("labels ['timestep']" in p for p in problems)


def test_counters_are_cumulative_over_the_service_life():
    """No family is a gauge of a per-timestep figure: every gauge is public, health, or lag."""
    from stream.service.metrics import CLASSES

    m = Metrics()
    gauges = {f.name for f in m.registry.collect() if f.type == "gauge"}
    volume_gauges = {g for g in gauges if CLASSES[g] == "volume"}
    assert volume_gauges == {"dpstream_consumer_lag_records"}  # input not yet read, per partition
