"""The gunicorn worker: gunicorn's own `gevent` worker, with a send deadline, responses sent from the stored
bytes, no request bodies, a fair turn, and connections shed before the worker stops accepting.

In the `gevent` worker a connection is a greenlet, not a thread, so a client that trickles its headers or
its body, or never reads, holds a greenlet and its socket buffers, never one of a bounded set of threads
(`python -m bench.servers` compares it with gunicorn's `gthread` worker, its stock `gevent` worker and
waitress under the same attacks: RELIABILITY.md has the figures). gunicorn bounds the headers (each request's
must arrive within `keepalive` seconds, within `limit_request_field_size` and `limit_request_fields`), and
this subclass adds, through the two methods gunicorn's own gevent worker overrides (`handle` per
connection, `handle_request` per request), its main loop (`run`) and gevent's socket API, no private
attribute:

- a send deadline: a response, its headers and its body however many writes they take, must be taken by the
  client within `SEND_TIMEOUT` of its first byte, else the connection is closed; with a send buffer of
  `SEND_BUFFER`, a client that reads nothing costs at most that buffer and one response, for that long, and
  one that takes a little now and then cannot stretch it (a deadline per write let a reader taking 64 KiB
  every 4 s hold a 1.6 MB feed's connection for 96 s);
- the stored bytes, in turns: gunicorn writes a response through `Sending`, which sends the body the app
  returned (the cached bytes themselves) in slices that are views of it, never copies, with a turn between
  them. gevent's `sendall` yields only when the socket's buffer is full, and to a client that reads as fast
  as loopback delivers it never is, so one 13 MB answer held the worker's loop for its whole copy; and a
  slice copied out of the body for each slow reader pinned 256 KiB per connection (2,000 readers of a
  1.6 MB feed: +253 MiB a worker);
- no bodies: the service answers GET and HEAD only, so a request that announces a body (a non-zero
  `Content-Length`, or any `Transfer-Encoding`) is answered `413` at once, unread, and the connection closed
  (gunicorn's own worker would drain it for `keepalive` seconds); the one exception is a connect page's form
  (`POST /HOST/connect`, `FORM_BYTES` at most, by `Content-Length`), read whole within `FORM_WITHIN` seconds
  (else `408`) before the app sees it;
- one header cap: more than `MAX_HEADER_BYTES` of header names and values is `431`, whatever the packets;
- a fair turn: each request starts by yielding to the other greenlets, so requests a client pipelined
  (already in the buffer, needing no wait) cannot serve back to back while other connections wait;
- connections shed: a worker holds `worker_connections` connections and, with all of them open, stops
  accepting; a new client then waits in the listening socket's queue behind every connection already there
  (with the queue full, the kernel drops its SYN, sent again only a second later), while the worker keeps
  each silent connection, or one whose headers never end, for `keepalive` seconds, and each client that
  takes none of its response for `SEND_TIMEOUT`. So past `HIGH_WATER` of its capacity the worker closes a
  connection that costs nothing to close, for each one it accepts, and every `SWEEP` seconds while it is
  still past it (it has stopped accepting if nothing could be closed when the last ones came): one that
  waits for a request (idle), or one whose response waits on its client to take some (stalled, since the
  client last took any). It then never stops accepting for long, and a new client waits only for the
  connections queued before it to be accepted. Never a connection whose request is being worked on; and of
  an address's writes the one stalled longest goes first, so a response its client takes, however slowly,
  goes after every one whose client takes nothing. Which goes (`Connections`): with no router in front
  (`FEEDBRIDGE_TRUSTED_HOPS=0`) the peer is the client (an IPv6 one its prefix, `FEEDBRIDGE_IPV6_PREFIX`:
  `feedbridge.web.context.client_of`); a new connection of an address holding more than
  `FEEDBRIDGE_PEER_CONNECTIONS` sheds one of that address's own idle connections, maybe itself; else the
  connections of addresses past that share go first, then those of the address holding the most idle and
  stalled ones, past its share or not: its longest idle, then its write stalled longest. So many addresses
  each under the share cannot push out the keep-alive connection of a reader holding one, nor hold the
  worker with responses they never read. Behind a router every peer is the router, which has to bound each
  client's connections itself: the longest idle go first, then the writes stalled longest.

The cost of greenlets: a request that computes (a cold build) holds the worker's whole event loop for its
CPU time, where threads would have interleaved every few milliseconds: the per-page and per-topic caps
bound that time, loops over entries give the loop a turn per entry (`feedbridge.render.turns`), and CPU a
client spends without asking the forum is charged to its allowance (`feedbridge.web.allowance`).
"""

