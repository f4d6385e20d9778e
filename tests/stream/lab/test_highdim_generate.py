"""``dpstream generate highdim``: a correlated, drifting population over 8–12 attributes and 10⁶+ cells."""

from __future__ import annotations

import csv
import hashlib

import numpy as np
import pytest

from stream.commands.cli import main
from stream.config import load_settings
from stream.lab.generate import generate
from stream.lab.highdim import HighDimParams, highdim_latent_correlation, highdim_stream


def _codes(timesteps: int, population: int, params: HighDimParams, seed: int = 0) -> list[np.ndarray]:
    return [c.codes for c in highdim_stream(timesteps, population, seed, params)]


def _spearman(x: np.ndarray) -> np.ndarray:
    ranks = np.argsort(np.argsort(x + np.random.default_rng(0).random(x.shape) * 1e-3, axis=0), axis=0)
    return np.corrcoef(ranks.T)


def test_files_config_and_domain(tmp_path):
    rep = generate("highdim", tmp_path, timesteps=3, population=200, seed=1)
    with open(tmp_path / "events.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["person_id", "event_time", *(f"a{j}" for j in range(8))]
    assert len(rows) - 1 == 3 * 200 == rep.rows
    s = load_settings(tmp_path / "config.yaml")
    assert s.domain().shape == (6,) * 8 and s.domain().size == 6**8 == rep.bins >= 10**6
    assert s.privacy.population == 200 and s.privacy.unit == "w-event" and s.privacy.w == 3
    # one record per person per timestep, stable ids, levels inside the domain
    ids = np.array([int(r[0]) for r in rows[1:]])
    assert sorted(np.bincount(ids).tolist()) == [3] * 200
    codes = np.array([[int(v) for v in r[2:]] for r in rows[1:]])
    assert codes.min() >= 0 and codes.max() <= 5


def test_large_domains_are_written_without_building_the_histogram(tmp_path):
    rep = generate("highdim", tmp_path, timesteps=2, population=50, seed=0,
                   highdim=HighDimParams(attributes=12, levels=10))
    assert rep.bins == 10**12 == load_settings(tmp_path / "config.yaml").domain().size


def test_same_seed_same_file(tmp_path):
    for d in ("a", "b", "c"):
        generate("highdim", tmp_path / d, timesteps=2, population=100, seed=0 if d != "c" else 1)
    digest = {d: hashlib.sha256((tmp_path / d / "events.csv").read_bytes()).hexdigest() for d in "abc"}
    assert digest["a"] == digest["b"] != digest["c"]


def test_attributes_are_correlated_as_the_latent_model_says():
    p = HighDimParams(mixture=0.0)
    x = _codes(1, 20_000, p)[0]
    est = _spearman(x)
    target = highdim_latent_correlation(8, 0, 1, p.drift)
    strong = np.abs(target) > 0.4
    np.fill_diagonal(strong, False)
    assert strong.sum() >= 8
    # discretisation attenuates, the sign and rough size survive
    assert np.all(np.sign(est[strong]) == np.sign(target[strong]))
    assert np.abs(est - target)[strong].max() < 0.25


def test_dependence_and_marginals_drift_and_stay_put_without_drift():
    def first_last(drift: float) -> tuple[np.ndarray, np.ndarray]:
        xs = _codes(12, 8_000, HighDimParams(drift=drift))
        return xs[0], xs[-1]

    a, b = first_last(1.0)
    assert np.abs(_spearman(a) - _spearman(b)).max() > 0.3
    shift = max(abs(a[:, j].mean() - b[:, j].mean()) for j in range(8))
    assert shift > 0.3
    a0, b0 = first_last(0.0)
    assert np.abs(_spearman(a0) - _spearman(b0)).max() < 0.08
    assert max(abs(a0[:, j].mean() - b0[:, j].mean()) for j in range(8)) < 0.08


def test_people_persist_between_timesteps():
    x0, x1 = _codes(2, 5_000, HighDimParams(drift=0.0))
    same = [np.corrcoef(x0[:, j], x1[:, j])[0, 1] for j in range(8)]
    assert min(same) > 0.7


@pytest.mark.parametrize("kwargs, match", [
    ({"attributes": 7}, "8 to 12"),
    ({"attributes": 13}, "8 to 12"),
    ({"levels": 5}, "at least 1,000,000 cells"),
    ({"drift": -1.0}, "drift"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HighDimParams(**kwargs)


def test_cli(tmp_path, capsys):
    out = tmp_path / "hd"
    assert main(["generate", "highdim", "--timesteps", "2", "--population", "30", "--attributes", "9",
                 "--levels", "5", "--out", str(out)]) == 0
    assert load_settings(out / "config.yaml").domain().size == 5**9
    assert main(["generate", "highdim", "--timesteps", "2", "--population", "30", "--counts",
                 "--out", str(tmp_path / "c")]) == 2
    assert "counts file would need" in capsys.readouterr().err
    assert not (tmp_path / "c" / "events.csv").exists()
    assert main(["generate", "highdim", "--timesteps", "2", "--population", "30", "--levels", "3",
                 "--out", str(tmp_path / "d")]) == 2
    assert "raise --levels or --attributes" in capsys.readouterr().err


def test_a_dependence_jump_changes_correlation_not_marginals():
    """--jump: from the jump on, group A's correlation turns a quarter turn at once; the
    marginals stay on their smooth path (level frequencies change no more at the jump than
    elsewhere), so only a decision that sees dependence notices the jump."""
    p = HighDimParams(attributes=8, levels=6, drift=0.5, jump=0.5, mixture=0.0, persistence=0.0)
    steps = list(highdim_stream(10, 20_000, 3, p))
    at = p.jump_timestep(10)
    assert at == 5
    before, after = highdim_latent_correlation(8, at - 1, 10, 0.5, at), highdim_latent_correlation(8, at, 10, 0.5, at)
    smooth = highdim_latent_correlation(8, at, 10, 0.5)
    assert np.abs(after - before).max() > 0.5 > np.abs(smooth - before).max()

    def shares(codes):
        return np.stack([np.bincount(codes[:, j], minlength=6) / codes.shape[0] for j in range(8)])

    def corr(codes):
        return np.corrcoef(codes.T.astype(float))

    marginal_step = [np.abs(shares(steps[t].codes) - shares(steps[t - 1].codes)).sum() for t in range(1, 10)]
    corr_step = [np.abs(corr(steps[t].codes) - corr(steps[t - 1].codes)).sum() for t in range(1, 10)]
    assert marginal_step[at - 1] < 2 * np.median(marginal_step)  # no marginal jump
    assert corr_step[at - 1] > 3 * np.median(corr_step)  # a dependence jump
    with pytest.raises(ValueError, match="--jump"):
        HighDimParams(jump=1.5)
