"""Input formats: the decoder the service uses, chosen by ``input.format``.

``json`` (the default) is :class:`stream.ingest.events.EventDecoder`. ``avro``, ``protobuf`` and
``jsonschema`` are :class:`WireDecoder`: one record per Kafka message in the Schema Registry wire
format (:mod:`stream.ingest.wire`), the writer schema by id from :mod:`stream.ingest.schemas`,
the body decoded by the format's library (:mod:`stream.ingest.avro`,
:mod:`stream.ingest.protobuf`, :mod:`stream.ingest.json_schema`) straight into one tuple of the
mapped fields per record, and the tuples into the columns of an
:class:`~stream.ingest.events.EventBatch`. From there everything is as for JSON: the same
:func:`~stream.ingest.events.validate_batch`, the same canonical person key, the same reasons.

Field mapping: ``schema.user_id`` (or ``"@key"``: the record key), ``schema.event_time`` and
each attribute (its name, or ``input.fields[name]``) are paths from the record's root, dots
between nested field names. Each writer schema id is compiled against the mapping once, when
its first record arrives: a new schema id (schema evolution) works as long as it still has the
mapped fields; one that dropped a mapped field (or made it a record, list or bytes) sends each
of its records to the dead-letter topic as ``schema_mismatch`` naming the field and the id, and
logs one ERROR per id: the stream goes on with the other ids.

Reasons a record gets here, before validation (each a dead letter with its own reason):
``tombstone``, ``empty_value``, ``oversized`` (as for JSON); ``not_wire_format`` (no magic
byte 0 and 4-byte id); ``unknown_schema``, ``schema_unavailable`` (:mod:`stream.ingest.schemas`);
``schema_mismatch``; ``undecodable`` (the body does not decode with its writer schema);
``not_an_object`` (a JSON Schema body that is not an object); ``wrong_type`` (a mapped value
of a type the JSON grammar refuses there, e.g. a boolean or a list).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from histogram.domain import Domain
from stream.ingest.events import (
    KEY_USER_ID,
    Decoded,
    EventBatch,
    EventDecoder,
    Rejection,
    Rejections,
    _key_column,
    _text,
)
from stream.ingest.readers import FieldPath, RecordError, RecordReader, SchemaMismatchError
from stream.ingest.schemas import (
    RegistryClient,
    SchemaFileError,
    SchemaLookupError,
    SchemaStore,
    WriterSchema,
    load_schema_file,
)
from stream.ingest.wire import MAGIC

__all__ = ["FORMATS", "FieldPath", "RecordReader", "RecordError", "SchemaMismatchError", "WireDecoder",
           "input_decoder", "input_problems"]

_log = logging.getLogger(__name__)

FORMATS = ("json", "avro", "protobuf", "jsonschema")
#: the registry's ``schemaType`` each format expects
_KIND = {"avro": "AVRO", "protobuf": "PROTOBUF", "jsonschema": "JSON"}


def _compiler(fmt: str) -> Callable[[WriterSchema, tuple[FieldPath, ...]], RecordReader]:
    """The format's schema compiler; its library must load now (at start-up), not at the first record.

    Raises:
        ImportError: the library is not installed (the message says which extra to install).
    """
    try:
        if fmt == "avro":
            import fastavro  # noqa: F401

            from stream.ingest.avro import compile_avro
            return compile_avro
        if fmt == "protobuf":
            import google.protobuf.descriptor_pool  # noqa: F401

            from stream.ingest.protobuf import compile_protobuf
            return compile_protobuf
    except ImportError as exc:
        raise ImportError(f"input.format {fmt} needs the {exc.name} library, which does not load: "
                          f"pip install 'dpstream[{fmt}]'") from exc
    from stream.ingest.json_schema import compile_json_schema
    return compile_json_schema


_BAD = object()


def _user_value(v: Any) -> Any:
    if v is None or type(v) is str:
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return _BAD


def _number_value(v: Any, scale: float) -> Any:
    if v is None:
        return None
    if isinstance(v, int | float) and not isinstance(v, bool):
        try:
            return float(v) * scale if scale != 1.0 else float(v)
        except OverflowError:
            return float("inf") if v > 0 else float("-inf")
    if isinstance(v, str):
        return v
    return _BAD


def _category_value(v: Any) -> Any:
    if v is None or type(v) is str:
        return v
    if isinstance(v, int | float) and not isinstance(v, bool):
        return _text(v)
    return _BAD


class WireDecoder:
    """Schema Registry wire-format records → :class:`EventBatch` (+ record-level rejections).

    Same call as :meth:`EventDecoder.decode`. One event per record. Thread-compatible (one
    decoder per loop).
    """

    def __init__(self, domain: Domain, fmt: str, store: SchemaStore, *, user_id: str = "user_id",
                 event_time: str = "event_time", fields: dict[str, str] | None = None,
                 max_message_bytes: int = 1_048_576, max_readers: int = 1000) -> None:
        if fmt not in _KIND:
            raise ValueError(f"input.format {fmt!r} is not a wire format (one of {sorted(_KIND)})")
        self.domain = domain
        self.format = fmt
        self.store = store
        self.from_key = user_id == KEY_USER_ID
        self.max_message_bytes = int(max_message_bytes)
        self.max_readers = int(max_readers)
        fields = dict(fields or {})
        unknown = sorted(set(fields) - set(domain.names))
        if unknown:
            raise ValueError(f"input.fields names {unknown}, which are not attributes of schema.attributes")
        paths = [] if self.from_key else [FieldPath("schema.user_id", tuple(user_id.split(".")), "user_id")]
        paths.append(FieldPath("schema.event_time", tuple(event_time.split(".")), "time"))
        for a in domain.attributes:
            where = fields.get(a.name, a.name)
            paths.append(FieldPath(f"attribute {a.name!r}", tuple(where.split(".")), a.kind))
        for p in paths:
            if not all(p.path):
                raise ValueError(f"{p.role}: {p.dotted!r} is not a field path (names separated by single dots)")
        self.paths = tuple(paths)
        self._compile = _compiler(fmt)
        self._readers: dict[bytes, RecordReader | RecordError] = {}  # by header (magic byte + id)
        self._names = tuple(domain.names)

    # -- schemas ---------------------------------------------------------------------
    def _reader(self, head: bytes) -> RecordReader | RecordError:
        """The reader of the schema id in ``head`` (a record's first 5 bytes), compiled once per id."""
        schema_id = int.from_bytes(head[1:5], "big")
        try:
            schema = self.store.schema(schema_id)
        except SchemaLookupError as exc:
            return RecordError(exc.reason, exc.detail)  # not kept: the store caches what may be cached
        if schema.kind != _KIND[self.format]:
            found: RecordReader | RecordError = RecordError(
                "schema_mismatch", f"schema id {schema_id} is a {schema.kind} schema but input.format is "
                f"{self.format}")
        else:
            try:
                found = self._compile(schema, self.paths)
            except SchemaMismatchError as exc:
                found = RecordError("schema_mismatch", f"schema id {schema_id}: {exc}")
            except Exception as exc:  # noqa: BLE001 - a schema the library refuses
                found = RecordError("schema_mismatch", f"schema id {schema_id} cannot be compiled "
                                    f"({type(exc).__name__}: {str(exc)[:200]})")
        if isinstance(found, RecordError):
            _log.error("input schema id %d cannot be read with the field mapping; its records go to the "
                       "dead-letter topic as %s: %s", schema_id, found.reason, found.detail)
        if len(self._readers) >= self.max_readers:
            self._readers.pop(next(iter(self._readers)))
        self._readers[head] = found
        return found

    # -- decoding --------------------------------------------------------------------
    def decode(self, payloads: Sequence[bytes | None], sources: Sequence[Any] | None = None,
               *, first_row: int = 0, keys: Sequence[bytes | None] | None = None) -> Decoded:
        """Decode many records into one batch (rows numbered from ``first_row``); see the module doc."""
        payloads = [p if type(p) is bytes or p is None else bytes(p) for p in payloads]
        src = list(sources) if sources is not None else [None] * len(payloads)
        rejected: list[Rejection] = []
        rows: list[tuple[Any, ...]] = []
        msgs: list[int] = []
        scaled: list[tuple[int, float]] = []  # (row, seconds per unit) of rows whose time is not in seconds
        readers, max_bytes = self._readers, self.max_message_bytes

        def reject(reason: str, detail: str, m: int) -> None:
            rejected.append(Rejection(reason, detail, None, payloads[m], src[m], None))

        for m, payload in enumerate(payloads):
            if payload is None:
                reject("tombstone", "the record has no value (a tombstone): it holds no event", m)
                continue
            n = len(payload)
            if n > max_bytes:
                reject("oversized", f"message of {n} bytes exceeds {max_bytes}", m)
                continue
            reader = readers.get(payload[:5])  # keyed by the header: magic byte and schema id
            if reader is None:
                if n < 5 or payload[0] != MAGIC:
                    if not payload.strip():
                        reject("empty_value", "the record's value is empty: it holds no event", m)
                    else:
                        reject("not_wire_format", f"not in the Schema Registry wire format (magic byte 0 and a "
                               f"4-byte schema id; input.format is {self.format})", m)
                    continue
                reader = self._reader(payload[:5])
            if type(reader) is RecordError:
                reject(reader.reason, reader.detail, m)
                continue
            try:
                row = reader.read(payload)  # type: ignore[union-attr]
            except RecordError as exc:
                reject(exc.reason, exc.detail, m)
                continue
            except Exception as exc:  # noqa: BLE001 - whatever the library raises on bad bytes
                reject("undecodable", f"the body does not decode with schema id {int.from_bytes(payload[1:5], 'big')} "
                       f"({type(exc).__name__})", m)
                continue
            rows.append(row)
            msgs.append(m)
            if reader.time_scale != 1.0:  # type: ignore[union-attr]  # (rare: a unit such as milliseconds)
                scaled.append((len(rows) - 1, reader.time_scale))  # type: ignore[union-attr]
        scales = [1.0] * len(rows)
        for i, sc in scaled:
            scales[i] = sc
        row_numbers = np.arange(first_row, first_row + len(rows), dtype=np.int64)
        messages = np.asarray(msgs, dtype=np.int64)
        columns, bad, details = self._columns(rows, scales)
        if bad is not None:  # values of a type the JSON grammar refuses there: wrong_type, row by row
            for i in np.flatnonzero(bad):
                m = int(messages[i])
                rejected.append(Rejection("wrong_type", details[int(i)], int(row_numbers[i]), payloads[m],
                                          src[m], None))
            keep = ~bad
            rows = [r for r, k in zip(rows, keep, strict=True) if k]
            scales = [s for s, k in zip(scales, keep, strict=True) if k]
            row_numbers, messages = row_numbers[keep], messages[keep]
            columns, _, _ = self._columns(rows, scales)
        if self.from_key:
            user_ids = _key_column(keys, messages, len(payloads))
            columns = [user_ids, *columns]
        batch = EventBatch(
            columns[0], columns[1], dict(zip(self._names, columns[2:], strict=True)), row_numbers, frozenset(),
            messages, np.full(len(row_numbers), -1, np.int64), payloads, src)
        return Decoded(batch, Rejections.from_list(rejected))

    def _columns(self, rows: list[tuple[Any, ...]],
                 scales: list[float]) -> tuple[list[Any], np.ndarray | None, dict[int, str]]:
        """The mapped values as columns (user id, time, attributes; no user id column with ``@key``),
        a mask of rows holding a value of a refused type (None when there is none) and why."""
        n = len(rows)
        values = list(zip(*rows, strict=True)) if n else [() for _ in self.paths]
        bad = np.zeros(n, dtype=bool)
        details: dict[int, str] = {}
        out: list[Any] = []
        scale = np.asarray(scales, dtype=np.float64)
        uniform = n == 0 or bool((scale == 1.0).all())
        for path, col in zip(self.paths, values, strict=True):
            col = list(col)
            usual = pa.string() if path.kind in ("user_id", "categorical") else pa.float64()
            arr = None
            if not (path.kind == "time" and not uniform and any(type(v) is str for v in col)):
                try:
                    if usual == pa.float64():
                        # inferred first: a typed conversion would read booleans as 1.0/0.0, which the JSON
                        # grammar refuses (wrong_type); numbers infer as int64 or double, nothing else passes
                        arr = pa.array(col)
                        if not (pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type)
                                or pa.types.is_null(arr.type)):
                            raise TypeError(arr.type)
                        arr = arr.cast(pa.float64())
                    else:
                        arr = pa.array(col, type=usual)
                except (pa.ArrowException, OverflowError, TypeError, ValueError):
                    arr = None
            if arr is not None:
                if path.kind == "time" or path.kind == "numeric":
                    num = arr.to_numpy(zero_copy_only=False)
                    if path.kind == "time" and not uniform:
                        num = num * scale
                    # nulls (missing values) stay an Arrow array with its validity mask
                    out.append(pa.array(num, mask=arr.is_null().to_numpy(zero_copy_only=False))
                               if arr.null_count else num)
                else:
                    out.append(arr)
                continue
            if path.kind == "user_id":
                conv = [_user_value(v) for v in col]
            elif path.kind == "categorical":
                conv = [_category_value(v) for v in col]
            else:
                conv = [_number_value(v, s if path.kind == "time" else 1.0) for v, s in zip(col, scales, strict=True)]
            for i, v in enumerate(conv):
                if v is _BAD:
                    conv[i] = None
                    if not bad[i]:
                        bad[i] = True
                        details[i] = f"{path.role} ({path.dotted}) has the wrong type"
            if path.kind == "numeric":  # a string in a numeric attribute: wrong_type in validation
                conv = [None if v is None else ("\x00" if type(v) is str else v) for v in conv]
                try:
                    out.append(pa.array(conv, type=pa.float64()))
                except (pa.ArrowException, TypeError, ValueError):
                    out.append(pa.array([None if v is None else (v if type(v) is str else repr(v)) for v in conv],
                                        type=pa.string()))
            elif path.kind == "time":
                try:
                    out.append(pa.array(conv, type=pa.float64()))
                except (pa.ArrowException, TypeError, ValueError):
                    out.append(pa.array([None if v is None else _text(v) for v in conv], type=pa.string()))
            else:
                out.append(pa.array(conv, type=pa.string()))
        return out, (bad if bad.any() else None), details


