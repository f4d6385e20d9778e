"""The long-running Kafka service and its operations surfaces.

The process (:mod:`stream.service.launcher`: roles, signals and the shutdown
watchdog in :mod:`stream.service.shutdown`, test failpoints in
:mod:`stream.service.failpoints`) around the loop (:mod:`stream.service.loop`;
the scale-out :mod:`~stream.service.releaser` and :mod:`~stream.service.worker`
build on it), Kafka I/O (:mod:`~stream.service.kafka_io`, its error
classification in :mod:`~stream.service.kafka_errors`), the privacy journal,
HTTP, metrics, logs, the embedded broker and in-memory test parts. Never
imports ``stream.lab``.
"""
