"""Event-time windowing: the timestep grid, watermark, lateness and sealing.

Implements ``docs/contracts.md`` ("Timestep grid and windowing"):

* Grid cell ``g`` covers ``[origin + g·timestep, origin + (g+1)·timestep)``.
  The first timestep is the cell of ``stream.start`` if set, else the
  smallest cell among the accepted events that arrived before anything was
  sealed (so events reordered within the allowed lateness give the same
  first timestep). ``timestep.index`` = cell − first cell.
* Watermark ``W`` = largest accepted event time − ``allowed_lateness``. A
  cell is sealed when its end ≤ ``W``, i.e. when ``cell < cell(W)``; in
  order, empty cells included.
* Idle (service): when ``now − (wall time of the last accepted event) ≥
  idle_timeout``, every open cell up to the cell of the largest event time
  is sealed. Final flush (replay, end of input): the same, unconditionally.
* Late: an event whose cell is already sealed gets ``timestep_sealed``.
  Far future: later than ``bound + max_future`` → ``far_future``, where
  ``bound`` is the largest event time accepted before it — or, in the
  service, the wall clock ``now`` when that is later and the service has
  caught up with its input (or nothing was accepted yet); while it reads a
  backlog (:attr:`Windower.catching_up`), ``now`` only caps the bound. Before
  ``stream.start`` → ``before_start``.

Determinism. Lateness is decided per event, in arrival order, as if sealing
happened immediately after every event (the watermark moves with each
accepted event). The result does not depend on how the events are cut into
batches nor on when :meth:`Windower.sealable` is called — only ``now``
(idle sealing, far-future) brings in wall time. Within a timestep the order
of events does not matter: contribution bounding keeps each person's record
with the smallest (event time, bin) (:func:`histogram.build.bound_contributions`).

Memory: only the open cells are buffered, as columnar chunks (bin index
int64, event time float64, user ids as an Arrow string array). Open cells lie
between the seal frontier and the cell of the largest event time, so memory
is bounded by ``(allowed_lateness + max_future) / timestep`` cells' events,
not by the input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller.errors import StateError
from controller.step import decode_array, encode_array
from histogram.build import bound_contributions, count_bins
from histogram.grouping import shared_hash_rows
from stream.ingest.events import CODE, ValidBatch
from stream.ingest.people import person_hashes

__all__ = ["Grid", "TimestepData", "Windower", "ACCEPTED", "AFTER_SEAL", "BEFORE_START", "FAR_FUTURE", "LATE"]

ACCEPTED = 0
BEFORE_START = CODE["before_start"]
FAR_FUTURE = CODE["far_future"]
LATE = CODE["timestep_sealed"]
AFTER_SEAL = CODE["arrived_after_seal"]
WINDOW_STATE_VERSION = 1


@dataclass(frozen=True)
class Grid:
    """The timestep grid and the windowing parameters, in float seconds (and exact datetimes)."""

    origin: datetime
    timestep: timedelta
    allowed_lateness: float
    max_future: float
    idle_timeout: float
    start: float | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> Grid:
        s = settings.stream
        return cls(
            s.origin.astimezone(UTC),
            s.timestep,
            s.allowed_lateness.total_seconds(),
            s.max_future.total_seconds(),
            30.0 if s.idle_timeout is None else s.idle_timeout.total_seconds(),  # legacy rule only
            None if s.start is None else s.start.timestamp(),
        )

    @property
    def origin_s(self) -> float:
        return self.origin.timestamp()

    @property
    def step_s(self) -> float:
        return self.timestep.total_seconds()

    def cell(self, times: np.ndarray) -> np.ndarray:
        """Grid cell of each time (int64)."""
        return np.floor((np.asarray(times, dtype=np.float64) - self.origin_s) / self.step_s).astype(np.int64)

    def cell_of(self, t: float) -> int:
        return int(math.floor((t - self.origin_s) / self.step_s))

    @property
    def start_cell(self) -> int | None:
        return None if self.start is None else self.cell_of(self.start)

    def deadline(self, cell: int | np.ndarray) -> float | np.ndarray:
        """Record-time deadline of a cell, float seconds: its end + ``allowed_lateness``.

        An event of the cell counts iff its own record time is at most this.
        """
        return self.origin_s + (np.asarray(cell, dtype=np.float64) + 1.0) * self.step_s + self.allowed_lateness

    def inclusion(self, times: np.ndarray, record_times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Decide, per event, from its own fields only: ``(status, cell)``.

        ``times`` is each event's event time and ``record_times`` the
        timestamp of its own Kafka record (or CSV arrival time), float
        seconds. Status, first match wins: :data:`BEFORE_START` (event time
        before ``stream.start``), :data:`FAR_FUTURE` (event time more than
        ``max_future`` ahead of its own record time), :data:`LATE` (record
        time past the deadline of its event-time cell, see
        :meth:`deadline`), else :data:`ACCEPTED` in the cell of its event
        time. Nothing here reads another event, the wall clock or any state:
        this is the function ``docs/privacy.md`` §1.1 proves things about.
        """
        t = np.asarray(times, dtype=np.float64)
        r = np.asarray(record_times, dtype=np.float64)
        if r.shape != t.shape:
            raise ValueError(f"{r.size} record times for {t.size} events")
        cells = self.cell(t)
        status = np.zeros(t.size, dtype=np.int8)
        late = r > self.deadline(cells)
        status[late] = LATE
        status[t > r + self.max_future] = FAR_FUTURE
        if self.start is not None:
            status[t < self.start] = BEFORE_START
        return status, cells

    def bounds(self, cell: int) -> tuple[datetime, datetime]:
        """Exact start and end of a cell (UTC datetimes)."""
        start = self.origin + self.timestep * int(cell)
        return start, start + self.timestep


