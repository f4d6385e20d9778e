"""The live page in a real browser (issue 14 item 1): headless Chromium from Debian's ``chromium``
package, driven by Playwright (no browser download), against a running service.

What a person sees is asserted: one bar per bin (1-D) or one cell per bin (2-D), the latest
timestep and its kind as published, the budget as published, a time series that grows while
releases arrive, fresh and republished points told apart, the accuracy band's wording for a
bin and for a range, and no request to any other origin.

``DPSTREAM_WRITE_FIGURES=1`` also writes the screenshots to ``docs/figures/live-page.png`` (1-D)
and ``docs/figures/live-page-2d.png``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from tests.kafka_harness import (  # noqa: F401
    InProcessService,
    broker,
    event,
    produce,
    service_config,
    settings_from,
    wait_for,
)
from tests.stream.service.live_helpers import paced_service, public_url, settings_for

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed "
                               "(pip install -e '.[test]')")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                "(apt-get install -y chromium; .ci/run does it as root)")
FIGURES = Path(__file__).resolve().parents[3] / "docs" / "figures"


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


class Watched:
    """A page plus every request it made and every script error it hit."""

    def __init__(self, browser, base: str) -> None:
        self.base = base
        self.page = browser.new_page(viewport={"width": 1100, "height": 1000})
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(base + "/?poll=200")

    def text(self, selector: str) -> str:
        return self.page.locator(selector).inner_text()

    def count(self, selector: str) -> int:
        return self.page.locator(selector).count()

    def shown_release(self) -> dict:
        """The release message of the timestep the page shows (from the API, for comparison)."""
        index = int(re.fullmatch(r"Timestep (\d+)", self.text("#timestep")).group(1))
        with urllib.request.urlopen(f"{self.base}/api/releases?from={index}&to={index + 1}") as resp:  # noqa: S310
            (release,) = json.loads(resp.read())["releases"]
        return release

    def close(self, screenshot: Path, figure: str | None = None) -> None:
        self.page.screenshot(path=str(screenshot), full_page=True)
        if figure and os.environ.get("DPSTREAM_WRITE_FIGURES") == "1":
            FIGURES.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(screenshot, FIGURES / figure)
        self.page.close()
        assert not self.errors, self.errors
        foreign = [u for u in self.requests if not u.startswith(self.base) and not u.startswith("data:")]
        assert not foreign, f"the page fetched from other origins: {foreign}"


def _wait(predicate, what: str, timeout: float = 30.0):
    return wait_for(predicate, timeout, 0.1, what)


def _assert_cards_match(w: Watched, bars: bool = False) -> dict:
    """Read the cards and the release they claim to show, at one moment (retried across a refresh)."""
    for _ in range(20):
        before = w.text("#timestep")
        r = w.shown_release()
        kind, budget, accuracy = w.text("#kind"), w.text("#budget"), w.text("#accuracy")
        negative = w.count("#chart rect.bar.neg")
        if w.text("#timestep") == before:
            break
    if bars:  # negative counts are drawn below zero, in their own colour
        assert negative == sum(1 for c in r["counts"] if c < 0)
    assert kind == r["kind"]
    spent = float(re.fullmatch(r"ε ([0-9.e-]+) of 1 used", budget).group(1))
    assert spent == pytest.approx(r["epsilon_spent"], rel=1e-3, abs=1e-9)
    hw = r["accuracy"]["half_width"]
    assert isinstance(hw, float) and accuracy == f"± {hw:g} per bin at 95%"
    return r


def test_live_page_shows_a_1d_stream_as_bars_updating_live(browser, tmp_path, monkeypatch):
    svc, _ = paced_service(monkeypatch, settings_for(tmp_path / "state"), pace=0.25, events_per_step=600,
                           burst=45)
    with svc:
        _wait(lambda: svc.published() >= 40, "40 releases before the page opens")
        w = Watched(browser, public_url(svc))
        _wait(lambda: w.count("#chart rect.bar") == 10, "10 bars")
        _wait(lambda: w.count("#series circle.pt") >= 40, "the history in the time series")
        first_points, first_step = w.count("#series circle.pt"), w.text("#timestep")
        _wait(lambda: w.count("#series circle.pt") >= first_points + 3, "the series to grow by 3 points")
        assert w.text("#timestep") != first_step
        assert w.text("#conn") == "live"
        # fresh and republished points are told apart (DSAT republishes most timesteps)
        _wait(lambda: w.count("#series circle.pt.republished") >= 1, "a republished point")
        assert w.count("#series circle.pt.fresh") >= 1
        _assert_cards_match(w, bars=True)
        assert not w.page.locator("#declared-panel").is_visible()  # no declared query: no panel
        assert "fresh releases: " in w.text("#budget-note") and "of at most 12" in w.text("#budget-note")
        # follow a bin, then a range
        w.page.locator('#chart rect.bar[data-bin="3"]').click()
        assert w.text("#selection") == "bin 3 (x 30–40)"
        assert "± the half-width" in w.text("#band-note")
        w.page.locator('#chart rect.bar[data-bin="5"]').click(modifiers=["Shift"])
        assert w.text("#selection") == "bins 3–5 (sum of 3)"
        assert "union bound" in w.text("#band-note")
        assert w.count("#series path.band") >= 1
        assert w.page.locator("#chart rect.bar.selected").count() == 3
        w.close(tmp_path / "live-1d.png", "live-page.png")


@contextlib.contextmanager
def _heat_map_page(browser, tmp_path, monkeypatch, releases: int):
    """A paced 2-D service (a release every 0.25 s) and its live page, open once ``releases`` were
    published and its 40 heat-map cells are drawn."""
    svc, _ = paced_service(monkeypatch, settings_for(tmp_path / "state", two_d=True), pace=0.25,
                           two_d=True, events_per_step=600, burst=40)
    with svc:
        _wait(lambda: svc.published() >= releases, f"{releases} releases before the page opens")
        w = Watched(browser, public_url(svc))
        _wait(lambda: w.count("#chart rect.cell") == 40, "40 heat-map cells")
        yield w


def test_live_page_shows_a_2d_stream_as_a_heat_map(browser, tmp_path, monkeypatch):
    with _heat_map_page(browser, tmp_path, monkeypatch, 35) as w:
        assert w.count("#chart rect.bar") == 0
        _wait(lambda: w.count("#series circle.pt") >= 35, "the history in the time series")
        _assert_cards_match(w)
        w.page.locator('#chart rect.cell[data-bin="7"]').click()
        assert w.text("#selection") == "bin 7 (x 12.5–25, y 40–60)"
        w.close(tmp_path / "live-2d.png", "live-page-2d.png")


def test_a_press_on_a_cell_counts_though_a_release_rebuilds_the_chart_before_the_button_comes_up(
        browser, tmp_path, monkeypatch):
    """The chart is rebuilt at every release (four a second here). A selection made on ``click``
    was lost when the press and the release of the button straddled a rebuild (seen in CI under
    load: the selection stayed at bin 0); the press itself selects."""
    with _heat_map_page(browser, tmp_path, monkeypatch, 20) as w:
        cell, boxes = w.page.locator('#chart rect.cell[data-bin="7"]'), []
        # None while a rebuild has just detached the cell (its place on the page does not move)
        _wait(lambda: boxes.append(cell.bounding_box()) or boxes[-1] is not None, "the cell's place on the page")
        box = boxes[-1]
        w.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        first = w.text("#timestep")
        w.page.mouse.down()
        _wait(lambda: w.text("#timestep") != first, "a release to rebuild the chart under the pressed button")
        w.page.mouse.up()
        assert w.text("#selection") == "bin 7 (x 12.5–25, y 40–60)"
        w.close(tmp_path / "press.png")


@pytest.mark.kafka
def test_live_page_on_the_embedded_broker(browser, broker, tmp_path):  # noqa: F811
    s = settings_from(service_config(broker.bootstrap, tmp_path, seed=5, kafka={"topic_partitions": 1},
                                     service={"public_port": 0}))
    with InProcessService(s) as svc:
        w = Watched(browser, public_url(svc))
        _wait(lambda: w.text("#stream") == s.stream.id, "the domain", 60)
        seen = []
        for ts in range(6):  # one timestep of input at a time; the next one's records seal it
            produce(broker.bootstrap, s.kafka.input_topic,
                    [json.dumps(event(f"u{i}", ts, age=10 * (i % 10), sex="MF"[i % 2])).encode() for i in range(30)])
            if ts >= 1:
                _wait(lambda ts=ts: svc.published() >= ts, f"{ts} releases", 60)
                _wait(lambda ts=ts: w.count("#series circle.pt") >= ts, f"{ts} points on the page", 30)
                seen.append(w.count("#series circle.pt"))
            time.sleep(0.2)
        assert seen == sorted(seen) and seen[-1] > seen[0]  # it updated live, point by point
        assert w.count("#chart rect.cell") == 20  # SMALL_ATTRIBUTES: age (10 bins) x sex (2)
        r = w.shown_release()
        assert w.text("#kind") == r["kind"]
        w.close(tmp_path / "live-kafka.png")


def test_live_page_rides_out_a_service_restart(browser, tmp_path, monkeypatch):
    """Stop the service under an open page: it says so and keeps what it showed; start it again on
    the same port: the page resumes by itself, and the series continues without duplicates."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = settings_for(tmp_path / "state", public_port=port)
    svc, kafka = paced_service(monkeypatch, settings, pace=0.2, events_per_step=600)
    with svc:
        w = Watched(browser, public_url(svc))
        _wait(lambda: w.count("#series circle.pt") >= 4, "4 points")
    _wait(lambda: w.text("#conn") == "reconnecting…", "the page to notice the stop")
    shown = w.count("#series circle.pt")
    assert shown >= 4 and w.count("#chart rect.bar") == 10  # what it showed stays on screen
    svc2, _ = paced_service(monkeypatch, settings, pace=0.2, events_per_step=600, kafka=kafka)
    with svc2:
        _wait(lambda: w.text("#conn") == "live", "the page to reconnect")
        _wait(lambda: w.count("#series circle.pt") >= shown + 3, "the series to continue")
        steps = [int(t) for t in w.page.locator("#series circle.pt").evaluate_all(
            "els => els.map(e => e.getAttribute('data-timestep'))")]
        assert steps == list(range(steps[0], steps[0] + len(steps)))  # every timestep once, in order
        w.close(tmp_path / "restart.png")


