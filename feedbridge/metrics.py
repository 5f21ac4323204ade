"""Prometheus metrics: what the service answered, what it asked the forums, what it refused and how big its
cache is, counted where each outcome is already decided, and served as `/metrics` in Prometheus' text format.

Off unless FEEDBRIDGE_METRICS=on: until `switch_on`, every hook returns at once, so a cached hit pays one
attribute read for them. Under gunicorn every worker counts, in prometheus_client's multiprocess mode: each
writes its counts to files in the directory PROMETHEUS_MULTIPROC_DIR names, which the gunicorn config
(`feedbridge.web.gunicorn_conf`) makes fresh in the master before anything imports prometheus_client (the
library picks its mode then) and before any worker is forked, and whose `child_exit` hook drops a dead
worker's gauges; a scrape, whichever worker answers it, reads every worker's files. Without the variable (a
test's threaded server) the counts are the process's own.

Who may read them: `/metrics` is answered only to the peers in FEEDBRIDGE_METRICS_ALLOW, judged by the
socket's peer address: `Endpoint` is the app's outermost layer, in front of the `X-Forwarded-For` rewrite
(`feedbridge.web.context.client_addresses`), since a header is the client's to write. Anyone else gets what
they would get with metrics off, the feed route's 404: the endpoint's existence is not given away.

Labels are bounded by what the service is configured with, never by what a client sends: a feed's kind and
format come from the route grammar (`unknown` for a path that names no feed), statuses are those the service
answers, forums are FEEDBRIDGE_FORUMS' keys, an upstream request's kind is one of `upstream_kind`'s five,
and its status the forum's HTTP status (three digits) or why none came (`timeout`, `connection`, `body`).

    feedbridge_feed_requests_total{kind,format,status}     feed requests answered, cached hits included
    feedbridge_feed_cache_total{outcome}                   hit, stale, miss, or 304 (a conditional request met)
    feedbridge_feed_build_seconds{kind}                    a feed built: its reads, parse and render
    feedbridge_upstream_requests_total{forum,kind,status}  requests sent to a forum, one per redirect hop
    feedbridge_refusals_total{reason}                      budget, slot, allowance, retry_after
    feedbridge_cache_bytes, feedbridge_cache_entries       the in-process caches, summed over live workers
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app, multiprocess

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

PATH = "/metrics"
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
UNKNOWN = "unknown"
"""A feed request's kind and format when its path names no feed (a 404, a 400)."""
CACHE_OUTCOMES = frozenset({"hit", "stale", "miss", "304"})
Refusal = Literal["budget", "slot", "allowance", "retry_after"]
"""Why the bridge answered without asking: the forum's budget (or the client's share of it), no cold slot
free, the client's CPU allowance spent, or the forum's own Retry-After still running."""

FEED_REQUESTS = Counter("feedbridge_feed_requests", "Feed requests answered, by feed kind, format and status",
                        ("kind", "format", "status"))
FEED_CACHE = Counter("feedbridge_feed_cache", "Feeds answered from a fresh copy (hit), the last good one (stale), "
                     "built now (miss), or as 304 Not Modified", ("outcome",))
BUILD_SECONDS = Histogram("feedbridge_feed_build_seconds", "Seconds a feed took to build (reads, parse, render)",
                          ("kind",))
UPSTREAM = Counter("feedbridge_upstream_requests", "Requests sent to a forum, by the page's kind and the forum's "
                   "status (or why none came)", ("forum", "kind", "status"))
REFUSALS = Counter("feedbridge_refusals", "Requests refused (or answered stale) by a budget, a slot, a CPU "
                   "allowance or a forum's Retry-After", ("reason",))
CACHE_BYTES = Gauge("feedbridge_cache_bytes", "Bytes the in-process caches hold, as counted against "
                    "FEEDBRIDGE_CACHE_MAX_BYTES", multiprocess_mode="livesum")
CACHE_ENTRIES = Gauge("feedbridge_cache_entries", "Entries the in-process caches hold", multiprocess_mode="livesum")


@dataclass
class _Switch:
    on: bool = False
    cache_size: Callable[[], tuple[int, int]] = lambda: (0, 0)


_SWITCH = _Switch()


def switch_on(cache_size: Callable[[], tuple[int, int]]) -> None:
    """Count from now on; `cache_size` gives the process's cache's (entries, bytes), read after each answer."""
    _SWITCH.cache_size = cache_size
    _SWITCH.on = True