@dataclass(frozen=True, eq=False)
class TimestepData:
    """The buffered events of one cell: raw data. It leaves the process only as the journal's
    open-timestep buffers and, with scale-out, a worker's shuffle records to the releaser: both
    internal, protected like the input (``docs/privacy.md`` §9)."""

    cell: int
    flat: np.ndarray
    time: np.ndarray
    user_id: pa.Array

    def __len__(self) -> int:
        return int(self.flat.size)

    def counts(self, bins: int, per_person: int = 1) -> np.ndarray:
        """True histogram after contribution bounding (``per_person`` records per person).

        People with a single record keep it; the records of people with
        several go through :func:`histogram.build.bound_contributions`
        (smallest (event time, bin) kept) — the same result as bounding all
        rows, without sorting the rows of people who need no bounding.
        """
        if not len(self):
            return np.zeros(bins, dtype=np.int64)
        keep = self._kept(per_person)
        return count_bins(self.flat if keep is None else self.flat[keep], bins)

    def bounded(self, per_person: int = 1) -> TimestepData:
        """The rows :meth:`counts` counts (each person's ``per_person`` smallest (event time,
        bin) rows), as a smaller :class:`TimestepData`. Bounding a union of bounded parts gives
        the same counts as bounding the union (a person's smallest rows overall are among
        each part's smallest), which is what lets scale-out workers bound before handing over."""
        keep = None if not len(self) else self._kept(per_person)
        if keep is None:
            return self
        return TimestepData(self.cell, self.flat[keep], self.time[keep], self.user_id.take(pa.array(keep)))

    def _kept(self, per_person: int) -> np.ndarray | None:
        """Indexes of the rows kept by contribution bounding, in row order; None: all of them."""
        # only events sharing a user-id hash with another event can belong to a person with
        # several events (stream.ingest.people); the exact grouping runs on those alone
        shared = np.flatnonzero(shared_hash_rows(person_hashes(self.user_id)))
        if not shared.size:  # everyone once: nothing to bound
            return None
        enc = pc.dictionary_encode(self.user_id.take(pa.array(shared)))
        codes = enc.indices.to_numpy(zero_copy_only=False)
        per_user = np.bincount(codes, minlength=len(enc.dictionary))
        multi = per_user[codes] > per_person
        if not multi.any():
            return None
        single = np.ones(len(self), dtype=bool)
        idx = shared[multi]
        single[idx] = False
        keep = bound_contributions(codes[multi], self.flat[idx], self.time[idx], per_person)
        single[idx[keep]] = True
        return np.flatnonzero(single)


