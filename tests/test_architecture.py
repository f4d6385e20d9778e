"""Layering and randomness hygiene, checked statically.

* ``histogram`` imports neither ``controller`` nor ``stream``; ``controller``
  does not import ``stream``.
* Randomness is drawn only in ``histogram/noise.py`` (tests may build their
  own generators; ``histogram/testing.py`` holds test-only drawers).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"histogram": ("controller", "stream"), "controller": ("stream",)}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_dependencies_point_one_way(package):
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imports(path) & set(FORBIDDEN[package])
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offenders, offenders


RANDOM_CALLS = ("default_rng", "RandomState", "SystemRandom", "token_bytes", "urandom", "AESCounter", "Generator")


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


# Synthetic data generation, evaluation workloads and the demo's traffic are public
# inputs, not noise: they may use their own seeded generators and never touch releases.
PUBLIC_WORKLOAD = ("stream/generate.py", "stream/evaluat", "stream/commands/demo.py", "stream/demo")


def test_randomness_only_in_the_noise_module():
    allowed = {ROOT / "histogram" / "noise.py", ROOT / "histogram" / "testing.py"}
    offenders = []
    for package in ("histogram", "controller", "stream"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if path in allowed or rel.startswith(PUBLIC_WORKLOAD):
                continue
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                    if any(m in ("random", "secrets") or m.startswith("numpy.random") for m in mods):
                        offenders.append(f"{rel}:{node.lineno} imports {mods}")
                if isinstance(node, ast.Call):
                    name = _dotted(node.func)
                    if name.startswith(("np.random.", "numpy.random.")) or name.split(".")[-1] in RANDOM_CALLS:
                        offenders.append(f"{rel}:{node.lineno} calls {name}")
    assert not offenders, offenders
