"""Reading input files: the events CSV (streamed in blocks) and the counts file.

Events CSV
    A header row, then one event per line. The config names the user-id and
    event-time columns (``schema.user_id``, ``schema.event_time``) and the
    attributes (``schema.attributes``); every one of them must be in the
    header (else :class:`CsvError`). The file is read with pyarrow's
    streaming CSV reader, in blocks of ``block_size`` bytes, every column as
    text; values are parsed and
    checked by :func:`stream.ingest.events.validate_batch`, vectorised. Memory is a
    few blocks, whatever the file size.

    Bad rows are never dropped silently: each is reported with its line
    number (the header is line 1) and a reason code:

    * a line with fewer fields than the header → ``missing_field``;
      more fields → ``unknown_attribute``; an empty field → ``missing_field``;
    * a value in a header column the config does not know → ``unknown_attribute``
      (leave the cell empty, or drop the column, to use such a file);
    * a user id that is not UTF-8 text → ``invalid_user_id`` (other columns'
      bad bytes fail to parse or to match and get that reason);
    * the rest (unparsable numbers and times, out-of-domain values, …) comes
      from :func:`~stream.ingest.events.validate_batch` and the windowing.

    Lines are physical lines: quoted fields may not contain line breaks.

Counts file
    One row per timestep, one column per bin (bin order as in the domain
    message); an optional header row, whose first column may be ``timestep``
    (an index column, ignored). Counts are non-negative integers and must
    already be contribution-bounded. A bad value is an error naming its line
    (a timestep cannot be skipped without shifting all later ones).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from stream.ingest.events import KEY_USER_ID, EventBatch, Rejection, Rejections, parse_times

__all__ = ["CsvError", "CsvBlock", "EventCsvReader", "read_events", "read_counts", "read_header"]

DEFAULT_BLOCK_SIZE = 4 << 20  # measured: larger blocks cost memory (pyarrow reads ahead) and speed


def key_user_id_in_csv(path: object) -> str:
    """What to do when a CSV is read with ``schema.user_id: "@key"`` (a Kafka-only setting)."""
    return (f"{path}: schema.user_id is \"@key\", which takes each event's person from its Kafka record key, "
            "and a CSV file has no record keys. For replay and evaluate, point schema.user_id at the CSV column "
            "that holds the person (e.g. DPSTREAM_SCHEMA__USER_ID=person_id dpstream replay …)")


class CsvError(ValueError):
    """The file cannot be used at all (missing, unreadable, header lacks configured columns)."""


@dataclass(frozen=True, eq=False)
class CsvBlock:
    """One block of the events file: its events, the rows refused while reading, and progress."""

    batch: EventBatch
    rejections: Rejections
    bytes_read: int
    #: Arrival (record) time of every row of ``batch``, float seconds, when ``schema.arrival_time`` is set.
    arrival: np.ndarray | None = None


def read_header(path: str | Path) -> list[str]:
    """The column names of the first line (CSV quoting rules)."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline()
    except OSError as exc:
        raise CsvError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = first.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CsvError(f"{path}: the header line is not UTF-8 text") from None
    if not text.strip():
        raise CsvError(f"{path} is empty: expected a header row")
    return [c.strip() for c in next(csv.reader(io.StringIO(text)))]


class _Numbering:
    """Assigns line numbers to the valid rows of each block, given the invalid lines reported."""

    def __init__(self) -> None:
        self.next_line = 2
        self.pending: list[Rejection] = []

    def on_invalid(self, row: Any) -> str:
        number = getattr(row, "number", None)
        line = int(number) if number is not None and number >= 0 else None
        expected, actual = row.expected_columns, row.actual_columns
        reason = "missing_field" if actual < expected else "unknown_attribute"
        self.pending.append(Rejection(reason, f"the line has {actual} fields, the header has {expected}", line))
        return "skip"

    def block(self, n: int) -> tuple[np.ndarray, Rejections]:
        """Line numbers of ``n`` valid rows starting at the next line, and the invalid lines among them."""
        known = sorted(r.row for r in self.pending if r.row is not None and r.row >= self.next_line)
        inv = np.asarray(known, dtype=np.int64)
        cand = np.arange(self.next_line, self.next_line + n + inv.size, dtype=np.int64)
        if inv.size:
            cand = cand[~np.isin(cand, inv)]
        lines = cand[:n]
        end = int(lines[-1]) + 1 if n else self.next_line
        mine = [r for r in self.pending if r.row is None or r.row < end]
        self.pending = [r for r in self.pending if not (r.row is None or r.row < end)]
        self.next_line = end
        return lines, Rejections.from_list(mine)

    def rest(self) -> Rejections:
        out = Rejections.from_list(self.pending)
        self.pending = []
        return out


