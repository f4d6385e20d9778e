"""Structured JSON logs: one object per line on stderr.

``log(logger, level, "what happened", key=value, …)`` writes
``{"ts", "level", "logger", "event", …fields}``. Field values must be
operational facts (timestep indexes, offsets, counts of *records*, durations,
error texts). Raw per-timestep statistics must never be logged (privacy.md
§4 inv. 8): a field whose name says it holds counts, noise, thresholds,
payloads or state is replaced by ``"<redacted>"``, and so is any list,
array or mapping with more than a few items — whatever its name.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["JsonFormatter", "setup_logging", "log", "get_logger", "REDACTED", "sanitize"]

REDACTED = "<redacted>"
_FORBIDDEN = ("count", "noise", "threshold", "rho", "payload", "histogram", "state", "snapshot", "value",
              "secret", "true")
_ALLOWED = {"events_consumed", "records", "messages", "dead_letters", "late_events", "timesteps_sealed",
            "releases", "offset", "offsets"}
_MAX_ITEMS = 8
_RESERVED = set(logging.LogRecord("x", 0, "x", 0, "x", None, None).__dict__) | {"message", "asctime"}


def _forbidden(name: str) -> bool:
    low = name.lower()
    return low not in _ALLOWED and any(word in low for word in _FORBIDDEN)


def sanitize(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Fields safe to log: forbidden names and bulky values redacted."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if _forbidden(key):
            out[key] = REDACTED
            continue
        if isinstance(value, bytes | bytearray):
            out[key] = REDACTED
        elif isinstance(value, Mapping):
            out[key] = sanitize(value) if len(value) <= _MAX_ITEMS else REDACTED
        elif isinstance(value, list | tuple | set | frozenset):
            out[key] = list(value) if len(value) <= _MAX_ITEMS and all(
                isinstance(v, str | int | float | bool) or v is None for v in value) else REDACTED
        elif isinstance(value, str | int | float | bool) or value is None:
            out[key] = value
        elif type(value).__module__ == "numpy":
            out[key] = REDACTED
        else:
            out[key] = str(value)
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
