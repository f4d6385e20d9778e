"""Post-processing of released counts: functions of released values and public facts only.

Anything computed from differentially private releases alone, without looking at the data
again, is exactly as private as those releases (post-processing, Dwork & Roth Prop. 2.1), so
these cost no ε and change no proof. They only change accuracy, and only ship when they
measurably help somewhere (``docs/results.md``, "Post-processing" and "Temporal smoothing").

``release.postprocess`` is a chain of steps applied left to right, written ``a+b`` (or as a
YAML list ``[a, b]``); ``none`` is the empty chain. The steps:

* ``nonnegative``: every count below zero becomes zero. True counts are never negative, so
  this moves no count away from its true value: the absolute error of every bin is at most
  what it was, and the interval ``count ± half_width`` still contains the true count whenever
  the unclamped one did (if ``c < 0 ≤ x ≤ c + h`` then ``0 − h ≤ x ≤ 0 + h``).
* ``integer``: whole counts by largest-remainder rounding: each count becomes its floor or its
  ceiling, and the counts' sum becomes the released sum rounded to the nearest whole number
  (dpstream has no public true total per timestep, so the total it preserves is the released
  one). Every count moves by less than 1, so the published half-width grows by 1. Whole
  counts (LPA without smoothing) are left as they are.
* ``kalman``: per bin, a random-walk state ``x_t = x_{t−1} + N(0, Q)`` observed at each fresh
  release as ``z_t = x_t + e_t`` with ``Var e_t = R_t`` taken from the release's own published
  interval (Laplace noise: ``b = h / ln(1/(1 − confidence))``, ``R = 2b²``); a republished
  timestep only predicts (the variance grows by ``Q``). ``Q = (q · k · n / bins)²`` with the
  declared population ``n``, the contribution bound ``k`` and ``q`` = :data:`PROCESS_SHARE`:
  the expected change of a bin per timestep as a share of its even share of the population.
  No interval is claimed for the filtered counts (the half-width becomes infinite, published
  ``null``).
* ``model`` / ``model-perbin``: a structural state-space filter (:mod:`histogram.statespace`):
  level × seasonal shape (the period found from the releases; one shape shared by all bins, or
  one per bin), the process variance chosen by the releases' likelihood from a bank of filters,
  a change detector on the innovations for level shifts, and with ``release.delay: k`` a
  fixed-lag smoother (the value for ``t`` uses the releases up to ``t + k``). No interval.
  ``model-trend``: ``model`` whose bank also holds level-and-slope filters, so a trend is
  followed between sparse fresh releases (:mod:`histogram.statespace`).
* ``ewma``: exponential smoothing of the fresh releases, ``s ← s + α(z − s)``, with α the
  steady-state gain of the same Kalman filter for the first fresh release's noise
  (``α = (−Q + sqrt(Q² + 4QR)) / (2R)``); republished timesteps keep ``s``. No interval.

The state the smoothers carry between timesteps (:class:`PostState`) is a function of earlier
releases and public parameters only. The service journals it with the engine state so a
restarted process publishes the same bytes (``docs/privacy.md`` §2.3.1).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from histogram.statespace import ModelFilter, ModelState, state_arrays, state_from_arrays

__all__ = [
    "POSTPROCESSORS",
    "STATEFUL",
    "PROCESS_SHARE",
    "MODELS",
    "PostProcessor",
    "PostState",
    "Processed",
    "parse_chain",
    "chain_text",
    "postprocess",
    "noise_variance",
]

#: Steps accepted in ``release.postprocess`` (``none`` is the empty chain).
POSTPROCESSORS: tuple[str, ...] = ("none", "nonnegative", "integer", "kalman", "ewma", "model", "model-perbin",
                                  "model-trend")

#: Steps that carry state from one timestep to the next (temporal smoothing).
STATEFUL: frozenset[str] = frozenset({"kalman", "ewma", "model", "model-perbin", "model-trend"})

#: The structural filters (:mod:`histogram.statespace`); only they take ``release.delay``.
MODELS: frozenset[str] = frozenset({"model", "model-perbin", "model-trend"})

#: ``q``: the smoothers' process sd per timestep as a share of a bin's even share of the
#: declared population (``docs/results.md`` "Temporal smoothing" says how it was chosen).
PROCESS_SHARE = 0.2

_STATE_VERSION = 1


def parse_chain(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"kalman+nonnegative"`` or ``["kalman", "nonnegative"]`` → ``("kalman", "nonnegative")``;
    ``"none"`` (or empty) → ``()``.

    Raises:
        ValueError: an unknown step, a step twice, ``none`` inside a chain, or two smoothers.
    """
    if value is None:
        return ()
    items = value.split("+") if isinstance(value, str) else [str(v) for v in value]
    names = [s.strip().lower() for s in items]
    if names in ([], [""], ["none"]):
        return ()
    unknown = [s for s in names if s not in POSTPROCESSORS or s == "none"]
    if unknown:
        raise ValueError(f"unknown post-processor {unknown[0]!r} in {'+'.join(names)!r}: chain steps with '+' "
                         f"from {', '.join(POSTPROCESSORS[1:])} (or write none)")
    if len(set(names)) != len(names):
        raise ValueError(f"post-processing chain {'+'.join(names)!r} lists a step twice")
    if len([s for s in names if s in STATEFUL]) > 1:
        raise ValueError(f"post-processing chain {'+'.join(names)!r} has two smoothers: choose one of "
                         f"{', '.join(sorted(STATEFUL))}")
    return tuple(names)


