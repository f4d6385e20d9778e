"""The privacy journal: a write-ahead, fsync'd, append-only file per stream.

Why it exists
-------------
A release's noise must never be drawn twice (privacy.md §4 inv. 1-3): once
bytes derived from a draw may have left the process, a crash must lead to the
*same* bytes being sent again, and the budget spent must survive. Kafka
transactions give delivery guarantees, not these (and the embedded broker even
shows records of aborted transactions), so every transaction the service
produces is first written here, durably, and only then sent.

What is in it
-------------
``{service.state_dir}/{stream.id}.journal`` (mode 0600, directory 0700; it is
secret: it holds the engine state, including threshold noise, and the raw
bytes of dead letters). A sequence of frames::

    b"DPJ1" | length (4 bytes, big-endian) | CRC-32 of the first 8 bytes (4)
           | payload (canonical JSON) | digest (32 bytes)

    digest = SHA-256(previous digest | length | payload), chained from
    SHA-256(b"dpstream-journal-v1") for the first frame.

The head's CRC tells a damaged length field (corruption) from a frame cut
short by a crash (torn tail); the chained digest catches any change, removal
or reordering of whole frames.

Payloads, in order:

* ``header`` (once, first): format, stream id, the config fingerprint and
  the privacy-relevant view of the config it hashes.
* ``summary`` (only after :meth:`Journal.compact`): the release digests of
  the newest :attr:`Journal.index_keep` timesteps and the engine snapshot the
  dropped checkpoints ended with (the ledger, the controller, the last
  release). Compaction runs once the file exceeds
  :meth:`Journal.compact_limit`, so the file, the memory it is read into and
  the restart time are bounded by one snapshot, not by the stream's length.
* ``checkpoint`` (seq = 1, 2, 3, …): one per Kafka transaction the service
  makes. It carries *everything* that transaction produces and the state it
  leaves behind:

  - ``releases``: per sealed timestep, the exact release message bytes, their
    SHA-256, release id and kind, the ledger entries the step charged, the
    engine snapshot after the step, and a private audit record (true row
    counts, for crash tests; never published); under ``release.delay: k``
    also ``published``: the messages that step publishes (timestep
    ``t − k``'s, each with its timestep, release id and SHA-256), which are
    what the transaction sends instead of the step's own message;
  - ``flush`` (``release.delay``, at the clean end of a stream only): the
    last ``k`` timesteps' messages and the engine snapshot after them (the
    queue of timesteps waiting for publication emptied);
  - ``outputs``: the dead-letter / late / domain records (role, key, value,
    headers), byte for byte;
  - ``windowing``: the pipeline's windowing snapshot after the last seal (open
    timesteps, watermark, …);
  - ``base_offsets`` / ``offsets``: next input offset per partition before and
    after the events this checkpoint covers.

Crash safety of the format
--------------------------
A frame is written with one ``write`` and then ``fsync``'d; the service
produces nothing of a checkpoint before that returns. So an interrupted
append can only leave a *torn tail* (a prefix of the last frame, or a last
frame whose digest does not verify); its checkpoint was never produced.
:meth:`Journal.open` reports it and recovery truncates it after checking
Kafka agrees. A digest mismatch anywhere else, a bad magic, a sequence gap or
an unreadable payload is corruption: :class:`JournalCorruptError`, and the
stream stops (fail closed; the budget is never reset).

Recovery (see :func:`plan_recovery`) compares the journal with Kafka: the
checkpoint marker the group committed (``kafka_io``), the committed input
offsets and the tail of the output topic.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import struct
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "FORMAT",
    "JournalError",
    "JournalCorruptError",
    "JournalWriteError",
    "JournalLockedError",
    "ConfigDriftError",
    "RecoveryRefusedError",
    "JournaledRelease",
    "JournaledFlush",
    "JournaledOutput",
    "Published",
    "Checkpoint",
    "Journal",
    "RecoveryPlan",
    "plan_recovery",
    "journal_path",
    "canonical_json",
]

FORMAT = 1
MAGIC = b"DPJ1"
GENESIS = hashlib.sha256(b"dpstream-journal-v1").digest()
_HEAD = struct.Struct(">4sII")
_DIGEST = 32
MAX_FRAME = 1 << 30
#: the journal is compacted once it holds more than max(MIN_COMPACT_BYTES, COMPACT_RATIO × its size
#: right after the last compaction) bytes, so its size on disk (and the restart time, which reads all
#: of it) is bounded by the size of one snapshot, never by the stream's length
MIN_COMPACT_BYTES = 1 << 20
COMPACT_RATIO = 4
DEFAULT_COMPACT_BYTES = 64 << 20  # kept for callers that pass an explicit limit (older name)
#: release digests kept in memory and in the snapshot, newest first, for the start-up check against
#: the tail of the output topic (which reads ``kafka.startup_tail_records`` records): the service
#: raises it to cover that tail
INDEX_KEEP = 2048
#: compaction crash points (test-only fault injection, see :attr:`Journal.failpoint`)
COMPACTION_POINTS = ("compact_mid_write", "compact_before_rename", "compact_after_rename")


class JournalError(RuntimeError):
    """The journal cannot be used; releases stop (fail closed)."""


class JournalWriteError(JournalError):
    """An append could not be made durable (disk full, I/O error).

    Nothing of the checkpoint was produced, and the file was cut back to its
    last complete frame (or will be, before the next append): appending the
    *same* checkpoint again once the disk has room continues the journal
    exactly as if the failure had not happened (no second noise draw).
    """

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class JournalCorruptError(JournalError):
    """A frame failed its checksum, or the sequence is broken."""


class JournalLockedError(JournalError):
    """Another process holds this stream's journal."""