def test_live_page_shows_the_declared_queries_of_the_release(browser, tmp_path, monkeypatch):
    """Issue 33: the panel shows each declared query's answer and interval exactly as the shown
    release message carries them (and is hidden on a stream without declared queries)."""
    from stream.config.alerts import QuerySettings

    settings = settings_for(tmp_path / "state")
    settings = settings.model_copy(update={"queries": [QuerySettings(name="low_x", where={"x": "0-3"}),
                                                       QuerySettings(name="all_x")]})
    svc, _ = paced_service(monkeypatch, settings, pace=0.25, events_per_step=300, burst=5)
    with svc:
        _wait(lambda: svc.published() >= 5, "5 releases")
        w = Watched(browser, public_url(svc))
        _wait(lambda: w.count("#declared-rows tr") == 2, "two declared-query rows")
        for _ in range(20):  # read the panel and the release it shows at one moment
            before = w.text("#timestep")
            r = w.shown_release()
            cells = {n: w.text(f'#declared-rows tr[data-query="{n}"] .declared-value') for n in ("low_x", "all_x")}
            if w.text("#timestep") == before:
                break
        answers = {q["name"]: q for q in r["queries"]}
        assert answers["low_x"]["value"] == sum(r["counts"][:4])
        for name, shown in cells.items():
            assert float(shown) == pytest.approx(answers[name]["value"], rel=1e-3)
        assert "±" in w.text('#declared-rows tr[data-query="low_x"]')
        assert w.page.locator("#declared-panel").is_visible()
        w.close(tmp_path / "live-declared.png")