def chain_text(chain: Sequence[str]) -> str:
    """The canonical text of a chain (``none`` for the empty one)."""
    return "+".join(chain) if chain else "none"


def noise_variance(half_width: np.ndarray, confidence: float) -> np.ndarray:
    """Variance of Laplace noise whose ``confidence`` interval is ``± half_width`` (counts²).

    Public: a function of the published interval. An infinite width gives an infinite variance.
    """
    if not 0.0 < confidence < 1.0:
        return np.full(np.shape(half_width), np.inf)
    b = np.asarray(half_width, dtype=np.float64) / math.log(1.0 / (1.0 - confidence))
    return np.maximum(2.0 * b * b, 1e-12)


def postprocess(name: str, counts: np.ndarray) -> np.ndarray:
    """``counts`` after a chain of stateless steps (``none``, ``nonnegative``, ``integer``).

    Raises:
        ValueError: an unknown step, or a smoother (those need :class:`PostProcessor`).
    """
    arr = np.asarray(counts)
    chain = parse_chain(name)
    for step in chain:
        if step in STATEFUL:
            raise ValueError(f"{step} carries state from one timestep to the next: use PostProcessor")
        arr = _stateless(step, arr)
    return arr


def _stateless(step: str, arr: np.ndarray) -> np.ndarray:
    if step == "nonnegative":
        return np.maximum(arr, arr.dtype.type(0))
    if step == "integer":
        return _round_preserving_sum(arr)
    raise AssertionError(step)


def _round_preserving_sum(arr: np.ndarray) -> np.ndarray:
    """Largest-remainder rounding along the last axis: floor everything, then add 1 to the
    ``round(sum) − sum(floor)`` counts with the largest fractional parts (ties: lower bin first)."""
    if arr.dtype.kind in "iu":
        return arr
    x = np.asarray(arr, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError("integer rounding needs finite counts")
    low = np.floor(x)
    frac = x - low
    total = np.rint(x.sum(axis=-1, keepdims=True))
    extra = (total - low.sum(axis=-1, keepdims=True)).astype(np.int64)  # in [0, bins]
    order = np.argsort(-frac, axis=-1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(x.shape[-1]), axis=-1)
    return (low + (rank < extra)).astype(np.int64)


@dataclass(frozen=True)
class Processed:
    """Counts and half-widths after post-processing (what is published)."""

    counts: np.ndarray
    half_width: np.ndarray


@dataclass(frozen=True, eq=False)
class PostState:
    """A smoother's state after some timesteps (functions of releases and public parameters).

    Attributes:
        estimate: the filtered counts per bin (None before the first fresh release).
        variance: Kalman: the estimate's variance per bin; EWMA: the weight α (one value).
        model: the structural filter's state (:class:`histogram.statespace.ModelState`).
    """

    estimate: np.ndarray | None = None
    variance: np.ndarray | None = None
    model: ModelState | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PostState):
            return NotImplemented
        return (_same(self.estimate, other.estimate) and _same(self.variance, other.variance)
                and self.model == other.model)

    __hash__ = None  # type: ignore[assignment]


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def _encode(a: np.ndarray | None) -> str | None:
    if a is None:
        return None
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f8").tobytes()).decode("ascii")


