"""Pure maths for dpstream: domains, histogram building, noise, release mechanisms.

Nothing in this package does I/O or reads configuration files. Counts are
integers (``numpy.int64``); every privacy parameter is an exact
``fractions.Fraction``. Randomness comes only from :mod:`histogram.noise`.
"""

from histogram.domain import CategoricalAttribute, Domain, NumericAttribute
from histogram.errors import DomainError, HistogramError, MechanismError, NoiseError
from histogram.lpa import LaplaceMechanism, NoisyHistogram
from histogram.noise import NoiseDrawer, Randomness

__all__ = [
    "CategoricalAttribute",
    "Domain",
    "DomainError",
    "HistogramError",
    "LaplaceMechanism",
    "MechanismError",
    "NoiseDrawer",
    "NoiseError",
    "NoisyHistogram",
    "NumericAttribute",
    "Randomness",
]
