"""``privacy.personal`` through the release pipeline: routing, per-tier ledgers, coins, restarts, messages."""

from __future__ import annotations

import hashlib
import hmac
import json
from fractions import Fraction

import jsonschema
import numpy as np
import pytest

from controller.errors import StateError
from histogram.noise import GeneratorDrawer
from histogram.personalized.sampling import sample_inclusion
from stream.config import load_settings
from stream.ingest.events import EventBatch
from stream.messages import SCHEMA_DIR
from stream.pipeline import ReleasePipeline

F = Fraction
START = 1_704_067_200
HOUR = 3600
SCHEMA = json.loads((SCHEMA_DIR / "release.schema.json").read_text())


def make(tmp_path, *, mechanism="privacy_aware", unit="w-event", decision="dsat", table=None, tiers=None,
         threshold=None, seed=3, persons=None, w=3):
    personal = {"mechanism": mechanism, "tiers": tiers or {"basic": "0.5", "research": "2"},
                "persons": persons if persons is not None else {"basic": 30, "research": 20, "default": 10}}
    if threshold is not None:
        personal["threshold"] = threshold
    if table is None:
        personal["attribute"] = "consent"
    else:
        path = tmp_path / "consent.csv"
        path.write_text("user_id,tier\n" + "".join(f"{u},{t}\n" for u, t in table))
        personal["table"] = str(path)
    return load_settings(
        privacy={"unit": unit, "epsilon": "1", "horizon": 12, "cutoff": min(3, w) if unit == "w-event" else 3, "w": w,
                 "population": 40,
                 "personal": personal},
        schema={"attributes": [{"name": "a", "kind": "categorical", "values": ["x", "y", "z"]}]},
        release={"decision": decision},
        kafka={"record_time": "log-append-time"},
        stream={"start": "2024-01-01T00:00:00Z", "timestep": "1h"},
        randomness={"seed": seed, "allow_seeded_noise": True},
    )


def events(timesteps=8, people=40, with_consent=True):
    tiers = ["basic", "research", None, "basic", "nonsense"]
    out = []
    for t in range(timesteps):
        for i in range(people):
            if (i + t) % 4 == 0:
                continue  # people come and go
            attrs = {"a": "xyz"[(i * 7 + t) % 3]}
            if with_consent:
                attrs["consent"] = tiers[i % len(tiers)]
            out.append({"user_id": f"p{i}", "event_time": START + t * HOUR + i, "attributes": attrs})
    return out


def run(settings, evs, **kwargs):
    pipe = ReleasePipeline(settings, **kwargs)
    pipe.offer(EventBatch.from_records(evs), whole_input=True)
    return pipe, pipe.seal(final=True)


def test_tier_ledgers_cap_every_window_and_messages_validate(tmp_path):
    s = make(tmp_path)
    pipe, sealed = run(s, events())
    assert len(sealed) == 8
    budgets = {"basic": F(1, 2), "research": F(2), "default": F(1)}
    for rel in sealed:
        msg = json.loads(rel.payload)
        jsonschema.validate(msg, SCHEMA)
        tiers = {t["tier"]: t for t in msg["personal"]["tiers"]}
        assert set(tiers) == set(budgets)
        for name, eps in budgets.items():
            assert F(tiers[name]["epsilon_exact"]) == eps
            assert F(tiers[name]["window_spent_exact"]) <= eps  # every window, every tier
        assert msg["personal"]["version"] == 1 and msg["personal"]["mechanism"] == "privacy-aware"
    # the ledger per level mirrors its part's ledger exactly (no sampling: charge = the part's spend)
    state = pipe.engine_state
    for k, part in enumerate(pipe.engine.plan.parts):
        part_spent = state.parts[k].accountant.spent
        for lvl in part.levels:
            assert state.ledgers[lvl].spent == part_spent
            assert state.ledgers[lvl].max_window_spend <= pipe.engine.plan.levels.epsilons[lvl]


def test_user_level_tier_ledgers_stay_within_each_tiers_budget(tmp_path):
    s = make(tmp_path, unit="user-level", mechanism="sampling", threshold="2")
    _, sealed = run(s, events(timesteps=12))
    last = json.loads(sealed[-1].payload)["personal"]["tiers"]
    spent = {t["tier"]: F(t["spent_exact"]) for t in last}
    assert spent["basic"] <= F(1, 2) and spent["default"] <= 1 and spent["research"] <= 2
    assert spent["basic"] > 0  # sampled below t: charged ε_i/t of the part's spend


