"""The wire under the fetcher: httpx's transport over an httpcore connection pool whose sockets end every answer at
its deadline, and what is read of an answer within bounds (below).

httpx's timeouts bound each wait on a forum (a connect, one read of the socket), and the fetcher bounds a
body as it reads it (`Fetcher._read_bounded`); nothing bounded an answer's status line and headers as a
whole, and httpcore reads past any number of interim `1xx` answers. A forum that sent its headers a byte
every half second, or `100 Continue` every 0.3 s without end, held a fetch for as long as it went on: with a
2 s total timeout, a CLI build still running after 30 s, a web request unanswered after 60 s (its worker's
other requests served, its slot and cold build held), and the endless `1xx` never ending at all.

So the pool's connections (httpcore's documented network backend interface, its `SyncBackend` beneath) bound
every read of an answer by the answer's deadline, `FEEDBRIDGE_TOTAL_TIMEOUT` after its request was written:
a read that would wait past it waits only until then, and one begun after it is a `ReadTimeout`, which the
fetcher reports as the forum taking longer than its total timeout. httpx's own `HTTPTransport` takes no
network backend, so this transport is httpx's `BaseTransport` over that pool, as httpx documents custom
transports, and httpcore's errors reach the fetcher as httpx's (`_ERRORS`), as from httpx's own transport.
"""

from __future__ import annotations

import functools
import re
import ssl
import time
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import h11
import httpcore
import httpx

from feedbridge.config import Settings
from feedbridge.errors import Reason, UpstreamError

# httpx's `HTTPTransport` defaults (`httpx.Limits()`): what the forums were fetched with before.
_LIMITS = httpx.Limits()
# Each httpcore error as httpx's transport raises it, the most specific first: what the fetcher catches.
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout), (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout), (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException), (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError), (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError), (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError), (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol), (httpcore.ProxyError, httpx.ProxyError))


@contextmanager
def _as_httpx() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        mapped = next((theirs for ours, theirs in _ERRORS if isinstance(exc, ours)), None)
        if mapped is None:
            raise
        raise mapped(str(exc)) from exc


class _BoundedStream(httpcore.NetworkStream):
    """One connection: each read of an answer ends by `total` seconds after its request was last written."""

    def __init__(self, stream: httpcore.NetworkStream, total: float):
        self._stream = stream
        self._total = total
        self._until: float | None = None

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._until = time.monotonic() + self._total  # a request goes out: its answer's deadline
        self._stream.write(buffer, timeout)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._until is not None:
            left = self._until - time.monotonic()
            if left <= 0:
                raise httpcore.ReadTimeout(f"the answer took longer than {self._total:g}s")
            timeout = left if timeout is None else min(timeout, left)
        return self._stream.read(max_bytes, timeout)

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: object, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _BoundedStream(self._stream.start_tls(ssl_context, server_hostname, timeout),  # type: ignore[arg-type]
                              self._total)

    def get_extra_info(self, info: str) -> object:
        return self._stream.get_extra_info(info)


class _BoundedBackend(httpcore.NetworkBackend):
    """httpcore's own sockets, each wrapped in a `_BoundedStream`."""

    def __init__(self, total: float):
        self._backend = httpcore.SyncBackend()
        self._total = total

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> httpcore.NetworkStream:
        return _BoundedStream(self._backend.connect_tcp(host, port, timeout, local_address, socket_options),
                              self._total)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> httpcore.NetworkStream:
        return _BoundedStream(self._backend.connect_unix_socket(path, timeout, socket_options), self._total)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _Body(httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes]):
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


@functools.cache
def _tls() -> ssl.SSLContext:
    """httpx's TLS context (certifi's roots, or SSL_CERT_FILE / SSL_CERT_DIR), made once per process and shared by
    every fetcher's connections, as one context may be: loading the roots costs 20 ms of CPU each time."""
    return httpx.create_ssl_context()


