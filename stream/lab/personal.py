"""Evaluating a personalized-DP stream (``privacy.personal``, thesis ch. 5) with ``dpstream evaluate``.

A personalized stream's engine (:class:`controller.personal.PersonalEngine`) steps on one block of
counts per budget level, and Jorgensen et al.'s Sampling routes each person by an exact coin keyed
by the stream's randomness. So the lab keeps more than the true histograms:

1. the input is read once with the service's reader, validation, windowing, routing and
   contribution bounding (:func:`stream.lab.inputs.load_truth`), under the *Minimum* plan of
   the same declaration: every event is routed to its own budget level and no coin is drawn.
   What is kept per timestep (:class:`PersonalRows`) is each counted event's ``level · bins +
   bin`` and its canonical person key — raw data, held in memory by the evaluation only, never
   written out;
2. run ``r`` of a method builds the stream's own engine with ``Randomness.seeded(seed + r)``
   (the Sampling coins' key and the release noise, as ``dpstream replay --seed seed+r`` draws
   them), routes each timestep's events with the engine's own :meth:`~controller.personal.PersonalEngine.slots`,
   counts them and steps the engine; the published estimate (after ``release.postprocess``)
   is compared with the true histogram of *everyone* (every level, and the persons a coin
   left out), which is what the estimate estimates.

So a run is what the service would have published, bit for bit, whenever each person carries
one tier (always with a consent table; with a consent attribute, when a person's events agree
on it: contribution bounding keeps a person's smallest (time, routed bin) record, and the
routed bin depends on the tier).

``--personal`` compares the five PDP mechanisms (:data:`PDP_MECHANISMS`) on the same rows and
runs: the declaration is re-validated with only ``privacy.personal.mechanism`` changed, and
Threshold and Sampling, when the configuration names no threshold, take the head-count-weighted
mean of the declared budgets (public; the threshold the thesis finds best for counts), floored to
a 1/10,000 grid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from histogram.accuracy import Workload
from histogram.noise import Randomness
from stream.config import ConfigError, Settings

__all__ = [
    "PDP_MECHANISMS",
    "PersonalRows",
    "parse_personal",
    "reading_settings",
    "with_pdp_mechanism",
    "default_threshold",
    "run_personal",
]

#: ``privacy.personal.mechanism`` values, in the thesis's order (baselines first).
PDP_MECHANISMS: tuple[str, ...] = ("minimum", "threshold", "sampling", "privacy_aware", "utility_based")
#: Threshold and Sampling without a configured threshold: the weighted mean budget floored to this grid.
THRESHOLD_GRID = 10_000


@dataclass(frozen=True)
class PersonalRows:
    """The counted events of each timestep of a personalized stream, routed to their budget level.

    Raw data, evaluation only: it stays in the evaluating process (and its workers).

    Attributes:
        flat: per timestep, int64 ``level · bins + bin`` of each event contribution bounding kept.
        cells: per timestep, its grid cell.
        persons: per timestep, the events' canonical person keys (an Arrow string array).
        bins: the domain's size.
        levels: the declaration's number of budget levels.
    """

    flat: tuple[np.ndarray, ...]
    persons: tuple[Any, ...]
    bins: int
    levels: int
    #: the grid cell of each timestep (w-event Sampling draws a coin per person and cell, as the
    #: pipeline does); empty: timestep ``t`` is cell ``t``
    cells: tuple[int, ...] = ()

    def cell(self, t: int) -> int:
        """The grid cell of timestep ``t`` (the label of a w-event Sampling coin)."""
        return self.cells[t] if self.cells else t

    @property
    def timesteps(self) -> int:
        return len(self.flat)

    def totals(self) -> np.ndarray:
        """``(T, bins)`` true histograms of everyone, whatever their level (what an estimate estimates)."""
        out = np.zeros((self.timesteps, self.bins), dtype=np.int64)
        for t, flat in enumerate(self.flat):
            if flat.size:
                out[t] = np.bincount(flat % self.bins, minlength=self.bins)
        return out

    def by_level(self) -> np.ndarray:
        """``(T, levels, bins)`` true histograms per budget level."""
        out = np.zeros((self.timesteps, self.levels * self.bins), dtype=np.int64)
        for t, flat in enumerate(self.flat):
            if flat.size:
                out[t] = np.bincount(flat, minlength=self.levels * self.bins)
        return out.reshape(self.timesteps, self.levels, self.bins)


def parse_personal(text: str) -> list[str]:
    """``"all"`` → the five mechanisms; ``"minimum,privacy_aware"`` → checked list, no repeats
    (``privacy-aware`` is accepted for ``privacy_aware``)."""
    from stream.lab.errors import EvaluationError

    items = [m.strip().lower().replace("-", "_") for m in text.split(",") if m.strip()]
    if items == ["all"]:
        return list(PDP_MECHANISMS)
    if not items:
        raise EvaluationError("--personal is empty: list PDP mechanisms (" + ", ".join(PDP_MECHANISMS) + ") or all")
    unknown = [m for m in items if m not in PDP_MECHANISMS]
    if unknown:
        raise EvaluationError(f"--personal: unknown PDP mechanism(s) {', '.join(unknown)}: choose from "
                              f"{', '.join(PDP_MECHANISMS)}, or all")
    if len(set(items)) != len(items):
        raise EvaluationError(f"--personal lists a mechanism twice: {','.join(items)}")
    return items


def default_threshold(settings: Settings) -> Fraction:
    """Threshold/Sampling's ε_t when the configuration names none: the declared head-count-weighted
    mean budget (public), floored to 1/10,000 and at least the smallest budget."""
    levels = settings.personal_declaration().levels
    mean = levels.mean()
    t = Fraction(math.floor(mean * THRESHOLD_GRID), THRESHOLD_GRID)
    return max(t, levels.minimum)


def with_pdp_mechanism(settings: Settings, mechanism: str) -> Settings:
    """``settings`` re-validated with ``privacy.personal.mechanism`` = ``mechanism`` (and a threshold
    for Threshold/Sampling: the configured one, else :func:`default_threshold`; the configured
    ``weights`` for the partitions)."""
    from stream.lab.errors import EvaluationError

    personal = settings.privacy.personal
    if personal is None:
        raise EvaluationError("--personal compares PDP mechanisms: the configuration has no privacy.personal")
    change: dict[str, Any] = {"mechanism": mechanism}
    if mechanism in ("threshold", "sampling"):
        t = personal.threshold if personal.threshold is not None else default_threshold(settings)
        change["threshold"] = str(t)
    else:
        change["threshold"] = None
    # privacy.personal.weights combines a partition's parts; the one-part plans take none
    change["weights"] = personal.weights if mechanism in ("privacy_aware", "utility_based") else None
    try:
        return settings.with_changes({"privacy": {"personal": change}})
    except ConfigError as exc:
        raise EvaluationError(f"PDP mechanism {mechanism} cannot run with this declaration: {exc}") from None


def reading_settings(settings: Settings) -> Settings:
    """The settings the input is read with: the same declaration under the Minimum plan, whose one
    part holds every level, so the pipeline routes each event to its level and draws no coin."""
    if settings.privacy.personal is None or settings.privacy.personal.mechanism == "minimum":
        return settings
    return with_pdp_mechanism(settings, "minimum")


def run_personal(
    settings: Settings,
    rows: PersonalRows,
    workload: Workload,
    randomness: Randomness,
    *,
    tick: Any = None,
) -> Any:
    """One run of a personalized stream: the engine with ``randomness`` (coins and noise), stepped on
    the rows routed by its own coins; a :class:`stream.lab.evaluate.RunTrace` against everyone's
    true histograms (``workload.truth``)."""
    from stream.lab.errors import EvaluationError
    from stream.lab.runs import run_method

    decl = settings.personal_declaration()
    if decl.levels.size != rows.levels or rows.bins != workload.bins or rows.timesteps != workload.timesteps:
        raise EvaluationError("the personalized rows do not match this configuration's budget levels or domain")
    engine = settings.engine(randomness)
    bins = rows.bins
    size = engine.input_bins

    def inputs(t: int, state: Any) -> np.ndarray:
        flat = rows.flat[t]
        if not flat.size:
            return np.zeros(size, dtype=np.int64)
        slots = engine.slots(state, flat // bins, rows.persons[t], rows.cell(t) if engine.coin_per_timestep else None)
        return np.bincount(slots * bins + flat % bins, minlength=size)

    return run_method(settings, workload, randomness, tick=tick, engine=engine, inputs=inputs)


def personal_names(methods: Sequence[str], mechanisms: Sequence[str] | None) -> list[tuple[str, str, str | None]]:
    """``(row name, method, PDP mechanism or None)``: ``method@mechanism`` when comparing mechanisms."""
    if not mechanisms:
        return [(m, m, None) for m in methods]
    return [(f"{m}@{p}", m, p) for m in methods for p in mechanisms]
