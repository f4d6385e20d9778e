"""Release/domain messages: schema drift, schema validation of real messages, canonical bytes."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from fractions import Fraction

import jsonschema
import numpy as np
import pytest

from controller.step import LastRelease, Release
from stream.ingest.events import EventBatch
from stream.messages import (
    SCHEMA_DIR,
    DomainMessage,
    MessageBuilder,
    ReleaseMessage,
    canonical_bytes,
    parse_message,
    release_id,
    schema_text,
    schemas,
)
from stream.pipeline import ReleasePipeline
from stream.service.testing import small_settings


def _validator(name):
    schema = json.loads((SCHEMA_DIR / name).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _run(settings, n=300):
    rng = np.random.default_rng(0)
    events = [{"user_id": f"u{int(rng.integers(60))}", "event_time": float(t),
               "attributes": {"age": int(rng.integers(0, 100)), "sex": "MF"[int(rng.integers(2))]}}
              for t in np.sort(rng.uniform(0, 900, n))]
    p = ReleasePipeline(settings)
    p.offer(EventBatch.from_records(events))
    return p, p.seal(final=True)


@pytest.mark.parametrize("name", sorted(schemas()))
def test_committed_schema_matches_the_models(name):
    committed = (SCHEMA_DIR / name).read_text()
    assert committed == schema_text(schemas()[name]), (
        f"stream/schemas/{name} drifted from the pydantic model: run `python -m stream.messages --write`"
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"release": {"decision": "dsat"}},
        {"privacy": {"unit": "w-event", "w": 4, "cutoff": 2, "horizon": None},
         "release": {"decision": "dsat", "mechanism": "psd"}},
        {"privacy": {"unit": "w-event", "w": 3, "cutoff": 1, "horizon": None}, "release": {"decision": "bd"}},
        {"privacy": {"population": 300}, "release": {"decision": "dsat", "postprocess": "nonnegative+kalman"}},
        {"privacy": {"unit": "w-event", "w": 4, "cutoff": 2, "horizon": None, "population": 300},
         "release": {"decision": "uniform", "mechanism": "psd", "postprocess": ["ewma", "integer"]}},
    ],
)
def test_real_messages_validate_against_the_committed_schema(overrides):
    settings = small_settings(seed=2, **overrides)
    p, out = _run(settings)
    release_v, domain_v = _validator("release.schema.json"), _validator("domain.schema.json")
    assert out
    for sealed in out:
        doc = json.loads(sealed.payload)
        release_v.validate(doc)
        assert parse_message(sealed.payload) == sealed.message
        assert canonical_bytes(doc) == sealed.payload
        assert b" " not in sealed.payload or b'"' in sealed.payload  # compact separators
        assert list(doc) == sorted(doc)
    domain_v.validate(json.loads(p.domain_message().to_bytes()))
    # the schema really constrains: a wrong kind is refused
    bad = json.loads(out[0].payload)
    bad["kind"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        release_v.validate(bad)


def test_release_id_is_deterministic_and_documented():
    s = small_settings(seed=2)
    _, out = _run(s, 50)
    fp = s.fingerprint()
    for sealed in out:
        expected = hashlib.sha256(f"dpstream-release-v1\x00t\x00{sealed.index}\x00{fp}".encode()).hexdigest()
        assert sealed.release_id == expected == release_id("t", sealed.index, fp)
    assert release_id("t", 0, fp) != release_id("t", 1, fp) != release_id("t", 1, "0" * 64)


def _release(counts, width, **kw):
    base = dict(timestep=3, kind="fresh", counts=counts, half_width=width, confidence=0.95, source_timestep=3,
                epsilon_release=Fraction(1, 3), epsilon_spent=Fraction(2, 3), window_spend=None,
                epsilon_remaining=Fraction(1, 3), fresh_count=2, method="dsat")
    base.update(kw)
    return Release(**base)


def test_number_formatting():
    b = MessageBuilder(small_settings(seed=2))
    t0, t1 = datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, 1, tzinfo=UTC)
    m = b.release(_release(np.arange(20, dtype=np.int64) - 5, np.broadcast_to(np.float64(4.0), (20,))), t0, t1)
    assert m.counts[:6] == [-5, -4, -3, -2, -1, 0] and all(type(c) is int for c in m.counts)
    assert m.accuracy.half_width == 4.0
    assert m.timestep.start == "2024-01-01T00:00:00Z" and m.timestep.end == "2024-01-01T01:00:00Z"
    assert m.epsilon_spent_exact == "2/3" and m.accuracy.epsilon_exact == "1/3"
    floats = np.full(20, 1 / 3)
    floats[0] = -1e-9
    widths = np.linspace(1, 2, 20)
    m = b.release(_release(floats, widths), t0, t1)
    assert m.counts[0] == 0.0 and m.counts[1] == 0.333333
    assert b'"counts":[0.0,0.333333' in m.to_bytes()
    assert isinstance(m.accuracy.half_width, list) and len(m.accuracy.half_width) == 20
    placeholder = LastRelease.placeholder(20)
    m = b.release(_release(placeholder.counts, placeholder.half_width, kind="republished", source_timestep=None,
                           confidence=0.0, epsilon_release=Fraction(0), fresh_count=0), t0, t1)
    doc = json.loads(m.to_bytes())
    assert doc["accuracy"]["half_width"] is None and doc["accuracy"]["source_timestep"] is None
    assert "details" not in doc and doc["window_epsilon_spent"] is None
    _validator("release.schema.json").validate(doc)


def test_canonical_bytes_refuse_nan_and_are_stable():
    with pytest.raises(ValueError):
        canonical_bytes({"x": float("nan")})
    assert canonical_bytes({"b": 1, "a": [1.5, "é"]}) == b'{"a":[1.5,"\\u00e9"],"b":1}'


def test_domain_message_config_hashes_to_the_fingerprint():
    s = small_settings(seed=2)
    d = ReleasePipeline(s).domain_message()
    assert isinstance(d, DomainMessage) and d.bins == 20 and d.domain.shape == [10, 2]
    assert hashlib.sha256(canonical_bytes(d.config)).hexdigest() == d.config_fingerprint == s.fingerprint()
    assert parse_message(d.to_bytes()) == d


def test_models_refuse_unknown_fields():
    s = small_settings(seed=2)
    _, out = _run(s, 30)
    doc = json.loads(out[0].payload)
    doc["surprise"] = 1
    with pytest.raises(ValueError):
        ReleaseMessage.model_validate(doc)


def test_nonnegative_postprocessing_clamps_published_counts_only():
    """The engine (and its distance test) is untouched: the same seed gives the same decisions;
    only the published counts differ, by the clamp; the fingerprint says which was published."""
    raw_s = small_settings(seed=2, privacy={"epsilon": "0.05"})
    pos_s = small_settings(seed=2, privacy={"epsilon": "0.05"}, release={"postprocess": "nonnegative"})
    assert raw_s.fingerprint() != pos_s.fingerprint()
    (_, raw), (_, pos) = _run(raw_s), _run(pos_s)
    assert [r.kind for r in raw] == [r.kind for r in pos]
    saw_negative = False
    for a, b in zip(raw, pos, strict=True):
        ca, cb = np.asarray(a.message.counts), np.asarray(b.message.counts)
        saw_negative |= bool((ca < 0).any())
        assert np.array_equal(cb, np.maximum(ca, 0))
        assert a.message.accuracy == b.message.accuracy
    assert saw_negative  # at ε = 0.05 the raw counts do go below zero: the clamp was exercised


def test_messages_say_which_postprocessing_ran_and_version_one_is_unchanged():
    """``method.postprocess`` (schema version 2) names the chain; without one the message is version 1
    with no such key, so consumers of version 1 read exactly what they did; the two never mix."""
    plain = small_settings(seed=2)
    smooth = small_settings(seed=2, privacy={"population": 300}, release={"postprocess": "nonnegative+ewma+integer"})
    (_, a), (_, b) = _run(plain), _run(smooth)
    doc_a, doc_b = json.loads(a[0].payload), json.loads(b[0].payload)
    assert doc_a["schema_version"] == 1 and "postprocess" not in doc_a["method"]
    assert doc_b["schema_version"] == 2 and doc_b["method"]["postprocess"] == ["nonnegative", "ewma", "integer"]
    assert all(isinstance(c, int) for c in doc_b["counts"])  # integer rounding after the smoother
    assert doc_b["accuracy"]["half_width"] is None  # a smoothed count claims no interval
    for doc, version in ((doc_a, 2), (doc_b, 1)):
        with pytest.raises(ValueError, match="schema_version 2 goes with method.postprocess"):
            ReleaseMessage.model_validate({**doc, "schema_version": version})
    builder = MessageBuilder(smooth)
    with pytest.raises(ValueError, match="carries state"):
        builder.release(b[0].release, b[0].start, b[0].end)
