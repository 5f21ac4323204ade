"""The gunicorn worker: gunicorn's own `gevent` worker, with a send deadline, no request bodies and a fair turn.

Chosen by `python -m bench.servers`, which runs each server against the same attacks, with the
Procfile's settings, on the 2-core machine shared with other jobs (load 4 to 18 during the runs: read the
counts, not the milliseconds). Probes answered within 3 s out of 10 while 200 connections trickle headers,
80 trickle a body (in brackets: how many of the 80 were answered within 3 s), 40 pipeline 300 requests
each and read nothing (each run), 40 read a 330 KB feed at 1 KiB/s; then cached hits (wrk -c16, all
servers up at once, runs alternating):

| server | headers | bodies | pipelines | slow readers | hits: req/s, p99, server CPU per hit |
|---|---|---|---|---|---|
| this worker | 10 | 10 (80, `413`) | 9, 10 | 10 | 2,036, 68 ms, 478 µs |
| gthread with headers buffered by the worker | 10 | 0 (16) | 0, 6, 1 | 10 | 2,285, 33 ms, 585 µs |
| gunicorn `gevent`, stock | 10 | 10 (80) | 10, 8, 10 | 10 | 2,151, 187 ms, 453 µs |
| gunicorn `gthread`, stock, 8 threads | 0 | 0 (16) | 0, 8, 0 | 10 | 2,389, 25 ms, 540 µs |
| waitress, 8 threads | 10 | 10 (0) | 10, 10, 10 | 10 | 2,080, 18 ms, 492 µs |

With 32 cold requests waiting on a forum answering in 9 s, every server answered 12 of them (404: admitted)
and turned 20 away (503, no slot), and cached hits kept answering (p99 under load from 32 to 190 ms, as
noisy as the idle p99 in the same runs). A 330 KB feed still fits the kernel's send buffer, so slow readers
held no thread anywhere. Waitress holds too, but reads a whole body before answering (none of the 80 was
answered), buffers every pipelined response in memory or temporary files, and is one process: two cores
need two servers. The stock gevent worker reads no body either, but drains it for `keepalive` seconds,
lets a pipelining connection serve all its buffered requests in one turn (its worst probe 2.2 s here), and
has no send deadline: a client that never reads holds its greenlet and connection slot for ever.

In the `gevent` worker a connection is a greenlet, not a thread, so a client that trickles its headers or
its body, or never reads, holds a greenlet and its socket buffers, never one of a bounded set of threads:
gunicorn's threaded worker gave no answer under 200 trickling header senders or 80 trickling bodies, and
mostly none under 40 connections pipelining requests they never read. gunicorn bounds the headers (each request's
headers must arrive within `keepalive` seconds, and within `limit_request_field_size` and
`limit_request_fields`), and this subclass adds, through the two methods gunicorn's own gevent worker
overrides (`handle` per connection, `handle_request` per request) and gevent's socket API, no private
attribute:

- a send deadline: every write of a response must finish within `SEND_TIMEOUT`, else the connection is
  closed; with a send buffer of `SEND_BUFFER`, a client that reads nothing costs at most that buffer and
  one response, for that long;
- no bodies: the service answers GET and HEAD only, so a request that announces a body (a non-zero
  `Content-Length`, or any `Transfer-Encoding`) is answered `413` at once, unread, and the connection closed;
- one header cap: more than `MAX_HEADER_BYTES` of header names and values is `431`, whatever the packets;
- a fair turn: each request starts by yielding to the other greenlets, so requests a client pipelined
  (already in the buffer, needing no wait) cannot serve back to back while other connections wait.

The cost of greenlets: a request that computes (a cold build) holds the worker's whole event loop for its
CPU time, where threads would have interleaved every few milliseconds; the per-page and per-topic caps
bound that time.
"""

from __future__ import annotations

import socket
from typing import Any

import gevent
from gunicorn.workers.ggevent import GeventWorker

SEND_TIMEOUT = 20.0
"""Seconds for one write of a response (headers, or the body) to be taken by the client."""
SEND_BUFFER = 64 * 1024
"""The kernel's send buffer per connection (it doubles it for bookkeeping): what an absent reader pins."""
MAX_HEADER_BYTES = 32 * 1024
"""More than any feed reader or browser sends; past it the request gets 431."""

def _answer(status: str, text: str) -> bytes:
    body = f"{status[:3]} {text}\n".encode()
    return (f"HTTP/1.1 {status}\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"X-Content-Type-Options: nosniff\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


_CONTENT_TOO_LARGE = _answer("413 Content Too Large", "this service reads no request body")
_TOO_LARGE = _answer("431 Request Header Fields Too Large", "request headers too large")

class Worker(GeventWorker):
    def handle(self, listener: Any, client: socket.socket, addr: Any) -> None:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        super().handle(listener, client, addr)

    def handle_request(self, listener_name: Any, req: Any, sock: socket.socket, addr: Any) -> bool:
        gevent.sleep(0)
        sock.settimeout(SEND_TIMEOUT)
        refusal = _refusal(req.headers)
        try:
            if refusal is not None:
                sock.sendall(refusal)
                raise StopIteration  # gunicorn's way out of its keep-alive loop: it closes the connection
            return bool(super().handle_request(listener_name, req, sock, addr))
        except TimeoutError:  # the client did not take the response in time: close it, no traceback in the log
            raise StopIteration from None


def _refusal(headers: list[tuple[str, str]]) -> bytes | None:
    size = 0
    for name, value in headers:  # gunicorn has checked them: upper-case names, Content-Length all digits
        if name == "TRANSFER-ENCODING" or (name == "CONTENT-LENGTH" and value.strip("0")):
            return _CONTENT_TOO_LARGE
        size += len(name) + len(value)
    return _TOO_LARGE if size > MAX_HEADER_BYTES else None
