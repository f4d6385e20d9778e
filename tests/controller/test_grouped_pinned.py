"""AdaPub and RescueDP through the service's engine, pinned: releases, ledger and journaled state.

The hashes were recorded at main 64fbb73, before the lab's speed-ups of these rules (AdaPub's median
of each time group without masked arrays, its public pivots hashed once per timestep, its ε shares
computed once): the same releases, charges and journal, byte for byte, in configurations where the
time groups close early and late, the dimension groups merge bins, and the deviation tests decide
both ways."""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction

import numpy as np
import pytest

from controller.policies.grouping import AdaPubPolicy, RescueDPPolicy, _median_rows, _public_uniform
from controller.step import Engine
from controller.units import WEvent
from histogram.lpa import LaplaceMechanism
from histogram.noise import Randomness
from tests.engine_helpers import jump_stream

BINS, STEPS = 12, 160


CASES = {
    "adapub-defaults": (AdaPubPolicy(WEvent(Fraction(1), 10, 3)), "516956b474617805"),
    "adapub-max-group-2": (AdaPubPolicy(WEvent(Fraction(1), 8, 2), max_group=2, pivots=3), "51dab89ef7888b39"),
    "adapub-eps-5-w-20": (AdaPubPolicy(WEvent(Fraction(5), 20, 4), pivots=6), "0cc5fb0e0d550039"),
    "rescuedp-defaults": (RescueDPPolicy(WEvent(Fraction(1), 10, 3)), "76d748c30e5a1a78"),
    "rescuedp-theta-2": (RescueDPPolicy(WEvent(Fraction(1), 8, 2), theta=2.0, group_factor=3.0), "98c3e2d24d580664"),
}


def _fingerprint(policy) -> str:  # type: ignore[no-untyped-def]
    engine = Engine(policy, LaplaceMechanism(), BINS)
    rnd, state, h = Randomness.seeded(11), engine.initial_state(), hashlib.sha256()
    for t, counts in enumerate(jump_stream(STEPS, BINS)):
        release, state = engine.step(state, counts, rnd.drawer("pinned", t))
        h.update(np.asarray(release.counts).tobytes())
        h.update(repr((release.kind, str(release.epsilon_spent), str(release.window_spend),
                       [e.to_json() for e in release.ledger])).encode())
        h.update(json.dumps(engine.snapshot(state), sort_keys=True).encode())  # the journal, every step
    return h.hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(CASES))
def test_service_adapub_rescuedp_are_pinned(name):
    policy, pin = CASES[name]
    assert _fingerprint(policy) == pin


def test_the_median_of_each_time_group_is_nanmedians_bit_for_bit():
    """Rows of every length and fill (odd and even counts, ties, values over many magnitudes)."""
    rng = np.random.default_rng(3)
    for width in (1, 2, 3, 8, 10, 50):
        members = rng.standard_normal((400, width)) * 10.0 ** rng.integers(-3, 6, (400, width))
        members[rng.random((400, width)) < 0.2] = np.round(members[rng.random((400, width)) < 0.2].mean())
        sizes = rng.integers(1, width + 1, 400)
        members[np.arange(width)[None, :] >= sizes[:, None]] = np.nan  # each row: its group's values, then NaN
        got, want = _median_rows(members), np.nanmedian(members, axis=1)
        assert got.tobytes() == want.tobytes(), width


def test_the_public_pivots_are_the_blake2b_words():
    for t, count, high in ((0, 20, 7), (123, 3, 1000), (99999, 5, 1)):
        want = [int.from_bytes(hashlib.blake2b(f"adapub-pivot:{t}:{k}".encode(), digest_size=8).digest(),
                               "little") % high for k in range(count)]
        assert _public_uniform(t, count, high).tolist() == want
        assert _public_uniform(t, count, high).tolist() == want  # the cached words: the same
