"""``dpstream generate``: sizes, columns, determinism, the config, the update pattern."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import numpy as np
import pytest

from stream.config import load_settings
from stream.lab.generate import (
    CensusProfile,
    census_attributes,
    census_schedule,
    census_stream,
    default_cutoff,
    generate,
    sample_census,
    traffic_stream,
)


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_census_files_sizes_columns_and_config(tmp_path):
    rep = generate("census", tmp_path, timesteps=6, population=120, seed=3, counts=True)
    rows = _rows(tmp_path / "events.csv")
    assert rows[0] == ["person_id", "event_time", "age", "gender", "education", "health_insurance",
                       "marital_status", "income"]
    assert len(rows) - 1 == 6 * 120 == rep.rows
    s = load_settings(tmp_path / "config.yaml")
    assert s.domain().shape == (96, 2, 12, 2, 2, 3) and s.domain().size == 27_648 == rep.bins
    assert s.privacy.unit == "user-level" and s.privacy.population == 120
    assert s.privacy.horizon == 6 and s.privacy.cutoff == 1 and float(s.privacy.epsilon) == 1.0
    assert s.release.pid.delta == 0.05 and s.release.pid.theta == 0.5
    assert s.schema.user_id == "person_id" and s.schema.event_time == "event_time"
    # every value lies in the domain; every event falls in its timestep; one event per person per timestep
    attrs = {a["name"]: a for a in census_attributes()}
    start = int(s.stream.start.timestamp())
    step = int(s.stream.timestep.total_seconds())
    per_t: dict[int, set[str]] = {}
    for r in rows[1:]:
        t = (int(r[1]) - start) // step
        assert 0 <= t < 6
        assert r[0] not in per_t.setdefault(t, set())
        per_t[t].add(r[0])
        assert 0 <= int(r[2]) < 96
        for name, value in zip(list(attrs)[1:], r[3:], strict=True):
            assert value in attrs[name]["values"]
    assert all(len(v) == 120 for v in per_t.values())
    counts = _rows(tmp_path / "counts.csv")
    assert len(counts) == 7 and len(counts[0]) == 1 + 27_648
    assert all(sum(map(int, row[1:])) == 120 for row in counts[1:])


def test_same_seed_same_files_other_seed_other_files(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d, seed in ((a, 5), (b, 5), (c, 6)):
        generate("census", d, timesteps=4, population=50, seed=seed)
    assert _digest(a / "events.csv") == _digest(b / "events.csv")
    assert _digest(a / "config.yaml") == _digest(b / "config.yaml")
    assert _digest(a / "events.csv") != _digest(c / "events.csv")


def test_traffic_files_and_w_event_config(tmp_path):
    rep = generate("traffic", tmp_path, timesteps=10, population=40, seed=1, grid=16, time_format="iso")
    rows = _rows(tmp_path / "events.csv")
    assert rows[0] == ["person_id", "event_time", "x", "y"]
    assert len(rows) - 1 == 400 == rep.rows
    assert rows[1][1].endswith("Z") and "T" in rows[1][1]
    assert all(0 <= int(r[2]) < 16 and 0 <= int(r[3]) < 16 for r in rows[1:])
    s = load_settings(tmp_path / "config.yaml")
    assert s.privacy.unit == "w-event" and s.privacy.w == 10 and s.privacy.cutoff == 1
    assert s.domain().size == 256 and s.privacy.population == 40
    g2 = tmp_path / "w"
    generate("traffic", g2, timesteps=200, population=5, seed=1, grid=4, w=50)
    s2 = load_settings(g2 / "config.yaml")
    assert s2.privacy.w == 50 and s2.privacy.cutoff == default_cutoff(200, 50) == 2


def test_traffic_has_rush_hours():
    """Movement (cells changed between timesteps) peaks in the morning and evening on weekdays."""
    moved = []
    prev = None
    for chunk in traffic_stream(96, 3000, 2, grid=64, timestep_seconds=900):
        cells = chunk.codes.copy()
        if prev is not None:
            moved.append(np.mean(np.any(np.abs(cells - prev) > 1, axis=1)))
        prev = cells
    moved = np.array(moved)
    hours = (np.arange(1, 96) * 900) / 3600
    rush = moved[((hours >= 7) & (hours <= 9.5)) | ((hours >= 16.5) & (hours <= 19))].mean()
    night = moved[(hours >= 0.5) & (hours <= 5)].mean()
    assert rush > 5 * max(night, 1e-3)


def test_update_sizes_follow_the_periods():
    rng = np.random.default_rng(0)
    m, period = census_schedule(101, 10_000, 0.5, 10, None, rng)
    assert m[0] == 0 and period.max() == 9
    for p in range(10):
        assert np.unique(m[1:][period[1:] == p]).size == 1  # one m per period
    assert np.bincount(period[1:]).tolist() == [10] * 10
    assert len(np.unique(m[1:])) > 1  # periods differ
    assert abs(m[1:].mean() - 2500) < 1500  # m ~ N(r·P/2, σ²)


def test_people_replaced_per_timestep_equal_m():
    info: dict = {}
    prev = None
    replaced = []
    for chunk in census_stream(21, 500, 7, rate=0.4, periods=4, info=info):
        ids = set(chunk.ids.tolist())
        if prev is not None:
            replaced.append(len(ids - prev))
            assert len(ids) == 500
        prev = ids
    assert replaced == info["updates"][1:]
    periods = info["periods"][1:]
    for p in set(periods):
        assert len({replaced[i] for i, q in enumerate(periods) if q == p}) == 1


def test_census_attributes_are_correlated():
    codes = sample_census(20_000, CensusProfile(), np.random.default_rng(1))
    age, education, income, marital = codes[:, 0], codes[:, 2], codes[:, 5], codes[:, 4]
    assert np.all(income[age < 20] == 0) and np.all(income[age >= 20] > 0)
    assert np.all(education[age < 5] == 0)
    assert np.all(marital[age < 18] == 1)
    adults = age >= 25
    high_edu = adults & (education >= 10)
    low_edu = adults & (education <= 8)
    assert (income[high_edu] == 2).mean() > (income[low_edu] == 2).mean() + 0.2


@pytest.mark.parametrize("kwargs, match", [
    ({"timesteps": 0}, "timesteps"),
    ({"population": 0}, "population"),
    ({"epsilon": -1.0}, "epsilon"),
    ({"rate": 5.0}, "rate"),
])
def test_bad_parameters_are_refused_before_writing(tmp_path, kwargs, match):
    args = {"timesteps": 3, "population": 5, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        generate("census", tmp_path / "x", **args)
    assert not (tmp_path / "x" / "events.csv").exists()


def test_cli_generate(tmp_path, capsys):
    from stream.commands.cli import main

    out = tmp_path / "d"
    assert main(["generate", "census", "--timesteps", "3", "--population", "20", "--seed", "1",
                 "--out", str(out)]) == 0
    assert (out / "events.csv").exists() and (out / "config.yaml").exists()
    assert main(["generate", "census", "--timesteps", "3", "--population", "20", "--out", str(out),
                 "--epsilon", "0"]) == 2
    assert "epsilon" in capsys.readouterr().err


def test_arrival_times_are_seeded_in_arrival_order_and_followed_by_evaluate_and_replay(tmp_path):
    """``arrival_delay``: an arrival_time column (event time + a seeded log-normal delay), rows in
    arrival order across timestep boundaries, a config with schema.arrival_time and a lateness at
    the 99.9th percentile; evaluate and replay follow it (a few tail events late), and without the
    column the same events all count in their event-time timesteps."""
    from stream.lab.generate import generate as gen
    from stream.lab.inputs import load_truth
    from stream.lab.replay import replay

    a = gen("census", tmp_path / "a", timesteps=8, population=3000, seed=5, dimensions=2, timestep="60s",
            arrival_delay=10.0)
    b = gen("census", tmp_path / "b", timesteps=8, population=3000, seed=5, dimensions=2, timestep="60s",
            arrival_delay=10.0)
    assert a.events.read_bytes() == b.events.read_bytes()  # seeded
    with open(a.events) as f:
        rows = list(csv.DictReader(f))
    ev = np.array([float(r["event_time"]) for r in rows])
    arr = np.array([float(r["arrival_time"]) for r in rows])
    assert len(rows) == a.rows == 24_000
    assert (np.diff(arr) >= 0).all() and (arr >= ev).all()  # arrival order; no arrival before the event
    assert np.median(arr - ev) == pytest.approx(10.0, rel=0.1)
    assert (ev[1:] < ev[:-1]).any()  # event times are not sorted: the file is in arrival order
    settings = load_settings(a.config)
    assert settings.schema.arrival_time == "arrival_time" and settings.stream.allowed_lateness.total_seconds() == 220
    truth = load_truth(settings, a.events)
    late = truth.report.rows - truth.report.accepted
    assert 0 < late < 0.005 * len(rows)  # the delay model's tail beyond the 99.9th percentile, and no more
    # timesteps after the data that the last arrivals show complete are released empty (as the service would)
    assert truth.counts.shape[0] >= 8 and not truth.counts[8:].any()
    assert int(truth.counts.sum()) == truth.report.accepted
    summary = replay(settings, a.events, None)
    assert summary.late == late and summary.accepted == truth.report.accepted
    # the same events without the arrival column (same seed): the whole file is known, every event counts
    c = gen("census", tmp_path / "c", timesteps=8, population=3000, seed=5, dimensions=2, timestep="60s")
    with open(c.events) as f:
        assert sorted(float(r["event_time"]) for r in csv.DictReader(f)) == sorted(ev.tolist())
    whole = load_truth(load_settings(c.config), c.events)
    assert whole.report.accepted == len(rows) and int(whole.counts.sum()) == len(rows)


# -- --budgets: personalized-DP streams (issue 16) -------------------------------------------


def test_budgets_write_a_consent_table_for_everyone_who_appears(tmp_path):
    report = generate("census", tmp_path, timesteps=4, population=300, seed=3, dimensions=2, budgets="tiers")
    with open(report.events) as fh:
        people = {row["person_id"] for row in csv.DictReader(fh)}
    with open(tmp_path / "consent.csv") as fh:
        table = {row["person_id"]: row["tier"] for row in csv.DictReader(fh)}
    assert set(table) == people  # census replaces people: the newcomers are listed too
    assert set(table.values()) == {"0.01", "0.05", "0.10"}
    shares = {t: sum(1 for v in table.values() if v == t) / len(table) for t in ("0.01", "0.05", "0.10")}
    assert shares["0.05"] == pytest.approx(0.5, abs=0.08)
    settings = load_settings(report.config)
    personal = settings.privacy.personal
    assert personal.mechanism == "privacy_aware" and personal.table == str((tmp_path / "consent.csv").resolve())
    assert {str(e) for e in personal.tiers.values()} == {"1/100", "1/20", "1/10"}
    assert settings.personal_declaration().levels.total == len(people)


@pytest.mark.parametrize("law, low, high", [("uniform", 0.01, 0.1), ("normal", 0.01, 1.0)])
def test_budget_laws_and_grid(law, low, high):
    from stream.lab.generate import draw_budgets

    tiers_of, tiers = draw_budgets(np.arange(5000), law, seed=1, grid=1000)
    values = np.array([float(t) for t in tiers_of])
    assert values.min() >= low and values.max() <= high
    assert np.all(np.round(values * 1000) == values * 1000)  # on the public 1/1000 grid
    assert set(tiers) == set(tiers_of)
    if law == "uniform":
        assert values.mean() == pytest.approx(0.055, abs=0.003)
    else:  # N(0.1, 1) truncated to [0.01, 1]: nearly flat there, mean a little under the middle
        assert 0.45 < values.mean() < 0.52
    again, _ = draw_budgets(np.arange(5000), law, seed=1, grid=1000)
    assert again == tiers_of  # seeded: public workload randomness


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "sine", "budgets": "uniform"}, "census and traffic"),
    ({"kind": "census", "budgets": "uniform", "events": False, "counts": True}, "needs the events file"),
    ({"kind": "census", "budgets": "lognormal"}, "--budgets must be one of"),
    ({"kind": "census", "budgets": "uniform", "budget_grid": 150}, "--budget-grid"),
])
def test_budgets_refusals(tmp_path, kwargs, message):
    kind = kwargs.pop("kind")
    with pytest.raises(ValueError, match=message):
        generate(kind, tmp_path, timesteps=3, population=50, seed=0, **kwargs)