def on() -> bool:
    return _SWITCH.on


def feed_answered(kind: str, fmt: str, status: int, cache: str) -> None:
    """A feed request answered with `status`; `cache` is how (hit, stale, miss), `-` when no feed was made.
    The cache's size is read again unless a cached copy answered, which stores nothing."""
    if not _SWITCH.on:
        return
    _feed_requests(kind, fmt, status).inc()
    outcome = "304" if status == 304 else cache
    if outcome in CACHE_OUTCOMES:
        _feed_cache(outcome).inc()
    if outcome not in ("hit", "304"):
        entries, size = _SWITCH.cache_size()
        CACHE_ENTRIES.set(entries)
        CACHE_BYTES.set(size)


@lru_cache(maxsize=1024)
def _feed_requests(kind: str, fmt: str, status: int) -> Counter:
    """A labelled series, looked up once: `labels()` validates and locks on every call, a cached hit's
    largest cost here (the labels are bounded, see the module docstring, so the memo holds them all)."""
    return FEED_REQUESTS.labels(kind, fmt, str(status))


@lru_cache(maxsize=8)
def _feed_cache(outcome: str) -> Counter:
    return FEED_CACHE.labels(outcome)


def built(kind: str, seconds: float) -> None:
    """A feed's build took `seconds` (a build that failed is not one): one call, after it."""
    if _SWITCH.on:
        BUILD_SECONDS.labels(kind).observe(seconds)


def upstream(forum: str, base_url: str, url: str, status: str) -> None:
    """A request sent to `forum` (whose pages are under `base_url`) for `url`, answered `status` or failed for it."""
    if _SWITCH.on:
        path = urlsplit(url).path.removeprefix(urlsplit(base_url).path)
        UPSTREAM.labels(forum, upstream_kind(path), status).inc()


def upstream_kind(path: str) -> str:
    """What a forum path is, as Discourse lays them out: a topic's posts (`/t/ID/posts.json`, `/posts.json`, a
    user's `/user_actions.json`), a topic page (`/t/...`), the categories directory, how the forum presents
    itself (`/site/basic-info.json`, `feeds/sources/site.py`), else a topic list."""
    parts = path.strip("/").split("/")
    if parts[-1] in ("posts.json", "post_ids.json", "user_actions.json"):
        return "posts"
    if parts[0] == "t":
        return "topic"
    if parts[0].startswith("categories"):
        return "categories"
    if parts[0] == "site":
        return "site"
    return "list"


def refused(reason: Refusal) -> None:
    if _SWITCH.on:
        REFUSALS.labels(reason).inc()


def registry() -> CollectorRegistry:
    """Every worker's counts under gunicorn (multiprocess mode), else this process's."""
    if not os.environ.get(MULTIPROC_DIR):
        return REGISTRY
    collected = CollectorRegistry()
    multiprocess.MultiProcessCollector(collected)  # type: ignore[no-untyped-call]
    return collected


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Endpoint:
    """WSGI middleware, the app's outermost layer: `/metrics` for the allowed peers, everything else (and
    `/metrics` for anyone else) to `app`."""

    def __init__(self, app: WSGIApplication, allowed: Iterable[Network]):
        self.app = app
        self.allowed = tuple(allowed)
        self.metrics = make_wsgi_app(registry())

    def admits(self, peer: str) -> bool:
        """`peer` (the socket's, REMOTE_ADDR as the server set it) is in an allowed network; an IPv4-mapped
        IPv6 address is its IPv4 one, anything that is no address (a Unix socket's peer) is not admitted."""
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.allowed)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH or not self.admits(environ.get("REMOTE_ADDR") or ""):
            return self.app(environ, start_response)

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], object]:
            # prometheus_client gzips for a scraper that asks (Accept-Encoding), so the body varies with it
            headers += [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
                        ("Vary", "Accept-Encoding")]
            return start_response(status, headers, exc_info)

        head = environ.get("REQUEST_METHOD") == "HEAD"  # prometheus_client answered it 405
        body: Iterable[bytes] = self.metrics({**environ, "REQUEST_METHOD": "GET"} if head else environ, start)
        return [] if head else body  # GET's headers without its body (RFC 9110 §9.3.2)
