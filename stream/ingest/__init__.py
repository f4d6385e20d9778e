"""Ingest: events in, sealed per-timestep histograms out.

Decoding and validation (:mod:`stream.ingest.events`), the input formats
(:mod:`stream.ingest.formats` chooses the decoder for ``input.format``; Schema
Registry wire format in :mod:`stream.ingest.wire`, writer schemas in
:mod:`stream.ingest.schemas`, per-format readers in :mod:`stream.ingest.avro`,
:mod:`stream.ingest.protobuf`, :mod:`stream.ingest.json_schema`), CSV reading
(:mod:`stream.ingest.csvio`), person keys and contribution bounding
(:mod:`stream.ingest.people`) and event-time windowing
(:mod:`stream.ingest.windowing`). Imports nothing from ``stream.service`` or
``stream.lab``.
"""
