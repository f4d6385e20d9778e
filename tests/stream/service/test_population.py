"""The population ledger file, and a second stream over the same people refused at start-up.

Storage: registrations are serialised by a file lock and written atomically,
so two streams starting at once cannot both pass the cap (tested with real
processes). Service: two configurations that share a population and a ledger
file, through the embedded broker; the one that would exceed the cap exits 2
with an error naming both streams, and the first restarts fine.
"""

from __future__ import annotations

import io
import json
import logging
import multiprocessing as mp
from fractions import Fraction
from pathlib import Path

import pytest

from controller.population import PopulationEntry
from stream.service.logs import JsonFormatter
from stream.service.population import read_ledgers, register_stream
from tests.kafka_harness import InProcessService, broker, service_config, settings_from  # noqa: F401


def _try(path: str, stream: str, start, results) -> None:  # noqa: ANN001 - multiprocessing target
    start.wait(10)
    try:
        register_stream(Path(path), "city", Fraction(1), PopulationEntry(stream, "user-level", Fraction(3, 5)))
        results.put((stream, "ok"))
    except Exception as exc:  # noqa: BLE001
        results.put((stream, type(exc).__name__))


def test_two_streams_starting_at_once_cannot_both_pass_the_cap(tmp_path):
    path = tmp_path / "populations.json"
    for attempt in range(5):
        if path.exists():
            path.unlink()
        ctx = mp.get_context("fork")
        start, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_try, args=(str(path), f"s{attempt}-{i}", start, results)) for i in range(2)]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(20)
        outcome = sorted(results.get(timeout=5)[1] for _ in procs)
        assert outcome == ["PopulationRefused", "ok"], outcome
        (ledger,) = read_ledgers(path).values()
        assert ledger.total == Fraction(3, 5) and len(ledger.entries) == 1


def test_the_file_is_replaced_atomically_and_keeps_every_population(tmp_path):
    path = tmp_path / "populations.json"
    register_stream(path, "city", Fraction(1), PopulationEntry("a", "user-level", Fraction(1, 2)))
    register_stream(path, "ward", Fraction(2), PopulationEntry("b", "w-event", Fraction(1), w=5))
    register_stream(path, "city", Fraction(1), PopulationEntry("a", "user-level", Fraction(1, 2)))  # restart
    doc = json.loads(path.read_text())
    assert [p["name"] for p in doc["populations"]] == ["city", "ward"]
    assert not list(tmp_path.glob(".populations.json.tmp"))


@pytest.mark.kafka
def _personal_stream(stream_id: str, tiers: dict[str, str]):  # noqa: ANN202
    from stream.config import load_settings

    return load_settings(
        stream={"id": stream_id, "start": "2024-01-01T00:00:00Z", "timestep": "1h"},
        privacy={"unit": "user-level", "epsilon": "1", "horizon": 4, "cutoff": 2,
                 "shared_population": {"name": "city", "cap": "2"},
                 "personal": {"mechanism": "privacy_aware", "attribute": "consent", "tiers": tiers,
                              "persons": {"research": 10, "default": 10}}},
        schema={"attributes": [{"name": "a", "kind": "categorical", "values": ["x", "y"]}]},
        release={"decision": "uniform"}, kafka={"record_time": "log-append-time"},
    )


def test_personal_streams_register_their_largest_tier(tmp_path):
    """Two streams with a research tier at ε = 2: a research-tier person loses 2 + 2 = 4, so under a
    cap of 2 the second is refused (issue 27.3: main registered privacy.epsilon = 1 each and took both)."""
    from controller.population import PopulationRefused
    from stream.service.population import entry_for

    path = tmp_path / "populations.json"
    first = entry_for(_personal_stream("a", {"research": "2"}))
    assert first.epsilon == 2
    register_stream(path, "city", Fraction(2), first)
    with pytest.raises(PopulationRefused, match="largest tier"):
        register_stream(path, "city", Fraction(2), entry_for(_personal_stream("b", {"research": "2"})))
    # tiers below privacy.epsilon: the default ε is the largest
    assert entry_for(_personal_stream("c", {"research": "1/2"})).epsilon == 1


def test_a_stream_that_would_exceed_the_cap_refuses_to_start_naming_both(broker, tmp_path):  # noqa: F811
    ledger = tmp_path / "shared" / "populations.json"
    shared = {"shared_population": {"name": "city", "cap": "1"}}
    first = service_config(broker.bootstrap, tmp_path / "a", stream_id="grid-counts", seed=1,
                           privacy={"epsilon": "0.6", **shared}, service={"population_ledger": str(ledger)})
    second = service_config(broker.bootstrap, tmp_path / "b", stream_id="od-matrix", seed=1,
                            privacy={"epsilon": "0.5", **shared}, service={"population_ledger": str(ledger)})
    with InProcessService(settings_from(first)) as svc:
        assert svc.exit_code is None  # registered and running
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter())
    logging.getLogger("dpstream").addHandler(handler)
    try:
        svc2 = InProcessService(settings_from(second))
        with svc2:
            pass
    finally:
        logging.getLogger("dpstream").removeHandler(handler)
    assert svc2.exit_code == 2
    (line,) = [json.loads(x) for x in buf.getvalue().splitlines() if "refusing" in x]
    assert "'od-matrix'" in line["error"] and "'grid-counts'" in line["error"] and "city" in line["error"]
    assert "11/10" in line["error"]  # the exact total it would reach
    (city,) = read_ledgers(ledger).values()
    assert set(city.entries) == {"grid-counts"}
    with InProcessService(settings_from(first)) as again:  # a restart of the registered stream is fine
        assert again.exit_code is None
