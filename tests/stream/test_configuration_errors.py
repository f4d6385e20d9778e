"""Bad configuration gets a clear error and no release (issue 2 item 10; catalogue N4)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from fractions import Fraction

import pytest

from controller.errors import ConfigurationError
from controller.method import MethodSpec, build_engine
from controller.units import UserLevel, WEvent
from histogram.domain import Domain
from histogram.errors import DomainError
from histogram.lpa import LaplaceMechanism
from stream.config import ConfigError, load_settings


@pytest.mark.parametrize("eps", [0, -1, float("inf"), float("nan"), "abc", None, True])
def test_bad_epsilon(eps):
    with pytest.raises(ConfigurationError, match="epsilon"):
        UserLevel(eps, 10, 2)


@pytest.mark.parametrize(("n", "c"), [(10, 0), (10, 11), (0, 1), (10, 2.5)])
def test_bad_cutoff_or_horizon(n, c):
    with pytest.raises(ConfigurationError):
        UserLevel(1, n, c)


@pytest.mark.parametrize("w", [0, -3])
def test_bad_window(w):
    with pytest.raises(ConfigurationError, match="w"):
        WEvent(1, w)


def test_empty_domain():
    with pytest.raises(DomainError, match="empty"):
        Domain(())
    with pytest.raises(ConfigurationError, match="empty"):
        build_engine(MethodSpec("uniform", UserLevel(1, 5, 1)), LaplaceMechanism(), 0)


def test_unknown_method_lists_the_known_ones():
    with pytest.raises(ConfigurationError, match="dsat, dsft, uniform, fixed, bd, ba"):
        MethodSpec("dsatt", UserLevel(1, 10, 2))


def test_method_unit_mismatches():
    with pytest.raises(ConfigurationError, match="w-event"):
        MethodSpec("bd", UserLevel(1, 10, 2))
    with pytest.raises(ConfigurationError, match="population"):
        MethodSpec("dsat", UserLevel(1, 10, 2))
    with pytest.raises(ConfigurationError, match="k"):
        MethodSpec("dsft", UserLevel(1, 10, 2), population=10, k=Fraction(3, 2))


def test_epsilon_floats_are_read_exactly():
    assert UserLevel(0.1, 10, 1).epsilon == Fraction(1, 10)


CONFIG = textwrap.dedent(
    """
    stream: {id: t, timestep: 1h}
    schema:
      attributes:
        - {name: x, kind: numeric, min: 0, max: 10, bins: 10}
    privacy: {unit: user-level, epsilon: 1, horizon: 10, cutoff: 2, population: 100}
    release: {decision: dsat}
    """
)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"privacy": {"epsilon": 0}}, "epsilon"),
        ({"privacy": {"epsilon": "nan"}}, "finite"),
        ({"privacy": {"cutoff": 0}}, "cutoff"),
        ({"privacy": {"cutoff": 11}}, "must not exceed"),
        ({"privacy": {"unit": "w-event", "w": 0}}, "w"),
        ({"schema": {"attributes": []}}, "empty"),
        ({"release": {"decision": "magic"}}, "unknown decision"),
        ({"release": {"mechanism": "gaussian"}}, "mechanism"),
        ({"release": {"thresold": 1}}, "unknown setting"),
        ({"randomness": {"seed": 1}}, "allow_seeded_noise"),
        ({"stream": {"timestep": "soon"}}, "duration"),
    ],
)
def test_stream_config_errors_name_the_setting(tmp_path, override, needle):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG)
    with pytest.raises(ConfigError, match=needle):
        load_settings(path, **override)


def test_env_overrides_yaml(tmp_path, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG)
    monkeypatch.setenv("DPSTREAM_PRIVACY__EPSILON", "0.3")
    s = load_settings(path)
    assert s.privacy.epsilon == Fraction(3, 10)
    monkeypatch.setenv("DPSTREAM_PRIVACY__EPSILON", "-2")
    with pytest.raises(ConfigError, match="epsilon"):
        load_settings(path)


def test_fingerprint_changes_with_privacy_parameters_only(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG)
    base = load_settings(path).fingerprint()
    assert load_settings(path, kafka={"bootstrap_servers": "elsewhere:9092"}).fingerprint() == base
    for change in ({"privacy": {"epsilon": 2}}, {"privacy": {"cutoff": 3}}, {"release": {"decision": "dsft"}},
                   {"schema": {"attributes": [{"name": "x", "kind": "numeric", "min": 0, "max": 10, "bins": 5}]}}):
        assert load_settings(path, **change).fingerprint() != base


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.yaml")


def test_no_hidden_global_state_in_imports():
    """Importing the packages draws no randomness and starts nothing."""
    code = "import histogram, controller, stream.config; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ}, check=True)
    assert out.stdout.strip() == "ok"


_ENV_YAML = textwrap.dedent(
    """\
    stream: {id: t, timestep: 1h}
    schema:
      attributes:
        - {name: x, kind: numeric, min: 0, max: 10, bins: 10}
    privacy: {unit: user-level, epsilon: 1, horizon: 10, cutoff: 2, population: 100}
    """
)


def test_schema_section_takes_prefixed_environment_overrides_like_every_section(tmp_path, monkeypatch):
    """``DPSTREAM_SCHEMA__*`` works (the error messages suggest it); the bare ``SCHEMA__*`` never does.

    ``schema`` is an aliased field; pydantic-settings alone read it from the unprefixed alias and
    clashed with the YAML section, so ``DPSTREAM_SCHEMA__USER_ID`` was silently ignored.
    """
    from stream.config import load_settings

    path = tmp_path / "c.yaml"
    path.write_text(_ENV_YAML)
    for k in [k for k in os.environ if k.startswith("DPSTREAM_") or k.upper().startswith("SCHEMA")]:
        monkeypatch.delenv(k)
    assert load_settings(path).schema.user_id == "user_id"
    monkeypatch.setenv("DPSTREAM_SCHEMA__USER_ID", "pid")
    monkeypatch.setenv("DPSTREAM_SERVICE__HTTP_PORT", "8123")
    s = load_settings(path)
    assert (s.schema.user_id, s.service.http_port, [a.name for a in s.schema.attributes]) == ("pid", 8123, ["x"])
    monkeypatch.setenv("DPSTREAM_SCHEMA__ATTRIBUTES", '[{"name": "y", "kind": "numeric", "min": 0, "max": 5, "bins": 5}]')
    assert [a.name for a in load_settings(path).schema.attributes] == ["y"]
    monkeypatch.delenv("DPSTREAM_SCHEMA__USER_ID")
    monkeypatch.delenv("DPSTREAM_SCHEMA__ATTRIBUTES")
    monkeypatch.setenv("SCHEMA__USER_ID", "bare")  # not our prefix: ignored, not an error
    assert load_settings(path).schema.user_id == "user_id"
