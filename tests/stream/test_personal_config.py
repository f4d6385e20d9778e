"""``privacy.personal``: the public budget declaration, its one-line errors and its fingerprint."""

from __future__ import annotations

from fractions import Fraction

import pytest

from stream.config import ConfigError, load_settings


def settings(tmp_path=None, *, table_rows=None, **personal):
    cfg = {"mechanism": "minimum", "tiers": {"basic": "0.5", "research": "2"}, **personal}
    if table_rows is not None:
        path = tmp_path / "consent.csv"
        path.write_text("user_id,tier\n" + "".join(f"{u},{t}\n" for u, t in table_rows))
        cfg["table"] = str(path)
    elif "attribute" not in cfg and "table" not in cfg:
        cfg["attribute"] = "consent"
    return load_settings(
        privacy={"unit": "user-level", "epsilon": "1", "horizon": 10, "personal": cfg},
        schema={"attributes": [{"name": "a", "kind": "categorical", "values": ["x", "y"]}]},
        release={"decision": "uniform"},
        kafka={"record_time": "log-append-time"},
    )


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


def test_attribute_declaration_builds_a_plan_and_tiers():
    s = settings(persons={"basic": 10, "research": 5, "default": 2})
    decl = s.personal_declaration()
    assert decl.levels.epsilons == (Fraction(1, 2), Fraction(1), Fraction(2))
    assert decl.levels.counts == (10, 2, 5)
    assert decl.tier_level == {"basic": 0, "research": 2, "default": 1}
    assert s.ingest_domain().names == ("consent", "a")
    assert s.domain().names == ("a",)  # the consent field is never counted


def test_table_declaration_counts_rows_and_canonicalises_ids(tmp_path):
    s = settings(tmp_path, table_rows=[("u1", "basic"), ("007", "research"), ("u3", "basic")],
                 mechanism="privacy_aware")
    decl = s.personal_declaration()
    assert decl.attribute is None
    assert dict(zip(decl.table_keys, decl.table_levels, strict=True)) == {"u1": 0, "7": 2, "u3": 0}
    assert decl.levels.counts == (2, 0, 1)


@pytest.mark.parametrize(
    ("personal", "needle"),
    [
        ({"attribute": "a"}, "is also a counted attribute"),
        ({"attribute": "user_id"}, "user id / event time"),
        ({"attribute": "consent", "table": "x.csv"}, "exactly one budget source"),
        ({"tiers": {"default": "1"}}, "'default' is the tier"),
        ({"mechanism": "sampling"}, "needs privacy.personal.threshold"),
        ({"mechanism": "minimum", "threshold": "1"}, "only used by threshold and sampling"),
        ({"persons": {"nobody": 3}}, "which are not tiers"),
        ({"tiers": {"basic": "-1"}}, "must be > 0"),
        ({"mechanism": "privacy_aware"}, "declare head counts"),
        ({"mechanism": "bogus"}, "privacy.personal.mechanism"),
    ],
)
def test_mistakes_are_one_line_errors_naming_the_setting(personal, needle):
    with pytest.raises(ConfigError) as exc:
        settings(**personal)
    assert needle in one_line(exc)


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ([("u1", "gold")], ":2: tier 'gold' is not declared"),
        ([("u1", "basic"), ("u1", "research")], "listed with tiers 'basic' and 'research'"),
        ([("u1", "basic"), ("+01", "basic"), ("1", "research")], "listed with tiers"),
    ],
)
def test_bad_consent_tables_are_one_line_errors(tmp_path, rows, needle):
    with pytest.raises(ConfigError) as exc:
        settings(tmp_path, table_rows=rows)
    assert needle in one_line(exc)


def test_missing_consent_table_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as exc:
        settings(table=str(tmp_path / "nope.csv"))
    assert "no such file" in one_line(exc)


def test_declaration_is_part_of_the_fingerprint(tmp_path):
    base = settings(tmp_path, table_rows=[("u1", "basic")])
    assert settings(tmp_path, table_rows=[("u1", "basic")]).fingerprint() == base.fingerprint()
    # a changed table content (same path), tier ε, mechanism: each is a different budget
    assert settings(tmp_path, table_rows=[("u1", "research")]).fingerprint() != base.fingerprint()
    other = settings(tmp_path, table_rows=[("u1", "basic")], tiers={"basic": "0.4", "research": "2"})
    assert other.fingerprint() != base.fingerprint()


def test_streams_without_personal_keep_their_fingerprint():
    s = load_settings(privacy={"unit": "user-level", "epsilon": "1", "horizon": 10},
                      schema={"attributes": [{"name": "a", "kind": "categorical", "values": ["x", "y"]}]},
                      release={"decision": "uniform"}, kafka={"record_time": "log-append-time"})
    assert "personal" not in s.privacy_view()["privacy"]
    assert "personal_declaration" not in s.privacy_view()