def _decode(text: str | None, bins: int) -> np.ndarray | None:
    if text is None:
        return None
    a = np.frombuffer(base64.b64decode(text, validate=True), dtype="<f8").astype(np.float64)
    if a.size not in (1, bins):
        raise ValueError(f"post-processing state has {a.size} values, expected {bins}")
    return a


@dataclass(frozen=True)
class PostProcessor:
    """A chain of post-processing steps with its public parameters.

    Attributes:
        chain: the steps, applied left to right (:func:`parse_chain`).
        process_sd: ``sqrt(Q)`` of the smoothers, in counts per bin per timestep (public).
        delay: ``release.delay``: with a ``model`` step, :meth:`apply` at timestep ``t`` returns
            the published counts of timestep ``t − delay`` (fixed-lag smoothing); 0 otherwise.
    """

    chain: tuple[str, ...] = ()
    process_sd: float = 1.0
    delay: int = 0

    def __post_init__(self) -> None:
        parse_chain(self.chain)
        if self.delay and not any(s in MODELS for s in self.chain):
            raise ValueError(f"release.delay {self.delay} needs a model step in release.postprocess "
                             f"(model, model-perbin or model-trend: the fixed-lag smoother); got {self.text}")
        if self.delay:
            ModelFilter(delay=self.delay)  # range check
        if not (math.isfinite(self.process_sd) and self.process_sd > 0):
            raise ValueError(f"the smoothers' process sd must be a positive number of counts, got {self.process_sd}")

    @classmethod
    def for_stream(cls, chain: str | Iterable[str], *, population: int | None, bins: int,
                   contribution_bound: int = 1, share: float | None = None, delay: int = 0) -> PostProcessor:
        """The chain with ``process_sd = share · k · n / bins`` (all public; ``share`` defaults to
        :data:`PROCESS_SHARE`).

        Raises:
            ValueError: a smoother without a declared population.
        """
        steps = parse_chain(chain)
        if any(s in STATEFUL - MODELS for s in steps) and not population:
            raise ValueError(f"release.postprocess {chain_text(steps)} needs privacy.population (the declared, "
                             "public population sets how fast the smoother lets a count move); declare it")
        per_bin = contribution_bound * (population or bins) / max(1, bins)
        return cls(steps, max((PROCESS_SHARE if share is None else share) * per_bin, 1e-6), delay)

    @property
    def text(self) -> str:
        return chain_text(self.chain)

    @property
    def stateful(self) -> bool:
        return any(s in STATEFUL for s in self.chain)

    def initial(self) -> PostState:
        return PostState()

    def apply(self, state: PostState, counts: np.ndarray, half_width: np.ndarray, confidence: float,
              fresh: bool) -> tuple[Processed, PostState]:
        """Post-process one timestep's release. Pure: ``state`` is not modified.

        ``counts``/``half_width``: the engine's release (any leading axes, bins last: the lab
        passes all runs at once); ``fresh``: whether new noise was drawn for this timestep.
        With a :attr:`delay` ``k`` the result is timestep ``t − k``'s (the first ``k`` calls
        after the first fresh release return that release: the placeholder of timesteps before it).
        """
        arr = np.asarray(counts)
        width = np.broadcast_to(np.asarray(half_width, dtype=np.float64), arr.shape)
        for step in self.chain:
            if step == "nonnegative":
                arr = _stateless(step, arr)
            elif step == "integer":
                rounded = _round_preserving_sum(arr)
                if rounded is not arr:
                    width = width + 1.0
                arr = rounded
            else:
                arr, state = self._smooth(step, state, arr, width, confidence, fresh)
                width = np.broadcast_to(np.float64(np.inf), arr.shape)
        return Processed(arr, width), state

    def _smooth(self, step: str, state: PostState, z: np.ndarray, width: np.ndarray, confidence: float,
                fresh: bool) -> tuple[np.ndarray, PostState]:
        z = np.asarray(z, dtype=np.float64)
        if step in MODELS:
            return self._model(step, state, z, width, confidence, fresh)
        q = self.process_sd ** 2
        if state.estimate is None:
            if not fresh:
                return z, state  # the placeholder before the first fresh release passes through
            r = noise_variance(width, confidence)
            if step == "ewma":
                alpha = np.asarray([_steady_gain(q, float(np.mean(r)))])
                return z.copy(), PostState(z.copy(), alpha)
            return z.copy(), PostState(z.copy(), r.copy())
        x = state.estimate
        assert state.variance is not None
        if step == "ewma":
            if fresh:
                x = x + state.variance[0] * (z - x)
            return x.copy(), PostState(x, state.variance)
        p = state.variance + q  # predict
        if fresh:
            r = noise_variance(width, confidence)
            gain = p / (p + r)
            x = x + gain * (z - x)
            p = (1.0 - gain) * p
        return x.copy(), PostState(x, p)

    def _model(self, step: str, state: PostState, z: np.ndarray, width: np.ndarray, confidence: float,
               fresh: bool) -> tuple[np.ndarray, PostState]:
        filt = ModelFilter(shared=step != "model-perbin", delay=self.delay, trend=step == "model-trend")
        shape = z.shape
        rows = z.reshape(-1, shape[-1])
        if state.model is None:
            if not fresh:
                return z, state
            out, model = filt.start(rows, noise_variance(width, confidence).reshape(rows.shape))
        else:
            r = noise_variance(width, confidence).reshape(rows.shape) if fresh else np.zeros(rows.shape)
            out, model = filt.step(state.model, rows, r, fresh)
        return out.reshape(shape), PostState(model=model)

    def pending(self, state: PostState, shape: tuple[int, ...]) -> np.ndarray | None:
        """With a delay ``k``: the counts (``k`` first, then ``shape``: the releases' shape) of the
        last ``k`` timesteps not yet published, smoothed with the releases there are (the end of a
        finite stream); None without a delay or before the first fresh release."""
        if not self.delay or state.model is None:
            return None
        step = next(s for s in self.chain if s in MODELS)
        out = ModelFilter(shared=step != "model-perbin", delay=self.delay, trend=step == "model-trend").pending(state.model)
        return np.moveaxis(out, -1, 0).reshape((self.delay, *shape))

    # -- snapshots --------------------------------------------------------------
    def state_to_json(self, state: PostState) -> dict[str, Any]:
        """JSON-ready, exact (the float64 bytes, base64) so a restored filter continues bit for bit."""
        out: dict[str, Any] = {"version": _STATE_VERSION, "chain": self.text, "estimate": _encode(state.estimate),
                               "variance": _encode(state.variance)}
        if state.model is not None:
            out["model"] = {k: {"shape": list(v.shape), "data": _encode(v)} for k, v in state_arrays(state.model).items()}
        return out

    def state_from_json(self, data: Mapping[str, Any], bins: int) -> PostState:
        """Rebuild :meth:`state_to_json`'s state.

        Raises:
            ValueError: another version or chain, or values of the wrong size.
        """
        if not isinstance(data, Mapping) or data.get("version") != _STATE_VERSION:
            raise ValueError("unsupported post-processing state")
        if data.get("chain") != self.text:
            raise ValueError(f"post-processing state is for {data.get('chain')!r}, this stream runs {self.text!r}")
        if any(s in MODELS for s in self.chain):
            model = data.get("model")
            if model is None:
                return PostState()
            try:
                arrays = {k: np.frombuffer(base64.b64decode(v["data"], validate=True), dtype="<f8")
                          .astype(np.float64).reshape(v["shape"]) for k, v in model.items()}
                return PostState(model=state_from_arrays(arrays))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise ValueError(f"post-processing model state is broken: {exc}") from None
        est = _decode(data.get("estimate"), bins)
        var = _decode(data.get("variance"), bins)
        if (est is None) != (var is None) or (est is not None and est.size != bins):
            raise ValueError("post-processing state is incomplete")
        return PostState(est, var)


def _steady_gain(q: float, r: float) -> float:
    """Steady-state gain of a random-walk Kalman filter observed every timestep (``K²/(1−K) = Q/R``)."""
    if not math.isfinite(r) or r <= 0:
        return 1.0
    return (-q + math.sqrt(q * q + 4.0 * q * r)) / (2.0 * r)
