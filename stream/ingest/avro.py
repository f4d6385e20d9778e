"""Avro records (``input.format: avro``): a writer schema compiled against the field mapping.

The body is read by fastavro's schemaless reader (C) with the writer schema whose logical
types were removed: the bytes are the same (a ``timestamp-millis`` is an Avro ``long``), so no
``datetime`` is built per record; the event time's unit is applied to the whole column at once
(:attr:`~stream.ingest.readers.RecordReader.time_scale`). The mapped fields are then picked
out of the record with one ``itemgetter`` call (nested paths: one small function per path).

What a mapped field may be (else ``schema_mismatch`` for that schema id): ``string``, ``int``,
``long``, ``float``, ``double``, ``boolean`` or an ``enum`` (its symbol is the categorical
value), optionally in a union with ``null`` (null is a missing value: ``missing_field``). The
event time: epoch seconds as a number, a ``string`` (ISO-8601 or epoch seconds, as in JSON), or
a ``long`` with ``timestamp-millis``/``-micros``/``-nanos`` (or the ``local-`` ones, read as
UTC), or an ``int`` ``date`` (midnight UTC). Records along a path are entered through unions
with null (a null record makes the field missing).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from stream.ingest.readers import FieldPath, RecordReader, SchemaMismatchError
from stream.ingest.schemas import WriterSchema

__all__ = ["compile_avro"]

_SCALARS = {"string", "int", "long", "float", "double", "boolean"}
_TIME_SCALE = {
    "timestamp-millis": 1e-3, "timestamp-micros": 1e-6, "timestamp-nanos": 1e-9,
    "local-timestamp-millis": 1e-3, "local-timestamp-micros": 1e-6, "local-timestamp-nanos": 1e-9,
    "date": 86_400.0,
}


def _named(doc: Any, namespace: str, table: dict[str, Any]) -> None:
    """Every named type (record, enum, fixed) of the schema by full and short name."""
    if isinstance(doc, list):
        for d in doc:
            _named(d, namespace, table)
        return
    if not isinstance(doc, dict):
        return
    t = doc.get("type")
    if t in ("record", "error", "enum", "fixed") and "name" in doc:
        name = str(doc["name"])
        ns = doc.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
        full = name if "." in name else (f"{ns}.{name}" if ns else name)
        table.setdefault(full, doc)
        table.setdefault(full.rsplit(".", 1)[-1], doc)
        namespace = ns or ""
    for f in doc.get("fields", ()) or ():
        _named(f.get("type"), namespace, table)
    for key in ("items", "values"):
        if key in doc:
            _named(doc[key], namespace, table)
    if isinstance(t, dict | list):
        _named(t, namespace, table)


def _resolve(t: Any, table: dict[str, Any]) -> Any:
    while True:
        if isinstance(t, str) and t in table:
            t = table[t]
        elif isinstance(t, dict) and isinstance(t.get("type"), dict | list):
            t = t["type"]
        elif isinstance(t, dict) and isinstance(t.get("type"), str) and t["type"] in table:
            t = table[t["type"]]
        else:
            return t


def _branches(t: Any, table: dict[str, Any]) -> list[Any]:
    """The non-null branches of a (possibly union) type, resolved."""
    t = _resolve(t, table)
    if isinstance(t, list):
        return [_resolve(b, table) for b in t if _resolve(b, table) not in ("null", {"type": "null"})]
    return [t]


def _kind(t: Any) -> tuple[str, str | None]:
    """(Avro type name, logical type) of a resolved non-union type."""
    if isinstance(t, str):
        return t, None
    return str(t.get("type")), t.get("logicalType")


def _describe(t: Any) -> str:
    name, logical = _kind(t)
    return f"{name} ({logical})" if logical else name


def _leaf_scale(fp: FieldPath, branches: list[Any], schema_id: int) -> float:
    """Check a mapped leaf's type; the seconds per unit of its numbers."""
    scales = set()
    for b in branches:
        name, logical = _kind(b)
        if name == "enum" and fp.kind != "time":
            scales.add(1.0)
            continue
        if name not in _SCALARS or (logical is not None and logical not in _TIME_SCALE and logical != "uuid"):
            raise SchemaMismatchError(
                f"{fp.role} ({fp.dotted}) is {_describe(b)}; dpstream reads strings, numbers, booleans and enums "
                "(and timestamp logical types for the event time): map another field or change the schema")
        scale = _TIME_SCALE.get(logical or "", 1.0) if fp.kind == "time" else 1.0
        scales.add(scale)
    if len(scales) > 1:
        raise SchemaMismatchError(f"{fp.role} ({fp.dotted}) is a union of time types with different units")
    return scales.pop() if scales else 1.0


