"""Kafka failures, classified: every kafka-python exception becomes a :class:`KafkaIOError` that
says whether repeating the operation may succeed (*retriable*: a timeout, a leader moving) or the
service must stop (*fatal*: fenced by a newer instance, not authorised, offsets out of range,
misconfiguration). Shared by the Kafka clients (:mod:`stream.service.kafka_io`) and the progress
evidence they feed (:mod:`stream.service.progress`).
"""

from __future__ import annotations

from kafka import errors as kerr

__all__ = ["FATAL_TYPES", "KafkaIOError", "wrap_error"]

FATAL_TYPES: tuple[type[BaseException], ...] = (
    kerr.ProducerFencedError,
    kerr.InvalidProducerEpochError,
    kerr.AuthorizationError,
    kerr.KafkaConfigurationError,
    kerr.UnsupportedVersionError,
    kerr.InvalidTxnStateError,
    kerr.TransactionalIdAuthorizationFailedError,
    kerr.OffsetOutOfRangeError,
    kerr.NoOffsetForPartitionError,
)


class KafkaIOError(RuntimeError):
    """A Kafka operation failed.

    Attributes:
        retriable: True when repeating the same operation may succeed
            (timeouts, unavailable brokers or coordinators); False when the
            service must stop (fenced by a newer instance, not authorised,
            offsets out of range, misconfiguration).
        action: what was being done, e.g. ``"commit transaction"``.
    """

    def __init__(self, message: str, *, retriable: bool, action: str = "") -> None:
        super().__init__(message)
        self.retriable = retriable
        self.action = action


def wrap_error(exc: BaseException, action: str) -> KafkaIOError:
    """Classify any exception raised by kafka-python."""
    if isinstance(exc, KafkaIOError):
        return exc
    if isinstance(exc, FATAL_TYPES):
        retriable = False
    elif isinstance(exc, kerr.KafkaError):
        retriable = bool(getattr(exc, "retriable", False)) or isinstance(
            exc, kerr.KafkaTimeoutError | kerr.KafkaConnectionError | kerr.NodeNotReadyError
        ) or _wraps_retriable(exc)
    else:
        retriable = isinstance(exc, TimeoutError | ConnectionError)
    kind = "retriable" if retriable else "fatal"
    return KafkaIOError(f"{action} failed ({kind}): {exc}", retriable=retriable, action=action)


#: kafka-python's retriable broker errors, by class name (see :func:`_wraps_retriable`)
_RETRIABLE_NAMES = tuple(sorted(
    name for name, cls in vars(kerr).items()
    if isinstance(cls, type) and issubclass(cls, kerr.KafkaError) and getattr(cls, "retriable", False)
))


def _wraps_retriable(exc: BaseException) -> bool:
    """kafka-python's transaction manager reports a failed transactional request as a plain
    ``KafkaError`` whose text names the broker error ("Could not execute transactional request for
    unknown reasons: [Error 7] RequestTimedOutError ..."): a hung broker's timeout is retriable (the
    journaled checkpoint is re-sent with a fresh producer), not a reason to stop the service."""
    if type(exc) is not kerr.KafkaError:
        return False
    text = str(exc)
    return any(name in text for name in _RETRIABLE_NAMES)
