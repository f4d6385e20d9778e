"""The one step function every decision method plugs into.

``Engine.step(state, counts, noise)`` takes the true histogram of the next
timestep and the engine state, and returns the timestep's :class:`Release`
(fresh or republished) and the new state. It is pure: the input state is not
changed, so a caller can persist the new state and the release together
before anything becomes visible, and a crash before that leaves the old state
intact.

Order inside a step (privacy invariants I4/I5):

1. the policy decides; any ε it needs (SVT instance, dissimilarity test) is
   charged on a working copy of the accountant *before* its noise is drawn;
2. for a fresh release the publication ε is charged, then the mechanism draws
   the release noise; a policy with a ``smooth`` method (PeGaSus) may then
   replace the noisy histogram by a function of it and of its own public
   state (post-processing: no data, no draws). A decision with ``groups``
   (AdaPub, RescueDP) is released as noisy sums over those public groups of
   bins at the same ε instead (:mod:`controller.grouped`), and ``smooth``
   turns them into the published histogram;
3. the new state carries the accountant copy, the policy state and the last
   release.

Every piece of state round-trips through JSON (:meth:`EngineState.to_json`).
Array payloads are stored as base64 of zlib-compressed little-endian bytes.
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from controller.accountant import Accountant, LedgerEntry, WindowAccountant, restore_accountant
from controller.errors import StateError
from controller.grouped import check_groups, release_groups
from controller.policies.base import DecisionContext, DecisionPolicy
from histogram.mechanism import Mechanism
from histogram.noise import NoiseDrawer
from histogram.records import RecordTable

__all__ = ["Engine", "EngineState", "LastRelease", "Release", "encode_array", "decode_array"]

STATE_VERSION = 1


def encode_array(arr: np.ndarray) -> dict[str, Any]:
    """A compact, exact JSON form of a 1-D numeric array.

    zlib level 1: every sealed timestep journals its arrays, and at 10⁴ bins level 6 took ~3 ms
    per array (measured with ``benchmarks/bench_throughput.py`` under cProfile) for a few percent
    less space; any level decodes the same way.
    """
    a = np.ascontiguousarray(arr)
    dtype = a.dtype.newbyteorder("<")
    raw = a.astype(dtype, copy=False).tobytes()
    return {"dtype": dtype.str, "size": int(a.size), "data": base64.b64encode(zlib.compress(raw, 1)).decode()}


def decode_array(data: dict[str, Any]) -> np.ndarray:
    """Inverse of :func:`encode_array` (read-only result)."""
    try:
        raw = zlib.decompress(base64.b64decode(data["data"]))
        arr = np.frombuffer(raw, dtype=np.dtype(data["dtype"])).astype(np.dtype(data["dtype"]).newbyteorder("="))
    except (KeyError, TypeError, ValueError, zlib.error) as exc:
        raise StateError(f"malformed array in snapshot: {exc}") from exc
    if arr.size != int(data["size"]):
        raise StateError(f"array in snapshot has {arr.size} values, expected {data['size']}")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class LastRelease:
    """The counts currently published (what a republished timestep repeats).

    ``timestep`` is None for the all-zero placeholder before any fresh release
    (its half-widths are infinite: it carries no information). ``model`` is the
    rest of a model release (a mechanism with a ``view``: correlation matrix,
    synthetic sample; JSON-ready, public), which a republished timestep repeats;
    None for histogram mechanisms.
    """

    counts: np.ndarray
    half_width: np.ndarray
    confidence: float
    timestep: int | None
    epsilon: Fraction
    model: dict[str, Any] | None = None

    @classmethod
    def placeholder(cls, bins: int) -> LastRelease:
        zeros = np.zeros(bins, dtype=np.int64)
        zeros.setflags(write=False)
        return cls(zeros, np.broadcast_to(np.float64(np.inf), (bins,)), 0.0, None, Fraction(0))

    def to_json(self) -> dict[str, Any]:
        width = np.asarray(self.half_width)
        uniform = width.size > 0 and bool(np.all(width == width.flat[0]))
        return {
            "counts": encode_array(self.counts),
            "half_width": repr(float(width.flat[0])) if uniform else encode_array(width.astype(np.float64)),
            "confidence": self.confidence,
            "timestep": self.timestep,
            "epsilon": str(self.epsilon),
            **({} if self.model is None else {"model": self.model}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LastRelease:
        try:
            counts = decode_array(data["counts"])
            hw = data["half_width"]
            width = (
                np.broadcast_to(np.float64(float(hw)), counts.shape) if isinstance(hw, str) else decode_array(hw)
            )
            ts = data["timestep"]
            model = data.get("model")
            if model is not None and not isinstance(model, dict):
                raise TypeError("model must be an object")
            return cls(counts, width, float(data["confidence"]), None if ts is None else int(ts),
                       Fraction(str(data["epsilon"])), model)
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed last release in snapshot: {exc}") from exc


@dataclass(frozen=True)
class Release:
    """What one timestep publishes.

    Attributes:
        timestep: 0-based index of the timestep.
        kind: ``fresh`` (new noise drawn for this timestep) or ``republished``
            (the last release repeated; no data of this timestep was
            released, though the decision may have read it under charge).
        counts: released counts, bin order.
        half_width, confidence: accuracy of each count with respect to the
            timestep the counts were drawn for (``source_timestep``); a
            republished count does not account for change since then.
        source_timestep: the timestep whose fresh release these counts are.
        epsilon_release: ε of that fresh release.
        epsilon_spent: total ε charged so far (user-level: against the whole
            budget; w-event: since the stream began, which is unbounded).
        window_spend: w-event only: ε charged in the window ending here.
        epsilon_remaining: user-level: the budget left; w-event: what the
            window ending here could still take.
        fresh_count: fresh releases so far, this one included.
        method: the decision method's name.
        ledger: ledger entries charged or extended during this step.
        details: mechanism extras of a fresh release (e.g. PSD's tree).
        model: a model release's model (repeated when republished); None for histograms.
        private_alerts: private threshold alerts' public outcomes at this timestep (tested, fired,
            positives so far, ε charged; :mod:`controller.private_alerts`); empty without them.
    """

    timestep: int
    kind: Literal["fresh", "republished"]
    counts: np.ndarray
    half_width: np.ndarray
    confidence: float
    source_timestep: int | None
    epsilon_release: Fraction
    epsilon_spent: Fraction
    window_spend: Fraction | None
    epsilon_remaining: Fraction
    fresh_count: int
    method: str
    ledger: tuple[LedgerEntry, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] | None = None
    private_alerts: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class EngineState:
    """Everything the engine carries between timesteps. Contains secrets (ρ)."""

    timestep: int
    fresh_count: int
    accountant: Accountant
    policy: Any
    last: LastRelease


@dataclass(frozen=True)
class Engine:
    """A decision policy, a release mechanism and a bin count, wired together.

    A mechanism with a ``view`` (:class:`histogram.model_release.MarginalView`) releases a model:
    the policy then compares ``view(counts)`` with the last release's counts, which live in the
    view's space (``docs/privacy.md`` §11.4), and a republished timestep repeats its model.
    """

    policy: DecisionPolicy
    mechanism: Mechanism
    bins: int

    def __post_init__(self) -> None:
        if self.bins < 1:
            raise StateError(f"bins must be >= 1, got {self.bins}")

    @property
    def method(self) -> str:
        return self.policy.name

    @property
    def released_bins(self) -> int:
        """Length of a released count vector: the view's size for a model release, else ``bins``."""
        view = getattr(self.mechanism, "view", None)
        return self.bins if view is None else int(view.size)

    def initial_state(self) -> EngineState:
        return EngineState(0, 0, self.policy.new_accountant(), self.policy.reset(),
                           LastRelease.placeholder(self.released_bins))

    def step(self, state: EngineState, counts: np.ndarray | RecordTable,
             noise: NoiseDrawer) -> tuple[Release, EngineState]:
        """Decide and release one timestep. Pure: ``state`` is not modified.

        ``counts``: the true count vector over the ``bins`` cells, or — for a model release
        (a mechanism with a ``view``) — the timestep's bounded :class:`~histogram.records.RecordTable`,
        so that huge domains are never materialised (``docs/privacy.md`` §11.4).
        """
        view = getattr(self.mechanism, "view", None)
        if isinstance(counts, RecordTable):
            if view is None:
                raise ValueError(f"{self.mechanism.name} releases counts: give it the count vector, not records")
            if counts.cells != self.bins:
                raise ValueError(f"records over {counts.cells} cells for an engine of {self.bins} bins")
        else:
            counts = np.asarray(counts)
            if counts.shape != (self.bins,) or counts.dtype.kind not in "iu":
                raise ValueError(f"counts must be an integer vector of length {self.bins}, got {counts.dtype} "
                                 f"{counts.shape}")
            if counts.size and counts.min() < 0:
                raise ValueError("true counts cannot be negative")
        t = state.timestep
        acct = state.accountant.copy()
        before = {e.seq: e for e in acct.entries}
        observed = counts if view is None else view.observe(counts)  # a public linear map: §11.4
        ctx = DecisionContext(
            t, observed, state.last.counts, state.fresh_count, acct, noise, self.mechanism, state.last.epsilon
        )
        decision, policy_state = self.policy.decide(state.policy, ctx)
        last, fresh_count, details = state.last, state.fresh_count, {}
        if decision.fresh:
            # Policies check can_spend before answering fresh; a failure here is a policy bug
            # and raises before any release noise is drawn (nothing is published for t).
            if decision.groups is not None:
                check_groups(decision.groups, self.bins)
            acct.spend(t, decision.epsilon, "publication")
            if decision.groups is None:
                noisy = self.mechanism.release(counts, decision.epsilon, noise)
            else:  # noisy sums over the policy's public groups, same ε (controller/grouped.py)
                noisy = release_groups(counts, decision.groups, decision.epsilon, self.mechanism.sensitivity,
                                       noise, getattr(self.mechanism, "confidence", 0.95))
            smooth = getattr(self.policy, "smooth", None)
            if smooth is not None:  # post-processing of releases only (PeGaSus's smoother); no ε, no draws
                noisy, policy_state = smooth(policy_state, t, noisy)
            if decision.groups is not None and np.shape(noisy.counts) != (self.bins,):
                raise StateError(f"{self.method} released {np.shape(noisy.counts)} values for {self.bins} bins")
            model = None if view is None else dict(noisy.details.get("model") or {})
            last = LastRelease(noisy.counts, noisy.half_width, noisy.confidence, t, decision.epsilon, model)
            fresh_count += 1
            details = dict(noisy.details)
            policy_state = self.policy.on_fresh(policy_state, t)
        outcomes = getattr(self.policy, "outcomes", None)  # private threshold alerts, when declared
        private_alerts = outcomes(policy_state) if outcomes is not None else ()
        changed = tuple(e for e in acct.entries if before.get(e.seq) != e)
        window = acct.window_spend(t) if isinstance(acct, WindowAccountant) else None
        release = Release(
            timestep=t,
            kind="fresh" if decision.fresh else "republished",
            counts=last.counts,
            half_width=last.half_width,
            confidence=last.confidence,
            source_timestep=last.timestep,
            epsilon_release=last.epsilon,
            epsilon_spent=acct.spent,
            window_spend=window,
            epsilon_remaining=acct.remaining(t),
            fresh_count=fresh_count,
            method=self.method,
            ledger=changed,
            details=details,
            model=last.model,
            private_alerts=private_alerts,
        )
        return release, EngineState(t + 1, fresh_count, acct, policy_state, last)

    # -- snapshots -------------------------------------------------------------
    def parameters(self) -> dict[str, Any]:
        """Public parameters a snapshot must match: unit, budget, method, mechanism."""
        return json.loads(
            json.dumps(
                {"unit": self.policy.unit.describe(), "policy": self.policy.describe(),
                 "mechanism": self.mechanism.name, "sensitivity": self.mechanism.sensitivity},
                sort_keys=True,
                default=str,
            )
        )

    def snapshot(self, state: EngineState) -> dict[str, Any]:
        """JSON-ready snapshot of ``state`` (secret: contains threshold noise)."""
        return {
            "version": STATE_VERSION,
            "method": self.method,
            "bins": self.bins,
            "parameters": self.parameters(),
            "timestep": state.timestep,
            "fresh_count": state.fresh_count,
            "accountant": state.accountant.snapshot(),
            "policy": self.policy.state_to_json(state.policy),
            "last": state.last.to_json(),
        }

    def restore(self, data: dict[str, Any]) -> EngineState:
        """Rebuild a state from :meth:`snapshot`; refuses snapshots of another method or size."""
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise StateError(f"unsupported engine snapshot version {data.get('version') if isinstance(data, dict) else data!r}")
        if data.get("method") != self.method or data.get("bins") != self.bins:
            raise StateError(
                f"snapshot is for method {data.get('method')!r} with {data.get('bins')} bins, "
                f"this engine runs {self.method!r} with {self.bins} bins: refusing to mix them"
            )
        if data.get("parameters") != self.parameters():
            raise StateError(
                "snapshot was taken under different privacy parameters (unit, ε, N, C, w, method "
                "parameters or mechanism): refusing to continue it; start a new stream id instead"
            )
        try:
            accountant = restore_accountant(data["accountant"])
            fresh_acct = self.policy.new_accountant()
            if type(accountant) is not type(fresh_acct) or accountant.epsilon != fresh_acct.epsilon:
                raise StateError("snapshot's accountant does not match this engine's privacy unit and ε")
            if isinstance(accountant, WindowAccountant) and accountant.w != fresh_acct.w:  # type: ignore[union-attr]
                raise StateError(f"snapshot's window is w={accountant.w}, this engine's is w={fresh_acct.w}")  # type: ignore[union-attr]
            last = LastRelease.from_json(data["last"])
            if last.counts.size != self.released_bins:
                raise StateError("snapshot's last release has the wrong number of bins")
            timestep, fresh_count = int(data["timestep"]), int(data["fresh_count"])
            if timestep < 0 or not 0 <= fresh_count <= timestep:
                raise StateError(f"snapshot has timestep {timestep} with {fresh_count} fresh releases")
            if any(e.end >= timestep for e in accountant.entries):
                raise StateError("snapshot's ledger has charges at or after its own next timestep")
            policy_state = self.policy.state_from_json(data["policy"])
        except StateError:
            raise
        except (KeyError, TypeError, ValueError, ArithmeticError, AttributeError) as exc:
            raise StateError(f"malformed engine snapshot: {exc}") from exc
        return EngineState(timestep, fresh_count, accountant, policy_state, last)
