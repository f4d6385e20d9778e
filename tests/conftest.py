"""Test-wide configuration. Hypothesis profiles (``HYPOTHESIS_PROFILE=nightly``): see :mod:`tests.profiles`."""

import logging

import pytest

import tests.profiles  # noqa: F401 - registers and loads the hypothesis profile


@pytest.fixture(autouse=True)
def _dpstream_logger_restored():
    """Each test starts with the ``dpstream`` logger as Python leaves it (propagating, no handler).

    ``stream.service.logs.setup_logging`` (what the CLI and some tests call) stops propagation and
    adds a JSON handler; without this, a later test in the same worker that reads ``caplog`` sees
    nothing and fails depending on the order xdist hands tests out."""
    logger = logging.getLogger("dpstream")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield
    logger.handlers[:] = saved[0]
    logger.propagate, logger.level = saved[1], saved[2]
