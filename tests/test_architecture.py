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
* One place builds an engine from settings (``stream/config/building.py``).
* No import circle between modules (module-level and function-level imports
  both count: see :func:`import_graph`); each check is shown to catch a
  planted violation.
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
    "stream/config": ("stream.service", "stream.lab", "stream.commands"),
    "stream/messages.py": ("stream.service", "stream.lab", "stream.commands"),
    "stream/pipeline.py": ("stream.service", "stream.lab", "stream.commands"),
    "stream/answers.py": ("stream.service", "stream.lab", "stream.commands"),
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
        for path in (ROOT / part).rglob("*.py"):
            copy = tmp_path / path.relative_to(ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(path.read_text())


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
    assert listing == ["answers.py", "commands", "config", "ingest", "lab", "messages.py", "pipeline.py", "planning",
                       "schemas", "service"]


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
    "release": {"decision": "auto", "planner": {"timesteps": 30, "runs": 1, "realisations": 1}},
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


# One place builds an engine from settings (issue 29): ``stream.config.building.build_engine``. It is the
# only caller, outside ``controller``, of the controller's primitive ``controller.method.build_engine``
# (policy + mechanism + bins, with the method's checks), and the only place a ``PersonalEngine`` is made.
ENGINE_BUILDER = "stream/config/building.py"
ENGINE_CONSTRUCTORS = {"Engine": "controller/method.py", "PersonalEngine": ENGINE_BUILDER}


def engine_builder_offenders(root: Path) -> list[str]:
    """Places in ``controller``/``stream`` that build an engine other than through the one builder."""
    offenders = []
    for package in ("controller", "stream"):
        for path in sorted((root / package).rglob("*.py")):
            rel = str(path.relative_to(root))
            tree = ast.parse(path.read_text(), filename=rel)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module in ("controller", "controller.method") \
                        and any(a.name == "build_engine" for a in node.names) \
                        and rel not in (ENGINE_BUILDER, "controller/__init__.py"):
                    offenders.append(f"{rel}:{node.lineno} imports controller's build_engine")
                if isinstance(node, ast.Call):
                    name = _dotted(node.func)
                    last = name.split(".")[-1]
                    if last in ENGINE_CONSTRUCTORS and rel != ENGINE_CONSTRUCTORS[last]:
                        offenders.append(f"{rel}:{node.lineno} constructs {last}")
                    if name.endswith("method.build_engine") and rel != ENGINE_BUILDER:
                        offenders.append(f"{rel}:{node.lineno} calls {name}")
    return offenders


def test_one_place_builds_an_engine():
    assert engine_builder_offenders(ROOT) == []


def test_engine_builder_check_catches_a_second_builder(tmp_path):
    """Not vacuous: a copy of the tree with the lab building its own engine fails it."""
    for package in ("controller", "stream"):
        for path in (ROOT / package).rglob("*.py"):
            copy = tmp_path / path.relative_to(ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(path.read_text())
    assert engine_builder_offenders(tmp_path) == []
    lab = tmp_path / "stream" / "lab" / "table.py"
    lab.write_text(lab.read_text() + "\n\ndef _own(s):\n    from controller.method import build_engine\n\n"
                   "    return build_engine(s.method_spec(), s.mechanism(), s.domain().size)\n")
    assert engine_builder_offenders(tmp_path) == ["stream/lab/table.py:" + str(len(lab.read_text().splitlines()) - 2)
                                                  + " imports controller's build_engine"]


# -- no import circle between modules ------------------------------------------------------------
#
# The graph: one node per module of ``histogram``, ``controller`` and ``stream`` (a package's
# ``__init__.py`` is the package); an edge A → B when A imports B *anywhere*: at module level and
# inside functions alike. Function-level imports are counted because they are still dependencies:
# a lazy import only postpones a circle to the first call (where it can fail half-initialised), and
# "import it inside the function" is the usual way a circle is hidden rather than removed. Imports
# under ``if TYPE_CHECKING:`` would count too (they are a dependency of the code's meaning); there
# are none. ``from P import name`` is an edge to the module ``P.name`` when that is a module, else to
# ``P``; the implicit import of a module's parent packages is not an edge (every submodule has it).

#: import circles that are allowed: none (the lab circle of issue 29 is gone; keep this empty)
ALLOWED_CIRCLES: tuple[frozenset[str], ...] = ()


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, packages: tuple[str, ...] = ("histogram", "controller", "stream")) -> dict[str, set[str]]:
    """``module → the project modules it imports`` (module-level and function-level imports)."""
    files = {_module_name(root, p): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in files}

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor if is_package else anchor[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                hit = known(target)
                if hit is not None and hit != name:
                    graph[name].add(hit)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (each sorted)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(out)


def _one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest import cycle through the component's first module: ``[a, b, …, a]``."""
    inside, start = set(component), component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & inside):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{component} is not a circle")


def import_circles(root: Path) -> list[str]:
    """Each import circle not in :data:`ALLOWED_CIRCLES`, as ``a -> b -> a (component: …)``."""
    graph = import_graph(root)
    found = []
    for component in strongly_connected(graph):
        if any(set(component) <= allowed for allowed in ALLOWED_CIRCLES):
            continue
        found.append(" -> ".join(_one_cycle(graph, component)) + f" (component: {', '.join(component)})")
    return found


def test_no_import_circle_between_modules():
    circles = import_circles(ROOT)
    assert not circles, "import circles (break each by moving what both sides need below them):\n" + "\n".join(circles)


def test_circle_check_catches_a_planted_circle(tmp_path):
    """Not vacuous: a copy of the tree where ``stream.ingest.wire`` imports, inside a function, a module
    that imports it back (``stream.ingest.formats``) fails the check, naming the circle."""
    for package in ("histogram", "controller", "stream"):
        for path in (ROOT / package).rglob("*.py"):
            copy = tmp_path / path.relative_to(ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(path.read_text())
    assert import_circles(tmp_path) == []
    wire = tmp_path / "stream" / "ingest" / "wire.py"
    wire.write_text(wire.read_text() + "\n\ndef _late():\n    from stream.ingest.formats import FORMATS  # noqa\n")
    assert import_circles(tmp_path) == [
        "stream.ingest.formats -> stream.ingest.wire -> stream.ingest.formats "
        "(component: stream.ingest.formats, stream.ingest.protobuf, stream.ingest.wire)"]


def test_circle_check_reads_relative_and_package_imports(tmp_path):
    """``from . import b`` in a package's module and ``from p import b`` in ``p/__init__.py`` are edges."""
    pkg = tmp_path / "stream" / "p"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from stream.p import a\n")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    import stream.p.a\n")
    assert import_graph(tmp_path, ("stream",)) == {"stream.p": {"stream.p.a"}, "stream.p.a": {"stream.p.b"},
                                                  "stream.p.b": {"stream.p.a"}}