def _walk(doc: dict[str, Any], fp: FieldPath, table: dict[str, Any], schema_id: int) -> float:
    """Follow ``fp.path`` through the record schema ``doc``; returns the leaf's time scale."""
    rec = doc
    for depth, name in enumerate(fp.path):
        fields = {f["name"]: f for f in rec.get("fields", ())}
        where = ".".join(fp.path[:depth]) or "the record"
        if name not in fields:
            raise SchemaMismatchError(
                f"{fp.role} needs field {fp.dotted!r} but {where} has no field {name!r} "
                f"(it has {sorted(fields)}); restore the field in the writer schema or change the mapping")
        branches = _branches(fields[name]["type"], table)
        if depth == len(fp.path) - 1:
            return _leaf_scale(fp, branches, schema_id)
        records = [b for b in branches if isinstance(b, dict) and b.get("type") in ("record", "error")]
        if len(records) != 1 or len(branches) != 1:
            raise SchemaMismatchError(f"{fp.role} needs {fp.dotted!r} but {'.'.join(fp.path[:depth + 1])!r} is "
                                      f"not a record (or a union of one record with null)")
        rec = records[0]
    raise AssertionError("unreachable")


def _strip_logical(doc: Any) -> Any:
    """The schema without logical types (the same bytes, plain Python values out)."""
    if isinstance(doc, list):
        return [_strip_logical(d) for d in doc]
    if isinstance(doc, dict):
        out = {k: _strip_logical(v) for k, v in doc.items() if k != "logicalType"}
        if doc.get("logicalType") == "decimal":  # precision/scale mean nothing without it
            out.pop("precision", None)
            out.pop("scale", None)
        return out
    return doc


def _path_getter(path: tuple[str, ...]) -> Callable[[Any], Any]:
    head, rest = path[0], path[1:]

    def get(record: Any) -> Any:
        v = record[head]
        for name in rest:
            if v is None:
                return None
            v = v[name]
        return v
    return get


def compile_avro(schema: WriterSchema, paths: tuple[FieldPath, ...]) -> RecordReader:
    """A reader of records written with ``schema`` that returns the ``paths`` values.

    Raises:
        SchemaMismatchError: a mapped field is absent or of a type dpstream cannot read.
    """
    from fastavro import parse_schema, schemaless_reader

    doc = json.loads(schema.text)
    table: dict[str, Any] = {}
    _named(doc, "", table)
    root = _resolve(doc, table)
    if not isinstance(root, dict) or root.get("type") not in ("record", "error"):
        raise SchemaMismatchError(f"the writer schema is a {_describe(root) if root else root!r}, not a record")
    time_scale = 1.0
    for fp in paths:
        scale = _walk(root, fp, table, schema.id)
        if fp.kind == "time":
            time_scale = scale
    parsed = parse_schema(_strip_logical(doc))  # with fastavro's "parsed" hint: not re-parsed per record
    flat = all(len(fp.path) == 1 for fp in paths)
    if flat:
        pick: Callable[[Any], tuple[Any, ...]] = itemgetter(*(fp.path[0] for fp in paths))  # type: ignore[assignment]
        if len(paths) == 1:
            one = pick
            pick = lambda r: (one(r),)  # noqa: E731
    else:
        getters = tuple(_path_getter(fp.path) for fp in paths)

        def pick(record: Any) -> tuple[Any, ...]:
            return tuple([g(record) for g in getters])
    bytes_io = io.BytesIO

    def read(payload: bytes) -> tuple[Any, ...]:
        buf = bytes_io(payload)
        buf.seek(5)
        record = schemaless_reader(buf, parsed, None)
        if buf.tell() != len(payload):
            raise ValueError("bytes left over after the record")
        return pick(record)

    return RecordReader(read, time_scale)
