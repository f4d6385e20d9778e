"""Release and domain messages: pydantic models, canonical bytes, JSON Schemas.

Every timestep publishes one :class:`ReleaseMessage`; a stream publishes its
:class:`DomainMessage` (what each count position means) once. Both are
written as canonical JSON — sorted keys, no spaces, ASCII, no NaN — so the
same release is the same bytes in any process (the service re-sends a
journaled release byte for byte; replay and service agree bit for bit).

Number formatting (deterministic):

* LPA counts are integers; PSD counts are floats rounded to 6 decimals
  (``numpy.round``; ``-0.0`` is written ``0.0``).
* ``accuracy.half_width`` is one number when every bin has the same width,
  else a list in bin order; an infinite width (the all-zero placeholder
  before the first fresh release; PeGaSus's group means and FAST_w's
  filtered counts, which claim no interval) is ``null``. Rounded to 6 decimals.
* ε values are given twice: a float for convenience and the exact fraction
  as a string (``"1/3"``); budget checks use the exact one.

A stream whose ``release.mechanism`` is ``copula`` or ``marginals`` publishes a
:class:`ModelReleaseMessage` (``message_type: "model-release"``, its own
versioned schema ``model-release.schema.json``) for every timestep instead:
released marginal tables, the copula correlation matrix, optionally a synthetic
sample. Histogram consumers tell the two apart by ``message_type`` (a model
release never validates against ``release.schema.json``).

``release_id`` = hex SHA-256 of ``"dpstream-release-v1\\0{stream}\\0{index}\\0{fingerprint}"``:
the same timestep of the same configuration always has the same id, so
consumers can drop duplicates by id.

The committed schemas ``stream/schemas/release.schema.json`` and
``domain.schema.json`` are ``model_json_schema()`` of these models; run
``python -m stream.messages --write`` after changing a model (a test fails
on drift).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, model_validator

from controller.step import Release
from histogram.declared import answer_counts, discrete_laplace_variance, sum_half_width
from histogram.lpa import LaplaceMechanism
from histogram.postprocess import Processed

__all__ = [
    "SCHEMA_VERSION",
    "SCHEMA_DIR",
    "ReleaseMessage",
    "LagInfo",
    "ModelReleaseMessage",
    "DomainMessage",
    "MessageBuilder",
    "canonical_bytes",
    "release_id",
    "isoformat",
    "schemas",
    "write_schemas",
    "parse_message",
    "parse_release",
]

SCHEMA_VERSION = 1
#: release messages that say ``method.postprocess`` carry schema version 2 (a superset of 1)
SCHEMA_VERSION_POSTPROCESS = 2
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
DECIMALS = 6
_HEX64 = r"^[0-9a-f]{64}$"
_FRACTION = r"^-?[0-9]+(/[0-9]+)?$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimestepInfo(_Model):
    """Which timestep this is: its 0-based index and its event-time bounds ``[start, end)``."""

    index: int = Field(ge=0)
    start: str = Field(json_schema_extra={"format": "date-time"})
    end: str = Field(json_schema_extra={"format": "date-time"})


class MethodInfo(_Model):
    """How the release was made.

    ``postprocess`` (schema version 2): the post-processing steps applied to the released counts,
    in order (``release.postprocess``: nonnegative, integer, kalman, ewma, model, model-perbin, model-trend;
    ``docs/privacy.md``
    §2.3.1); absent when the counts are published as the mechanism drew them (version 1).
    """

    decision: str
    mechanism: Literal["lpa", "psd"]
    unit: Literal["user-level", "w-event"]
    postprocess: list[Literal["nonnegative", "integer", "kalman", "ewma", "model", "model-perbin",
                              "model-trend"]] | None = Field(
        default=None, description="post-processing applied to the counts, in order (schema version 2); "
                                  "absent: none")


class Accuracy(_Model):
    """Accuracy of the counts.

    With probability ``confidence`` over the noise of the fresh release the
    counts come from (``source_timestep``), the true count of bin ``b`` *of
    that timestep* lies within ``counts[b] ± half_width[b]``. A republished
    count says nothing about change since then. ``epsilon`` is the ε that
    fresh release cost. Before any fresh release the counts are an all-zero
    placeholder: ``half_width`` null, ``confidence`` 0, ``source_timestep``
    null. After post-processing (``method.postprocess``) the width is the
    post-processed counts' own: unchanged by ``nonnegative``, one more after
    ``integer``, null (no interval claimed) after a smoother (``kalman``, ``ewma``, ``model``),
    whose counts combine every release up to ``source_timestep``.
    """

    confidence: float = Field(ge=0, lt=1)
    half_width: float | None | list[float | None]
    source_timestep: int | None = Field(ge=0)
    epsilon: float = Field(ge=0)
    epsilon_exact: str = Field(pattern=_FRACTION)


class QueryAnswerInfo(_Model):
    """One declared query's answer (``queries:`` in the configuration; issue 33), from this release.

    ``value`` is the released counts summed over the query's bins (or the released model's
    estimate): post-processing, no privacy cost. With probability ``accuracy.confidence`` over the
    noise of the fresh release it comes from, the true answer *of that timestep* lies within
    ``value ± half_width`` (a valid bound, ``histogram.declared.sum_half_width``); ``variance`` is
    the answer's noise variance (counts²). Both are null when no interval is claimed (before the
    first fresh release; PSD, model releases, post-processed counts).
    """

    name: str
    value: float
    half_width: float | None = Field(ge=0)
    variance: float | None = Field(ge=0)
    bins: int = Field(ge=1, description="histogram bins the query sums")


class LagInfo(_Model):
    """``release.delay: k``: this timestep was published ``k`` timesteps late, its counts smoothed
    (the fixed-lag smoother of a ``model`` step) with the releases up to ``smoothed_through``.

    Post-processing of releases only (``docs/privacy.md`` §2.3.1): no ε, no data read.
    """

    delay: int = Field(ge=1, description="release.delay: timesteps between this timestep and its publication")
    smoothed_through: int = Field(
        ge=0, description="the last timestep whose release the counts were smoothed with (index + delay, or "
                          "the stream's last timestep for the ones flushed at its end)")


class PrivateAlertInfo(_Model):
    """One private threshold alert's outcome at this timestep (``queries[].private``; issue 33).

    A sparse-vector test of the query's true answer against the public threshold, run at the
    timesteps the decision republishes (``docs/privacy.md`` §14.1): ``fired`` is its noisy answer,
    ``positives`` how many it gave so far (it stops testing at ``max_alerts``). ``charged_exact``
    is the ε charged for it at this timestep (its whole ``epsilon_exact``, once, at timestep 0).
    """

    name: str
    tested: bool
    fired: bool
    positives: int = Field(ge=0)
    max_alerts: int = Field(ge=1)
    charged_exact: str = Field(pattern=_FRACTION)
    epsilon_exact: str = Field(pattern=_FRACTION)


class PersonalTier(_Model):
    """One budget tier of a personalized stream (``privacy.personal``): its declared ε and its ledger."""

    tier: str = Field(description="tier name; 'default' is everyone without a declared budget")
    epsilon: float = Field(gt=0, description="the tier's declared budget (per person)")
    epsilon_exact: str = Field(pattern=_FRACTION)
    part: int | None = Field(ge=0, description="the part (sub-release) its persons are counted in; null: not released")
    charge_exact: str = Field(
        pattern=_FRACTION, description="ε a person of this tier is charged when its part spends its whole ε")
    spent_exact: str = Field(
        pattern=_FRACTION, description="the tier's ledger: ε charged to each of its persons since the stream began")
    window_spent_exact: str | None = Field(
        pattern=_FRACTION, description="w-event: the tier's ε in the window ending here (<= epsilon); else null")


class PersonalPart(_Model):
    """One sub-release of the PDP plan (a DP histogram of its tiers' persons; counts in bin order)."""

    epsilon: float = Field(gt=0)
    epsilon_exact: str = Field(pattern=_FRACTION, description="the part's budget (user-level total or per window)")
    sampled_below_exact: str | None = Field(
        pattern=_FRACTION, description="Sampling: persons below this ε are kept with probability (e^ε−1)/(e^t−1)")
    weight: float = Field(ge=0, le=1)
    kind: Literal["fresh", "republished"]
    source_timestep: int | None = Field(ge=0)
    counts: list[StrictInt] | list[StrictFloat]


class PersonalInfo(_Model):
    """Personalized DP (``privacy.personal``): the tiers' ε as published and the parts released.

    Versioned on its own (``version``); absent from the messages of streams with one budget, so
    their bytes and schema are unchanged.
    """

    version: Literal[1] = 1
    mechanism: Literal["minimum", "threshold", "sampling", "privacy-aware", "utility-based"]
    tiers: list[PersonalTier]
    parts: list[PersonalPart]


class ReleaseMessage(_Model):
    """One timestep's release (the value of one record on the output topic; key = stream id)."""

    message_type: Literal["release"] = "release"
    schema_version: Literal[1, 2] = Field(
        default=SCHEMA_VERSION, description="1; 2 when method.postprocess is present (the only change)")
    stream: str
    release_id: str = Field(pattern=_HEX64)
    timestep: TimestepInfo
    kind: Literal["fresh", "republished"]
    method: MethodInfo
    counts: list[StrictInt] | list[StrictFloat] = Field(
        description="released counts in bin order (see the domain message); integers for LPA"
    )
    accuracy: Accuracy
    epsilon_spent: float = Field(ge=0, description="ε charged since the stream began")
    epsilon_spent_exact: str = Field(pattern=_FRACTION)
    epsilon_budget_exact: str = Field(
        pattern=_FRACTION, description="user-level: the total budget; w-event: the budget of every window"
    )
    window_epsilon_spent: float | None = Field(
        ge=0, description="w-event: ε charged in the window of w timesteps ending here; else null"
    )
    window_epsilon_spent_exact: str | None = Field(pattern=_FRACTION)
    fresh_releases: int = Field(ge=0, description="fresh releases so far, this one included")
    config_fingerprint: str = Field(pattern=_HEX64)
    details: dict[str, Any] | None = Field(
        default=None, description="mechanism extras of a fresh release (PSD: the released tree); absent otherwise"
    )
    personal: PersonalInfo | None = Field(
        default=None, description="privacy.personal streams: per-tier budgets and ledgers, the parts; absent otherwise"
    )
    queries: list[QueryAnswerInfo] | None = Field(
        default=None, description="declared queries' answers (configuration queries:); absent when none is declared")
    private_alerts: list[PrivateAlertInfo] | None = Field(
        default=None, description="private threshold alerts' outcomes (queries[].private); absent without them")
    lag: LagInfo | None = Field(
        default=None, description="release.delay streams: the publication delay and how far the smoothing looked "
                                  "ahead; absent without a delay")

    @model_validator(mode="after")
    def _version(self) -> ReleaseMessage:
        if (self.method.postprocess is not None) != (self.schema_version == SCHEMA_VERSION_POSTPROCESS):
            raise ValueError("schema_version 2 goes with method.postprocess, and only with it")
        return self

    def to_bytes(self) -> bytes:
        """Canonical JSON (the counts are formatted exactly as ``json.dumps`` would, but vectorised)."""
        return _release_bytes(self, _counts_text(self.counts))


class ModelMethodInfo(_Model):
    """How a model release was made."""

    decision: str
    mechanism: Literal["copula", "marginals"]
    unit: Literal["user-level", "w-event"]


class MarginalTable(_Model):
    """One released marginal table: counts over ``attributes``, row-major over ``shape``.

    ``attributes`` are attribute names of the domain message, in increasing domain order; level
    ``v`` of an attribute is its ``v``-th value (categorical) or bin (numeric).
    """

    attributes: list[str] = Field(min_length=1)
    shape: list[int]
    counts: list[StrictInt] | list[StrictFloat] = Field(
        description="noisy counts, row-major over shape; integers unless made consistent (6 decimals)")


class SyntheticSample(_Model):
    """Synthetic records drawn from the released model (post-processing): one level index per attribute."""

    attributes: list[str]
    records: list[list[int]]


class ModelInfo(_Model):
    """The released model.

    ``gaussian-copula`` (DPCopula): one-way tables of every attribute (and, with
    ``release.copula.decision_space: pairwise``, the released model's two-way tables: computed
    from the release, no interval claimed) and the latent normal's ``correlation`` matrix (rows and columns in domain attribute order; symmetric, positive
    definite, unit diagonal) with the estimator that produced it. ``kway-marginals``: every table
    of 1..``max_order`` attributes; ``correlation`` null. ``total`` is the DP estimate of the
    number of records. ``synthetic`` (null unless configured) is a sample from the model.
    """

    kind: Literal["gaussian-copula", "kway-marginals"]
    correlation_estimator: Literal["kendall", "mle", "median"] | None
    max_order: int = Field(ge=1)
    consistent: bool
    marginals: list[MarginalTable]
    correlation: list[list[float]] | None
    total: float = Field(ge=0)
    synthetic: SyntheticSample | None


class ModelReleaseMessage(_Model):
    """One timestep's model release (``release.mechanism`` copula | marginals; key = stream id).

    Every field but ``model`` and ``method.mechanism`` means what it means in a release message.
    ``accuracy`` refers to the marginal tables' counts, concatenated in ``model.marginals``
    order (``half_width`` one number, a list in that order, or null when no interval is claimed).
    A republished timestep repeats the last fresh model.
    """

    message_type: Literal["model-release"] = "model-release"
    schema_version: Literal[1] = SCHEMA_VERSION
    stream: str
    release_id: str = Field(pattern=_HEX64)
    timestep: TimestepInfo
    kind: Literal["fresh", "republished"]
    method: ModelMethodInfo
    model: ModelInfo
    accuracy: Accuracy
    epsilon_spent: float = Field(ge=0, description="ε charged since the stream began")
    epsilon_spent_exact: str = Field(pattern=_FRACTION)
    epsilon_budget_exact: str = Field(
        pattern=_FRACTION, description="user-level: the total budget; w-event: the budget of every window"
    )
    window_epsilon_spent: float | None = Field(
        ge=0, description="w-event: ε charged in the window of w timesteps ending here; else null"
    )
    window_epsilon_spent_exact: str | None = Field(pattern=_FRACTION)
    fresh_releases: int = Field(ge=0, description="fresh releases so far, this one included")
    config_fingerprint: str = Field(pattern=_HEX64)
    queries: list[QueryAnswerInfo] | None = Field(
        default=None, description="declared queries' answers (configuration queries:); absent when none is declared")

    def to_bytes(self) -> bytes:
        return canonical_bytes(_dump(self))


class CategoricalAttributeInfo(_Model):
    name: str
    kind: Literal["categorical"]
    values: list[str]


class NumericAttributeInfo(_Model):
    name: str
    kind: Literal["numeric"]
    min: float
    max: float
    bins: int = Field(ge=1)
    out_of_range: Literal["clip", "reject"]


class DomainInfo(_Model):
    """The bins: counts are in row-major order over ``shape`` (the last attribute varies fastest)."""

    attributes: list[CategoricalAttributeInfo | NumericAttributeInfo]
    shape: list[int]
    size: int = Field(ge=1)
    order: Literal["row-major"]


class GridInfo(_Model):
    """The timestep grid: timestep ``i`` covers ``[first_start + i·timestep, first_start + (i+1)·timestep)``."""

    origin: str = Field(json_schema_extra={"format": "date-time"})
    timestep_seconds: float = Field(gt=0)
    start: str | None = Field(json_schema_extra={"format": "date-time"})


class DomainMessage(_Model):
    """What the counts of a stream mean; published once per stream (and on request).

    ``config`` is exactly the privacy-relevant configuration whose canonical
    JSON hashes to ``config_fingerprint`` (SHA-256), so a consumer can check it.
    """

    message_type: Literal["domain"] = "domain"
    schema_version: Literal[1] = SCHEMA_VERSION
    stream: str
    config_fingerprint: str = Field(pattern=_HEX64)
    bins: int = Field(ge=1)
    domain: DomainInfo
    grid: GridInfo
    config: dict[str, Any]

    def to_bytes(self) -> bytes:
        return canonical_bytes(_dump(self))


# ---------------------------------------------------------------------------
# Canonical form


def canonical_bytes(obj: Any) -> bytes:
    """Sorted keys, compact separators, ASCII, NaN refused."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def _dump(model: BaseModel) -> dict[str, Any]:
    data = model.model_dump(mode="json")
    for optional in ("details", "personal", "queries", "private_alerts", "lag"):
        if data.get(optional, 0) is None:
            del data[optional]
    return data


_SENTINEL = "\u0000counts\u0000"
_SENTINEL_JSON = json.dumps(_SENTINEL).encode()


def _release_bytes(message: ReleaseMessage, counts_text: bytes) -> bytes:
    data = message.model_dump(mode="json", exclude={"counts"})
    for optional in ("details", "personal", "queries", "private_alerts"):
        if data.get(optional, 0) is None:
            del data[optional]
    if data["method"].get("postprocess", 0) is None:  # version-1 messages stay byte for byte as they were
        del data["method"]["postprocess"]
    data["counts"] = _SENTINEL
    head, sep, tail = canonical_bytes(data).partition(_SENTINEL_JSON)
    assert sep, "internal error: counts placeholder missing"
    return head + b"[" + counts_text + b"]" + tail


def format_ints(values: np.ndarray) -> bytes:
    """``",".join(str(v) for v in values)`` as ASCII bytes, vectorised (int64 values)."""
    a = np.asarray(values, dtype=np.int64)
    n = a.size
    if n == 0:
        return b""
    neg = a < 0
    mag = np.abs(a).astype(np.uint64)
    mag[a == np.iinfo(np.int64).min] = np.uint64(2**63)
    ndig = np.ones(n, dtype=np.int64)
    p = 10
    while p <= 10**19:
        more = mag >= np.uint64(p)
        if not more.any():
            break
        ndig += more
        p *= 10
    lengths = ndig + neg + 1
    ends = np.cumsum(lengths)
    out = np.empty(int(ends[-1]) - 1, dtype=np.uint8)
    out[ends[:-1] - 1] = ord(",")
    out[(ends - lengths)[neg]] = ord("-")
    last = ends - 2  # position of each number's last digit
    x = mag.copy()
    for d in range(int(ndig.max())):
        digits = (x % np.uint64(10)).astype(np.uint8) + np.uint8(48)
        if d == 0:
            out[last] = digits
        else:
            sel = ndig > d
            out[last[sel] - d] = digits[sel]
        x //= np.uint64(10)
    return out.tobytes()


def _counts_text(counts: Any) -> bytes:
    """The JSON text of a counts list (without brackets), identical to ``json.dumps``'s."""
    if isinstance(counts, np.ndarray):
        if counts.dtype.kind in "iu":
            return format_ints(counts)
        return ",".join(map(repr, counts.tolist())).encode("ascii")
    if counts and isinstance(counts[0], int):
        return format_ints(np.asarray(counts, dtype=np.int64))
    return ",".join(map(repr, counts)).encode("ascii")


def release_id(stream: str, index: int, fingerprint: str) -> str:
    return hashlib.sha256(f"dpstream-release-v1\x00{stream}\x00{int(index)}\x00{fingerprint}".encode()).hexdigest()


def isoformat(dt: datetime) -> str:
    """ISO-8601 in UTC with a ``Z`` (microseconds only when non-zero)."""
    text = dt.astimezone(UTC).replace(tzinfo=None).isoformat()
    return text + "Z"


def _rounded(values: np.ndarray) -> list[float]:
    return (np.round(np.asarray(values, dtype=np.float64), DECIMALS) + 0.0).tolist()


def _count_array(counts: np.ndarray) -> np.ndarray:
    """Released counts as int64, or float64 rounded to 6 decimals (``-0.0`` → ``0.0``)."""
    arr = np.asarray(counts)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if not np.all(np.isfinite(arr)):
        raise ValueError("released counts must be finite")
    return np.round(arr.astype(np.float64), DECIMALS) + 0.0


def _half_width(width: np.ndarray) -> float | None | list[float | None]:
    w = np.asarray(width, dtype=np.float64)
    if w.size == 0:
        return []
    first = w.flat[0]
    if np.all(w == first):
        return None if np.isinf(first) else _rounded(np.asarray([first]))[0]
    finite = np.isfinite(w)
    out: list[float | None] = _rounded(np.where(finite, w, 0.0))
    if not finite.all():
        for i in np.flatnonzero(~finite).tolist():
            out[i] = None
    return out


def _frac(x: Fraction) -> str:
    return str(Fraction(x))


def _jsonable(obj: Any) -> Any:
    """Make mechanism details JSON-ready (numpy → lists, Fractions → strings)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Fraction):
        return str(obj)
    return obj


class MessageBuilder:
    """Builds the messages of one stream (from its settings, once)."""

    def __init__(self, settings: Any) -> None:
        self.stream = settings.stream.id
        self.fingerprint = settings.fingerprint()
        self.post = settings.postprocessor()
        self.view = getattr(settings.mechanism(), "view", None)  # set for a model release
        common = dict(decision=settings.release.decision, mechanism=settings.release.mechanism,
                      unit=settings.privacy.unit)
        # a model release is published as released (the settings refuse release.postprocess with it)
        self.method = (MethodInfo(**common, postprocess=list(self.post.chain) or None) if self.view is None
                       else ModelMethodInfo(**common))
        self.schema_version = SCHEMA_VERSION_POSTPROCESS if self.post.chain else SCHEMA_VERSION
        self.names = [a.name for a in settings.domain().attributes]
        self.budget = _frac(settings.privacy.epsilon)
        self._settings = settings
        self.queries = settings.declared_queries()
        mechanism = settings.mechanism()
        #: the public sensitivity when every bin carries independent discrete Laplace noise as drawn
        #: (LPA without post-processing): the declared queries' intervals need it; else None
        self._lpa_sensitivity = (mechanism.sensitivity if isinstance(mechanism, LaplaceMechanism)
                                 and not self.post.chain and self.view is None else None)

    def query_answers(self, release: Release, counts: np.ndarray | None = None,
                      message: BaseModel | None = None) -> list[QueryAnswerInfo] | None:
        """The declared queries' answers of one release: from its (published) ``counts``, or from the
        model-release ``message``; None when no query is declared (the message then has no field)."""
        if not self.queries:
            return None
        if counts is None:
            from stream.answers import answerer  # the model answerers read the message

            levels = self.queries[0].shape
            ans = answerer(message.model_dump(mode="json"), levels, self.names)  # type: ignore[union-attr]
            values = [sum(float(ans.box(lo, hi).value) for lo, hi in q.boxes()) for q in self.queries]
        else:
            values = [answer_counts(counts, q) for q in self.queries]
        scale = None
        if self._lpa_sensitivity is not None and release.source_timestep is not None and release.epsilon_release > 0:
            scale = Fraction(self._lpa_sensitivity) / Fraction(release.epsilon_release)
        out = []
        for q, v in zip(self.queries, values, strict=True):
            hw = var = None
            if scale is not None:
                hw = _rounded(np.asarray([sum_half_width(scale, q.bins, float(release.confidence))]))[0]
                var = _rounded(np.asarray([q.bins * discrete_laplace_variance(scale)]))[0]
            out.append(QueryAnswerInfo(name=q.name, value=_rounded(np.asarray([v]))[0], half_width=hw,
                                       variance=var, bins=q.bins))
        return out

    def release(self, release: Release, start: datetime, end: datetime,
                processed: Processed | None = None) -> ReleaseMessage:
        """The message of one engine release of the timestep ``[start, end)``."""
        return self.release_with_bytes(release, start, end, processed)[0]

    def release_with_bytes(self, release: Release, start: datetime, end: datetime,
                           processed: Processed | None = None) -> tuple[ReleaseMessage, bytes]:
        """The message and its canonical bytes (the counts are formatted once, vectorised).

        ``processed``: the release after ``release.postprocess`` (the pipeline applies it, as the
        smoothers carry state); None applies a stateless chain here. A model release
        (``release.mechanism`` copula or marginals) is published as released.

        Raises:
            ValueError: ``processed`` is missing for a smoothing chain.
        """
        if self.view is not None:
            model_message = self._model_release(release, start, end)
            if self.queries:
                model_message = model_message.model_copy(
                    update={"queries": self.query_answers(release, message=model_message)})
            return model_message, model_message.to_bytes()  # type: ignore[return-value]
        if processed is None:
            if self.post.stateful:
                raise ValueError(f"release.postprocess {self.post.text} carries state: pass the processed release")
            processed, _ = self.post.apply(self.post.initial(), release.counts, release.half_width,
                                           release.confidence, release.kind == "fresh")
        counts = _count_array(processed.counts)
        head = self._validated(release, start, end, processed.half_width)
        message = head.model_copy(update={"counts": counts.tolist(),
                                          "queries": self.query_answers(release, counts)})
        return message, _release_bytes(message, _counts_text(counts))

    def delayed(self, head: ReleaseMessage, processed: Processed, through: int) -> tuple[ReleaseMessage, bytes]:
        """``release.delay``: the message of ``head``'s timestep (built when it was released), its
        counts the fixed-lag smoother's (``processed``, smoothed with the releases up to ``through``)."""
        counts = _count_array(processed.counts)
        message = head.model_copy(update={
            "counts": counts.tolist(),
            "accuracy": head.accuracy.model_copy(update={"half_width": _half_width(processed.half_width)}),
            "queries": None if head.queries is None else self._requery(head, counts),
            "lag": LagInfo(delay=self.post.delay, smoothed_through=through)})
        return message, _release_bytes(message, _counts_text(counts))

    def _requery(self, head: ReleaseMessage, counts: np.ndarray) -> list[QueryAnswerInfo]:
        """``head``'s query answers with their values from the smoothed ``counts`` (the intervals as
        the release at its own timestep stated them, as an undelayed smoothing chain does)."""
        assert head.queries is not None
        values = [answer_counts(counts, q) for q in self.queries]
        return [a.model_copy(update={"value": _rounded(np.asarray([v]))[0]})
                for a, v in zip(head.queries, values, strict=True)]

    def _validated(self, release: Release, start: datetime, end: datetime,
                   half_width: np.ndarray) -> ReleaseMessage:
        """Everything but the counts, validated by the model (the counts come from our own array)."""
        window = release.window_spend
        details = _jsonable(release.details) if release.details else None
        return ReleaseMessage(
            stream=self.stream,
            schema_version=self.schema_version,
            release_id=release_id(self.stream, release.timestep, self.fingerprint),
            timestep=TimestepInfo(index=release.timestep, start=isoformat(start), end=isoformat(end)),
            kind=release.kind,
            method=self.method,
            counts=[],
            accuracy=Accuracy(
                confidence=float(release.confidence),
                half_width=_half_width(half_width),
                source_timestep=release.source_timestep,
                epsilon=float(release.epsilon_release),
                epsilon_exact=_frac(release.epsilon_release),
            ),
            epsilon_spent=float(release.epsilon_spent),
            epsilon_spent_exact=_frac(release.epsilon_spent),
            epsilon_budget_exact=self.budget,
            window_epsilon_spent=None if window is None else float(window),
            window_epsilon_spent_exact=None if window is None else _frac(window),
            fresh_releases=release.fresh_count,
            config_fingerprint=self.fingerprint,
            details=details,
            personal=None if not getattr(release, "personal", None) else PersonalInfo.model_validate(release.personal),
            private_alerts=[PrivateAlertInfo.model_validate(o) for o in getattr(release, "private_alerts", ())] or None,
        )

    def _model_release(self, release: Release, start: datetime, end: datetime) -> ModelReleaseMessage:
        """The model-release message of one engine release (``release.model`` and the view's tables)."""
        view = self.view
        counts = _count_array(release.counts)
        model = release.model or {}
        tables = [MarginalTable(attributes=[self.names[a] for a in sub], shape=list(view.shape(sub)),
                                counts=t.ravel().tolist())
                  for sub, t in zip(view.subsets, view.split(counts), strict=True)]
        synthetic = model.get("synthetic")
        window = release.window_spend
        copula = model.get("kind", "gaussian-copula" if self.method.mechanism == "copula" else "kway-marginals")
        return ModelReleaseMessage(
            stream=self.stream,
            release_id=release_id(self.stream, release.timestep, self.fingerprint),
            timestep=TimestepInfo(index=release.timestep, start=isoformat(start), end=isoformat(end)),
            kind=release.kind,
            method=self.method,
            model=ModelInfo(
                kind=copula,
                correlation_estimator=model.get("correlation_estimator"),
                max_order=max(len(sub) for sub in view.subsets),
                consistent=bool(model.get("consistent", False)),
                marginals=tables,
                # the placeholder before any fresh release: independence (identity), nothing known
                correlation=model.get("correlation", np.eye(len(self.names)).tolist() if copula == "gaussian-copula"
                                      else None),
                total=float(model.get("total", 0.0)),
                synthetic=None if synthetic is None else SyntheticSample(attributes=self.names, records=synthetic),
            ),
            accuracy=Accuracy(
                confidence=float(release.confidence),
                half_width=_half_width(release.half_width),
                source_timestep=release.source_timestep,
                epsilon=float(release.epsilon_release),
                epsilon_exact=_frac(release.epsilon_release),
            ),
            epsilon_spent=float(release.epsilon_spent),
            epsilon_spent_exact=_frac(release.epsilon_spent),
            epsilon_budget_exact=self.budget,
            window_epsilon_spent=None if window is None else float(window),
            window_epsilon_spent_exact=None if window is None else _frac(window),
            fresh_releases=release.fresh_count,
            config_fingerprint=self.fingerprint,
        )

    def domain(self) -> DomainMessage:
        s = self._settings
        view = s.privacy_view()
        return DomainMessage(
            stream=self.stream,
            config_fingerprint=self.fingerprint,
            bins=s.domain().size,
            domain=DomainInfo.model_validate(s.domain().describe()),
            grid=GridInfo(
                origin=isoformat(s.stream.origin),
                timestep_seconds=s.stream.timestep.total_seconds(),
                start=None if s.stream.start is None else isoformat(s.stream.start),
            ),
            config=json.loads(json.dumps(view)),
        )


def parse_message(data: bytes | str) -> ReleaseMessage | ModelReleaseMessage | DomainMessage:
    """Parse one message (any type) from its JSON bytes."""
    doc = json.loads(data)
    if isinstance(doc, dict) and doc.get("message_type") == "domain":
        return DomainMessage.model_validate(doc)
    if isinstance(doc, dict) and doc.get("message_type") == "model-release":
        return ModelReleaseMessage.model_validate(doc)
    return ReleaseMessage.model_validate(doc)


def parse_release(data: bytes | str) -> ReleaseMessage | ModelReleaseMessage:
    """Parse a timestep's release message (histogram or model) from its JSON bytes."""
    doc = json.loads(data)
    if isinstance(doc, dict) and doc.get("message_type") == "model-release":
        return ModelReleaseMessage.model_validate(doc)
    return ReleaseMessage.model_validate(doc)


def schemas() -> dict[str, dict[str, Any]]:
    """File name → JSON Schema of every message model."""
    return {
        "release.schema.json": ReleaseMessage.model_json_schema(),
        "domain.schema.json": DomainMessage.model_json_schema(),
        "model-release.schema.json": ModelReleaseMessage.model_json_schema(),
    }


def schema_text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def write_schemas(directory: Path = SCHEMA_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name, schema in schemas().items():
        path = directory / name
        path.write_text(schema_text(schema))
        out.append(path)
    return out


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stream.messages", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write the schemas into {SCHEMA_DIR}")
    args = parser.parse_args(argv)
    if args.write:
        for p in write_schemas():
            print(p)
    else:
        for name, schema in schemas().items():
            print(f"# {name}\n{schema_text(schema)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