def _store(settings: Any, on_status: Callable[[bool, str], None] | None) -> SchemaStore:
    inp = settings.input
    files = {sid: load_schema_file(sid, path, inp.format) for sid, path in inp.schemas.items()}
    reg = inp.schema_registry
    client = None if reg is None else RegistryClient.from_section(reg, protobuf=inp.format == "protobuf")
    return SchemaStore(files, client,
                       cache_size=1000 if reg is None else reg.cache_size,
                       retry_backoff=10.0 if reg is None else reg.retry_backoff.total_seconds(),
                       on_status=on_status)


def input_decoder(settings: Any, *, on_status: Callable[[bool, str], None] | None = None) -> Any:
    """The decoder ``input.format`` asks for (the service's only choice about formats).

    ``on_status(ok, reason)``: told when the schema registry starts or stops failing (the
    service passes its ``/readyz`` check). Raises :class:`stream.ingest.schemas.SchemaFileError`
    for an unreadable ``input.schemas`` file (at start-up, naming it).
    """
    inp = getattr(settings, "input", None)
    if inp is None or inp.format == "json":
        return EventDecoder.from_settings(settings)
    return WireDecoder(settings.ingest_domain(), inp.format, _store(settings, on_status),
                       user_id=settings.schema_.user_id, event_time=settings.schema_.event_time,
                       fields=inp.fields, max_message_bytes=settings.service.max_message_bytes,
                       max_readers=inp.schema_registry.cache_size if inp.schema_registry else 1000)


def input_problems(settings: Any) -> list[str]:
    """What would stop the input decoder at start-up, one line each: an ``input.schemas`` file that
    is not a schema of the format, a decoder library that does not load. Reads the files; never
    contacts the registry (``dpstream check-config`` and ``run`` refuse with exit 2 on these)."""
    inp = getattr(settings, "input", None)
    if inp is None or inp.format == "json":
        return []
    try:
        input_decoder(settings)
    except SchemaFileError as exc:
        return [str(exc)]
    except ImportError as exc:
        return [f"input.format: {exc}"]
    return []
