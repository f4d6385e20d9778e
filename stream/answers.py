"""The answerer of one release message (histogram counts or a released model), for box queries.

Shared by ``/api/query`` (:mod:`stream.service.query`) and the declared queries every release
carries (:meth:`stream.messages.MessageBuilder.query_answers`): reads the message only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from histogram.errors import MechanismError
from histogram.model_query import CopulaAnswers, CountsAnswers, TablesAnswers

__all__ = ["answerer"]


def answerer(release: Mapping[str, Any], levels: tuple[int, ...], names: Sequence[str]) -> Any:
    """The answerer of one release message (a parsed ``release`` or ``model-release`` document)."""
    if release.get("message_type") == "release":
        return CountsAnswers(np.asarray(release["counts"], dtype=np.float64), levels)
    model = release["model"]
    index = {n: i for i, n in enumerate(names)}
    tables = {tuple(index[a] for a in t["attributes"]): np.asarray(t["counts"], dtype=np.float64)
              for t in model["marginals"]}
    synthetic = None if model.get("synthetic") is None else np.asarray(model["synthetic"]["records"], dtype=np.int64)
    if synthetic is not None and synthetic.size == 0:
        synthetic = synthetic.reshape(0, len(levels))
    if model["kind"] == "gaussian-copula":
        from histogram.copula.gaussian import nearest_correlation
        from histogram.copula.mechanism import probabilities
        from histogram.copula.model import GaussianCopula

        marginals = tuple(probabilities(tables[(j,)]) for j in range(len(levels)))
        corr = np.asarray(model["correlation"], dtype=np.float64)
        try:
            copula = GaussianCopula(marginals, corr, float(model["total"]))
        except MechanismError:  # the published matrix is rounded to 6 decimals: project it again
            copula = GaussianCopula(marginals, nearest_correlation(corr), float(model["total"]))
        return CopulaAnswers(copula, synthetic)
    return TablesAnswers(levels, tables, synthetic)
