"""The gunicorn worker: gunicorn's own `gevent` worker, with a send deadline, no request bodies, a fair turn,
and idle connections shed before the worker stops accepting.

In the `gevent` worker a connection is a greenlet, not a thread, so a client that trickles its headers or
its body, or never reads, holds a greenlet and its socket buffers, never one of a bounded set of threads
(`python -m bench.servers` compares it with gunicorn's `gthread` worker, its stock `gevent` worker and
waitress under the same attacks: RELIABILITY.md has the figures). gunicorn bounds the headers (each request's
must arrive within `keepalive` seconds, within `limit_request_field_size` and `limit_request_fields`), and
this subclass adds, through the two methods gunicorn's own gevent worker overrides (`handle` per
connection, `handle_request` per request) and gevent's socket API, no private attribute:

- a send deadline: every write of a response must finish within `SEND_TIMEOUT`, else the connection is
  closed; with a send buffer of `SEND_BUFFER`, a client that reads nothing costs at most that buffer and
  one response, for that long;
- no bodies: the service answers GET and HEAD only, so a request that announces a body (a non-zero
  `Content-Length`, or any `Transfer-Encoding`) is answered `413` at once, unread, and the connection closed
  (gunicorn's own worker would drain it for `keepalive` seconds); the one exception is a connect page's form
  (`POST /HOST/connect`, `FORM_BYTES` at most, by `Content-Length`), read whole within `FORM_WITHIN` seconds
  (else `408`) before the app sees it;
- one header cap: more than `MAX_HEADER_BYTES` of header names and values is `431`, whatever the packets;
- a fair turn: each request starts by yielding to the other greenlets, so requests a client pipelined
  (already in the buffer, needing no wait) cannot serve back to back while other connections wait;
- idle connections shed: a worker holds `worker_connections` connections and, with all of them open, stops
  accepting; a new client then waits in the listening socket's queue behind every connection already there
  (with the queue full, the kernel drops its SYN, sent again only a second later), while the worker keeps
  each silent connection, or one whose headers never end, for `keepalive` seconds. So past `HIGH_WATER` of
  its capacity the worker closes the connection that has waited longest for a request, for each one it
  accepts: it never stops accepting, and a new client waits only for the connections queued before it to be
  accepted. A connection in a request is never closed for this. With no router in front
  (`FEEDBRIDGE_TRUSTED_HOPS=0`) the peer is the client, and the idle connections of an address holding more
  than `FEEDBRIDGE_PEER_CONNECTIONS` go first, so one address cannot push others' keep-alive connections
  out; behind a router every peer is the router, which has to bound each client's connections itself.

The cost of greenlets: a request that computes (a cold build) holds the worker's whole event loop for its
CPU time, where threads would have interleaved every few milliseconds: the per-page and per-topic caps
bound that time, loops over entries give the loop a turn per entry (`feedbridge.render.turns`), and CPU a
client spends without asking the forum is charged to its allowance (`feedbridge.web.allowance`).
"""

from __future__ import annotations

import io
import socket
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import gevent
from gunicorn.http.body import Body
from gunicorn.workers.ggevent import GeventWorker

from feedbridge.config import Settings

SEND_TIMEOUT = 20.0
"""Seconds for one write of a response (headers, or the body) to be taken by the client."""
SEND_BUFFER = 64 * 1024
"""The kernel's send buffer per connection (it doubles it for bookkeeping): what an absent reader pins."""
FORM_BYTES = 8 * 1024
"""The body a connect page's form may send (`POST /HOST/connect`, a member's payload); any other body is 413."""
FORM_WITHIN = 5.0
"""Seconds a connect form's body has to arrive whole; past it, 408 and the connection closed."""
MAX_HEADER_BYTES = 32 * 1024
"""More than any feed reader or browser sends; past it the request gets 431."""
HIGH_WATER = 0.95
"""The share of `worker_connections` past which idle connections are shed: the rest is room for the ones
being closed to go and for a burst of new ones, so the worker never stops accepting."""


