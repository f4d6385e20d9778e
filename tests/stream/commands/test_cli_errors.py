"""Every configuration or command-line mistake: exit 2, one stderr line naming the field, the value
and the fix, never a traceback (issue 14 item 4). Each case runs the real CLI in a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.kafka_harness import broker  # noqa: F401

ROOT = Path(__file__).resolve().parents[3]

# noise_floor: true keeps the threshold diagnostic (a WARNING log line on stderr) out of the way
GOOD = textwrap.dedent(
    """\
    stream: {id: t, timestep: 1h}
    schema:
      attributes:
        - {name: x, kind: numeric, min: 0, max: 10, bins: 10}
    privacy: {unit: user-level, epsilon: 1, horizon: 10, cutoff: 2, population: 100}
    release: {decision: dsat, noise_floor: true}
    service: {state_dir: STATE}
    """
)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra or {})
    return env


def dpstream(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stream", *args], capture_output=True, text=True,
                          env=_env(env), timeout=timeout, cwd=ROOT)


def _config(tmp_path: Path, text: str = GOOD, *, replace: tuple[str, str] | None = None) -> str:
    if replace is not None:
        assert replace[0] in text, replace
        text = text.replace(*replace)
    text = text.replace("STATE", str(tmp_path / "state"))
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


SYNTAX = "stream: {id: t\n  timestep: [\n"

# (name, config text or replacement, argv after the config, env, needles that must appear in the line)
CASES = [
    ("yaml syntax", SYNTAX, ["run", "-c", "{cfg}"], {}, ["c.yaml:2:", "YAML syntax"]),
    ("yaml not a mapping", "- a\n- b\n", ["check-config", "{cfg}"], {}, ["c.yaml", "list", "privacy:"]),
    ("empty file: privacy missing", "", ["check-config", "{cfg}"], {}, ["privacy", "required", "DPSTREAM_PRIVACY"]),
    ("port out of range", ("state_dir:", "http_port: 99999, state_dir:"), ["run", "-c", "{cfg}"], {},
     ["service.http_port", "99999", "valid port", "set service.http_port"]),
    ("port negative", ("state_dir:", "http_port: -1, state_dir:"), ["check-config", "{cfg}"], {},
     ["service.http_port", "-1", "valid port"]),
    ("misspelt key", ("noise_floor", "thresold: 0.1, noise_floor"), ["check-config", "{cfg}"], {},
     ["release.thresold", "unknown setting", "did you mean release.threshold"]),
    ("misspelt section", ("release:", "relase:"), ["check-config", "{cfg}"], {}, ["relase", "unknown setting",
                                                                                  "did you mean release"]),
    ("unknown method", ("decision: dsat", "decision: dsatt"), ["run", "-c", "{cfg}"], {},
     ["release.decision", "dsatt", "dsat, dsft"]),
    ("unknown mechanism", ("decision: dsat", "decision: dsat, mechanism: gauss"), ["check-config", "{cfg}"],
     {}, ["release.mechanism", "gauss", "'lpa', 'psd', 'copula' or 'marginals'"]),
    ("wrong type", ("service: {", "kafka: {max_poll_records: many}\nservice: {"), ["check-config", "{cfg}"],
     {}, ["kafka.max_poll_records", "'many'", "whole number"]),
    ("negative count in config", ("service: {", "kafka: {topic_partitions: -3}\nservice: {"),
     ["check-config", "{cfg}"], {}, ["kafka.topic_partitions", "-3", ">= 1"]),
    ("env override wrong type", None, ["check-config", "{cfg}"], {"DPSTREAM_SERVICE__HTTP_PORT": "eighty"},
     ["service.http_port", "'eighty'", "whole number"]),
    ("missing CA file", ("service: {", "kafka: {security_protocol: SSL, ssl_cafile: /nonexistent/ca.pem}\n"
                                      "service: {"), ["run", "-c", "{cfg}"], {},
     ["kafka.ssl_cafile", "/nonexistent/ca.pem", "no such file"]),
    ("missing key file (check-config)", ("service: {", "kafka: {ssl_keyfile: /nonexistent/k.pem}\nservice: {"),
     ["check-config", "{cfg}"], {}, ["kafka.ssl_keyfile", "/nonexistent/k.pem", "no such file"]),
    ("missing config file", None, ["run", "-c", "{tmp}/nope.yaml"], {}, ["nope.yaml", "does not exist", "--config"]),
    ("config is a directory", None, ["check-config", "{tmp}"], {}, ["is not a file"]),
    ("missing CSV", None, ["replay", "--config", "{cfg}", "--input", "{tmp}/none.csv", "--output", "{tmp}/o"],
     {}, ["--input", "none.csv", "does not exist"]),
    ("run --max-timesteps -1", None, ["run", "-c", "{cfg}", "--max-timesteps", "-1"], {},
     ["--max-timesteps", "-1", "--help"]),
    ("run --max-timesteps x", None, ["run", "-c", "{cfg}", "--max-timesteps", "x"], {}, ["--max-timesteps", "'x'"]),
    ("replay --seed -1", None, ["replay", "--config", "{cfg}", "--input", "a", "--output", "b", "--seed", "-1"],
     {}, ["--seed", "-1"]),
    ("generate --timesteps -1", None, ["generate", "census", "--timesteps", "-1", "--population", "3", "--out",
                                       "{tmp}/g"], {}, ["--timesteps", "-1"]),
    ("generate --population 0", None, ["generate", "traffic", "--timesteps", "3", "--population", "0", "--out",
                                       "{tmp}/g"], {}, ["--population", "0"]),
    ("evaluate --runs -1", None, ["evaluate", "--config", "{cfg}", "--input", "a", "--runs", "-1"], {},
     ["--runs", "-1"]),
    ("evaluate unknown method", None, ["evaluate", "--config", "{cfg}", "--input", "{cfg}", "--methods", "dsat,foo"],
     {}, ["foo", "dsat, dsft"]),
    ("demo --timesteps -1", None, ["demo", "--timesteps", "-1"], {}, ["--timesteps", "-1"]),
    ("demo --objects 0", None, ["demo", "--objects", "0"], {}, ["--objects", "0"]),
    ("demo --http-port 99999", None, ["demo", "--http-port", "99999"], {}, ["--http-port", "99999", "valid port"]),
    ("broker --port 70000", None, ["broker", "--port", "70000"], {}, ["--port", "70000", "valid port"]),
    ("key given twice", GOOD + "release: {mechanism: psd}\n", ["check-config", "{cfg}"], {},
     ["c.yaml:8", "'release'", "twice", "line 6"]),
    ("bad start time", ("timestep: 1h", "timestep: 1h, start: tomorrow"), ["check-config", "{cfg}"], {},
     ["stream.start", "'tomorrow'", "ISO-8601"]),
    ("cutoff above horizon", ("cutoff: 2", "cutoff: 11"), ["check-config", "{cfg}"], {},
     ["privacy.cutoff", "11", "privacy.horizon"]),
    ("section not a mapping", ("service: {state_dir: STATE}", "service: 5"), ["check-config", "{cfg}"], {},
     ["service: ", "(got 5)", "mapping"]),
    ("demo --timestep 0s", None, ["demo", "--timestep", "0s"], {}, ["--timestep", "0s", "> 0"]),
    ("demo --timestep soon", None, ["demo", "--timestep", "soon"], {}, ["--timestep", "'soon'"]),
    ("generate --epsilon 0", None, ["generate", "census", "--timesteps", "3", "--population", "3", "--out",
                                    "{tmp}/g", "--epsilon", "0"], {}, ["privacy.epsilon", "0", "> 0"]),
    ("unknown command", None, ["nosuch"], {}, ["nosuch", "choose from", "--help"]),
    ("unknown option", None, ["check-config", "{cfg}", "--frobnicate"], {}, ["--frobnicate"]),
    # issue 34 item 3: check-config takes --config like every other command, and FILE; exactly one of them
    ("check-config --config, a mistake", ("cutoff: 2", "cutoff: 11"), ["check-config", "--config", "{cfg}"], {},
     ["privacy.cutoff", "11", "privacy.horizon"]),
    ("check-config FILE and --config", None, ["check-config", "{cfg}", "--config", "{cfg}"], {},
     ["--config", "not allowed with", "FILE", "--help"]),
    ("check-config without a configuration", None, ["check-config"], {}, ["FILE", "--config", "required"]),
    ("run without --config", None, ["run"], {}, ["--config", "required"]),
]


def _one_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(("name", "config", "argv", "env", "needles"), CASES, ids=[c[0] for c in CASES])
def test_mistake_is_one_line_exit_2(tmp_path, name, config, argv, env, needles):
    if isinstance(config, str):
        cfg = _config(tmp_path, config)
    else:
        cfg = _config(tmp_path, replace=config)
    args = [a.format(cfg=cfg, tmp=tmp_path) for a in argv]
    result = dpstream(*args, env=env)
    line = _one_line(result)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert line.startswith("dpstream"), line
    for needle in needles:
        assert needle in line, (needle, line)
    assert not (tmp_path / "state").exists(), "a refused configuration must create nothing"


# A configuration the run warns about twice (issue 34 item 4): the threshold below the noise floor
# (no release.noise_floor) and noise above the data (10 people over 10 bins: the zero release wins)
WARNED = GOOD.replace("release: {decision: dsat, noise_floor: true}", "release: {decision: dsat}").replace(
    "population: 100", "population: 10")


@pytest.mark.parametrize("setting", ["http_port", "public_port"])
def test_port_in_use_at_start_up(tmp_path, setting):
    """A fatal start-up error comes alone: the configuration's warnings (threshold, zero release) are
    logged only once the start can no longer fail, so stderr is the one error line (issue 34 item 4)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        others = "" if setting == "http_port" else "http_port: 0, "
        cfg = _config(tmp_path, WARNED, replace=("state_dir:", f"{others}{setting}: {port}, state_dir:"))
        result = dpstream("run", "-c", cfg)
    assert "WARNING" not in result.stderr, result.stderr
    line = _one_line(result)
    assert result.returncode == 2
    assert f"service.{setting}: cannot listen on 127.0.0.1:{port}" in line and "in use" in line and "free port" in line, line
    assert not (tmp_path / "state").exists(), "a refused start must create no state directory"