def test_consent_table_routes_listed_persons_and_defaults_the_rest(tmp_path):
    table = [("p1", "research"), ("p2", "basic"), ("+3", "basic")]  # "+3" and "3" are one person (§1.2)
    s = make(tmp_path, table=table, mechanism="minimum", decision="uniform")
    pipe = ReleasePipeline(s)
    seen = []
    step = pipe.engine.step
    pipe.engine.step = lambda st, c, d: (seen.append(np.array(c)), step(st, c, d))[1]  # type: ignore[method-assign]
    evs = [{"user_id": u, "event_time": START + 1, "attributes": {"a": "x"}} for u in ("p1", "p2", "p9", "3")]
    pipe.offer(EventBatch.from_records(evs), whole_input=True)
    pipe.seal(final=True)
    rows = seen[0].reshape(pipe.engine.levels + 1, 3)[:, 0]
    decl = pipe.personal
    expect = np.zeros(pipe.engine.levels + 1, dtype=np.int64)
    expect[decl.tier_level["research"]] += 1  # p1
    expect[decl.tier_level["basic"]] += 2  # p2, and "3" (listed as "+3": the same canonical person)
    expect[decl.tier_level["default"]] += 1  # p9: not listed
    assert rows.tolist() == expect.tolist()


def test_sampling_coin_is_once_per_person_and_the_exact_sampler(tmp_path):
    s = make(tmp_path, mechanism="sampling", threshold="2", unit="user-level", decision="uniform")
    pipe = ReleasePipeline(s)
    eng, state = pipe.engine, pipe.engine_state
    persons = [f"person-{i}" for i in range(300)]
    level = pipe.personal.tier_level["basic"]
    slots = eng.slots(state, np.full(300, level), persons)
    again = eng.slots(state, np.full(300, level), list(reversed(persons)))[::-1]
    assert slots.tolist() == again.tolist()  # a person's coin does not depend on who else is there
    key = state.coin_key.to_bytes(16, "little")
    for i, p in enumerate(persons[:40]):
        digest = hmac.new(key, b"dpstream-pdp-coin-v1\x00" + p.encode(), hashlib.sha256).digest()
        kept = sample_inclusion(np.array([level]), eng.plan.levels.epsilons, F(2),
                                GeneratorDrawer(int.from_bytes(digest[:16], "little")))[0]
        assert (slots[i] == level) == bool(kept)
    kept_share = float(np.mean(slots == level))
    p = (np.exp(0.5) - 1) / (np.exp(2) - 1)
    assert abs(kept_share - p) < 5 * np.sqrt(p * (1 - p) / 300)
    research = eng.slots(state, np.full(50, pipe.personal.tier_level["research"]), persons[:50])
    assert (research == pipe.personal.tier_level["research"]).all()  # at or above t: always kept


def test_coins_are_cached_bounded_and_recomputed_identically(tmp_path, monkeypatch):
    """Each person's coin is drawn once (not at every batch); the cache is bounded, and a coin
    that fell out of it comes back the same."""
    import controller.personal as personal_module

    s = make(tmp_path, mechanism="sampling", threshold="2", unit="user-level", decision="uniform")
    pipe = ReleasePipeline(s)
    eng, state = pipe.engine, pipe.engine_state
    level = pipe.personal.tier_level["basic"]
    persons = [f"person-{i}" for i in range(200)]
    first = eng.slots(state, np.full(200, level), persons)
    assert len(eng._coins) == 200  # noqa: SLF001
    draws = []
    monkeypatch.setattr(personal_module, "GeneratorDrawer",
                        lambda seed: draws.append(seed) or GeneratorDrawer(seed))
    assert eng.slots(state, np.full(200, level), persons).tolist() == first.tolist()
    assert draws == []  # every coin came from the cache
    monkeypatch.setattr(personal_module, "COIN_CACHE_MAX", 50)
    other = eng.slots(state, np.full(100, level), [f"other-{i}" for i in range(100)])
    assert len(eng._coins) == 50 and len(draws) == 100  # noqa: SLF001
    assert eng.slots(state, np.full(200, level), persons).tolist() == first.tolist()  # recomputed, identical
    assert len(eng._coins) == 50  # noqa: SLF001
    assert other.size == 100


