"""The msgspec fast path of the JSON decoder changes nothing but speed (issue 12 item 1).

Every generated batch of messages (objects and arrays; integer, float, huge, string, ISO, null,
boolean and missing values; unknown fields; duplicated keys; escapes and lone surrogates;
numbers beyond the float range; NaN; malformed text) is decoded twice: by the decoder as it
ships (msgspec first) and by the same decoder with msgspec refusing everything (pydantic and
the per-event path only, as before). Columns, row numbering, message and element indices,
rejections and what :func:`validate_batch` makes of them must be identical.
"""

from __future__ import annotations

import functools
import json
import math

import msgspec
import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from histogram.domain import Domain
from stream.ingest.events import KEY_USER_ID, EventDecoder, validate_batch

DOMAIN = Domain.from_description([
    {"name": "age", "kind": "numeric", "min": 0, "max": 100, "bins": 10},
    {"name": "sex", "kind": "categorical", "values": ["M", "F", "1"]},
])
T0 = 1_704_067_200


def _refuse(payload: bytes) -> object:
    raise msgspec.ValidationError("forced: the pydantic path")


@functools.cache
def _decoders(**kw: object) -> tuple[EventDecoder, EventDecoder]:
    """One pair per option set, shared by every example: a decoder holds no state between
    ``decode`` calls (``__init__`` sets every attribute), and building one compiles two pydantic
    TypeAdapters, ~40 % of an example's time when built per example."""
    fast = EventDecoder(DOMAIN, max_events_per_message=4, **kw)  # type: ignore[arg-type]
    slow = EventDecoder(DOMAIN, max_events_per_message=4, **kw)  # type: ignore[arg-type]
    slow._fast = _refuse  # type: ignore[method-assign]
    return fast, slow


SCALARS = st.one_of(
    st.integers(-3, 200), st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.integers(-(10**30), 10**30), st.booleans(), st.none(),
    st.sampled_from(["M", "F", "1", "x", "", " 7", "2024-01-01T00:00:01Z", "1704067201", "\u00e9", "e\u0301"]),
    st.text(max_size=4),
)
RAW_TOKENS = ["NaN", "1e309", "-1e309", '"\\ud800"', '"a\\u0000b"', "1.0", "7", '"7"', "true", "[]", "{}"]


def _value() -> st.SearchStrategy[str]:
    return st.one_of(SCALARS.map(json.dumps), st.sampled_from(RAW_TOKENS))


@st.composite
def event_text(draw: st.DrawFn, user_field: bool = True) -> str:
    """One event as JSON text (raw, so that duplicated keys and non-standard tokens survive)."""
    parts = []
    if user_field and draw(st.integers(0, 9)):
        parts.append(f'"user_id": {draw(_value())}')
    if draw(st.integers(0, 9)):
        t = draw(st.one_of(st.floats(T0, T0 + 600).map(repr), _value()))
        parts.append(f'"event_time": {t}')
    attrs = []
    for name in draw(st.lists(st.sampled_from(["age", "sex", "colour"]), max_size=4)):
        attrs.append(f'"{name}": {draw(_value())}')
    if draw(st.integers(0, 9)):
        parts.append('"attributes": {' + ", ".join(attrs) + "}")
    if not draw(st.integers(0, 15)):
        parts.append(f'"extra": {draw(_value())}')
    if not draw(st.integers(0, 15)) and parts:
        parts.append(parts[0])  # a duplicated key
    draw(st.randoms()).shuffle(parts)
    return "{" + ", ".join(parts) + "}"


@st.composite
def messages(draw: st.DrawFn, user_field: bool = True) -> list[bytes | None]:
    out: list[bytes | None] = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.integers(0, 9))
        if kind <= 4:
            out.append(draw(event_text(user_field)).encode())
        elif kind <= 7:
            evs = draw(st.lists(event_text(user_field), max_size=6))
            out.append(("[" + ", ".join(evs) + "]").encode())
        elif kind == 8:
            out.append(draw(st.sampled_from([b"{", b"[1, 2]", b"\xef\xbb\xbf{}", b"  []", b"null", b"", None,
                                             b'{"user_id": "a"} x', b'{"user_id": "\xb9"}', b'[{"a": "\xff"}]',
                                             b"[" * 5000, b"{" + b'"a":{' * 3000])))
        else:
            out.append(draw(st.binary(max_size=12)))
    return out


def _cells(col: object) -> list[str]:
    arr = col if isinstance(col, pa.Array | pa.ChunkedArray) else pa.array(np.asarray(col))
    return [repr(v) if not (isinstance(v, float) and math.isnan(v)) else "nan" for v in arr.to_pylist()]


def _same(a: object, b: object) -> None:
    da, db = a.batch, b.batch  # type: ignore[attr-defined]
    assert _cells(da.user_id) == _cells(db.user_id)
    assert _cells(da.event_time) == _cells(db.event_time)
    assert da.attributes.keys() == db.attributes.keys()
    for name in da.attributes:
        assert _cells(da.attributes[name]) == _cells(db.attributes[name]), name
    for f in ("rows", "messages", "elements"):
        assert np.array_equal(getattr(da, f), getattr(db, f)), f
    ra = [(r.reason, r.row, r.element, r.detail) for r in a.rejections]  # type: ignore[attr-defined]
    rb = [(r.reason, r.row, r.element, r.detail) for r in b.rejections]  # type: ignore[attr-defined]
    assert ra == rb
    (va, xa), (vb, xb) = validate_batch(da, DOMAIN), validate_batch(db, DOMAIN)
    assert np.array_equal(va.flat, vb.flat) and np.array_equal(va.time, vb.time)
    assert va.user_id.to_pylist() == vb.user_id.to_pylist()
    assert [(r.reason, r.row) for r in xa] == [(r.reason, r.row) for r in xb]


@settings(max_examples=400, deadline=None)
@given(payloads=messages())
def test_fast_path_decodes_exactly_like_the_pydantic_path(payloads: list[bytes | None]) -> None:
    fast, slow = _decoders()
    _same(fast.decode(payloads, first_row=5), slow.decode(payloads, first_row=5))


@settings(max_examples=150, deadline=None)
@given(payloads=messages(user_field=False), keys=st.lists(st.one_of(st.none(), st.binary(max_size=4)), min_size=6,
                                                             max_size=6))
def test_fast_path_with_person_from_the_record_key(payloads: list[bytes | None], keys: list[bytes | None]) -> None:
    fast, slow = _decoders(user_id=KEY_USER_ID)
    keys = keys[:len(payloads)]
    _same(fast.decode(payloads, keys=keys), slow.decode(payloads, keys=keys))


def test_the_fast_path_is_taken_for_well_formed_messages() -> None:
    """Not vacuous: ordinary messages never reach pydantic (a decoder without pydantic decodes them)."""
    fast, _ = _decoders()

    def no_pydantic(payload: bytes) -> object:
        raise AssertionError("pydantic was asked")

    fast._one.validator = type("V", (), {"validate_json": staticmethod(no_pydantic)})()  # type: ignore[assignment]
    fast._many.validator = fast._one.validator  # type: ignore[assignment]
    ev = {"user_id": 7, "event_time": T0 + 1, "attributes": {"age": 3, "sex": "M"}}
    out = fast.decode([json.dumps(ev).encode(), json.dumps([ev, {**ev, "user_id": "b"}]).encode()])
    assert len(out.batch) == 3 and not out.rejections
