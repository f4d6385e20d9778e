"""Catching up: how much of a backlog one checkpoint takes, and where the stream stops.

A service that starts behind its input (after downtime, or a backfill whose ``stream.start``
lies far in the past) finds many timesteps complete at once. Three things bound that work:

* :func:`checkpoint_room`: at most ``service.max_releases_per_checkpoint`` releases go into one
  checkpoint (one journal frame, one Kafka transaction). The rest stay complete, with their
  events in the windowing snapshot the checkpoint journals, and are sealed by the next
  checkpoints, one after another. The offsets a checkpoint commits are those of every record
  read so far: each such record is counted in a sealed timestep (this or an earlier checkpoint),
  buffered in a timestep not yet sealed (in the snapshot, complete or not), or dead-lettered /
  late (a record of this or an earlier checkpoint) — so a restart between two checkpoints of a
  catch-up resumes exactly where the last committed one left off (``stream/service/loop.py``).
* :class:`StreamEnd`: ``--max-timesteps`` and ``stream.end`` (an instant, or ``last-record``)
  give the index of the first timestep the service never seals; it commits what it released
  and exits 0 there.
* :func:`catch_up_summary`: what the start-up log says the catch-up is (how many timesteps are
  already complete by the wall clock, from when to when, and what bounds it).

Nothing here reads an event's content: the end is public configuration, or (``last-record``)
the record times of the input records below the end offsets read at the first start-up — what
that reveals is stated in ``docs/privacy.md`` §1.3.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from stream.ingest.windowing import Grid

__all__ = ["LAST_RECORD", "LastRecord", "StreamEnd", "catch_up_summary", "checkpoint_room"]

LAST_RECORD = "last-record"
#: a catch-up above this many timesteps is logged as a warning (with what bounds it)
LARGE_CATCH_UP = 10_000


def checkpoint_room(pending: int, per_checkpoint: int, next_index: int, stop_index: int | None) -> int:
    """How many more timesteps the next checkpoint may take (0: checkpoint first, or the end).

    Args:
        pending: releases already waiting for the next checkpoint.
        per_checkpoint: ``service.max_releases_per_checkpoint``.
        next_index: the next timestep the pipeline would seal.
        stop_index: the first timestep never to seal (None: no end).
    """
    room = max(0, per_checkpoint - pending)
    if stop_index is not None:
        room = min(room, max(0, stop_index - next_index))
    return room


@dataclass
class LastRecord:
    """``stream.end: last-record``: the largest record time read before the service first caught up.

    While undecided, every record read adds its record time (float seconds) to ``record_time``
    (the largest so far); the first time the service has read every input partition up to its
    high watermark, :meth:`decide` freezes it. Both are journaled with every checkpoint, so a
    restart resumes them: once a checkpoint carried the decision, the end never moves, whatever is
    appended to the topic later (and no release past it can be visible before that checkpoint).
    """

    record_time: float | None = None
    decided: bool = False

    def observe(self, stamps: Iterable[float]) -> None:
        """Record times (seconds) of records just read."""
        if self.decided:
            return
        top = max(stamps, default=None)
        if top is not None and (self.record_time is None or top > self.record_time):
            self.record_time = top

    def decide(self) -> None:
        self.decided = True

    def snapshot(self) -> dict[str, Any]:
        return {"record_time": self.record_time, "decided": self.decided}

    @classmethod
    def restore(cls, data: Mapping[str, Any]) -> LastRecord:
        t = data.get("record_time")
        return cls(None if t is None else float(t), bool(data.get("decided")))


@dataclass
class StreamEnd:
    """The first timestep index the service never seals, from ``--max-timesteps`` and ``stream.end``.

    Args:
        grid: the timestep grid (``stream.start`` fixes the first cell in the record-time modes).
        max_timesteps: ``--max-timesteps`` (an index bound: timesteps 0..K-1), or None.
        end: ``stream.end``: a datetime, :data:`LAST_RECORD`, or None.
        last: the ``last-record`` tracker (``end == LAST_RECORD`` only).
    """

    grid: Grid
    max_timesteps: int | None
    end: datetime | str | None
    last: LastRecord | None = field(default=None)

    def end_cell(self, positions: Mapping[int, int]) -> int | None:
        """The last grid cell of the stream (None: not bounded, or not known yet)."""
        if isinstance(self.end, datetime):
            # the timesteps that start before the end: [start, end)
            return math.ceil((self.end.timestamp() - self.grid.origin_s) / self.grid.step_s) - 1
        if self.end == LAST_RECORD and self.last is not None and self.last.decided:
            t = self.last.record_time
            return None if t is None else self.grid.cell_of(t)
        return None

    def empty_topic(self, positions: Mapping[int, int]) -> bool:
        """``last-record`` over an input that had no record when the service first caught up."""
        return (self.end == LAST_RECORD and self.last is not None and self.last.decided
                and self.last.record_time is None)

    def stop_index(self, first_cell: int | None, positions: Mapping[int, int]) -> int | None:
        """The first timestep index never sealed (None: no bound known yet)."""
        bounds = [] if self.max_timesteps is None else [self.max_timesteps]
        if self.empty_topic(positions):
            bounds.append(0)
        cell = self.end_cell(positions)
        if cell is not None and first_cell is not None:
            bounds.append(max(0, cell - first_cell + 1))
        return min(bounds) if bounds else None

    def reason(self) -> str:
        """Which setting bounds the stream (for the log)."""
        parts = []
        if self.max_timesteps is not None:
            parts.append(f"--max-timesteps {self.max_timesteps}")
        if self.end is not None:
            parts.append(f"stream.end {self.end.isoformat() if isinstance(self.end, datetime) else self.end}")
        return ", ".join(parts) or "nothing (no stream.end, no --max-timesteps)"


def catch_up_summary(grid: Grid, next_cell: int | None, next_index: int, now: float, skew: float,
                     stop_index: int | None) -> dict[str, Any]:
    """The catch-up a start-up faces, for the log: the timesteps from the next one to the last one
    the wall clock already completes (its deadline before ``now − skew``), capped by the end.

    Public facts only (configuration, the wall clock, how far the stream already is)."""
    if next_cell is None:
        return {"timesteps": 0}
    frontier = now - skew
    last_complete = math.ceil((frontier - grid.allowed_lateness - grid.origin_s) / grid.step_s) - 2
    while float(grid.deadline(last_complete + 1)) < frontier:
        last_complete += 1
    count = max(0, last_complete - next_cell + 1)
    if stop_index is not None:
        count = min(count, max(0, stop_index - next_index))
    out: dict[str, Any] = {"timesteps": count}
    if count:
        out["from"] = grid.bounds(next_cell)[0].isoformat()
        out["to"] = grid.bounds(next_cell + count - 1)[1].isoformat()
    return out