def test_w_event_sampling_coin_is_fresh_per_person_and_timestep(tmp_path):
    """w-event (w = 1): each person's coin at timestep c is the exact sampler on the drawer keyed by
    HMAC(coin key, c, person), the same whoever else is there, and independent across timesteps
    (docs/privacy.md §12.7): the coins of 300 persons at two cells are not one shared coin."""
    s = make(tmp_path, mechanism="sampling", threshold="2", unit="w-event", w=1, decision="uniform")
    pipe = ReleasePipeline(s)
    eng, state = pipe.engine, pipe.engine_state
    assert eng.coin_per_timestep
    persons = [f"person-{i}" for i in range(300)]
    level = pipe.personal.tier_level["basic"]
    with pytest.raises(StateError, match="coin per person and timestep"):
        eng.slots(state, np.full(300, level), persons)
    at = {c: eng.slots(state, np.full(300, level), persons, c) for c in (5, 6)}
    mixed = eng.slots(state, np.full(300, level), list(reversed(persons)), np.array([5, 6] * 150))[::-1]
    assert mixed.tolist() == [at[6][i] if i % 2 == 0 else at[5][i] for i in range(300)]
    key = state.coin_key.to_bytes(16, "little")
    for c in (5, 6):
        for i, p in enumerate(persons[:40]):
            msg = b"dpstream-pdp-coin-timestep-v1\x00" + c.to_bytes(8, "little", signed=True) + p.encode()
            digest = hmac.new(key, msg, hashlib.sha256).digest()
            kept = sample_inclusion(np.array([level]), eng.plan.levels.epsilons, F(2),
                                    GeneratorDrawer(int.from_bytes(digest[:16], "little")))[0]
            assert (at[c][i] == level) == bool(kept)
    both = float(np.mean((at[5] == level) & (at[6] == level)))
    p = (np.exp(0.5) - 1) / (np.exp(2) - 1)  # independent coins: kept at both with p², not p
    assert abs(both - p * p) < 5 * np.sqrt(p * p * (1 - p * p) / 300) + 1e-9
    assert (at[5] != at[6]).any()


@pytest.mark.parametrize("w", [2, 3])
def test_w_event_sampling_with_a_window_over_one_timestep_is_refused(tmp_path, w):
    """No amplification proof for w > 1 (docs/privacy.md §12.7): refused with the reason and what to do."""
    from stream.config import ConfigError

    with pytest.raises(ConfigError, match=f"w = {w}: a w-event neighbour keeps a person's records outside"):
        make(tmp_path, mechanism="sampling", threshold="2", unit="w-event", w=w)
    # every level at or above t draws no coin: nothing to amplify, nothing refused
    make(tmp_path, mechanism="sampling", threshold="0.5", unit="w-event", w=w)


@pytest.mark.parametrize("mechanism,threshold,unit,w", [("privacy_aware", None, "w-event", 3),
                                                        ("sampling", "2", "w-event", 1),
                                                        ("sampling", "2", "user-level", 3)])
def test_restart_from_the_journal_is_byte_identical(tmp_path, mechanism, threshold, unit, w):
    s = make(tmp_path, mechanism=mechanism, threshold=threshold, unit=unit, w=w)
    evs = events()
    _, whole = run(s, evs)
    first = [e for e in evs if e["event_time"] < START + 4 * HOUR]
    rest = [e for e in evs if e["event_time"] >= START + 4 * HOUR]
    pipe = ReleasePipeline(s)
    pipe.offer(EventBatch.from_records(first), whole_input=True)
    head = pipe.seal(final=True)
    entry = json.loads(json.dumps(head[-1].journal_entry()))  # through JSON, as the journal stores it
    resumed = ReleasePipeline.resume_after(make(tmp_path, mechanism=mechanism, threshold=threshold, unit=unit, w=w),
                                           entry)
    resumed.offer(EventBatch.from_records(rest), whole_input=True)
    tail = resumed.seal(final=True)
    assert [r.payload for r in head + tail] == [r.payload for r in whole]
    # a re-send from the journal draws nothing and repeats the bytes
    again = ReleasePipeline(s, recall=lambda i: head[i].journal_entry() if i < len(head) else None)
    again.offer(EventBatch.from_records(first), whole_input=True)
    assert [r.payload for r in again.seal(final=True)] == [r.payload for r in head]


@pytest.mark.parametrize("change", ["tier epsilon", "table content", "mechanism", "head counts"])
def test_a_changed_declaration_is_refused_on_restart(tmp_path, change):
    table = [("p1", "research"), ("p2", "basic")]
    s = make(tmp_path, table=table)
    _, sealed = run(s, events(timesteps=2, with_consent=False))
    entry = sealed[-1].journal_entry()
    if change == "tier epsilon":
        changed = make(tmp_path, table=table, tiers={"basic": "0.4", "research": "2"})
    elif change == "table content":
        changed = make(tmp_path, table=[("p1", "basic"), ("p2", "basic")])
    elif change == "mechanism":
        changed = make(tmp_path, table=table, mechanism="utility_based")
    else:
        changed = make(tmp_path, table=table, persons={"basic": 31, "research": 20, "default": 10})
    # the table's rows are private: not in the public fingerprint, caught by the snapshot's keyed digest
    match = "consent table .* differs" if change == "table content" else "another privacy configuration"
    with pytest.raises(StateError, match=match):
        ReleasePipeline.resume_after(changed, entry)
    ReleasePipeline.resume_after(make(tmp_path, table=table), entry)  # the same declaration continues


