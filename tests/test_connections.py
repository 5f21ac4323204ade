"""One address holding thousands of idle connections, reopening each one the service closes, against the
Procfile's command over real sockets (issue 31, item 3): clients from other addresses are still answered.

The attacker is 127.0.0.1, every other client 127.0.0.2 (Linux routes all of 127/8 to the loopback). Each
worker holds `worker_connections` (1,000) connections; the listening socket queues 2,048 more (gunicorn's
`backlog`), and past that the kernel drops a connecting client's SYN, which it sends again only a second
later: so 3,000 held connections are more than the two workers hold, and fewer than they and the queue do.
"""

from __future__ import annotations

import errno
import resource
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from feedbridge.web.worker import Connections
from tests.appserver import procfile_web
from tests.upstream import ForumProcess, spawn

COMPILER = "/c/compiler/5.atom"
ATTACKER, OTHER = "127.0.0.1", "127.0.0.2"
HELD = 3000
KEEPALIVE = 5.0
"""gunicorn's `keepalive` in the Procfile's settings: how long it keeps a connection waiting for a request."""
PROBES, ANSWERED, PROBE_TIMEOUT = 10, 8, 1.0
FLOOD_SECONDS, FLOOD_OPENINGS = 30.0, 1_000_000
"""The attack stops itself after this long, or this many connections opened, whatever the test does."""
PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
"""What every other attacking connection sends on opening: headers that are never finished."""


@dataclass
class Flood:
    """What the attacker did: connections it opened in all, how many the service closed, how many it held at the
    end."""

    opened: int = 0
    closed_by_server: int = 0
    held: int = 0


@contextmanager
def idle_flood(port: int, count: int = HELD) -> Iterator[Flood]:
    """`count` connections from `ATTACKER` that send nothing or unfinished headers, each one reopened as soon
    as the service closes it, until the `with` ends or `FLOOD_SECONDS` have passed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 512:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 512), hard))
    flood, stop, ready = Flood(), threading.Event(), threading.Event()
    selector = selectors.DefaultSelector()

    def open_one(index: int) -> None:
        sock = socket.socket()
        sock.setblocking(False)
        sock.bind((ATTACKER, 0))
        if sock.connect_ex((ATTACKER, port)) not in (0, errno.EINPROGRESS):
            sock.close()
            return
        flood.opened += 1
        # Writable once connected: the unfinished headers go then; readable when the service closes it.
        selector.register(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if index % 2 else 0), index)

    def run() -> None:
        for index in range(count):
            open_one(index)
        ready.set()
        deadline = time.monotonic() + FLOOD_SECONDS
        while not stop.is_set() and time.monotonic() < deadline and flood.opened < FLOOD_OPENINGS:
            for key, events in selector.select(timeout=0.1):
                sock, index = key.fileobj, key.data
                assert isinstance(sock, socket.socket)
                if events & selectors.EVENT_WRITE:
                    try:
                        sock.send(PARTIAL)
                    except OSError:
                        pass
                    selector.modify(sock, selectors.EVENT_READ, index)
                    continue
                try:
                    gone = sock.recv(4096) == b""
                except OSError:
                    gone = True
                if gone:
                    flood.closed_by_server += 1
                    selector.unregister(sock)
                    sock.close()
                    open_one(index)
        flood.held = len(selector.get_map())
        for key in list(selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        selector.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(FLOOD_SECONDS)
    try:
        yield flood
    finally:
        stop.set()
        thread.join(FLOOD_SECONDS + 5)


def probe(url: str) -> str:
    """One request on a new connection from `OTHER`: its status, or `late` past `PROBE_TIMEOUT` in all."""
    started = time.monotonic()
    transport = httpx.HTTPTransport(local_address=OTHER)
    try:
        with httpx.Client(transport=transport, timeout=PROBE_TIMEOUT) as client:
            status = client.get(url).status_code
    except httpx.TimeoutException:
        return "timeout"
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return str(status) if time.monotonic() - started <= PROBE_TIMEOUT else "late"


def probes(url: str, feed: str) -> list[str]:
    """`PROBES` probes alternating a cached feed and /healthz, one every half second."""
    outcomes = []
    for i in range(PROBES):
        started = time.monotonic()
        outcomes.append(probe(feed if i % 2 == 0 else f"{url}/healthz"))
        time.sleep(max(0.0, 0.5 - (time.monotonic() - started)))
    return outcomes


def connect(port: int, receive_buffer: int | None = None) -> socket.socket:
    sock = socket.socket()
    if receive_buffer:  # before connecting, so the window the server sees is small too
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(5)
    sock.bind((OTHER, 0))
    sock.connect((ATTACKER, port))
    return sock


def exchange(sock: socket.socket, path: str = "/healthz") -> bytes | None:
    """One keep-alive request on `sock`: the whole response, or None if the service had closed it."""
    try:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        return read_response(sock)
    except OSError:  # reset: it was closed before the request came
        return None


def read_response(sock: socket.socket) -> bytes | None:
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(next(line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:"))[15:])
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@dataclass
class Served:
    url: str
    feed: str
    """A cached feed's URL."""
    port: int
    forum: ForumProcess