class BoundedTransport(httpx.BaseTransport):
    """HTTP/1.1 to the forums, each answer within `settings.total_timeout` of its request (see the module)."""

    def __init__(self, settings: Settings):
        self._pool = httpcore.ConnectionPool(
            ssl_context=_tls(), max_connections=_LIMITS.max_connections,
            max_keepalive_connections=_LIMITS.max_keepalive_connections, keepalive_expiry=_LIMITS.keepalive_expiry,
            retries=settings.retries, network_backend=_BoundedBackend(float(settings.total_timeout)))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        url = httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port,
                           target=request.url.raw_path)
        with _as_httpx():
            answer = self._pool.handle_request(httpcore.Request(request.method, url, headers=request.headers.raw,
                                                                content=request.stream, extensions=request.extensions))
        assert isinstance(answer.stream, Iterable)
        return httpx.Response(answer.status, headers=answer.headers, stream=_Body(answer.stream),
                              extensions=answer.extensions)

    def close(self) -> None:
        self._pool.close()


# --- what is read of an answer --------------------------------------------------------------------------------
#
# Reading what a forum sends within bounds: a compressed body inflated a bounded piece at a time (so the size
# limit counts decoded bytes as they are produced: a 2 KB answer can hold gigabytes once inflated, and httpx's own
# decoders inflate a whole read at once), and a refusal's page peeked at to tell a bot wall or core's crawler
# refusal from a plain refusal, and the dates and waits a forum's headers give (a 429's `Retry-After`, a
# `Last-Modified`). Kept apart from `feedbridge.upstream.fetcher`, which sends the requests and follows their
# redirects: these are what it does with an answer beyond its status, and a fetch of an uncompressed 200 without
# validators (the common read: core sends none on its lists) calls none of them.

ACCEPTED_ENCODINGS = ("gzip", "x-gzip", "deflate")
ACCEPT_ENCODING = "gzip, deflate"  # what we ask for: no br/zstd, which httpx would offer if installed
INFLATE_STEP = 64 * 1024  # the most one decompression call may produce: peak memory is the limit plus this


class Inflater:
    """Incremental gzip/deflate decoding that never produces more than `INFLATE_STEP` bytes per call.

    "deflate" should be a zlib stream (RFC 9110 §8.4.1.2), but some servers send raw deflate: the
    first two bytes tell which, as they do in httpx. Bytes after the end of the stream (a second gzip
    member, or garbage) are refused rather than silently dropped.
    """

    def __init__(self, encoding: str, url: str):
        self.encoding = encoding
        self.url = url
        self.decoder: zlib._Decompress | None = None
        if encoding in ("gzip", "x-gzip"):
            self.decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.pending = b""

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self.decoder is None:
            self.pending += data
            if len(self.pending) < 2:
                return
            first, second = self.pending[0], self.pending[1]
            zlib_header = first & 0x0F == 8 and (first << 8 | second) % 31 == 0
            self.decoder = zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
            data, self.pending = self.pending, b""
        while True:
            if self.decoder.eof and (data or self.decoder.unused_data):
                raise UpstreamError(f"upstream sent data after the end of the compressed body for {self.url}",
                                    reason=Reason.BODY)
            try:
                piece = self.decoder.decompress(data, INFLATE_STEP)
            except zlib.error:
                raise UpstreamError(f"upstream sent a corrupt {self.encoding}-compressed body for {self.url}",
                                    reason=Reason.BODY) from None
            if piece:
                yield piece
            data = self.decoder.unconsumed_tail
            if not data and (self.decoder.eof or len(piece) < INFLATE_STEP) and not self.decoder.unused_data:
                return  # all decoded so far; a full piece may mean more output is pending inside zlib

    def finish(self) -> None:
        if self.decoder is None or not self.decoder.eof:
            raise UpstreamError(f"upstream's {self.encoding}-compressed body for {self.url} ended early",
                                reason=Reason.BODY)


