"""Pinned seeded sequences of the exact sampler: values *and* bytes consumed.

A seeded drawer must give the same values from the same bytes forever: ``dpstream replay --seed``
reproduces a run of the service or of ``evaluate`` bit for bit only while that holds. These pins
were recorded before the sampler's one-value fast path was written (issue 13 item 6), so any
change to the draws — a different value, or the same values from a different number of random
bytes — fails here.
"""

from __future__ import annotations

import hashlib
from fractions import Fraction as F

import numpy as np
import pytest

from histogram.noise import Randomness

# (kind, scale, the drawer's timestep) -> (sha256[:16] of the values, AES counter, offset,
# has_uint32 of the generator afterwards, draws counted)
PINS = [
    (("scalar", F(1, 1), 0), ("81d45c2cb36cdae9", 3188, 40, 1, 269)),
    (("scalar", F(20, 1), 1), ("0271b9bb632a8ef3", 3800, 24, 1, 269)),
    (("scalar", F(7, 3), 2), ("9e7ee53d8e5cff89", 3948, 8, 1, 269)),
    (("scalar", F(1, 10), 3), ("f6f197d42b552cc6", 3200, 24, 0, 269)),
    (("scalar", F(1000000, 7), 4), ("441a8fc68de65caf", 4772, 8, 0, 269)),
    (("scalar", F(1234567, 1000), 5), ("5b7bcce1a5dc23cf", 4860, 64, 0, 269)),
    (("array", F(5, 2), 6), ("3d04484f06237f70", 1068, 40, 1, 572)),
    (("array", F(100, 1), 7), ("ca60fbd2cc4a5f4d", 1040, 24, 0, 572)),
    (("array", F(3, 7), 8), ("312c365369755083", 1592, 8, 1, 572)),
    (("array", F(2**41 + 1, 2**20 + 3), 9), ("cf032fce4c0d85ab", 1824, 32, 1, 572)),
    (("scalar", F(1, 1000), 10), ("67e2b95c8d3b189e", 3204, 64, 1, 269)),
]


def _draw(kind: str, scale: F, timestep: int) -> tuple[str, int, int, int, int]:
    purpose = "dl-scalar" if kind == "scalar" else "dl-array"
    d = Randomness.seeded(42).drawer("pin", timestep, purpose)
    if kind == "scalar":
        vals = [d.discrete_laplace(scale) for _ in range(200)]
    else:
        vals = list(d.discrete_laplace(scale, 500)) + list(d.discrete_laplace(scale, 3))
    vals += list(d.bernoulli_exp(np.arange(0, 40, dtype=np.int64), 7)) + list(d.uniform_int(np.arange(1, 30)))
    st = d._gen.bit_generator.state
    digest = hashlib.sha256(np.asarray(vals, dtype=np.int64).tobytes()).hexdigest()[:16]
    return digest, int(st["s"]["counter"][0]), int(st["s"]["offset"]), int(st["has_uint32"]), d.draws


@pytest.mark.parametrize("case,pin", PINS, ids=[f"{k}-{s}" for (k, s, _), _ in PINS])
def test_seeded_sequences_are_pinned(case, pin):
    assert _draw(*case) == pin


def test_the_pin_notices_a_changed_value(monkeypatch):
    """Not vacuous: a sampler that returns the same law from other bytes (one extra draw) fails."""
    from histogram.noise import GeneratorDrawer

    real = GeneratorDrawer.discrete_laplace

    def shifted(self, scale, size=None):
        self._gen.integers(0, 2)  # one extra byte-consuming draw, values otherwise identical in law
        return real(self, scale, size)

    monkeypatch.setattr(GeneratorDrawer, "discrete_laplace", shifted)
    assert _draw("scalar", F(7, 3), 2) != PINS[2][1]
