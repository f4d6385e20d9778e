"""A small Schema Registry for tests: the REST endpoints confluent-kafka's serializers and dpstream call.

Real HTTP on a loopback port (a thread), in memory: ``POST /subjects/{s}/versions`` (register;
the same schema text gets the same id across subjects, as in Confluent's registry),
``POST /subjects/{s}`` (look a schema up), ``GET /schemas/ids/{id}``,
``GET /subjects/{s}/versions[/{v}|/latest]``, ``GET /subjects``. Protobuf schemas are stored as
the serializer registers them (a base64 FileDescriptorProto), which is also what
``?format=serialized`` returns. Switches for failure tests: ``down`` (every request 503),
``auth`` (basic auth ``(user, password)`` required, else 401). ``requests`` logs the paths asked.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemaRegistry:
    def __init__(self) -> None:
        self.schemas: dict[int, dict[str, Any]] = {}  # id → {schema, schemaType, references}
        self.subjects: dict[str, list[int]] = {}  # subject → ids by version (1-based)
        self.down = False
        self.auth: tuple[str, str] | None = None
        self.requests: list[str] = []
        self._lock = threading.Lock()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                parts = urlsplit(self.path)
                registry.requests.append(f"{method} {parts.path}" + (f"?{parts.query}" if parts.query else ""))
                if registry.down:
                    return self._send(503, {"error_code": 50300, "message": "unavailable"})
                if registry.auth is not None:
                    want = "Basic " + base64.b64encode(":".join(registry.auth).encode()).decode()
                    if self.headers.get("Authorization") != want:
                        return self._send(401, {"error_code": 40101, "message": "unauthorized"})
                body = None
                if method == "POST":
                    n = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(n) or b"{}")
                status, out = registry.route(method, [unquote(p) for p in parts.path.strip("/").split("/")], body)
                self._send(status, out)

            def do_GET(self) -> None:  # noqa: N802
                self._handle("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._handle("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="schema-registry", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> SchemaRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the registry ---------------------------------------------------------------
    def register(self, subject: str, schema: str, schema_type: str = "AVRO",
                 references: list[dict[str, Any]] | None = None) -> int:
        with self._lock:
            entry = {"schema": schema, "schemaType": schema_type, "references": references or []}
            sid = next((i for i, e in self.schemas.items() if e == entry), None)
            if sid is None:
                sid = len(self.schemas) + 1
                self.schemas[sid] = entry
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
            return sid

    def _version(self, subject: str, sid: int) -> dict[str, Any]:
        e = self.schemas[sid]
        out = {"subject": subject, "id": sid, "version": self.subjects[subject].index(sid) + 1,
               "schema": e["schema"], "references": e["references"]}
        if e["schemaType"] != "AVRO":
            out["schemaType"] = e["schemaType"]
        return out

    def route(self, method: str, path: list[str], body: Any) -> tuple[int, Any]:
        not_found = (404, {"error_code": 40403, "message": "Schema not found"})
        if method == "POST" and len(path) == 3 and path[0] == "subjects" and path[2] == "versions":
            sid = self.register(path[1], body["schema"], body.get("schemaType", "AVRO"), body.get("references"))
            return 200, {"id": sid}
        if method == "POST" and len(path) == 2 and path[0] == "subjects":
            entry = {"schema": body["schema"], "schemaType": body.get("schemaType", "AVRO"),
                     "references": body.get("references") or []}
            for sid in self.subjects.get(path[1], []):
                if self.schemas[sid] == entry:
                    return 200, self._version(path[1], sid)
            return not_found
        if method == "GET" and path[:2] == ["schemas", "ids"] and len(path) == 3:
            e = self.schemas.get(int(path[2]))
            if e is None:
                return not_found
            out = {"schema": e["schema"], "references": e["references"]}
            if e["schemaType"] != "AVRO":
                out["schemaType"] = e["schemaType"]
            return 200, out
        if method == "GET" and path == ["subjects"]:
            return 200, sorted(self.subjects)
        if method == "GET" and path[0] == "subjects" and len(path) >= 3 and path[2] == "versions":
            versions = self.subjects.get(path[1])
            if not versions:
                return (404, {"error_code": 40401, "message": "Subject not found"})
            if len(path) == 3:
                return 200, list(range(1, len(versions) + 1))
            v = len(versions) if path[3] == "latest" else int(path[3])
            if not 1 <= v <= len(versions):
                return (404, {"error_code": 40402, "message": "Version not found"})
            return 200, self._version(path[1], versions[v - 1])
        return (404, {"error_code": 404, "message": f"no route {method} /{'/'.join(path)}"})


# ---------------------------------------------------------------------------
# Protobuf message classes built at test time from descriptors (no protoc needed)


def admission_proto(*, package: str = "hospital", drop: tuple[str, ...] = (), extra: bool = False,
                    first: str | None = None) -> tuple[Any, Any]:
    """``(FileDescriptorProto, Admission class)`` of a small admissions schema.

    ``Admission {Patient patient = 1; google.protobuf.Timestamp event_time = 2; optional int32 age = 3;
    Sex sex = 4;}`` with ``Patient {string id = 1;}`` and ``enum Sex {M = 0; F = 1; X = 2;}``; ``drop``
    removes fields of Admission (a schema that evolved away from the mapping), ``extra`` adds
    ``string ward = 5``, ``first`` puts another message first in the file (so Admission's message
    index is not 0).
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name=f"{package}/admission.proto", package=package, syntax="proto3",
                                             dependency=["google/protobuf/timestamp.proto"])
    sex = fdp.enum_type.add(name="Sex")
    for i, n in enumerate(["M", "F", "X"]):
        sex.value.add(name=n, number=i)
    if first:
        fdp.message_type.add(name=first).field.add(name="note", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    fdp.message_type.add(name="Patient").field.add(name="id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    m = fdp.message_type.add(name="Admission")
    fields = [("patient", 1, F.TYPE_MESSAGE, f".{package}.Patient"),
              ("event_time", 2, F.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
              ("age", 3, F.TYPE_INT32, None), ("sex", 4, F.TYPE_ENUM, f".{package}.Sex")]
    if extra:
        fields.append(("ward", 5, F.TYPE_STRING, None))
    for name, number, typ, type_name in fields:
        if name in drop:
            continue
        f = m.field.add(name=name, number=number, type=typ, label=F.LABEL_OPTIONAL)
        if type_name:
            f.type_name = type_name
        if name == "age":  # proto3 `optional`: an unset age is missing, not 0
            f.proto3_optional = True
            f.oneof_index = len(m.oneof_decl)
            m.oneof_decl.add(name="_age")
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(fdp)
    return fdp, message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Admission"))
