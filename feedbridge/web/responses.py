"""What every feed response and every error response carries, built in one place.

The hit path (before Flask) and the feed view (in Flask) answer the same feed with the same headers, so
both take them from `feed_headers`, as the plain string pairs WSGI's `start_response` takes: the hit path
has no `Response` to put them in.
`X-Content-Type-Options: nosniff` is added to every response by the outermost WSGI layer
(`hits.HitPath`), so no view can forget it.
"""

from __future__ import annotations

import functools
import math
import time
from email.utils import formatdate

from flask import Request, Response
from werkzeug.http import parse_accept_header, parse_date, parse_etags, unquote_etag

from feedbridge.feeds.service import CacheStatus
from feedbridge.store.entries import FeedEntry

NOSNIFF = ("X-Content-Type-Options", "nosniff")


def gzip_body(entry: FeedEntry, accept_encoding: str | None) -> bytes | None:
    """The entry's gzip, when it has one and the client takes gzip: by its own name or `x-gzip`, else as `*`,
    with a quality above 0 (RFC 9110 §12.5.3: `gzip;q=0` refuses it whatever `*` says). A signed or a member's
    feed has none (`FeedService._render`): its body is served with the URL's own token in it."""
    if entry.gzipped is None or not accept_encoding:
        return None
    return entry.gzipped if _gzip_quality(accept_encoding) > 0 else None


ACCEPT_MAX = 1024
"""The longest `Accept` read for a browser's page: Chromium's and Firefox's are 90 to 150 characters. Werkzeug's
parse of 30 KB of it took 29 ms of a hit, uncharged: one connection sending it back to back slowed every other
client's cached hits on the worker from 1 to 256 ms (median). A longer one is answered the feed as it is."""


def asks_for_a_page(accept: str) -> bool:
    """Whether an `Accept` may be a browser's, asking for a page (`ACCEPT_MAX`): then the feed's view is chosen
    by its qualities (`web.routes`), past the hit path."""
    return "text/html" in accept and len(accept) <= ACCEPT_MAX


ACCEPT_ENCODING_MAX = 256
"""The longest `Accept-Encoding` read: a feed reader's or a browser's is 20 to 40 characters (`gzip, deflate,
br, zstd`); a longer one is answered without gzip, as identity always may be (RFC 9110 §12.5.3)."""


@functools.lru_cache(maxsize=256)
def _gzip_quality(accept_encoding: str) -> float:
    """The quality `Accept-Encoding` gives gzip: its own name's, else `x-gzip`'s, else `*`'s, else 0, read by
    Werkzeug's parser. Read on every hit, which charges no client's allowance: the parser takes 6 to 15 µs of
    `gzip, deflate, br` (the rest of a hit is about 10 in process) and 0.3 to 8 ms of an 8 KB header, the
    longest gunicorn admits. So a header is read once per process (the few that feed readers send are each a
    dict lookup after the first) and only up to `ACCEPT_ENCODING_MAX` characters (tens of µs at most)."""
    if len(accept_encoding) > ACCEPT_ENCODING_MAX:
        return 0.0
    qualities = {coding.lower(): quality for coding, quality in parse_accept_header(accept_encoding)}
    return float(qualities.get("gzip", qualities.get("x-gzip", qualities.get("*", 0))))


def entity_tag(entry: FeedEntry, gzipped: bool, variant: str = "") -> str:
    """The (unquoted) ETag of one representation of a kept feed or page: its bytes' hash, with `variant` for
    an answer that differs by `Accept`, and `-gzip` for its gzip (RFC 9110 §8.8.3: a strong ETag names one
    representation, so no cache answers one with the other on a `304`)."""
    return f"{entry.etag}{variant}{'-gzip' if gzipped else ''}"


def feed_headers(entry: FeedEntry, media_type: str, max_age: int, cache: CacheStatus,
                 private: bool = False, variant: str = "", stale: str | None = None,
                 gzipped: bool = False) -> list[tuple[str, str]]:
    """`private`: a signed feed's, which no shared cache between the bridge and its reader may keep. A copy kept (a
    hit, a stale copy), or built from one, says how old it is (`Age`, RFC 9111 §5.1), so a cache in front keeps it
    for what is left of `max_age` rather than the whole of it again. `variant` tells apart, in the ETag, answers of
    one feed that differ by `Accept` (RFC 9110 §8.8.3: a strong ETag names one representation), so that no cache
    answers one with the other on a `304`. `stale`: why a stale copy is served, said with its age in
    `X-Feedbridge-Stale` (one age for both headers). `gzipped`: the body is the entry's gzip (`Content-Encoding`), a
    representation of its own with an ETag of its own, as `variant`'s."""
    headers = [
        ("Content-Type", media_type),
        ("Vary", "Accept, Accept-Encoding"),
        ("ETag", f'"{entity_tag(entry, gzipped, variant)}"'),
        ("Cache-Control", f"{'private' if private else 'public'}, max-age={max_age}"),
        ("X-Feedbridge-Cache", cache),
    ]
    now = time.time()
    age = int(max(now - entry.stored_at, 0.0))
    if cache != "miss" or age:  # a feed built now from a page read before is as old as that page
        headers.append(("Age", str(age)))
        if stale is not None:
            headers.append(("X-Feedbridge-Stale", _header_safe(f"{stale}; serving the copy from {age}s ago")))
    if entry.last_modified is not None:
        # Never later than the answer's `Date` (RFC 9110 §8.8.2.1 says to send the time of the answer instead): bytes
        # that changed twice within one second are dated a second past their predecessor (`FeedService._changed`),
        # and with a cache TTL of 0 a feed rebuilt into new bytes at every request ran seconds into the future.
        headers.append(("Last-Modified", _http_date(math.floor(min(entry.last_modified, now)))))
    if gzipped:
        headers.append(("Content-Encoding", "gzip"))
    return headers


