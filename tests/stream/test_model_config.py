"""``release.mechanism: copula | marginals`` in the configuration (issue 15 item 3).

Each mistake gets one line naming the setting, the value and what to do; the decision's
sensitivity and threshold scale with the number of released tables (docs/privacy.md §11.4);
configurations of the histogram mechanisms keep their fingerprints (no new keys in their view).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from histogram.model_release import MAX_SYNTHETIC, CopulaModelMechanism, KWayModelMechanism
from stream.config import MAX_SYNTHETIC as CONFIG_MAX_SYNTHETIC
from stream.config import ConfigError
from stream.service.testing import small_settings

ATTRS = [{"name": "a", "kind": "categorical", "values": ["x", "y", "z"]},
         {"name": "b", "kind": "numeric", "min": 0, "max": 10, "bins": 4},
         {"name": "c", "kind": "categorical", "values": ["p", "q"]}]


def _settings(release, attributes=ATTRS, **sections):
    return small_settings(schema={"attributes": attributes}, release=release, **sections)


def test_copula_settings_build_the_copula_model_mechanism():
    s = _settings({"decision": "dsat", "mechanism": "copula",
                   "copula": {"correlation": "median", "budget_split": "4", "min_records": 50,
                              "synthetic_size": 20}})
    mech = s.mechanism()
    assert isinstance(mech, CopulaModelMechanism)
    c = mech.copula
    assert (c.variant, c.ratio, c.min_records, c.levels, mech.synthetic_size) == ("median", 4, 50, (3, 4, 2), 20)
    spec = s.method_spec()
    # the pairwise decision space (default): 3 one-way + 3 two-way tables; T per table
    assert mech.decision_space == "pairwise" and mech.view.tables == 6
    assert spec.sensitivity == 6 and spec.population == 100 * 6
    assert s.engine().released_bins == 9 + (3 * 4 + 3 * 2 + 4 * 2)
    one_way = _settings({"decision": "dsat", "mechanism": "copula", "copula": {"decision_space": "one-way"}})
    spec = one_way.method_spec()
    assert spec.sensitivity == 3 and spec.population == 100 * 3  # c × m tables
    assert one_way.engine().released_bins == 9


def test_copula_decision_space_and_the_fingerprint():
    """one-way keeps the fingerprint streams had before the setting; pairwise (the default) is a
    changed stream, so a restart of an old one-way stream without the setting is refused."""
    base = {"decision": "dsat", "mechanism": "copula", "copula": {"correlation": "kendall"}}
    before = _settings(base).privacy_view()["release"]["copula"]
    one_way = _settings({**base, "copula": {"correlation": "kendall", "decision_space": "one-way"}})
    assert "decision_space" not in one_way.privacy_view()["release"]["copula"]
    assert before["decision_space"] == "pairwise"
    assert one_way.fingerprint() != _settings(base).fingerprint()


def test_copula_n_floor_defaults_to_the_declared_population():
    assert _settings({"mechanism": "copula"}).mechanism().copula.min_records == 100


def test_marginals_settings_build_the_kway_mechanism():
    s = _settings({"decision": "dsat", "mechanism": "marginals", "marginals": {"k": 2, "consistency": False}},
                  privacy={"contribution_bound": 2})
    mech = s.mechanism()
    assert isinstance(mech, KWayModelMechanism) and mech.kway.max_order == 2 and not mech.consistent
    assert s.method_spec().sensitivity == 2 * 6  # c × (3 one-way + 3 two-way tables)
    assert s.engine().released_bins == 3 + 4 + 2 + 12 + 6 + 8


def test_the_synthetic_cap_is_the_mechanisms():
    assert CONFIG_MAX_SYNTHETIC == MAX_SYNTHETIC


@pytest.mark.parametrize(("release", "attributes", "expected"), [
    ({"mechanism": "lpa", "copula": {}}, ATTRS,
     "release.copula is set but release.mechanism is lpa; remove release.copula or set release.mechanism: copula"),
    ({"mechanism": "copula", "marginals": {"k": 2}}, ATTRS,
     "release.marginals is set but release.mechanism is copula"),
    ({"mechanism": "copula"}, ATTRS[:1], "release.mechanism: copula needs at least 2 attributes in schema.attributes"),
    ({"mechanism": "marginals", "marginals": {"k": 4}}, ATTRS,
     "release.marginals.k: 4 exceeds the 3 attribute(s) in schema.attributes; set k between 1 and 3"),
    ({"mechanism": "marginals", "marginals": {"k": 1, "synthetic_size": 5}}, ATTRS,
     "release.marginals.synthetic_size: 5 needs 2-way tables"),
    ({"mechanism": "copula", "copula": {"correlation": "spearman"}}, ATTRS,
     "release.copula.correlation: must be 'kendall', 'mle' or 'median' (got 'spearman')"),
    ({"mechanism": "copula", "copula": {"budget_split": 0}}, ATTRS, "release.copula.budget_split: must be > 0"),
    ({"mechanism": "copula", "copula": {"min_records": 1}}, ATTRS, "release.copula.min_records:"),
    ({"mechanism": "copula", "copula": {"synthetic_size": 10**6}}, ATTRS, "release.copula.synthetic_size:"),
    ({"mechanism": "copula", "copula": {"corelation": "mle"}}, ATTRS, "did you mean release.copula.correlation?"),
    ({"mechanism": "marginals", "postprocess": "nonnegative"}, ATTRS,
     "release.postprocess: nonnegative applies to histogram counts"),
    ({"mechanism": "copula", "psd": {"height": 2}}, ATTRS, "release.psd options are set but release.mechanism is copula"),
    ({"mechanism": "cupola"}, ATTRS, "release.mechanism: must be 'lpa', 'psd', 'copula' or 'marginals'"),
])
def test_each_mistake_is_one_line_naming_the_setting(release, attributes, expected):
    with pytest.raises(ConfigError) as err:
        _settings(release, attributes)
    assert len(err.value.lines) == 1, err.value.lines
    assert expected in err.value.lines[0]


def test_a_w_event_model_release_refuses_the_histogram_only_decisions():
    with pytest.raises(ConfigError) as err:
        _settings({"decision": "pegasus", "mechanism": "copula"},
                  privacy={"unit": "w-event", "w": 4, "cutoff": 2, "horizon": None})
    assert err.value.lines == ("invalid configuration: release.decision: pegasus rewrites histogram counts and "
                               "cannot drive a model release (release.mechanism: copula); use one of dsat, dsft, "
                               "uniform, fixed, bd, ba, sample",)


def test_copula_without_a_floor_or_population_says_what_to_set():
    with pytest.raises(ConfigError, match="release.copula.min_records is not set and privacy.population"):
        _settings({"decision": "uniform", "mechanism": "copula"}, privacy={"population": None})


def test_fingerprints_of_histogram_configurations_are_unchanged_and_model_options_count():
    view = _settings({"mechanism": "lpa"}).privacy_view()["release"]
    assert "copula" not in view and "marginals" not in view
    a = _settings({"mechanism": "copula"})
    b = _settings({"mechanism": "copula", "copula": {"correlation": "kendall"}})
    c = _settings({"mechanism": "copula", "copula": {"correlation": "mle"}})
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()  # defaults spelled out or not: same stream
    assert a.privacy_view()["release"]["copula"]["budget_split"] == str(Fraction(8))
