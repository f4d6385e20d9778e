"""The lab's one reader of input files: an events CSV or a counts file.

Every lab path that reads a file goes through here:

* ``dpstream evaluate`` (:func:`load_truth`): the true per-timestep histograms (or, for a
  personalized stream, the counted rows routed to their budget level);
* ``dpstream evaluate --mechanisms`` (:func:`load_records`): the bounded record table of every
  timestep, for mechanisms that release from records over domains whose histogram does not fit;
* ``dpstream replay`` (:mod:`stream.lab.replay`): every sealed timestep stepped and written,
  byte for byte what the service publishes.

An events CSV is read by one loop, :func:`feed_events`: the service's reader
(:class:`stream.ingest.csvio.EventCsvReader`) yields blocks; each block is *offered* to the
caller's windowing (``offer(batch, arrival)``, returning the rejected rows: the release
pipeline's :meth:`stream.pipeline.ReleasePipeline.offer` for evaluate and replay, validation and
a bare windower for record tables); the rejections of a block (the reader's and the offer's) are
*noted* in the caller's report, or stop the read under ``strict`` naming the first rejected
line; and timesteps are *sealed* (``seal(frontier, final)``) whenever arrival times move the
record-time frontier, and once at the end of the input. Which events count is the service's
rule (``docs/privacy.md`` §1.1): with ``schema.arrival_time`` each row's own arrival time, in
arrival order; without it the whole file is known, every event counts in its event-time
timestep and everything is sealed at the end. No wall clock is read.

A counts file (one row of true counts per timestep, :func:`stream.ingest.csvio.read_counts`) is
taken as already aggregated and bounded (:func:`counts_rows`, :func:`load_counts`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from histogram.noise import Randomness
from stream.config import Settings
from stream.ingest.csvio import DEFAULT_BLOCK_SIZE
from stream.ingest.events import KEY_USER_ID, REASONS, Rejections
from stream.lab.errors import EvaluationError, InputError

__all__ = [
    "FIRST_ROWS",
    "InputError",
    "InputReport",
    "RecordTruth",
    "Truth",
    "counts_rows",
    "estimate_rows",
    "feed_events",
    "load_counts",
    "load_records",
    "load_truth",
    "note_rejections",
    "pipeline_offer",
    "sniff_kind",
    "strict_message",
]

#: line numbers kept per rejection reason in a report
FIRST_ROWS = 5

#: ``offer(batch, arrival)``: window one block's valid rows, return the rejected ones
Offer = Callable[[Any, "np.ndarray | None"], Rejections]
#: ``seal(frontier, final)``: seal every timestep complete at record-time ``frontier`` (``final``: all)
Seal = Callable[[float, bool], None]


def note_rejections(rejected: dict[str, int], first_rows: dict[str, list[int]], rej: Rejections) -> None:
    """Add ``rej`` to the counts per reason and keep the first :data:`FIRST_ROWS` line numbers of each."""
    if not len(rej):
        return
    for reason, n in rej.counts().items():
        rejected[reason] = rejected.get(reason, 0) + n
    rows = rej.row
    for code in np.unique(rej.reason).tolist():
        reason = REASONS[code - 1]
        r = np.sort(rows[(rej.reason == code) & (rows >= 0)])[:FIRST_ROWS].tolist()
        first_rows[reason] = sorted(set(first_rows.get(reason, [])) | set(r))[:FIRST_ROWS]


def strict_message(path: str | Path, rej: Rejections) -> str:
    """The ``--strict`` error for the first rejected row (smallest line number) of ``rej``."""
    r = rej.first()
    assert r is not None
    where = f"line {r.row}" if r.row is not None else "a line"
    return f"{path}: {where}: {r.reason}: {r.detail} (--strict stops at the first rejected row)"


def estimate_rows(path: Path) -> int:
    """Rows in a CSV file, estimated from the size and the first 64 KiB (for the progress bar)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(1 << 16)
    lines = max(1, head.count(b"\n"))
    return max(1, int(size * lines / max(1, len(head))) - 1)


@dataclass(frozen=True)
class EventFeed:
    """What :func:`feed_events` read: ``rows`` (data rows, rejected ones included) and the header's
    columns the configuration does not know (``unknown_columns``)."""

    rows: int
    unknown_columns: tuple[str, ...]


