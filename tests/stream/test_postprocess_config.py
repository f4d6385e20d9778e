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


def test_release_delay_goes_with_a_model_step():
    from stream.pipeline import ReleasePipeline

    with pytest.raises((ConfigError, ValueError), match="fixed-lag smoother of a model step"):
        small_settings(release={"postprocess": "kalman", "delay": 1}, privacy={"population": 100}).validate_all()
    with pytest.raises((ConfigError, ValueError), match="less than or equal to 64"):
        small_settings(release={"postprocess": "model", "delay": 65}).validate_all()
    s = small_settings(release={"postprocess": "model+nonnegative", "delay": 2}).validate_all()
    assert s.postprocessor().delay == 2
    assert s.fingerprint() != small_settings(release={"postprocess": "model+nonnegative"}).validate_all().fingerprint()
    assert ReleasePipeline(s).post.delay == 2  # the release path publishes it (tests/stream/test_delay_pipeline.py)
    ReleasePipeline(small_settings(release={"postprocess": "model+nonnegative"}).validate_all())  # no delay: runs


def test_the_lab_scores_a_delayed_release_against_the_timestep_it_is_for():
    """``run_method`` with ``release.delay: k`` scores each output against timestep ``t − k``:
    on a constant stream a smoother's delayed output is near the truth; scored against the wrong
    timestep of a jumping stream it would not be (the jump would count k times over)."""
    import numpy as np

    from histogram.accuracy import Workload
    from histogram.noise import Randomness
    from stream.lab.evaluate import run_method

    s = small_settings(privacy={"epsilon": 50.0}, release={"decision": "uniform", "postprocess": "model",
                                                          "delay": 3}).validate_all()
    bins = s.domain().size
    truth = np.where(np.arange(80) < 40, 10, 400)[:, None] * np.ones((1, bins), dtype=np.int64)
    workload = Workload(truth.astype(np.int64), (bins,), None, None)
    delayed = run_method(s, workload, Randomness.seeded(1)).metrics["mae"]
    assert delayed < 5.0, delayed
