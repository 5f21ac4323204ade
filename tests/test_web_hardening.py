"""Abusive clients against the Procfile's gunicorn, over real sockets: nothing one request carries reaches
another client, log lines cannot be forged, and slow clients cannot stop the service (issue 13, 9-11)."""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import feedparser
import httpx
import pytest

from feedbridge.web.gunicorn_conf import keepalive as HEADER_TIMEOUT
from feedbridge.web.logs import configure_logging
from feedbridge.web.worker import MAX_HEADER_BYTES
from tests.appserver import procfile_web, running_app, settings_for

COMPILER = "/c/compiler/5"
SLOW_CLIENTS = 64
TRICKLE_SECONDS = HEADER_TIMEOUT + 1  # past the header deadline, so the server must have closed them by the end
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
        with httpx.Client(timeout=15, limits=httpx.Limits(max_keepalive_connections=0)) as client:
            for _ in range(16):  # a fresh connection each, so the kernel picks the worker each time
                assert client.get(feed).status_code == 200
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


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
def test_headers_in_pieces_pipelined_and_kept_alive_requests_are_answered(gunicorn):
    split = _raw(gunicorn, b"GET /heal", b"thz HTTP/1.1\r\nHo", b"st: x\r\n", b"Connection: close\r\n\r\n")
    assert split.startswith(b"HTTP/1.1 200") and b'"status":"ok"' in split
    # Two requests in one packet: the second is read ahead by the parser while the first is answered.
    pipelined = _raw(gunicorn, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                               b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert pipelined.count(b"HTTP/1.1 200") == 2
    with httpx.Client(timeout=10) as client:  # keep-alive: one connection, back to the selector in between
        assert [client.get(f"{gunicorn}/healthz").status_code for _ in range(5)] == [200] * 5


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
def test_oversized_headers_get_431_without_a_thread(gunicorn):
    answer = _raw(gunicorn, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEADER_BYTES + 10) + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 431")
    assert httpx.get(f"{gunicorn}/healthz", timeout=10).status_code == 200


@pytest.fixture
def one_worker(upstream, tmp_path):
    """The Procfile's gunicorn with one worker, so consecutive requests meet the same in-process memo and
    cache (with two, a leak could hide behind the other worker); its stdout is returned by `log()`."""
    path = tmp_path / "stdout"
    with open(path, "a+") as out:
        with procfile_web({"FEEDBRIDGE_FORUMS": upstream.url, "WEB_CONCURRENCY": "1", "FEEDBRIDGE_ACCESS_LOG": "on"},
                          stdout=out) as (url, _):
            yield url, f"{url}/{upstream.url.split('//', 1)[1]}", path.read_text


def _links(response: httpx.Response) -> list[str]:
    """The self link and the stylesheet link of an Atom feed."""
    parsed = feedparser.parse(response.content)
    assert parsed.bozo == 0
    stylesheet = response.content.split(b"?>", 2)[1].split(b'href="', 1)[1].split(b'"', 1)[0].decode()
    return [link.href for link in parsed.feed.links if link.rel == "self"] + [stylesheet]


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
def test_a_script_name_from_one_request_never_reaches_the_links_of_another(one_worker):
    url, forum, _ = one_worker
    feed = f"{forum}{COMPILER}.atom"
    # gunicorn would take SCRIPT_NAME as a header from trusted peers (127.0.0.1 by default), a proxy's mount
    # point; the service is mounted at the root, and its config drops the header.
    evil = httpx.get(feed, headers={"SCRIPT_NAME": "//evil.example"}, timeout=15)
    assert evil.status_code == 200 and _links(evil) == [feed, "/static/feed.xsl"]
    for _ in range(3):  # the first builds (or finds) the normal copy; the others are hits on the hot path
        normal = httpx.get(feed, timeout=15)
        assert normal.status_code == 200
        assert _links(normal) == [feed, "/static/feed.xsl"]
        assert b"evil.example" not in normal.content
    assert normal.headers["x-feedbridge-cache"] == "hit"


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
def test_a_forwarded_scheme_or_a_hostile_host_stays_with_its_own_request(one_worker):
    url, forum, _ = one_worker
    feed = f"{forum}{COMPILER}.atom?limit=3"
    https = httpx.get(feed, headers={"X-Forwarded-Proto": "https"}, timeout=15)
    assert _links(https)[0] == feed.replace("http://", "https://")
    hostile = httpx.get(feed, headers={"Host": "evil.example"}, timeout=15)
    assert _links(hostile)[0] == feed.replace(url.split("//", 1)[1], "evil.example")
    for _ in range(2):
        normal = httpx.get(feed, timeout=15)
        assert _links(normal)[0] == feed and b"evil.example" not in normal.content
    # A Host that is not a host name would go into a self link and a cache key: it is refused instead
    # (by Werkzeug when it cannot even encode it, else with our message).
    for host in ("evil.example/x?", "a@b", "evil.example:99999999"):
        refused = httpx.get(feed, headers={"Host": host}, timeout=15)
        assert refused.status_code == 400 and "malformed Host header" in refused.text, host
    assert httpx.get(feed, headers={"Host": "x" * 300}, timeout=15).status_code == 400


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
@pytest.mark.parametrize("host", ["bad host", "a@b", "evil.example/x?"])
def test_every_page_that_builds_links_refuses_a_malformed_host_as_the_feeds_do(one_worker, host):
    # Werkzeug reads a malformed Host as empty: the OPML answered 200 (public, kept 5 minutes) with
    # `xmlUrl="http:/…"`, and the front page and a preview (kept) showed `http:///…` feed URLs.
    url, forum, _ = one_worker
    key = forum.removeprefix(url + "/")
    for path in (f"/{key}/opml", "/", f"/preview?forum={key}", f"/{key}{COMPILER}.html", f"/{key}/connect"):
        refused = httpx.get(url + path, headers={"Host": host}, timeout=15)
        assert refused.status_code == 400 and "malformed Host header" in refused.text, path
        assert "http:///" not in refused.text and "http:/" + key not in refused.text
    assert httpx.get(f"{url}/healthz", headers={"Host": host}, timeout=15).status_code == 200  # builds no link
    opml = httpx.get(f"{url}/{key}/opml", timeout=15)
    assert opml.status_code == 200 and f'xmlUrl="{forum}/' in opml.text


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
def test_an_accept_past_what_any_browser_sends_is_a_hit_for_the_feed_and_parsed_by_no_one(one_worker):
    # 30 KB of `Accept` naming text/html went past the hit path to Werkzeug's parser, 29 ms a request and
    # uncharged: one connection sending it back to back slowed other clients' hits from 1 to 256 ms (median).
    _url, forum, _ = one_worker
    feed = f"{forum}{COMPILER}.atom"
    assert httpx.get(feed, timeout=15).status_code == 200  # kept
    browser = httpx.get(feed, headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}, timeout=15)
    assert browser.headers["content-type"].startswith("application/xml")  # a browser's view, as before
    part = ",".join(["a/b;q=0.5"] * 750)  # four header lines of 7.5 KB: gunicorn admits 8 KB a line
    for accept in ([("Accept", "text/html," + part)] + [("Accept", part)] * 3, [("Accept", ("text/html," + part)[:1025])]):
        answer = httpx.get(feed, headers=accept, timeout=15)
        assert answer.status_code == 200 and answer.headers["x-feedbridge-cache"] == "hit"
        assert answer.headers["content-type"].startswith("application/atom+xml")


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
def test_errors_keep_their_headers_preconditions_hold_everywhere_and_http_1_1_needs_a_host(one_worker):
    """A 405 came without `Allow` and a 416 without `Content-Range` (each error was made anew without Werkzeug's
    headers); `If-Match` was read on a page but not on a feed unless another condition came with it, and its
    412 held the whole feed with `public, max-age=300`; an HTTP/1.1 request without Host was served, its links
    made from the bind address (RFC 9110 §15.5.6, §13.1.1; RFC 9112 §3.2)."""
    url, forum, _ = one_worker
    feed, page = f"{forum}{COMPILER}.atom", f"{forum}{COMPILER}.html"
    posted = httpx.post(feed, timeout=15)
    assert posted.status_code == 405 and "GET" in posted.headers["allow"]
    length = len(httpx.get(f"{url}/static/feed.xsl", timeout=15).content)
    ranged = httpx.get(f"{url}/static/feed.xsl", headers={"Range": "bytes=99999-"}, timeout=15)
    assert ranged.status_code == 416 and ranged.headers["content-range"] == f"bytes */{length}"
    for target in (feed, page):
        etag = httpx.get(target, timeout=15).headers["etag"]
        assert httpx.get(target, headers={"If-Match": etag}, timeout=15).status_code == 200
        for condition in ({"If-Match": '"zz"'}, {"If-Match": '"zz"', "If-None-Match": etag},
                          {"If-Unmodified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"}):
            failed = httpx.get(target, headers=condition, timeout=15)
            assert failed.status_code == 412 and failed.headers["cache-control"] == "no-store", (target, condition)
            assert b"<feed" not in failed.content and b"<html" not in failed.content
    path = feed.split(url, 1)[1].encode()
    no_host = _raw(url, b"GET " + path + b" HTTP/1.1\r\nConnection: close\r\n\r\n", pause=0)
    assert no_host.startswith(b"HTTP/1.1 400") and b"no Host header" in no_host
    old_style = _raw(url, b"GET " + path + b" HTTP/1.0\r\n\r\n", pause=0)  # HTTP/1.0 may leave it out
    assert old_style.split(b" ", 2)[1] == b"200"


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
def test_a_feed_built_without_a_host_is_no_hit_for_http_1_1_and_a_targets_host_is_the_one_named(one_worker):
    """An HTTP/1.0 request without Host built a feed whose links name the bind address, and the hit path (in
    front of Flask's check) then served it to HTTP/1.1 requests without a Host or with an empty one, which
    must get 400 (RFC 9112 §3.2). A target in absolute form names the host, and Host is ignored (§3.2.2): the
    feed's links were the Host header's."""
    url, forum, _ = one_worker
    path = f"{forum}{COMPILER}.rss?limit=9".split(url, 1)[1].encode()
    assert _raw(url, b"GET " + path + b" HTTP/1.0\r\n\r\n", pause=0).split(b" ", 2)[1] == b"200"
    for request in (b" HTTP/1.1\r\nConnection: close\r\n\r\n", b" HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n"):
        answer = _raw(url, b"GET " + path + request, pause=0)
        assert answer.startswith(b"HTTP/1.1 400") and b"X-Feedbridge-Cache: hit" not in answer, answer[:300]
    target = b"http://feeds.example.org" + path.replace(b"limit=9", b"limit=11")
    for _ in range(2):  # built, then a hit: both for the target's host
        answer = _raw(url, b"GET " + target + b" HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n",
                      pause=0)
        assert answer.startswith(b"HTTP/1.1 200") and b"attacker.example" not in answer
        assert b'href="http://feeds.example.org/' in answer or b"<link>http://feeds.example.org/" in answer


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
def test_every_answer_the_server_gives_itself_is_dated_plain_text_in_a_version_it_speaks(one_worker):
    """The worker's own refusals (a body on a GET) and gunicorn's (a request line too long, a bad header)
    came without `Date` (RFC 9110 §6.6.1), and gunicorn's as an HTML page without `nosniff`; an HTTP/1.9
    request was answered "HTTP/1.9 200" (§2.5); an unknown method got 405, where it is 501 (§9.1)."""
    url, forum, _ = one_worker
    path = f"{forum}{COMPILER}.atom".split(url, 1)[1].encode()
    refusals = {
        b"413": b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx",
        b"414": b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"400": b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n",
    }
    for status, request in refusals.items():
        answer = _raw(url, request, pause=0)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 " + status), answer[:200]
        assert b"\r\nDate: " in head and b"X-Content-Type-Options: nosniff" in head
        assert b"text/plain" in head and body.startswith(status + b" ") and body.count(b"\n") == 1, answer
        assert b"<" not in body
    later = _raw(url, b"GET " + path + b" HTTP/1.9\r\nHost: x\r\nConnection: close\r\n\r\n", pause=0)
    assert later.startswith(b"HTTP/1.1 200 "), later[:100]
    brewed = _raw(url, b"BREW " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", pause=0)
    assert brewed.startswith(b"HTTP/1.1 501 ") and b"BREW" in brewed, brewed[:300]
    assert _raw(url, b"PUT " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                pause=0).startswith(b"HTTP/1.1 405 ")


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
def test_control_characters_from_a_request_cannot_forge_a_log_line(one_worker):
    _, forum, log = one_worker
    forged = "2026-01-01 00:00:00,000 WARNING feedbridge.auth admin login ok"
    response = httpx.get(f"{forum}/latest%0a{forged.replace(' ', '%20')}%0d%1b[2J.atom?q=x%0ay", timeout=15)
    assert response.status_code == 404
    assert httpx.get(f"{forum}/latest.atom?q=%0a{forged.replace(' ', '%20')}", timeout=15).status_code == 400
    time.sleep(0.5)  # the worker's stdout is a file it appends to
    lines = log().splitlines()
    # The path is decoded before the app sees it: its controls are escaped, and it stays one line.
    decoded = [line for line in lines if "admin login ok" in line]
    assert len(decoded) == 1, decoded
    assert "/latest\\x0a2026-01-01" in decoded[0] and "\\x0d\\x1b[2J" in decoded[0] and " 404 " in decoded[0]
    # The query string is logged as sent, still percent-encoded.
    assert len([line for line in lines if "admin%20login%20ok" in line and " 400 " in line]) == 1
    assert not any(line.startswith(forged) for line in lines)


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
def test_tracebacks_keep_their_lines_but_none_starts_at_the_margin():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        configure_logging("INFO")
        try:
            raise ValueError("upstream said\n2026-01-01 WARNING forged")
        except ValueError:
            logging.getLogger("feedbridge.test").exception("failed on %s", "/x\r\ny\u2028z\x85")
    finally:
        root.removeHandler(handler)
    first, *rest = stream.getvalue().rstrip("\n").split("\n")
    assert first == "failed on /x\\x0d\\x0ay\\u2028z\\x85"
    assert rest and all(line.startswith("  | ") for line in rest)
    assert rest[-2:] == ["  | ValueError: upstream said", "  | 2026-01-01 WARNING forged"]


@pytest.fixture
def app(upstream):
    with running_app(settings_for(upstream.url)) as running:
        yield running


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
def test_one_error_handler_answers_pages_as_pages_and_feeds_as_text(app, upstream):
    upstream.rate_limit("/latest.md", retry_after=120)
    feed = httpx.get(app.feed_url("/latest.atom"), timeout=15)
    page = httpx.get(app.feed_url("/latest.html"), timeout=15)
    assert (feed.status_code, page.status_code) == (503, 503)
    assert feed.headers["content-type"] == "text/plain; charset=utf-8" and feed.text.startswith("503 ")
    assert page.headers["content-type"] == "text/html; charset=utf-8" and "<html" in page.text
    assert 100 <= int(feed.headers["retry-after"]) <= 120 and 100 <= int(page.headers["retry-after"]) <= 120
    assert {feed.headers["cache-control"], page.headers["cache-control"]} == {"no-store"}
    unknown = httpx.get(f"{app.url}/no.such.forum/latest.html", timeout=15)
    assert unknown.status_code == 404 and "<html" in unknown.text and "unknown forum" in unknown.text
    opml = httpx.get(f"{app.url}/no.such.forum/opml", timeout=15)
    assert opml.status_code == 404 and "<html" in opml.text


@pytest.mark.measures_no_load  # what one request gets: runs beside the rest, not alone (tests/conftest.py)
def test_every_response_carries_nosniff_once(app):
    feed = app.feed_url(f"{COMPILER}.atom")
    responses = [
        httpx.get(feed, timeout=15), httpx.get(feed, timeout=15),  # a miss through Flask, a hit before it
        httpx.get(f"{app.url}/healthz", timeout=15), httpx.get(f"{app.url}/static/feed.xsl", timeout=15),
        httpx.get(f"{app.url}/", timeout=15), httpx.get(app.feed_url("/nothing.atom"), timeout=15),
        httpx.post(feed, timeout=15), httpx.get(feed, headers={"If-None-Match": "x"}, timeout=15),
    ]
    assert [r.headers.get_list("x-content-type-options") for r in responses] == [["nosniff"]] * len(responses)
    assert [r.status_code for r in responses] == [200, 200, 200, 200, 200, 404, 405, 200]
    assert responses[1].headers["x-feedbridge-cache"] == "hit"
