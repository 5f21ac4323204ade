"""Clients holding connections a worker cannot serve others on, against the Procfile's command over real
sockets: one address holding thousands of idle connections, reopening each one the service closes (issue 31,
item 3); 21 addresses holding responses of a 1.6 MB feed they never read, readers taking nothing or a slice
now and then, and idle connections spread over many addresses each under its share (issue 43, items 1, 2
and 7). Clients from other addresses are still answered, and a worker pins no copy of a body per reader.

The attacker is 127.0.0.1, every other client 127.0.0.2 (Linux routes all of 127/8 to the loopback); the
issue 43 attacks come from addresses of their own further up. Each worker holds `worker_connections`
(1,000) connections; the listening socket queues 2,048 more (gunicorn's `backlog`), and past that the kernel
drops a connecting client's SYN, which it sends again only a second later: so 3,000 held connections are
more than the two workers hold, and fewer than they and the queue do. The issue 43 attacks run on one
worker holding 100 (`WORKER_CONNECTIONS`, through gunicorn's own `GUNICORN_CMD_ARGS`): the same shape, more
connections than the worker holds from addresses each under `FEEDBRIDGE_PEER_CONNECTIONS`, at a tenth of
the sockets.
"""

from __future__ import annotations

import errno
import resource
import selectors
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest

from bench.procs import rss_bytes, worker_pids
from feedbridge.web.worker import SEND_TIMEOUT, SLICE, Connections, Sending, peer_of
from tests.appserver import procfile_web
from tests.fake_heavy import HEAVY_TOPIC, heavy_site
from tests.upstream import FakeForum, ForumProcess, spawn

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
LARGE = f"/t/{HEAVY_TOPIC}.atom?limit=62"
"""A 1.6 MB feed (62 posts of 20,000 characters), the size issue 43 was found with."""
SMALL = "/t/9003.atom"
WORKER_CONNECTIONS = 100
ADDRESSES = [f"127.0.0.{10 + i}" for i in range(30)]
"""The issue 43 attackers' addresses."""


@dataclass
class Flood:
    """What the attacker did: connections it opened in all, how many the service closed, how many it held at the
    end."""

    opened: int = 0
    closed_by_server: int = 0
    held: int = 0


@contextmanager
def idle_flood(port: int, count: int = HELD, addresses: Sequence[str] = (ATTACKER,)) -> Iterator[Flood]:
    """`count` connections spread over `addresses` that send nothing or unfinished headers, each one reopened as
    soon as the service closes it, until the `with` ends or `FLOOD_SECONDS` have passed."""
    sockets_for(count)
    flood, stop, ready = Flood(), threading.Event(), threading.Event()
    selector = selectors.DefaultSelector()

    def open_one(index: int) -> None:
        sock = socket.socket()
        sock.setblocking(False)
        sock.bind((addresses[index % len(addresses)], 0))
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


def sockets_for(count: int) -> None:
    """Room in this process's descriptor limit for `count` sockets more."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 512:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 512), hard))


@contextmanager
def unread(port: int, path: str, addresses: Sequence[str], each: int) -> Iterator[list[socket.socket]]:
    """`each` connections from every one of `addresses`, each asking for `path` and reading none of the answer,
    until the `with` ends. A small receive buffer, so the server's writes wait on them at once."""
    sockets_for(len(addresses) * each)
    held: list[socket.socket] = []
    try:
        for _ in range(each):
            for address in addresses:
                sock = connect(port, receive_buffer=4096, address=address)
                held.append(sock)
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        yield held
    finally:
        for sock in held:
            sock.close()


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


def connect(port: int, receive_buffer: int | None = None, address: str = OTHER) -> socket.socket:
    sock = socket.socket()
    if receive_buffer:  # before connecting, so the window the server sees is small too
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(5)
    sock.bind((address, 0))
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
            assert state.opened(answering, OTHER) == [] and state.opened(keeping, OTHER) == []
            state.busy(answering)
            shed = [state.opened(sock, ATTACKER) for sock in sockets[2:200]]
            assert shed.count([]) == 6 and all(len(each) <= 1 for each in shed) and len(state.peers) == 8
            assert answering not in sum(shed, [])
            assert (keeping in sum(shed, [])) == (share == 0)  # with peers told apart, the attacker pays
            state.waiting(answering)
            for i, sock in enumerate(sockets[200:]):  # a hundred addresses, each once
                state.opened(sock, f"10.0.{i // 250}.{i % 250}")
            for sock in sockets:  # every greenlet ends, shed or not: each calls closed
                state.closed(sock)
            assert forgotten(state)
    finally:
        for sock in sockets:
            sock.close()


