"""How the suite runs (issue 34 item 1): the README's command runs in parallel without the nightly
tests, and CI runs every test. Guards against a CI that silently stops running the nightly
searches, or a test extra that lacks the plugin the default options need."""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
INI = PYPROJECT["tool"]["pytest"]["ini_options"]


def _addopts() -> list[str]:
    return shlex.split(INI["addopts"])


def test_the_default_run_is_parallel_and_leaves_the_nightly_tests_out():
    opts = _addopts()
    assert opts[opts.index("-n") + 1] in ("auto", "2"), opts
    assert opts[opts.index("-m") + 1] == "not nightly", opts
    assert any(m.startswith("nightly:") for m in INI["markers"])
    extra = {re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0].lower()
             for r in PYPROJECT["project"]["optional-dependencies"]["test"]}
    assert "pytest-xdist" in extra, "-n in addopts needs pytest-xdist in the test extra"


def test_ci_runs_every_test_including_the_nightly_ones():
    """.ci/run's pytest line overrides addopts' -m with an expression every test satisfies, and
    nothing else deselects (no -k, no --deselect, no second -m)."""
    lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip().startswith("python3 -m pytest")]
    assert len(lines) == 1, lines
    argv = shlex.split(lines[0])
    argv = argv[argv.index("pytest") + 1:]
    assert argv.count("-m") == 1 and argv[argv.index("-m") + 1] == "nightly or not nightly", argv
    assert not {"-k", "--deselect", "--ignore", "-x", "--lf"} & set(argv), argv


def test_the_readme_opens_with_the_two_set_up_commands():
    block = (ROOT / "README.md").read_text().split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block == ['python3 -m pip install -e ".[demo]" && dpstream demo',
                     'python3 -m pip install -e ".[test]" && python3 -m pytest']


def test_auto_starts_two_workers_per_core_at_most_cores_plus_four(monkeypatch):
    """conftest.py's ``-n auto``: the suite waits on brokers and subprocesses much of the time, so
    two workers per core; the environment variable xdist documents still overrides it."""
    import conftest

    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    for cores, workers in ((1, 2), (2, 4), (4, 8), (16, 20)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)), raising=False)
        assert conftest.pytest_xdist_auto_num_workers(None) == workers, cores
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert conftest.pytest_xdist_auto_num_workers(None) == 3