def _answer(status: str, text: str) -> bytes:
    body = f"{status[:3]} {text}\n".encode()
    return (f"HTTP/1.1 {status}\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"X-Content-Type-Options: nosniff\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


_CONTENT_TOO_LARGE = _answer("413 Content Too Large", "this service reads no request body")
_FORM_TIMEOUT = _answer("408 Request Timeout", "the form took too long to arrive")
_TOO_LARGE = _answer("431 Request Header Fields Too Large", "request headers too large")


@dataclass
class Connections:
    """A worker's open connections, and which of them wait for a request, longest first.

    Every entry is an open connection not yet shed, so the state is bounded by `worker_connections`
    however many addresses come and go. Plain dicts, not a cache: no entry is ever evicted to make room.
    """

    high_water: int
    peer_share: int
    """Connections a peer holds before, past the high water, its idle ones are shed first; 0: peers are not
    told apart."""
    peers: dict[socket.socket, str] = field(default_factory=dict)
    idle: OrderedDict[socket.socket, None] = field(default_factory=OrderedDict)
    held: dict[str, int] = field(default_factory=dict)
    idle_by_peer: dict[str, OrderedDict[socket.socket, None]] = field(default_factory=dict)
    crowding: dict[str, None] = field(default_factory=dict)
    """The peers holding more than their share."""

    def opened(self, sock: socket.socket, peer: str) -> socket.socket | None:
        """Count a new connection, idle until its first request; the connection to shed for it, if any."""
        peer = peer if self.peer_share else ""
        self.peers[sock] = peer
        self.held[peer] = self.held.get(peer, 0) + 1
        if self.peer_share and self.held[peer] > self.peer_share:
            self.crowding[peer] = None
        self.waiting(sock)
        if len(self.peers) <= self.high_water:
            return None
        victim = self._victim(sock, peer)
        if victim is not None:
            self.closed(victim)
        return victim

    def _victim(self, sock: socket.socket, peer: str) -> socket.socket | None:
        if peer in self.crowding:
            return next(iter(self.idle_by_peer[peer]))  # its own oldest, maybe this very one
        for crowd in self.crowding:
            if idle := self.idle_by_peer.get(crowd):
                return next(iter(idle))
        oldest = next(iter(self.idle))
        return None if oldest is sock else oldest  # a new connection is not shed for others' requests

    def waiting(self, sock: socket.socket) -> None:
        """The connection waits for a request's headers: newest idle."""
        peer = self.peers.get(sock)
        if peer is None:  # shed while its request was being answered
            return
        self.idle[sock] = None
        if self.peer_share:
            self.idle_by_peer.setdefault(peer, OrderedDict())[sock] = None

    def busy(self, sock: socket.socket) -> None:
        """The connection's request has its headers: it is answered, never shed."""
        self.idle.pop(sock, None)
        peer = self.peers.get(sock)
        if peer is not None and self.peer_share:
            self._not_idle_of(peer, sock)

    def closed(self, sock: socket.socket) -> None:
        peer = self.peers.pop(sock, None)
        if peer is None:
            return
        self.idle.pop(sock, None)
        if self.peer_share:
            self._not_idle_of(peer, sock)
        self.held[peer] -= 1
        if self.held[peer] <= self.peer_share:
            self.crowding.pop(peer, None)
        if not self.held[peer]:
            del self.held[peer]

    def _not_idle_of(self, peer: str, sock: socket.socket) -> None:
        idle = self.idle_by_peer.get(peer)
        if idle is not None:
            idle.pop(sock, None)
            if not idle:
                del self.idle_by_peer[peer]


class Worker(GeventWorker):
    connections: Connections

    def init_process(self) -> None:
        settings = Settings.from_env()
        # Behind a router every peer is the router: the client's address comes with its request, too late.
        share = settings.peer_connections if settings.trusted_hops == 0 else 0
        self.connections = Connections(int(self.worker_connections * HIGH_WATER), share)
        super().init_process()  # runs the worker

    def handle(self, listener: Any, client: socket.socket, addr: Any) -> None:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        victim = self.connections.opened(client, str(addr[0]) if isinstance(addr, tuple) else "")
        if victim is not None:
            _shed(victim)
        try:
            super().handle(listener, client, addr)
        finally:
            self.connections.closed(client)

    def handle_request(self, listener_name: Any, req: Any, sock: socket.socket, addr: Any) -> bool:
        self.connections.busy(sock)
        gevent.sleep(0)
        sock.settimeout(SEND_TIMEOUT)
        form = req.method == "POST" and req.path.endswith("/connect")
        refusal = _refusal(req.headers, form=form)
        try:
            if refusal is None and form:
                refusal = _read_form(req)
            if refusal is not None:
                sock.sendall(refusal)
                raise StopIteration  # gunicorn's way out of its keep-alive loop: it closes the connection
            return bool(super().handle_request(listener_name, req, sock, addr))
        except TimeoutError:  # the client did not take the response in time: close it, no traceback in the log
            raise StopIteration from None
        finally:
            self.connections.waiting(sock)


def _shed(sock: socket.socket) -> None:
    """End the connection's stream: its greenlet, waiting in gunicorn's parser, reads that as the client gone
    and closes it. Through a twin of its descriptor, because gevent's own `shutdown` wakes that greenlet with
    an error gunicorn logs, traceback and all, for every connection shed."""
    try:
        with socket.fromfd(sock.fileno(), sock.family, sock.type) as twin:
            twin.shutdown(socket.SHUT_RDWR)
    except OSError:  # already gone
        pass


def _read_form(req: Any) -> bytes | None:
    """A connect form's body, read whole within `FORM_WITHIN` seconds and handed to the app as gunicorn's own
    `Body` over those bytes; `408` for a body that trickles past it (each read waits on the send deadline, and
    a reader asked for one byte still waits for the whole body)."""
    try:
        with gevent.Timeout(FORM_WITHIN):
            data = req.body.read(FORM_BYTES + 1)
    except gevent.Timeout:
        return _FORM_TIMEOUT
    req.body = Body(io.BytesIO(data))
    return None


def _refusal(headers: list[tuple[str, str]], form: bool = False) -> bytes | None:
    """`form`: the one request that may have a body, a connect page's form (`feedbridge.web.connect`), of at most
    `FORM_BYTES` (`_read_form` reads it)."""
    size = 0
    for name, value in headers:  # gunicorn has checked them: upper-case names, Content-Length all digits
        allowed = FORM_BYTES if form else 0
        if name == "TRANSFER-ENCODING" or (name == "CONTENT-LENGTH" and (len(value) > 9 or int(value) > allowed)):
            return _CONTENT_TOO_LARGE
        size += len(name) + len(value)
    return _TOO_LARGE if size > MAX_HEADER_BYTES else None