def feed_events(
    settings: Settings,
    path: str | Path,
    *,
    offer: Offer,
    seal: Seal,
    note: Callable[[Rejections], None],
    strict: bool = False,
    error: Callable[[str], Exception] = InputError,
    progress: bool | None = False,
    desc: str = "read",
    block_size: int = DEFAULT_BLOCK_SIZE,
    on_open: Callable[[Any], None] | None = None,
) -> EventFeed:
    """Read the events CSV ``path`` block by block through ``offer``, ``note`` and ``seal``.

    For each block of the service's reader: its valid-looking rows go to ``offer(batch, arrival)``
    (``arrival``: the rows' arrival times in float seconds, or None when the file has none, i.e.
    the whole input is known); the reader's rejections and the offer's are passed together to
    ``note`` — or, under ``strict``, raise ``error`` naming the first rejected line (nothing of
    that block is noted). After a block with arrival times, ``seal(frontier, False)`` with the last
    arrival time read; at the end ``seal(frontier, True)`` (``-inf`` without arrival times).
    ``on_open(reader)`` sees the reader before the first block (e.g. its ``unknown_columns``).
    ``progress``: a bar of rows read on stderr (None: only on a terminal).

    Raises:
        stream.ingest.csvio.CsvError: the file cannot be read or its header lacks configured columns.
        ``error``: ``strict`` and a row was rejected.
    """
    from stream.ingest.csvio import EventCsvReader
    from stream.lab.progress import progress_bar

    p = Path(path)
    reader = EventCsvReader(p, settings, block_size=block_size)
    if on_open is not None:
        on_open(reader)
    frontier = -math.inf
    rows = 0
    bar = progress_bar(estimate_rows(p), progress, desc, unit="row") if progress is not False else None
    try:
        for block in reader:
            n = len(block.batch) + len(block.rejections)
            rows += n
            if bar is not None:
                bar.update(n)
            arrival = block.arrival
            offered = offer(block.batch, arrival) if len(block.batch) else Rejections.empty()
            rej = Rejections.concat([block.rejections, offered]) if len(offered) else block.rejections
            if len(rej):
                if strict:
                    raise error(strict_message(p, rej))
                note(rej)
            if arrival is not None and arrival.size:
                frontier = float(arrival[-1])
                seal(frontier, False)
        seal(frontier, True)
    finally:
        if bar is not None:
            bar.close()
    return EventFeed(rows, tuple(reader.unknown_columns))


def pipeline_offer(pipe: Any) -> Offer:
    """The release pipeline's own validation and windowing as an ``offer`` for :func:`feed_events`:
    arrival times decide per event; without them every event counts in its event-time timestep."""

    def offer(batch: Any, arrival: np.ndarray | None) -> Rejections:
        return pipe.offer(batch, record_time=arrival, whole_input=arrival is None)

    return offer


# -- reports ------------------------------------------------------------------------------------


@dataclass
class InputReport:
    """What reading the input found (bad rows are counted, never silently dropped)."""

    kind: str
    path: str
    rows: int = 0
    accepted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    first_rows: dict[str, list[int]] = field(default_factory=dict)
    bounded_out: int = 0
    unknown_columns: list[str] = field(default_factory=list)

    @property
    def late(self) -> int:
        return self.rejected.get("timestep_sealed", 0)

    @property
    def bad_rows(self) -> int:
        """Dead-lettered rows (every rejection but the late ones)."""
        return int(sum(v for k, v in self.rejected.items() if k != "timestep_sealed"))

    def note(self, rej: Rejections) -> None:
        """Count a :class:`stream.ingest.events.Rejections` and keep the first line numbers per reason."""
        note_rejections(self.rejected, self.first_rows, rej)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "rows": self.rows,
            "accepted": self.accepted,
            "bad_rows": self.bad_rows,
            "late": self.late,
            "rejected": dict(sorted(self.rejected.items())),
            "first_rows": dict(sorted(self.first_rows.items())),
            "bounded_out": self.bounded_out,
        }

    def summary(self) -> str:
        if self.kind == "counts":
            return f"read {self.rows} timesteps from the counts file {self.path}"
        parts = [f"read {self.rows} rows from {self.path}", f"{self.accepted} accepted"]
        if self.bounded_out:
            parts.append(f"{self.bounded_out} dropped by contribution bounding (one record per person per timestep)")
        if self.bad_rows:
            reasons = ", ".join(f"{k}: {v}" for k, v in sorted(self.rejected.items()) if k != "timestep_sealed")
            parts.append(f"{self.bad_rows} bad rows ({reasons})")
        if self.late:
            parts.append(f"{self.late} late (timestep_sealed)")
        return "; ".join(parts)

    def details(self) -> list[str]:
        """One line per rejection reason with its first line numbers."""
        out = []
        for reason in sorted(self.rejected):
            rows = self.first_rows.get(reason)
            first = f" (first lines {', '.join(map(str, rows))})" if rows else ""
            out.append(f"{reason}: {self.rejected[reason]}{first}")
        if self.unknown_columns:
            out.append(f"note: column(s) {self.unknown_columns} are not in the config; rows with a value there "
                       "are rejected as unknown_attribute")
        return out


