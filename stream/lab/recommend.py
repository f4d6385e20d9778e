"""``dpstream evaluate --recommend``: rank every candidate on a history and say why (issue 13 item 3,
the evaluation half; ``decision: auto``, which never reads the history, is :mod:`stream.planning.planner`).

The candidates are every decision method this configuration can run
(:data:`controller.method.METHODS`, so methods added there are picked up), each as published
(``none``), with ``nonnegative`` and with ``kalman`` smoothing (``release.postprocess``).
They are ranked by mean absolute error per bin (or range-query error) against the zero release.

Choosing among candidates by their error on a private history is itself a use of that history
that no ε here accounts for: :data:`CAVEAT` says so in every recommendation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.method import METHODS
from stream.config import Settings
from stream.lab.errors import EvaluationError
from stream.lab.runs import check_methods

__all__ = ["CAVEAT", "candidates", "ranking", "recommendation"]

CAVEAT = (
    "tuning on private history is not free: the choice below was made by looking at this data's true "
    "errors, which no ε in this evaluation accounts for; use a history you may treat as public (or an old "
    "one whose privacy you accept to spend), and evaluate the chosen method again on fresh data"
)
VARIANTS = ("", "+nonnegative", "+kalman")


def candidates(settings: Settings, bases: list[str] | None = None) -> list[str]:
    """Every ``method+variant`` this configuration can run (bases default to all of METHODS)."""
    out = []
    for base in bases or list(METHODS):
        try:
            check_methods(settings, [base])
        except EvaluationError:
            continue  # e.g. bd/ba under user-level privacy
        out += [base + v for v in VARIANTS]
    return out


def ranking(result: Mapping[str, Any], key: str = "mae") -> list[tuple[str, float]]:
    """Candidates by ``key``, best first (those without a value last)."""
    rows = [(n, m.get(key)) for n, m in result["methods"].items() if not n.endswith("-true")]
    return sorted(((n, float(v)) for n, v in rows if v is not None), key=lambda r: r[1])


def recommendation(result: Mapping[str, Any], key: str = "mae", diagnostics: list[dict] | None = None) -> str:
    """The ranked table and why the first is chosen, as text for the terminal."""
    ranked = ranking(result, key)
    if not ranked:
        raise EvaluationError(f"no candidate has a {key}: nothing to recommend")
    zero = result.get("references", {}).get("zero-release", {}).get(key)
    label = {"mae": "MAE per bin", "query_abs_error": "range-query error"}.get(key, key)
    lines = [f"ranked by {label} (mean over {result.get('runs')} runs):"]
    for i, (name, value) in enumerate(ranked, 1):
        mark = "  (worse than publishing zeros)" if zero is not None and value > zero else ""
        lines.append(f"  {i:2d}. {name:<24} {value:.4g}{mark}")
    if zero is not None:
        lines.append(f"      {'zero-release':<24} {zero:.4g}  [reference: private at any ε]")
    best, value = ranked[0]
    m = result["methods"][best]
    why = [f"recommend {best}: lowest {label} ({value:.4g})"]
    if len(ranked) > 1:
        why.append(f"{ranked[1][1] / value:.2f}x better than the next ({ranked[1][0]})" if value > 0 else
                   f"ahead of {ranked[1][0]}")
    if zero is not None:
        why.append(f"{zero / value:.2f}x better than publishing zeros" if value < zero
                   else "but NOT better than publishing zeros: consider not publishing, a larger ε or a coarser domain")
    why.append(f"{m.get('fresh_releases', 0):.0f} fresh releases, ε spent {m.get('epsilon_spent', 0):.4g}")
    lines.append("; ".join(why))
    for d in diagnostics or ():
        lines.append(f"warning: {d.get('method')}: threshold below the distance's noise floor")
    lines.append(f"note: {CAVEAT}")
    return "\n".join(lines)
