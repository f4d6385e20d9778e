"""Layering and randomness hygiene, checked statically.

* ``histogram`` imports neither ``controller`` nor ``stream``; ``controller``
  does not import ``stream``.
* Inside ``stream``: ``ingest`` imports nothing from ``service``, ``lab`` or
  ``commands``; ``service`` and ``lab`` never import each other (nor
  ``commands``); the shared modules (``config``, ``messages``, ``pipeline``)
  and the shared ``planning`` package (what ``dpstream run`` needs at start-up,
  also used by the lab) import none of the three jobs except ``ingest``; only
  ``commands`` imports from all of them.
* Randomness is drawn only in ``histogram/noise.py`` (tests may build their
  own generators; ``histogram/testing.py`` holds test-only drawers).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"histogram": ("controller", "stream"), "controller": ("stream",)}


def _modules(path: Path) -> set[str]:
    """Every absolute module name *path* imports, anywhere in the file (also inside functions)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _imports(path: Path) -> set[str]:
    return {name.split(".")[0] for name in _modules(path)}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_dependencies_point_one_way(package):
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imports(path) & set(FORBIDDEN[package])
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offenders, offenders


# Inside ``stream``: which sub-packages each part may not import. ``commands`` may import anything.
STREAM_LAYERS = {
    "stream/ingest": ("stream.service", "stream.lab", "stream.commands"),
    "stream/service": ("stream.lab", "stream.commands"),
    "stream/lab": ("stream.service", "stream.commands"),
    "stream/config.py": ("stream.service", "stream.lab", "stream.commands"),
    "stream/messages.py": ("stream.service", "stream.lab", "stream.commands"),
    "stream/pipeline.py": ("stream.service", "stream.lab", "stream.commands"),
    "stream/planning": ("stream.service", "stream.lab", "stream.commands"),
}


def stream_layer_offenders(root: Path) -> list[str]:
    """Imports inside ``root/stream`` that break :data:`STREAM_LAYERS`."""
    offenders = []
    for part, forbidden in STREAM_LAYERS.items():
        target = root / part
        paths = sorted(target.rglob("*.py")) if target.is_dir() else [target]
        for path in paths:
            bad = sorted(m for m in _modules(path) if m.startswith(tuple(f + "." for f in forbidden)) or m in forbidden)
            if bad:
                offenders.append(f"{path.relative_to(root)} imports {bad}")
    return offenders


def test_stream_jobs_point_one_way():
    assert not stream_layer_offenders(ROOT)


def _copy_stream(tmp_path: Path) -> None:
    """The parts :data:`STREAM_LAYERS` checks, copied under ``tmp_path``."""
    for part in STREAM_LAYERS:
        if part.endswith(".py"):
            (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / part).write_text((ROOT / part).read_text())
            continue
        (tmp_path / part).mkdir(parents=True)
        for path in (ROOT / part).glob("*.py"):
            (tmp_path / part / path.name).write_text(path.read_text())


def test_stream_layer_check_catches_a_service_import_in_ingest(tmp_path):
    """The check is not vacuous: a copy of the tree with one bad import in ingest fails it."""
    _copy_stream(tmp_path)
    assert stream_layer_offenders(tmp_path) == []
    windowing = tmp_path / "stream" / "ingest" / "windowing.py"
    windowing.write_text(windowing.read_text() + "\n\ndef _late():\n    from stream.service.metrics import Metrics  # noqa\n")
    assert stream_layer_offenders(tmp_path) == [
        "stream/ingest/windowing.py imports ['stream.service.metrics', 'stream.service.metrics.Metrics']"
    ]


def test_stream_lists_the_three_jobs_and_what_they_share():
    listing = sorted(p.name for p in (ROOT / "stream").iterdir() if not p.name.startswith(("_", ".")))
    assert listing == ["commands", "config.py", "ingest", "lab", "messages.py", "pipeline.py", "planning", "schemas",
                       "service"]


def test_the_planning_layer_check_catches_a_lab_import(tmp_path):
    """``dpstream run`` starts without the lab: a planning module importing the lab fails the check."""
    _copy_stream(tmp_path)
    assert stream_layer_offenders(tmp_path) == []
    planner = tmp_path / "stream" / "planning" / "planner.py"
    planner.write_text(planner.read_text() + "\n\ndef _late():\n    from stream.lab.recommend import candidates  # noqa\n")
    assert stream_layer_offenders(tmp_path) == [
        "stream/planning/planner.py imports ['stream.lab.recommend', 'stream.lab.recommend.candidates']"
    ]


AUTO_CONFIG = {
    "stream": {"id": "t", "timestep": "1h", "start": "2024-01-01T00:00:00Z"},
    "schema": {"user_id": "uid", "event_time": "ts",
               "attributes": [{"name": "a", "kind": "categorical", "values": ["v0", "v1", "v2", "v3"]}]},
    "privacy": {"unit": "w-event", "epsilon": 1, "w": 5, "cutoff": 3, "population": 200},
    "release": {"decision": "auto", "planner": {"timesteps": 30, "runs": 1}},
}


def test_run_starts_without_importing_the_lab(tmp_path):
    """``dpstream run``'s start-up (the planner resolving ``decision: auto``, and its warnings)
    loads no ``stream.lab`` module."""
    import json
    import os
    import subprocess
    import sys

    config = tmp_path / "c.json"
    config.write_text(json.dumps(AUTO_CONFIG))
    code = ("import sys, json, yaml, pathlib\n"
            f"p = pathlib.Path({str(tmp_path)!r}) / 'c.yaml'\n"
            f"p.write_text(yaml.safe_dump(json.loads(pathlib.Path({str(config)!r}).read_text())))\n"
            "from stream.commands import load_resolved\n"
            "from stream.commands.run import _warn_about_configuration\n"
            "settings = load_resolved(str(p))\n"
            "assert settings.plan is not None\n"
            "_warn_about_configuration(settings)\n"
            "print(sorted(m for m in sys.modules if m.startswith('stream.lab')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


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
PUBLIC_WORKLOAD = ("stream/lab/generate.py", "stream/planning/families.py", "stream/lab/highdim.py", "stream/lab/evaluate.py", "stream/lab/metrics.py", "stream/commands/demo.py")


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