@functools.lru_cache(maxsize=1024)
def _http_date(seconds: int) -> str:
    """An HTTP date (RFC 9110 §5.6.7) of whole `seconds` since 1970, made once for each (the upstream side reads
    them: `upstream.transport.http_date`): a kept feed's `Last-Modified` is the same on every hit, and `formatdate`
    was a seventh of the hit path's own CPU (bench row 1, "cached Atom hit vs the limit"). A thousand dates at
    most, some 200 KB."""
    return formatdate(seconds, usegmt=True)


def _header_safe(text: str) -> str:
    """ASCII for a header: a feed's title joins its parts with "·", which reads as "-" there, not "?"."""
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text.replace("\u00b7", "-"))[:300]


def retry_after(seconds: float) -> str:
    """A `Retry-After` value (RFC 9110 §10.2.3): whole seconds, rounded up, at least 1."""
    return str(max(int(seconds + 0.999), 1))


_PRECONDITIONS = ("HTTP_IF_MATCH", "HTTP_IF_UNMODIFIED_SINCE")
CONDITIONS = ("HTTP_IF_NONE_MATCH", "HTTP_IF_MODIFIED_SINCE", *_PRECONDITIONS)
"""The request headers (WSGI names) that make a request conditional (`conditional`; the hit path leaves them to it)."""


def conditional(response: Response, request: Request, dated: float | None = None) -> Response:
    """`response` as the request's conditions make it (RFC 9110 §13.2.2): a failed `If-Match`, else a failed
    `If-Unmodified-Since`, is a 412 with no body that no cache keeps; then a 304 in place where `If-None-Match`,
    else `If-Modified-Since`, matches (Werkzeug's `make_conditional`, given the request without the first two,
    which it read only beside the others, and then kept the 200's body and `public, max-age` in its 412).
    Only for a conditional request: bench row 1 ("cached Atom hit vs a trivial Flask route") put the
    evaluation at a quarter of the view's time. `dated`: when the representation changed (`FeedEntry.last_modified`);
    while that is ahead of the clock, `Last-Modified` says now (`feed_headers`), which tells nothing from the copy a
    reader got earlier in this second, so `If-Modified-Since` is not read: with a cache TTL of 0 it answered `304`
    for bytes changed since."""
    environ = request.environ
    if not any(name in environ for name in CONDITIONS):
        return response
    etag = response.headers.get("ETag")
    if "HTTP_IF_MATCH" in environ:
        tags = parse_etags(environ["HTTP_IF_MATCH"])
        tag, weak = unquote_etag(etag)
        held = tags.star_tag or (tag is not None and not weak and tags.contains(tag))
    else:
        since = parse_date(_one_date(environ.get("HTTP_IF_UNMODIFIED_SINCE")))
        modified = parse_date(response.headers.get("Last-Modified"))
        held = since is None or (modified is not None and modified <= since)
    if not held:
        return plain_error(412, "the representation has changed: its ETag matches no If-Match, or it is newer "
                                "than If-Unmodified-Since")
    asked = {k: v for k, v in environ.items() if k not in _PRECONDITIONS}
    if _one_date(asked.get("HTTP_IF_MODIFIED_SINCE")) is None or (dated is not None and dated > time.time()):
        asked.pop("HTTP_IF_MODIFIED_SINCE", None)
    response.make_conditional(asked)
    return response


def _one_date(value: str | None) -> str | None:
    """`value` when it can be one HTTP-date, None when it is a list of them: a date field of more than one member
    is ignored (RFC 9110 §13.1.3, §13.1.4), where Werkzeug's lenient `parse_date` took the first. An IMF-fixdate
    and an RFC 850 date hold one comma, an asctime date none; two fields of one name are joined by one."""
    return None if value is None or value.count(",") > 1 else value


def plain_error(status: int, message: str) -> Response:
    """Short plain text: nothing a client sent is ever echoed back as markup."""
    response = Response(f"{status} {message}\n", status=status, content_type="text/plain; charset=utf-8")
    response.headers["Cache-Control"] = "no-store"
    return response
