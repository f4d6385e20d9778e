"""FAST_w's PID step on a very large feedback error: the interval drops to 1, no OverflowError.

Found running FAST_w on the synthetic families (issue 13): a sample far from the filter's
prior gave ``exp((u − ξ)/ξ)`` beyond the float range and the step raised.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from controller.policies.wevent import FastPolicy, FastState
from controller.units import WEvent
from histogram.mechanism import NoisyHistogram


def test_a_huge_error_sends_the_interval_to_one_without_overflow():
    policy = FastPolicy(WEvent(Fraction(1, 10), 10))
    # R = 2·10² = 200, P = 0.1·R·7 = 140, K = 140/340: a sample that lands the posterior near 0
    # from a prior of −10⁶ makes the relative error (change over max(|posterior|, 1)) about 2.4·10⁶
    state = FastState(np.array([-1e6]), 0.0, 0, 7, 7, ())
    wide = np.broadcast_to(np.float64(1.0), (1,))
    noisy = NoisyHistogram(np.array([1_428_571], dtype=np.int64), Fraction(1, 10), wide, 0.95)
    out, new = policy.smooth(state, 7, noisy)
    assert new.interval == 1 and new.next_sample == 8
