"""Suite-wide pytest hooks that pytest-xdist needs before it starts its workers (here, at the
repository root, because they must be loaded before ``-n auto`` is resolved; test fixtures live in
``tests/``)."""

from __future__ import annotations

import os
from typing import Any


def pytest_xdist_auto_num_workers(config: Any) -> int:
    """How many workers ``-n auto`` (pyproject.toml addopts) starts: two per core, at most cores + 4.

    Much of the suite waits rather than computes: on the embedded broker's 3 s group joins, on
    services it runs as subprocesses, on paced input. Measured on tests/stream/service (166 tests,
    a shared 2-core machine): 193 s with 2 workers, 165 s with 4, all passing at load 6-9, so
    a second worker per core overlaps those waits; more than cores + 4 would only add start-up
    (each worker imports numpy, pyarrow, kafka-python and collects the suite). The
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` environment variable overrides it, as in xdist itself.
    """
    explicit = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if explicit:
        return int(explicit)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(2 * cores, cores + 4)
