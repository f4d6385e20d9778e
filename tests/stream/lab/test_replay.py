"""``dpstream replay`` end to end: output, summary, seeds, strict mode, exit codes, CLI wiring."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from stream.commands import cli
from stream.commands.cli import main
from stream.config import load_settings
from stream.service.testing import SMALL_ATTRIBUTES, MemorySource, payloads, run_in_memory

ROOT = Path(__file__).resolve().parents[3]

CONFIG = {
    "stream": {"id": "replay-test", "timestep": "60s", "allowed_lateness": "30s"},
    "schema": {"user_id": "person", "event_time": "ts", "attributes": SMALL_ATTRIBUTES},
    "privacy": {"unit": "user-level", "epsilon": 1, "horizon": 40, "cutoff": 8, "population": 50},
    "release": {"decision": "dsat"},
}


def events(n=400, seed=0):
    rng = np.random.default_rng(seed)
    times = np.sort(rng.uniform(0, 1200, n)).round(3)
    return [{"person": f"p{int(rng.integers(60))}", "ts": float(t),
             "attributes": {"age": int(rng.integers(0, 100)), "sex": "MF"[int(rng.integers(2))]}} for t in times]


@pytest.fixture()
def files(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    ev = events()
    lines = ["person,ts,age,sex"] + [f"{e['person']},{e['ts']!r},{e['attributes']['age']},{e['attributes']['sex']}"
                                     for e in ev]
    lines.insert(5, "bad,abc,30,M")  # line 6
    lines.insert(9, "p1,100,300,M")  # line 10
    lines.append("late,1.5,30,F")    # last line, out of order: the whole file is known, so it still counts
    inp = tmp_path / "events.csv"
    inp.write_text("\n".join(lines) + "\n")
    return cfg, inp, ev, len(lines)


def run(argv, capsys):
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    return code, err


def test_replay_writes_one_release_per_timestep_and_a_summary(files, tmp_path, capsys):
    cfg, inp, _, nlines = files
    out = tmp_path / "releases.jsonl"
    code, err = run(["replay", "--config", cfg, "--input", inp, "--output", out, "--seed", 3], capsys)
    assert code == 0, err
    msgs = [json.loads(line) for line in out.read_text().splitlines()]
    assert msgs[0]["message_type"] == "domain" and msgs[0]["bins"] == 20
    releases = msgs[1:]
    assert [m["timestep"]["index"] for m in releases] == list(range(20))
    assert all(m["message_type"] == "release" and m["stream"] == "replay-test" for m in releases)
    assert f"read {nlines - 1:,} rows" in err
    assert "invalid_time: 1 (first lines 6)" in err and "out_of_domain: 1 (first lines 10)" in err
    assert "late (timestep_sealed): 0" in err  # no arrival times: nothing is late offline
    assert "timesteps released: 20" in err and "ε spent" in err and "seeded" in err
    assert "Traceback" not in err


def test_seeded_replay_is_reproducible_and_equals_the_service_loop(files, tmp_path, capsys):
    cfg, inp, ev, _ = files
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run(["replay", "--config", cfg, "--input", inp, "--output", a, "--seed", 9], capsys)[0] == 0
    assert run(["replay", "--config", cfg, "--input", inp, "--output", b, "--seed", 9], capsys)[0] == 0
    assert a.read_bytes() == b.read_bytes()
    # the service's loop on JSON payloads of the same events (plus the same bad ones) writes the same releases
    settings = load_settings(cfg, randomness={"seed": 9, "allow_seeded_noise": True},
                             kafka={"record_time": "watermark", "allow_data_dependent_inclusion": True})
    bad = [{"person": "bad", "ts": "abc", "attributes": {"age": 30, "sex": "M"}},
           {"person": "p1", "ts": 100, "attributes": {"age": 300, "sex": "M"}}]
    # (the in-memory loop runs the legacy watermark rule here, opted into: the file has no arrival
    # times and no stream.start; the out-of-order row goes first so it counts
    # there too, as it does in replay where the whole file is known)
    msgs = payloads([{"person": "late", "ts": 1.5, "attributes": {"age": 30, "sex": "F"}}]
                    + ev[:4] + bad[:1] + ev[4:7] + bad[1:] + ev[7:], per_message=25)
    res = run_in_memory(settings, MemorySource(msgs, max_records=3))
    assert [r.payload for r in res.releases] == a.read_bytes().splitlines()[1:]
    # a different seed gives different noise
    c = tmp_path / "c.jsonl"
    assert run(["replay", "--config", cfg, "--input", inp, "--output", c, "--seed", 10], capsys)[0] == 0
    assert c.read_bytes() != a.read_bytes()


def test_without_a_seed_the_noise_is_secure(files, tmp_path, capsys):
    cfg, inp, _, _ = files
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    code, err = run(["replay", "--config", cfg, "--input", inp, "--output", a], capsys)
    assert code == 0 and "secure" in err
    run(["replay", "--config", cfg, "--input", inp, "--output", b], capsys)
    assert a.read_bytes().splitlines()[1:] != b.read_bytes().splitlines()[1:]


def test_strict_stops_at_the_first_bad_row_and_writes_nothing(files, tmp_path, capsys):
    cfg, inp, _, _ = files
    out = tmp_path / "strict.jsonl"
    code, err = run(["replay", "--config", cfg, "--input", inp, "--output", out, "--seed", 1, "--strict"], capsys)
    assert code == 2 and "line 6: invalid_time" in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".strict.jsonl*"))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["privacy"].update(epsilon=-1), "privacy.epsilon"),
        (lambda c: c["stream"].update(timestep="soon"), "stream.timestep"),
        (lambda c: c.update(typo={"x": 1}), "unknown setting"),
    ],
)
def test_bad_config_exits_2_with_a_message(files, tmp_path, capsys, mutate, message):
    _, inp, _, _ = files
    cfg = dict(json.loads(json.dumps(CONFIG)))
    mutate(cfg)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code, err = run(["replay", "--config", path, "--input", inp, "--output", tmp_path / "o.jsonl"], capsys)
    assert code == 2 and message in err and "Traceback" not in err


def test_bad_input_exits_2(files, tmp_path, capsys):
    cfg, _, _, _ = files
    code, err = run(["replay", "--config", cfg, "--input", tmp_path / "missing.csv", "--output",
                     tmp_path / "o.jsonl"], capsys)
    assert code == 2 and "does not exist" in err
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("user_id,event_time,age,sex\n")
    code, err = run(["replay", "--config", cfg, "--input", wrong, "--output", tmp_path / "o.jsonl"], capsys)
    assert code == 2 and "lacks column" in err and "person" in err
    code, err = run(["replay", "--config", cfg, "--input", wrong, "--output", tmp_path / "no" / "o.jsonl"], capsys)
    assert code == 2


def test_counts_input_skips_windowing(files, tmp_path, capsys):
    cfg, inp, _, _ = files
    from stream.ingest.csvio import EventCsvReader
    from stream.ingest.events import validate_batch
    from stream.ingest.windowing import Grid, Windower

    settings = load_settings(cfg)
    w = Windower(Grid.from_settings(settings))
    for blk in EventCsvReader(inp, settings):
        w.offer_whole(validate_batch(blk.batch, settings.domain())[0])
    truth = []
    for c in w.complete(None, final=True):
        truth.append(w.take(c).counts(20))
        w.advance()
    counts = tmp_path / "counts.csv"
    counts.write_text("timestep," + ",".join(f"b{i}" for i in range(20)) + "\n" + "".join(
        f"{t}," + ",".join(map(str, row.tolist())) + "\n" for t, row in enumerate(truth)))
    a, b = tmp_path / "events.jsonl", tmp_path / "counts.jsonl"
    assert run(["replay", "--config", cfg, "--input", inp, "--output", a, "--seed", 4], capsys)[0] == 0
    code, err = run(["replay", "--config", cfg, "--input", counts, "--output", b, "--seed", 4, "--counts"], capsys)
    assert code == 0, err
    assert a.read_bytes() == b.read_bytes()
    code, err = run(["replay", "--config", cfg, "--input", inp, "--output", b, "--counts"], capsys)
    assert code == 2 and "bins" in err


def test_summary_json(files, tmp_path, capsys):
    cfg, inp, _, _ = files
    js = tmp_path / "summary.json"
    assert run(["replay", "--config", cfg, "--input", inp, "--output", tmp_path / "o.jsonl", "--seed", 1,
                "--summary-json", js], capsys)[0] == 0
    s = json.loads(js.read_text())
    assert s["timesteps"] == 20 and s["rejected"]["invalid_time"] == 1 and s["late"] == 0
    assert s["first_rows"]["out_of_domain"] == [10]


def test_a_listed_command_module_that_is_missing_is_an_error(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("replay", "no_such_command"))
    assert main(["replay", "--help"]) == 1
    assert "no_such_command" in capsys.readouterr().err


def test_python_dash_m_stream(files, tmp_path):
    cfg, inp, _, _ = files
    out = tmp_path / "m.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "stream", "replay", "--config", str(cfg), "--input", str(inp), "--output", str(out),
         "--seed", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(out.read_text().splitlines()) == 21


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0 and "replay" in capsys.readouterr().out


def test_replay_progress_bar_when_asked_and_quiet_otherwise(files, tmp_path, capsys):
    cfg, inp, _, _ = files
    base = ["replay", "--config", cfg, "--input", inp, "--output", tmp_path / "r.jsonl", "--seed", 3]
    code, err = run([*base, "--progress", "on"], capsys)
    assert code == 0 and "replay [" in err and "row" in err
    code, err = run(base, capsys)  # auto, and stderr is not a terminal under pytest
    assert code == 0 and "replay [" not in err
