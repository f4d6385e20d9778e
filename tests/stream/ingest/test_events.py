"""Event parsing and validation: the JSON decoder, reason codes, time grammar."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.ingest.events import (
    REASONS,
    EventBatch,
    EventDecoder,
    Rejections,
    parse_times,
    validate_batch,
)
from stream.pipeline import ReleasePipeline
from stream.service.testing import small_settings

S = small_settings()
DOMAIN = S.domain()
DEC = EventDecoder.from_settings(S)


def good(uid="a", t=100, age=30, sex="M"):
    return {"user_id": uid, "event_time": t, "attributes": {"age": age, "sex": sex}}


def reasons(payloads, decoder=DEC):
    """Decode + validate; return [(row, reason)] for every rejected event or message."""
    d = decoder.decode([p if isinstance(p, bytes) else json.dumps(p).encode() for p in payloads])
    _, rej = validate_batch(d.batch, DOMAIN)
    return sorted(((r.row if r.row is not None else -1), r.reason) for r in list(d.rejections) + list(rej))


def test_single_events_and_arrays_decode_to_one_batch():
    d = DEC.decode([json.dumps(good()).encode(), json.dumps([good("b"), good("c", "1970-01-01T00:02:00Z")]).encode()],
                   sources=[("p", 1), ("p", 2)])
    assert len(d.rejections) == 0 and len(d.batch) == 3
    valid, rej = validate_batch(d.batch, DOMAIN)
    assert len(rej) == 0 and valid.time.tolist() == [100.0, 100.0, 120.0]
    assert d.batch.messages.tolist() == [0, 1, 1] and d.batch.elements.tolist() == [-1, 0, 1]


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b"{not json", "malformed_json"),
        (b"\xff\xfe", "malformed_json"),
        (b"42", "not_an_object"),
        (b'"x"', "not_an_object"),
        ({"event_time": 1, "attributes": {"age": 1, "sex": "M"}}, "missing_field"),
        ({"user_id": "a", "attributes": {"age": 1, "sex": "M"}}, "missing_field"),
        ({"user_id": "a", "event_time": 1}, "missing_field"),
        ({"user_id": "a", "event_time": 1, "attributes": {"age": 1}}, "missing_field"),
        ({"user_id": True, "event_time": 1, "attributes": {"age": 1, "sex": "M"}}, "wrong_type"),
        ({"user_id": "a", "event_time": [1], "attributes": {"age": 1, "sex": "M"}}, "wrong_type"),
        ({"user_id": "a", "event_time": 1, "attributes": [1]}, "wrong_type"),
        ({"user_id": "a", "event_time": 1, "attributes": {"age": "old", "sex": "M"}}, "wrong_type"),
        (b'{"user_id":"a","event_time":NaN,"attributes":{"age":1,"sex":"M"}}', "non_finite"),
        (b'{"user_id":"a","event_time":1,"attributes":{"age":Infinity,"sex":"M"}}', "non_finite"),
        ({"user_id": "a", "event_time": "yesterday", "attributes": {"age": 1, "sex": "M"}}, "invalid_time"),
        ({"user_id": "a", "event_time": "2024-02-30T00:00:00Z", "attributes": {"age": 1, "sex": "M"}},
         "invalid_time"),
        ({"user_id": "x" * 257, "event_time": 1, "attributes": {"age": 1, "sex": "M"}}, "invalid_user_id"),
        ({"user_id": "", "event_time": 1, "attributes": {"age": 1, "sex": "M"}}, "invalid_user_id"),
        ({"user_id": "a", "event_time": 1, "attributes": {"age": 1, "sex": "M", "zip": "1"}}, "unknown_attribute"),
        ({"user_id": "a", "event_time": 1, "extra": 1, "attributes": {"age": 1, "sex": "M"}}, "unknown_attribute"),
        ({"user_id": "a", "event_time": 1, "attributes": {"age": 101, "sex": "M"}}, "out_of_domain"),
        ({"user_id": "a", "event_time": 1, "attributes": {"age": 1, "sex": "X"}}, "out_of_domain"),
    ],
)
def test_reason_codes(payload, reason):
    assert [r for _, r in reasons([payload])] == [reason]


def test_times_far_from_the_epoch_are_invalid():
    assert [r for _, r in reasons([good(t=2e11)])] == ["invalid_time"]
    assert reasons([good(t=-5e9)]) == []


def test_huge_numbers_do_not_crash():
    msg = b'{"user_id":1,"event_time":1' + b"0" * 400 + b',"attributes":{"age":1' + b"0" * 400 + b',"sex":"M"}}'
    assert [r for _, r in reasons([msg])] == ["non_finite"]


def test_message_limits():
    small = EventDecoder(DOMAIN, max_message_bytes=300, max_events_per_message=2)
    big = json.dumps([good()] * 7).encode()
    assert [r for _, r in reasons([big], small)] == ["oversized"]
    assert [r for _, r in reasons([json.dumps([good()] * 3).encode()], small)] == ["too_many_events"]
    assert reasons([json.dumps([good(), 3]).encode()], small) == [(1, "not_an_object")]


def test_rejections_carry_the_original_bytes_and_source():
    msgs = [json.dumps(good()).encode(), b"{oops", json.dumps([good("b"), good("c", age=500)]).encode()]
    d = DEC.decode(msgs, sources=[(0, 10), (0, 11), (0, 12)])
    (bad_json,) = list(d.rejections)
    assert bad_json.payload == b"{oops" and bad_json.source == (0, 11) and bad_json.element is None
    rej = ReleasePipeline(S).offer(d.batch)
    (ood,) = list(rej)
    assert ood.reason == "out_of_domain" and ood.payload == msgs[2] and ood.source == (0, 12) and ood.element == 1
    assert ood.row == 2  # event ordinal among everything decoded (the malformed message has no row)


def test_configured_field_names_and_integer_user_ids():
    s = small_settings(schema={"user_id": "person", "event_time": "ts"})
    dec = EventDecoder.from_settings(s)
    d = dec.decode([json.dumps({"person": 7, "ts": 5, "attributes": {"age": 1, "sex": "F"}}).encode(),
                    json.dumps({"user_id": "a", "ts": 5, "attributes": {"age": 1, "sex": "F"}}).encode()])
    assert [(r.reason, r.detail) for r in d.rejections] == [("missing_field", "person is missing")]
    assert d.batch.user_id.to_pylist() == ["7"]


def test_time_grammar_epoch_and_iso():
    values = ["1700000000", "1.7e9", "-5", "2024-01-02T03:04:05Z", "2024-01-02T03:04:05+01:00",
              "2024-01-02T03:04:05.25", "2024-01-02", "2024-01-02 03:04", None,
              "nan", "yesterday", "2024-13-01T00:00:00Z", " 5", "20240102T030405Z"]
    secs, parsed, missing = parse_times(pa.array(values, pa.string()))
    d = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert secs[:8].tolist() == [1.7e9, 1.7e9, -5.0, d, d - 3600, d + 0.25,
                                 datetime(2024, 1, 2, tzinfo=UTC).timestamp(), d - 5]
    assert parsed.tolist() == [True] * 10 + [False] * 4
    assert missing.tolist() == [False] * 8 + [True] + [False] * 5
    assert np.isnan(secs[9])
    # each value parses the same alone as inside any column (bisection does not depend on neighbours)
    for i, v in enumerate(values):
        s1, p1, _ = parse_times(pa.array([v], pa.string()))
        assert p1[0] == parsed[i] and (np.isnan(s1[0]) and np.isnan(secs[i]) or s1[0] == secs[i])


def test_string_and_number_times_agree():
    t = [0.5, 1700000000.25, 12345.0]
    a, _, _ = parse_times(np.asarray(t))
    b, _, _ = parse_times(pa.array([repr(x) for x in t]))
    assert a.tolist() == b.tolist()


def test_validation_priority_and_codes_columns():
    b = EventBatch.from_columns(
        pa.array([None, "a", "b", "c"]), np.array([1.0, np.inf, 3.0, 4.0]),
        {"age": np.array([1, 2, 3, 4]), "sex": np.array([0, 1, 2, 1])}, codes={"age", "sex"}, first_row=10)
    _, rej = validate_batch(b, DOMAIN)
    assert [(r.row, r.reason) for r in rej] == [(10, "missing_field"), (11, "non_finite"), (12, "out_of_domain")]
    assert isinstance(rej, Rejections) and rej.counts() == {"missing_field": 1, "non_finite": 1, "out_of_domain": 1}
    assert rej.first().row == 10 and rej[-1].row == 12 and len(rej[0:2]) == 2


def test_every_reason_code_is_documented():
    doc = open("docs/contracts.md").read()
    for r in REASONS:
        assert f"`{r}`" in doc


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=4),
    max_leaves=10,
)
_events = st.fixed_dictionaries(
    {},
    optional={
        "user_id": st.one_of(st.text(max_size=5), st.integers(), st.booleans(), st.none()),
        "event_time": st.one_of(st.integers(-10**12, 10**12), st.floats(), st.text(max_size=25),
                                st.sampled_from(["2024-01-01T00:00:00Z", "1e9", "2024-01-01"])),
        "attributes": st.one_of(
            st.fixed_dictionaries({}, optional={"age": _json_values, "sex": st.sampled_from(["M", "F", "X", 1]),
                                                "zip": st.text(max_size=3)}),
            _json_values),
        "junk": _json_values,
    },
)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(
    _events.map(lambda e: json.dumps(e).encode()),
    st.lists(_events, max_size=4).map(lambda e: json.dumps(e).encode()),
    st.binary(max_size=40),
    _json_values.map(lambda v: json.dumps(v).encode()),
), max_size=8))
def test_fuzzed_payloads_never_crash_and_every_event_is_accounted_for(msgs):
    p = ReleasePipeline(S)
    d = EventDecoder.from_settings(S).decode(msgs)
    rej = p.offer(d.batch, now=2e9)
    p.seal(now=2e9 + 3600)
    assert p.stats.events_offered == len(d.batch)
    assert p.stats.events_accepted + len(rej) == len(d.batch)
    assert all(r.reason in REASONS for r in list(d.rejections) + list(rej))
    # every message is decoded into events or rejected (whole or per event); none disappears
    used = set(d.batch.messages.tolist())
    rejected_msgs = {r.payload for r in d.rejections}
    for i, m in enumerate(msgs):
        assert i in used or m in rejected_msgs


def test_an_empty_array_message_is_dead_lettered_not_dropped():
    # a message that holds no event is still accounted for: one message-level rejection
    padded = b" " * 100 + b"[ ]"  # past the 64-byte sniff: the per-event path must say the same
    msgs = [b"[]", json.dumps(good()).encode(), padded, b"[[]]"]
    d = DEC.decode(msgs, sources=[(0, 1), (0, 2), (0, 3), (0, 4)])
    assert len(d.batch) == 1 and d.batch.messages.tolist() == [1]
    got = sorted((r.source, r.reason, r.element) for r in d.rejections)
    assert got == [((0, 1), "empty_message", None), ((0, 3), "empty_message", None),
                   ((0, 4), "not_an_object", 0)]
    assert {r.payload for r in d.rejections if r.reason == "empty_message"} == {b"[]", padded}


def test_columns_keep_their_meaning_whatever_the_value_types():
    # the columnar conversion: homogeneous columns go straight to Arrow, mixed ones take a Python
    # pass; either way the same events give the same values and reasons
    mixed = [good("a", 100, 30, "M"), good(7, "1970-01-01T00:01:40Z", 30.0, "F"), good("c", 100.5, None, "M"),
             good("d", 100, "30", "M"), good("e", 100, 30, 1), good("f", 2**70, 30, "M")]
    d = DEC.decode([json.dumps(mixed).encode()])
    valid, rej = validate_batch(d.batch, DOMAIN)
    assert d.batch.user_id.to_pylist() == ["a", "7", "c", "d", "e", "f"]
    assert sorted((r.row, r.reason) for r in rej) == [(2, "missing_field"), (3, "wrong_type"),
                                                      (4, "out_of_domain"), (5, "invalid_time")]
    assert valid.time.tolist() == [100.0, 100.0]
    alone = [DEC.decode([json.dumps(e).encode()]) for e in mixed]
    for i, one in enumerate(alone):
        v1, r1 = validate_batch(one.batch, DOMAIN)
        assert [r.reason for r in r1] == [r.reason for r in rej if r.row == i]
        if len(v1):
            assert v1.time.tolist() == [valid.time[list(valid.position).index(i)]]
