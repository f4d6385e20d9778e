"""What every command pays at start-up: the CLI imports the HTTP server, the broker and
importlib.metadata only when they are needed, and still maps their errors as before (issue 13 item 6:
``evaluate``'s fixed costs)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from stream.commands import EXIT_USAGE, cli

ROOT = Path(__file__).resolve().parents[3]


def _main_raising(monkeypatch, exc: BaseException) -> int:
    """``cli.main`` with one command whose handler raises ``exc``."""
    def parser(modules=None):
        p = cli.OneLineParser(prog="dpstream")
        sub = p.add_subparsers(dest="command")
        boom = sub.add_parser("boom")

        def handler(args: argparse.Namespace) -> int:
            raise exc

        boom.set_defaults(handler=handler)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    monkeypatch.setattr(cli, "tune_allocator", lambda: None)
    return cli.main(["boom"])


@pytest.mark.parametrize("module,name,args", [
    ("stream.config", "ConfigError", ("privacy.epsilon: must be > 0",)),
    ("stream.service.http", "ListenError", ("service.http_port 8000 is in use",)),
    ("stream.service.broker", "EmbeddedBrokerMissing", ("install the embedded extra",)),
])
def test_errors_the_person_can_fix_still_exit_2_in_one_line(monkeypatch, capsys, module, name, args):
    __import__(module)
    exc = getattr(sys.modules[module], name)(*args)
    assert _main_raising(monkeypatch, exc) == EXIT_USAGE
    err = capsys.readouterr().err
    assert args[0] in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("exc", [ValueError("a plain bug"), OSError("not a ListenError"), RuntimeError("x")])
def test_other_exceptions_still_propagate(monkeypatch, exc):
    with pytest.raises(type(exc)):
        _main_raising(monkeypatch, exc)


def test_evaluate_imports_neither_the_http_server_nor_the_broker(tmp_path):
    out = tmp_path / "fam"
    gen = subprocess.run([sys.executable, "-m", "stream", "generate", "sine", "--timesteps", "30", "--scale", "50",
                          "--seed", "1", "--counts-only", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert gen.returncode == 0, gen.stderr
    code = ("import sys\n"
            "from stream.commands.cli import main\n"
            f"rc = main(['evaluate', '--config', {str(out / 'config.yaml')!r}, '--input', "
            f"{str(out / 'counts.csv')!r}, '--methods', 'sample', '--runs', '1', '--jobs', '1', "
            "'--progress', 'off'])\n"
            "print('RC', rc, [m for m in ('stream.service.http', 'stream.service.broker') if m in sys.modules])\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "RC 0 []" in result.stdout, (result.stdout, result.stderr)


def test_version_is_looked_up_when_asked():
    result = subprocess.run([sys.executable, "-m", "stream", "--version"], capture_output=True, text=True, cwd=ROOT,
                            timeout=60)
    assert result.returncode == 0
    assert result.stdout.startswith("dpstream ") and result.stdout.strip() != "dpstream"
