"""The fetcher's transport: httpx's, over an httpcore connection pool whose sockets end every answer at its deadline.

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
import ssl
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import httpcore
import httpx

from feedbridge.config import Settings

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
