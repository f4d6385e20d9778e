"""The release path shared by ``dpstream replay`` and the Kafka service.

``events → validate → window (watermark, lateness) → bound + count →
Engine.step → release message``. :class:`ReleasePipeline` owns the engine
state and the windowing state; the caller feeds :class:`EventBatch` es with
:meth:`ReleasePipeline.offer` and collects :class:`SealedRelease` s with
:meth:`ReleasePipeline.seal`. Noise for timestep ``i`` comes from
``settings.noise_source().drawer(stream_id, i, "release")`` (or the
``noise`` given), so a seeded replay and the seeded service produce the same
bytes.

Crash safety (privacy invariant: at most one noise draw per timestep that can
reach the outside, re-sent byte-identically after a crash):

* ``step_hook(sealed)`` runs after each timestep's step and before the
  pipeline moves on; the service journals ``sealed.journal_entry()`` there
  (durably) before producing ``sealed.payload``. If the hook raises, the
  pipeline stays before that timestep (its events are kept) and the error
  propagates.
* ``recall(index)`` is asked before stepping timestep ``index``; when it
  returns a journal entry the pipeline does not step (draws nothing): it
  re-uses the journaled bytes and the journaled engine state
  (``sealed.recovered`` is True), after checking the entry belongs to this
  stream, configuration, index and grid cell.
* :meth:`ReleasePipeline.snapshot` / :meth:`ReleasePipeline.restore` carry
  the engine state and the windowing state (first cell, next index, largest
  event time; optionally the open timesteps' events) through JSON.

Nothing here logs or exposes raw counts; :attr:`ReleasePipeline.stats` holds
only whole-stream totals of events.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from fractions import Fraction
from itertools import islice
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller.errors import StateError
from controller.personal import PersonalState
from controller.step import Engine, EngineState, Release
from histogram.noise import Randomness
from histogram.postprocess import MODELS, PostProcessor, PostState, Processed, postprocess
from histogram.records import RecordTable
from stream.ingest.events import CODE, REASONS, EventBatch, Rejections, ValidBatch, validate_batch
from stream.ingest.windowing import ACCEPTED, Grid, TimestepData, Windower
from stream.messages import (
    DomainMessage,
    LagInfo,
    MessageBuilder,
    ReleaseMessage,
    canonical_bytes,
    parse_release,
    release_id,
)

__all__ = ["ReleasePipeline", "SealedRelease", "LagQueue", "PipelineStats", "JOURNAL_VERSION", "PIPELINE_STATE_VERSION"]

JOURNAL_VERSION = 1
PIPELINE_STATE_VERSION = 1

StepHook = Callable[["SealedRelease"], None]
Recall = Callable[[int], "Mapping[str, Any] | None"]

_STATUS_DETAIL = {
    "before_start": "the event is before stream.start",
    "far_future": "the event is later than the largest event time (or, when caught up, the clock) + stream.max_future",
    "timestep_sealed": "the event's timestep is already sealed",
    "arrived_after_seal": "the event's record time is within its timestep's deadline, but the timestep "
                          "had already been declared complete (broker clock behind the wall clock)",
}
_STATUS_TEXTS = tuple(_STATUS_DETAIL.values())
_STATUS_LOOKUP = np.zeros(len(REASONS) + 1, dtype=np.int32)
for _i, _reason in enumerate(_STATUS_DETAIL):
    _STATUS_LOOKUP[CODE[_reason]] = _i


def _seconds(now: float | datetime | None) -> float | None:
    if now is None:
        return None
    if isinstance(now, datetime):
        return now.timestamp()
    return float(now)


@dataclass(frozen=True)
class LagQueue:
    """``release.delay: k``: the timesteps released but not yet published (journaled with the engine).

    Attributes:
        entries: their messages as released (canonical JSON text), oldest first, each with whether
            its counts are final (released before the first fresh release: nothing to smooth).
        flushed_through: the engine timestep at the last end-of-stream flush (0: never flushed):
            every timestep below it is published, so the queue holds ``min(k, timestep −
            flushed_through)`` entries, the timesteps ``timestep − len(entries) .. timestep − 1``.
    """

    entries: tuple[tuple[str, bool], ...] = ()
    flushed_through: int = 0

    def expected(self, delay: int, timestep: int) -> int:
        """How many entries a stream with ``delay`` at engine ``timestep`` must hold."""
        return min(delay, max(0, timestep - self.flushed_through))

    def to_json(self) -> dict[str, Any]:
        """The snapshot's part (``delayed``; ``delay_flushed_through`` only after a flush, so the
        snapshots of a stream never flushed are those of earlier builds)."""
        out: dict[str, Any] = {"delayed": [{"message": text, "final": final} for text, final in self.entries]}
        if self.flushed_through:
            out["delay_flushed_through"] = self.flushed_through
        return out


@dataclass(frozen=True, eq=False)
class SealedRelease:
    """One sealed timestep, ready to publish.

    Attributes:
        index: 0-based timestep index (the engine's timestep).
        cell: grid cell (``index + first cell``).
        start, end: the timestep's event-time bounds ``[start, end)`` (UTC).
        key: the output record key (stream id, UTF-8).
        payload: the output record value: canonical JSON of ``message``.
        message: the release message.
        engine_state: the engine state after this timestep (secret: holds
            threshold noise; journal it, never publish it).
        post_state: the post-processing smoother's state after this timestep
            (:class:`histogram.postprocess.PostState`; a function of releases
            only, journaled inside the engine snapshot under ``postprocess``).
        window: the pipeline's window state after this timestep
            (``{"version", "first_cell", "next_index", "max_event_time"}``).
        release: the engine's :class:`Release`, or None when ``recovered``.
        recovered: True when the bytes and state came from the journal via
            ``recall`` (nothing was drawn: a re-send).
        delayed: ``release.delay: k``: the messages published at this timestep (the release of
            timestep ``index − k``, smoothed with the releases up to ``index``; none while
            ``index < k``); None without a delay (``message`` itself is published).
        lag_queue: ``release.delay``: the timesteps released but not yet published after this one
            (:class:`LagQueue`); journaled with the engine.
    """

    index: int
    cell: int
    start: datetime
    end: datetime
    key: bytes
    payload: bytes
    message: ReleaseMessage
    engine_state: EngineState
    window: dict[str, Any]
    release: Release | None
    recovered: bool
    engine: Engine = field(repr=False)
    post_state: PostState = field(default_factory=PostState, repr=False)
    post: PostProcessor | None = field(default=None, repr=False)
    delayed: tuple[tuple[ReleaseMessage, bytes], ...] | None = None
    lag_queue: LagQueue = field(default_factory=LagQueue)

    @property
    def outputs(self) -> tuple[tuple[ReleaseMessage, bytes], ...]:
        """The messages and bytes to publish for this timestep, in order (``release.delay``: the
        delayed ones, maybe none; otherwise this timestep's own)."""
        return ((self.message, self.payload),) if self.delayed is None else self.delayed

    @property
    def release_id(self) -> str:
        return self.message.release_id

    @property
    def kind(self) -> str:
        return self.message.kind

    @property
    def fresh(self) -> bool:
        return self.message.kind == "fresh"

    @property
    def epsilon_spent(self) -> Fraction:
        return Fraction(self.message.epsilon_spent_exact)

    def engine_snapshot(self) -> dict[str, Any]:
        """The engine snapshot, with the smoother's state under ``postprocess`` when
        ``release.postprocess`` smooths (what the journal keeps and a restart restores)."""
        return _with_post(self.engine.snapshot(self.engine_state), self.post, self.post_state, self.lag_queue)

    def journal_entry(self) -> dict[str, Any]:
        """JSON-ready record to persist before ``payload`` may be produced.

        ``{"version": 1, "stream", "config_fingerprint", "index", "cell",
        "release_id", "payload" (the exact bytes, ASCII text), "engine_state"
        (engine snapshot after the step), "window" (window state after the
        step)}``, and under ``release.delay`` ``"published"``: the messages this step publishes
        (timestep ``index − k``'s, ASCII text; maybe none). Feed it back through ``recall`` to
        re-send, or to :meth:`ReleasePipeline.resume_after` to continue after it.
        """
        entry = {
            "version": JOURNAL_VERSION,
            "stream": self.message.stream,
            "config_fingerprint": self.message.config_fingerprint,
            "index": self.index,
            "cell": self.cell,
            "release_id": self.release_id,
            "payload": self.payload.decode("ascii"),
            "engine_state": self.engine_snapshot(),
            "window": dict(self.window),
        }
        if self.delayed is not None:
            entry["published"] = [payload.decode("ascii") for _, payload in self.delayed]
        entry["checksum"] = _checksum(entry)
        return entry


@dataclass
class PipelineStats:
    """Whole-stream totals (no per-timestep statistics)."""

    events_offered: int = 0
    events_accepted: int = 0
    rejected: Counter = field(default_factory=Counter)
    timesteps_sealed: int = 0
    fresh: int = 0
    republished: int = 0
    recovered: int = 0

    @property
    def late(self) -> int:
        return int(self.rejected.get("timestep_sealed", 0))

    @property
    def dead_lettered(self) -> int:
        return int(sum(v for k, v in self.rejected.items() if k != "timestep_sealed"))


class ReleasePipeline:
    """Windowing + engine + messages for one stream.

    Args:
        settings: validated :class:`~stream.config.Settings`.
        noise: randomness (default ``settings.noise_source()``).
        engine_state: restore from this engine state (an :class:`EngineState`
            or its JSON snapshot) instead of a fresh one.
        window_state: the window snapshot that goes with ``engine_state``
            (``first_cell``, ``next_index``, ``max_event_time``[, buffers]).
            Needed when ``engine_state`` is past timestep 0, unless
            ``stream.start`` fixes the first cell.
        step_hook: called with each :class:`SealedRelease` before the
            pipeline advances past it (journal here).
        recall: ``index -> journal entry | None``; a returned entry is
            re-used instead of stepping (crash recovery; never redraws).

    Raises:
        StateError: the engine state and window state disagree.
    """

    def __init__(
        self,
        settings: Any,
        *,
        noise: Randomness | None = None,
        engine_state: EngineState | Mapping[str, Any] | None = None,
        window_state: Mapping[str, Any] | None = None,
        step_hook: StepHook | None = None,
        recall: Recall | None = None,
    ) -> None:
        self.settings = settings
        self.stream_id: str = settings.stream.id
        self.domain = settings.domain()
        self.engine: Engine = settings.engine()
        self.noise = settings.noise_source() if noise is None else noise
        self.fingerprint: str = settings.fingerprint()
        self.grid = Grid.from_settings(settings)
        self.messages = MessageBuilder(settings)
        self.post: PostProcessor = self.messages.post
        self.key = self.stream_id.encode()
        self.step_hook = step_hook
        self.recall = recall
        self.max_user_id_chars = 256
        post_state = self.post.initial()
        self._lag_queue = LagQueue()
        if engine_state is None:
            state = self.engine.initial_state()
        elif isinstance(engine_state, EngineState | PersonalState):
            state = engine_state
            if state.timestep and self.post.stateful:
                raise StateError("restoring a smoothing stream needs the engine snapshot with its "
                                 "post-processing state, not an EngineState")
        else:
            state, post_state, self._lag_queue = self._restore_snapshot(engine_state, "engine snapshot")
        if window_state is not None:
            self.window = Windower.restore(self.grid, dict(window_state))
        elif state.timestep == 0 or self.grid.start is not None:
            self.window = Windower(self.grid, next_index=state.timestep)
        else:
            raise StateError(
                f"the engine state is at timestep {state.timestep}; restoring it needs the window state "
                "(first grid cell) as well"
            )
        if self.window.next_index != state.timestep:
            raise StateError(
                f"window state says the next timestep is {self.window.next_index}, "
                f"the engine state says {state.timestep}: refusing to mix them"
            )
        self._state = state
        self._post_state = post_state
        self.stats = PipelineStats()
        #: privacy.personal: the public declaration events are routed by (None: one budget for everyone)
        self.personal = settings.personal_declaration() if settings.privacy.personal is not None else None
        #: true counts per timestep: the domain's bins, or one block of them per budget level (+ excluded)
        self.input_bins: int = getattr(self.engine, "input_bins", self.domain.size)

    # -- accessors --------------------------------------------------------------
    @property
    def engine_state(self) -> EngineState:
        return self._state

    @property
    def next_index(self) -> int:
        return self.window.next_index

    @property
    def unpublished(self) -> range:
        """``release.delay``: the timesteps released but not yet published (empty without a delay)."""
        n = len(self._lag_queue.entries)
        return range(self.next_index - n, self.next_index)

    @property
    def first_cell(self) -> int | None:
        return self.window.first_cell

    @property
    def epsilon_spent(self) -> Fraction:
        return self._state.accountant.spent

    def domain_message(self) -> DomainMessage:
        return self.messages.domain()

    # -- input --------------------------------------------------------------------
    def offer(self, batch: EventBatch, *, now: float | datetime | None = None,
              record_time: np.ndarray | None = None, whole_input: bool = False) -> Rejections:
        """Validate and window a batch; returns the rejected rows (dead letters and late).

        ``record_time`` (float seconds, one per row of ``batch``: each event's own Kafka record
        timestamp or CSV arrival time) selects the data-independent rule
        (:meth:`stream.ingest.windowing.Windower.offer_recorded`, ``docs/privacy.md`` §1.1):
        inclusion depends on each event's own fields only, and ``now`` is ignored.
        ``whole_input`` (offline input read whole, no arrival times): every event counts in
        its event-time timestep (:meth:`stream.ingest.windowing.Windower.offer_whole`); seal
        only at the end (``seal(final=True)``).
        Without either, the legacy watermark rule applies (``kafka.record_time: watermark``,
        not covered by ``docs/privacy.md`` §1.1): ``now`` (wall clock, seconds or datetime)
        bounds the far future by the clock and arms the idle timer.
        """
        consent = None
        if self.personal is not None and self.personal.attribute is not None:
            # the consent field routes the event to its tier; it is never counted (docs/privacy.md §12.2)
            attrs = dict(batch.attributes)
            consent = attrs.pop(self.personal.attribute, None)
            batch = replace(batch, attributes=attrs)
        valid, rejected = validate_batch(batch, self.domain, max_user_id_chars=self.max_user_id_chars,
                                         numeric_user_ids=self.settings.schema_.numeric_user_ids)
        if self.personal is not None:
            valid = self._route(valid, consent)
        if record_time is not None:
            rec = np.asarray(record_time, dtype=np.float64)
            if rec.shape != (len(batch),):
                raise ValueError(f"{rec.size} record times for a batch of {len(batch)} events")
            status = self.window.offer_recorded(valid, rec[valid.position])
        elif whole_input:
            status = self.window.offer_whole(valid)
        else:
            status = self.window.offer(valid, now=_seconds(now))
        bad = np.flatnonzero(status != ACCEPTED)
        parts = [rejected]
        if bad.size:
            codes = status[bad]
            pos = valid.position[bad]
            parts.append(Rejections(
                codes, batch.rows[pos], _STATUS_LOOKUP[codes], _STATUS_TEXTS,
                message=None if batch.messages is None else batch.messages[pos],
                element=None if batch.elements is None else batch.elements[pos],
                payloads=batch.payloads or (),
                sources=batch.sources or (),
            ))
        out = Rejections.concat(parts)
        self.stats.events_offered += len(batch)
        self.stats.events_accepted += len(batch) - len(out)
        self.stats.rejected.update(out.counts())
        return out

    def _route(self, valid: ValidBatch, consent: Any) -> ValidBatch:
        """Each valid event's flat index moved into its budget level's block (``docs/privacy.md`` §12.7).

        The level is a function of the event's own consent value (attribute mode: undeclared or
        missing values get the default) or of its person key in the public consent table
        (persons not listed get the default), and of its person's Sampling coin: never of
        other events, so inclusion stays per event (§1.1).
        """
        decl = self.personal
        assert decl is not None
        n = len(valid)
        if n == 0:
            return valid
        levels = np.full(n, decl.default_level, dtype=np.int64)
        if decl.attribute is not None:
            if consent is not None:
                col = consent if isinstance(consent, pa.Array | pa.ChunkedArray) else pa.array(
                    [None if v is None else str(v) for v in np.asarray(consent, dtype=object)], type=pa.string())
                col = col.take(pa.array(valid.position))
                if not pa.types.is_string(col.type):
                    col = pc.cast(col, pa.string())
                names = list(decl.budgets.tiers)
                found = pc.index_in(col, value_set=pa.array(names, type=pa.string())).fill_null(-1)
                idx = np.asarray(found.to_numpy(zero_copy_only=False), dtype=np.int64)
                lookup = np.array([decl.tier_level[t] for t in names] + [decl.default_level], dtype=np.int64)
                levels = lookup[idx]  # -1 (undeclared or missing) → the default level
        elif decl.table_keys:
            found = pc.index_in(valid.user_id, value_set=self._table_keys()).fill_null(-1)
            idx = np.asarray(found.to_numpy(zero_copy_only=False), dtype=np.int64)
            lookup = np.array([*decl.table_levels, decl.default_level], dtype=np.int64)
            levels = lookup[idx]
        # w-event Sampling draws a coin per person and timestep: the event's own grid cell (§12.7)
        cells = self.grid.cell(valid.time) if self.engine.coin_per_timestep else None  # type: ignore[union-attr]
        slots = self.engine.slots(self._state, levels, valid.user_id, cells)  # type: ignore[union-attr]
        return ValidBatch(valid.flat + slots * self.domain.size, valid.time, valid.user_id, valid.position)

    def _table_keys(self) -> pa.Array:
        keys = getattr(self, "_table_key_array", None)
        if keys is None:
            keys = pa.array(self.personal.table_keys, type=pa.string())  # type: ignore[union-attr]
            self._table_key_array = keys
        return keys

    # -- sealing --------------------------------------------------------------------
    def seal(self, *, now: float | datetime | None = None, final: bool = False,
             record_frontier: float | None = None, before: int | None = None,
             limit: int | None = None) -> list[SealedRelease]:
        """Seal every complete timestep, in order (at most ``limit`` of them).

        With ``record_frontier`` (the record time every assigned partition is known to be
        past; see :meth:`stream.ingest.windowing.Windower.complete`) completeness is decided
        by record-time progress only; otherwise by the legacy watermark/idle rule (``now``).
        ``final`` (end of input) seals every buffered timestep. ``before`` (a grid cell): seal
        only cells below it, complete or not beyond (the service's public release schedule,
        :mod:`stream.service.schedule`); it only delays, never changes what a timestep holds.
        ``limit`` (a count of
        timesteps) bounds one call: the service seals a long backlog in bounded checkpoints
        (the rest stays complete and is sealed by the next calls, in order); it decides only
        *when* a timestep is sealed, never what it holds.
        """
        out = []
        cells = (self.window.complete(record_frontier, final=final) if record_frontier is not None
                 else self.window.sealable(now=_seconds(now), final=final))
        if before is not None and cells.stop > before:
            cells = range(cells.start, max(cells.start, before))
        for cell in cells if limit is None else islice(cells, max(0, limit)):
            out.append(self._seal_cell(cell, None))
        return out

    def release_counts(self, counts: np.ndarray) -> SealedRelease:
        """Release the next timestep from already-bounded true counts (counts-file replay).

        Skips windowing: the timesteps are consecutive from the cell of
        ``stream.start`` (or of ``stream.origin``). The counts must already
        hold at most ``privacy.contribution_bound`` records per person.
        """
        if self.personal is not None:
            raise StateError("a counts file has no budget tiers: privacy.personal streams release from events only")
        if self.window.buffered_events:
            raise StateError("release_counts cannot be mixed with events waiting in open timesteps")
        if self.window.first_cell is None:
            self.window.first_cell = self.grid.start_cell if self.grid.start is not None else self.grid.cell_of(
                self.grid.origin_s)
        arr = np.asarray(counts)
        if arr.shape != (self.domain.size,) or arr.dtype.kind not in "iu" or (arr.size and arr.min() < 0):
            raise ValueError(f"counts must be {self.domain.size} non-negative integers")
        return self._seal_cell(self.window.next_cell, arr.astype(np.int64, copy=False))  # type: ignore[arg-type]

    def _seal_cell(self, cell: int, counts: np.ndarray | None) -> SealedRelease:
        index = self.window.next_index
        data = self.window.take(cell)
        try:
            entry = self.recall(index) if self.recall is not None else None
            if entry is not None:
                sealed = self._from_journal(entry, index, cell)
            else:
                true = self._true(data) if counts is None else counts
                sealed = self._step(index, cell, true)
                del true
            if self.step_hook is not None:
                self.step_hook(sealed)
        except BaseException:
            self.window.put_back(data)
            raise
        self._state = sealed.engine_state
        self._post_state = sealed.post_state
        self._lag_queue = sealed.lag_queue
        self.window.advance()
        st = self.stats
        st.timesteps_sealed += 1
        if sealed.fresh:
            st.fresh += 1
        else:
            st.republished += 1
        if sealed.recovered:
            st.recovered += 1
        return sealed

    def _true(self, data: TimestepData) -> np.ndarray | RecordTable:
        """What the engine steps on: the bounded count vector, or for a model release (a mechanism with
        a view) the bounded records themselves, so a huge domain's vector is never built (§11.4)."""
        bound = self.settings.privacy.contribution_bound
        if getattr(self.engine.mechanism, "view", None) is not None:
            return RecordTable.from_cells(data.bounded(bound).flat, self.domain.shape)
        return data.counts(self.input_bins, bound)

    def _window_after(self, index: int) -> dict[str, Any]:
        snap = self.window.snapshot()
        snap["next_index"] = index + 1
        return snap

    def _step(self, index: int, cell: int, counts: np.ndarray) -> SealedRelease:
        drawer = self.noise.drawer(self.stream_id, index, "release")
        release, state = self.engine.step(self._state, counts, drawer)
        if release.timestep != index:
            raise StateError(f"engine stepped timestep {release.timestep}, expected {index}")
        start, end = self.grid.bounds(cell)
        processed, post_state = self.post.apply(self._post_state, release.counts, release.half_width,
                                                release.confidence, release.kind == "fresh")
        message, payload = self.messages.release_with_bytes(release, start, end, processed)
        delayed, queue = self._delay(index, payload, processed, post_state)
        return SealedRelease(
            index, cell, start, end, self.key, payload, message, state,
            self._window_after(index), release, False, self.engine, post_state, self.post, delayed, queue,
        )

    def _delay(self, index: int, payload: bytes, processed: Processed, post_state: PostState
               ) -> tuple[tuple[tuple[ReleaseMessage, bytes], ...] | None, LagQueue]:
        """``release.delay: k``: what timestep ``index`` publishes (timestep ``index − k``) and the
        queue after it. ``processed`` (the smoother's output at ``index``) is ``index − k``'s counts
        once the first fresh release is ``k`` timesteps back; a timestep released before the first
        fresh release keeps its own (placeholder) counts, final when it was released."""
        k = self.post.delay
        if not k:
            return None, LagQueue()
        lag = self._lag_queue
        entries = (*lag.entries, (payload.decode("ascii"), post_state.model is None))
        if len(entries) <= k:
            return (), replace(lag, entries=entries)
        (text, final), queue = entries[0], replace(lag, entries=entries[1:])
        head = parse_release(text.encode("ascii"))
        if final:
            message = head.model_copy(update={"lag": LagInfo(delay=k, smoothed_through=index)})
            return ((message, message.to_bytes()),), queue
        return (self.messages.delayed(head, processed, index),), queue

    def flush(self) -> list[tuple[ReleaseMessage, bytes]]:
        """``release.delay: k`` at the clean end of the stream: the last ``k`` timesteps released but
        not yet published, smoothed with the releases there are, oldest first (then nothing is
        left: the snapshot records the flush, and a stream continued later publishes its next
        timestep ``k`` timesteps late again). Empty without a delay, or when nothing waits.
        Post-processing only: nothing is drawn or charged."""
        queue = self._lag_queue.entries
        if not queue:
            return []
        self._lag_queue = LagQueue((), self._state.timestep)
        k = self.post.delay
        through = self.window.next_index - 1
        width = len(parse_release(queue[0][0].encode("ascii")).counts)
        tail = self.post.pending(self._post_state, (width,))
        after = self.post.chain[[s in MODELS for s in self.post.chain].index(True) + 1:]
        out = []
        for i, (text, final) in enumerate(queue):
            head = parse_release(text.encode("ascii"))
            if final or tail is None:
                message = head.model_copy(update={"lag": LagInfo(delay=k, smoothed_through=through)})
                out.append((message, message.to_bytes()))
                continue
            counts = tail[k - len(queue) + i]
            for step in after:
                counts = postprocess(step, counts)
            half = np.full(np.shape(counts), np.inf)  # no interval after a smoother
            out.append(self.messages.delayed(head, Processed(counts, half), through))
        return out

    def _from_journal(self, entry: Mapping[str, Any], index: int, cell: int) -> SealedRelease:
        where = f"journal entry for timestep {index}"
        try:
            if entry.get("version") != JOURNAL_VERSION:
                raise StateError(f"{where} has unsupported version {entry.get('version')!r}")
            if "checksum" in entry and entry["checksum"] != _checksum(entry):
                raise StateError(f"{where} is corrupted (checksum mismatch): refusing to re-send it")
            if entry.get("stream") != self.stream_id or entry.get("config_fingerprint") != self.fingerprint:
                raise StateError(f"{where} belongs to another stream or configuration: refusing to re-send it")
            if int(entry["index"]) != index or int(entry["cell"]) != cell:
                raise StateError(
                    f"{where} is for index {entry['index']} / cell {entry['cell']}, the pipeline is at "
                    f"index {index} / cell {cell}: the grid or first timestep changed"
                )
            payload = str(entry["payload"]).encode("ascii")
            message = parse_release(payload)
            if message.release_id != release_id(self.stream_id, index, self.fingerprint) or \
                    message.timestep.index != index or message.to_bytes() != payload:
                raise StateError(f"{where} holds a payload that is not this timestep's canonical release")
            state, post_state, lag_queue = self._restore_snapshot(entry["engine_state"], where)
            delayed = None
            if self.post.delay:
                texts = entry.get("published")
                if not isinstance(texts, list):
                    raise StateError(f"{where} does not say what it published (release.delay "
                                     f"{self.post.delay}): refusing to re-send it")
                delayed = tuple((parse_release(str(t).encode("ascii")), str(t).encode("ascii")) for t in texts)
        except StateError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed {where}: {exc}") from exc
        if state.timestep != index + 1:
            raise StateError(f"{where} carries an engine state at timestep {state.timestep}, expected {index + 1}")
        start, end = self.grid.bounds(cell)
        return SealedRelease(
            index, cell, start, end, self.key, payload, message, state,
            self._window_after(index), None, True, self.engine, post_state, self.post,
            delayed, lag_queue,
        )

    def _restore_snapshot(self, data: Mapping[str, Any], what: str
                          ) -> tuple[EngineState, PostState, LagQueue]:
        """Engine state and smoother state from an engine snapshot (the smoother's under ``postprocess``).

        Raises:
            StateError: a smoothing stream's snapshot past timestep 0 without (or with a broken)
                smoother state, or one with a smoother state this configuration does not use.
        """
        snap = dict(data)
        post = snap.pop("postprocess", None)
        queue = _lag_queue(snap.pop("delayed", None), snap.pop("delay_flushed_through", 0), self.post.delay, what)
        state = self.engine.restore(snap)
        need = queue.expected(self.post.delay, state.timestep)
        if self.post.delay and len(queue.entries) != need:
            raise StateError(f"the {what} holds {len(queue.entries)} timesteps waiting for publication, "
                             f"release.delay {self.post.delay} at timestep {state.timestep} needs {need}: "
                             "refusing to skip or repeat any")
        if not self.post.stateful:
            if post is not None:
                raise StateError(f"the {what} carries a smoother's state but release.postprocess is "
                                 f"{self.post.text}: refusing to mix them")
            return state, self.post.initial(), queue
        if post is None:
            if state.fresh_count:
                raise StateError(f"the {what} has no state for release.postprocess {self.post.text}: the "
                                 "smoothed releases cannot be continued (or re-sent) as published; refusing")
            return state, self.post.initial(), queue
        try:
            return state, self.post.state_from_json(post, self.domain.size), queue
        except (ValueError, TypeError, KeyError) as exc:
            raise StateError(f"the {what} has a broken post-processing state: {exc}") from None

    # -- snapshots ------------------------------------------------------------------
    def snapshot(self, *, include_buffers: bool = False) -> dict[str, Any]:
        """JSON-ready state: ``{"version", "stream", "config_fingerprint", "engine", "window"}``.

        Secret (engine state holds threshold noise); with ``include_buffers``
        it also holds raw events of the open timesteps. Internal only.
        """
        return {
            "version": PIPELINE_STATE_VERSION,
            "stream": self.stream_id,
            "config_fingerprint": self.fingerprint,
            "engine": _with_post(self.engine.snapshot(self._state), self.post, self._post_state, self._lag_queue),
            "window": self.window.snapshot(include_buffers=include_buffers),
        }

    @classmethod
    def restore(cls, settings: Any, snapshot: Mapping[str, Any], **kwargs: Any) -> ReleasePipeline:
        """Rebuild from :meth:`snapshot`; refuses another stream id or a changed configuration."""
        if not isinstance(snapshot, Mapping) or snapshot.get("version") != PIPELINE_STATE_VERSION:
            raise StateError("unsupported pipeline snapshot")
        _check_identity(settings, snapshot, "pipeline snapshot")
        return cls(settings, engine_state=snapshot["engine"], window_state=snapshot["window"], **kwargs)

    @classmethod
    def resume_after(cls, settings: Any, entry: Mapping[str, Any], **kwargs: Any) -> ReleasePipeline:
        """A pipeline positioned just after a journaled timestep (its state, no open events)."""
        if not isinstance(entry, Mapping) or entry.get("version") != JOURNAL_VERSION:
            raise StateError("unsupported journal entry")
        _check_identity(settings, entry, "journal entry")
        return cls(settings, engine_state=entry["engine_state"], window_state=entry["window"], **kwargs)


def _with_post(snapshot: dict[str, Any], post: PostProcessor | None, state: PostState,
               queue: LagQueue | None = None) -> dict[str, Any]:
    if post is not None and post.stateful:
        snapshot["postprocess"] = post.state_to_json(state)
    if post is not None and post.delay:
        snapshot.update((queue or LagQueue()).to_json())
    return snapshot


def _lag_queue(data: Any, flushed: Any, delay: int, what: str) -> LagQueue:
    """The journaled ``release.delay`` queue (:func:`_with_post`)."""
    if not delay:
        if data:
            raise StateError(f"the {what} holds delayed timesteps but release.delay is 0: refusing to drop them")
        return LagQueue()
    if data is None:
        data = []
    try:
        return LagQueue(tuple((str(d["message"]), bool(d["final"])) for d in data), int(flushed))
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"the {what} has a broken release.delay queue: {exc}") from None


def _checksum(entry: Mapping[str, Any]) -> str:
    body = {k: v for k, v in entry.items() if k != "checksum"}
    return hashlib.sha256(canonical_bytes(body)).hexdigest()


def _check_identity(settings: Any, data: Mapping[str, Any], what: str) -> None:
    if data.get("stream") != settings.stream.id:
        raise StateError(f"the {what} is for stream {data.get('stream')!r}, not {settings.stream.id!r}")
    if data.get("config_fingerprint") != settings.fingerprint():
        raise StateError(
            f"the {what} was written under another privacy configuration (fingerprint differs): "
            "refusing to continue the stream with changed ε, C, w, domain or method"
        )
