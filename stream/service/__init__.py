"""The long-running Kafka service and its operations surfaces.

The loop (:mod:`stream.service.loop`), Kafka I/O, the privacy journal, HTTP,
metrics, logs, the embedded broker and in-memory test parts. Never imports
``stream.lab``.
"""
