"""One person, one key: no formatting of an id splits a person (docs/privacy.md §1.2).

Through the real decoder and validator (JSON) and the CSV reader, the ways
one id can be written (JSON integer, its text, a sign, leading zeros, a zero
fraction, NFC/NFD forms) must give one key; the invisible variations (white
space around it, zero-width and control characters, lone surrogates) must
be refused as ``invalid_user_id``, never become a second key. A hypothesis
property draws the id and its spellings; a deliberately splitting rule (the
old behaviour, ids taken as written) is shown to fail the same property.
"""

from __future__ import annotations

import json
import unicodedata

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from histogram.domain import CategoricalAttribute, Domain
from stream.ingest.events import EventDecoder, validate_batch
from stream.ingest.person_key import canonical_keys

DOMAIN = Domain([CategoricalAttribute("b", ("x", "y"))])
DECODER = EventDecoder(DOMAIN)


def _keys_via_json(ids: list) -> list[str | None]:
    """The key of each id after the real JSON path (None: refused as invalid_user_id)."""
    out: list[str | None] = []
    for uid in ids:
        payload = json.dumps({"user_id": uid, "event_time": 5, "attributes": {"b": "x"}}).encode()
        decoded = DECODER.decode([payload], [(0, 0)])
        valid, rejected = validate_batch(decoded.batch, DOMAIN)
        reasons = [r.reason for r in (*decoded.rejections, *rejected)]
        if reasons:
            assert reasons == ["invalid_user_id"], (uid, reasons)
            out.append(None)
        else:
            (key,) = valid.user_id.to_pylist()
            out.append(key)
    return out


def spellings(n: int) -> list:
    """Ways producers write the integer id ``n``."""
    text = str(abs(n))
    sign = "-" if n < 0 else ""
    forms = [n, f"{sign}{text}", f"{sign}00{text}", f"{sign}{text}.0", f"{sign}{text}.000"]
    if n >= 0:
        forms.append(f"+{text}")
    return forms


@given(st.integers(min_value=-(10**30), max_value=10**30))
@settings(max_examples=60, deadline=None)
def test_every_spelling_of_an_integer_id_is_one_person(n):
    keys = _keys_via_json(spellings(n))
    assert len(set(keys)) == 1 and None not in keys, keys


_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zs", "Zl", "Zp")), min_size=1, max_size=12)


@given(_TEXT)
@settings(max_examples=80, deadline=None)
def test_normalisation_forms_are_one_person_and_invisible_variants_are_refused(text):
    text = text.strip()
    if not text:
        return
    forms = {unicodedata.normalize(f, text) for f in ("NFC", "NFD")}
    keys = _keys_via_json(sorted(forms))
    assert len(set(keys)) == 1, (text, keys)
    for variant in (f" {text}", f"{text}\t", f"{text}\u200b", f"\u00a0{text}", f"{text[:1]}\x00{text[1:]}"):
        assert _keys_via_json([variant]) == [None], repr(variant)


def test_lone_surrogates_and_non_ids_are_not_people():
    raw = b'{"user_id": "\\ud800", "event_time": 5, "attributes": {"b": "x"}}'
    decoded = DECODER.decode([raw], [(0, 0)])
    _, rejected = validate_batch(decoded.batch, DOMAIN)
    assert [r.reason for r in rejected] == ["invalid_user_id"]
    # a lone surrogate elsewhere is refused by that column's own rule
    raw = b'{"user_id": "a", "event_time": 5, "attributes": {"b": "\\udc00"}}'
    decoded = DECODER.decode([raw], [(0, 0)])
    _, rejected = validate_batch(decoded.batch, DOMAIN)
    assert [r.reason for r in rejected] == ["out_of_domain"]
    for bad in (1.0, True, None):
        d = DECODER.decode([json.dumps({"user_id": bad, "event_time": 5, "attributes": {"b": "x"}}).encode()])
        assert [r.reason for r in d.rejections] == ["wrong_type"], bad


def test_tombstones_and_empty_values_are_named():
    d = DECODER.decode([None, b"", b"  \n", b"{}"], [(0, i) for i in range(4)])
    assert [r.reason for r in d.rejections] == ["tombstone", "empty_value", "empty_value", "missing_field"]