class _Buffer:
    __slots__ = ("flat", "time", "user")

    def __init__(self) -> None:
        self.flat: list[np.ndarray] = []
        self.time: list[np.ndarray] = []
        self.user: list[pa.Array] = []

    def add(self, flat: np.ndarray, time: np.ndarray, user: pa.Array) -> None:
        self.flat.append(flat)
        self.time.append(time)
        self.user.append(user)

    def __len__(self) -> int:
        return sum(a.size for a in self.flat)

    def data(self, cell: int) -> TimestepData:
        if not self.flat:
            return TimestepData(cell, np.zeros(0, np.int64), np.zeros(0), pa.array([], pa.string()))
        users = self.user[0] if len(self.user) == 1 else pa.concat_arrays(self.user)
        return TimestepData(cell, np.concatenate(self.flat), np.concatenate(self.time), users)


def _exclusive_running_max(values: np.ndarray, seed: float) -> np.ndarray:
    """``out[i] = max(seed, values[:i])``."""
    out = np.empty(values.size, dtype=np.float64)
    if values.size:
        out[0] = seed
        np.maximum.accumulate(values[:-1], out=out[1:])
        np.maximum(out[1:], seed, out=out[1:])
    return out


class Windower:
    """Assigns events to grid cells, decides lateness and which cells to seal.

    State (see :meth:`snapshot`): ``first_cell`` (None until the first
    accepted event, or fixed by ``stream.start``), ``next_index`` (index of
    the next timestep to seal), ``max_event_time`` (largest accepted event
    time, None before any), plus the buffers of open cells.

    Operational inputs set by the service, not part of the state:
    ``last_event_wall`` (wall time of the last accepted event: the idle
    timer) and :attr:`catching_up`.
    """

    #: True while the service reads a backlog (it was not caught up with its input when it
    #: polled these events). The wall clock then says nothing about how far the stream's event
    #: time may jump, so the far-future bound is the largest accepted event time (capped by
    #: ``now``): one event cannot move the watermark more than ``max_future`` ahead of the
    #: data, i.e. cannot seal more than ``max_future / timestep + 1`` timesteps by itself.
    #: False (live, or no clock): the bound is ``max(largest event time, now)``, so after a
    #: real quiet period new events near the clock are accepted.
    catching_up: bool = False

    def __init__(
        self,
        grid: Grid,
        *,
        first_cell: int | None = None,
        next_index: int = 0,
        max_event_time: float | None = None,
    ) -> None:
        self.grid = grid
        start_cell = grid.start_cell
        if start_cell is not None and first_cell is not None and first_cell != start_cell:
            raise StateError(
                f"window state starts at grid cell {first_cell} but stream.start is in cell {start_cell}"
            )
        if next_index < 0 or (next_index > 0 and first_cell is None and start_cell is None):
            raise StateError(f"window state has next_index {next_index} without a first cell")
        self.first_cell = start_cell if start_cell is not None else first_cell
        self.next_index = int(next_index)
        self.max_event_time = None if max_event_time is None else float(max_event_time)
        self.last_event_wall: float | None = None
        self._buffers: dict[int, _Buffer] = {}

    # -- state ----------------------------------------------------------------
    @property
    def sealed_frontier(self) -> int | None:
        """First cell not yet sealed, once something has been sealed (else None)."""
        if self.first_cell is None or self.next_index == 0:
            return None
        return self.first_cell + self.next_index

    @property
    def next_cell(self) -> int | None:
        return None if self.first_cell is None else self.first_cell + self.next_index

    @property
    def open_cells(self) -> list[int]:
        return sorted(self._buffers)

    @property
    def buffered_events(self) -> int:
        return sum(len(b) for b in self._buffers.values())

    def watermark(self) -> float | None:
        return None if self.max_event_time is None else self.max_event_time - self.grid.allowed_lateness

    # -- events ---------------------------------------------------------------
    def offer(self, valid: ValidBatch, *, now: float | None = None) -> np.ndarray:
        """Window the valid rows of a batch; returns a status per row.

        Status: :data:`ACCEPTED` (buffered), :data:`BEFORE_START`,
        :data:`FAR_FUTURE` (dead letters) or :data:`LATE`.
        """
        t = valid.time
        n = t.size
        status = np.zeros(n, dtype=np.int8)
        if not n:
            return status
        g = self.grid
        cells = g.cell(t)
        if g.start is not None:
            status[t < g.start] = BEFORE_START
        # cells sealed before this batch: by an earlier seal (idle/final) or by the watermark
        frontier = self.sealed_frontier
        if self.max_event_time is not None:
            wm_cell = g.cell_of(self.max_event_time - g.allowed_lateness)
            frontier = wm_cell if frontier is None else max(frontier, wm_cell)
        if frontier is not None and int(cells.min()) < frontier:
            status[(status == 0) & (cells < frontier)] = LATE
        cand = status == 0
        all_cand = bool(cand.all())
        seed = -math.inf if self.max_event_time is None else self.max_event_time
        # running maximum of the accepted event times before each event
        pm = _exclusive_running_max(t if all_cand else np.where(cand, t, -math.inf), seed)
        # far future: later than bound + max_future, per event, where bound = the largest accepted
        # time so far, raised to ``now`` when live, capped at ``now`` while catching up (see
        # :attr:`catching_up`; with no accepted time yet, ``now``). Far-future events do not raise
        # the maximum, so recompute until no new one appears (converges from below; one pass
        # unless the batch holds far-future events).
        far = np.zeros(n, dtype=bool)
        while True:
            if now is None:
                thr = pm
            elif self.catching_up:
                thr = np.where(np.isfinite(pm), np.minimum(pm, float(now)), float(now))
            else:
                thr = np.maximum(pm, float(now))
            new = cand & ~far & (t > thr + g.max_future) & np.isfinite(thr)
            if not new.any():
                break
            far |= new
            pm = _exclusive_running_max(np.where(cand & ~far, t, -math.inf), seed)
        if far.any():
            status[far] = FAR_FUTURE
        acc = cand & ~far
        # late by the watermark as it moves inside this batch (a late event never raises the maximum)
        wm_time = np.where(np.isfinite(pm), pm - g.allowed_lateness, t - g.step_s)
        late = acc & (cells < g.cell(wm_time))
        if late.any():
            status[late] = LATE
            acc &= ~late
        if acc.any():
            self._accept(valid, acc, cells, now)
        return status

    def offer_recorded(self, valid: ValidBatch, record_time: np.ndarray) -> np.ndarray:
        """Window the valid rows of a batch by the data-independent rule; a status per row.

        ``record_time`` holds each row's own record time (Kafka record
        timestamp or CSV arrival time, float seconds), aligned with
        ``valid``. Whether a row counts, and in which cell, is
        :meth:`Grid.inclusion` of its own fields; the only state consulted
        is which cells were already declared complete (sealed): a row that
        passes :meth:`Grid.inclusion` for a sealed cell gets
        :data:`AFTER_SEAL` — it cannot change a release that is out. The
        largest event time is tracked for reporting only; it decides nothing.

        Requires ``stream.start`` (the first timestep must be public).
        """
        if self.grid.start is None:
            raise StateError(
                "record-time inclusion needs a public first timestep: set stream.start "
                "(the first timestep must not be chosen by the data)"
            )
        t = valid.time
        status, cells = self.grid.inclusion(t, record_time)
        if not t.size:
            return status
        return self._admit(valid, status, cells, self.next_cell)

    def offer_whole(self, valid: ValidBatch) -> np.ndarray:
        """Window rows of an input that is known whole (offline, no arrival times); a status per row.

        The whole file is available before anything is released, so nothing is late: every row
        counts in the cell of its own event time (:data:`BEFORE_START` before ``stream.start``
        is the only rejection). The caller seals only at the end of the input
        (:meth:`complete` with ``final=True``); a row for a cell sealed earlier would get
        :data:`AFTER_SEAL`. Decided from each row's own event time and public configuration
        only, so ``docs/privacy.md`` §1.1's lemma holds with every record time taken as
        "before every deadline". Without ``stream.start`` the first timestep is the smallest
        cell in the file (a documented limitation: it reveals that some event happened then).
        """
        t = valid.time
        status = np.zeros(t.size, dtype=np.int8)
        if not t.size:
            return status
        g = self.grid
        cells = g.cell(t)
        if g.start is not None:
            status[t < g.start] = BEFORE_START
        return self._admit(valid, status, cells, self.next_cell if self.next_index else None)

    def _admit(self, valid: ValidBatch, status: np.ndarray, cells: np.ndarray, nxt: int | None) -> np.ndarray:
        """Rows that passed the rule for a cell already sealed (before ``nxt``) become
        :data:`AFTER_SEAL`; the rest of the accepted rows are buffered. Returns ``status``."""
        if nxt is not None:
            status[(status == ACCEPTED) & (cells < nxt)] = AFTER_SEAL
        acc = status == ACCEPTED
        if acc.any():
            self._accept(valid, acc, cells, None)
        return status

    def complete(self, record_frontier: float | None, *, final: bool = False) -> range:
        """The cells known complete, in order: ``record_frontier`` is past their deadline.

        ``record_frontier`` is the smallest, over the assigned partitions, of
        the record time each partition is known to be past (its last record
        time, or ``τ − stream.clock_skew`` once it has been read to an end offset
        observed at wall time ``τ``: :mod:`stream.service.progress`). A cell is complete when its deadline
        (:meth:`Grid.deadline`) is strictly below it: no record with a record
        time at most the deadline can still arrive. ``final`` (end of input)
        completes every cell up to the largest buffered one. Completeness
        only decides *when* a cell is released, never what it contains.
        """
        nxt = self.next_cell
        if nxt is None:
            return range(0)
        limit = nxt
        if record_frontier is not None and math.isfinite(record_frontier):
            g = self.grid
            # smallest cell whose deadline is >= the frontier
            lim = math.ceil((record_frontier - g.allowed_lateness - g.origin_s) / g.step_s) - 1
            while float(g.deadline(lim)) < record_frontier:
                lim += 1
            while lim > nxt and float(g.deadline(lim - 1)) >= record_frontier:
                lim -= 1
            limit = max(limit, lim)
        if final and self._buffers:
            limit = max(limit, max(self._buffers) + 1)
        return range(nxt, limit)

    def _accept(self, valid: ValidBatch, acc: np.ndarray, cells: np.ndarray, now: float | None) -> None:
        t = valid.time
        tmax = float(t[acc].max())
        self.max_event_time = tmax if self.max_event_time is None else max(self.max_event_time, tmax)
        if now is not None:
            self.last_event_wall = float(now)
        pos = np.flatnonzero(acc)
        c = cells[pos]
        cmin = int(c.min())
        if self.first_cell is None or (self.next_index == 0 and self.grid.start is None and cmin < self.first_cell):
            self.first_cell = cmin
        if pos.size == t.size:
            flat, times, users = valid.flat, t, valid.user_id
        else:
            flat, times, users = valid.flat[pos], t[pos], valid.user_id.take(pa.array(pos))
        cmax = int(c.max())
        if cmin == cmax:
            self._buffers.setdefault(cmin, _Buffer()).add(flat, times, users)
            return
        if bool(np.all(c[1:] >= c[:-1])):  # in cell order already (the usual case): slice, no copy
            sc, order = c, None
        else:
            order = np.argsort(c, kind="stable")
            sc = c[order]
        cuts = np.flatnonzero(np.diff(sc)) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [sc.size]))
        if order is not None:
            users, flat, times = users.take(pa.array(order)), flat[order], times[order]
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            self._buffers.setdefault(int(sc[a]), _Buffer()).add(flat[a:b], times[a:b], users.slice(a, b - a))

    # -- sealing --------------------------------------------------------------
    def idle(self, now: float | None) -> bool:
        return (
            now is not None
            and self.last_event_wall is not None
            and float(now) - self.last_event_wall >= self.grid.idle_timeout
        )

    def sealable(self, *, now: float | None = None, final: bool = False) -> range:
        """The cells that may be sealed now, in order (possibly empty).

        When events are open but no arrival time is known (after a restore),
        the first call with ``now`` starts the idle clock.
        """
        nxt = self.next_cell
        if nxt is None:
            return range(0)
        if now is not None and self.last_event_wall is None and self.max_event_time is not None \
                and self.grid.cell_of(self.max_event_time) >= nxt:
            self.last_event_wall = float(now)
        limit = nxt
        if self.max_event_time is not None:
            limit = max(limit, self.grid.cell_of(self.max_event_time - self.grid.allowed_lateness))
            if final or self.idle(now):
                limit = max(limit, self.grid.cell_of(self.max_event_time) + 1)
        return range(nxt, limit)

    def take(self, cell: int) -> TimestepData:
        """Remove and return the events of ``cell`` (which must be the next to seal)."""
        if cell != self.next_cell:
            raise StateError(f"cell {cell} is not the next to seal ({self.next_cell})")
        buf = self._buffers.pop(cell, None)
        return (buf or _Buffer()).data(cell)

    def drain(self) -> list[TimestepData]:
        """Remove and return every open cell's accepted events, in cell order (a scale-out worker
        hands them to the releaser; nothing is sealed here)."""
        cells = sorted(self._buffers)
        return [self._buffers.pop(c).data(c) for c in cells]

    def add_rows(self, data: TimestepData) -> bool:
        """Add already-accepted events of one cell (a scale-out worker decided inclusion by
        :meth:`Grid.inclusion`); False, and nothing added, when the cell is already sealed."""
        nxt = self.next_cell
        if nxt is not None and data.cell < nxt:
            return False
        if not len(data):
            return True
        if self.first_cell is None:
            self.first_cell = data.cell
        tmax = float(np.max(data.time))
        self.max_event_time = tmax if self.max_event_time is None else max(self.max_event_time, tmax)
        self._buffers.setdefault(data.cell, _Buffer()).add(data.flat, data.time, data.user_id)
        return True

    def put_back(self, data: TimestepData) -> None:
        """Undo :meth:`take` (when the step after it failed)."""
        if len(data):
            buf = _Buffer()
            buf.add(data.flat, data.time, data.user_id)
            self._buffers[data.cell] = buf

    def advance(self) -> None:
        """Mark the next cell sealed."""
        if self.first_cell is None:
            raise StateError("nothing to seal: the stream has no first timestep yet")
        self.next_index += 1

    # -- snapshots ------------------------------------------------------------
    def snapshot(self, *, include_buffers: bool = False) -> dict[str, Any]:
        """JSON-ready state. With ``include_buffers`` also the open cells' events (raw data: internal only).

        The idle timer (``last_event_wall``) is deliberately not part of it: a restored windower
        starts its idle clock afresh at the first :meth:`sealable` call with ``now`` (the
        service also restarts it). Idle means "the service was reading the input, had read
        all of it, and no event came for ``idle_timeout``"; while the process was down it read
        nothing, so downtime is no evidence of a quiet stream. Counting it as idle would seal
        open timesteps before the backlog written meanwhile is read, and send those events to
        the late topic. The cost of restarting the timer is at most one ``idle_timeout`` of
        extra delay before a quiet stream's last timesteps are sealed.
        """
        data: dict[str, Any] = {
            "version": WINDOW_STATE_VERSION,
            "first_cell": self.first_cell,
            "next_index": self.next_index,
            "max_event_time": self.max_event_time,
        }
        if include_buffers:
            data["buffers"] = [
                {
                    "cell": cell,
                    "flat": encode_array(d.flat),
                    "time": encode_array(d.time),
                    "user_id": d.user_id.to_pylist(),
                }
                for cell, d in ((c, self._buffers[c].data(c)) for c in sorted(self._buffers))
            ]
        return data

    @classmethod
    def restore(cls, grid: Grid, data: dict[str, Any]) -> Windower:
        if not isinstance(data, dict) or data.get("version", WINDOW_STATE_VERSION) != WINDOW_STATE_VERSION:
            version = data.get("version") if isinstance(data, dict) else type(data).__name__
            raise StateError(
                f"unsupported window snapshot (version {version!r}, this build reads {WINDOW_STATE_VERSION}); "
                "restore it with the release that wrote it, or start a new stream.id"
            )
        try:
            first = data["first_cell"]
            mx = data["max_event_time"]
            w = cls(
                grid,
                first_cell=None if first is None else int(first),
                next_index=int(data["next_index"]),
                max_event_time=None if mx is None else float(mx),
            )
            for item in data.get("buffers") or ():
                cell = int(item["cell"])
                flat = np.array(decode_array(item["flat"]), dtype=np.int64)
                time = np.array(decode_array(item["time"]), dtype=np.float64)
                users = pa.array(item["user_id"], type=pa.string())
                if not (flat.size == time.size == len(users)):
                    raise StateError(f"window snapshot buffer of cell {cell} has columns of different lengths")
                if w.next_cell is not None and cell < w.next_cell:
                    raise StateError(f"window snapshot buffers sealed cell {cell}")
                w._buffers.setdefault(cell, _Buffer()).add(flat, time, users)
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed window snapshot: {exc}") from exc
        return w
