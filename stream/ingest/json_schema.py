"""JSON Schema records (``input.format: jsonschema``): the wire header, then a UTF-8 JSON object.

Confluent's ``JSONSerializer`` validates each object against its schema when producing; dpstream
does not validate the body against the schema again (that would cost more than the decoding):
the mapped values are checked by dpstream's own rules, exactly as JSON input's
(``wrong_type``, ``missing_field``, ``out_of_domain``, …), and other properties are ignored.

The schema is used to refuse a writer schema that cannot carry the mapping: where a schema
object lists ``properties`` (and does not merely point elsewhere with ``$ref`` or a
combinator), each mapped path must be among them, else ``schema_mismatch`` for that schema id.
The body is parsed by msgspec (C); a body that is not JSON is ``undecodable``, one that is not
an object ``not_an_object``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec

from stream.ingest.readers import FieldPath, RecordError, RecordReader, SchemaMismatchError
from stream.ingest.schemas import WriterSchema

__all__ = ["compile_json_schema"]


def _check(doc: Any, fp: FieldPath) -> None:
    node = doc
    for depth, name in enumerate(fp.path):
        if not isinstance(node, dict) or any(k in node for k in ("$ref", "anyOf", "oneOf", "allOf")):
            return  # not followed: the path may be there
        props = node.get("properties")
        if not isinstance(props, dict):
            return
        if name not in props:
            where = ".".join(fp.path[:depth]) or "the object"
            raise SchemaMismatchError(
                f"{fp.role} needs property {fp.dotted!r} but {where} has no property {name!r} "
                f"(it has {sorted(props)}); restore it in the writer schema or change the mapping")
        node = props[name]


def _path_getter(path: tuple[str, ...]) -> Callable[[dict[str, Any]], Any]:
    if len(path) == 1:
        key = path[0]
        return lambda d: d.get(key)

    def get(d: Any) -> Any:
        for name in path:
            if not isinstance(d, dict):
                return None
            d = d.get(name)
        return d
    return get


def compile_json_schema(schema: WriterSchema, paths: tuple[FieldPath, ...]) -> RecordReader:
    """A reader of JSON records written under ``schema`` that returns the ``paths`` values.

    Raises:
        SchemaMismatchError: the schema lists properties and a mapped one is not among them.
    """
    doc = json.loads(schema.text)
    for fp in paths:
        _check(doc, fp)
    getters = tuple(_path_getter(fp.path) for fp in paths)
    decode = msgspec.json.decode

    def read(payload: bytes) -> tuple[Any, ...]:
        try:
            obj = decode(memoryview(payload)[5:])
        except (msgspec.DecodeError, ValueError, RecursionError) as exc:
            raise RecordError("undecodable", f"the body is not JSON ({type(exc).__name__})") from None
        if not isinstance(obj, dict):
            raise RecordError("not_an_object", f"the body must be a JSON object, got {type(obj).__name__}")
        return tuple([g(obj) for g in getters])

    return RecordReader(read, 1.0)