def test_csv_ids_meet_json_ids(tmp_path):
    from stream.ingest.csvio import read_events
    from stream.service.testing import small_settings

    settings = small_settings()
    path = tmp_path / "e.csv"
    path.write_text("user_id,event_time,age,sex\n007,5,30,M\n7,5,30,M\n+7.0,5,30,F\n\" 7\",5,30,F\n")
    keys, refused = [], []
    for block in read_events(path, settings):
        valid, rejected = validate_batch(block.batch, settings.domain())
        keys += valid.user_id.to_pylist()
        refused += [r.reason for r in rejected]
    assert keys == ["7", "7", "7"] and refused == ["invalid_user_id"]
    assert keys == _keys_via_json([7, "7", "+7.0"])
    keys, invisible = canonical_keys(pa.array(["007", "7", "+7", "7.0", "-0", "0", "1.5", "e\u0301", None]))
    assert keys.to_pylist() == ["7", "7", "7", "7", "0", "0", "1.5", "\u00e9", None]
    assert not invisible.any()


def test_a_splitting_rule_fails_the_property():
    """The check is not vacuous: ids taken as written split one person into several keys."""
    as_written = [str(s) for s in spellings(7)]
    assert len(set(as_written)) > 1
    assert len(set(_keys_via_json(spellings(7)))) == 1


# -- issue 27.3: what merging costs, and opaque ids ------------------------------------------


def test_opaque_ids_keep_their_spelling_and_still_refuse_invisible_variants():
    ids = pa.array(["007", "7", "+7", "7.0", "e\u0301", "\u200b7"], type=pa.string())
    numeric, _ = canonical_keys(ids)
    assert numeric.to_pylist()[:4] == ["7", "7", "7", "7"]
    opaque, invisible = canonical_keys(ids, numeric=False)
    assert opaque.to_pylist()[:5] == ["007", "7", "+7", "7.0", "\u00e9"]  # NFC still applies
    assert invisible.tolist() == [False] * 5 + [True]  # a zero-width space is still refused


def _sealed_counts(numeric: bool | None, events: list[dict]):  # noqa: ANN202
    """The true histogram the engine is handed for one timestep (production pipeline)."""
    import numpy as np

    from stream.config import load_settings
    from stream.ingest.events import EventBatch
    from stream.pipeline import ReleasePipeline

    schema = {"attributes": [{"name": "b", "kind": "categorical", "values": ["x", "y"]}]}
    if numeric is not None:
        schema["numeric_user_ids"] = numeric
    s = load_settings(schema=schema, privacy={"unit": "user-level", "epsilon": "1", "horizon": 2, "cutoff": 1},
                      release={"decision": "uniform"}, kafka={"record_time": "log-append-time"},
                      stream={"start": "2024-01-01T00:00:00Z", "timestep": "1h"},
                      randomness={"seed": 1, "allow_seeded_noise": True})
    pipe = ReleasePipeline(s)
    pipe.offer(EventBatch.from_records(events), whole_input=True)
    (cell,) = pipe.window.open_cells
    # what _seal_cell hands the engine: the timestep's events after contribution bounding
    counts = pipe.window.take(cell).counts(pipe.input_bins, s.privacy.contribution_bound)
    return np.asarray(counts, dtype=np.int64), s


START = 1_704_067_200
Q = {"user_id": "7", "event_time": START + 600, "attributes": {"b": "x"}}
P = {"user_id": "007", "event_time": START + 60, "attributes": {"b": "y"}}  # earlier: bounding keeps it


def test_a_merged_key_is_one_person_so_a_newcomer_can_replace_a_record():
    """The guarantee §1.2 states: people who share a canonical key are protected as one person. Adding
    P ("007") replaces Q's ("7") kept record under the smallest-(event time, bin) rule: L1 = 2 where Δ = 1,
    a substitution (2ε). With schema.numeric_user_ids: false they are two people and L1 = Δ = 1."""
    for numeric, l1 in ((None, 2), (True, 2), (False, 1)):
        d, _ = _sealed_counts(numeric, [Q])
        d2, _ = _sealed_counts(numeric, [Q, P])
        assert int(abs(d2 - d).sum()) == l1, numeric


def test_opaque_ids_enter_the_fingerprint_only_when_set():
    _, default = _sealed_counts(None, [Q])
    _, numeric = _sealed_counts(True, [Q])
    _, opaque = _sealed_counts(False, [Q])
    assert "person_keys" not in default.privacy_view()  # existing streams keep their fingerprint
    assert default.fingerprint() == numeric.fingerprint() != opaque.fingerprint()
    assert opaque.privacy_view()["person_keys"] == "opaque"
