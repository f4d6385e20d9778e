"""Synthetic families like the w-event benchmark's: shapes, scales, seeds, files, CLI."""

from __future__ import annotations

import numpy as np
import pytest

from stream.config import load_settings
from stream.lab.generate import generate
from stream.lab.inputs import load_truth
from stream.planning.families import FAMILIES, FLOOR, FamilyParams, family_series


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("scale", [10, 100, 1000, 10000])
def test_every_family_spans_the_floor_to_the_scale(family, scale):
    x = family_series(family, 1000, seed=4, params=FamilyParams(scale=scale))
    assert x.shape == (1000, 1) and x.dtype == np.int64
    # the benchmark's decay phase runs a step or two longer than the growth, so its troughs
    # dip just under the floor; the others never do
    assert x.min() >= (0 if family == "exponential" else round(FLOOR)) and x.max() <= scale
    # every family reaches near its scale (the benchmark scales the largest value to a)
    assert x.max() >= 0.8 * scale
    assert len(np.unique(x)) > 1


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_seeded_reproducible_and_bins_independent(family):
    a = family_series(family, 300, seed=7, bins=3)
    assert np.array_equal(a, family_series(family, 300, seed=7, bins=3))
    assert not np.array_equal(a, family_series(family, 300, seed=8, bins=3))
    assert not np.array_equal(a[:, 0], a[:, 1])


def test_shapes_are_what_their_names_say():
    p = FamilyParams(scale=1000, period=40)
    sine = family_series("sine", 400, 1, params=p)[:, 0].astype(float)
    spectrum = np.abs(np.fft.rfft(sine - sine.mean()))
    assert int(np.argmax(spectrum)) == 400 // 40  # one dominant period of 40 timesteps
    trend = family_series("trend", 1000, 1, params=p)[:, 0]
    assert trend[:100].mean() < 100 < 900 < trend[-100:].mean()
    walk = family_series("randomwalk", 1000, 1, params=p)[:, 0].astype(float)
    assert np.abs(np.diff(walk)).max() <= 6 * 0.02 * 1000 + 1  # small Gaussian steps
    sudden = family_series("sudden", 1000, 1, params=p)[:, 0]
    changes = int((np.diff(sudden) != 0).sum())
    assert 2 <= changes <= 30  # piecewise constant, mean segment 100
    expo = family_series("exponential", 1000, 1, params=FamilyParams(scale=1000, period=40))[:, 0]
    peaks = int(((expo[1:-1] > expo[:-2]) & (expo[1:-1] >= expo[2:])).sum())
    assert 15 <= peaks <= 35  # about 1000/40 periods
    logn = family_series("lognormal", 2000, 1, params=p)[:, 0].astype(float)
    assert np.median(logn) < logn.mean()  # right-skewed


def test_bad_family_parameters_are_refused():
    with pytest.raises(ValueError, match="scale"):
        FamilyParams(scale=1)
    with pytest.raises(ValueError, match="period"):
        FamilyParams(period=2)
    with pytest.raises(ValueError, match="unknown family"):
        family_series("square", 10, 0)


def test_generate_family_writes_counts_events_and_a_w_event_config(tmp_path):
    p = FamilyParams(scale=20)
    rep = generate("sudden", tmp_path, timesteps=50, population=1, seed=2, counts=True, bins=2, family=p)
    s = load_settings(tmp_path / "config.yaml")
    assert s.privacy.unit == "w-event" and s.privacy.w == 10 and s.privacy.population == 40
    assert s.domain().size == 2
    expected = family_series("sudden", 50, 2, bins=2, params=p)
    counts = load_truth(s, tmp_path / "counts.csv", kind="counts").counts
    assert np.array_equal(counts, expected)
    events = load_truth(s, tmp_path / "events.csv", kind="events").counts  # the service's windowing
    assert np.array_equal(events, expected)
    assert rep.rows == int(expected.sum())


def test_cli_generate_family(tmp_path, capsys):
    from stream.commands.cli import main

    assert main(["generate", "sine", "--timesteps", "100", "--scale", "100", "--counts-only",
                 "--out", str(tmp_path), "--seed", "3"]) == 0
    text = (tmp_path / "counts.csv").read_text().splitlines()
    assert text[0] == "timestep,b0" and len(text) == 101
    assert main(["generate", "sine", "--timesteps", "10", "--scale", "1", "--out", str(tmp_path)]) == 2
    assert "scale" in capsys.readouterr().err
    assert main(["generate", "census", "--timesteps", "10", "--out", str(tmp_path)]) == 2
    assert "--population" in capsys.readouterr().err