def test_live_page_of_a_delayed_stream_says_how_late_and_how_far_it_smoothed(browser, tmp_path, monkeypatch):
    """``release.delay: 2``: the page shows the latest *published* timestep (two behind the last one
    released), says it was published 2 timesteps late and smoothed through the timestep that
    published it, and its series holds every published timestep once, in order."""
    from stream.config import load_settings
    from tests.stream.service.live_helpers import ONE_D

    settings = load_settings(None, **{
        "stream": {"id": "live-lag", "timestep": "1s", "start": "2023-11-14T22:13:20Z"},
        "schema": {"attributes": ONE_D},
        "privacy": {"unit": "user-level", "epsilon": 1, "horizon": 200, "cutoff": 200, "population": 1000},
        "release": {"decision": "uniform", "mechanism": "lpa", "postprocess": "model+nonnegative", "delay": 2},
        "kafka": {"input_topic": "in", "output_topic": "out", "record_time": "log-append-time",
                  "create_topics": False},
        "service": {"state_dir": str(tmp_path / "state"), "poll_timeout": "20ms", "http_port": 0, "public_port": 0},
    })
    svc, _ = paced_service(monkeypatch, settings, pace=0.3, events_per_step=300, burst=8)
    with svc:
        _wait(lambda: svc.published() >= 8, "8 releases before the page opens")
        w = Watched(browser, public_url(svc))
        _wait(lambda: w.count("#series circle.pt") >= 6, "the published history in the series")
        for _ in range(20):  # read the card and the release it shows at one moment
            r = w.shown_release()
            note = w.text("#lag-note")
            if f"Timestep {r['timestep']['index']}" == w.text("#timestep"):
                break
        assert r["lag"] == {"delay": 2, "smoothed_through": r["timestep"]["index"] + 2}
        assert note == f"published 2 timesteps late, smoothed with the releases through timestep {r['timestep']['index'] + 2}"
        steps = [int(t) for t in w.page.locator("#series circle.pt").evaluate_all(
            "els => els.map(e => e.getAttribute('data-timestep'))")]
        assert steps == list(range(steps[0], steps[0] + len(steps)))
        _wait(lambda: svc.metric("dpstream_last_published_timestep") == svc.metric("dpstream_last_released_timestep") - 2,
              "the metrics of one checkpoint")
        assert svc.metric("dpstream_last_published_timestep") >= steps[-1]
        w.close(tmp_path / "live-lag.png")
