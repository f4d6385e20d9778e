"""Writer schemas by id: from local files (air-gapped) or a Confluent-compatible Schema Registry.

A record in the Schema Registry wire format names its writer schema by a 4-byte id
(:mod:`stream.ingest.wire`). :class:`SchemaStore` answers ``schema(id)`` with a
:class:`WriterSchema`, or raises :class:`SchemaLookupError` whose ``reason`` is the dead-letter
reason of every record naming that id:

* ``unknown_schema``: neither the files nor the registry know the id (HTTP 404);
* ``schema_unavailable``: the registry could not be asked (down, timeout, 5xx, refused
  credentials, a TLS failure). Records whose schema is cached keep decoding; the others are
  dead-lettered with their bytes intact (replayable) and the store's status turns failing (the
  service shows it in ``/readyz``). The registry is asked again at most every ``retry_backoff``
  seconds, so an outage costs one timeout per backoff, not one per record.

Schemas are cached by id, least recently used out beyond ``cache_size`` ids (an id's schema
never changes in a registry, so a cached schema is never stale). The registry client is the
standard library's ``urllib`` (no extra dependency): basic auth, a CA bundle and a client
certificate like the Kafka settings; the password is never logged or shown in an error.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "WriterSchema",
    "SchemaLookupError",
    "SchemaFileError",
    "SchemaStore",
    "RegistryClient",
    "load_schema_file",
]

_log = logging.getLogger(__name__)

#: The kinds a registry reports (``schemaType``; absent means AVRO).
KINDS = ("AVRO", "PROTOBUF", "JSON")


@dataclass(frozen=True)
class WriterSchema:
    """One writer schema.

    Attributes:
        id: its registry id (the record's 4-byte id).
        kind: ``AVRO``, ``PROTOBUF`` or ``JSON``.
        text: the Avro or JSON Schema document (JSON text); empty for Protobuf.
        proto_files: Protobuf only: serialized ``FileDescriptorProto`` messages, dependencies
            first, the schema's own file last (message indexes point into that one).
    """

    id: int
    kind: str
    text: str = ""
    proto_files: tuple[bytes, ...] = ()


class SchemaLookupError(Exception):
    """A schema id could not be resolved; ``reason`` is the records' dead-letter reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class SchemaFileError(ValueError):
    """A local schema file (``input.schemas``) cannot be read: raised at start-up, names the file."""


def load_schema_file(schema_id: int, path: str | Path, fmt: str) -> WriterSchema:
    """Read ``input.schemas[schema_id]`` for ``input.format`` ``fmt``.

    ``.avsc``/``.json`` (Avro, JSON Schema): the JSON document. Protobuf: ``.desc``/``.binpb``/``.pb``
    (a ``FileDescriptorSet`` written with ``protoc --include_imports --descriptor_set_out``, the
    schema's own file last) or ``.proto`` (compiled with ``protoc`` from the PATH).

    Raises:
        SchemaFileError: missing, unreadable or not a schema of that format.
    """
    p = Path(path)
    if not p.is_file():
        raise SchemaFileError(f"input.schemas.{schema_id}: no such file {str(p)!r}; mount it or correct the path")
    if fmt == "protobuf":
        return WriterSchema(schema_id, "PROTOBUF", proto_files=_descriptor_files(schema_id, p))
    try:
        text = p.read_text(encoding="utf-8")
        json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SchemaFileError(f"input.schemas.{schema_id}: {str(p)!r} is not a JSON schema document "
                              f"({type(exc).__name__}: {exc})") from None
    return WriterSchema(schema_id, "AVRO" if fmt == "avro" else "JSON", text)


def _descriptor_files(schema_id: int, p: Path) -> tuple[bytes, ...]:
    from google.protobuf import descriptor_pb2

    if p.suffix == ".proto":
        import shutil
        import subprocess
        import tempfile

        protoc = shutil.which("protoc")
        if protoc is None:
            raise SchemaFileError(
                f"input.schemas.{schema_id}: {str(p)!r} is a .proto file and protoc is not on the PATH; "
                f"compile it once with 'protoc --include_imports --descriptor_set_out={p.stem}.desc {p.name}' "
                "and point input.schemas at the .desc file")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "set.desc"
            done = subprocess.run([protoc, f"-I{p.parent}", "--include_imports", f"--descriptor_set_out={out}",  # noqa: S603
                                   p.name], cwd=p.parent, capture_output=True, text=True, check=False)
            if done.returncode:
                raise SchemaFileError(f"input.schemas.{schema_id}: protoc refused {str(p)!r}: "
                                      f"{done.stderr.strip()[:500]}")
            data = out.read_bytes()
    else:
        data = p.read_bytes()
    fds = descriptor_pb2.FileDescriptorSet()
    try:
        fds.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - the protobuf runtime's DecodeError
        raise SchemaFileError(f"input.schemas.{schema_id}: {str(p)!r} is not a FileDescriptorSet "
                              f"({type(exc).__name__})") from None
    if not fds.file:
        raise SchemaFileError(f"input.schemas.{schema_id}: {str(p)!r} holds no .proto file")
    return tuple(f.SerializeToString() for f in fds.file)


class RegistryClient:
    """The few REST calls dpstream makes to a Schema Registry (all GETs, read-only).

    Raises :class:`SchemaLookupError` (``unknown_schema`` for HTTP 404, ``schema_unavailable``
    for anything else that stops an answer).
    """

    def __init__(self, url: str, *, username: str | None = None, password: str | None = None,
                 cafile: str | None = None, certfile: str | None = None, keyfile: str | None = None,
                 timeout: float = 5.0, protobuf: bool = False) -> None:
        self.url = url.rstrip("/")
        self.protobuf = protobuf
        self.timeout = float(timeout)
        self._headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if username is not None:
            token = base64.b64encode(f"{username}:{password or ''}".encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
        self._context: ssl.SSLContext | None = None
        if self.url.startswith("https://"):
            self._context = ssl.create_default_context(cafile=cafile)
            if certfile:
                self._context.load_cert_chain(certfile, keyfile)

    @classmethod
    def from_section(cls, section: Any, *, protobuf: bool = False) -> RegistryClient:
        pw = section.basic_auth_password
        return cls(section.url, username=section.basic_auth_username,
                   password=None if pw is None else pw.get_secret_value(), cafile=section.ssl_cafile,
                   certfile=section.ssl_certfile, keyfile=section.ssl_keyfile,
                   timeout=section.timeout.total_seconds(), protobuf=protobuf)

    def _get(self, path: str, what: str) -> Any:
        req = urllib.request.Request(f"{self.url}/{path}", headers=self._headers)  # noqa: S310 - http(s) only
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._context) as resp:  # noqa: S310
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise SchemaLookupError("unknown_schema", f"the schema registry does not know {what}") from None
            hint = " (check input.schema_registry.basic_auth_*)" if exc.code in (401, 403) else ""
            raise SchemaLookupError("schema_unavailable",
                                    f"the schema registry answered HTTP {exc.code} for {what}{hint}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = getattr(exc, "reason", exc)
            raise SchemaLookupError("schema_unavailable", f"the schema registry at {self.url} could not be "
                                    f"reached for {what} ({type(why).__name__})") from None

    def schema(self, schema_id: int) -> WriterSchema:
        # Protobuf schemas as serialized descriptors (a registry stores .proto text; parsing that
        # would need protoc); Avro and JSON Schema as they are (no format parameter for them)
        query = "?format=serialized" if self.protobuf else ""
        doc = self._get(f"schemas/ids/{schema_id}{query}", f"schema id {schema_id}")
        kind = doc.get("schemaType") or "AVRO"
        if kind not in KINDS:
            raise SchemaLookupError("unknown_schema", f"schema id {schema_id} is of type {kind!r}")
        if kind != "PROTOBUF":
            return WriterSchema(schema_id, kind, doc["schema"])
        files = self._proto_files(doc, set())
        return WriterSchema(schema_id, kind, proto_files=tuple(files))

    def _proto_files(self, doc: Mapping[str, Any], seen: set[tuple[str, int]]) -> list[bytes]:
        """The schema's FileDescriptorProto after its references' (depth first, each once)."""
        out: list[bytes] = []
        for ref in doc.get("references") or ():
            key = (str(ref["subject"]), int(ref["version"]))
            if key in seen:
                continue
            seen.add(key)
            sub = urllib.parse.quote(key[0], safe="")
            dep = self._get(f"subjects/{sub}/versions/{key[1]}?format=serialized",
                            f"reference {key[0]} version {key[1]}")
            out.extend(self._proto_files(dep, seen))
        try:
            out.append(base64.b64decode(doc["schema"], validate=True))
        except (ValueError, TypeError):
            raise SchemaLookupError("unknown_schema", "the registry returned a Protobuf schema that is not a "
                                    "serialized descriptor (does it support ?format=serialized?)") from None
        return out


class SchemaStore:
    """Local files first, then the registry; a bounded LRU cache by id; the registry's status.

    ``on_status(ok, reason)`` is called when the registry starts or stops failing (the service
    passes its readiness check). Thread-safe (one lock; network calls happen outside it).
    """

    def __init__(self, files: Mapping[int, WriterSchema], registry: RegistryClient | None, *,
                 cache_size: int = 1000, retry_backoff: float = 10.0,
                 on_status: Callable[[bool, str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.files = dict(files)
        self.registry = registry
        self.cache_size = int(cache_size)
        self.retry_backoff = float(retry_backoff)
        self.on_status = on_status or (lambda _ok, _reason: None)
        self.clock = clock
        self._cache: OrderedDict[int, Any] = OrderedDict()  # WriterSchema, or (404 error, expiry)
        self._down_until = float("-inf")
        self._down_reason = ""
        self._lock = threading.Lock()
        self.lookups = 0  # registry requests made (tests, metrics)

    @property
    def failing(self) -> str:
        """Why the registry is failing now ("" when it is not)."""
        return self._down_reason

    def schema(self, schema_id: int) -> WriterSchema:
        """The writer schema of ``schema_id``.

        Raises:
            SchemaLookupError: ``unknown_schema`` or ``schema_unavailable`` (see the module doc).
        """
        local = self.files.get(schema_id)
        if local is not None:
            return local
        now = self.clock()
        with self._lock:
            hit = self._cache.get(schema_id)
            if hit is not None:
                self._cache.move_to_end(schema_id)
                if isinstance(hit, tuple) and now >= hit[1]:  # a remembered 404, expired: ask again
                    del self._cache[schema_id]
                    hit = None
            down = now < self._down_until
        if isinstance(hit, WriterSchema):
            return hit
        if hit is not None:
            raise hit[0]
        if self.registry is None:
            raise SchemaLookupError("unknown_schema", f"schema id {schema_id} is not in input.schemas (and no "
                                    "input.schema_registry is set): add its file")
        if down:
            raise SchemaLookupError("schema_unavailable", f"{self._down_reason} (schema id {schema_id} not cached)")
        self.lookups += 1
        try:
            found: WriterSchema | SchemaLookupError = self.registry.schema(schema_id)
        except SchemaLookupError as exc:
            found = exc
        if isinstance(found, SchemaLookupError) and found.reason == "schema_unavailable":
            with self._lock:
                self._down_until = self.clock() + self.retry_backoff
                was, self._down_reason = self._down_reason, found.detail
            if not was:
                why = (f"schema registry failing: {found.detail}; records whose schema id is not cached go to the "
                       "dead-letter topic as schema_unavailable (replayable)")
                _log.error("%s; asking again every %g s", why, self.retry_backoff)
                self.on_status(False, why)
            raise found
        with self._lock:
            was, self._down_reason = self._down_reason, ""
            self._down_until = float("-inf")
            # an unknown id is remembered for one backoff (a poison id costs one request per backoff)
            self._cache[schema_id] = found if isinstance(found, WriterSchema) else (found, now + self.retry_backoff)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        if was:
            _log.warning("schema registry answering again (it was failing: %s)", was)
            self.on_status(True, "")
        if isinstance(found, SchemaLookupError):
            raise found
        return found
