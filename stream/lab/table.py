"""The results table ``dpstream evaluate`` prints on the terminal (issue 14 item 6).

One row per evaluated method and one per reference (``stream.lab.evaluate.REFERENCES``): mean
absolute error per bin, range-query absolute error, fresh releases and ε spent (means over the
runs). References are marked: ``[ref]`` for the all-zero release (private at any ε, it reads no
data), ``[ref, non-private]`` for the exact previous histogram; a method whose error is above
the zero release's is marked ``worse than zero``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["results_table"]

HEADERS = ("method", "MAE", "range-query error", "fresh releases", "ε spent", "note")


def _num(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.{digits}g}"


def results_table(result: Mapping[str, Any]) -> str:
    """The table as text (fixed-width columns, one line per row)."""
    worse = set(result.get("worse_than_zero_release", ()))
    rows: list[tuple[str, ...]] = []
    for name, m in result.get("methods", {}).items():
        note = "non-private" if name.endswith("-true") else ("worse than zero" if name in worse else "")
        rows.append((name, _num(m.get("mae")), _num(m.get("query_abs_error")), _num(m.get("fresh_releases")),
                     _num(m.get("epsilon_spent")), note))
    for name, m in result.get("references", {}).items():
        mark = "[ref]" if m.get("private") else "[ref, non-private]"
        rows.append((name, _num(m.get("mae")), _num(m.get("query_abs_error")), "–",
                     "0" if m.get("private") else "–", mark))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADERS)]

    def line(cells: tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        nums = [c.rjust(widths[i + 1]) for i, c in enumerate(cells[1:-1])]
        return "  ".join([first, *nums, cells[-1]]).rstrip()

    sub = (f"{result.get('timesteps')} timesteps, {result.get('bins')} bins, {result.get('runs')} runs; "
           "means over the runs")
    out = [sub, line(HEADERS), line(tuple("-" * w for w in widths))]
    out += [line(r) for r in rows]
    return "\n".join(out)
