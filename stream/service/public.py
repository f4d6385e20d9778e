"""The public HTTP surface: the live page and the release API, on ``service.public_port``.

Dashboard users get this port; operators keep ``service.http_port`` (``/metrics``,
``/healthz``, ``/readyz``) off the public network. The two never share a port
(the configuration refuses it), so publishing the page cannot expose a metric.

What it serves — and nothing else (``docs/privacy.md`` §9):

* ``/`` and ``/static/…``: the live page (HTML, JS, CSS shipped in the package;
  it fetches nothing from any other origin);
* ``/api/domain``: the stream's domain message, byte for byte as on the output
  topic (what each bin means, and the public privacy configuration);
* ``/api/releases/latest``: the latest release message, byte for byte as on the
  output topic (a ``model-release`` message when ``release.mechanism`` is copula or marginals);
* ``/api/releases?from=A&to=B``: the retained releases with ``A <= index < B``
  (both optional), oldest first, in an envelope that says what is retained;
* ``/api/query?where=ATTR:LOW-HIGH…`` or ``?marginal=A,B`` (``&timestep=N``): a box count or
  a marginal table computed from one retained release message (:mod:`stream.service.query`:
  the released model or counts; post-processing, nothing new is revealed);
* ``/api``: this list, as JSON.

Every release byte served here is a release message the service committed to the
output topic (the feed is filled after the transaction committed, and from the
output topic's tail at start-up): the port adds no information to what dashboard
users already read from Kafka. Raw counts, noise, thresholds and ledgers never
reach :class:`ReleaseFeed`.

Retention: :class:`ReleaseFeed` keeps the latest ``service.public_history``
releases (default 1000) and at most ``service.public_history_bytes`` of them
(default 64 MiB), whichever bound is reached first; older timesteps are read
from the output topic (the consumer guide in the README).
"""

from __future__ import annotations

import json
import threading
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

__all__ = ["ReleaseFeed", "Retained", "make_public_app", "start_public", "STATIC_FILES"]

#: the page's files (package data under ``stream/service/static/``) and their content types
STATIC_FILES: dict[str, str] = {
    "index.html": "text/html; charset=utf-8",
    "live.js": "text/javascript; charset=utf-8",
    "live.css": "text/css; charset=utf-8",
}
_SECURITY_HEADERS = [
    # the page loads only its own files and talks only to this origin
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                                "script-src 'self'; connect-src 'self'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
]
_JSON = "application/json"


@dataclass(frozen=True)
class Retained:
    """Which timesteps the feed holds: ``first``..``last`` (inclusive; None when empty),
    ``count`` messages, at most ``capacity`` messages and ``max_bytes`` bytes."""

    first: int | None
    last: int | None
    count: int
    capacity: int
    max_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"first": self.first, "last": self.last, "count": self.count, "capacity": self.capacity,
                "max_bytes": self.max_bytes}


class ReleaseFeed:
    """A bounded, thread-safe ring of the latest published release messages (canonical bytes).

    Keyed by timestep index: a re-sent release (after a crash, the identical bytes) replaces
    its copy instead of adding one. When more than ``capacity`` messages or ``max_bytes``
    bytes are held, the oldest timesteps are dropped (the latest one is always kept).
    Memory is therefore bounded whatever the stream's length.
    """

    def __init__(self, capacity: int = 1000, max_bytes: int = 64 << 20) -> None:
        if capacity < 1 or max_bytes < 1:
            raise ValueError("ReleaseFeed needs capacity >= 1 and max_bytes >= 1")
        self.capacity, self.max_bytes = int(capacity), int(max_bytes)
        self._lock = threading.Lock()
        self._index: list[int] = []          # sorted timestep indexes
        self._messages: dict[int, bytes] = {}
        self._bytes = 0

    def add(self, message: bytes) -> bool:
        """Hold one published message; False (ignored) if it is not a release message."""
        try:
            doc = json.loads(message)
            if doc.get("message_type") not in ("release", "model-release"):
                return False
            index = int(doc["timestep"]["index"])
        except (ValueError, TypeError, KeyError, AttributeError):
            return False
        with self._lock:
            old = self._messages.get(index)
            if old is None:
                if self._index and index < self._index[0] and len(self._index) >= self.capacity:
                    return True  # older than everything retained in a full feed: it would be evicted first
                insort(self._index, index)
            else:
                self._bytes -= len(old)
            self._messages[index] = bytes(message)
            self._bytes += len(message)
            while len(self._index) > 1 and (len(self._index) > self.capacity or self._bytes > self.max_bytes):
                gone = self._index.pop(0)
                self._bytes -= len(self._messages.pop(gone))
        return True

    def add_many(self, messages: Iterable[bytes]) -> None:
        for m in messages:
            self.add(m)

    def latest(self) -> bytes | None:
        with self._lock:
            return self._messages[self._index[-1]] if self._index else None

    def between(self, start: int | None = None, stop: int | None = None) -> list[bytes]:
        """The retained messages with ``start <= index < stop``, oldest first."""
        with self._lock:
            lo = 0 if start is None else bisect_left(self._index, start)
            hi = len(self._index) if stop is None else bisect_left(self._index, stop)
            return [self._messages[i] for i in self._index[lo:max(lo, hi)]]

    def retained(self) -> Retained:
        with self._lock:
            first = self._index[0] if self._index else None
            last = self._index[-1] if self._index else None
            return Retained(first, last, len(self._index), self.capacity, self.max_bytes)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes


Response = tuple[str, list[tuple[str, str]], bytes]


def _static(name: str) -> bytes:
    return resources.files("stream.service").joinpath("static", name).read_bytes()


