"""Clients that send slowly, read nothing or send what the service never reads, against the Procfile's
command over real sockets (issue 23, findings 2, 3 and 10): each costs its own connection, never the
answers other clients get."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from bench.servers import attack
from feedbridge.web.worker import MAX_HEADER_BYTES, SEND_TIMEOUT
from tests.appserver import procfile_web

COMPILER = "/c/compiler/5.atom"
PROBES, ANSWERED, PROBE_TIMEOUT = 5, 4, 3.0


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, str]]:
    """The Procfile's command and the fake forum, shared by this module's tests (each attack ends with its
    test); yields the server's URL and a cached feed's URL."""
    from tests.upstream import spawn

    with spawn() as forum, procfile_web({"FEEDBRIDGE_FORUMS": forum.url, "FEEDBRIDGE_LOG_LEVEL": "WARNING"}) as (
            url, _process):
        feed = f"{url}/{forum.url.removeprefix('http://')}{COMPILER}"
        for _ in range(16):  # both workers warm: the kernel picks the worker per connection
            assert httpx.get(feed, timeout=15).status_code == 200
        yield url, feed


def _connect(url: str, small_buffer: bool = False) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    if small_buffer:  # before connecting, so the window the server sees is small too
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5)
    sock.connect((host, int(port)))
    return sock


def probes(url: str, feed: str) -> list[str]:
    """`PROBES` requests alternating the cached feed and /healthz, each on a new connection, one a second:
    what each got within `PROBE_TIMEOUT`."""
    outcomes = []
    for i in range(PROBES):
        started = time.monotonic()
        try:  # httpx's timeout is per read: the total is checked too
            status = httpx.get(feed if i % 2 == 0 else f"{url}/healthz", timeout=PROBE_TIMEOUT).status_code
            outcomes.append(str(status) if time.monotonic() - started <= PROBE_TIMEOUT else "late")
        except httpx.TimeoutException:
            outcomes.append("timeout")
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    return outcomes


def _read_until_closed(sock: socket.socket, within: float) -> tuple[bytes, bool]:
    """What the server sent, and whether it closed the connection, within `within` seconds."""
    sock.setblocking(True)
    deadline = time.monotonic() + within
    received = b""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return received, False
        except OSError:  # reset: closed with our unread requests still in its buffer
            return received, True
        if not chunk:
            return received, True
        received += chunk
    return received, False


def pipelined(url: str, feed: str) -> bytes:
    """300 requests for the cached feed, pipelined on one connection."""
    return f"GET {feed.removeprefix(url)} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * 300


def test_cached_feeds_answer_while_40_connections_pipeline_300_requests_and_read_nothing(server):
    url, feed = server
    burst = pipelined(url, feed)
    with attack(url, 40, lambda _: burst, lambda _: None, 1.0, small_buffer=True):
        time.sleep(1)
        outcomes = probes(url, feed)
    assert outcomes.count("200") >= ANSWERED, outcomes


@pytest.mark.waits  # on the send deadline (20 s), which a busy machine does not move: beside the rest
def test_a_connection_pipelining_300_requests_and_reading_nothing_is_closed_at_the_send_deadline(server):
    """The server has sent what the buffers hold by the send deadline, nowhere near the 300 feeds asked for,
    and has closed the connection: it holds it no longer than a reader that asked for one feed."""
    url, feed = server
    burst = pipelined(url, feed)
    started = time.monotonic()
    with attack(url, 1, lambda _: burst, lambda _: None, 1.0, small_buffer=True) as pipelining:
        time.sleep(max(0.0, started + SEND_TIMEOUT + 3 - time.monotonic()))
        received, closed = _read_until_closed(pipelining[0], within=5)
    size = len(httpx.get(feed, timeout=15).content)
    assert closed and len(received) < 50 * size, (closed, len(received))


def test_cached_feeds_answer_while_80_connections_trickle_a_body(server):
    url, feed = server
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
    with attack(url, 80, lambda _: request, lambda sock: sock.send(b"x"), 3.0):
        time.sleep(1)
        outcomes = probes(url, feed)
    assert outcomes.count("200") >= ANSWERED, outcomes


def _exchange(url: str, request: bytes, within: float = 2.0) -> tuple[bytes, bool]:
    sock = _connect(url)
    with sock:
        sock.sendall(request)
        return _read_until_closed(sock, within)


@pytest.mark.parametrize("framing", [b"Content-Length: 100000\r\n\r\nabc",
                                     b"Transfer-Encoding: chunked\r\n\r\n5\r\nabc"])
def test_a_request_with_a_body_is_answered_at_once_unread_and_closed(server, framing):
    url, _ = server
    answer, closed = _exchange(url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + framing)
    assert answer.startswith(b"HTTP/1.1 413 ") and b"connection: close" in answer.lower() and closed
    # An empty body is no body: what clients send with a POST that has none.
    answer, _ = _exchange(url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("script_name", ["/elsewhere", "//evil.example", "/c", "%2e%2e", "/"])
def test_a_script_name_header_never_gives_a_500(server, script_name):
    url, feed = server
    for target in (feed, f"{url}/healthz", f"{url}/"):
        response = httpx.get(target, headers={"SCRIPT_NAME": script_name}, timeout=15)
        assert response.status_code == 200, (target, response.status_code)


def test_bare_lf_line_endings_are_answered_at_once(server):
    url, _ = server
    answer, _ = _exchange(url, b"GET /healthz HTTP/1.1\nHost: x\n\n")
    assert answer.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 200 ")), answer[:100]


def test_headers_past_the_cap_are_refused_even_when_complete(server):
    url, _ = server
    fields = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 4000) for i in range(MAX_HEADER_BYTES // 4000 + 1))
    answer, closed = _exchange(url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
    assert answer.startswith((b"HTTP/1.1 431 ", b"HTTP/1.1 400 ")) and closed, answer[:100]
    line = b"X-Big: " + b"a" * (MAX_HEADER_BYTES + 10) + b"\r\n\r\n"
    answer, closed = _exchange(url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + line)
    assert answer.startswith((b"HTTP/1.1 431 ", b"HTTP/1.1 400 ")) and closed, answer[:100]
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
