"""kafka.record_time / stream.clock_skew configuration and the timestamp-type answer parser."""

from __future__ import annotations

import pytest

from stream.service.kafka_io import _find_config
from stream.service.testing import small_settings


def test_timestamp_type_is_read_from_kafka_pythons_nested_answer():
    answer = {"TOPIC": {"events": {"message.timestamp.type": {"value": "LogAppendTime", "read_only": False}}}}
    assert _find_config(answer, "message.timestamp.type") == "LogAppendTime"
    assert _find_config({"TOPIC": {"events": {}}}, "message.timestamp.type") is None  # "cannot tell"


def _load(**sections):
    from stream.config import load_settings

    base = {"privacy": {"unit": "user-level", "epsilon": 1, "horizon": 10, "cutoff": 2, "population": 10},
            "schema": {"attributes": [{"name": "sex", "kind": "categorical", "values": ["M", "F"]}]}}
    return load_settings(None, **{**base, **sections})


def test_record_time_inclusion_is_the_default():
    s = _load()
    assert s.kafka.record_time == "log-append-time" and not s.kafka.allow_data_dependent_inclusion


def test_the_watermark_rule_needs_the_explicit_opt_out():
    from stream.config import ConfigError

    with pytest.raises(ConfigError, match=r"(?s)watermark decides which events count from other people's events"
                                          r".*kafka.record_time: log-append-time.*allow_data_dependent_inclusion: true"):
        _load(kafka={"record_time": "watermark"})
    s = _load(kafka={"record_time": "watermark", "allow_data_dependent_inclusion": True},
              stream={"idle_timeout": "10s"})
    assert s.kafka.record_time == "watermark"  # the legacy rule, outside the proof, by explicit choice
    with pytest.raises(ConfigError, match="never uses it: remove the setting"):
        _load(kafka={"allow_data_dependent_inclusion": True})


@pytest.mark.parametrize("mode", ["log-append-time", "trusted-create-time"])
def test_record_time_modes_refuse_rules_the_proof_does_not_cover(mode):
    from stream.config import ConfigError

    with pytest.raises(ConfigError, match=r"(?s)stream.idle_timeout seals timesteps .* Remove stream.idle_timeout"):
        _load(kafka={"record_time": mode}, stream={"idle_timeout": "30s"})
    with pytest.raises(ConfigError, match=r"stream.clock_skew must be > 0 with record-time inclusion"):
        _load(kafka={"record_time": mode}, stream={"clock_skew": "0s"})
    with pytest.raises(ConfigError, match=r"clock_skew: .*must be >= 0"):
        _load(kafka={"record_time": mode}, stream={"clock_skew": -1})
    with pytest.raises(ConfigError, match=r"max_future: .*must be >= 0"):
        _load(kafka={"record_time": mode}, stream={"max_future": -1})
    assert _load(kafka={"record_time": mode}, stream={"max_future": "0s"}).stream.max_future.total_seconds() == 0


def test_record_time_modes_and_skew_are_validated():
    assert small_settings().kafka.record_time == "watermark"  # the in-memory loop's legacy rule, opted into
    assert small_settings(kafka={"record_time": "log-append-time"}).kafka.record_time == "log-append-time"
    assert small_settings().stream.clock_skew.total_seconds() == 5
    with pytest.raises(Exception, match="record_time"):
        small_settings(kafka={"record_time": "create-time"})
    with pytest.raises(Exception, match="clock_skew"):
        small_settings(stream={"clock_skew": "-1s"})


def test_arrived_after_seal_is_late_not_a_dead_letter():
    from stream.service.metrics import Metrics

    m = Metrics()
    m.count_rejections({"arrived_after_seal": 2, "timestep_sealed": 3})
    get = m.registry.get_sample_value
    assert get("dpstream_late_events_total") == 5
    assert get("dpstream_arrived_after_seal_total") == 2
    assert get("dpstream_dead_letters_total", {"reason": "arrived_after_seal"}) is None
