"""The hot path: a fresh cached feed, for a URL already seen, is answered before Flask runs.

Feed readers poll the same URLs every few minutes, so most requests are hits. A hit needs no routing,
no validation and no request object: the URL was resolved to its cache key the first time (by the Flask
view, which remembers it here), and the store has the bytes. Anything else — a conditional request
(Werkzeug's `make_conditional` handles those), a browser asking for HTML, a miss, a stale copy, an
error — goes to Flask as usual. Kept for bench row 1, "cached Atom hit vs the limit": through Flask a hit
costs about three times a trivial Flask route, far from the 0.85× the row asks for.

A hit returns the stored bytes themselves, as one item: the worker (`feedbridge.web.worker.Sending`) sends
them in views of those bytes with a turn between slices, so a body of several megabytes (a topic's 500
long posts) neither holds the worker's loop nor costs a copy for each client reading it slowly. A signed
feed's are the one exception: its token is put back where the kept bytes hold a mark (`feedbridge.web.withheld`),
one copy of the body, made in 10 µs for 30 KB, 0.9 ms for 1.6 MB, 2 ms for 5 MB.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, is_dataclass
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

from feedbridge import metrics
from feedbridge.config import Forum
from feedbridge.feeds.members.personal import Member
from feedbridge.feeds.request.spec import FeedSpec
from feedbridge.feeds.service import FeedService
from feedbridge.render.formats import FORMATS
from feedbridge.store.entries import FeedEntry
from feedbridge.web.logs import log_request
from feedbridge.web.responses import CONDITIONS, NOSNIFF, asks_for_a_page, feed_headers, gzip_body
from feedbridge.web.withheld import restored, withheld

RESOLVED_BYTES = 8 * 2**20
"""What the remembered resolutions may hold in all, counted by `_bytes_held`: about 2,700 feed URLs of the
usual shape (3 KB each, most of it the spec's parsed filter), 400 of the longest a request line admits (20 KB).
A bound in bytes, so random query strings cost nothing lasting however long each one is."""
ENTRY_BYTES = 700
"""What one remembered URL costs beyond its `Resolved`: its digest, the pair kept, and its slots in the
cache's three tables with their spare room (tracemalloc: 700–750 bytes)."""

_PASS_HEADERS = (*CONDITIONS, "HTTP_RANGE")
LOOKED = "feedbridge.looked"
"""The WSGI environ's key for the hit path's look at a feed's key (`CachePolicy.look`) that found no fresh
copy: the route hands it to the service (`FeedService.feed`), so a request looks at its feed's key once."""


@dataclass(frozen=True, slots=True)
class Resolved:
    """What a feed URL means: its spec, its own URL (rel=self), its stylesheet, its cache key, whether its
    token verified (`signed`: read with the forum's key, in the private scope) or it is a member's personal
    feed (`member`: read with their key, in the members' scope, `feedbridge.feeds.members.personal`), and
    that token (`token`: the signed one, or the member's sealed one), which no kept body holds
    (`feedbridge.web.withheld`)."""

    spec: FeedSpec
    self_url: str
    stylesheet_url: str | None
    key: str
    signed: bool = False
    member: Member | None = None
    token: str | None = None

    @property
    def private(self) -> bool:
        """Whether no shared cache between the bridge and the reader may keep the answer."""
        return self.signed or self.member is not None

    def withheld(self, text: str) -> str:
        """`text` (this URL, its path, a link made of them) as what is kept is rendered from it."""
        return withheld(text, self.token)

    def served(self, body: bytes) -> bytes:
        """A kept body as this URL's client gets it."""
        return restored(body, self.token)

    def answer(self, entry: FeedEntry, accept_encoding: str | None) -> tuple[bytes, bool]:
        """What this URL's client gets of a kept feed or view, and whether it is its gzip: the gzip kept with
        it for a client that takes gzip, unless the URL is private (its body is served with its own token),
        else the body (`served`)."""
        packed = None if self.private else gzip_body(entry, accept_encoding)
        return (self.served(entry.body), False) if packed is None else (packed, True)

    def scope(self, service: FeedService) -> FeedService:
        return service.scope(self.signed, self.member)


class ResolvedUrls:
    """URL → `Resolved`, bounded in bytes (least recently used out) and thread-safe.

    Keyed by a digest of everything in the WSGI environ that goes into a `Resolved`: the scheme and host
    (the self link), the script root (`SCRIPT_NAME`, which a trusted proxy may set, in the stylesheet link),
    the path and the query. A request that sets any of them differently gets its own entry, so what one
    request carries never reaches the links another request receives. The digest, not the parts: a query
    of 2.5 KB was kept whole beside the self URL and the spec made of it.

    Only the URLs of feeds served are remembered (`feedbridge.web.routes`): an answer of 400, 404 or 429 leaves
    nothing here, so a flood of distinct URLs that name no feed costs nothing lasting at all.
    """

    def __init__(self, max_bytes: int = RESOLVED_BYTES):
        self._cache: LRUCache[bytes, tuple[Resolved, int]] = LRUCache(maxsize=max_bytes, getsizeof=_counted)
        self._lock = threading.Lock()  # cachetools' caches are not thread-safe; a read reorders the LRU

    @staticmethod
    def key(environ: dict[str, Any]) -> bytes:
        """128 bits of BLAKE2b over the parts' `repr` (which no two tuples of strings share; it escapes what
        UTF-8 cannot write): 2 µs a hit more than the tuple itself, and 16 bytes where a query was 2.5 KB."""
        parts = (environ.get("wsgi.url_scheme", "http"), environ.get("HTTP_HOST"),  # None, when absent, is not ''
                 environ.get("SERVER_NAME", ""), environ.get("SERVER_PORT", ""), environ.get("SCRIPT_NAME", ""),
                 environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", ""))
        return hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()

    def get(self, environ: dict[str, Any]) -> Resolved | None:
        key = self.key(environ)
        with self._lock:
            found = self._cache.get(key)
        return None if found is None else found[0]

    def remember(self, environ: dict[str, Any], resolved: Resolved) -> None:
        key, size = self.key(environ), _bytes_held(resolved) + ENTRY_BYTES
        if size > self._cache.maxsize:  # larger than the whole memo: not worth keeping
            return
        with self._lock:
            self._cache[key] = (resolved, size)

    @property
    def held(self) -> int:
        """The bytes counted for what is remembered now."""
        with self._lock:
            return int(self._cache.currsize)

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)


def _counted(entry: tuple[Resolved, int]) -> int:
    return entry[1]


def _bytes_held(value: object) -> int:
    """The bytes `value` holds with everything its fields and items hold (`sys.getsizeof` of each object).
    A `Forum` is configuration, shared by every spec of its forum, and counts nothing; so do None and the
    booleans. An object met twice is counted twice: an overcount, on the side of the bound."""
    if value is None or isinstance(value, bool | Forum):
        return 0
    size = sys.getsizeof(value)
    if isinstance(value, tuple | frozenset | list | set):
        return size + sum(map(_bytes_held, value))
    if is_dataclass(value) and not isinstance(value, type):
        return size + sum(_bytes_held(getattr(value, f.name)) for f in fields(value))
    return size


class HitPath:
    """WSGI middleware in front of the Flask app, and so the one place that adds `nosniff` to every response."""

    def __init__(self, app: WSGIApplication, service: FeedService, urls: ResolvedUrls):
        self.app = app
        self.service = service
        self.urls = urls

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()
        # Without a Host, Flask answers: 400 for HTTP/1.1 (`_host_checked`). An HTTP/1.0 request may leave it out,
        # and its feed was then a hit for an HTTP/1.1 request without one, or with an empty one.
        if (environ.get("REQUEST_METHOD") != "GET" or any(name in environ for name in _PASS_HEADERS)
                or "HTTP_HOST" not in environ or asks_for_a_page(environ.get("HTTP_ACCEPT", ""))):
            return self._to_flask(environ, start_response)
        resolved = self.urls.get(environ)
        # A member's feed goes to Flask, which first checks that their key is not known to be gone.
        if resolved is None or resolved.spec.fmt == "html" or resolved.member is not None:
            return self._to_flask(environ, start_response)
        looked = self.service.scope(resolved.signed).look(resolved.key)
        if not looked.fresh:  # the route hands this look to the cache policy, which does not look again
            environ[LOOKED] = looked
            return self._to_flask(environ, start_response)
        entry: FeedEntry = looked.held
        body, gzipped = resolved.answer(entry, environ.get("HTTP_ACCEPT_ENCODING"))
        headers = feed_headers(entry, FORMATS[resolved.spec.fmt].media_type, self.service.settings.cache_ttl, "hit",
                               private=resolved.signed, gzipped=gzipped)
        headers += [("Content-Length", str(len(body))), NOSNIFF]
        start_response("200 OK", headers)
        query = environ.get("QUERY_STRING")
        log_request("GET", environ.get("PATH_INFO", "") + (f"?{query}" if query else ""), 200, started, "hit")
        metrics.feed_answered(resolved.spec.kind, resolved.spec.fmt, 200, "hit")
        return [body]

    def _to_flask(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Anything but a hit: the Flask app answers, with `nosniff` added to its headers."""

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], object]:
            headers.append(NOSNIFF)
            return start_response(status, headers, exc_info)

        return self.app(environ, start)
