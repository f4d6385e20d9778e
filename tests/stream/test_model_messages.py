"""Model-release messages (issue 15 item 3): versioned schema, canonical bytes, histogram consumers
can tell them apart, a republished timestep repeats the model byte for byte."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from pydantic import ValidationError

from stream.ingest.events import EventBatch
from stream.messages import (
    SCHEMA_DIR,
    ModelReleaseMessage,
    ReleaseMessage,
    canonical_bytes,
    parse_message,
    parse_release,
)
from stream.pipeline import ReleasePipeline
from stream.service.testing import small_settings


def _validator(name):
    schema = json.loads((SCHEMA_DIR / name).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _run(settings, n=900):
    rng = np.random.default_rng(0)
    events = []
    for t in np.sort(rng.uniform(0, 900, n)):
        age = int(rng.integers(0, 100))
        events.append({"user_id": f"u{int(rng.integers(300))}", "event_time": float(t),
                       "attributes": {"age": age, "sex": "M" if (age + rng.normal(0, 20)) > 50 else "F"}})
    p = ReleasePipeline(settings)
    p.offer(EventBatch.from_records(events))
    return p, p.seal(final=True)


CASES = {
    "copula": {"decision": "dsat", "mechanism": "copula", "threshold": 0.3,
               "copula": {"synthetic_size": 25, "min_records": 20}},
    "copula-mle": {"decision": "uniform", "mechanism": "copula", "copula": {"correlation": "mle"}},
    "marginals": {"decision": "dsat", "mechanism": "marginals", "threshold": 0.3,
                  "marginals": {"k": 2, "synthetic_size": 10}},
    "marginals-raw": {"decision": "uniform", "mechanism": "marginals", "marginals": {"k": 1, "consistency": False}},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_model_releases_validate_and_histogram_consumers_tell_them_apart(case):
    settings = small_settings(seed=4, privacy={"epsilon": 20}, release=CASES[case])
    p, out = _run(settings)
    model_v, release_v = _validator("model-release.schema.json"), _validator("release.schema.json")
    assert len(out) == 15
    levels = settings.domain().shape  # SMALL_ATTRIBUTES: age (10 bins) x sex (2)
    for sealed in out:
        doc = json.loads(sealed.payload)
        model_v.validate(doc)
        assert doc["message_type"] == "model-release" and doc["schema_version"] == 1
        with pytest.raises(jsonschema.ValidationError):
            release_v.validate(doc)  # a histogram consumer validating its schema refuses it
        with pytest.raises(ValidationError):
            ReleaseMessage.model_validate(doc)
        assert parse_message(sealed.payload) == sealed.message == parse_release(sealed.payload)
        assert isinstance(sealed.message, ModelReleaseMessage)
        assert canonical_bytes(doc) == sealed.payload == sealed.message.to_bytes()
        model = doc["model"]
        shapes = [t["shape"] for t in model["marginals"]]
        assert shapes[:2] == [[levels[0]], [levels[1]]]
        assert all(len(t["counts"]) == int(np.prod(t["shape"])) for t in model["marginals"])
        if model["kind"] == "gaussian-copula":
            corr = np.array(model["correlation"])
            assert corr.shape == (2, 2) and np.allclose(corr, corr.T) and np.allclose(np.diag(corr), 1)
            # the noisy one-way counts have their interval; the model's two-way table (pairwise
            # decision space, the default) is computed from the release and claims none
            widths = doc["accuracy"]["half_width"]
            one_way = levels[0] + levels[1]
            assert len(widths) == one_way + levels[0] * levels[1] and doc["accuracy"]["confidence"] == 0.95
            assert all(w > 0 for w in widths[:one_way]) and all(w is None for w in widths[one_way:])
            assert shapes == [[levels[0]], [levels[1]], [levels[0], levels[1]]] and model["max_order"] == 2
            pair = np.array(model["marginals"][2]["counts"]).reshape(levels)
            assert np.isclose(pair.sum(), model["total"], rtol=1e-4)
        else:
            assert model["correlation"] is None
            if model["max_order"] == 2:
                assert shapes[2] == [levels[0], levels[1]]
    fresh = [json.loads(s.payload) for s in out if s.fresh]
    assert fresh
    by_source = {d["timestep"]["index"]: d for d in fresh}
    for sealed in out:  # a republished timestep repeats the model of the fresh release it points at
        doc = json.loads(sealed.payload)
        assert doc["model"] == by_source[doc["accuracy"]["source_timestep"]]["model"]
    if "dsat" in CASES[case]["decision"]:
        assert any(not s.fresh for s in out)
    synthetic = fresh[0]["model"]["synthetic"]
    size = CASES[case].get("copula", CASES[case].get("marginals", {})).get("synthetic_size", 0)
    if size:
        assert synthetic["attributes"] == ["age", "sex"] and len(synthetic["records"]) == size
        assert all(0 <= r[0] < levels[0] and 0 <= r[1] < levels[1] for r in synthetic["records"])
    else:
        assert synthetic is None


def test_the_copula_sees_the_dependence_in_the_data():
    """The correlation published is the data's: older people are mostly level 0 of sex ("M") above,
    so the latent correlation of (age, sex) is negative."""
    settings = small_settings(seed=4, privacy={"epsilon": 200},
                              release={"decision": "uniform", "mechanism": "copula", "copula": {"min_records": 150}})
    _, out = _run(settings, n=3000)
    rho = [json.loads(s.payload)["model"]["correlation"][0][1] for s in out]
    assert np.median(rho) < -0.3
