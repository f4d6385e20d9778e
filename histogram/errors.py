"""Errors raised by the histogram package. Each says what was wrong and what to do."""


class HistogramError(Exception):
    """Base class of every error raised by :mod:`histogram`."""


class DomainError(HistogramError, ValueError):
    """A domain or attribute is malformed, or a value does not fit the domain."""


class NoiseError(HistogramError, ValueError):
    """A noise parameter is invalid (scale not a positive finite rational, bad size)."""


class MechanismError(HistogramError, ValueError):
    """A mechanism was asked for something it cannot do (ε ≤ 0, wrong shape, …)."""
