"""Structured JSON logs: one object per line on stderr.

``log(logger, level, "what happened", key=value, …)`` writes
``{"ts", "level", "logger", "event", …fields}``. Logs are an operator
surface (docs/privacy.md §9): they must never carry a raw per-timestep
statistic (a count of events, late or dead-lettered records in one timestep
or checkpoint, a noise value, a threshold, a payload). So the fields are an
**allowlist**, :data:`FIELDS`: a field not listed there is dropped and
replaced by a ``redacted`` list of the dropped names, whatever its value.
Adding a field means adding it to :data:`FIELDS` with the reason it is
public or operational, which ``tests/stream/service/test_logs.py`` checks
against every field the service's code passes.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["JsonFormatter", "setup_logging", "log", "get_logger", "FIELDS", "sanitize"]

#: Every field a log line may carry, and why it is safe there. Values must also be small
#: scalars (or short lists of them): anything bulky is dropped too.
FIELDS: dict[str, str] = {
    "stream": "the stream id (public configuration)",
    "topics": "topic names the service created (configuration)",
    "note": "a recovery note: what the journal plan does (offsets and checkpoint numbers, no data)",
    "seq": "a journal checkpoint number (operational)",
    "checkpoint": "a journal checkpoint number (operational)",
    "releases": "how many timesteps a re-sent checkpoint releases (each is a public release)",
    "next_timestep": "the next timestep index (public: every timestep gets one release)",
    "timesteps": "indexes of the timesteps just released, or how many (public: every timestep gets one release)",
    "from": "start of the first timestep a start-up's catch-up releases (the grid and the wall clock)",
    "to": "end of the last timestep a start-up's catch-up releases (the grid, the wall clock and stream.end)",
    "bounded_by": "which settings bound the stream: --max-timesteps, stream.end (configuration)",
    "per_checkpoint": "service.max_releases_per_checkpoint (configuration)",
    "hint": "what the operator can do about a warning (text written by dpstream, no data values)",
    "kinds": "fresh/republished of those releases (public: in the release messages)",
    "published": "indexes of the timesteps whose messages a checkpoint publishes (release.delay: k behind the "
                 "released ones; public: each is in its message)",
    "unpublished": "indexes of the timesteps released but not yet published at start-up (release.delay: each is "
                   "published k timesteps after its release; public)",
    "delay": "release.delay, the publication delay in timesteps (configuration)",
    "journal_checkpoints": "checkpoints in the journal at start-up (operational)",
    "partitions": "number of input partitions assigned (configuration)",
    "input_partitions": "number of input partitions a scale-out releaser waits for (topic metadata)",
    "worker": "a scale-out worker's configured name (service.worker_id or the host name)",
    "resumed_from_offsets": "whether the start resumed from committed offsets (operational)",
    "partition": "the input partition of a record that could not be processed (operational)",
    "offset": "the offset of that record (operational; the record stays in the topic)",
    "error": "an error text (messages written by dpstream or its clients, no data values)",
    "error_type": "the exception class name",
    "size_bytes": "journal size (operational; operator-only input volume like the volume metrics: it moves "
                  "with the published release bytes, the open timesteps' buffered events and the last "
                  "checkpoint's dead-letter records)",
    "timeout_seconds": "a configured timeout",
    "cause": "why a journal write failed: the OS error text, e.g. 'No space left on device' (operational)",
    "attempts": "how many times a journal write was tried (operational)",
    "bootstrap": "kafka.bootstrap_servers the broker probe asks (configuration)",
    "failed_probes": "consecutive failed broker probes (operational)",
    "on_cluster_loss": "service.on_cluster_loss, the configured reaction to a cluster that lost the stream's data",
}
_MAX_ITEMS = 8
_RESERVED = set(logging.LogRecord("x", 0, "x", 0, "x", None, None).__dict__) | {"message", "asctime"}


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def sanitize(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The allowlisted fields with small scalar values; the names of everything dropped under ``redacted``."""
    out: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in fields.items():
        if key not in FIELDS:
            dropped.append(key)
        elif _scalar(value):
            out[key] = value
        elif isinstance(value, list | tuple) and len(value) <= _MAX_ITEMS and all(_scalar(v) for v in value):
            out[key] = list(value)
        else:
            dropped.append(key)
    if dropped:
        out["redacted"] = sorted(dropped)
    return out


class JsonFormatter(logging.Formatter):
    """Formats records as one JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "event": record.getMessage(),
        }
        extra = {k: v for k, v in record.__dict__.items() if k not in _RESERVED and not k.startswith("_")}
        fields = extra.pop("fields", None)
        if isinstance(fields, Mapping):
            extra.update(fields)
        doc.update(sanitize(extra))
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            doc["error"] = f"{type(exc).__name__}: {exc}"
        return json.dumps(doc, ensure_ascii=False, default=str)


def setup_logging(level: str = "INFO", stream: TextIO | None = None) -> logging.Logger:
    """Send the ``dpstream`` loggers to ``stream`` (stderr) as JSON lines."""
    logger = logging.getLogger("dpstream")
    for h in list(logger.handlers):
        if getattr(h, "_dpstream", False):
            logger.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler._dpstream = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    # kafka-python is chatty at INFO; keep its warnings, as JSON too
    kafka_logger = logging.getLogger("kafka")
    kafka_logger.setLevel(logging.ERROR)
    return logger


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"dpstream.{name}")


def log(logger: logging.Logger, level: int, event: str, *, exc_info: Any = None, **fields: Any) -> None:
    """Log ``event`` with structured ``fields`` (sanitised by the formatter)."""
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={"fields": fields}, exc_info=exc_info)
