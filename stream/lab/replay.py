"""Offline replay: a CSV file through exactly the service's release path, into JSONL.

``events CSV → EventCsvReader → ReleasePipeline.offer/seal → one line per
message``, read by the lab's one events loop (:func:`stream.lab.inputs.feed_events`). The pipeline is the one the Kafka service runs (same validation,
windowing, contribution bounding, ``Engine.step``, noise keys and message
bytes), so a seeded replay and the seeded service write identical releases.
Which events count (``docs/privacy.md`` §1.1): with ``schema.arrival_time``
each row's arrival time is its record time and the service's per-event rule
is followed exactly (rows in arrival order); without it the whole file is
known, so every event counts in the timestep of its event time (only
``before_start`` is rejected) and the timesteps are sealed at the end of the
input. No wall clock is used either way.

Output (JSON Lines): the stream's domain message first (``message_type:
"domain"``: what each count position means), then one release message per
timestep, in order. The file is written to a temporary name and renamed at
the end, so a failed run leaves no partial output.

With ``counts=True`` the input is a counts file (one row per timestep, see
:func:`stream.ingest.csvio.read_counts`) and windowing is skipped.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from stream.ingest.csvio import DEFAULT_BLOCK_SIZE
from stream.ingest.events import LATE_REASON, Rejections
from stream.lab.inputs import counts_rows, feed_events, note_rejections, pipeline_offer
from stream.pipeline import ReleasePipeline, SealedRelease

__all__ = ["ReplayError", "ReplaySummary", "replay"]

class ReplayError(ValueError):
    """The input cannot be replayed (``--strict`` and a rejected row, or no usable data)."""


@dataclass
class ReplaySummary:
    """What a replay read and released (whole-run totals; no per-timestep statistics)."""

    input: str
    output: str | None
    kind: str = "events"
    rows_read: int = 0
    accepted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    first_rows: dict[str, list[int]] = field(default_factory=dict)
    timesteps: int = 0
    fresh: int = 0
    republished: int = 0
    first_index: int | None = None
    first_start: str | None = None
    epsilon_spent: Fraction = Fraction(0)
    epsilon_budget: Fraction = Fraction(0)
    max_window_spent: Fraction | None = None
    unit: str = "user-level"
    noise: str = "secure"
    seconds: float = 0.0
    unknown_columns: list[str] = field(default_factory=list)

    @property
    def late(self) -> int:
        return self.rejected.get(LATE_REASON, 0)

    @property
    def dead(self) -> int:
        return sum(v for k, v in self.rejected.items() if k != LATE_REASON)

    def note(self, rej: Rejections) -> None:
        note_rejections(self.rejected, self.first_rows, rej)

    def add(self, sealed: SealedRelease) -> None:
        m = sealed.message
        self.timesteps += 1
        if sealed.fresh:
            self.fresh += 1
        else:
            self.republished += 1
        if self.first_index is None:
            self.first_index, self.first_start = sealed.index, m.timestep.start
        self.epsilon_spent = Fraction(m.epsilon_spent_exact)
        if m.window_epsilon_spent_exact is not None:
            w = Fraction(m.window_epsilon_spent_exact)
            self.max_window_spent = w if self.max_window_spent is None else max(self.max_window_spent, w)

    def to_json(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "output": self.output,
            "kind": self.kind,
            "rows_read": self.rows_read,
            "accepted": self.accepted,
            "rejected": dict(sorted(self.rejected.items())),
            "first_rows": dict(sorted(self.first_rows.items())),
            "late": self.late,
            "timesteps": self.timesteps,
            "fresh_releases": self.fresh,
            "republished_releases": self.republished,
            "epsilon_spent": str(self.epsilon_spent),
            "epsilon_budget": str(self.epsilon_budget),
            "max_window_epsilon_spent": None if self.max_window_spent is None else str(self.max_window_spent),
            "noise": self.noise,
            "seconds": round(self.seconds, 3),
        }

    def lines(self) -> list[str]:
        rate = self.rows_read / self.seconds if self.seconds > 0 else 0.0
        out = [f"dpstream replay: read {self.rows_read:,} {'timestep rows' if self.kind == 'counts' else 'rows'} "
               f"from {self.input} in {self.seconds:.2f} s ({rate:,.0f} rows/s)"]
        if self.kind == "events":
            out.append(f"  accepted: {self.accepted:,}")
            out.append(f"  rejected: {self.dead:,}" + (" (dead letters)" if self.dead else ""))
            for reason in sorted(self.rejected):
                if reason == LATE_REASON:
                    continue
                out.append(f"    {reason}: {self.rejected[reason]:,}{_first(self.first_rows.get(reason))}")
            out.append(f"  late ({LATE_REASON}): {self.late:,}{_first(self.first_rows.get(LATE_REASON))}")
            if self.unknown_columns:
                out.append(f"  note: column(s) {self.unknown_columns} are not in the config; rows with a value "
                           "there were rejected as unknown_attribute")
        span = "" if self.first_index is None else (
            f", indices {self.first_index}–{self.first_index + self.timesteps - 1}, first starts {self.first_start}")
        out.append(f"  timesteps released: {self.timesteps:,} (fresh {self.fresh:,}, "
                   f"republished {self.republished:,}){span}")
        eps = f"  ε spent: {self.epsilon_spent} (≈{float(self.epsilon_spent):.6g})"
        if self.unit == "w-event":
            mw = self.max_window_spent or Fraction(0)
            eps += f" since the start; largest spend in any window: {mw} of {self.epsilon_budget} per window"
        else:
            eps += f" of the budget {self.epsilon_budget}"
        out.append(eps)
        out.append(f"  noise: {self.noise}")
        if self.output:
            out.append(f"  output: {self.output} (1 domain message + {self.timesteps:,} release messages)")
        return out


def _first(rows: list[int] | None) -> str:
    if not rows:
        return ""
    return " (first lines " + ", ".join(str(r) for r in rows) + ")"


def replay(
    settings: Any,
    input_path: str | Path,
    output_path: str | Path | None,
    *,
    counts: bool = False,
    strict: bool = False,
    block_size: int = DEFAULT_BLOCK_SIZE,
    on_release: Callable[[SealedRelease], None] | None = None,
    progress: bool | None = False,
) -> ReplaySummary:
    """Replay ``input_path`` and write the messages to ``output_path`` (None: do not write).

    ``progress``: a bar of rows read on stderr (None: only on a terminal).

    Raises:
        stream.ingest.csvio.CsvError: the file cannot be read, or its header lacks configured columns.
        ReplayError: ``strict`` and a row was rejected (or late), naming its line.
    """
    t0 = time.perf_counter()
    inp = Path(input_path)
    pipe = ReleasePipeline(settings)
    summary = ReplaySummary(
        str(inp), None if output_path is None else str(output_path), "counts" if counts else "events",
        epsilon_budget=Fraction(settings.privacy.epsilon), unit=settings.privacy.unit,
        noise="secure (OS CSPRNG)" if settings.randomness.seed is None
        else f"seeded (randomness.seed = {settings.randomness.seed}; for tests and evaluation only)",
    )
    with _Output(output_path) as out:
        out.write(pipe.domain_message().to_bytes())

        def emit(sealed_list: list[SealedRelease]) -> None:
            for sealed in sealed_list:
                for _, payload in sealed.outputs:  # release.delay: timestep index − k's (none at first)
                    out.write(payload)
                summary.add(sealed)
                if on_release is not None:
                    on_release(sealed)

        if counts:
            table = counts_rows(inp, pipe.domain.size)
            summary.rows_read = summary.accepted = int(table.shape[0])
            for row in table:
                emit([pipe.release_counts(row)])
        else:
            # the lab's one events loop (stream.lab.inputs.feed_events): the service's reader, the
            # pipeline's validation and windowing, sealed as arrival times progress (docs/privacy.md
            # §1.1: arrival times decide per event; without them every event counts in its
            # event-time timestep, sealed at the end), each sealed timestep stepped and written
            def seal(frontier: float, final: bool) -> None:
                emit(pipe.seal(final=final, record_frontier=frontier))

            def opened(reader: Any) -> None:
                summary.unknown_columns = list(reader.unknown_columns)

            feed = feed_events(settings, inp, offer=pipeline_offer(pipe), seal=seal, note=summary.note,
                               strict=strict, error=ReplayError, progress=progress, desc="replay",
                               block_size=block_size, on_open=opened)
            summary.rows_read = feed.rows
            summary.accepted = pipe.stats.events_accepted
        for _, payload in pipe.flush():  # release.delay: the last k timesteps, at the end of the input
            out.write(payload)
        out.commit()
    summary.seconds = time.perf_counter() - t0
    return summary


class _Output:
    """Buffered JSONL writer to a temporary file, renamed into place on :meth:`commit`."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = None if path is None else Path(path)
        self._fh: Any = None
        self._tmp: str | None = None
        self._done = False

    def __enter__(self) -> _Output:
        if self.path is not None:
            directory = self.path.parent if str(self.path.parent) else Path(".")
            if not directory.is_dir():
                raise OSError(f"the output directory {directory} does not exist")
            fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
            self._fh = os.fdopen(fd, "wb", buffering=1 << 20)
        return self

    def write(self, payload: bytes) -> None:
        if self._fh is not None:
            self._fh.write(payload)
            self._fh.write(b"\n")

    def commit(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            os.replace(self._tmp, self.path)  # type: ignore[arg-type]
        self._done = True

    def __exit__(self, *exc: Any) -> None:
        if self._fh is not None and not self._done:
            self._fh.close()
            try:
                os.unlink(self._tmp)  # type: ignore[arg-type]
            except OSError:
                pass
