"""Protobuf records (``input.format: protobuf``): a writer schema compiled against the field mapping.

The schema's ``.proto`` files (serialized descriptors, :class:`~stream.ingest.schemas.WriterSchema`)
are loaded into a private descriptor pool, next to the well-known types
(``google/protobuf/timestamp.proto`` and the others a Confluent serializer does not register);
message classes come from ``message_factory`` and parse with the protobuf runtime's upb backend
(C). The message a record holds is named by its message indexes (:mod:`stream.ingest.wire`);
each (schema id, indexes) is compiled once.

What a mapped field may be (else ``schema_mismatch``): a singular scalar (string, integers,
float, double, bool), an enum (its value's name is the categorical value; an unknown number is
kept as its decimal text, then ``out_of_domain``) or a ``google.protobuf.Timestamp`` (seconds +
nanos / 10⁹). Messages along a path must be singular; an unset message makes the field missing,
as does an unset field with presence (``optional``, proto2). A proto3 field without presence
that was never set reads as its default (0, ""), as every Protobuf reader sees it: use
``optional`` for fields that may be absent.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

from stream.ingest.readers import FieldPath, RecordError, RecordReader, SchemaMismatchError
from stream.ingest.schemas import WriterSchema
from stream.ingest.wire import message_indexes

__all__ = ["compile_protobuf"]

_TIMESTAMP = "google.protobuf.Timestamp"


def _pool(files: tuple[bytes, ...]) -> tuple[Any, Any]:
    """(pool, FileDescriptorProto of the schema's own file)."""
    from google.protobuf import (
        any_pb2,
        api_pb2,
        descriptor_pb2,
        descriptor_pool,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )

    pool = descriptor_pool.DescriptorPool()
    known = set()
    for mod in (any_pb2, source_context_pb2, type_pb2, api_pb2, descriptor_pb2, duration_pb2, empty_pb2,
                field_mask_pb2, struct_pb2, timestamp_pb2, wrappers_pb2):
        pool.AddSerializedFile(mod.DESCRIPTOR.serialized_pb)
        known.add(mod.DESCRIPTOR.name)
    protos = [descriptor_pb2.FileDescriptorProto.FromString(f) for f in files]
    for fp in protos:
        if fp.name not in known:
            pool.Add(fp)
            known.add(fp.name)
    return pool, protos[-1]


def _message(pool: Any, main: Any, indexes: tuple[int, ...]) -> Any:
    """The message descriptor ``indexes`` names in the file ``main``."""
    if indexes[0] >= len(main.message_type):
        raise RecordError("undecodable", f"message index {indexes[0]} but the schema's file has "
                          f"{len(main.message_type)} top-level messages")
    proto = main.message_type[indexes[0]]
    name = f"{main.package}.{proto.name}" if main.package else proto.name
    for i in indexes[1:]:
        if i >= len(proto.nested_type):
            raise RecordError("undecodable", f"nested message index {i} is out of range")
        proto = proto.nested_type[i]
        name = f"{name}.{proto.name}"
    return pool.FindMessageTypeByName(name)


def _leaf(fp: FieldPath, field: Any) -> Callable[[Any], Any] | None:
    """How to read a mapped leaf field from its message; None: a plain attribute read."""
    from google.protobuf.descriptor import FieldDescriptor as F

    name = field.name
    if field.message_type is not None:
        if field.message_type.full_name != _TIMESTAMP:
            raise SchemaMismatchError(f"{fp.role} ({fp.dotted}) is a {field.message_type.full_name} message; "
                                      "dpstream reads scalars, enums and google.protobuf.Timestamp")

        def timestamp(m: Any) -> Any:
            if not m.HasField(name):
                return None
            ts = getattr(m, name)
            return ts.seconds + ts.nanos * 1e-9
        return timestamp
    if field.type == F.TYPE_BYTES:
        raise SchemaMismatchError(f"{fp.role} ({fp.dotted}) is bytes; dpstream reads strings, numbers and enums")
    if field.enum_type is not None:
        names = {v.number: v.name for v in field.enum_type.values}
        presence = field.has_presence

        def enum(m: Any) -> Any:
            if presence and not m.HasField(name):
                return None
            v = getattr(m, name)
            return names.get(v, str(v))
        return enum
    if field.has_presence:
        return lambda m: getattr(m, name) if m.HasField(name) else None
    return None


def _getter(desc: Any, fp: FieldPath) -> Callable[[Any], Any] | str:
    """A function of the message returning the mapped value, or the field name for a plain read."""
    msg = desc
    steps: list[str] = []
    for depth, name in enumerate(fp.path):
        field = msg.fields_by_name.get(name)
        where = ".".join(fp.path[:depth]) or msg.full_name
        if field is None:
            raise SchemaMismatchError(
                f"{fp.role} needs field {fp.dotted!r} but {where} has no field {name!r} "
                f"(it has {sorted(msg.fields_by_name)}); restore the field in the writer schema or change the mapping")
        if _repeated(field):
            raise SchemaMismatchError(f"{fp.role} ({'.'.join(fp.path[:depth + 1])}) is a repeated field or a map")
        if depth < len(fp.path) - 1:
            if field.message_type is None or field.message_type.full_name == _TIMESTAMP:
                raise SchemaMismatchError(f"{fp.role} needs {fp.dotted!r} but {'.'.join(fp.path[:depth + 1])!r} "
                                          "is not a message")
            steps.append(name)
            msg = field.message_type
            continue
        leaf = _leaf(fp, field)
    if not steps:
        return fp.path[0] if leaf is None else leaf
    last = fp.path[-1]
    read = leaf if leaf is not None else (lambda m: getattr(m, last))

    def nested(m: Any) -> Any:
        for s in steps:
            if not m.HasField(s):
                return None
            m = getattr(m, s)
        return read(m)
    return nested


def _repeated(field: Any) -> bool:
    try:
        return bool(field.is_repeated)
    except AttributeError:  # older runtimes
        return field.label == field.LABEL_REPEATED


def _compile_message(desc: Any, paths: tuple[FieldPath, ...]) -> tuple[Callable[[bytes], Any],
                                                                         Callable[[Any], tuple[Any, ...]]]:
    """``(parse, pick)``: bytes → message (upb), message → the mapped values."""
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(desc)
    parse = cls.FromString
    getters = [_getter(desc, fp) for fp in paths]
    if all(isinstance(g, str) for g in getters):
        pick = attrgetter(*getters)  # type: ignore[arg-type]
        if len(getters) == 1:
            one = pick
            pick = lambda m: (one(m),)  # type: ignore[assignment]  # noqa: E731
    else:
        fns = tuple(attrgetter(g) if isinstance(g, str) else g for g in getters)

        def pick(m: Any) -> tuple[Any, ...]:  # type: ignore[misc]
            return tuple([f(m) for f in fns])

    return parse, pick


def compile_protobuf(schema: WriterSchema, paths: tuple[FieldPath, ...]) -> RecordReader:
    """A reader of records written with ``schema`` that returns the ``paths`` values.

    Each message is compiled against the mapping when its first record comes (by its message
    indexes); a message lacking a mapped field makes each of its records ``schema_mismatch``.

    Raises:
        SchemaMismatchError: the schema's file declares no message.
    """
    pool, main = _pool(schema.proto_files)
    if not main.message_type:
        raise SchemaMismatchError("the schema's .proto file declares no message")
    compiled: dict[tuple[int, ...], Any] = {}

    def message(idx: tuple[int, ...]) -> Any:
        desc = _message(pool, main, idx)  # RecordError (undecodable) for an index out of range
        try:
            fn: Any = _compile_message(desc, paths)
        except SchemaMismatchError as exc:
            fn = RecordError("schema_mismatch", f"schema id {schema.id} message {desc.full_name}: {exc}")
        compiled[idx] = fn
        return fn

    first = (0,)

    def read(payload: bytes) -> tuple[Any, ...]:
        if payload[5] == 0:  # the usual case: the file's first message, indexes one byte
            fn = compiled.get(first) or message(first)
            start = 6
        else:
            try:
                idx, start = message_indexes(payload)
            except ValueError as exc:
                raise RecordError("undecodable", f"bad Protobuf message indexes: {exc}") from None
            fn = compiled.get(idx) or message(idx)
        if type(fn) is RecordError:
            raise fn
        parse, pick = fn
        return pick(parse(payload[start:]))

    return RecordReader(read, 1.0)
