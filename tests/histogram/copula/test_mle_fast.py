"""The MLE variant's per-part statistic: counting mid-ranks equal sorting ranks, and no scipy.stats import."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from scipy.special import ndtri
from scipy.stats import rankdata

from histogram.copula.mechanism import _partition_sums
from histogram.copula.statistics import pairs


def _reference(x: np.ndarray, part: np.ndarray, parts: int, resolution: int) -> np.ndarray:
    """The textbook computation: sort-based average ranks per part, normal scores, Pearson r, rounded."""
    m = x.shape[1]
    out = np.zeros(len(pairs(m)), dtype=np.int64)
    for t in range(parts):
        rows = x[part == t]
        if rows.shape[0] < 3:
            continue
        s = ndtri(rankdata(rows, axis=0) / (rows.shape[0] + 1))
        s -= s.mean(axis=0)
        norms = np.sqrt((s**2).sum(axis=0))
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.nan_to_num(np.clip((s.T @ s) / np.outer(norms, norms), -1, 1), nan=0.0)
        out += np.array([int(np.rint(resolution * r[j, k])) for j, k in pairs(m)], dtype=np.int64)
    return out


def test_counting_ranks_match_sorting_ranks():
    rng = np.random.default_rng(7)
    exact = 0
    for _ in range(60):
        n, m, parts = int(rng.integers(0, 300)), int(rng.integers(2, 6)), int(rng.integers(1, 25))
        levels = rng.integers(1, 6, m)
        z = rng.multivariate_normal(np.zeros(m), np.eye(m) * 0.5 + 0.5, size=n)
        x = np.stack([np.clip((z[:, j] * levels[j] / 3 + levels[j] / 2).astype(int), 0, levels[j] - 1)
                      for j in range(m)], axis=1).reshape(n, m)
        part = rng.integers(0, parts, n)
        ours, ref = _partition_sums(x, part, parts, 1000, pairs(m)), _reference(x, part, parts, 1000)
        # float summation order may move a value sitting on a .5 rounding boundary by one grid step per part
        assert np.abs(ours - ref).max() <= parts
        exact += int(np.array_equal(ours, ref))
    assert exact >= 55


def test_constant_column_in_a_part_gives_zero():
    x = np.array([[0, 1], [0, 2], [0, 0], [1, 1], [2, 0], [0, 2]])
    part = np.array([0, 0, 0, 1, 1, 1])
    # part 0 has attribute 0 constant: r = 0 there; part 1 is the only contribution
    assert _partition_sums(x, part, 2, 1000, pairs(2))[0] == _reference(x, part, 2, 1000)[0]


def test_mle_release_does_not_import_scipy_stats():
    """scipy.stats costs ~1 s to import: it was most of a 10⁹-cell MLE step (docs/results.md, issue 15)."""
    code = (
        "import sys; from fractions import Fraction; import numpy as np\n"
        "from histogram.copula import DPCopula; from histogram.noise import Randomness\n"
        "x = np.random.default_rng(0).integers(0, 4, (500, 3))\n"
        "DPCopula((4, 4, 4), variant='mle', partitions=5).release(x, Fraction(1), Randomness.seeded(0).drawer('s', 0))\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
