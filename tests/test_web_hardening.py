"""Abusive clients against the Procfile's gunicorn, over real sockets: nothing one request carries reaches
another client, log lines cannot be forged, and slow clients cannot stop the service (issue 13, 9-11)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import feedparser
import httpx
import pytest

from feedbridge.web.worker import HEADER_TIMEOUT, MAX_HEADER_BYTES
from tests.appserver import procfile_web

COMPILER = "/c/compiler/5"
SLOW_CLIENTS = 64
TRICKLE_SECONDS = 10
ANSWER_WITHIN = 1.0  # a cached feed answers in a few milliseconds: a wide margin, not a measurement


@contextmanager
def slowloris(url: str, clients: int, seconds: float) -> Iterator[list[socket.socket]]:
    """`clients` connections that each send one byte of a request header per second for `seconds`, and
    never finish it. Bounded: the trickle thread stops by itself, and every socket is closed on exit."""
    host, port = url.split("//", 1)[1].split(":")
    sockets = [socket.create_connection((host, int(port)), timeout=5) for _ in range(clients)]
    header = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 64
    stop = threading.Event()

    def trickle() -> None:
        deadline = time.monotonic() + seconds
        for i in range(len(header)):
            if stop.is_set() or time.monotonic() > deadline:
                return
            for sock in sockets:
                try:
                    sock.send(header[i : i + 1])
                except OSError:  # the server closed it: fine, that is one way to defend
                    pass
            stop.wait(1.0)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        yield sockets
    finally:
        stop.set()
        thread.join(5)
        for sock in sockets:
            sock.close()


def test_cached_feeds_answer_while_64_clients_trickle_headers(upstream):
    env = {"FEEDBRIDGE_FORUMS": upstream.url, "FEEDBRIDGE_LOG_LEVEL": "WARNING"}
    with procfile_web(env) as (url, _process):
        feed = f"{url}/{upstream.url.split('//', 1)[1]}{COMPILER}.atom"
        # Each worker has its own cache. Idle, one worker tends to win every accept, so the other may
        # still be cold when the trickle starts: it then builds the feed once (a miss), as it would anyway.
        for _ in range(16):
            assert httpx.get(feed, timeout=15).status_code == 200
        with slowloris(url, SLOW_CLIENTS, TRICKLE_SECONDS) as slow:
            answered = []
            deadline = time.monotonic() + TRICKLE_SECONDS
            while time.monotonic() < deadline:
                for target in (feed, f"{url}/healthz"):
                    try:
                        response = httpx.get(target, timeout=ANSWER_WITHIN)
                    except httpx.TimeoutException:
                        pytest.fail(f"{target} did not answer within {ANSWER_WITHIN}s during the trickle "
                                    f"({len(answered)} answered before)")
                    assert response.status_code == 200
                    answered.append(response)
                time.sleep(0.5)
            # And the slow clients do not stay forever: the server closes each one once its headers
            # are HEADER_TIMEOUT overdue (the trickle has run that long by now).
            for sock in slow:
                assert _closed_by_server(sock, within=HEADER_TIMEOUT)
        feeds = [r for r in answered if "x-feedbridge-cache" in r.headers]
        assert len(feeds) >= TRICKLE_SECONDS  # one probe every half second or so, all answered
        misses = [r for r in feeds if r.headers["x-feedbridge-cache"] != "hit"]
        assert len(misses) <= 1  # at most the cold worker's first build; every other probe was a hit
        assert feedparser.parse(feeds[-1].content).bozo == 0


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while sock.recv(4096):  # a 408 or nothing, then end of stream
            pass
    except TimeoutError:
        return False
    except OSError:  # reset: closed too
        pass
    return True


def _raw(url: str, *pieces: bytes, pause: float = 0.2) -> bytes:
    """Send `pieces` with a pause between them on one connection, and read until the server closes it."""
    host, port = url.split("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for piece in pieces:
            sock.sendall(piece)
            time.sleep(pause)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


@pytest.fixture
def gunicorn(upstream):
    with procfile_web({"FEEDBRIDGE_FORUMS": upstream.url}) as (url, _process):
        yield url


def test_headers_in_pieces_pipelined_and_kept_alive_requests_are_answered(gunicorn):
    split = _raw(gunicorn, b"GET /heal", b"thz HTTP/1.1\r\nHo", b"st: x\r\n", b"Connection: close\r\n\r\n")
    assert split.startswith(b"HTTP/1.1 200") and b'"status":"ok"' in split
    # Two requests in one packet: the second is read ahead by the parser while the first is answered.
    pipelined = _raw(gunicorn, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                               b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert pipelined.count(b"HTTP/1.1 200") == 2
    with httpx.Client(timeout=10) as client:  # keep-alive: one connection, back to the selector in between
        assert [client.get(f"{gunicorn}/healthz").status_code for _ in range(5)] == [200] * 5


def test_oversized_headers_get_431_without_a_thread(gunicorn):
    answer = _raw(gunicorn, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEADER_BYTES + 10))
    assert answer.startswith(b"HTTP/1.1 431")
    assert httpx.get(f"{gunicorn}/healthz", timeout=10).status_code == 200
