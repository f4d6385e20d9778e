"""Model releases on the public port (issue 15 item 3): the release API serves model-release
messages that validate against their schema, and the live page, in real headless Chromium
(Debian's ``chromium`` driven by Playwright, as ``test_live_page.py``), draws one bar chart per
attribute's released marginal and the copula's correlation as a heat map, each value as published.

``DPSTREAM_WRITE_FIGURES=1`` also writes the screenshot to ``docs/figures/live-page-model.png``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.request

import jsonschema
import pytest

from stream.config import load_settings
from stream.messages import SCHEMA_DIR
from tests.kafka_harness import wait_for
from tests.stream.service.live_helpers import TWO_D, paced_service, public_url
from tests.stream.service.test_live_page import CHROMIUM, FIGURES, Watched

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed "
                               "(pip install -e '.[test]')")


def _validator(name):
    schema = json.loads((SCHEMA_DIR / name).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _settings(state_dir, release):
    return load_settings(None, **{
        "stream": {"id": "live-model", "timestep": "1s", "start": "2023-11-14T22:13:20Z"},
        "schema": {"attributes": TWO_D},
        "privacy": {"unit": "user-level", "epsilon": 20, "horizon": 200, "cutoff": 12, "population": 600},
        "release": release,
        "kafka": {"input_topic": "in", "output_topic": "out", "record_time": "log-append-time",
                  "create_topics": False},
        "service": {"state_dir": str(state_dir), "poll_timeout": "20ms", "http_port": 0, "public_port": 0},
    })


COPULA = {"decision": "dsat", "mechanism": "copula", "threshold": 0.1, "copula": {"synthetic_size": 30}}
MARGINALS = {"decision": "dsat", "mechanism": "marginals", "threshold": 0.1,
             "marginals": {"k": 2, "consistency": False}}


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback test server
        return resp.read()


@pytest.mark.parametrize("release", [COPULA, MARGINALS], ids=["copula", "marginals"])
def test_the_release_api_serves_model_releases_valid_under_their_schema(tmp_path, monkeypatch, release):
    svc, _ = paced_service(monkeypatch, _settings(tmp_path / "state", release), pace=0.05,
                           two_d=True, events_per_step=600, burst=12)
    model_v, release_v = _validator("model-release.schema.json"), _validator("release.schema.json")
    with svc:
        wait_for(lambda: svc.published() >= 12, 60, 0.1, "12 releases")
        base = public_url(svc)
        page = json.loads(_get(base + "/api/releases?from=0"))
        latest = _get(base + "/api/releases/latest")
        index = json.loads(_get(base + "/api"))
    assert len(page["releases"]) >= 12
    for doc in page["releases"]:
        model_v.validate(doc)
        assert not release_v.is_valid(doc)  # a histogram consumer tells it apart
    model_v.validate(json.loads(latest))
    assert "model-release.schema.json" in index["endpoints"]["/api/releases/latest"]
    kinds = {d["kind"] for d in page["releases"]}
    assert kinds == {"fresh", "republished"}
    for doc in page["releases"]:
        assert (doc["model"]["correlation"] is None) == (release is MARGINALS)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y chromium)")
def test_live_page_draws_marginal_bars_and_the_correlation_heat_map(tmp_path, monkeypatch):
    svc, _ = paced_service(monkeypatch, _settings(tmp_path / "state", COPULA), pace=0.25, two_d=True,
                           events_per_step=600, burst=20)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            with svc:
                wait_for(lambda: svc.published() >= 20, 60, 0.1, "20 releases before the page opens")
                w = Watched(browser, public_url(svc))
                wait_for(lambda: w.count("#marginals svg") == 2, 30, 0.1, "one bar chart per attribute")
                assert w.count("#marginals rect.mbar") == 8 + 5  # x: 8 bins, y: 5 bins
                assert w.count("#chart rect.cell") == 0  # no per-bin heat map: a model has no count per bin
                wait_for(lambda: w.count("#corr rect.corr-cell") == 4, 30, 0.1, "the 2 x 2 correlation heat map")
                wait_for(lambda: w.count("#series circle.pt") >= 20, 30, 0.1, "the history in the time series")
                first = w.count("#series circle.pt")
                wait_for(lambda: w.count("#series circle.pt") >= first + 2, 30, 0.1, "the series to grow")
                for _ in range(20):  # read the page and the release it claims to show at one moment
                    before = w.text("#timestep")
                    r = w.shown_release()
                    bars = w.page.locator("#marginals rect.mbar").evaluate_all(
                        "els => els.map(e => Number(e.getAttribute('data-count')))")
                    corr = w.page.locator("#corr rect.corr-cell").evaluate_all(
                        "els => els.map(e => Number(e.getAttribute('data-value')))")
                    texts = w.page.locator("#corr text.cell-text").evaluate_all("els => els.map(e => e.textContent)")
                    kind, accuracy = w.text("#kind"), w.text("#accuracy")
                    if w.text("#timestep") == before:
                        break
                assert r["message_type"] == "model-release" and kind == r["kind"]
                # one bar chart per attribute: the one-way tables (the pairwise decision space also
                # publishes the model's two-way table, followed as cells after them)
                published = [c for t in r["model"]["marginals"] if len(t["attributes"]) == 1 for c in t["counts"]]
                assert bars == published
                flat = [v for row in r["model"]["correlation"] for v in row]
                assert corr == pytest.approx(flat, abs=1e-9)
                assert texts == [f"{v:.2f}" for v in flat]
                widths = r["accuracy"]["half_width"]  # the one-way counts' interval; the two-way table claims none
                hw = {w for w in widths if w is not None} if isinstance(widths, list) else {widths}
                assert len(hw) == 1 and accuracy == f"± {hw.pop():g} per marginal count at 95%"
                assert "kendall" in w.text("#method") and "copula" in w.text("#method")
                assert re.search(r"Synthetic sample: 30 records", w.text("#chart-note"))
                assert not w.page.locator("#corr-panel").get_attribute("hidden")
                # follow a marginal bar over time
                w.page.locator('#marginals rect.mbar[data-bin="3"]').click()
                assert w.text("#selection") == "cell 3 (x 37.5–50)"
                w.page.locator('#marginals rect.mbar[data-bin="9"]').click()
                assert w.text("#selection") == "cell 9 (y 20–40)"
                assert w.page.locator("#marginals rect.mbar.selected").count() == 1
                shot = tmp_path / "live-model.png"
                w.close(shot)
                if os.environ.get("DPSTREAM_WRITE_FIGURES") == "1":
                    FIGURES.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(shot, FIGURES / "live-page-model.png")
        finally:
            browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y chromium)")
def test_live_page_shows_k_way_marginals_without_a_heat_map(tmp_path, monkeypatch):
    """k-way marginals (k = 2, consistent): one bar chart per attribute, no correlation panel, the
    accuracy card says no interval is claimed, and a cell of the 2-way table can be followed."""
    release = {"decision": "uniform", "mechanism": "marginals", "marginals": {"k": 2}}
    svc, _ = paced_service(monkeypatch, _settings(tmp_path / "state", release), pace=0.25, two_d=True,
                           events_per_step=600, burst=6)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            with svc:
                wait_for(lambda: svc.published() >= 6, 60, 0.1, "6 releases before the page opens")
                w = Watched(browser, public_url(svc))
                wait_for(lambda: w.count("#marginals rect.mbar") == 8 + 5, 30, 0.1, "the one-way bars")
                wait_for(lambda: w.count("#series circle.pt") >= 6, 30, 0.1, "the history in the time series")
                assert w.count("#corr rect.corr-cell") == 0
                assert w.page.locator("#corr-panel").get_attribute("hidden") is not None
                assert w.text("#accuracy") == "no interval claimed (consistent tables)"
                assert "1 released table(s) of 2 or more attributes" in w.text("#chart-note")
                for _ in range(20):  # the page and the release it claims to show, read at one moment
                    before = w.text("#timestep")
                    r = w.shown_release()
                    bars = w.page.locator("#marginals rect.mbar").evaluate_all(
                        "els => els.map(e => Number(e.getAttribute('data-count')))")
                    if w.text("#timestep") == before:
                        break
                published = [c for t in r["model"]["marginals"][:2] for c in t["counts"]]
                assert bars == pytest.approx(published, abs=1e-9)
                # cell 13 is the 2-way table's first cell (after 8 + 5 one-way cells)
                w.page.fill("#sel-to", "13")
                # the page re-renders on every poll: a field being typed in keeps what was typed
                published_then = svc.published()
                wait_for(lambda: svc.published() >= published_then + 2, 10, 0.05, "two more releases")
                w.page.wait_for_timeout(500)  # at least two polls of 200 ms render them
                assert w.page.input_value("#sel-to") == "13"
                w.page.fill("#sel-from", "13")
                w.page.dispatch_event("#select-form", "change")
                wait_for(lambda: w.text("#selection") == "cell 13 (x 0–12.5, y 0–20)", 10, 0.1, "the 2-way cell")
                w.close(tmp_path / "live-marginals.png")
        finally:
            browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y chromium)")
def test_live_page_counts_a_box_from_the_model(tmp_path, monkeypatch):
    """The page's box form asks /api/query; the shown answer is the API's for the same box, and
    the API's is the released copula's (checked in tests/stream/service/test_query_api.py)."""
    svc, _ = paced_service(monkeypatch, _settings(tmp_path / "state", COPULA), pace=0.5, two_d=True,
                           events_per_step=600, burst=6)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            with svc:
                wait_for(lambda: svc.published() >= 6, 60, 0.1, "6 releases before the page opens")
                w = Watched(browser, public_url(svc))
                wait_for(lambda: w.count("#query-ranges select") == 4, 30, 0.1, "a range per attribute")
                w.page.select_option("#q-lo-0", "2")
                w.page.select_option("#q-hi-0", "5")
                w.page.select_option("#q-hi-1", "1")
                w.page.click("#query-run")
                wait_for(lambda: w.page.get_attribute("#query-answer", "data-answer") is not None, 20, 0.1,
                         "the answer")
                shown = float(w.page.get_attribute("#query-answer", "data-answer"))
                note = w.text("#query-note")
                timestep = int(re.search(r"Timestep (\d+)", note).group(1))
                api = json.loads(_get(public_url(svc) + f"/api/query?where=x:2-5&where=y:0-1&timestep={timestep}"))
                assert shown == api["answer"] and "copula probability (exact)" in note
                assert api["query"]["box"] == {"x": [2, 5], "y": [0, 1]}
                w.close(tmp_path / "live-query.png")
        finally:
            browser.close()