def content_encoding(response: httpx.Response, url: str) -> str | None:
    """The one coding to undo, None for identity. Stacked (`gzip, gzip`) or unknown codings are refused:
    nothing legitimate compresses twice, and every layer multiplies what a few bytes can inflate to."""
    codings = [c.strip().lower() for c in response.headers.get("Content-Encoding", "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if len(codings) > 1:
        raise UpstreamError(f"upstream sent a body with stacked content encodings ({', '.join(codings)}) for {url}",
                            reason=Reason.BODY)
    if codings and codings[0] not in ACCEPTED_ENCODINGS:
        raise UpstreamError(f"upstream sent a body in an unsupported content encoding for {url}", reason=Reason.BODY)
    return codings[0] if codings else None


CRAWLER_REFUSAL = "Crawler is not allowed!"
"""The whole body of core's answer to a User-Agent its crawler policy blocks (lib/middleware/anonymous_cache.rb
`AnonymousCache#call`: `[403, {}, ["Crawler is not allowed!"]]`, no Content-Type)."""
CHALLENGE_PEEK = 16 * 1024
"""Bytes of a 403/503 body (not JSON) read to tell a bot challenge or a crawler policy from a refusal: a
challenge page names itself in its <title>, in the first kilobyte, and core's crawler refusal is one short
line (`CRAWLER_REFUSAL`); the rest of such a body is never read."""
_CHALLENGE_TITLE = re.compile(r"<title>\s*Just a moment\.\.\.\s*</title>", re.IGNORECASE)
# What a peek at a refusal's body may meet: it only adds a meaning, so a broken body leaves the status's own.
_PEEK_FAILURES = (UpstreamError, httpx.HTTPError, httpx.StreamError, h11.ProtocolError)


def challenge(response: httpx.Response, status: int, peeked: str) -> str | None:
    """What shows that the answer is a bot challenge (Cloudflare's; its docs: every challenge page carries
    `cf-mitigated: challenge`), else None. Without the header, a 403/503 HTML page titled "Just a
    moment..." is one too (a proxy in front may drop headers): `peeked` is its first CHALLENGE_PEEK bytes,
    and the title is looked for in those alone."""
    if response.headers.get("cf-mitigated", "").strip().lower() == "challenge":
        return "cf-mitigated: challenge"
    html = response.headers.get("Content-Type", "").lower().startswith("text/html")
    if status in (403, 503) and html and _CHALLENGE_TITLE.search(peeked):
        return 'a "Just a moment..." page'
    return None


def is_json(response: httpx.Response) -> bool:
    """A JSON refusal (core's `invalid_access`, `not_logged_in`) is the forum's own answer: nothing to peek at."""
    return "json" in response.headers.get("Content-Type", "").lower()


def peek(response: httpx.Response, url: str, deadline: float) -> str:
    """The body's first CHALLENGE_PEEK decoded bytes as text, or what came of them before the body ended,
    broke off, or the fetch's deadline passed: a refusal's body is looked at, never needed, so no failure
    of it is one of the fetch. Compressed bodies are inflated a bounded piece at a time, as in full reads."""
    read = bytearray()
    raw = 0
    try:
        coding = content_encoding(response, url)
        inflater = Inflater(coding, url) if coding else None
        for chunk in response.iter_raw(CHALLENGE_PEEK):
            raw += len(chunk)
            for piece in inflater.feed(chunk) if inflater else (chunk,):
                read += piece
                if len(read) >= CHALLENGE_PEEK:
                    break
            if len(read) >= CHALLENGE_PEEK or raw >= CHALLENGE_PEEK or time.monotonic() > deadline:
                break
    except _PEEK_FAILURES:
        pass
    return read[:CHALLENGE_PEEK].decode("utf-8", errors="replace")


# --- what a refusal's headers say -------------------------------------------------------------------------

_DELTA_SECONDS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() also accepts "²" and "٣"
_HTTP_DATE_CHARS = re.compile(r"[\x20-\x7e]+")
MAX_DATE_LENGTH = 64


def retry_after_seconds(value: str | None, maximum: float, now: float | None = None) -> float | None:
    """`Retry-After` as seconds from now, at most `maximum`: delta-seconds or an HTTP-date (RFC 9110 §10.2.3).

    None when the value is neither. Digit runs longer than ten (over 300 years) are the maximum without
    being converted, so no value can become infinity, overflow, or hit `int()`'s digit limit.
    """
    if not value:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        return float(min(int(value), maximum)) if len(value) <= 10 else float(maximum)
    moment = http_date(value)
    if moment is None:
        return None
    current = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    try:
        seconds = (moment - current).total_seconds()
    except OverflowError:  # a date whose offset pushes it past year 9999
        return float(maximum)
    return min(max(seconds, 0.0), float(maximum))


def http_date(value: str) -> datetime | None:
    """An RFC 9110 HTTP-date of visible ASCII (UTC when it names no zone), else None."""
    if len(value) > MAX_DATE_LENGTH or not _HTTP_DATE_CHARS.fullmatch(value):
        return None
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
