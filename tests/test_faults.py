"""Every upstream fault through the fake forum, with its outcome asserted: status, body, headers, time
taken, and what stays in the cache.

tests/test_web.py covers most faults with a cold cache; here each one also meets a warm cache (the last
good feed is served: 200, `X-Feedbridge-Cache: stale`, the same bytes and ETag), the time it may take is
bounded, the good copy survives it (once the fault clears, the next request is a fresh 200 with the same
bytes), and the process answers `/healthz` afterwards. The faults test_web.py lacks get their cold case.

Every test here runs on the Procfile's gunicorn with its gevent worker, as production does. One server per
settings combination (four) serves all the tests that have those settings, each test with a fake forum of
its own (`served`): what the bridge keeps about a forum, its cached pages, its Retry-After and its detected
source among them, is that forum's alone, so the tests sharing a server do not meet.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.appserver import ProcfileApp, free_port, procfile_apps, settings_for
from tests.upstream import FakeForum, read_at, spawn, stop_together
from tests.upstream import Fault as UpstreamFault

LIST = "/latest.md"
# Short timeouts keep the slow faults quick; no connection retries, so "refused" is one attempt. Failures are
# not remembered here (negative_ttl=0): each fault is followed by its recovery at once. Remembering them is
# tests/test_abuse.py's subject. Every test here is one client of one server, and what the faults cost it (the
# huge and compressed bodies read to their bound) came near its CPU allowance under a loaded CI machine: a
# recovery was then answered with the kept copy, "not rebuilt" (a fresh-clone run on Python 3.13 met it).
# What the allowance does is tests/test_cpu_fairness.py's subject; here it is the most a client may have.
FAST = {"read_timeout": 0.5, "total_timeout": 1.5, "connect_timeout": 1.0, "retries": 0, "negative_ttl": 0,
        "cpu_allowance": 3600.0}


@dataclass(frozen=True)
class Fault:
    name: str
    arm: Callable[[FakeForum], None]
    cold_status: int
    words: str  # in the cold error message
    seconds: float  # the faulted request answers within this
    settings: dict = field(default_factory=dict)  # on top of FAST


def _in(seconds: int) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


FAULTS = [
    Fault("500", lambda up: up.fail(LIST, 500), 502, "answered 500", 2),
    Fault("502", lambda up: up.fail(LIST, 502), 502, "answered 502", 2),
    Fault("404", lambda up: up.fail(LIST, 404), 404, "answered 404", 2),
    Fault("410", lambda up: up.fail(LIST, 410), 404, "answered 410", 2),
    Fault("429 seconds", lambda up: up.rate_limit(LIST, 120), 503, "rate-limited", 2),
    Fault("429 http-date", lambda up: up.rate_limit(LIST, _in(90)), 503, "rate-limited", 2),
    Fault("stall past read timeout", lambda up: up.stall(LIST, 5), 504, "timed out", 2.5),
    # Each byte comes within the read timeout: only the overall deadline stops it. It is checked as bytes
    # arrive, so the bound is the deadline plus one gap between bytes.
    Fault("drip 1 byte/s", lambda up: up.drip(LIST, 1), 504, "longer than", 3.5,
          {"read_timeout": 2.0, "total_timeout": 1.0}),
    # Neither is bounded by a read timeout, nor by the body's deadline (no body comes): the answer's deadline
    # ends each (feedbridge/upstream/transport.py), where they held the request as long as the forum went on.
    Fault("headers dripped 4 bytes/s", lambda up: up.drip_head(LIST, 4), 504, "longer than", 3.5,
          {"read_timeout": 2.0, "total_timeout": 1.0}),
    Fault("endless 100 Continue", lambda up: up.continues(LIST, 5), 504, "longer than", 3.5,
          {"read_timeout": 2.0, "total_timeout": 1.0}),
    Fault("truncated body", lambda up: up.truncate(LIST), 502, "connection failed", 2),
    Fault("20 MB body", lambda up: up.huge(LIST), 502, "limit", 5),
    Fault("20 MB body, no length", lambda up: up.huge(LIST, declare_length=False), 502, "limit", 5),
    Fault("invalid UTF-8", lambda up: up.bad_utf8(LIST), 502, "UTF-8", 2),
    # A codec Python has but no web page is in, whose decode is quadratic: 400 KB of it took half a minute.
    Fault("charset punycode", lambda up: up.set_fault(LIST, UpstreamFault(
        "status", status=200, body="a" * 200_000 + "-" + "b" * 200_000,
        headers={"Content-Type": "text/markdown; charset=punycode"})), 502, "not a charset of text", 2),
    Fault("HTML login page 200", lambda up: up.html_login(LIST), 502, "not a topic list", 2),
    Fault("HTML login page 403", lambda up: up.html_login(LIST, status=403), 403, "answered 403", 2),
    Fault("JSON error 200", lambda up: up.json_error(LIST, status=200), 502, "not a topic list", 2),
    Fault("JSON error 403", lambda up: up.json_error(LIST), 403, "answered 403", 2),
    Fault("redirect loop", lambda up: up.redirect(LIST, LIST), 502, "more than", 2),
    Fault("redirect to another host", lambda up: up.redirect(LIST, "http://evil.example/latest.md"), 502, "outside", 2),
    Fault("redirect to metadata", lambda up: up.redirect(LIST, "http://169.254.169.254/latest/meta-data/"), 502,
          "outside", 2),
    Fault("redirect to another port", lambda up: up.redirect(LIST, f"http://127.0.0.1:{free_port()}/latest.md"), 502,
          "outside", 2),
    Fault("connection closed", lambda up: up.close(LIST), 502, "connection failed", 2),
]


COLD_ONLY_HERE = [f for f in FAULTS if f.name in (
    "drip 1 byte/s", "headers dripped 4 bytes/s", "endless 100 Continue", "charset punycode", "HTML login page 403", "JSON error 403", "redirect to another host", "connection closed",
)]


@pytest.fixture(scope="module")
def served() -> Iterator[dict[str, tuple[ProcfileApp, Any]]]:
    """Each test's server and forum, by the test's name (and its fault's): all the servers boot at once."""
    with ExitStack() as stack:
        forums: dict[str, Any] = {}
        wanted = {}
        fakes: list[FakeForum] = []
        stack.callback(stop_together, fakes)

        def forum(name: str, upstream: Any = None) -> Any:
            """The forum `name`'s test reads: `upstream`, or a new fake forum of its own."""
            if upstream is None:
                upstream = FakeForum().start()
                fakes.append(upstream)
            forums[name] = upstream
            return upstream

        for fault in FAULTS:
            wanted[f"warm {fault.name}"] = settings_for(forum(f"warm {fault.name}").url, cache_ttl=0,
                                                        **{**FAST, **fault.settings})
        for fault in COLD_ONLY_HERE:
            # The forum's source is fixed: a refused /latest.md would otherwise be detection's verdict (JSON, for
            # the re-check period; tests/test_detect.py), and what is tried here is the list's own answer.
            wanted[f"cold {fault.name}"] = settings_for(f"markdown:{forum(f'cold {fault.name}').url}",
                                                        **{**FAST, **fault.settings})
        wanted["other port"] = settings_for(forum("other port").url, **FAST)
        # Bound and never listening: every connection to it is refused, and no other server can take the port.
        closed = stack.enter_context(socket.socket())
        closed.bind(("127.0.0.1", 0))
        wanted["refused cold"] = settings_for(f"http://127.0.0.1:{closed.getsockname()[1]}", **FAST)
        # Its own process, so that killing it drops every kept-alive connection too; on a port below the
        # kernel's ephemeral range, so that it can come back on it.
        refused = forum("refused warm", stack.enter_context(spawn(port=free_port())))
        wanted["refused warm"] = settings_for(refused.url, cache_ttl=0, **FAST)
        wanted["later page"] = settings_for(forum("later page").url, cache_ttl=0, **FAST)
        apps = stack.enter_context(procfile_apps(wanted))
        yield {name: (app, forums.get(name)) for name, app in apps.items()}


def get(url: str, **kwargs) -> httpx.Response:
    return httpx.get(url, timeout=30, **kwargs)


def timed_get(url: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = get(url)
    return response, time.monotonic() - started


def assert_alive(app) -> None:
    assert get(f"{app.url}/healthz").status_code == 200


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_warm_cache_serves_the_last_good_feed_and_keeps_it(served, fault):
    app, upstream = served[f"warm {fault.name}"]
    url = app.feed_url("/latest.atom")
    good = get(url)
    assert good.status_code == 200 and good.headers["x-feedbridge-cache"] == "miss"

    fault.arm(upstream)
    stale, seconds = timed_get(url)
    assert stale.status_code == 200
    assert stale.content == good.content
    assert stale.headers["etag"] == good.headers["etag"]
    assert stale.headers["content-type"] == good.headers["content-type"]
    assert stale.headers["x-feedbridge-cache"] == "stale"
    assert stale.headers["x-feedbridge-stale"].startswith("upstream failed (")
    assert int(stale.headers["age"]) >= 0
    assert seconds < fault.seconds, f"{fault.name} took {seconds:.1f}s"
    # A conditional request still gets its 304 from the stale copy.
    assert get(url, headers={"If-None-Match": good.headers["etag"]}).status_code == 304
    assert_alive(app)

    upstream.clear()
    asked = upstream.count(LIST)
    fresh = get(url)
    assert fresh.status_code == 200 and fresh.content == good.content
    if fault.name.startswith("429"):
        # Retry-After is still running: the forum is not asked, the kept copy is served.
        assert upstream.count(LIST) == asked
        assert fresh.headers["x-feedbridge-cache"] == "stale"
        assert "asked us to wait" in fresh.headers["x-feedbridge-stale"]
    else:
        # The page is read again, whole (core sends no validators to revalidate with), and the feed rebuilt:
        # fresh, not stale.
        again = upstream.requests[-1]
        said = (fresh.headers["x-feedbridge-cache"], fresh.headers.get("x-feedbridge-stale"))
        assert again.target == LIST and "if-none-match" not in again.headers and upstream.count(LIST) == asked + 1, said
        assert fresh.headers["x-feedbridge-cache"] == "miss"


@pytest.mark.parametrize("fault", COLD_ONLY_HERE, ids=lambda f: f.name)
def test_cold_cache_answers_the_documented_status(served, fault):
    app, upstream = served[f"cold {fault.name}"]
    fault.arm(upstream)
    response, seconds = timed_get(app.feed_url("/latest.atom"))
    assert response.status_code == fault.cold_status
    assert fault.words in response.text
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.headers["cache-control"] == "no-store"
    assert seconds < fault.seconds
    assert_alive(app)
    upstream.clear()
    assert get(app.feed_url("/latest.atom")).status_code == 200  # nothing bad was cached


def test_redirect_to_another_local_port_never_reaches_it(served):
    app, upstream = served["other port"]
    with FakeForum() as other:
        upstream.redirect(LIST, f"{other.url}/latest.md")
        response = get(app.feed_url("/latest.atom"))
        assert response.status_code == 502 and "outside" in response.text
    assert other.count() == 0


def test_connection_refused_cold_is_502_and_quick(served):
    app, _ = served["refused cold"]
    response, seconds = timed_get(app.feed_url("/latest.atom"))
    assert response.status_code == 502
    assert "connection failed" in response.text and "ConnectError" in response.text
    assert seconds < 2
    assert_alive(app)


def test_connection_refused_warm_serves_stale_then_recovers(served):
    app, forum = served["refused warm"]
    url = app.feed_url("/c/compiler/5.rss")
    good = get(url)
    assert good.status_code == 200
    forum.stop()  # nothing listens on the port now: connections are refused
    stale, seconds = timed_get(url)
    assert stale.status_code == 200 and stale.content == good.content
    assert stale.headers["x-feedbridge-cache"] == "stale"
    assert "ConnectError" in stale.headers["x-feedbridge-stale"]
    assert seconds < 2
    assert_alive(app)
    with spawn(port=int(forum.url.rsplit(":", 1)[1])):  # the forum comes back on the same port
        fresh = get(url)
    assert fresh.status_code == 200 and fresh.content == good.content
    assert fresh.headers["x-feedbridge-cache"] == "miss"


def test_fault_on_a_later_page_serves_the_whole_stale_feed(served):
    """Three pages cached; page 2 fails: the reader gets all three pages' entries, not a shorter feed."""
    app, upstream = served["later page"]
    url = app.feed_url("/c/compiler/5.json?pages=3")
    good = get(url)
    assert len(good.json()["items"]) == 72
    upstream.fail(read_at("/c/compiler/5", page=2), 500)
    stale = get(url)
    assert stale.headers["x-feedbridge-cache"] == "stale"
    assert stale.content == good.content
