"""The lab's run primitives live in one module that the lab's other modules import from.

``stream.lab.runs`` holds ``run_method``, ``check_methods``, ``split_method`` and ``RunTrace``
(``EvaluationError`` is :mod:`stream.lab.errors`'s); ``evaluate`` uses them and ``personal`` and
``recommend`` import them from there, never back from ``evaluate`` (which imports them), and ``runs``
imports none of those three. (The planner is in ``stream.planning``, which imports no lab module:
``tests/test_architecture.py``.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[3] / "stream" / "lab"


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):  # function-level imports count too
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


@pytest.mark.parametrize("module", ["personal", "recommend"])
def test_lab_modules_do_not_import_back_from_evaluate(module):
    assert "stream.lab.evaluate" not in _imports(LAB / f"{module}.py")


def test_the_run_primitives_module_imports_none_of_its_users():
    users = {f"stream.lab.{m}" for m in ("evaluate", "personal", "recommend")}
    assert not _imports(LAB / "runs.py") & users


def test_evaluate_re_exports_the_same_objects():
    from stream.lab import evaluate, runs

    for name in ("run_method", "check_methods", "RunTrace", "EvaluationError", "split_method"):
        assert getattr(evaluate, name) is getattr(runs, name)
