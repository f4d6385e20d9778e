"""DP k-way marginals (seed 002): all marginals up to a reporting length, consistency, synthesis."""

from histogram.marginals.kway import KWayMarginals, KWayRelease, make_consistent

__all__ = ["KWayMarginals", "KWayRelease", "make_consistent"]