from __future__ import annotations

import email.utils
import html
import io
import re
import socket
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import gevent
from gunicorn.arbiter import Arbiter
from gunicorn.http.body import Body
from gunicorn.workers.ggevent import GeventWorker

from feedbridge.config import Settings
from feedbridge.errors import ConfigError
from feedbridge.render.turns import take_turn

SEND_TIMEOUT = 20.0
"""Seconds for a whole response (headers and body, however many writes) to be taken by the client."""
SEND_BUFFER = 64 * 1024
"""The kernel's send buffer per connection (it doubles it for bookkeeping): what an absent reader pins."""
SLICE = 256 * 1024
"""Bytes of a response written between two turns."""
FORM_BYTES = 8 * 1024
"""The body a connect page's form may send (`POST /HOST/connect`, a member's payload); any other body is 413."""
FORM_WITHIN = 5.0
"""Seconds a connect form's body has to arrive whole; past it, 408 and the connection closed."""
MAX_HEADER_BYTES = 32 * 1024
"""More than any feed reader or browser sends; past it the request gets 431."""
HIGH_WATER = 0.95
"""The share of `worker_connections` past which idle and stalled connections are shed: the rest is room for
the ones being closed to go and for a burst of new ones, so the worker never stops accepting for long."""
SWEEP = 0.25
"""Seconds between two looks, while past the high water, for connections to shed: a worker that has stopped
accepting sees no new connection to shed for."""


Refusal = tuple[str, str]
"""A status line's status and the one line of text that says why, answered by `_answer`."""


