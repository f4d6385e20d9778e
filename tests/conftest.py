"""Test-wide configuration. Hypothesis profiles (``HYPOTHESIS_PROFILE=nightly``): see :mod:`tests.profiles`."""

import tests.profiles  # noqa: F401 - registers and loads the hypothesis profile
