"""kafka.record_time / stream.clock_skew configuration and the timestamp-type answer parser."""

from __future__ import annotations

import pytest

from stream.service.kafka_io import _find_config
from stream.service.testing import small_settings


def test_timestamp_type_is_read_from_kafka_pythons_nested_answer():
    answer = {"TOPIC": {"events": {"message.timestamp.type": {"value": "LogAppendTime", "read_only": False}}}}
    assert _find_config(answer, "message.timestamp.type") == "LogAppendTime"
    assert _find_config({"TOPIC": {"events": {}}}, "message.timestamp.type") is None  # "cannot tell"


def test_record_time_modes_and_skew_are_validated():
    assert small_settings().kafka.record_time == "watermark"
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