def test_past_the_high_water_the_address_holding_the_most_pays_first_its_idle_then_its_longest_stalled():
    """Issue 43, items 1 and 7, in the bookkeeping: no address is past its share, yet the one holding the most
    idle and stalled connections pays, its longest idle first, then the write stalled longest (a write that
    went on starts again at the back); a keep-alive reader holding one idle connection, a request being worked
    on and a new connection (not shed for others) stay. A worker past the high water with nothing to shed (it
    stops accepting) sheds when its sweep finds a stalled write."""
    sockets = [socket.socket() for _ in range(16)]
    reader, working, a0, a1, a2, a3, b0, b1, c0, d0, d1, d2, *rest = sockets
    try:
        state = Connections(high_water=9, peer_share=64)
        opened = {sock: state.opened(sock, peer) for sock, peer in [
            (reader, OTHER), (working, OTHER), (a0, "10.0.0.1"), (a1, "10.0.0.1"), (a2, "10.0.0.1"),
            (a3, "10.0.0.1"), (b0, "10.0.0.2"), (b1, "10.0.0.2"), (c0, "10.0.0.3")]}
        assert list(opened.values()) == [[]] * 9
        for sock in (working, a0, a1, a2, a3, c0):
            state.busy(sock)
        for sock in (a0, a1, a2, a3):  # 10.0.0.1's writes wait on its client
            state.blocked(sock)
        assert state.sweep() == []  # at the high water, not past it
        assert state.opened(d0, "10.0.0.4") == [a0]  # 10.0.0.1 holds 4 to shed: its longest stalled
        state.unblocked(a1)
        state.blocked(a1)  # a1's client took some: stalled anew, at the back
        assert state.opened(d1, "10.0.0.4") == [a2]
        assert state.opened(d2, "10.0.0.4") == [d0]  # now 10.0.0.4 holds the most: its own longest idle
        assert state.sweep() == []
        assert reader in state.peers and working in state.peers and c0 in state.peers

        full = Connections(high_water=2, peer_share=64)
        for i, sock in enumerate(rest):
            assert full.opened(sock, f"10.0.1.{i}") == []  # the only idle one is the new one
            full.busy(sock)
        assert full.sweep() == []  # every request worked on: nothing to shed
        full.blocked(rest[1])
        full.blocked(rest[2])
        assert full.sweep() == [rest[1], rest[2]]  # back at the high water
        for sock in sockets:
            state.closed(sock)
            full.closed(sock)
        assert forgotten(state) and forgotten(full)
    finally:
        for sock in sockets:
            sock.close()


def test_an_ipv6_client_holds_its_connections_as_its_prefix():
    """Issue 43, item 3: addresses of one /64 (`FEEDBRIDGE_IPV6_PREFIX`) are one peer for the per-address
    connection counts, so rotating addresses within it buys no share; another /64, an IPv4 address, or each
    address under a prefix of 128 is a peer of its own."""
    assert peer_of(("2001:db8:1:2::1", 443, 0, 0), 64) == peer_of(("2001:db8:1:2:ffff::9", 443, 0, 0), 64)
    assert peer_of(("2001:db8:1:2::1", 443, 0, 0), 64) != peer_of(("2001:db8:1:3::1", 443, 0, 0), 64)
    assert peer_of(("2001:db8:1:2::1", 443, 0, 0), 128) != peer_of(("2001:db8:1:2::2", 443, 0, 0), 128)
    assert peer_of(("::ffff:10.1.2.3", 443, 0, 0), 64) == peer_of(("10.1.2.3", 443), 64) == "10.1.2.3"
    assert peer_of("", 64) == ""  # a Unix socket's peer
    sockets = [socket.socket() for _ in range(4)]
    try:
        state = Connections(high_water=3, peer_share=2)
        shed = [state.opened(sock, peer_of((f"2001:db8:1:2::{i + 1}", 443, 0, 0), 64)) for i, sock in enumerate(sockets)]
        assert state.held == {"2001:db8:1:2::/64": 3} and "2001:db8:1:2::/64" in state.crowding
        assert shed == [[], [], [], [sockets[0]]]  # past its share: its own longest idle
    finally:
        for sock in sockets:
            sock.close()


