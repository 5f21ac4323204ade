"""The hot path: a fresh cached feed, for a URL already seen, is answered before Flask runs.

Feed readers poll the same URLs every few minutes, so most requests are hits. A hit needs no routing,
no validation and no request object: the URL was resolved to its cache key the first time (by the Flask
view, which remembers it here), and the store has the bytes. Anything else — a conditional request
(Werkzeug's `make_conditional` handles those), a browser asking for HTML, a miss, a stale copy, an
error — goes to Flask as usual. Kept for bench row 1, "cached Atom hit vs the limit": through Flask a hit
costs about three times a trivial Flask route, far from the 0.85× the row asks for.

A body of several megabytes (a topic's 500 long posts) goes out in slices with a turn between them
(`in_turns`): gevent's `sendall` yields only when the socket's buffer is full, and to a client that reads
as fast as loopback delivers it never is, so one 13 MB answer held the worker's loop for its whole copy.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

from feedbridge.feeds.personal import Member
from feedbridge.feeds.service import FeedService
from feedbridge.feeds.spec import FeedSpec
from feedbridge.render.formats import FORMATS
from feedbridge.render.turns import take_turn
from feedbridge.web.logs import log_request
from feedbridge.web.responses import NOSNIFF, feed_headers

RESOLVED_URLS = 4096
"""Distinct feed URLs whose resolution is remembered; a bound, so random query strings cost nothing lasting."""

_PASS_HEADERS = ("HTTP_IF_NONE_MATCH", "HTTP_IF_MODIFIED_SINCE", "HTTP_RANGE")
SLICE = 256 * 1024
"""Bytes of a body written between two turns (see the module docstring)."""


def in_turns(body: bytes) -> Iterable[bytes]:
    """`body` as a WSGI iterable: itself when it is one slice, else its slices, each after a turn."""
    return [body] if len(body) <= SLICE else _slices(body)


def _slices(body: bytes) -> Iterator[bytes]:
    for start in range(0, len(body), SLICE):
        take_turn()
        yield body[start : start + SLICE]


@dataclass(frozen=True, slots=True)
class Resolved:
    """What a feed URL means: its spec, its own URL (rel=self), its stylesheet, its cache key, and whether
    its token verified (`signed`: read with the forum's key, in the private scope) or it is a member's
    personal feed (`member`: read with their key, in the members' scope, `feedbridge.feeds.personal`)."""

    spec: FeedSpec
    self_url: str
    stylesheet_url: str | None
    key: str
    signed: bool = False
    member: Member | None = None

    @property
    def private(self) -> bool:
        """Whether no shared cache between the bridge and the reader may keep the answer."""
        return self.signed or self.member is not None

    def scope(self, service: FeedService) -> FeedService:
        return service.scope(self.signed, self.member is not None)


class ResolvedUrls:
    """URL → `Resolved`, bounded (least recently used out) and thread-safe.

    Keyed by everything in the WSGI environ that goes into a `Resolved`: the scheme and host (the self
    link), the script root (`SCRIPT_NAME`, which a trusted proxy may set, in the stylesheet link), the path
    and the query. A request that sets any of them differently gets its own entry, so what one request
    carries never reaches the links another request receives.
    """

    def __init__(self, size: int = RESOLVED_URLS):
        self._cache: LRUCache[tuple[str, ...], Resolved] = LRUCache(maxsize=size)
        self._lock = threading.Lock()  # cachetools' caches are not thread-safe; a read reorders the LRU

    @staticmethod
    def key(environ: dict[str, Any]) -> tuple[str, ...]:
        return (environ.get("wsgi.url_scheme", "http"), environ.get("HTTP_HOST", ""),
                environ.get("SERVER_NAME", ""), environ.get("SERVER_PORT", ""), environ.get("SCRIPT_NAME", ""),
                environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", ""))

    def get(self, environ: dict[str, Any]) -> Resolved | None:
        key = self.key(environ)
        with self._lock:
            return self._cache.get(key)

    def remember(self, environ: dict[str, Any], resolved: Resolved) -> None:
        key = self.key(environ)
        with self._lock:
            self._cache[key] = resolved


class HitPath:
    """WSGI middleware in front of the Flask app, and so the one place that adds `nosniff` to every response."""

    def __init__(self, app: WSGIApplication, service: FeedService, urls: ResolvedUrls):
        self.app = app
        self.service = service
        self.urls = urls

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()
        if (environ.get("REQUEST_METHOD") != "GET" or any(name in environ for name in _PASS_HEADERS)
                or "text/html" in environ.get("HTTP_ACCEPT", "")):
            return self._to_flask(environ, start_response)
        resolved = self.urls.get(environ)
        # A member's feed goes to Flask, which reads it as the member (`feedbridge.feeds.personal.acting`).
        if resolved is None or resolved.spec.fmt == "html" or resolved.member is not None:
            return self._to_flask(environ, start_response)
        entry = self.service.scope(resolved.signed).fresh(resolved.key)
        if entry is None:
            return self._to_flask(environ, start_response)
        headers = feed_headers(entry, FORMATS[resolved.spec.fmt].media_type, self.service.settings.cache_ttl, "hit",
                               private=resolved.signed)
        headers += [("Content-Length", str(len(entry.body))), NOSNIFF]
        start_response("200 OK", headers)
        query = environ.get("QUERY_STRING")
        log_request("GET", environ.get("PATH_INFO", "") + (f"?{query}" if query else ""), 200, started, "hit")
        return in_turns(entry.body)

    def _to_flask(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Anything but a hit: the Flask app answers, with `nosniff` added to its headers."""

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], object]:
            headers.append(NOSNIFF)
            return start_response(status, headers, exc_info)

        return self.app(environ, start)