def _utf8_bad_rows(col: pa.Array) -> np.ndarray | None:
    """Rows of a string column (unchecked UTF-8) that are not valid UTF-8, or None if all are."""
    target = col.dictionary if pa.types.is_dictionary(col.type) else col
    try:
        target.validate(full=True)
        return None
    except pa.ArrowInvalid:
        pass
    raw = target.view(pa.binary())
    bad = np.zeros(len(raw), dtype=bool)
    stack = [(0, len(raw))]
    while stack:
        a, b = stack.pop()
        try:
            raw.slice(a, b - a).cast(pa.string()).validate(full=True)
        except pa.ArrowInvalid:
            if b - a == 1:
                bad[a] = True
            else:
                mid = (a + b) // 2
                stack += [(a, mid), (mid, b)]
    if pa.types.is_dictionary(col.type):
        idx = col.indices.fill_null(0).to_numpy(zero_copy_only=False)
        return bad[idx] & ~col.is_null().to_numpy(zero_copy_only=False)
    return bad


def _empty_as_null(col: pa.Array) -> pa.Array:
    """The column with empty fields (quoted or not) as nulls: an empty field is a missing value."""
    if not len(col) or pc.min(pc.binary_length(col)).as_py() > 0:
        return col
    empty = pc.equal(pc.binary_length(col), 0)
    return pc.if_else(empty, pa.scalar(None, col.type), col)


class EventCsvReader:
    """Streams an events CSV as :class:`CsvBlock` s (see the module notes).

    Args:
        path: the file.
        settings: the validated settings (column names, attributes).
        block_size: bytes per block (about 40 bytes per row for the census domain).

    Raises:
        CsvError: at construction, when the file or its header cannot be used.
    """

    def __init__(self, path: str | Path, settings: Any, *, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise CsvError(f"input file {self.path} does not exist; check the --input path")
        schema = settings.schema_
        if schema.user_id == KEY_USER_ID:
            raise CsvError(key_user_id_in_csv(self.path))
        self.user_col = schema.user_id
        self.time_col = schema.event_time
        self.arrival_col = schema.arrival_time
        self._last_arrival = -np.inf
        self.attribute_names = [a.name for a in schema.attributes]
        personal = settings.privacy.personal
        if personal is not None and personal.attribute is not None:  # the consent column routes, never counts
            self.attribute_names.append(personal.attribute)
        header = read_header(self.path)
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            raise CsvError(f"{self.path}: the header repeats column(s) {dupes}")
        required = [self.user_col, self.time_col, *self.attribute_names,
                    *([self.arrival_col] if self.arrival_col else [])]
        missing = [c for c in required if c not in header]
        if missing:
            raise CsvError(
                f"{self.path}: the header lacks column(s) {missing} named by the config "
                f"(schema.user_id / schema.event_time / schema.arrival_time / schema.attributes); "
                f"the header is {header}"
            )
        self.header = header
        self.unknown_columns = [h for h in header if h not in required]
        # a block must hold the header line (pyarrow reads the column names from the first block)
        with open(self.path, "rb") as fh:
            header_bytes = len(fh.readline())
        self.block_size = max(int(block_size), header_bytes + 1)
        # every column as text: dictionary-encoding while reading was slower (measured) than
        # mapping categorical values afterwards with pyarrow's hash-based index_in
        self._types = dict.fromkeys(header, pa.string())

    def __iter__(self) -> Iterator[CsvBlock]:
        numbering = _Numbering()
        try:
            source = open(self.path, "rb")  # noqa: SIM115 - closed in finally
        except OSError as exc:
            raise CsvError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        try:
            try:
                reader = pacsv.open_csv(
                    source,
                    read_options=pacsv.ReadOptions(block_size=self.block_size, use_threads=False),
                    parse_options=pacsv.ParseOptions(
                        invalid_row_handler=numbering.on_invalid, ignore_empty_lines=False
                    ),
                    # empty fields become nulls in _block: measured 25 ns/row faster than
                    # letting the reader compare every field with its null values
                    convert_options=pacsv.ConvertOptions(
                        column_types=self._types,
                        strings_can_be_null=False,
                        check_utf8=False,
                    ),
                )
            except (pa.ArrowInvalid, OSError) as exc:
                raise CsvError(f"{self.path}: cannot read it as CSV: {exc}") from None
            done = 0
            while True:
                try:
                    rb = reader.read_next_batch()
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError) as exc:
                    raise CsvError(
                        f"{self.path}: unreadable CSV after line {numbering.next_line - 1}: {exc}"
                    ) from None
                pos = source.tell()
                step, done = max(0, pos - done), max(done, pos)
                yield self._block(rb, numbering, step)
            tail = numbering.rest()
            if len(tail):
                empty = EventBatch.from_columns(
                    pa.array([], pa.string()), np.zeros(0), {n: np.zeros(0) for n in self.attribute_names}
                )
                yield CsvBlock(empty, tail, 0)
        finally:
            source.close()

    def _block(self, rb: pa.RecordBatch, numbering: _Numbering, step: int) -> CsvBlock:
        n = rb.num_rows
        lines, parse_rejections = numbering.block(n)
        cols = {name: _empty_as_null(rb.column(i)) for i, name in enumerate(rb.schema.names)}
        # Only the user id must be valid text (it is kept as a string); any other column's bad bytes
        # simply fail to parse or to match a listed value and get that reason.
        bad = _utf8_bad_rows(cols[self.user_col])
        extra: list[Rejection] = []
        if bad is not None and bad.any():
            extra = [Rejection("invalid_user_id", "the user id is not UTF-8 text", int(x)) for x in lines[bad]]
            keep = pa.array(np.flatnonzero(~bad))
            cols = {k: v.take(keep) for k, v in cols.items()}
            lines = lines[~bad]
        attributes = {name: cols[name] for name in self.attribute_names}
        for name in self.unknown_columns:
            attributes[name] = cols[name]
        batch = EventBatch(cols[self.user_col], cols[self.time_col], attributes, lines)
        rej = Rejections.concat([parse_rejections, Rejections.from_list(extra)]) if extra else parse_rejections
        arrival = None
        if self.arrival_col:
            arrival, parsed, missing = parse_times(cols[self.arrival_col])
            ok = parsed & ~missing & np.isfinite(arrival)
            if not ok.all():
                line = int(lines[np.flatnonzero(~ok)[0]])
                raise CsvError(f"{self.path}: line {line}: the {self.arrival_col} column (schema.arrival_time) "
                               "is not a time; every row needs its arrival time")
            prev = np.concatenate(([self._last_arrival], arrival[:-1]))
            if (arrival < prev).any():
                line = int(lines[np.flatnonzero(arrival < prev)[0]])
                raise CsvError(f"{self.path}: line {line}: {self.arrival_col} goes back in time; sort the file "
                               f"by {self.arrival_col} (rows must be in arrival order)")
            if arrival.size:
                self._last_arrival = float(arrival[-1])
        return CsvBlock(batch, rej, step, arrival)


