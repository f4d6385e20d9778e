"""DPCopula: differentially private Gaussian copula models of high-dimensional record tables.

See :mod:`histogram.copula.mechanism` (the release and its privacy map),
:mod:`histogram.copula.model` (the released model and the queries it answers
without materialising the histogram) and :mod:`histogram.copula.gaussian`
(bivariate normal probabilities, nearest correlation matrix).
"""

from histogram.copula.gaussian import bvn_cdf, nearest_correlation
from histogram.copula.mechanism import VARIANTS, CopulaRelease, DPCopula
from histogram.copula.model import GaussianCopula

__all__ = ["VARIANTS", "CopulaRelease", "DPCopula", "GaussianCopula", "bvn_cdf", "nearest_correlation"]
