"""Suite-wide set-up that must happen before pytest-xdist starts its workers (tests/ holds the rest).

Compiled-bytecode cache. With ``PYTHONDONTWRITEBYTECODE`` set (some shells and containers set it so
that no ``__pycache__`` lands next to the sources), every process the suite starts — each xdist
worker, and the ~150 ``python -m stream ...`` subprocesses of the command-line and service tests —
compiles dpstream from source again (about 1.5 s each on a loaded 2-core machine) and pytest
rewrites every test module's asserts again in every worker. Here the suite keeps the bytecode in
``.pytest_cache/pycache`` instead (``PYTHONPYCACHEPREFIX``: outside the source tree, git-ignored),
for itself, its workers and their subprocesses. Nothing changes when bytecode is written anyway, or
when the person chose a ``PYTHONPYCACHEPREFIX`` of their own. What is tested does not change:
only where compiled files are kept.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _bytecode_outside_the_tree() -> None:
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    prefix = Path(__file__).resolve().parent / ".pytest_cache" / "pycache"
    try:
        prefix.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only checkout: compile as before
        return
    os.environ.pop("PYTHONDONTWRITEBYTECODE")
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)  # workers and subprocesses inherit it
    sys.pycache_prefix = str(prefix)  # this process: imports from now on, and pytest's rewritten tests
    sys.dont_write_bytecode = False


_bytecode_outside_the_tree()
