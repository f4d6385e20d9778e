"""The public port (issue 14 items 1-2): the release API serves the published schemas, only
release bytes that are on the output topic, a bounded history, and nothing of the operator port.

The service runs for real (``run_service``: journal, engine, commit path) on Kafka faked in
process (``live_helpers.paced_service``)."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request

import jsonschema
import pytest

import stream.service.loop as loop_mod
from stream.config import ConfigError
from stream.messages import SCHEMA_DIR
from stream.service.kafka_io import KafkaIOError
from stream.service.public import STATIC_FILES, ReleaseFeed
from stream.service.testing import _FakeWriter
from tests.kafka_harness import wait_for
from tests.stream.service.live_helpers import paced_service, public_url, settings_for


def _validator(name):
    schema = json.loads((SCHEMA_DIR / name).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


RELEASE, DOMAIN = _validator("release.schema.json"), _validator("domain.schema.json")


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback test server
        return resp.status, dict(resp.headers), resp.read()


def _status(url, method="GET"):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as resp:  # noqa: S310
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _published(kafka):
    """Every value on the (fake) output topic, as committed."""
    return [value for _, _, value in kafka.tail]


def _release_indexes(kafka):
    docs = (json.loads(v) for v in _published(kafka))
    return sorted(d["timestep"]["index"] for d in docs if d["message_type"] == "release")


def _msg(index, pad=0):
    return json.dumps({"message_type": "release", "timestep": {"index": index}, "pad": "x" * pad}).encode()


# -- the bounded feed ----------------------------------------------------------------------


def test_feed_is_bounded_by_count_and_bytes_and_keyed_by_timestep():
    feed = ReleaseFeed(capacity=5, max_bytes=10_000)
    for i in range(12):
        feed.add(_msg(i))
    r = feed.retained()
    assert (r.first, r.last, r.count) == (7, 11, 5)
    assert [json.loads(m)["timestep"]["index"] for m in feed.between(8, 10)] == [8, 9]
    assert [json.loads(m)["timestep"]["index"] for m in feed.between(None, 9)] == [7, 8]
    assert feed.between(100) == [] and feed.between(9, 3) == []
    feed.add(_msg(11))  # a re-sent release replaces its copy
    assert feed.retained().count == 5
    assert feed.add(b'{"message_type":"domain"}') is False and feed.add(b"not json") is False
    feed.add(_msg(3))  # older than everything in a full feed: not kept
    assert feed.retained().first == 7

    by_bytes = ReleaseFeed(capacity=1000, max_bytes=2500)
    for i in range(10):
        by_bytes.add(_msg(i, pad=900))
    assert by_bytes.size_bytes <= 2500 and by_bytes.retained().last == 9 and by_bytes.retained().count == 2
    huge = ReleaseFeed(capacity=10, max_bytes=10)
    huge.add(_msg(0, pad=100))
    assert huge.latest() is not None  # the latest release is always kept

    gaps = ReleaseFeed(capacity=10)
    for i in (5, 2, 9, 3):
        gaps.add(_msg(i))
    assert [json.loads(m)["timestep"]["index"] for m in gaps.between()] == [2, 3, 5, 9]
    assert json.loads(gaps.latest())["timestep"]["index"] == 9


# -- the API on a running service ------------------------------------------------------------


def test_release_api_serves_the_published_schemas_and_only_published_bytes(tmp_path, monkeypatch):
    svc, kafka = paced_service(monkeypatch, settings_for(tmp_path), pace=0.05)
    with svc:
        base = public_url(svc)
        wait_for(lambda: svc.published() >= 8, 60, what="8 releases")
        published = _published(kafka)

        status, headers, body = _get(base + "/api/domain")
        domain = json.loads(body)
        DOMAIN.validate(domain)
        assert body in published  # the domain message, byte for byte as on the output topic
        assert domain["bins"] == 10 and domain["config"]["privacy"]["epsilon"] == "1"
        assert headers["Content-Type"] == "application/json"

        _, _, latest = _get(base + "/api/releases/latest")
        RELEASE.validate(json.loads(latest))
        assert latest in _published(kafka)  # read after the request: the topic only grows

        _, _, body = _get(base + "/api/releases?from=2&to=5")
        page = json.loads(body)
        assert [r["timestep"]["index"] for r in page["releases"]] == [2, 3, 4]
        docs = [json.loads(v) for v in _published(kafka)]
        for r in page["releases"]:
            RELEASE.validate(r)
            assert r in docs
        assert page["retained"]["first"] == 0 and page["retained"]["capacity"] == 1000

        _, _, body = _get(base + "/api/releases")
        everything = json.loads(body)["releases"]
        indexes = [r["timestep"]["index"] for r in everything]
        assert indexes == list(range(len(indexes))) and len(indexes) >= 8
        assert all(r in [json.loads(v) for v in _published(kafka)] for r in everything)

        _, _, body = _get(base + "/api")
        assert set(json.loads(body)["endpoints"]) == {"/api/domain", "/api/releases/latest",
                                                      "/api/releases?from=A&to=B",
                                                      "/api/query?where=ATTR:LOW-HIGH&where=...&timestep=N",
                                                      "/api/query?marginal=ATTR,ATTR&timestep=N"}


def test_public_port_is_not_the_operator_port(tmp_path, monkeypatch):
    svc, _ = paced_service(monkeypatch, settings_for(tmp_path), pace=0.05)
    with svc:
        base = public_url(svc)
        wait_for(lambda: svc.published() >= 1, 60, what="a release")
        for path in ("/metrics", "/healthz", "/readyz", "/domain", "/static/../loop.py", "/api/ledger"):
            status, body = _status(base + path)
            assert status == 404, path
            assert b"dpstream_" not in body
        code, body = _status(base + "/api/releases?from=abc")
        assert code == 400 and b"from='abc'" in body and b"whole number" in body
        assert _status(base + "/api/releases", method="POST")[0] == 405
        assert _status(svc.server.url + "/metrics")[0] == 200  # the operator port still has it
        assert svc.server.port != svc.service.public_server.port


def test_public_port_shows_nothing_the_output_topic_does_not_have(tmp_path, monkeypatch):
    """While transactions fail, releases are sealed (noise drawn, journaled) but not public: the
    public port must not show them. A variant that feeds the port at seal time fails this check."""

    def run(feed_at_seal: bool, state_dir) -> tuple[int, int]:
        mp = pytest.MonkeyPatch()
        try:
            svc, kafka = paced_service(mp, settings_for(state_dir), pace=0.05)
            failing = threading.Event()
            real_commit = _FakeWriter.commit

            def commit(self, records, offsets, seq):
                if failing.is_set():
                    raise KafkaIOError("broker unavailable (test)", retriable=True, action="commit transaction")
                return real_commit(self, records, offsets, seq)

            mp.setattr(_FakeWriter, "commit", commit)
            if feed_at_seal:  # the deliberately broken variant
                real_sealed = loop_mod.Service._on_sealed

                def sealed(self, s):
                    real_sealed(self, s)
                    if self.public is not None:
                        self.public.add(s.payload if isinstance(s.payload, bytes) else s.payload.encode())

                mp.setattr(loop_mod.Service, "_on_sealed", sealed)
            with svc:
                base = public_url(svc)
                wait_for(lambda: svc.published() >= 3, 60, what="3 releases")
                failing.set()
                time.sleep(1.5)  # input keeps arriving; timesteps seal; nothing commits
                on_topic = _release_indexes(kafka)[-1]
                shown = json.loads(_get(base + "/api/releases/latest")[2])["timestep"]["index"]
                failing.clear()
            return on_topic, shown
        finally:
            mp.undo()

    on_topic, shown = run(False, tmp_path / "good")
    assert shown == on_topic
    on_topic, shown = run(True, tmp_path / "broken")
    assert shown > on_topic, "the check did not catch a feed that shows unpublished releases"


def test_history_survives_a_restart_from_the_output_topic(tmp_path, monkeypatch):
    settings = settings_for(tmp_path)
    svc, kafka = paced_service(monkeypatch, settings, pace=0.05)
    with svc:
        wait_for(lambda: svc.published() >= 5, 60, what="5 releases")
    before = _release_indexes(kafka)
    svc2, _ = paced_service(monkeypatch, settings, pace=60, kafka=kafka)  # no new input for a minute
    with svc2:
        body = _get(public_url(svc2) + "/api/releases")[2]
    assert [r["timestep"]["index"] for r in json.loads(body)["releases"]][: len(before)] == before


def test_no_public_port_unless_configured_and_never_the_operator_port(tmp_path, monkeypatch):
    svc, _ = paced_service(monkeypatch, settings_for(tmp_path, public_port=None), pace=0.05)
    with svc:
        assert svc.service.public_server is None and svc.service.public is None
    with pytest.raises(ConfigError, match="public_port 8000 is also service.http_port"):
        settings_for(tmp_path, http_port=8000, public_port=8000)


def test_page_files_are_served_with_a_same_origin_policy_and_fetch_nothing_elsewhere(tmp_path, monkeypatch):
    svc, _ = paced_service(monkeypatch, settings_for(tmp_path), pace=0.05)
    with svc:
        base = public_url(svc)
        status, headers, html = _get(base + "/")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "default-src 'self'" in headers["Content-Security-Policy"]
        for name in STATIC_FILES:
            if name != "index.html":
                assert _get(base + "/static/" + name)[0] == 200
    # no external fetch: the only absolute URL in the page is the SVG namespace name
    for name in STATIC_FILES:
        text = (SCHEMA_DIR.parent / "service" / "static" / name).read_text()
        urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"')]*", text))
        assert urls <= {"http://www.w3.org/2000/svg"}, (name, urls)


def test_the_page_files_are_declared_package_data():
    """An installed (non-editable) dpstream must ship the page: every file matches a package-data glob."""
    import fnmatch
    import tomllib

    from tests.kafka_harness import ROOT

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["stream"]
    for name in STATIC_FILES:
        assert any(fnmatch.fnmatch(f"service/static/{name}", g) for g in globs), name
