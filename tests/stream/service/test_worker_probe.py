"""A scale-out worker's broker probe asks about the input partitions it owns (issue 14 item 3):
a worker whose partitions' leaders are gone must turn not ready even when partition 0 (which
another worker may own) is fine."""

from __future__ import annotations

import threading

from kafka import TopicPartition

from stream.service.http import Health
from stream.service.metrics import Metrics
from stream.service.worker import Worker
from tests.kafka_harness import service_config, settings_from


def _worker(tmp_path) -> Worker:
    cfg = service_config("127.0.0.1:1", tmp_path, seed=1, kafka={"topic_partitions": 4})
    cfg["service"]["role"] = "worker"
    return Worker(settings_from(cfg), metrics=Metrics(), health=Health(), stop=threading.Event())


def test_probe_follows_the_owned_partitions(tmp_path) -> None:
    w = _worker(tmp_path)
    topic = w.topic
    assert w.probe_partitions() == [TopicPartition(topic, 0)]  # owns nothing yet: still probe the cluster
    w.assigned({3, 1})
    assert w.probe_partitions() == [TopicPartition(topic, 1), TopicPartition(topic, 3)]
    w.revoked({1})
    assert w.probe_partitions() == [TopicPartition(topic, 3)]
    w.revoked({3})
    assert w.probe_partitions() == [TopicPartition(topic, 0)]

