"""The gunicorn worker: gthread, except that request headers are read in the event loop, not by a thread.

Gunicorn's `gthread` worker hands a connection to a thread as soon as its first byte arrives, and the
thread then reads the rest of the request line and headers with blocking reads. A client that sends one
header byte a second (slowloris) holds that thread for as long as it likes: with 2 workers × 8 threads,
16 such clients made most answers time out and 64 stopped all of them, cached feeds and `/healthz`
included (RELIABILITY.md has the figures). This worker buffers each request's bytes in the worker's own
selector until the blank line that ends the headers, and only then gives the connection to a thread,
with the bytes already in gunicorn's parser. A slow client therefore costs a buffer of at most
`MAX_HEADER_BYTES`, never a thread, and is closed `HEADER_TIMEOUT` seconds after it started a request it
has not finished. The number of such connections per worker is bounded by gunicorn's `worker_connections`.

Feedbridge serves plain HTTP behind a PaaS router that terminates TLS; this worker does not wrap sockets
in TLS itself (gunicorn's `certfile` is not supported with it). Bodies are not buffered: the service
only answers GET, and gunicorn bounds the drain of an unread body by its own data timeout.
"""

from __future__ import annotations

import selectors
import time
from functools import partial
from socket import socket

from gunicorn import http
from gunicorn.workers.gthread import TConn, ThreadWorker

HEADER_TIMEOUT = 10.0
"""Seconds from a request's first byte (or the connection's accept) to the end of its headers."""
MAX_HEADER_BYTES = 32 * 1024
"""More than any feed reader or browser sends; past it the connection gets 431 and is closed."""

_END_OF_HEADERS = b"\r\n\r\n"
_TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


class HeaderBufferingWorker(ThreadWorker):
    """`ThreadWorker` with `enqueue_req` (every way a connection reaches the thread pool: accept,
    keep-alive, deferred, read-ahead) routed through a non-blocking header read first."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.reading: dict[TConn, tuple[float, bytearray]] = {}  # conn -> (deadline, bytes so far)

    def enqueue_req(self, conn: TConn) -> None:
        if conn.parser is None:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        buffered = bytearray(conn.parser.unreader.take_buffered())  # read ahead by a previous request
        if _END_OF_HEADERS in buffered:
            self._to_thread(conn, buffered)
            return
        conn.sock.setblocking(False)
        self.reading[conn] = (time.monotonic() + HEADER_TIMEOUT, buffered)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))

    def _on_readable(self, conn: TConn, sock: socket) -> None:
        try:
            data = sock.recv(64 * 1024)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away before finishing its headers
            self._drop(conn)
            return
        buffered = self.reading[conn][1]
        buffered += data
        if _END_OF_HEADERS in buffered:
            self.poller.unregister(sock)
            del self.reading[conn]
            self._to_thread(conn, buffered)
        elif len(buffered) > MAX_HEADER_BYTES:
            try:
                sock.send(_TOO_LARGE)
            except OSError:
                pass
            self._drop(conn)

    def _to_thread(self, conn: TConn, buffered: bytearray) -> None:
        conn.parser.unreader.unread(bytes(buffered))
        conn.data_ready = True  # the bytes are in the parser: the thread must not wait for the socket
        super().enqueue_req(conn)

    def _drop(self, conn: TConn) -> None:
        self.poller.unregister(conn.sock)
        del self.reading[conn]
        self.nr_conns -= 1
        conn.close()

    def murder_keepalived(self, force: bool = False) -> None:
        """Gunicorn calls this once a loop (about every second) and with `force` on the way out: also the
        place to close the connections whose headers are overdue."""
        super().murder_keepalived(force)
        now = time.monotonic()
        for conn in [c for c, (deadline, _) in self.reading.items() if force or deadline <= now]:
            self._drop(conn)