@pytest.mark.kafka
def test_configuration_warnings_come_once_the_service_started(tmp_path, broker):  # noqa: F811
    """The other half of item 4: a run that does start still logs both warnings, once each, after
    its own "started" record (the ports bound, the journal opened, the Kafka clients up)."""
    import json
    import signal
    import threading

    from tests.kafka_harness import service_config, write_config

    # the harness's service configuration (record time, fast timeouts) with WARNED's two problems
    cfg = str(write_config(service_config(broker.bootstrap, tmp_path / "state", release={"decision": "dsat"},
                                          privacy={"population": 10, "horizon": 10, "cutoff": 2}),
                           tmp_path / "c.yaml"))
    proc = subprocess.Popen([sys.executable, "-m", "stream", "run", "-c", cfg], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
    records: list[dict] = []
    guard = threading.Timer(120, proc.kill)  # a run that never warns must not hang the test
    guard.start()
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # JSON log records, one per line
            records.append(json.loads(line))
            if sum(r.get("level") == "WARNING" for r in records) == 2:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=60)
        guard.cancel()
    records += [json.loads(line) for line in rest.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, (proc.returncode, records)
    events = [r["event"] for r in records]
    warnings = [r["event"] for r in records if r["level"] == "WARNING"]
    assert len(warnings) == 2, records
    assert "release.threshold" in warnings[0] and "worse than publishing nothing" in warnings[1], warnings
    assert events.index("started") < events.index(warnings[0]), events


@pytest.mark.parametrize("argv", [["check-config", "{cfg}"], ["run", "-c", "{cfg}"],
                                  ["replay", "--config", "{cfg}", "--input", "{cfg}", "--output", "{tmp}/o"],
                                  ["evaluate", "--config", "{cfg}", "--input", "{cfg}"]],
                         ids=lambda argv: argv[0])
def test_several_mistakes_give_one_line_each(tmp_path, argv):
    cfg = _config(tmp_path, replace=("decision: dsat", "decision: nope, mechanism: gauss, thresold: 1"))
    result = dpstream(*[a.format(cfg=cfg, tmp=tmp_path) for a in argv])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 3, result.stderr
    assert all(line.startswith(f"dpstream {argv[0]}: error: release.") for line in lines), lines


def test_a_valid_config_prints_one_summary_line_and_creates_nothing(tmp_path):
    cfg = _config(tmp_path)
    for argv in (["check-config", cfg], ["run", "--config", cfg, "--check"]):
        result = dpstream(*argv)
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        (line,) = result.stdout.splitlines()
        for needle in ("stream t", "dsat + lpa", "user-level ε=1 over 10 timesteps", "domain 10 bins",
                       "dpstream.events -> dpstream.releases"):
            assert needle in line, (needle, line)
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("form", [["--config", "{cfg}"], ["-c", "{cfg}"], ["{cfg}"], ["--config={cfg}"]],
                         ids=["--config", "-c", "FILE", "--config="])
def test_check_config_takes_the_configuration_as_every_command_does(tmp_path, form):
    """``check-config --config FILE`` (and ``-c``), as run, replay and evaluate take it; ``FILE`` still works
    (issue 34 item 3). Each form checks the same file: the same summary, and a mistake is found in each."""
    cfg = _config(tmp_path)
    result = dpstream("check-config", *[a.format(cfg=cfg) for a in form], "--no-file-checks")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout == dpstream("run", "--check", "--config", cfg).stdout
    bad = _config(tmp_path, replace=("cutoff: 2", "cutoff: 11"))
    result = dpstream("check-config", *[a.format(cfg=bad) for a in form])
    assert result.returncode == 2 and "privacy.cutoff" in _one_line(result)


def test_every_command_reading_a_configuration_takes_config_and_c():
    """One way to pass a configuration: each subcommand with a configuration option spells it --config
    (short -c), and reads the file it names."""
    from stream.commands import config_path
    from stream.commands.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    readers = {name for name, sub in commands.items()
               if any("--config" in a.option_strings for a in sub._actions)}
    assert readers == {"replay", "evaluate", "run", "check-config"}, readers
    extra = {"replay": ["--input", "i", "--output", "o"], "evaluate": ["--input", "i"]}
    for name in sorted(readers):
        for flag in ("--config", "-c"):
            args = parser.parse_args([name, flag, "x.yaml", *extra.get(name, [])])
            assert config_path(args) == "x.yaml", (name, flag)
    assert config_path(parser.parse_args(["check-config", "x.yaml"])) == "x.yaml"


def test_check_config_no_file_checks_accepts_a_config_for_another_machine(tmp_path):
    cfg = _config(tmp_path, replace=("service: {", "kafka: {ssl_cafile: /mounted/elsewhere/ca.pem}\nservice: {"))
    assert dpstream("check-config", cfg).returncode == 2
    result = dpstream("check-config", "--no-file-checks", cfg)
    assert result.returncode == 0, result.stderr


def test_a_real_bug_still_shows_its_traceback():
    """The one-line rule is for mistakes a person can fix; an internal error keeps its traceback (exit 1)."""
    code = ("import sys; import stream.commands.check_config as c\n"
            "def boom(args): raise RuntimeError('internal bug')\n"
            "c.run = boom\n"
            "from stream.commands.cli import main; sys.exit(main(['check-config', 'x']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=ROOT,
                            timeout=60)
    assert result.returncode == 1 and "Traceback" in result.stderr and "internal bug" in result.stderr
