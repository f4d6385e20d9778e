"""DSAT/DSFT through the service's engine, pinned: releases, ledger and journaled state.

The hashes were recorded with the one-run rule the service ran before DSAT/DSFT were written over a
runs axis (issue 29; w-event at main 4e06320, user-level at main 0c05e6c): the R = 1 conversion of
the journaled ``SamplingState`` and the shared rule must publish, charge and journal byte for byte
what it did, in the configurations the suite's defaults do not reach (the noisy comparison deciding,
the noise floor, burn-in, the PID's integral and derivative terms; user-level: the cutoff reached
before the horizon, the horizon's last timestep taking the remaining budget, timesteps past it).
"""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction

import pytest

from controller.method import MethodSpec, build_engine
from controller.pid import PIDGains
from controller.units import UserLevel, WEvent
from histogram.lpa import LaplaceMechanism
from histogram.noise import Randomness
from tests.engine_helpers import jump_stream

BINS, STEPS = 12, 150


CASES = {
    "dsat-T0.1-floor-pid": (MethodSpec("dsat", WEvent(Fraction(1), 10, 3), population=BINS * 40, threshold=0.1,
                                       noise_floor=True, burn_in=3, pid=PIDGains(theta_i=0.2, theta_d=0.3)),
                            "b2f3498c5f0ca625"),
    "dsat-T0.02-w5": (MethodSpec("dsat", WEvent(Fraction(1), 5, 2), population=BINS * 40, threshold=0.02),
                      "89a27591072c337a"),
    "dsft-T0.1-floor": (MethodSpec("dsft", WEvent(Fraction(1), 10, 3), population=BINS * 40, threshold=0.1,
                                   noise_floor=True), "f97196353505f6ac"),
    "dsft-T0.05-w5": (MethodSpec("dsft", WEvent(Fraction(1), 5, 2), population=BINS * 40, threshold=0.05),
                      "ceddd161dbd3a17f"),
    # user-level: horizon 100 of the 150 timesteps
    "user-dsat-T0.1-floor-pid": (MethodSpec("dsat", UserLevel(Fraction(1), 100, 8), population=BINS * 40,
                                            threshold=0.1, noise_floor=True, burn_in=3,
                                            pid=PIDGains(theta_i=0.2, theta_d=0.3)), "f3f524615b92b763"),
    "user-dsat-T0.1-C12": (MethodSpec("dsat", UserLevel(Fraction(1), 100, 12), population=BINS * 40, threshold=0.1),
                           "b21fddeb57f4d82f"),
    "user-dsft-T0.1-floor": (MethodSpec("dsft", UserLevel(Fraction(2), 100, 12), population=BINS * 40,
                                        threshold=0.1, noise_floor=True), "e4aeb543670446e0"),  # rest at 99
    "user-dsft-T0.4": (MethodSpec("dsft", UserLevel(Fraction(2), 100, 12), population=BINS * 40, threshold=0.4),
                       "809570852c2836c7"),  # rest at 99
}


def _fingerprint(spec: MethodSpec) -> tuple[int, int, str]:
    engine = build_engine(spec, LaplaceMechanism(), BINS)
    rnd, state, h = Randomness.seeded(11), engine.initial_state(), hashlib.sha256()
    for t, counts in enumerate(jump_stream(STEPS, BINS)):
        release, state = engine.step(state, counts, rnd.drawer("pinned", t))
        h.update(release.counts.tobytes())
        h.update(repr((release.kind, str(release.epsilon_spent), str(release.window_spend),
                       [e.to_json() for e in release.ledger])).encode())
        h.update(json.dumps(engine.snapshot(state), sort_keys=True).encode())  # the journal, every step
    return state.fresh_count, state.policy.queries, h.hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(CASES))
def test_service_dsat_dsft_are_pinned(name):
    spec, pin = CASES[name]
    fresh, queries, digest = _fingerprint(spec)
    assert 1 < fresh < queries  # the noisy comparison decided, both ways (after the first release)
    assert digest == pin