@contextmanager
def server(hops: int) -> Iterator[Served]:
    """The Procfile's command with `FEEDBRIDGE_TRUSTED_HOPS=hops` and the fake forum."""
    env = {"FEEDBRIDGE_LOG_LEVEL": "WARNING", "FEEDBRIDGE_TRUSTED_HOPS": str(hops)}
    with spawn() as forum, procfile_web({"FEEDBRIDGE_FORUMS": forum.url, **env}) as (url, _process):
        feed = f"{url}/{forum.url.removeprefix('http://')}{COMPILER}"
        for _ in range(16):  # both workers warm: the kernel picks the worker per connection
            assert httpx.get(feed, timeout=15).status_code == 200
        yield Served(url, feed, int(url.rsplit(":", 1)[1]), forum)


def test_with_no_router_the_address_holding_3000_idle_connections_gives_up_its_own():
    """The peer is the client: past its share (FEEDBRIDGE_PEER_CONNECTIONS) the attacker's own idle connections
    are the ones closed, so another address's idle keep-alive connections outlast the flood."""
    with server(hops=0) as served:
        kept = [connect(served.port) for _ in range(6)]
        assert all((exchange(sock) or b"").startswith(b"HTTP/1.1 200 ") for sock in kept)
        answered = time.monotonic()
        with idle_flood(served.port) as flood:
            time.sleep(1)
            again = [exchange(sock) for sock in kept]
            idle_for = time.monotonic() - answered
            outcomes = probes(served.url, served.feed)
        for sock in kept:
            sock.close()
    assert idle_for < KEEPALIVE, idle_for  # else gunicorn itself would have closed them
    assert all((answer or b"").startswith(b"HTTP/1.1 200 ") for answer in again), again
    assert outcomes.count("200") >= ANSWERED, (outcomes, flood)
    assert flood.closed_by_server > HELD, flood  # the attack was met by shedding, and the attacker reopened


def test_behind_a_router_the_oldest_idle_connections_go_and_requests_in_progress_stay():
    """Every peer is the router: the worker cannot tell the attacker from anyone, and sheds the connections that
    have waited longest for a request, whoever holds them; never one in a request."""
    with server(hops=1) as served:
        served.forum.control.stall("/c/held/", 4, prefix=True)  # the forum answers while the flood goes on
        waiting = connect(served.port)
        path = served.feed.removeprefix(served.url).replace(COMPILER, "/c/held/1.atom")
        waiting.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        kept = [connect(served.port) for _ in range(6)]
        assert all((exchange(sock) or b"").startswith(b"HTTP/1.1 200 ") for sock in kept)
        with idle_flood(served.port) as flood:
            time.sleep(1)
            again = [exchange(sock) for sock in kept]
            outcomes = probes(served.url, served.feed)
            answer = read_response(waiting) or b""
        for sock in (waiting, *kept):
            sock.close()
    assert again == [None] * len(kept), again  # a router opens another connection, and so do browsers
    assert outcomes.count("200") >= ANSWERED, (outcomes, flood)
    assert answer.startswith(b"HTTP/1.1 404 "), answer[:200]  # the forum's answer: no such category


def test_the_worker_s_bookkeeping_sheds_idle_connections_only_and_forgets_every_closed_one():
    """The state each worker keeps, driven the way `Worker` drives it: a flood from one peer costs that peer
    its own idle connections, a request in progress is never shed, and nothing outlives its connection."""
    sockets = [socket.socket() for _ in range(300)]
    try:
        for share in (3, 0):  # 0: behind a router, where peers are not told apart
            state = Connections(high_water=8, peer_share=share)
            answering, keeping = sockets[0], sockets[1]
            assert state.opened(answering, OTHER) is None and state.opened(keeping, OTHER) is None
            state.busy(answering)
            shed = [state.opened(sock, ATTACKER) for sock in sockets[2:200]]
            assert answering not in shed and shed.count(None) == 6 and len(state.peers) == 8
            assert (keeping in shed) == (share == 0)  # with peers told apart, the attacker pays
            state.waiting(answering)
            for i, sock in enumerate(sockets[200:]):  # a hundred addresses, each once
                state.opened(sock, f"10.0.{i // 250}.{i % 250}")
            for sock in sockets:  # every greenlet ends, shed or not: each calls closed
                state.closed(sock)
            assert (state.peers, state.idle, state.held, state.idle_by_peer, state.crowding) == ({}, {}, {}, {}, {})
    finally:
        for sock in sockets:
            sock.close()