@dataclass(frozen=True)
class Truth:
    """True per-timestep histograms and the report of how they were read.

    ``personal`` (``privacy.personal`` only): the counted events per timestep routed to their
    budget level (:class:`stream.lab.personal.PersonalRows`), which the runs route by their own
    Sampling coins; ``counts`` is then everyone's histogram."""

    counts: np.ndarray
    report: InputReport
    personal: Any = None


@dataclass(frozen=True)
class RecordTruth:
    """Per-timestep record tables (``(n_t, m)`` int64 levels, after contribution bounding)."""

    records: list[np.ndarray]
    levels: tuple[int, ...]
    report: InputReport

    @property
    def timesteps(self) -> int:
        return len(self.records)


# -- histograms ---------------------------------------------------------------------------------


def sniff_kind(path: str | Path, settings: Settings) -> str:
    """``events`` when the header names the user-id and event-time columns, else ``counts``."""
    from stream.ingest.csvio import CsvError, key_user_id_in_csv, read_header

    try:
        cols = set(read_header(path))
    except CsvError as exc:
        raise InputError(str(exc)) from None
    schema = settings.schema_
    if schema.user_id == KEY_USER_ID and schema.event_time in cols:
        raise InputError(key_user_id_in_csv(path))
    return "events" if {schema.user_id, schema.event_time} <= cols else "counts"


