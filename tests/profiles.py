"""Hypothesis profiles, registered by ``tests/conftest.py`` (importing this module).

``HYPOTHESIS_PROFILE`` selects one (default ``default``):

* ``default`` — hypothesis's own defaults; each test's ``@settings`` decides
  its example count, so the everyday suite stays fast;
* ``nightly`` — tests that scale their example count with :func:`examples`
  (the neighbour and boundary property tests) run ten times as many, and
  hypothesis's own default rises to 1,000: for a scheduled job, not for
  every commit (``HYPOTHESIS_PROFILE=nightly python3 -m pytest ...``).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", settings.get_profile("default"))
settings.register_profile(
    "nightly",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def examples(n: int) -> int:
    """``n`` examples, ten times as many under the ``nightly`` profile."""
    return n * 10 if os.environ.get("HYPOTHESIS_PROFILE") == "nightly" else n
