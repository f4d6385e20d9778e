"""Ingest: events in, sealed per-timestep histograms out.

Decoding and validation (:mod:`stream.ingest.events`), CSV reading
(:mod:`stream.ingest.csvio`), person keys and contribution bounding
(:mod:`stream.ingest.people`) and event-time windowing
(:mod:`stream.ingest.windowing`). Imports nothing from ``stream.service`` or
``stream.lab``.
"""