def test_a_response_goes_out_as_views_of_its_bytes():
    """Issue 43, item 2, in the writer: a body of several slices arrives whole and in order, and sending it
    allocates far less than one slice (the hit path's slices were copies: 256 KiB each, held by every
    connection whose client was slow to take it)."""
    body = bytes(range(256)) * (4 * SLICE // 256 + 7)
    ours, theirs = socket.socketpair()
    state = Connections(high_water=10, peer_share=0)
    state.opened(ours, "")
    received, taken = bytearray(len(body)), [0]  # allocated beforehand: only the sender's allocations are traced

    def read() -> None:
        view = memoryview(received)
        while taken[0] < len(body) and (count := theirs.recv_into(view[taken[0]:])):
            taken[0] += count

    reader = threading.Thread(target=read)
    with ours, theirs:
        reader.start()
        tracemalloc.start()
        try:
            Sending(ours, state).sendall(body)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        reader.join(10)
    assert taken == [len(body)] and received == body
    assert peak < SLICE // 8, peak
    assert state.stalled == {} and state.ranks.counts == {"": 1}  # idle only: every wait ended


def forgotten(state: Connections) -> bool:
    """Nothing of any connection is left."""
    ranks = state.ranks
    return (state.peers, state.held, state.crowding, state.idle, state.stalled, ranks.counts, ranks.at,
            ranks.top) == ({}, {}, {}, {}, {}, {}, {}, 0)


@dataclass
class Heavy:
    """The Procfile's command on a forum with a 1.6 MB feed (`LARGE`), cached, and a small one (`SMALL`)."""

    url: str
    port: int
    key: str
    """The forum's key in feed paths."""
    master: int

    def path(self, path: str) -> str:
        return f"/{self.key}{path}"


@pytest.fixture(scope="module")
def heavy_forum() -> Iterator[FakeForum]:
    with FakeForum(mode="json", posts=heavy_site().answer) as forum:
        yield forum


@pytest.fixture(scope="module")
def cold_forum() -> Iterator[FakeForum]:
    """The same forum again, whose feeds nothing warms."""
    with FakeForum(mode="json", posts=heavy_site().answer) as forum:
        yield forum


@contextmanager
def heavy_server(forum: FakeForum, *others: FakeForum, **env: str) -> Iterator[Heavy]:
    """One worker (its RSS is the one measured), with `env` and both of `forum`'s feeds cached; `others`
    served too."""
    env = {"FEEDBRIDGE_FORUMS": " ".join(f.url for f in (forum, *others)), "FEEDBRIDGE_LOG_LEVEL": "WARNING",
           "WEB_CONCURRENCY": "1", **env}
    with procfile_web(env) as (url, process):
        served = Heavy(url, int(url.rsplit(":", 1)[1]), forum.url.removeprefix("http://"), process.pid)
        for path in (LARGE, SMALL, LARGE, SMALL):  # the second of each a hit
            assert httpx.get(f"{url}{served.path(path)}", timeout=60).status_code == 200
        yield served


@pytest.fixture(scope="module")
def crowded(heavy_forum: FakeForum, cold_forum: FakeForum) -> Iterator[Heavy]:
    """A worker holding `WORKER_CONNECTIONS`: the issue 43 attacks at a tenth of their sockets."""
    with heavy_server(heavy_forum, cold_forum, GUNICORN_CMD_ARGS=f"--worker-connections {WORKER_CONNECTIONS}") as (
            served):
        yield served


def test_21_addresses_holding_responses_they_never_read_cannot_keep_others_out(crowded):
    """Issue 43, item 1: 126 connections from 21 addresses (6 each, far under their share) ask for the 1.6 MB
    feed and read nothing, more than the worker holds. Each is stalled on a write, never idle: before the fix
    none was ever shed, the worker stopped accepting, and every probe waited for the send deadline (0 of 10
    within 1 s). Now past the high water the connection stalled longest goes for each one accepted."""
    with unread(crowded.port, crowded.path(LARGE), ADDRESSES[:21], 6):
        time.sleep(1)
        outcomes = probes(crowded.url, f"{crowded.url}{crowded.path(SMALL)}")
    assert outcomes.count("200") >= ANSWERED, outcomes


def test_a_worker_that_stopped_accepting_sheds_the_writes_its_clients_never_read(crowded, cold_forum):
    """Issue 43, item 1, while no longer accepting: the same 126 connections ask for a cold 1.6 MB feed of a forum
    answering in 1.5 s. Waiting on its one fetch, none is idle or stalled, so none is shed: the worker fills up
    and stops accepting. Once the feed is built every write waits on a client that takes nothing, and no
    connection comes in to shed one for: the worker's sweep sheds them then, and the probes queued behind them
    are let in (without it, each waited for the send deadline)."""
    cold_forum.stall(f"/t/{HEAVY_TOPIC}", 1.5, prefix=True)
    path = f"/{cold_forum.url.removeprefix('http://')}{LARGE}"
    with unread(crowded.port, path, ADDRESSES[:21], 6):
        time.sleep(2.5)  # built and answered: every write waits
        outcomes = probes(crowded.url, f"{crowded.url}{crowded.path(SMALL)}")
    assert outcomes.count("200") >= ANSWERED, outcomes
    assert cold_forum.count(f"/t/{HEAVY_TOPIC}.json") == 1  # one fetch, every request waiting on it


def test_a_keep_alive_reader_keeps_its_connection_while_10_addresses_hold_150_idle_ones(crowded):
    """Issue 43, item 7: 150 idle connections from 10 addresses (15 each, under their share), each reopened when
    closed, and a reader asking once a second on one keep-alive connection. Before the fix the oldest idle
    connections went first, the reader's among them (it lost 7 of 15 requests at the issue's shape, about one in
    two: 10 asked here, for CI's time); now those of the address holding the most go first."""
    with idle_flood(crowded.port, 150, ADDRESSES[:10]) as flood:
        time.sleep(1)
        sock = connect(crowded.port)
        answers = []
        for _ in range(10):
            started = time.monotonic()
            answer = exchange(sock)
            answers.append(answer)
            if answer is None:
                sock.close()
                sock = connect(crowded.port)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
        sock.close()
    lost = [answer for answer in answers if not (answer or b"").startswith(b"HTTP/1.1 200 ")]
    assert len(lost) <= 1, (len(lost), flood)
    assert flood.closed_by_server > 150, flood  # the flood was met by shedding


@pytest.mark.waits
def test_a_reader_taking_a_slice_now_and_then_gets_one_send_deadline_for_the_whole_body(crowded):
    """Issue 43, item 2: a reader taking 64 KiB every 4 s (a slice of `SLICE` per 16 s, within the deadline of
    any one write). With a deadline per slice it held its connection for the whole 1.6 MB (about 100 s); now
    the response has `SEND_TIMEOUT` from its first byte, then the connection is closed."""
    size = len(httpx.get(f"{crowded.url}{crowded.path(LARGE)}", timeout=30).content)
    assert size > 6 * SLICE
    sock = connect(crowded.port, receive_buffer=4096)
    sock.sendall(f"GET {crowded.path(LARGE)} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    started, received, closed = time.monotonic(), 0, False
    with sock:
        while not closed and time.monotonic() - started < SEND_TIMEOUT + 10:
            taken, began = 0, time.monotonic()
            while taken < 64 * 1024 and not closed:
                try:
                    chunk = sock.recv(64 * 1024 - taken)
                except OSError:  # reset
                    chunk = b""
                closed = not chunk
                taken += len(chunk)
            received += taken
            time.sleep(max(0.0, 4.0 - (time.monotonic() - began)))
    assert closed and received < size, (closed, received, size, time.monotonic() - started)


def test_readers_that_take_nothing_of_a_large_feed_pin_no_copy_of_it(heavy_forum):
    """Issue 43, item 2: 600 connections from 10 addresses ask for the 1.6 MB feed and read nothing. Each used to
    pin a 256 KiB slice copied out of the body while its write waited (2,000 readers: +253 MiB a worker); now
    every write sends views of the one cached body, so a reader costs its greenlet and its socket only. The
    bound, 64 KiB a reader, is a quarter of what the copies cost."""
    readers = 600
    with heavy_server(heavy_forum) as served:
        (worker,) = worker_pids(served.master)
        before = rss_bytes(worker)
        with unread(served.port, served.path(LARGE), ADDRESSES[:10], readers // 10):
            time.sleep(2)  # every request answered, every write waiting
            grown = rss_bytes(worker) - before
            assert httpx.get(f"{served.url}/healthz", timeout=5).status_code == 200
    assert grown < readers * 64 * 1024, f"{grown / 2**20:.1f} MiB"
