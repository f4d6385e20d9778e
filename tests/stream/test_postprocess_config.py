"""``release.postprocess`` in the configuration: chains in text or list form, stored canonically
(so the fingerprint does not depend on the spelling), and the refusals say what to do."""

from __future__ import annotations

import pytest

from stream.config import ConfigError
from stream.service.testing import small_settings


def test_text_and_list_forms_are_the_same_configuration():
    a = small_settings(privacy={"population": 100}, release={"postprocess": "Kalman+nonnegative"})
    b = small_settings(privacy={"population": 100}, release={"postprocess": ["kalman", "nonnegative"]})
    assert a.release.postprocess == b.release.postprocess == "kalman+nonnegative"
    assert a.fingerprint() == b.fingerprint()
    assert small_settings().release.postprocess == "none"
    # the order is part of the meaning (and of the fingerprint)
    c = small_settings(privacy={"population": 100}, release={"postprocess": "nonnegative+kalman"})
    assert c.fingerprint() != a.fingerprint()


@pytest.mark.parametrize(("overrides", "message"), [
    ({"privacy": {"population": None}, "release": {"postprocess": "kalman"}}, "needs privacy.population"),
    ({"privacy": {"unit": "w-event", "w": 4, "cutoff": 2, "horizon": None, "population": 50},
      "release": {"decision": "fast", "postprocess": "ewma"}}, "already publishes filtered counts"),
    ({"release": {"postprocess": "kalman+ewma"}}, "two smoothers"),
    ({"release": {"postprocess": "smooth"}}, "unknown post-processor 'smooth'"),
    ({"release": {"postprocess": 3}}, "chain like kalman"),
])
def test_bad_chains_are_refused_with_what_to_do(overrides, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        small_settings(**overrides).validate_all()
