"""Secrets in the settings are SecretStr: never in repr, str, dumps, logs, errors or the fingerprint,
and kafka-python still gets the clear text (issue 14 item 4)."""

from __future__ import annotations

import io
import json
import logging
import textwrap

import pytest
from pydantic import SecretStr

from stream.config import SECRET_SETTINGS, ConfigError, KafkaSection, load_settings
from stream.service.kafka_io import client_options
from stream.service.logs import log, setup_logging

PASSWORD = "hunter2-Zq9-not-for-print"

CONFIG = textwrap.dedent(
    """
    stream: {id: t, timestep: 1h}
    schema:
      attributes:
        - {name: x, kind: numeric, min: 0, max: 10, bins: 10}
    privacy: {unit: user-level, epsilon: 1, horizon: 10, cutoff: 2, population: 100}
    release: {decision: dsat, noise_floor: true}
    kafka: {security_protocol: SASL_SSL, sasl_mechanism: SCRAM-SHA-512, sasl_plain_username: dpstream}
    """
)


@pytest.fixture
def config(tmp_path, monkeypatch):
    for name in list(__import__("os").environ):
        if name.startswith("DPSTREAM_"):
            monkeypatch.delenv(name)
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG)
    return path


def _surfaces(settings) -> dict[str, str]:
    """Every way the settings are commonly turned into text."""
    stream = io.StringIO()
    logger = setup_logging("DEBUG", stream)
    log(logger.getChild("t"), logging.INFO, f"settings {settings!r}", error=str(settings.kafka))
    logging.getLogger("dpstream.t").info("plain %s %r", settings, settings.kafka)
    return {
        "repr": repr(settings),
        "str": str(settings),
        "kafka repr": repr(settings.kafka),
        "model_dump_json": settings.model_dump_json(),
        "model_dump(json)": json.dumps(settings.model_dump(mode="json")),
        "privacy_view": json.dumps(settings.privacy_view()),
        "fingerprint": settings.fingerprint(),
        "log": stream.getvalue(),
    }


def test_the_password_never_shows(config, monkeypatch):
    monkeypatch.setenv("DPSTREAM_KAFKA__SASL_PLAIN_PASSWORD", PASSWORD)
    settings = load_settings(config)
    assert isinstance(settings.kafka.sasl_plain_password, SecretStr)
    for name, text in _surfaces(settings).items():
        assert PASSWORD not in text, name
    # ... and the one place that builds the clients gets it in clear
    assert client_options(settings.kafka)["sasl_plain_password"] == PASSWORD


def test_the_leak_check_is_not_vacuous(config):
    """The same surfaces DO show a plain-string password: what SecretStr prevents."""

    class Leaky(KafkaSection):  # the field as it was before: a plain string
        sasl_plain_password: str | None = None

    leaky = Leaky(sasl_plain_password=PASSWORD)
    assert PASSWORD in repr(leaky)
    assert PASSWORD in leaky.model_dump_json()


def test_the_password_does_not_change_the_fingerprint(config, monkeypatch):
    base = load_settings(config).fingerprint()
    monkeypatch.setenv("DPSTREAM_KAFKA__SASL_PLAIN_PASSWORD", PASSWORD)
    assert load_settings(config).fingerprint() == base
    monkeypatch.setenv("DPSTREAM_KAFKA__SASL_PLAIN_PASSWORD", PASSWORD + "-rotated")
    assert load_settings(config).fingerprint() == base  # rotating a credential is not config drift


def test_errors_never_echo_the_password(config, monkeypatch):
    # another mistake in the same section: the error names the field, not the section's values
    monkeypatch.setenv("DPSTREAM_KAFKA__SASL_PLAIN_PASSWORD", PASSWORD)
    monkeypatch.setenv("DPSTREAM_KAFKA__MAX_POLL_RECORDS", "lots")
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert "kafka.max_poll_records: " in str(err.value) and "(got 'lots')" in str(err.value)  # non-secret values are shown
    assert PASSWORD not in str(err.value)
    # a password of the wrong type (a number in YAML): named, not shown
    monkeypatch.delenv("DPSTREAM_KAFKA__SASL_PLAIN_PASSWORD")
    monkeypatch.delenv("DPSTREAM_KAFKA__MAX_POLL_RECORDS")
    config.write_text(CONFIG.replace("sasl_plain_username: dpstream", "sasl_plain_password: 987654321"))
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert "kafka.sasl_plain_password" in str(err.value) and "987654321" not in str(err.value)


def test_every_password_like_setting_is_secret():
    """A future ``*password*`` setting must be SecretStr and listed in SECRET_SETTINGS."""
    found = {f"kafka.{name}" for name in KafkaSection.model_fields if "password" in name}
    assert found and found <= SECRET_SETTINGS
    for dotted in found:
        annotation = KafkaSection.model_fields[dotted.split(".")[1]].annotation
        assert SecretStr in getattr(annotation, "__args__", (annotation,)), dotted


def test_a_copy_with_changes_keeps_the_secret(config, monkeypatch):
    """Settings.with_changes rebuilds settings from a JSON dump, which masks secrets."""

    monkeypatch.setenv("DPSTREAM_KAFKA__SASL_PLAIN_PASSWORD", PASSWORD)
    copy = load_settings(config).with_changes({"release": {"decision": "dsft"}})
    assert copy.kafka.sasl_plain_password.get_secret_value() == PASSWORD