def _error(status: str, message: str) -> Response:
    return status, [("Content-Type", _JSON)], json.dumps({"error": message}).encode()


def _index_param(query: dict[str, list[str]], name: str) -> int | None:
    values = query.get(name)
    if not values:
        return None
    text = values[-1].strip()
    if not text.isdigit():
        raise ValueError(f"query parameter {name}={values[-1]!r} is not a timestep index: give a whole number "
                         f">= 0, e.g. /api/releases?from=0&to=100")
    return int(text)


def make_public_app(feed: ReleaseFeed, domain: Callable[[], bytes | None]) -> Callable[..., Iterable[bytes]]:
    """The public WSGI application (see the module docstring for what it serves).

    Args:
        feed: the published releases (filled by the service after each committed transaction).
        domain: returns the stream's domain message bytes (None until the service built it).
    """
    static = {name: _static(name) for name in STATIC_FILES}  # read once: the files ship with the package

    def api_index() -> Response:
        body = {
            "endpoints": {
                "/api/domain": "the domain message (schema: stream/schemas/domain.schema.json)",
                "/api/releases/latest": "the latest release message (schema: stream/schemas/release.schema.json; "
                                        "a model release, message_type model-release: "
                                        "stream/schemas/model-release.schema.json)",
                "/api/releases?from=A&to=B": "retained releases with A <= timestep index < B, oldest first",
                "/api/query?where=ATTR:LOW-HIGH&where=...&timestep=N": "estimated records in a box of level "
                "ranges, computed from a retained release (the released model or counts; default: the latest)",
                "/api/query?marginal=ATTR,ATTR&timestep=N": "the table over those attributes, from a retained release",
            },
            "retained": feed.retained().to_json(),
        }
        return "200 OK", [("Content-Type", _JSON)], json.dumps(body).encode()

    def releases(query: dict[str, list[str]]) -> Response:
        try:
            start, stop = _index_param(query, "from"), _index_param(query, "to")
        except ValueError as exc:
            return _error("400 Bad Request", str(exc))
        items = feed.between(start, stop)
        retained = json.dumps(feed.retained().to_json(), sort_keys=True, separators=(",", ":")).encode()
        body = b'{"releases":[' + b",".join(items) + b'],"retained":' + retained + b"}"
        return "200 OK", [("Content-Type", _JSON)], body

    def answer(query: dict[str, list[str]]) -> Response:
        from stream.service.query import QueryError, answer_query

        data = domain()
        if data is None:
            return _error("503 Service Unavailable", "the service is starting; the domain is not known yet")
        try:
            index = _index_param(query, "timestep")
        except ValueError as exc:
            return _error("400 Bad Request", str(exc))
        if index is None:
            message = feed.latest()
        else:
            found = feed.between(index, index + 1)
            message = found[0] if found else None
        if message is None:
            kept = feed.retained().to_json()
            return _error("404 Not Found", "no release published yet" if index is None else
                          f"timestep {index} is not retained here (retained {kept['first']}..{kept['last']}): "
                          "read older releases from the output topic")
        try:
            body = answer_query(query, json.loads(data), json.loads(message))
        except QueryError as exc:
            return _error("400 Bad Request", str(exc))
        return "200 OK", [("Content-Type", _JSON)], json.dumps(body, sort_keys=True).encode()

    def route(path: str, query: dict[str, list[str]]) -> Response:
        if path in ("/", "/index.html"):
            return "200 OK", [("Content-Type", STATIC_FILES["index.html"])], static["index.html"]
        if path.startswith("/static/") and path[len("/static/"):] in static:
            name = path[len("/static/"):]
            return "200 OK", [("Content-Type", STATIC_FILES[name])], static[name]
        if path in ("/api", "/api/"):
            return api_index()
        if path == "/api/domain":
            data = domain()
            if data is None:
                return _error("503 Service Unavailable", "the service is starting; the domain is not known yet")
            return "200 OK", [("Content-Type", _JSON)], data
        if path == "/api/releases/latest":
            latest = feed.latest()
            if latest is None:
                return _error("404 Not Found", "no release published yet: the first one follows the end of "
                                               "the first timestep (of timestep k under release.delay: k)")
            return "200 OK", [("Content-Type", _JSON)], latest
        if path == "/api/releases":
            return releases(query)
        if path == "/api/query":
            return answer(query)
        return _error("404 Not Found", f"no such page {path!r}: the public port serves /, /api, /api/domain, "
                                       "/api/releases/latest, /api/releases and /api/query")

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain"), ("Allow", "GET, HEAD")])
            return [b"method not allowed: the public port is read-only\n"]
        status, headers, body = route(environ.get("PATH_INFO", "/"),
                                      parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=False))
        cache = "no-store" if not headers[0][1].startswith(("text/css", "text/javascript")) else "max-age=60"
        start_response(status, [*headers, *_SECURITY_HEADERS, ("Cache-Control", cache),
                                ("Content-Length", str(len(body)))])
        return [b"" if method == "HEAD" else body]

    return app


def start_public(settings: Any, domain: Callable[[], bytes | None]) -> tuple[ReleaseFeed | None, Any]:
    """The feed and the running public server for ``settings.service`` (``(None, None)`` when
    ``service.public_port`` is unset). The server runs in a daemon thread; stop it with ``.stop()``."""
    from stream.service.http import HttpServer

    svc = settings.service
    if svc.public_port is None:
        return None, None
    feed = ReleaseFeed(svc.public_history, svc.public_history_bytes)
    # a port in use: ListenError naming service.public_port (the CLI exits 2 with that one line)
    server = HttpServer(make_public_app(feed, domain), svc.public_host, svc.public_port, setting="service.public_port")
    return feed, server.start()
