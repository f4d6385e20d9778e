"""Compression codecs (issue 18 item 1): every decoder loads, a missing one refuses start-up (exit 2),
an undecodable batch stops the service with a message naming partition, offset and codec."""

from __future__ import annotations

import json
import logging

import kafka.codec
import pytest

from stream.service import codecs
from tests.kafka_harness import (  # noqa: F401
    InProcessService,
    broker,
    event,
    service_config,
    settings_from,
    wait_for,
)


def test_every_codec_decoder_loads_here() -> None:
    assert codecs.missing_codecs() == ()
    assert {c.name for c in codecs.CODECS} == {"gzip", "snappy", "lz4", "zstd"}


def test_missing_codec_is_named_with_the_pip_command() -> None:
    missing = codecs.missing_codecs(lambda name: name != "lz4")
    assert [c.name for c in missing] == ["lz4"]
    msg = codecs.missing_codecs_message(missing)
    assert "lz4" in msg and "pip install lz4" in msg
    # a decoder whose import raises counts as missing, not as a crash
    def boom(name: str) -> bool:
        if name == "zstd":
            raise ImportError("no zstandard")
        return True
    assert [c.name for c in codecs.missing_codecs(boom)] == ["zstd"]


def test_pyproject_declares_the_codec_libraries() -> None:
    import re
    import tomllib
    from pathlib import Path

    project = tomllib.loads(Path(__file__).resolve().parents[3].joinpath("pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    # name[extras]version: the distribution and its pin, whatever extras it is installed with
    bare = [re.sub(r"\[[^\]]*\]", "", d).split(";")[0].replace(" ", "") for d in declared]
    for lib in ("python-snappy==0.7.3", "cramjam", "lz4", "zstandard", "confluent-kafka==2.16.1"):
        assert any(d.startswith(lib) for d in bare), lib


def test_service_refuses_to_start_without_a_codec(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    from stream.service.launcher import run_service

    monkeypatch.setattr(kafka.codec, "has_lz4", lambda: False)
    with caplog.at_level(logging.ERROR):
        code = run_service(None, install_signals=False, http=False)  # type: ignore[arg-type]
    assert code == 2
    assert any("pip install lz4" in str(getattr(r, "fields", {}).get("error")) for r in caplog.records)


def test_the_c_crc32c_is_declared_and_active_here() -> None:
    from pathlib import Path

    text = Path(__file__).resolve().parents[3].joinpath("pyproject.toml").read_text()
    assert '"crc32c' in text
    assert codecs.crc32c_accelerated(), "pip install crc32c: kafka-python is checking CRCs in pure Python"


def test_service_warns_when_crcs_are_checked_in_python(broker, tmp_path, monkeypatch, caplog) -> None:  # noqa: F811
    from kafka.record import util

    monkeypatch.setattr(util, "crc32c_c", None)
    assert not codecs.crc32c_accelerated()
    s = settings_from(service_config(broker.bootstrap, tmp_path, seed=1))
    with caplog.at_level(logging.WARNING), InProcessService(s) as svc:
        assert svc.exit_code is None  # slow, not wrong: it runs
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "CRC-32C" in r.getMessage()]
    assert len(warned) == 1 and "pip install crc32c" in warned[0].getMessage()


def test_undecodable_message_names_partition_offset_codec() -> None:
    exc = kafka.errors.UnsupportedCodecError("Libraries for lz4 compression codec not found")
    msg = codecs.undecodable_message("in", 3, 17, exc)
    assert "partition 3" in msg and "offset 17" in msg and "codec: lz4" in msg


@pytest.mark.kafka
def test_undecodable_batch_is_an_operator_error_not_a_loss(broker, tmp_path, monkeypatch, caplog) -> None:  # noqa: F811
    """The consumer cannot decode lz4 (library 'missing' after start-up): exit 1 naming partition,
    offset and codec; nothing is committed past the batch, so the records stay in the topic."""
    cfg = service_config(broker.bootstrap, tmp_path, kafka={"topic_partitions": 1})
    s = settings_from(cfg)
    with caplog.at_level(logging.ERROR), InProcessService(s) as svc:
        assert svc.exit_code is None
        monkeypatch.setattr(kafka.codec, "has_lz4", lambda: False)
        from confluent_kafka import Producer  # librdkafka compresses without asking kafka-python

        p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4", "linger.ms": 5})
        # compressible (librdkafka sends a batch uncompressed when compression does not shrink it)
        p.produce(s.kafka.input_topic, json.dumps([event(f"u{i}", 0) for i in range(200)]).encode(), partition=0)
        assert p.flush(30) == 0
        wait_for(lambda: svc.exit_code is not None, 30, what="service stops")
        assert svc.exit_code == 1
    errors = " ".join(str(getattr(r, "fields", {}).get("error")) for r in caplog.records)
    assert "partition 0 at offset 0" in errors and "codec: lz4" in errors