class ConfigDriftError(JournalError):
    """The privacy-relevant configuration changed under the same stream id."""


class RecoveryRefusedError(JournalError):
    """Journal and Kafka disagree in a way that could re-spend or redraw."""


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text.encode("ascii"), validate=True)


def journal_path(state_dir: str | Path, stream_id: str) -> Path:
    return Path(state_dir) / f"{stream_id}.journal"


# -- records ------------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    """One release message a checkpoint's transaction sends to the output topic: the timestep it
    carries (under ``release.delay: k`` the step that publishes it is ``k`` later) and its bytes."""

    timestep: int
    release_id: str
    message: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.message).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {"timestep": self.timestep, "release_id": self.release_id, "message": _b64(self.message),
                "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Published:
        message = _unb64(data["message"]) or b""
        if hashlib.sha256(message).hexdigest() != data["sha256"]:
            raise JournalCorruptError(f"published message of timestep {data.get('timestep')} does not match "
                                      "its digest")
        return cls(int(data["timestep"]), str(data["release_id"]), message)


@dataclass(frozen=True)
class JournaledRelease:
    """One sealed timestep, exactly as it is (or will be) published.

    ``message`` is the timestep's own release; ``published`` what the step sends to the output
    topic when that is not it (``release.delay: k``: timestep ``t − k``'s message, or nothing while
    ``t < k``); None: ``message`` itself is published.
    """

    timestep: int
    release_id: str
    kind: str
    message: bytes
    ledger: tuple[dict[str, Any], ...]
    engine: dict[str, Any]
    audit: dict[str, Any] = field(default_factory=dict)
    cell: int | None = None
    published: tuple[Published, ...] | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.message).hexdigest()

    @property
    def outputs(self) -> tuple[Published, ...]:
        """The release messages this step sends, in order (which timestep each carries)."""
        if self.published is None:
            return (Published(self.timestep, self.release_id, self.message),)
        return self.published

    def to_json(self) -> dict[str, Any]:
        out = {
            "timestep": self.timestep,
            "release_id": self.release_id,
            "kind": self.kind,
            "message": _b64(self.message),
            "sha256": self.sha256,
            "ledger": list(self.ledger),
            "engine": self.engine,
            "audit": self.audit,
            "cell": self.cell,
        }
        if self.published is not None:
            out["published"] = [p.to_json() for p in self.published]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JournaledRelease:
        message = _unb64(data["message"]) or b""
        if hashlib.sha256(message).hexdigest() != data["sha256"]:
            raise JournalCorruptError(f"release of timestep {data.get('timestep')} does not match its digest")
        cell = data.get("cell")
        published = data.get("published")
        return cls(int(data["timestep"]), str(data["release_id"]), str(data["kind"]), message,
                   tuple(data["ledger"]), dict(data["engine"]), dict(data.get("audit") or {}),
                   None if cell is None else int(cell),
                   None if published is None else tuple(Published.from_json(p) for p in published))


@dataclass(frozen=True)
class JournaledFlush:
    """``release.delay: k`` at the clean end of a stream: the last timesteps waiting for publication,
    sent in the final checkpoint's transaction, and the engine snapshot after them (nothing waits).

    ``cell``: the grid cell of the last sealed timestep (the record timestamp under
    ``service.publish: on-schedule`` is that cell's scheduled time: the end of the stream).
    """

    published: tuple[Published, ...]
    engine: dict[str, Any]
    cell: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"published": [p.to_json() for p in self.published], "engine": self.engine, "cell": self.cell}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JournaledFlush:
        cell = data.get("cell")
        return cls(tuple(Published.from_json(p) for p in data["published"]), dict(data["engine"]),
                   None if cell is None else int(cell))


@dataclass(frozen=True)
class JournaledOutput:
    """A non-release record of a checkpoint: ``role`` is dead_letter, late or domain."""

    role: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "key": _b64(self.key), "value": _b64(self.value),
                "headers": [[k, _b64(v)] for k, v in self.headers]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JournaledOutput:
        return cls(str(data["role"]), _unb64(data["key"]), _unb64(data["value"]) or b"",
                   tuple((str(k), _unb64(v) or b"") for k, v in data["headers"]))


@dataclass(frozen=True)
class Checkpoint:
    """Everything one Kafka transaction produces, and the state after it."""

    seq: int
    base_offsets: dict[int, int]
    offsets: dict[int, int]
    releases: tuple[JournaledRelease, ...] = ()
    outputs: tuple[JournaledOutput, ...] = ()
    windowing: Any = None
    created: float = field(default_factory=time.time)
    flush: JournaledFlush | None = None

    @property
    def engine(self) -> dict[str, Any] | None:
        """Engine snapshot after this checkpoint's last release, or its flush (None: unchanged)."""
        if self.flush is not None:
            return self.flush.engine
        return self.releases[-1].engine if self.releases else None

    @property
    def published(self) -> tuple[Published, ...]:
        """Every release message the transaction sends, in order (the releases', then the flush's)."""
        out = tuple(p for r in self.releases for p in r.outputs)
        return out + (self.flush.published if self.flush is not None else ())

    def to_json(self) -> dict[str, Any]:
        out = {
            "type": "checkpoint",
            "seq": self.seq,
            "base_offsets": {str(p): o for p, o in sorted(self.base_offsets.items())},
            "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
            "releases": [r.to_json() for r in self.releases],
            "outputs": [o.to_json() for o in self.outputs],
            "windowing": self.windowing,
            "created": self.created,
        }
        if self.flush is not None:
            out["flush"] = self.flush.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Checkpoint:
        flush = data.get("flush")
        return cls(
            seq=int(data["seq"]),
            base_offsets={int(p): int(o) for p, o in data["base_offsets"].items()},
            offsets={int(p): int(o) for p, o in data["offsets"].items()},
            releases=tuple(JournaledRelease.from_json(r) for r in data["releases"]),
            outputs=tuple(JournaledOutput.from_json(o) for o in data["outputs"]),
            windowing=data.get("windowing"),
            created=float(data.get("created", 0.0)),
            flush=None if flush is None else JournaledFlush.from_json(flush),
        )


# -- framing ----------------------------------------------------------------


def _frame(prev: bytes, payload: bytes) -> tuple[bytes, bytes]:
    if len(payload) > MAX_FRAME:
        raise JournalError(f"journal record of {len(payload)} bytes is too large")
    length = struct.pack(">I", len(payload))
    head = _HEAD.pack(MAGIC, len(payload), zlib.crc32(MAGIC + length))
    digest = hashlib.sha256(prev + length + payload).digest()
    return head + payload + digest, digest


@dataclass(frozen=True)
class _Frame:
    start: int
    end: int
    payload: dict[str, Any]
    digest: bytes


def _scan(data: bytes) -> tuple[list[_Frame], int]:
    """Parse frames; returns them and the number of torn tail bytes.

    Raises:
        JournalCorruptError: a bad frame that is not the last one.
    """
    frames: list[_Frame] = []
    pos, prev, n = 0, GENESIS, len(data)
    while pos < n:
        rest = n - pos
        if rest < _HEAD.size:
            return frames, rest
        magic, length, crc = _HEAD.unpack_from(data, pos)
        if magic != MAGIC or crc != zlib.crc32(data[pos: pos + 8]):
            if not any(data[pos:]):  # zero-filled tail: an append that never reached the disk
                return frames, rest
            raise JournalCorruptError(f"bad frame head at byte {pos}")
        end = pos + _HEAD.size + length + _DIGEST
        if length > MAX_FRAME:
            raise JournalCorruptError(f"impossible frame length {length} at byte {pos}")
        if end > n:
            return frames, rest
        payload = data[pos + _HEAD.size: pos + _HEAD.size + length]
        digest = hashlib.sha256(prev + data[pos + 4: pos + 8] + payload).digest()
        if digest != data[end - _DIGEST: end]:
            if end == n:
                return frames, rest  # the last append was torn inside the frame
            raise JournalCorruptError(f"checksum mismatch in the frame at byte {pos} (not the last one)")
        try:
            obj = json.loads(payload)
        except ValueError as exc:  # verified digest but unreadable: written by something else
            raise JournalCorruptError(f"unreadable record at byte {pos}: {exc}") from exc
        frames.append(_Frame(pos, end, obj, digest))
        pos, prev = end, digest
    return frames, 0


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the journal ----------------------------------------------------------------


class Journal:
    """An open journal. Use :meth:`open` or :meth:`create`; close with :meth:`close`.

    Holds an exclusive ``flock`` on ``{stream}.lock`` while open, so two
    processes never write the same stream's journal.
    """

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self._lock_fd = lock_fd
        self._fd: int | None = None
        self.header: dict[str, Any] = {}
        self.last: Checkpoint | None = None
        self.engine: dict[str, Any] | None = None
        #: timestep -> (sha256, release_id) of the release message *published* for it, the last
        #: :attr:`index_keep` timesteps (oldest first); under ``release.delay: k`` the newest
        #: ``k`` sealed timesteps are not in it until they are published
        self.index: dict[int, tuple[str, str]] = {}
        self.index_keep = INDEX_KEEP
        self._last_timestep: int | None = None
        #: bytes of the file right after the last compaction (or of what a compaction would keep)
        self.base_size = 0
        #: test-only: called with each name of :data:`COMPACTION_POINTS` as compaction reaches it
        self.failpoint: Callable[[str], None] = lambda _name: None
        self.torn_bytes = 0
        self.size = 0
        self._dirty_tail = False  # a failed append may have left bytes after ``size``
        self._os_write = os.write  # fault-injection seam for the disk-full tests
        self.checkpoints = 0
        self._prev = GENESIS
        self._last_start = 0

    # construction -----------------------------------------------------------
    @staticmethod
    def _lock(state_dir: Path, stream_id: str) -> int:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(state_dir / f"{stream_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise JournalLockedError(
                f"another dpstream process is running stream {stream_id!r} (lock {state_dir}/{stream_id}.lock)"
            ) from None
        return fd

    @classmethod
    def exists(cls, state_dir: str | Path, stream_id: str) -> bool:
        return journal_path(state_dir, stream_id).exists()

    @classmethod
    def create(cls, state_dir: str | Path, stream_id: str, *, fingerprint: str,
               privacy_view: Mapping[str, Any], index_keep: int = INDEX_KEEP) -> Journal:
        """Create a new journal (refuses to overwrite one)."""
        state_dir = Path(state_dir)
        lock = cls._lock(state_dir, stream_id)
        try:
            path = journal_path(state_dir, stream_id)
            if path.exists():
                raise JournalError(f"journal {path} already exists")
            header = {"type": "header", "format": FORMAT, "stream": stream_id,
                      "fingerprint": fingerprint, "privacy": dict(privacy_view), "created": time.time()}
            frame, _ = _frame(GENESIS, canonical_json(header))
            tmp = path.with_suffix(".journal.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, frame)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            _fsync_dir(state_dir)
        except BaseException:
            os.close(lock)
            raise
        return cls._load(path, lock, index_keep)

    @classmethod
    def open(cls, state_dir: str | Path, stream_id: str, *, index_keep: int = INDEX_KEEP) -> Journal:
        """Open and verify an existing journal.

        Raises:
            JournalError: missing; JournalCorruptError: damaged;
            JournalLockedError: in use.
        """
        state_dir = Path(state_dir)
        path = journal_path(state_dir, stream_id)
        if not path.exists():
            raise JournalError(f"no journal at {path}")
        lock = cls._lock(state_dir, stream_id)
        try:
            return cls._load(path, lock, index_keep)
        except BaseException:
            os.close(lock)
            raise

    @classmethod
    def _load(cls, path: Path, lock: int, index_keep: int = INDEX_KEEP) -> Journal:
        if index_keep < 1:
            raise ValueError(f"index_keep must be >= 1, got {index_keep}")
        j = cls(path, lock)
        j.index_keep = index_keep
        data = path.read_bytes()
        frames, torn = _scan(data)
        if not frames or frames[0].payload.get("type") != "header":
            raise JournalCorruptError(f"{path} does not start with a journal header")
        header = frames[0].payload
        if header.get("format") != FORMAT:
            raise JournalCorruptError(f"{path} has journal format {header.get('format')!r}, expected {FORMAT}")
        j.header = header
        expected_seq: int | None = None
        last_frame: _Frame | None = None
        for fr in frames[1:]:
            kind = fr.payload.get("type")
            try:
                if kind == "summary":
                    if expected_seq is not None:
                        raise JournalCorruptError("summary record after a checkpoint")
                    for t, v in sorted((int(t), v) for t, v in fr.payload["index"].items()):
                        j._remember(t, (str(v[0]), str(v[1])))
                    if fr.payload.get("last_timestep") is not None:
                        j._sealed(int(fr.payload["last_timestep"]))
                    j.engine = fr.payload.get("engine")
                    expected_seq = int(fr.payload["through_seq"]) + 1
                    j.checkpoints = int(fr.payload["through_seq"])
                elif kind == "checkpoint":
                    cp = Checkpoint.from_json(fr.payload)
                    if expected_seq is not None and cp.seq != expected_seq:
                        raise JournalCorruptError(f"checkpoint {cp.seq} follows {expected_seq - 1}: records are missing")
                    if expected_seq is None and cp.seq != 1:
                        raise JournalCorruptError(f"the first checkpoint is {cp.seq}, expected 1")
                    j._record(cp)
                    j.last, expected_seq = cp, cp.seq + 1
                    last_frame = fr
                    j.checkpoints = cp.seq
                else:
                    raise JournalCorruptError(f"unknown record type {kind!r} at byte {fr.start}")
            except (KeyError, TypeError, ValueError) as exc:
                raise JournalCorruptError(f"malformed record at byte {fr.start}: {exc}") from exc
        j.torn_bytes = torn
        j.size = len(data) - torn
        j._prev = frames[-1].digest
        j._last_start = frames[-1].start
        # what a compaction now would keep: header (+ summary) + the last checkpoint, about
        kept = frames[1].end if len(frames) > 1 and frames[1].payload.get("type") == "summary" else frames[0].end
        j.base_size = kept + (last_frame.end - last_frame.start if last_frame is not None else 0)
        return j

    # properties -------------------------------------------------------------
    @property
    def stream(self) -> str:
        return str(self.header["stream"])

    @property
    def fingerprint(self) -> str:
        return str(self.header["fingerprint"])

    @property
    def last_seq(self) -> int:
        return self.checkpoints

    @property
    def last_timestep(self) -> int | None:
        """The last timestep the journal holds a release of (None: none yet)."""
        return self._last_timestep

    @property
    def index_floor(self) -> int | None:
        """The oldest timestep whose release digest is still known (older ones were compacted away)."""
        return next(iter(self.index)) if self.index else None

    def knows(self, timestep: int) -> bool:
        """Whether ``timestep`` was released (journaled), whether or not its digest is still kept."""
        return self._last_timestep is not None and timestep <= self._last_timestep

    def _remember(self, timestep: int, entry: tuple[str, str]) -> None:
        """Record a published release's digest; keeps only the newest :attr:`index_keep` (bounded memory)."""
        index = self.index
        index.pop(timestep, None)  # a re-journaled timestep moves to the newest end
        index[timestep] = entry
        self._sealed(timestep)
        while len(index) > self.index_keep:
            del index[next(iter(index))]

    def _sealed(self, timestep: int) -> None:
        if self._last_timestep is None or timestep > self._last_timestep:
            self._last_timestep = timestep

    def _record(self, cp: Checkpoint) -> None:
        """What a checkpoint changes in memory: the sealed timesteps, the digests of what it
        publishes (the timestep each message carries), the engine snapshot."""
        for r in cp.releases:
            self._sealed(r.timestep)
        for p in cp.published:
            self._remember(p.timestep, (p.sha256, p.release_id))
        if cp.engine is not None:
            self.engine = cp.engine

    # writing ----------------------------------------------------------------
    def _writer(self) -> int:
        if self._fd is None:
            if self.torn_bytes:
                raise JournalError("the journal has a torn tail: recovery must truncate it first")
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            if self._dirty_tail:  # cut what a failed append left behind (raises OSError if it cannot)
                try:
                    os.ftruncate(fd, self.size)
                    os.fsync(fd)
                except OSError:
                    os.close(fd)
                    raise
                self._dirty_tail = False
            self._fd = fd
        return self._fd

    def append(self, cp: Checkpoint) -> None:
        """Write ``cp`` and fsync it. Returns only once it is durable.

        Raises:
            JournalError: out of sequence, or the write failed (the journal
                is then unusable: the process must stop and recover).
        """
        if cp.seq != self.last_seq + 1:
            raise JournalError(f"checkpoint {cp.seq} out of sequence (last is {self.last_seq})")
        frame, digest = _frame(self._prev, canonical_json(cp.to_json()))
        try:
            fd = self._writer()
            written = self._os_write(fd, frame)
            if written != len(frame):
                raise OSError(errno.ENOSPC, f"short write ({written} of {len(frame)} bytes)")
            os.fsync(fd)
        except OSError as exc:
            # the frame may be partly on disk, or written but not durable (after a failed fsync the
            # page cache cannot be trusted): cut the file back to the last complete frame now, or
            # before the next append, and write the whole frame again then
            self._dirty_tail = True
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self.size)
                    os.fsync(self._fd)
                    self._dirty_tail = False
            self.close_writer()
            cause = os.strerror(exc.errno) if exc.errno else str(exc)
            raise JournalWriteError(f"journal write of checkpoint {cp.seq} to {self.path} failed: {exc}",
                                    cause=cause) from exc
        self._last_start = self.size
        self.size += len(frame)
        self._prev = digest
        self.last = cp
        self.checkpoints = cp.seq
        self._record(cp)

    def truncate_torn_tail(self) -> int:
        """Drop an interrupted append (call only after recovery checked Kafka)."""
        torn = self.torn_bytes
        if torn:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                os.ftruncate(fd, self.size)
                os.fsync(fd)
            finally:
                os.close(fd)
            self.torn_bytes = 0
        return torn

    def compact(self, *, keep_index: int | None = None) -> None:
        """Rewrite as header + summary (the snapshot) + last checkpoint, atomically.

        The summary holds the release digests of the last ``keep_index``
        (default :attr:`index_keep`) timesteps, for the start-up check against
        the output topic, and the engine snapshot (ledger, controller, last
        release); the last checkpoint is kept whole (offsets, windowing, and
        its records, so a redo is still possible). Frames keep their CRC and
        chained SHA-256. Steps: write ``{stream}.journal.tmp``, fsync it,
        rename it over the journal, fsync the directory. A crash before the
        rename leaves the old journal (and a stale ``.tmp`` that the next
        compaction overwrites); after it, the new one: both hold the same last
        checkpoint, engine and recent digests, so recovery is the same.
        """
        if self.last is None:
            return
        keep = self.index_keep if keep_index is None else keep_index
        summary_index = dict(list(self.index.items())[-keep:]) if keep > 0 else {}
        summary = {"type": "summary", "through_seq": self.last.seq - 1,
                   "index": {str(t): list(v) for t, v in summary_index.items()}, "engine": self.engine,
                   "last_timestep": self._last_timestep}
        prev = GENESIS
        out = bytearray()
        last_len = 0
        for payload in (self.header, summary, self.last.to_json()):
            frame, prev = _frame(prev, canonical_json(payload))
            out += frame
            last_len = len(frame)
        tmp = self.path.with_suffix(".journal.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if getattr(self.failpoint, "wants", lambda _name: False)("compact_mid_write"):
                os.write(fd, bytes(out[: len(out) // 2]))
                os.fsync(fd)
                self.failpoint("compact_mid_write")
            written = self._os_write(fd, bytes(out))
            if written != len(out):
                raise OSError(errno.ENOSPC, f"short write ({written} of {len(out)} bytes)")
            os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise JournalWriteError(f"journal compaction failed writing {tmp}: {exc} (the journal itself is "
                                    "unchanged)", cause=os.strerror(exc.errno) if exc.errno else str(exc)) from exc
        os.close(fd)
        self.failpoint("compact_before_rename")
        self.close_writer()
        try:
            os.replace(tmp, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise JournalWriteError(f"journal compaction could not rename {tmp}: {exc} (the journal itself is "
                                    "unchanged)", cause=os.strerror(exc.errno) if exc.errno else str(exc)) from exc
        self.failpoint("compact_after_rename")
        self.index = summary_index
        self.size = len(out)
        self.base_size = len(out)
        self._prev = prev
        self._last_start = self.size - last_len
        self._dirty_tail = False
        try:
            _fsync_dir(self.path.parent)
        except OSError as exc:  # the new file is in place; only the rename's durability is in doubt
            raise JournalWriteError(f"fsync of {self.path.parent} after compacting failed: {exc}",
                                    cause=os.strerror(exc.errno) if exc.errno else str(exc)) from exc

    def compact_limit(self) -> int:
        """Size in bytes above which :meth:`maybe_compact` compacts: max(1 MiB, 4 × the compacted size)."""
        return max(MIN_COMPACT_BYTES, COMPACT_RATIO * self.base_size)

    def maybe_compact(self, max_bytes: int | None = None) -> bool:
        """Compact when the file exceeds ``max_bytes`` (default :meth:`compact_limit`)."""
        if self.size > (self.compact_limit() if max_bytes is None else max_bytes):
            self.compact()
            return True
        return False

    def close_writer(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self.close_writer()
        if self._lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def checkpoints_on_disk(self) -> Iterator[Checkpoint]:
        """Every checkpoint still in the file (tests and audits; re-reads the file)."""
        frames, _ = _scan(self.path.read_bytes())
        for fr in frames:
            if fr.payload.get("type") == "checkpoint":
                yield Checkpoint.from_json(fr.payload)

    def drop_last_checkpoint(self) -> Checkpoint:
        """Remove the last checkpoint from the file. NEVER used by the service.

        Exists for the deliberately broken variant of the crash test (which
        must be caught) and for fault-injection tests of recovery.
        """
        if self.last is None:
            raise JournalError("no checkpoint to drop")
        dropped = self.last
        self.close_writer()
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.ftruncate(fd, self._last_start)
            os.fsync(fd)
        finally:
            os.close(fd)
        lock, self._lock_fd = self._lock_fd, -1
        fresh = Journal._load(self.path, lock, self.index_keep)
        fresh.failpoint = self.failpoint
        self.__dict__.update(fresh.__dict__)
        return dropped


# -- recovery ----------------------------------------------------------------


@dataclass(frozen=True)
class RecoveryPlan:
    """What the service does at start-up.

    Attributes:
        redo: a journaled checkpoint whose transaction did not commit: send
            it again, byte for byte (never step again).
        resume_offsets: next input offset per partition (None: from the
            beginning of the partition).
        engine: engine snapshot to restore (None: a new stream).
        windowing: windowing snapshot to restore (None: a new stream).
        truncate_torn: drop a torn tail (an append that never completed).
        notes: what was found, for the log.
    """

    redo: Checkpoint | None
    resume_offsets: dict[int, int]
    engine: dict[str, Any] | None
    windowing: Any
    truncate_torn: bool
    notes: tuple[str, ...] = ()


def _drift(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    keys = sorted(set(old) | set(new))
    out: list[str] = []
    for k in keys:
        a, b = old.get(k), new.get(k)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += _drift(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: {a!r} -> {b!r}")
    return out


def plan_recovery(
    journal: Journal | None,
    *,
    stream_id: str,
    fingerprint: str,
    privacy_view: Mapping[str, Any],
    marker: int | None,
    committed: Mapping[int, int | None],
    published: Sequence[tuple[int, str, str]],
) -> RecoveryPlan:
    """Decide how to resume, or refuse.

    Args:
        journal: the open journal, or None if there is none.
        marker: the checkpoint seq the consumer group last committed.
        committed: the group's committed offset per input partition.
        published: (timestep, sha256, release_id) of this stream's releases
            in the tail of the output topic (everything produced, including
            aborted transactions).

    Invariant relied on: the service writes checkpoint n+1 only after the
    transaction of checkpoint n committed, so the journal is at most one
    checkpoint ahead of Kafka.

    Raises:
        ConfigDriftError, RecoveryRefusedError: start-up must stop.
    """
    if journal is None:
        if marker is not None:
            raise RecoveryRefusedError(
                f"stream {stream_id!r} has no journal, but its consumer group committed checkpoint {marker}: "
                "the privacy journal was lost, so the budget already spent is unknown. Restore the journal "
                "from backup, or start a new stream id (a human decision; the budget is never reset "
                "automatically)."
            )
        if published:
            ts = sorted({t for t, _, _ in published})
            raise RecoveryRefusedError(
                f"stream {stream_id!r} has no journal, but the output topic already holds {len(ts)} of its "
                f"releases (timesteps {ts[0]}..{ts[-1]}): the ledger was lost. Restore the journal from "
                "backup, or start a new stream id."
            )
        return RecoveryPlan(None, {}, None, None, False, ("new stream",))

    if journal.stream != stream_id:
        raise RecoveryRefusedError(f"journal {journal.path} belongs to stream {journal.stream!r}, not {stream_id!r}")
    if journal.fingerprint != fingerprint:
        changes = _drift(journal.header.get("privacy", {}), privacy_view)
        detail = "; ".join(changes[:8]) or "fingerprint differs"
        raise ConfigDriftError(
            f"the privacy configuration of stream {stream_id!r} changed since its releases began ({detail}). "
            "Changing ε, C, w, the domain, the method or the timestep grid under the same stream id would "
            "break the published guarantee: revert the change, or start a new stream id."
        )
    notes: list[str] = []
    last = journal.last
    seq = journal.last_seq

    for t, sha, rid in published:
        known = journal.index.get(t)
        floor = journal.index_floor
        if known is None and journal.knows(t) and floor is not None and t < floor:
            raise RecoveryRefusedError(
                f"the output topic's tail holds a release of timestep {t}, older than the {len(journal.index)} "
                f"release digests the journal keeps (from timestep {floor}): its bytes cannot be checked. "
                "kafka.startup_tail_records must not exceed the digests kept; lower it, or restore a journal "
                "that matches this output topic."
            )
        if known is None:
            raise RecoveryRefusedError(
                f"the output topic holds a release of timestep {t} (release_id {rid[:16]}…) that the journal "
                f"does not know (journal ends at timestep {journal.last_timestep}): the journal is missing "
                "records or is from another deployment. Refusing to release (a new draw would break the guarantee)."
            )
        if known[0] != sha:
            raise RecoveryRefusedError(
                f"the output topic holds a release of timestep {t} whose bytes differ from the journaled "
                "release: the journal is inconsistent with what was published. Refusing to release."
            )

    if marker is not None and marker > seq:
        raise RecoveryRefusedError(
            f"Kafka has committed checkpoint {marker} but the journal ends at {seq}: the journal is behind "
            "(truncated, or restored from an old backup). Refusing to release."
        )
    if marker is None and seq > 1:
        raise RecoveryRefusedError(
            f"the journal has {seq} checkpoints but the consumer group has none committed: the input position "
            "is unknown (a different group id, or the cluster lost its offsets). Refusing to release."
        )
    if marker is not None and marker < seq - 1:
        raise RecoveryRefusedError(
            f"the journal is {seq - marker} checkpoints ahead of Kafka (committed {marker}, journal {seq}); "
            "it can be at most one ahead. Offsets were reset or the journal belongs elsewhere."
        )

    redo = None
    if last is not None and (marker or 0) == seq - 1:
        redo = last
        expect = last.base_offsets
        notes.append(f"checkpoint {seq} was journaled but not committed: re-sending it byte for byte")
    elif last is not None:
        expect = last.offsets
    else:
        expect = {}
    for p, off in committed.items():
        if off is not None and p in expect and off != expect[p]:
            raise RecoveryRefusedError(
                f"input partition {p}: Kafka committed offset {off} but the journal expects {expect[p]}: "
                "offsets were moved outside dpstream. Refusing to release."
            )
        if off is not None and p not in expect:
            raise RecoveryRefusedError(
                f"input partition {p} has committed offset {off} that the journal never wrote"
            )
    if journal.torn_bytes:
        notes.append(f"dropping a torn tail of {journal.torn_bytes} bytes (an append interrupted by a crash)")
    return RecoveryPlan(
        redo=redo,
        resume_offsets=dict(last.offsets) if last is not None else {},
        engine=journal.engine,
        windowing=last.windowing if last is not None else None,
        truncate_torn=journal.torn_bytes > 0,
        notes=tuple(notes),
    )