def read_events(path: str | Path, settings: Any, *, block_size: int = DEFAULT_BLOCK_SIZE) -> Iterator[CsvBlock]:
    """Shorthand for iterating an :class:`EventCsvReader`."""
    return iter(EventCsvReader(path, settings, block_size=block_size))


def read_counts(path: str | Path, bins: int) -> np.ndarray:
    """A counts file as a ``(timesteps, bins)`` int64 array (see the module notes).

    Raises:
        CsvError: unreadable file, wrong number of columns, or a value that is
            not a non-negative integer (naming the line).
    """
    p = Path(path)
    if not p.is_file():
        raise CsvError(f"input file {p} does not exist; check the --input path")
    header = read_header(p)
    has_header = any(not _is_int(h) for h in header)
    index_col = has_header and header[0].lower() == "timestep"
    ncols = len(header)
    width = ncols - (1 if index_col else 0)
    if width != bins:
        raise CsvError(
            f"{p}: a counts file needs one column per bin: the domain has {bins} bins, "
            f"the file has {width} count column(s)"
        )
    names = [f"c{i}" for i in range(ncols)]
    bad: list[tuple[int | None, str]] = []

    def on_invalid(row: Any) -> str:
        bad.append((row.number, f"the line has {row.actual_columns} fields, expected {row.expected_columns}"))
        return "skip"

    try:
        table = pacsv.read_csv(
            p,
            read_options=pacsv.ReadOptions(column_names=names, skip_rows=1 if has_header else 0, use_threads=False),
            parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid, ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()),
                                                 strings_can_be_null=True, null_values=[""]),
        )
    except (pa.ArrowInvalid, OSError) as exc:
        raise CsvError(f"{p}: cannot read it as a counts file: {exc}") from None
    if bad:
        line, why = bad[0]
        raise CsvError(f"{p}: line {line}: {why}")
    first_line = 2 if has_header else 1
    out = np.zeros((table.num_rows, bins), dtype=np.int64)
    for j, name in enumerate(names[1:] if index_col else names):
        col = table.column(name).combine_chunks()
        try:
            values = col.cast(pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            values = None
        if values is None or values.null_count:
            for i, v in enumerate(col.to_pylist()):
                if v is None or not _is_int(v):
                    raise CsvError(f"{p}: line {first_line + i}, column {j + 1}: {v!r} is not a whole number")
        arr = values.to_numpy(zero_copy_only=False)  # type: ignore[union-attr]
        if arr.size and arr.min() < 0:
            i = int(np.argmax(arr < 0))
            raise CsvError(f"{p}: line {first_line + i}, column {j + 1}: counts cannot be negative")
        out[:, j] = arr
    if not table.num_rows:
        raise CsvError(f"{p}: the counts file has no timesteps")
    return out


def _is_int(text: str) -> bool:
    t = text.strip()
    return t.lstrip("+-").isdigit()
