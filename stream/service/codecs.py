"""Kafka compression codecs: every one an upstream producer may use must decode here.

kafka-python decodes gzip itself (standard library) but needs third-party
libraries for snappy (``python-snappy`` with ``cramjam``), lz4 (``lz4``) and
zstd (``zstandard``). Without them a single compressed batch stops the
consumer with ``UnsupportedCodecError``; Java, Go and librdkafka producers
often compress with lz4 or zstd by default. The service therefore checks at
start-up that every decoder loads (:func:`missing_codecs`) and refuses to start
(exit code 2) with the pip command that fixes it. A batch that still cannot be
decoded (corrupt, unknown codec) is reported by :func:`undecodable_message`
naming the partition, offset and codec: an operator error, never a silent loss.

Nothing here touches data or privacy state.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Codec", "CODECS", "crc32c_accelerated", "SLOW_CRC_WARNING", "missing_codecs", "missing_codecs_message",
           "undecodable_message"]


@dataclass(frozen=True)
class Codec:
    """One Kafka compression codec: its name, the library kafka-python needs, its licence."""

    name: str
    library: str  # pip package name ("" for the standard library)
    licence: str


CODECS: tuple[Codec, ...] = (
    Codec("gzip", "", "standard library"),
    Codec("snappy", "python-snappy cramjam", "BSD-3-Clause / MIT"),
    Codec("lz4", "lz4", "BSD-3-Clause"),
    Codec("zstd", "zstandard", "BSD-3-Clause"),
)


def _loads(name: str) -> bool:
    import kafka.codec as kc

    return bool(getattr(kc, f"has_{name}")())


def missing_codecs(check: object = None) -> tuple[Codec, ...]:
    """The codecs whose decoder does not load (empty when all do).

    ``check``: ``name -> bool`` (default: kafka-python's own ``has_<codec>``), for tests.
    """
    test = check if callable(check) else _loads
    out = []
    for codec in CODECS:
        try:
            ok = bool(test(codec.name))
        except Exception:  # noqa: BLE001 - a library that fails to import is missing
            ok = False
        if not ok:
            out.append(codec)
    return tuple(out)


def missing_codecs_message(missing: tuple[Codec, ...]) -> str:
    """What is wrong and what to do, for the start-up refusal."""
    names = ", ".join(c.name for c in missing)
    libs = " ".join(c.library for c in missing if c.library)
    fix = f"install them with: pip install {libs}" if libs else "reinstall Python with zlib support"
    return (f"cannot decode Kafka batches compressed with {names}: the library for each is missing "
            f"({libs or 'zlib'}); an upstream producer using that codec would stop the stream; {fix} "
            "(or reinstall dpstream, which declares them)")


def undecodable_message(topic: str, partition: int, offset: int | None, exc: BaseException) -> str:
    """An operator error for a batch kafka-python could not decompress or parse."""
    text = str(exc)
    codec = next((c.name for c in CODECS if c.name in text.lower()), "unknown")
    return (f"cannot decode the record batch of {topic} partition {partition} at offset {offset} "
            f"(codec: {codec}; {type(exc).__name__}: {text}); the records stay in the topic and the service "
            "stops instead of skipping them: install the codec library (pip install python-snappy cramjam lz4 "
            "zstandard) or, for a corrupt batch, have the producer re-send and move the committed offset past it")


#: What the service logs at start-up when kafka-python checks batch CRCs in pure Python.
SLOW_CRC_WARNING = (
    "kafka-python is checking record-batch CRC-32C checksums in pure Python (the C extension from the "
    "'crc32c' package did not load): reading the input topic is then about 10x slower (measured by "
    "benchmarks/bench_throughput.py: ~13-15k events/s on one core instead of several hundred thousand), "
    "so a busy topic builds up lag; fix: pip install crc32c (dpstream declares it; LGPL-2.1-or-later)")


def crc32c_accelerated() -> bool:
    """Whether kafka-python verifies record-batch CRC-32C checksums in C (the ``crc32c`` package).

    Without it every fetched batch is checksummed byte by byte in Python, which is most of the
    cost of reading a topic. It is a speed matter only: the checksums are verified either way.
    """
    from kafka.record import util

    return getattr(util, "crc32c_c", None) is not None
