"""Personalized differential privacy (thesis ch. 5): per-person budgets and five release mechanisms.

Pure maths like the rest of :mod:`histogram`: no I/O, no configuration
objects. Budgets come from a public declaration (:mod:`.budgets`); the
mechanisms (:mod:`.mechanisms`) are plans over the public budget levels whose
per-person ε costs are exact Fractions for the caller's accountant.
"""

from histogram.personalized.budgets import BudgetError, BudgetLevels, PersonalBudgets
from histogram.personalized.mechanisms import (
    MECHANISMS,
    Part,
    PersonalizedMechanism,
    PersonalizedRelease,
    minimum,
    partitioned,
    privacy_aware,
    sampling,
    threshold,
    utility_based,
)
from histogram.personalized.partition import BudgetPartition, CountUtility, utility_based_partition
from histogram.personalized.sampling import inclusion_probability, sample_inclusion

__all__ = [
    "MECHANISMS",
    "BudgetError",
    "BudgetLevels",
    "BudgetPartition",
    "CountUtility",
    "Part",
    "PersonalBudgets",
    "PersonalizedMechanism",
    "PersonalizedRelease",
    "inclusion_probability",
    "minimum",
    "partitioned",
    "privacy_aware",
    "sample_inclusion",
    "sampling",
    "threshold",
    "utility_based",
    "utility_based_partition",
]