def test_scale_out_is_refused():
    with pytest.raises(ConfigError) as exc:
        load_settings(
            privacy={"unit": "user-level", "epsilon": "1", "horizon": 10,
                     "personal": {"mechanism": "minimum", "attribute": "consent", "tiers": {"b": "0.5"}}},
            schema={"attributes": [{"name": "a", "kind": "categorical", "values": ["x", "y"]}]},
            release={"decision": "uniform"}, kafka={"record_time": "log-append-time"},
            service={"role": "worker"},
        )
    assert "service.role" in one_line(exc)


@pytest.mark.parametrize(("release", "needle"), [
    ({"decision": "uniform", "mechanism": "copula", "copula": {"min_records": 10}}, "release.mechanism: copula"),
    ({"decision": "uniform", "mechanism": "marginals"}, "release.mechanism: marginals"),
    ({"decision": "uniform", "postprocess": "kalman"}, "release.postprocess kalman"),
    ({"decision": "uniform", "postprocess": "nonnegative+ewma"}, "release.postprocess ewma"),
])
def test_combinations_not_built_are_refused_in_one_line(release, needle):
    """Per-tier model releases and smoothing a personalized estimate are not built: refused, not
    silently run with one tier's view."""
    with pytest.raises(ConfigError) as exc:
        load_settings(
            privacy={"unit": "user-level", "epsilon": "1", "horizon": 10, "population": 100,
                     "personal": {"mechanism": "minimum", "attribute": "consent", "tiers": {"b": "0.5"},
                                  "persons": {"b": 5, "default": 5}}},
            schema={"attributes": [{"name": "a", "kind": "categorical", "values": ["x", "y"]},
                                   {"name": "c", "kind": "categorical", "values": ["p", "q"]}]},
            release=release, kafka={"record_time": "log-append-time"},
        ).personal_declaration()
    assert needle in one_line(exc)
    assert "privacy.personal" in str(exc.value)


def test_stateless_postprocessing_is_allowed_with_personal_budgets():
    s = load_settings(
        privacy={"unit": "user-level", "epsilon": "1", "horizon": 10,
                 "personal": {"mechanism": "minimum", "attribute": "consent", "tiers": {"b": "0.5"},
                              "persons": {"b": 5, "default": 5}}},
        schema={"attributes": [{"name": "a", "kind": "categorical", "values": ["x", "y"]}]},
        release={"decision": "uniform", "postprocess": "nonnegative+integer"},
        kafka={"record_time": "log-append-time"},
    )
    assert s.personal_declaration().levels.counts == (5, 5)


def test_check_config_summary_names_the_tiers():
    from stream.commands.check_config import summary

    assert "personal minimum (basic=1/2, research=2, default=1)" in summary(settings())


def test_weights_choose_how_a_partition_combines():
    """privacy.personal.weights: sum (∝ expected members) or utility (inverse variance, thesis §5.2.4)."""
    persons = {"basic": 400, "research": 100, "default": 0}

    def weights(**personal):
        return settings(persons=persons, **personal).personal_declaration().plan.weights

    by_count = (0.8, 0.2)  # the plain sum: ∝ head counts
    assert weights(mechanism="privacy_aware") == pytest.approx(by_count)  # the default: unchanged
    assert weights(mechanism="privacy_aware", weights="sum") == pytest.approx(by_count)
    # utility: ∝ n²ε²/(2 + nε² … ) — the research part (ε 2) far outweighs its head count
    utility = weights(mechanism="privacy_aware", weights="utility")
    assert utility[1] > 0.5 > by_count[1]
    assert weights(mechanism="utility_based") == pytest.approx(utility)
    assert weights(mechanism="utility_based", weights="sum") == pytest.approx(by_count)
    with pytest.raises(ConfigError, match="combines the parts of a partition") as exc:
        settings(mechanism="minimum", weights="utility")
    one_line(exc)


def test_weights_change_the_fingerprint_only_when_set(tmp_path):
    """weights change what the published estimate means: in the fingerprint when set; a stream
    that never set it keeps the fingerprint it had before the option existed."""
    persons = {"basic": 400, "research": 100}
    base = settings(mechanism="privacy_aware", persons=persons)
    assert "weights" not in base.privacy_view()["privacy"]["personal"]
    assert settings(mechanism="privacy_aware", persons=persons, weights="utility").fingerprint() != base.fingerprint()
    assert settings(mechanism="privacy_aware", persons=persons, weights="sum").fingerprint() != base.fingerprint()
