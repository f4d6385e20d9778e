"""``dpstream evaluate`` on personalized-DP streams (privacy.personal): runs are the service's releases."""

from __future__ import annotations

import json
import pickle
from fractions import Fraction

import numpy as np
import pytest
import yaml

from histogram.noise import Randomness
from stream.commands.cli import main
from stream.config import load_settings
from stream.lab.evaluate import EvaluationError, evaluate
from stream.lab.inputs import load_truth
from stream.lab.metrics import build_workload
from stream.lab.personal import (
    PersonalRows,
    default_threshold,
    parse_personal,
    run_personal,
    with_pdp_mechanism,
)
from stream.lab.replay import replay

START = 1_704_067_200
HOUR = 3600
VALUES = ["x", "y", "z", "w"]


def write_stream(tmp_path, *, mechanism="sampling", unit="w-event", threshold="1", timesteps=6, people=60,
                 attribute=False):
    """A small personalized stream: events CSV, consent table (or column) and config."""
    tiers = {"low": "0.25", "mid": "0.5", "high": "2"}
    names = list(tiers)
    rows = ["person_id,event_time,a" + (",consent" if attribute else "")]
    for t in range(timesteps):
        for i in range(people):
            if (i * 3 + t) % 5 == 0:
                continue  # people come and go
            row = f"p{i},{START + t * HOUR + i},{VALUES[(i * 7 + t * (i % 3)) % 4]}"
            if attribute:
                row += "," + (names[i % 3] if i % 4 else "")
            rows.append(row)
            if i % 11 == 0:  # a second record the same timestep: contribution bounding drops one
                rows.append(f"p{i},{START + t * HOUR + i + 1},{VALUES[(i + 1) % 4]}" + ("," + names[i % 3] if attribute
                                                                                        and i % 4 else
                                                                                        "," if attribute else ""))
    (tmp_path / "events.csv").write_text("\n".join(rows) + "\n")
    personal = {"mechanism": mechanism, "tiers": tiers}
    if mechanism in ("sampling", "threshold"):
        personal["threshold"] = threshold
    if attribute:
        personal["attribute"] = "consent"
        personal["persons"] = {"low": 15, "mid": 15, "high": 15, "default": 15}
    else:
        table = tmp_path / "consent.csv"
        table.write_text("person_id,tier\n" + "".join(f"p{i},{names[i % 3]}\n" for i in range(people) if i % 4))
        personal["table"] = str(table)
    privacy = {"unit": unit, "epsilon": "1", "cutoff": 3, "population": people, "personal": personal}
    # w-event Sampling is proven (and allowed) for w = 1 only (docs/privacy.md §12.7)
    w = 1 if mechanism == "sampling" else 3
    privacy.update({"w": w, "cutoff": min(3, w)} if unit == "w-event" else {"horizon": timesteps})
    config = {
        "stream": {"id": "pdp-lab", "timestep": "1h", "start": "2024-01-01T00:00:00Z"},
        "schema": {"user_id": "person_id", "event_time": "event_time",
                   "attributes": [{"name": "a", "kind": "categorical", "values": VALUES}]},
        "privacy": privacy,
        "release": {"decision": "dsat", "threshold": 0.05},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp_path / "config.yaml", tmp_path / "events.csv"


def replay_mae(config, events, seed):
    """MAE per bin of what the seeded service publishes (replay --seed), against everyone's truth."""
    settings = load_settings(config, randomness={"seed": seed, "allow_seeded_noise": True})
    published = []
    replay(settings, events, None, on_release=lambda s: published.append(json.loads(s.payload)["counts"]))
    truth = load_truth(load_settings(config), events).counts
    return float(np.abs(np.asarray(published, dtype=np.float64) - truth).mean()), truth


@pytest.mark.parametrize("attribute", [False, True])
def test_each_run_is_the_seeded_service_release(tmp_path, attribute):
    """Run r of evaluate publishes what replay --seed seed+r publishes, Sampling coins included."""
    config, events = write_stream(tmp_path, attribute=attribute)
    settings = load_settings(config)
    truth = load_truth(settings, events)
    assert truth.personal is not None and truth.counts.shape == (6, 4)
    maes = []
    for seed in (5, 6):
        result = evaluate(settings, truth.counts, ["dsat", "uniform"], runs=1, seed=seed, queries=0,
                          personal=truth.personal)
        for method in ("dsat", "uniform"):
            s = with_pdp_mechanism(settings, "sampling")
            want, _ = replay_mae(*_with_decision(tmp_path, config, method), seed)
            assert result["methods"][method]["mae"] == pytest.approx(want, rel=1e-6), (method, seed)  # messages round estimates
        maes.append(result["methods"]["uniform"]["mae"])
    assert maes[0] != maes[1]  # other coins and noise under another seed
    assert s.privacy.personal.mechanism == "sampling"


def _with_decision(tmp_path, config, method):
    data = yaml.safe_load(config.read_text())
    data["release"]["decision"] = method
    out = tmp_path / f"config-{method}.yaml"
    out.write_text(yaml.safe_dump(data))
    return out, tmp_path / "events.csv"


def test_truth_is_everyone_after_bounding(tmp_path):
    config, events = write_stream(tmp_path)
    truth = load_truth(load_settings(config), events)
    per_level = truth.personal.by_level()
    assert per_level.shape == (6, truth.personal.levels, 4)
    np.testing.assert_array_equal(per_level.sum(axis=1), truth.counts)
    # one record per person per timestep: the second records were bounded out
    present = [[i for i in range(60) if (i * 3 + t) % 5] for t in range(6)]
    assert truth.report.bounded_out == sum(1 for ids in present for i in ids if i % 11 == 0)
    assert truth.counts.sum(axis=1).tolist() == [len(ids) for ids in present]


def test_coins_are_drawn_per_run(tmp_path):
    """A lab that kept everyone (no coins) would not be the Sampling mechanism: the kept counts differ by seed."""
    config, events = write_stream(tmp_path, threshold="2")
    settings = load_settings(config)
    truth = load_truth(settings, events)
    engine_inputs = []
    for seed in (1, 2):
        eng = settings.engine(Randomness.seeded(seed))
        state = eng.initial_state()
        rows: PersonalRows = truth.personal
        slots = eng.slots(state, rows.flat[0] // rows.bins, rows.persons[0], rows.cell(0))
        engine_inputs.append(slots)
    excluded = [int((s == truth.personal.levels).sum()) for s in engine_inputs]
    assert all(e > 0 for e in excluded)  # persons below t = 2 are sampled out with probability > 0
    assert not np.array_equal(engine_inputs[0], engine_inputs[1])


def test_all_five_mechanisms_from_the_cli(tmp_path, capsys):
    config, events = write_stream(tmp_path, mechanism="privacy_aware", unit="user-level")
    out = tmp_path / "out.json"
    code = main(["evaluate", "--config", str(config), "--input", str(events), "--methods", "dsat,fixed",
                 "--personal", "all", "--runs", "2", "--queries", "20", "--progress", "off", "--json", str(out),
                 "--jobs", "2"])
    assert code == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    rows = [f"{m}@{p}" for m in ("dsat", "fixed") for p in
            ("minimum", "threshold", "sampling", "privacy_aware", "utility_based")]
    assert list(result["methods"]) == rows
    for row in rows:
        m = result["methods"][row]
        assert m["epsilon_spent"] <= 1 + 1e-12  # the default tier's ledger never passes its ε
        assert m["mae"] > 0
    table = capsys.readouterr().out
    assert "fixed@utility_based" in table
    # jobs=2 pickled the personalized settings into the workers: same figures in one process
    code = main(["evaluate", "--config", str(config), "--input", str(events), "--methods", "dsat,fixed",
                 "--personal", "all", "--runs", "2", "--queries", "20", "--progress", "off", "--json",
                 str(tmp_path / "one.json"), "--jobs", "1"])
    assert code == 0
    assert json.loads((tmp_path / "one.json").read_text())["methods"] == result["methods"]


@pytest.mark.parametrize("args, message", [
    (["--counts"], "counts file, which has no budget tiers"),
    (["--methods", "auto"], "does not plan personalized streams"),
    (["--config-decision", "auto"], "does not plan personalized streams"),
    (["--recommend"], "does not rank personalized streams"),
    (["--personal", "minimum,bogus"], "unknown PDP mechanism"),
])
def test_refusals_say_what_to_do(tmp_path, capsys, args, message):
    config, events = write_stream(tmp_path)
    if args[0] == "--config-decision":  # release.decision: auto in the configuration itself
        data = yaml.safe_load(config.read_text())
        data["release"]["decision"] = args.pop(1)
        args.pop(0)
        config.write_text(yaml.safe_dump(data))
        code = main(["check-config", str(config)])
        assert code == 2
        assert message in capsys.readouterr().err
    code = main(["evaluate", "--config", str(config), "--input", str(events), "--progress", "off", *args])
    assert code == 2
    assert message in capsys.readouterr().err


def test_personal_flag_needs_a_personal_config(tmp_path, capsys):
    config, events = write_stream(tmp_path)
    data = yaml.safe_load(config.read_text())
    del data["privacy"]["personal"]
    config.write_text(yaml.safe_dump(data))
    code = main(["evaluate", "--config", str(config), "--input", str(events), "--progress", "off",
                 "--personal", "all"])
    assert code == 2
    assert "has no privacy.personal" in capsys.readouterr().err


def test_default_threshold_is_the_declared_weighted_mean(tmp_path):
    config, _ = write_stream(tmp_path, mechanism="privacy_aware", unit="user-level")  # Sampling: not w-event w > 1
    settings = load_settings(config)
    levels = settings.personal_declaration().levels  # the table's rows per tier; the default tier has none
    mean = sum((e * n for e, n in zip(levels.epsilons, levels.counts, strict=True)), Fraction(0)) / sum(levels.counts)
    assert default_threshold(settings) == Fraction(int(mean * 10_000), 10_000)
    assert Fraction(1, 4) < default_threshold(settings) < 2
    assert with_pdp_mechanism(settings, "sampling").privacy.personal.threshold == default_threshold(settings)
    assert with_pdp_mechanism(settings, "minimum").privacy.personal.threshold is None
    assert parse_personal("all") == ["minimum", "threshold", "sampling", "privacy_aware", "utility_based"]
    assert parse_personal("privacy-aware") == ["privacy_aware"]


def test_run_refuses_rows_of_another_declaration(tmp_path):
    config, events = write_stream(tmp_path)
    settings = load_settings(config)
    truth = load_truth(settings, events)
    rows = truth.personal
    other = PersonalRows(rows.flat, rows.persons, rows.bins, rows.levels + 1)
    workload = build_workload(truth.counts, settings.domain().shape, queries=0, seed=0)
    with pytest.raises(EvaluationError, match="do not match"):
        run_personal(settings, other, workload, Randomness.seeded(0))


def test_budgets_pickle_as_the_declaration(tmp_path):
    config, _ = write_stream(tmp_path)
    decl = load_settings(config).personal_declaration()
    copy = pickle.loads(pickle.dumps(decl.budgets))
    assert copy == decl.budgets and copy.fingerprint() == decl.budgets.fingerprint()
