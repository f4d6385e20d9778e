"""A tiny progress bar for the lab commands (no dependency): one line on stderr, redrawn at most
ten times a second, erased on close. Callers create it only on a terminal (or when asked)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressBar", "progress_bar"]


class ProgressBar:
    """``update(n)`` as work is done; ``close()`` at the end. Units are whatever ``total`` counts."""

    def __init__(self, total: int, desc: str = "", unit: str = "step", file: TextIO | None = None,
                 width: int = 30) -> None:
        self.total = max(1, int(total))
        self.desc = desc
        self.unit = unit
        self.file = file if file is not None else sys.stderr
        self.width = width
        self.done = 0
        self._start = time.monotonic()
        self._drawn = 0.0
        self._last_len = 0

    def set_description(self, desc: str) -> None:
        self.desc = desc
        self._draw(force=True)

    def update(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + int(n))
        self._draw()

    def line(self) -> str:
        """The text of the bar as it is now."""
        frac = self.done / self.total
        filled = int(frac * self.width)
        elapsed = time.monotonic() - self._start
        eta = f", {elapsed / frac - elapsed:.0f}s left" if 0 < frac < 1 else ""
        return (f"{self.desc} [{'#' * filled}{'.' * (self.width - filled)}] {frac:4.0%} "
                f"{self.done}/{self.total} {self.unit}{eta}")

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._drawn < 0.1 and self.done < self.total:
            return
        self._drawn = now
        text = self.line()
        self.file.write("\r" + text + " " * max(0, self._last_len - len(text)))
        self.file.flush()
        self._last_len = len(text)

    def close(self) -> None:
        if self._last_len:
            self.file.write("\r" + " " * self._last_len + "\r")
            self.file.flush()


def progress_bar(total: int, enabled: bool | None, desc: str, unit: str = "step",
                 file: TextIO | None = None) -> ProgressBar | None:
    """A bar when ``enabled`` (True), or when ``None`` and ``file`` (stderr) is a terminal; else None."""
    out = file if file is not None else sys.stderr
    if enabled is False or total <= 0:
        return None
    if enabled is None and not out.isatty():
        return None
    return ProgressBar(total, desc, unit, out)