def test_no_hash_of_the_consent_table_is_published(tmp_path):
    """Issue 27.6: the public config (domain message, every config_fingerprint) must not carry a hash of the
    table's rows: with the same public head counts, two tables that differ in one person's tier (or presence)
    give the same fingerprint and the same domain message, and neither holds the rows' SHA-256. The stream's
    snapshot keeps the digest only keyed by its secret coin key."""
    from stream.messages import MessageBuilder

    persons = {"basic": 2, "research": 2, "default": 10}
    # the same table path (it is public configuration), other rows: p1 moves tier, p3 leaves, p55 joins
    a = make(tmp_path, table=[("p1", "research"), ("p2", "basic"), ("p3", "basic"), ("p4", "research")],
             persons=persons)
    b = make(tmp_path, table=[("p1", "basic"), ("p2", "basic"), ("p55", "research"), ("p4", "research")],
             persons=persons)
    assert a.fingerprint() == b.fingerprint()
    secret = a.personal_declaration().budgets.fingerprint()
    assert secret != b.personal_declaration().budgets.fingerprint()
    domain_a, domain_b = MessageBuilder(a).domain().to_bytes(), MessageBuilder(b).domain().to_bytes()
    assert domain_a == domain_b and secret.encode() not in domain_a
    _, sealed = run(a, events(timesteps=1, with_consent=False))
    assert secret.encode() not in sealed[0].payload
    snap = sealed[0].engine_snapshot()
    eng = ReleasePipeline(a).engine
    assert snap["declaration"] == eng.declaration_digest(int(snap["coin_key"], 16)) != secret
    assert eng.declaration_digest(1) != eng.declaration_digest(2)  # keyed: nothing without the key
    # attribute mode has no private rows: its fingerprint is the declaration's, as before
    attr = make(tmp_path)
    assert attr.privacy_view()["personal_declaration"] == attr.personal_declaration().budgets.fingerprint()


def test_streams_without_personal_publish_no_personal_block(tmp_path):
    s = load_settings(
        privacy={"unit": "w-event", "epsilon": "1", "w": 3},
        schema={"attributes": [{"name": "a", "kind": "categorical", "values": ["x", "y", "z"]}]},
        release={"decision": "uniform"}, kafka={"record_time": "log-append-time"},
        stream={"start": "2024-01-01T00:00:00Z", "timestep": "1h"},
        randomness={"seed": 3, "allow_seeded_noise": True},
    )
    _, sealed = run(s, events(timesteps=2, with_consent=False))
    assert b'"personal"' not in sealed[0].payload


def test_counts_files_are_refused_for_personal_streams(tmp_path):
    pipe = ReleasePipeline(make(tmp_path))
    with pytest.raises(StateError, match="no budget tiers"):
        pipe.release_counts(np.zeros(3, dtype=np.int64))


def test_budget_metric_is_exhausted_only_when_every_part_is(tmp_path):
    from stream.service.loop import _budget

    s = load_settings(
        privacy={"unit": "user-level", "epsilon": "1", "horizon": 2, "cutoff": 2,
                 "personal": {"mechanism": "privacy_aware", "attribute": "consent",
                              "tiers": {"basic": "0.5", "research": "2"},
                              "persons": {"basic": 30, "research": 20, "default": 10}}},
        schema={"attributes": [{"name": "a", "kind": "categorical", "values": ["x", "y", "z"]}]},
        release={"decision": "uniform"}, kafka={"record_time": "log-append-time"},
        stream={"start": "2024-01-01T00:00:00Z", "timestep": "1h"},
        randomness={"seed": 3, "allow_seeded_noise": True},
    )
    pipe = ReleasePipeline(s)
    pipe.offer(EventBatch.from_records(events(timesteps=1)), whole_input=True)
    pipe.seal(final=True)
    assert _budget(pipe, s)[3] is False
    pipe.offer(EventBatch.from_records([e for e in events(timesteps=2) if e["event_time"] >= START + HOUR]),
               whole_input=True)
    pipe.seal(final=True)
    budget, spent, remaining, exhausted = _budget(pipe, s)
    assert exhausted is True and spent == 1 and remaining == 0  # the default tier's ledger: all of ε=1
