"""Test-only fault injection: ``DPSTREAM_FAILPOINT=name[:n][,name[:n]…]`` kills the process with
SIGKILL the *n*-th time the service reaches the named point (default the first). Unset, it does
nothing. The crash tests use it to show that a restart re-sends what was journaled and never
redraws noise for a release that may have been seen.
"""

from __future__ import annotations

import os
import signal
from collections import Counter as TallyCounter

from stream.service.journal import COMPACTION_POINTS

__all__ = ["COMPACTION_FAILPOINTS", "FAILPOINTS", "Failpoints"]

#: kill points of the loop: after a release's noise is drawn, after the checkpoint is journaled,
#: in the middle of producing it, after producing and before the commit
FAILPOINTS = ("after_noise", "after_journal", "mid_produce", "after_produce_before_commit")
#: kill points inside a journal compaction (after the checkpoint committed: nothing to re-send)
COMPACTION_FAILPOINTS = COMPACTION_POINTS


class Failpoints:
    """``DPSTREAM_FAILPOINT=name[:n][,name[:n]…]``: SIGKILL at the n-th hit (default 1). Inert when unset."""

    def __init__(self, spec: str | None) -> None:
        self._targets: dict[str, int] = {}
        self._hits: TallyCounter[str] = TallyCounter()
        for part in (spec or "").split(","):
            if not part.strip():
                continue
            name, _, nth = part.strip().partition(":")
            if name not in FAILPOINTS + COMPACTION_FAILPOINTS:
                raise ValueError(f"unknown failpoint {name!r}; choose from "
                                 f"{', '.join(FAILPOINTS + COMPACTION_FAILPOINTS)}")
            self._targets[name] = int(nth or 1)

    def wants(self, name: str) -> bool:
        """Whether ``name`` is armed (lets callers skip work that only a failpoint needs)."""
        return name in self._targets

    def __call__(self, name: str) -> None:
        if name in self._targets:
            self._hits[name] += 1
            if self._hits[name] == self._targets[name]:
                os.kill(os.getpid(), signal.SIGKILL)
