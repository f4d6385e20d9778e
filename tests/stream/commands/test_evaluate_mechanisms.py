"""Plain ``dpstream evaluate`` on every ``release.mechanism`` the configuration accepts (issue 31 item 3).

Each value either runs (exit 0, a result for every method) or exits 2 with one line that names
the ``--mechanisms`` command evaluating it; never a traceback. The values come from the
configuration's own type, so a mechanism added later is covered without editing this test.
"""

from __future__ import annotations

import csv
import json
import typing
from pathlib import Path

import numpy as np
import pytest
import yaml

from stream.commands.cli import main
from stream.config import ReleaseSection

MECHANISMS = typing.get_args(ReleaseSection.model_fields["mechanism"].annotation)


def _stream(tmp_path: Path, mechanism: str) -> tuple[Path, Path]:
    levels = (3, 4, 2)
    config = {
        "stream": {"id": "evalmech", "timestep": "1h", "start": "2024-01-01T00:00:00Z"},
        "schema": {
            "user_id": "uid",
            "event_time": "ts",
            "attributes": [{"name": f"a{i}", "kind": "categorical", "values": [f"v{j}" for j in range(n)]}
                           for i, n in enumerate(levels)],
        },
        "privacy": {"unit": "user-level", "epsilon": 1.0, "cutoff": 2, "horizon": 4, "population": 200},
        "release": {"decision": "dsat", "mechanism": mechanism, "threshold": 0.05},
    }
    cfg = tmp_path / f"{mechanism}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    rng = np.random.default_rng(7)
    events = tmp_path / "events.csv"
    with events.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["uid", "ts", *(f"a{i}" for i in range(len(levels)))])
        for t in range(4):
            for person in range(200):
                attrs = [f"v{rng.integers(n)}" for n in levels]
                out.writerow([f"p{person}", f"2024-01-01T{t:02d}:10:00Z", *attrs])
    return cfg, events


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_plain_evaluate_runs_or_names_mechanisms(tmp_path, capsys, mechanism):
    cfg, events = _stream(tmp_path, mechanism)
    out = tmp_path / "result.json"
    code = main(["evaluate", "--config", str(cfg), "--input", str(events), "--methods", "dsat,fixed",
                 "--runs", "1", "--queries", "20", "--progress", "off", "--jobs", "1", "--json", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if mechanism in ("copula", "marginals"):
        assert code == 2, err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1, lines
        assert "--mechanisms" in lines[0] and f"release.mechanism: {mechanism}" in lines[0]
    else:
        assert code == 0, err
        assert set(json.loads(out.read_text())["methods"]) == {"dsat", "fixed"}


@pytest.mark.parametrize("mechanism", ["copula", "marginals"])
def test_the_named_command_evaluates_the_model(tmp_path, capsys, mechanism):
    """The command the refusal names is one that runs."""
    cfg, events = _stream(tmp_path, mechanism)
    main(["evaluate", "--config", str(cfg), "--input", str(events), "--progress", "off"])
    line = capsys.readouterr().err.strip()
    named = line.split("run 'dpstream ", 1)[1].split("'", 1)[0].split()
    out = tmp_path / "model.json"
    code = main([*named, "--runs", "1", "--queries", "20", "--progress", "off", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    assert list(result["methods"]) == [named[named.index("--mechanisms") + 1]], result
    assert result["schedule"]["name"] == "dsat"