def load_truth(
    settings: Settings,
    path: str | Path,
    *,
    kind: str = "auto",
    strict: bool = False,
    progress: bool | None = None,
) -> Truth:
    """Read ``path`` into true per-timestep histograms, as the service would window it.

    Events go through the service's own code: the CSV reader
    (:mod:`stream.ingest.csvio`), row validation (:func:`stream.ingest.events.validate_batch`),
    the windower (:class:`stream.ingest.windowing.Windower`: the same inclusion
    rule as replay — arrival times when ``schema.arrival_time`` is set, else every
    event in its event-time timestep) and contribution bounding
    (:meth:`stream.ingest.windowing.TimestepData.counts`). A counts file is read
    with the counts reader and taken as already aggregated and bounded.

    Raises:
        InputError: the file is missing or unreadable, has no timesteps, or
            (``strict``) holds a rejected row; the message names the row.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"input file {p} does not exist")
    if kind == "auto":
        kind = sniff_kind(p, settings)
    if kind == "counts":
        if settings.privacy.personal is not None:
            raise InputError(f"{p} is a counts file, which has no budget tiers: a personalized stream "
                             "(privacy.personal) is evaluated from its events file")
        return load_counts(settings, p)
    if kind != "events":
        raise EvaluationError(f"--input-kind must be auto, events or counts, got {kind!r}")
    return _load_events(settings, p, strict=strict, progress=progress)


def _load_events(settings: Settings, path: Path, *, strict: bool, progress: bool | None) -> Truth:
    from stream.ingest.csvio import CsvError
    from stream.lab.personal import PersonalRows, reading_settings
    from stream.pipeline import ReleasePipeline

    # The service's pipeline validates and windows (pipe.offer, as replay does); the sealed
    # timesteps are counted with its windower's own contribution bounding instead of being
    # stepped: the evaluation steps each method itself, R times. A personalized stream is read
    # under its declaration's Minimum plan (each event routed to its budget level, no coins) and
    # its counted events are kept: each run routes them by its own coins (stream.lab.personal).
    personal = settings.privacy.personal is not None
    pipe = ReleasePipeline(reading_settings(settings) if personal else settings, noise=Randomness.seeded(0))
    bins = pipe.input_bins
    bound = settings.privacy.contribution_bound
    window = pipe.window
    report = InputReport("events", str(path))
    hists: list[np.ndarray] = []
    kept_flat: list[np.ndarray] = []
    kept_persons: list[Any] = []
    kept_cells: list[int] = []

    def seal(frontier: float, final: bool) -> None:
        for cell in window.complete(frontier, final=final):
            data = window.take(cell)
            if personal:  # the rows themselves: each run routes them by its own coins
                kept = data.bounded(bound)
                kept_flat.append(np.asarray(kept.flat, dtype=np.int64))
                kept_persons.append(kept.user_id)
                kept_cells.append(int(cell))
                report.bounded_out += len(data) - len(kept)
            else:
                counts = data.counts(bins, bound)
                report.bounded_out += len(data) - int(counts.sum())
                hists.append(counts)
            window.advance()

    def opened(reader: Any) -> None:
        report.unknown_columns = list(reader.unknown_columns)

    try:
        feed = feed_events(settings, path, offer=pipeline_offer(pipe), seal=seal, note=report.note, strict=strict,
                           progress=progress, desc="read", on_open=opened)
    except CsvError as exc:
        raise InputError(str(exc)) from None
    report.rows = feed.rows
    report.accepted = pipe.stats.events_accepted
    if not (kept_flat if personal else hists):
        raise InputError(f"{path}: no valid events, so no timesteps to evaluate ({report.summary()})")
    if personal:
        domain = settings.domain().size
        rows = PersonalRows(tuple(kept_flat), tuple(kept_persons), domain, bins // domain - 1, tuple(kept_cells))
        return Truth(rows.totals(), report, rows)
    return Truth(np.vstack(hists), report)


def counts_rows(path: str | Path, bins: int) -> np.ndarray:
    """The ``(T, bins)`` rows of a counts file (:func:`stream.ingest.csvio.read_counts`; raises its
    :class:`~stream.ingest.csvio.CsvError`)."""
    from stream.ingest.csvio import read_counts

    return read_counts(path, bins)


def load_counts(settings: Settings, path: str | Path) -> Truth:
    """A counts file as :class:`Truth`: already aggregated and bounded; InputError when unreadable."""
    from stream.ingest.csvio import CsvError

    try:
        arr = counts_rows(path, settings.domain().size)
    except CsvError as exc:
        raise InputError(str(exc)) from None
    report = InputReport("counts", str(path), rows=int(arr.shape[0]), accepted=int(arr.shape[0]))
    return Truth(arr, report)


# -- record tables ------------------------------------------------------------------------------


def load_records(settings: Settings, path: str | Path, *, strict: bool = False) -> RecordTruth:
    """The bounded records of every timestep of an events CSV, as the service would window them.

    Same reader, validation, inclusion rule and contribution bounding as :func:`load_truth`, but
    no engine and no histogram: the memory is the records', whatever the domain's size. Rows the
    windowing turns away are counted by reason (not by line, and ``strict`` does not stop on them).
    """
    from stream.ingest.csvio import CsvError
    from stream.ingest.events import validate_batch
    from stream.ingest.windowing import ACCEPTED, Grid, Windower

    p = Path(path)
    if not p.is_file():
        raise InputError(f"input file {p} does not exist")
    domain = settings.domain()
    window = Windower(Grid.from_settings(settings), next_index=0)
    bound = settings.privacy.contribution_bound
    report = InputReport("events", str(p))
    records: list[np.ndarray] = []

    def offer(batch: Any, arrival: np.ndarray | None) -> Rejections:
        valid, bad = validate_batch(batch, domain, numeric_user_ids=settings.schema_.numeric_user_ids)
        status = (window.offer_recorded(valid, np.asarray(arrival, dtype=np.float64)[valid.position])
                  if arrival is not None else window.offer_whole(valid))
        report.accepted += int((status == ACCEPTED).sum())
        for code in np.unique(status[status != ACCEPTED]).tolist():  # windowing's reasons, by name
            reason = REASONS[int(code) - 1]
            report.rejected[reason] = report.rejected.get(reason, 0) + int((status == code).sum())
        return bad

    def seal(frontier: float, final: bool) -> None:
        for cell in window.complete(frontier, final=final):
            data = window.take(cell)
            kept = data.bounded(bound)
            report.bounded_out += len(data) - len(kept)
            flat = np.asarray(kept.flat, dtype=np.int64)
            records.append(np.stack(domain.unravel(flat), axis=1).astype(np.int64) if flat.size
                           else np.zeros((0, len(domain.shape)), dtype=np.int64))
            window.advance()

    def opened(reader: Any) -> None:
        report.unknown_columns = list(reader.unknown_columns)

    try:
        feed = feed_events(settings, p, offer=offer, seal=seal, note=report.note, strict=strict, on_open=opened)
    except CsvError as exc:
        raise InputError(str(exc)) from None
    report.rows = feed.rows
    if not records:
        raise InputError(f"{p}: no valid events, so no timesteps to evaluate ({report.summary()})")
    return RecordTruth(records, tuple(int(v) for v in domain.shape), report)