def _answer(status: str, text: str) -> bytes:
    """An answer the worker gives itself, as the app's errors are: one line of plain text, dated (RFC 9110
    §6.6.1), `nosniff`, and the connection closed."""
    body = f"{status[:3]} {text}\n".encode()
    return (f"HTTP/1.1 {status}\r\nDate: {email.utils.formatdate(usegmt=True)}\r\nConnection: close\r\n"
            "Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


_CONTENT_TOO_LARGE: Refusal = ("413 Content Too Large", "this service reads no request body")
_FORM_TIMEOUT: Refusal = ("408 Request Timeout", "the form took too long to arrive")
_TOO_LARGE: Refusal = ("431 Request Header Fields Too Large", "request headers too large")
_MESSAGE = re.compile(r"</h1>\s*([^<]{0,300})")
"""The message of gunicorn's error page (`gunicorn.util.write_error`), escaped there, a line at most."""


class _PlainErrors:
    """The socket gunicorn writes its answer to a request it could not read (400, 414, 431, 417, 501) to: its
    HTML page, undated and without `nosniff`, is sent as `_answer`'s line of plain text, its message kept."""

    def __init__(self, sock: Any):
        self.sock = sock

    def sendall(self, data: bytes) -> None:
        line, _, page = data.partition(b"\r\n")
        version, _, status = line.decode("latin-1").partition(" ")
        if version == "HTTP/1.1" and status[:3].isdigit():
            found = _MESSAGE.search(page.decode("utf-8", "replace"))
            said = " ".join(html.unescape(found[1]).split()) if found else ""
            text = "".join(c if c.isprintable() and c.isascii() else "?" for c in said[:200])
            data = _answer(status, text or status[4:].lower())
        self.sock.sendall(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


Sockets = OrderedDict[socket.socket, None]
"""A peer's connections in one state, the longest in it first."""


@dataclass
class Ranks:
    """Peers by how many connections each could be shed (idle or stalled), the most first: every change, and
    the peer at the top, in constant time, however many peers there are."""

    counts: dict[str, int] = field(default_factory=dict)
    at: dict[int, dict[str, None]] = field(default_factory=dict)
    """Count → the peers holding that many."""
    top: int = 0

    def up(self, peer: str) -> None:
        count = self.counts.get(peer, 0)
        self._move(peer, count, count + 1)
        self.top = max(self.top, count + 1)

    def down(self, peer: str) -> None:
        count = self.counts[peer]
        self._move(peer, count, count - 1)
        while self.top and self.top not in self.at:
            self.top -= 1

    def most(self) -> Iterator[str]:
        """The peers, the one holding the most first."""
        for count in range(self.top, 0, -1):
            yield from self.at.get(count, ())

    def _move(self, peer: str, old: int, new: int) -> None:
        if old:
            peers = self.at[old]
            del peers[peer]
            if not peers:
                del self.at[old]
        if new:
            self.counts[peer] = new
            self.at.setdefault(new, {})[peer] = None
        else:
            del self.counts[peer]


@dataclass
class Connections:
    """A worker's open connections: whose each is, which wait for a request and which for their client to
    take their response (both longest first), and which of them to shed past the high water.

    Every entry is an open connection not yet shed, so the state is bounded by `worker_connections`
    however many addresses come and go. Plain dicts, not a cache: no entry is ever evicted to make room.
    """

    high_water: int
    peer_share: int
    """Connections a peer holds before, past the high water, its connections are shed first; 0: peers are not
    told apart."""
    peers: dict[socket.socket, str] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)
    crowding: dict[str, None] = field(default_factory=dict)
    """The peers holding more than their share."""
    idle: dict[str, Sockets] = field(default_factory=dict)
    stalled: dict[str, Sockets] = field(default_factory=dict)
    ranks: Ranks = field(default_factory=Ranks)

    def opened(self, sock: socket.socket, peer: str) -> list[socket.socket]:
        """Count a new connection, idle until its first request; the connections to shed for it."""
        peer = peer if self.peer_share else ""
        self.peers[sock] = peer
        self.held[peer] = self.held.get(peer, 0) + 1
        if self.peer_share and self.held[peer] > self.peer_share:
            self.crowding[peer] = None
        self._add(self.idle, peer, sock)
        return self._room(sock)

    def sweep(self) -> list[socket.socket]:
        """The connections to shed now to be back at the high water (there may be none to shed)."""
        return self._room(None)

    def waiting(self, sock: socket.socket) -> None:
        """The connection waits for a request's headers: newest idle."""
        peer = self.peers.get(sock)
        if peer is not None:  # else shed while its request was being answered
            self._add(self.idle, peer, sock)

    def busy(self, sock: socket.socket) -> None:
        """The connection's request has its headers: it is answered, and not shed while that is worked on."""
        self._drop(self.idle, sock)

    def blocked(self, sock: socket.socket) -> None:
        """A write of the connection's response waits for its client to take some of what it was sent."""
        peer = self.peers.get(sock)
        if peer is not None:
            self._add(self.stalled, peer, sock)

    def unblocked(self, sock: socket.socket) -> None:
        """The write went on: the client takes its response."""
        self._drop(self.stalled, sock)

    def closed(self, sock: socket.socket) -> None:
        peer = self.peers.get(sock)
        if peer is None:
            return
        self._drop(self.idle, sock)
        self._drop(self.stalled, sock)
        del self.peers[sock]
        self.held[peer] -= 1
        if self.held[peer] <= self.peer_share:
            self.crowding.pop(peer, None)
        if not self.held[peer]:
            del self.held[peer]

    def _room(self, newcomer: socket.socket | None) -> list[socket.socket]:
        shed = []
        while len(self.peers) > self.high_water and (victim := self._victim(newcomer)) is not None:
            self.closed(victim)
            shed.append(victim)
        return shed

    def _victim(self, newcomer: socket.socket | None) -> socket.socket | None:
        own = self.peers.get(newcomer) if newcomer is not None else None
        if own is not None and own in self.crowding:
            return next(iter(self.idle[own]))  # its own longest idle, maybe this very one
        for peer in chain(self.crowding, self.ranks.most()):
            if (victim := self._first(peer, newcomer)) is not None:
                return victim
        return None

    def _first(self, peer: str, newcomer: socket.socket | None) -> socket.socket | None:
        """The peer's connection to shed first: its longest idle, else the one stalled longest; never a new
        connection, which is not shed for others' requests (it is its peer's newest idle, so this looks at
        two at most)."""
        for sock in chain(self.idle.get(peer, ()), self.stalled.get(peer, ())):
            if sock is not newcomer:
                return sock
        return None

    def _add(self, state: dict[str, Sockets], peer: str, sock: socket.socket) -> None:
        socks = state.setdefault(peer, OrderedDict())
        if sock not in socks:
            socks[sock] = None
            self.ranks.up(peer)

    def _drop(self, state: dict[str, Sockets], sock: socket.socket) -> None:
        peer = self.peers.get(sock)
        socks = state.get(peer) if peer is not None else None
        if peer is None or socks is None or sock not in socks:
            return
        del socks[sock]
        if not socks:
            del state[peer]
        self.ranks.down(peer)


class Sending:
    """A connection's socket as gunicorn writes one response through it (its `sendall`; anything else is the
    socket's own): the response's bytes in `SLICE`s that are views of them, a turn before each slice after
    the first, all within `SEND_TIMEOUT` of the first byte, and each wait for the client to take what it was
    sent told to `Connections` (the connection is stalled meanwhile)."""

    def __init__(self, sock: socket.socket, connections: Connections):
        self.sock = sock
        self.connections = connections
        self.deadline: float | None = None

    def sendall(self, data: bytes) -> None:
        if self.deadline is None:
            self.deadline = time.monotonic() + SEND_TIMEOUT
        deadline, view = self.deadline, memoryview(data)
        timeout = self.sock.gettimeout()
        self.sock.settimeout(0.0)  # each send takes what the buffer has room for, or says it has none
        try:
            for start in range(0, len(view), SLICE):
                if start:
                    take_turn()
                piece = view[start : start + SLICE]
                while piece:
                    piece = piece[self._send(piece, deadline):]
        finally:
            self.sock.settimeout(timeout)

    def _send(self, piece: memoryview, deadline: float) -> int:
        try:
            return self.sock.send(piece)
        except BlockingIOError:
            pass
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the client did not take the response within the send deadline")
        self.connections.blocked(self.sock)
        self.sock.settimeout(left)
        try:
            return self.sock.send(piece)  # gevent's: waits until the client takes some, then sends
        finally:
            self.sock.settimeout(0.0)
            self.connections.unblocked(self.sock)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


class Worker(GeventWorker):
    connections: Connections
    ipv6_prefix: int

    def init_process(self) -> None:
        settings = Settings.from_env()
        # Behind a router every peer is the router: the client's address comes with its request, too late.
        share = settings.peer_connections if settings.trusted_hops == 0 else 0
        self.connections = Connections(int(self.worker_connections * HIGH_WATER), share)
        self.ipv6_prefix = settings.ipv6_prefix
        super().init_process()  # runs the worker

    def load_wsgi(self) -> None:
        """A setting only the app's assembly can check (a Redis URL's query as redis-py reads it, the connect key:
        neither library may be imported in the master, before gevent patches `ssl`) stops the worker with one
        `Error:` line, as a setting the master checks does, and the boot error that halts the server."""
        try:
            super().load_wsgi()
        except ConfigError as exc:
            print(f"Error: {exc.message}", file=sys.stderr, flush=True)
            sys.exit(Arbiter.WORKER_BOOT_ERROR)

    def run(self) -> None:
        gevent.spawn(self._sweep)
        super().run()

    def _sweep(self) -> None:
        """Past the high water, shed what can be shed every `SWEEP` seconds: a worker that could shed nothing
        when its last connections came has stopped accepting, and no new connection will come to shed for."""
        while self.alive:
            gevent.sleep(SWEEP)
            _shed(self.connections.sweep())

    def handle(self, listener: Any, client: socket.socket, addr: Any) -> None:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        _shed(self.connections.opened(client, peer_of(addr, self.ipv6_prefix)))
        try:
            super().handle(listener, client, addr)
        finally:
            self.connections.closed(client)

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """gunicorn's answer to a request it could not read, as one line of plain text (`_PlainErrors`)."""
        super().handle_error(req, _PlainErrors(client), addr, exc)

    def handle_request(self, listener_name: Any, req: Any, sock: socket.socket, addr: Any) -> bool:
        self.connections.busy(sock)
        if req.version > (1, 1):  # HTTP/1.9 was answered "HTTP/1.9 200": a version this server is not (RFC 9110
            req.version = (1, 1)  # §2.5); a later 1.x is read, and answered, as 1.1 (RFC 9112 §2.3)
        gevent.sleep(0)
        sending = Sending(sock, self.connections)
        form = req.method == "POST" and req.path.endswith("/connect")
        refusal = _refusal(req.headers, form=form)
        try:
            if refusal is None and form:
                refusal = _read_form(req)
            if refusal is not None:
                sending.sendall(_answer(*refusal))
                raise StopIteration  # gunicorn's way out of its keep-alive loop: it closes the connection
            kept = bool(super().handle_request(listener_name, req, sending, addr))
        except TimeoutError:  # the client did not take the response in time: close it, no traceback in the log
            raise StopIteration from None
        self.connections.waiting(sock)
        return kept


def peer_of(addr: Any, ipv6_prefix: int) -> str:
    """Who a connection comes from: its peer's address, an IPv6 one its prefix (`client_of`), so that rotating
    addresses within one subscriber's /64 buys no more connections; "" for a Unix socket's peer."""
    # Imported on use, in a worker, whose app has imported it already: gunicorn's arbiter imports this module
    # before gevent patches the standard library, and `context` would import `ssl` there (redis does).
    from feedbridge.web.context import client_of

    return client_of(str(addr[0]), ipv6_prefix) if isinstance(addr, tuple) else ""


def _shed(socks: list[socket.socket]) -> None:
    """End each connection's stream: its greenlet, waiting in gunicorn's parser, reads that as the client gone
    and closes it; one waiting to send is told the pipe is broken, which gunicorn does not log either. Through
    a twin of its descriptor, because gevent's own `shutdown` wakes that greenlet with an error gunicorn logs,
    traceback and all, for every connection shed."""
    for sock in socks:
        try:
            with socket.fromfd(sock.fileno(), sock.family, sock.type) as twin:
                twin.shutdown(socket.SHUT_RDWR)
        except OSError:  # already gone
            pass


def _read_form(req: Any) -> Refusal | None:
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


def _refusal(headers: list[tuple[str, str]], form: bool = False) -> Refusal | None:
    """`form`: the one request that may have a body, a connect page's form (`feedbridge.web.connect`), of at most
    `FORM_BYTES` (`_read_form` reads it)."""
    size = 0
    for name, value in headers:  # gunicorn has checked them: upper-case names, Content-Length all digits
        allowed = FORM_BYTES if form else 0
        if name == "TRANSFER-ENCODING" or (name == "CONTENT-LENGTH" and (len(value) > 9 or int(value) > allowed)):
            return _CONTENT_TOO_LARGE
        size += len(name) + len(value)
    return _TOO_LARGE if size > MAX_HEADER_BYTES else None
