"""The Redis-shared cache and lock, against a real redis-server, the fake forum and real gunicorn workers."""

from __future__ import annotations

import gzip
import hashlib
import logging
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx
import msgspec
import pytest
import redis
from flask import Flask
from werkzeug.test import TestResponse

from feedbridge.config import Settings, parse_forum
from feedbridge.discourse.listing import parse_listing
from feedbridge.errors import ConfigError, DecodeError, UpstreamTimeout
from feedbridge.models import Category, Listing, Topic
from feedbridge.store import codec, redis_store
from feedbridge.store.entries import DirectoryEntry, FailureEntry, FeedEntry, PageEntry, SourceEntry, TopicEntry
from feedbridge.store.memory import MemoryStore
from feedbridge.store.redis_flight import RedisFlight
from feedbridge.store.redis_store import PREFIX, RedisLink, RedisStore, TieredStore, redis_key
from feedbridge.web.app import create_app
from tests import upstream as fake
from tests.appserver import procfile_web
from tests.redis_server import RedisServer, redis_module, redis_server  # noqa: F401

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "site"
# Six feeds over six distinct upstream pages: each one is cold the first time it is asked for.
FEEDS = {
    "/latest.atom": "/latest.md",
    "/hot.rss": "/hot.md",
    "/top.json": "/top.md?period=all",
    "/c/compiler/5.atom": "/latest.md?category=5&order=activity",  # a category's list, where core serves it
    "/c/hardware/gpu/12.rss": "/latest.md?category=12&order=activity",
    "/tag/gpu/7.json": "/tag/gpu/7.md",
}


@pytest.fixture(autouse=True)
def quick_breaker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_store, "BREAKER_COOLDOWN", 0.3)


def make_app(upstream_url: str, server: RedisServer, **overrides) -> Flask:
    return create_app(replace(Settings(forums=(parse_forum(upstream_url),), cache_url=server.url), **overrides))


def get(app: Flask, feed: str, forum_url: str) -> TestResponse:
    key = parse_forum(forum_url).key
    return app.test_client().get(f"/{key}{feed}")


# codec


def test_page_entry_round_trips_with_equal_listing() -> None:
    listing = parse_listing((FIXTURES / "latest.md").read_text(encoding="utf-8"), base_url="https://forum.example.org")
    assert listing.topics and any(t.last_posted_at for t in listing.topics)
    entry = PageEntry(listing, '"abc"', "Tue, 01 Sep 2026 00:00:00 GMT", 1_800_000_000.5, 1234)
    assert codec.decode(codec.encode(entry)) == entry


def test_topic_entry_round_trips_with_content_and_tags() -> None:
    from datetime import datetime

    from feedbridge.models import Topic
    from feedbridge.store.entries import TopicEntry

    topic = Topic(id=7, title="t", url="https://f.example/t/t/7", created_at=datetime(2026, 1, 2, tzinfo=UTC),
                  content_html="<p>caf\u00e9</p>", category="compiler", tags=("rfc", "gpu"))
    entry = TopicEntry(topic, 1_800_000_000.0, 99)
    assert codec.decode(codec.encode(entry)) == entry
    missing = TopicEntry(None, 1_800_000_000.0, 0)
    assert codec.decode(codec.encode(missing)) == missing


def test_categories_directory_round_trips() -> None:
    from feedbridge.models import Category
    from feedbridge.store.entries import DirectoryEntry

    entry = DirectoryEntry((Category("Compiler", "compiler", 5, "torch.compile & co"),
                            Category("GPU", "hardware/gpu", 12)), 1_800_000_000.0)
    assert codec.decode(codec.encode(entry)) == entry


def test_feed_entry_keeps_its_bytes_raw() -> None:
    body = b'<?xml version="1.0"?>\n<feed>\xff\x00 caf\xc3\xa9\n</feed>\n' * 40
    packed = gzip.compress(body, mtime=0)
    entry = FeedEntry(body, "etag", None, 1_800_000_000.0, packed)
    data = codec.encode(entry)
    # raw, the body and its gzip each once: no base64 inflation (a third more of each), only the field names
    assert body in data and packed in data and len(data) < len(body) + len(packed) + 80
    assert codec.decode(data) == entry
    assert codec.decode(codec.encode(1_800_000_123.25)) == 1_800_000_123.25


@pytest.mark.parametrize("data", [b"", b"garbage", b"\x80\x04pickle\n", b'{"t":"feed"}\n',
                                  b'{"t":"page","listing":{}}\n', b'{"t":"number","v":"1"}\n',
                                  b'{"t":"number","v":1}\nextra', b'{"t":"exec"}\n', b"page\n", b"page\n\xc1",
                                  b"number\n\xa11", b"number\n\x01\x01", b"number\n\xc3", b"Topic\n\x80"])
def test_malformed_values_are_decode_errors(data: bytes) -> None:
    with pytest.raises(DecodeError):
        codec.decode(data)


def _topic(**fields: object) -> Topic:
    return Topic(**{"id": 7, "title": "t", "url": "https://f.example/t/t/7", **fields})


@pytest.mark.parametrize("value", [
    PageEntry(Listing("L", "https://f.example", "c4", (_topic(), _topic(id="not-an-int", title=123))), None, None,
              1.0, 1),
    PageEntry(Listing("L", "https://f.example", "c4", (_topic(tags=["a", 5]),)), None, None, 1.0, 1),
    TopicEntry(_topic(last_posted_at=datetime(2026, 1, 2)), 1.0, 1),  # no offset: sorting it with UTC dates raises
    TopicEntry(_topic(created_at="yesterday"), 1.0, 1),
    FeedEntry("<feed/>", "etag", None, 1.0),
    FeedEntry(b"<feed/>", 123, None, 1.0),
    DirectoryEntry((Category("GPU", "hardware/gpu", "12"),), 1.0),
    SourceEntry("json", "soon", 2.0),
    FailureEntry("timeout", None, True),
    # well-typed, and unfit: a 500 on every instance reading it, or the in-process byte bound turned off
    FailureEntry("timeout", "m", float("inf")), FailureEntry("timeout", "m", float("nan")),
    FeedEntry(b"<feed/>", "etag", float("inf"), 1.0), SourceEntry("json", 1.0, float("-inf")),
    PageEntry(Listing("L", "https://f.example", "c4", ()), None, None, 1.0, -10**15),
    TopicEntry(None, 1.0, -1),
    # finite and typed, and a 500 all the same: no header or date can be made of them
    FeedEntry(b"<feed/>", "etag", 1e300, 1.0), FeedEntry(b"<feed/>", "etag", -1e12, 1.0),
    FeedEntry(b"<feed/>", '"x"\r\nX-Injected: 1', None, 1.0),
], ids=["topic-id-and-title", "tag", "naive-date", "date", "feed-body", "etag", "category-id", "source", "failure",
        "failure-at-inf", "failure-at-nan", "feed-modified-at-inf", "source-due-at-minus-inf", "page-size-negative",
        "topic-size-negative", "feed-modified-past-9999", "feed-modified-before-1", "etag-with-crlf"])
def test_ill_typed_values_are_refused(value: object) -> None:
    """What a writer to the shared store puts there is used only when it has the declared types: the old
    codec built `Topic(id='not-an-int', title=123)` against its own docstring."""
    data = codec.encode(value)  # encoding does not check types: this is what a forged entry looks like
    with pytest.raises(DecodeError):
        codec.decode(data)


@pytest.mark.parametrize("date", ["9999-12-31T23:00:00-14:00", "0001-01-01T00:00:00+14:00"])
def test_a_date_that_is_no_utc_date_is_refused(date: str) -> None:
    """A date of a topic no UTC date can be made of: a 500 on every feed built from its page, on every instance
    (msgspec reads it, with its offset; rendering it in UTC overflows). Written by hand, as a forger would."""
    good = msgspec.to_builtins(TopicEntry(_topic(last_posted_at=datetime(2026, 1, 2, tzinfo=UTC)), 1.0, 1))
    assert codec.decode(b"topic\n" + msgspec.msgpack.encode(good)).topic.last_posted_at.year == 2026
    good["topic"]["last_posted_at"] = date
    with pytest.raises(DecodeError, match="no UTC date"):
        codec.decode(b"topic\n" + msgspec.msgpack.encode(good))


@pytest.mark.parametrize("number", [float("inf"), float("-inf"), float("nan")])
def test_a_number_that_is_not_finite_is_refused(number: float) -> None:
    with pytest.raises(DecodeError, match="not finite"):
        codec.decode(codec.encode(number))


def test_unknown_types_are_not_encoded() -> None:
    with pytest.raises(TypeError):
        codec.encode({"a": 1})


def test_keys_are_versioned_and_hashed() -> None:
    digest = "0123456789abcdef0123456789abcdef"
    assert redis_key(f"page:{digest}") == f"{PREFIX}page:{digest}"
    assert PREFIX.startswith(f"feedbridge:v{codec.VERSION}.")
    for key in ("ratelimit:forum.example.org:8080", "feed:../../etc\r\nFLUSHALL", "no namespace at all"):
        name = redis_key(key)
        assert name.startswith(PREFIX)
        assert name.rsplit(":", 1)[1] != key and len(name.rsplit(":", 1)[1]) == 32
        assert "\n" not in name and "forum.example" not in name


def test_invalid_cache_url_is_a_config_error(upstream: fake.FakeForum) -> None:
    with pytest.raises(ConfigError, match="REDIS_URL"):
        create_app(Settings(forums=(parse_forum(upstream.url),), cache_url="http://not-redis"))


# shared state across instances


def test_second_instance_is_served_from_redis(upstream: fake.FakeForum, redis_server: RedisServer) -> None:
    first, second = make_app(upstream.url, redis_server), make_app(upstream.url, redis_server)
    one = get(first, "/latest.atom", upstream.url)
    assert one.status_code == 200 and one.headers["X-Feedbridge-Cache"] == "miss"
    assert upstream.count() == 2  # the list and the forum's basic info (its icon)
    two = get(second, "/latest.atom", upstream.url)
    assert two.status_code == 200 and two.headers["X-Feedbridge-Cache"] == "hit"
    assert two.data == one.data
    # Another feed of the same page: rendered anew, but the page and the basic info come from Redis.
    assert get(second, "/latest.rss", upstream.url).status_code == 200
    assert upstream.count() == 2


def test_hot_feed_costs_no_redis_round_trip(upstream: fake.FakeForum, redis_server: RedisServer) -> None:
    app = make_app(upstream.url, redis_server)
    assert get(app, "/latest.atom", upstream.url).status_code == 200
    client = redis_server.client()
    before = client.info("stats")["total_commands_processed"]
    for _ in range(5):
        assert get(app, "/latest.atom", upstream.url).headers["X-Feedbridge-Cache"] == "hit"
    assert client.info("stats")["total_commands_processed"] == before + 1  # our own INFO


def test_stale_local_copy_defers_to_a_newer_one_in_redis(upstream: fake.FakeForum,
                                                         redis_server: RedisServer) -> None:
    first, second = (make_app(upstream.url, redis_server, cache_ttl=1) for _ in range(2))
    assert get(first, "/latest.atom", upstream.url).headers["X-Feedbridge-Cache"] == "miss"
    time.sleep(1.1)
    assert get(second, "/latest.atom", upstream.url).headers["X-Feedbridge-Cache"] == "miss"  # revalidated
    assert get(first, "/latest.atom", upstream.url).headers["X-Feedbridge-Cache"] == "hit"  # second's copy
    assert upstream.count() == 3  # the list twice, the forum's basic info once


def test_keys_in_redis_are_prefixed_and_hide_request_text(upstream: fake.FakeForum,
                                                          redis_server: RedisServer) -> None:
    app = make_app(upstream.url, redis_server)
    assert get(app, "/latest.atom?q=zebrasecret", upstream.url).status_code == 200
    names = [k.decode() for k in redis_server.client().keys("*")]
    # The page, the feed, the forum's basic info and detected source, and the budget's four counters (the forum's
    # 10 s and minute windows, each held a second past its length, budget.LEEWAY, and this client's share of
    # each, the bridge's own count); the lock is gone.
    assert sorted(n.removeprefix(PREFIX).split(":")[0] for n in names) == [
        "budget", "budget", "budget", "budget", "feed", "page", "site", "source"]
    held = sorted(int(n.split("/")[-2]) for n in names if n.startswith(PREFIX + "budget"))
    assert held == [10, 11, 60, 61]
    assert all(n.startswith(PREFIX) for n in names)
    assert not any("zebrasecret" in n or "latest" in n for n in names)


def test_unreadable_entries_are_misses(upstream: fake.FakeForum, redis_server: RedisServer) -> None:
    assert get(make_app(upstream.url, redis_server), "/latest.atom", upstream.url).status_code == 200
    client = redis_server.client()
    for name in client.keys("*"):
        client.set(name, b"\x80\x04not a value we wrote\n", keepttl=True)
    response = get(make_app(upstream.url, redis_server), "/latest.atom", upstream.url)
    assert response.status_code == 200 and response.headers["X-Feedbridge-Cache"] == "miss"
    assert upstream.count() == 4  # the list and the forum's basic info, each read again


def test_a_key_of_another_redis_type_is_a_miss_and_redis_stays_in_use(upstream: fake.FakeForum,
                                                                        redis_server: RedisServer) -> None:
    """A LIST under a feed's key: Redis answered WRONGTYPE, taken for Redis failing, so each read of it shut
    Redis off for the process (every other feed rebuilt from the forum, /healthz "does not answer")."""
    assert get(make_app(upstream.url, redis_server), "/latest.atom", upstream.url).status_code == 200
    assert get(make_app(upstream.url, redis_server), "/top.atom", upstream.url).status_code == 200
    client = redis_server.client()
    feeds = sorted(client.keys(f"{PREFIX}feed:*"))
    assert len(feeds) == 2
    for name in client.keys(f"{PREFIX}feed:*"):
        ttl = client.pttl(name)
        client.delete(name)
        client.rpush(name, b"not ours")
        client.pexpire(name, ttl)
    second = make_app(upstream.url, redis_server)
    asked = upstream.count()
    response = get(second, "/latest.atom", upstream.url)
    assert response.status_code == 200 and response.headers["X-Feedbridge-Cache"] == "miss"
    assert upstream.count() == asked  # built from the page Redis still shares
    assert second.test_client().get("/healthz").get_json()["redis"] == "answers"
    assert client.type(feeds[0]) == b"string" or client.type(feeds[1]) == b"string"  # the rebuild stored it again


def test_ill_typed_entries_are_misses(upstream: fake.FakeForum, redis_server: RedisServer) -> None:
    """A stored page whose topics have the wrong types, and a feed whose validator is a number, are read as
    misses by a fresh instance: the forum is asked again and the forged feed body is never served."""
    assert get(make_app(upstream.url, redis_server), "/latest.atom", upstream.url).status_code == 200
    client = redis_server.client()
    forge = {
        "page": lambda page: replace(page, listing=replace(page.listing, topics=(_topic(id="1", title=123),))),
        "feed": lambda feed: replace(feed, etag=123, body=b"<feed>forged</feed>"),
    }
    for kind, forged in forge.items():
        names = client.keys(f"{PREFIX}{kind}:*")
        assert names
        for name in names:
            client.set(name, codec.encode(forged(codec.decode(client.get(name)))), keepttl=True)
    response = get(make_app(upstream.url, redis_server), "/latest.atom", upstream.url)
    assert response.status_code == 200 and response.headers["X-Feedbridge-Cache"] == "miss"
    assert b"forged" not in response.data
    assert upstream.count() == 3  # the list twice; the forum's basic info, left as it was, once


def test_unfit_numbers_from_redis_are_misses_not_500s_nor_a_bound_turned_off(
        upstream: fake.FakeForum, redis_server: RedisServer) -> None:
    """Well-typed values another writer left unfit: a remembered failure stored at infinity (its Retry-After's
    `int()` answered 500 on every instance), a feed last modified at infinity (its Last-Modified, 500), a page
    of a negative size (the in-process store's byte bound turned off: 30 times its bound held, nothing evicted
    again). Each is a miss: the forum is asked again, and the store's count stays a count of bytes."""
    assert get(make_app(upstream.url, redis_server), "/latest.atom", upstream.url).status_code == 200
    client = redis_server.client()
    forge = {"page": lambda page: replace(page, size=-10**15),
             "feed": lambda feed: replace(feed, last_modified=float("inf"))}
    for kind, forged in forge.items():
        for name in client.keys(f"{PREFIX}{kind}:*"):
            client.set(name, codec.encode(forged(codec.decode(client.get(name)))), keepttl=True)
    second = make_app(upstream.url, redis_server)
    response = get(second, "/latest.atom", upstream.url)
    assert response.status_code == 200 and response.headers["X-Feedbridge-Cache"] == "miss"
    assert get(second, "/latest.rss", upstream.url).status_code == 200
    assert second.extensions["feedbridge"].current.store.local.held()[1] > 0

    upstream.fail("/top", 500, prefix=True)  # a failure remembered, then moved to infinity
    first = make_app(upstream.url, redis_server, negative_ttl=60)
    assert get(first, "/top.atom", upstream.url).status_code == 502
    names = client.keys(f"{PREFIX}failed:*")
    assert names
    for name in names:
        client.set(name, codec.encode(replace(codec.decode(client.get(name)), stored_at=float("inf"))), keepttl=True)
    upstream.clear()
    assert get(make_app(upstream.url, redis_server, negative_ttl=60), "/top.atom", upstream.url).status_code == 200


def test_oversized_values_stay_local(redis_server: RedisServer) -> None:
    store = RedisStore(RedisLink(redis_server.url), max_value_bytes=100)
    store.set("feed:" + "a" * 32, FeedEntry(b"x" * 101, "e", None, time.time()), 60)
    store.set("feed:" + "b" * 32, FeedEntry(b"x" * 10, "e", None, time.time()), 60)
    assert store.get("feed:" + "a" * 32) is None
    assert store.get("feed:" + "b" * 32).body == b"x" * 10
    assert 0 < redis_server.client().pttl(redis_key("feed:" + "b" * 32)) <= 60_000


def test_a_feed_within_the_limit_is_shared_with_its_gzip(redis_server: RedisServer) -> None:
    """The limit bounds the feed: its gzip, kept beside it for the readers that take it, is never more than the
    body and rides along. Counted in the limit, it left a feed of 1.6 to 2 MiB in each worker's process only,
    where before the gzip it was shared (docs/redis.md: a feed over 2 MiB is not)."""
    store = RedisStore(RedisLink(redis_server.url), max_value_bytes=4000)
    body = b"".join(hashlib.sha256(bytes([n])).digest() for n in range(120))  # 3,840 bytes gzip cannot shorten
    packed = gzip.compress(body, mtime=0)
    entry = FeedEntry(body, "e", None, time.time(), packed)
    assert len(codec.encode(entry)) > 4000 + len(body) // 2  # the value is past the limit, the body within it
    store.set("feed:" + "a" * 32, entry, 60)
    assert store.get("feed:" + "a" * 32) == entry
    store.set("feed:" + "b" * 32, replace(entry, body=body + b"x" * 200), 60)  # the feed itself is past it
    assert store.get("feed:" + "b" * 32) is None


def test_values_the_codec_cannot_write_stay_local(redis_server: RedisServer) -> None:
    """A string with no UTF-8 form (a lone surrogate, which the parsers keep out of every model) makes msgspec
    raise UnicodeEncodeError, a ValueError: the value is not shared and stays in process, as one the codec has
    no kind for does, and the request that made it still answers."""
    listing = Listing("a\ud800b", "https://forum.example.org", "c4", (Topic(1, "t\udfff", "https://forum.example.org/t/1"),))
    entry = PageEntry(listing, None, None, time.time(), 100)
    with pytest.raises(ValueError):
        codec.encode(entry)
    store = TieredStore(MemoryStore(1 << 20), RedisStore(RedisLink(redis_server.url)), fresh_for=60, recheck=5)
    store.set("page:" + "a" * 32, entry, 60)  # raised UnicodeEncodeError before
    assert store.get("page:" + "a" * 32) is entry
    assert redis_server.client().exists(redis_key("page:" + "a" * 32)) == 0


def test_rate_limit_is_shared(upstream: fake.FakeForum, redis_server: RedisServer) -> None:
    upstream.rate_limit("/latest.md", retry_after=120)
    limited = get(make_app(upstream.url, redis_server), "/latest.atom", upstream.url)
    assert limited.status_code == 503
    other = get(make_app(upstream.url, redis_server), "/hot.rss", upstream.url)
    assert other.status_code == 503 and 100 <= int(other.headers["Retry-After"]) <= 120
    assert upstream.count() == 1  # the second instance did not ask the forum at all


# the lock


def test_lock_left_by_a_dead_owner_expires(upstream: fake.FakeForum, redis_server: RedisServer) -> None:
    app = make_app(upstream.url, redis_server)
    page_key = "page:" + hashlib.sha256(f"{upstream.url}/latest.md".encode()).hexdigest()[:32]  # as service.py
    started = time.monotonic()  # before the lock is set, so the wait below can only be longer than its 600 ms
    redis_server.client().set(redis_key(page_key) + ":lock", "token of a killed worker", px=600)
    response = get(app, "/latest.atom", upstream.url)
    assert response.status_code == 200
    # it waited for the lock to expire, and then did not wait out its whole budget (that answers 504)
    assert 0.5 < time.monotonic() - started < 15
    assert upstream.count() == 2  # the list and the forum's basic info


def test_flights_in_two_processes_run_once_and_release_only_their_own_lock(redis_server: RedisServer) -> None:
    client = redis_server.client()
    flights = [RedisFlight(RedisLink(redis_server.url), lock_ttl=5) for _ in range(2)]
    runs: list[int] = []
    lock = redis_key("page:" + "c" * 32) + ":lock"

    def work() -> str:
        runs.append(1)
        time.sleep(0.3)
        client.set("result", "done")
        client.set(lock, "someone else's token", px=5000)  # ours expired and was taken over
        return "done"

    def reread() -> str | None:
        value = client.get("result")
        return value.decode() if value else None

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: flights[i % 2].do("page:" + "c" * 32, work, 5, reread), range(8)))
    assert results == ["done"] * 8
    assert len(runs) == 1
    assert client.get(lock) == b"someone else's token"


def test_waiters_time_out_while_a_live_owner_works(redis_server: RedisServer) -> None:
    redis_server.client().set(redis_key("page:" + "d" * 32) + ":lock", "busy owner", px=5000)
    flight = RedisFlight(RedisLink(redis_server.url), lock_ttl=5)
    started = time.monotonic()
    with pytest.raises(UpstreamTimeout):
        flight.do("page:" + "d" * 32, lambda: "fetched", 0.3, lambda: None)
    assert 0.25 < time.monotonic() - started < 4.5  # its own 0.3 s, not the owner's 5 s lock


# Redis failing


def redis_failures(monkeypatch: pytest.MonkeyPatch) -> list[BaseException]:
    """Every Redis operation that failed from now on: a count of what a dead Redis costs, on any machine."""
    failed: list[BaseException] = []
    original = RedisLink._failed

    def counted(link: RedisLink, exc: BaseException) -> None:
        failed.append(exc)
        original(link, exc)

    monkeypatch.setattr(RedisLink, "_failed", counted)
    return failed


def test_redis_killed_and_restarted(upstream: fake.FakeForum, redis_server: RedisServer,
                                   caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.INFO, "feedbridge.store.redis_store")
    monkeypatch.setattr(redis_store, "BREAKER_COOLDOWN", 2.0)  # far longer than the three requests below
    app = make_app(upstream.url, redis_server)
    feeds = iter(FEEDS)
    warm = next(feeds)
    assert get(app, warm, upstream.url).status_code == 200
    redis_server.kill()
    failed = redis_failures(monkeypatch)
    for feed in [next(feeds), next(feeds), warm]:
        response = get(app, feed, upstream.url)
        assert response.status_code == 200, response.data
    assert len(failed) == 1  # one refused connection opened the breaker; the other requests did not try Redis
    assert response.headers["X-Feedbridge-Cache"] == "hit"  # the warm feed, from the in-process cache
    failures = [r for r in caplog.records if "Redis failed" in r.message]
    assert len(failures) == 1

    redis_server.start()
    time.sleep(2.1)  # the breaker's cooldown
    shared = next(feeds)
    assert get(app, shared, upstream.url).status_code == 200
    assert any("reachable again" in r.message for r in caplog.records)
    before = upstream.count()
    assert get(make_app(upstream.url, redis_server), shared, upstream.url).headers["X-Feedbridge-Cache"] == "hit"
    assert upstream.count() == before


def test_hung_redis_costs_a_short_timeout(upstream: fake.FakeForum, redis_server: RedisServer,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_store, "BREAKER_COOLDOWN", 60.0)
    app = make_app(upstream.url, redis_server)
    redis_server.pause()
    failed = redis_failures(monkeypatch)
    try:
        started = time.monotonic()
        for feed in list(FEEDS)[:3]:
            assert get(app, feed, upstream.url).status_code == 200
        # One read timed out and opened the breaker; the other requests did not wait on Redis at all. A
        # client without socket timeouts would still be waiting: any finite bound tells the two apart.
        assert len(failed) == 1 and isinstance(failed[0], redis.TimeoutError)
        assert time.monotonic() - started < 30
    finally:
        redis_server.resume()


# many gunicorn workers


def test_64_cold_requests_on_two_instances_fetch_each_page_once(redis_server: RedisServer) -> None:
    with fake.spawn() as forum:
        forum.control.stall("/", 0.3, prefix=True)  # every fetch is slow: requests pile up on cold keys
        key = parse_forum(forum.url).key
        env = {"FEEDBRIDGE_FORUMS": forum.url, "FEEDBRIDGE_CACHE_URL": redis_server.url, "WEB_CONCURRENCY": "2",
               "FEEDBRIDGE_LOG_LEVEL": "WARNING"}
        with procfile_web(env) as (one, _), procfile_web(env) as (two, _):
            urls = [f"{(one, two)[i % 2]}/{key}{list(FEEDS)[i % len(FEEDS)]}" for i in range(64)]
            with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=64)) as client:
                barrier = threading.Barrier(64)

                def fetch(url: str) -> int:
                    barrier.wait()
                    return client.get(url).status_code

                with ThreadPoolExecutor(64) as pool:
                    statuses = list(pool.map(fetch, urls))
        targets = forum.control.stats()["targets"]
    assert statuses == [200] * 64
    assert targets == {page: 1 for page in FEEDS.values()} | {fake.IDENTITY: 1}  # and the forum's basic info


_OWNER = """
import sys, time
from feedbridge.store.redis_store import RedisLink
from feedbridge.store.redis_flight import RedisFlight

flight = RedisFlight(RedisLink(sys.argv[1]), lock_ttl=1.0)

def work():
    print("locked", flush=True)
    time.sleep(60)

flight.do("page:killed-owner", work, 60, lambda: None)
"""


def test_lock_owner_killed_mid_fetch(redis_server: RedisServer) -> None:
    owner = subprocess.Popen([sys.executable, "-c", _OWNER, redis_server.url], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "locked"
        owner.send_signal(signal.SIGKILL)  # dies holding the lock: no release, no cleanup
        owner.wait(5)
        calls: list[float] = []
        started = time.monotonic()
        left = redis_server.client().pttl(redis_key("page:killed-owner") + ":lock") / 1000  # < 0 once expired
        flight = RedisFlight(RedisLink(redis_server.url), lock_ttl=1.0)
        result = flight.do("page:killed-owner", lambda: calls.append(time.monotonic()) or "fetched", 5, lambda: None)
        assert result == "fetched" and len(calls) == 1
        # The survivor waited for the dead owner's lock to expire, not for its 60 s of work.
        assert left - 0.05 <= calls[0] - started < 30
    finally:
        owner.kill()
        owner.wait()


def test_a_value_of_another_kind_than_its_key_holds_is_a_miss(redis_server: RedisServer) -> None:  # noqa: F811
    """Each value checks its own fields, but a well-formed number written under a page's, a feed's, a private
    page's or a forum's source key answered 500 on every instance that read it (AttributeError: 'float' object
    has no attribute 'due_at'). A key's kind says what it holds (`codec.HELD_UNDER`); anything else is a miss."""
    store = RedisStore(RedisLink(redis_server.url))
    for key in ("page:" + "a" * 32, "feed:" + "b" * 32, "private-page:" + "c" * 32, "source:" + "d" * 32):
        store.set(key, 1.5, 60)
        assert redis_server.client().exists(redis_key(key)) and store.get(key) is None, key
    store.set("ratelimit:" + "e" * 32, 1.5, 60)  # what a forum's Retry-After is
    assert store.get("ratelimit:" + "e" * 32) == 1.5


def test_a_failure_another_instance_met_while_this_one_waited_for_its_fetch_is_remembered(
        upstream: fake.FakeForum, redis_server: RedisServer) -> None:  # noqa: F811
    """Two instances ask for one page at once: one fetches, the other waits on the Redis lock. The forum
    fails the fetch. The waiter then took the lock and asked the forum again, having checked for a remembered
    failure only before it waited; now the leader checks, so the forum is asked once."""
    first, second = make_app(upstream.url, redis_server), make_app(upstream.url, redis_server)
    assert get(first, "/latest.atom", upstream.url).status_code == 200  # the source is decided, for both
    page = fake.read_at("/c/compiler/5")
    upstream.set_fault(page, fake.Fault("status", status=500, delay=1.5))
    with ThreadPoolExecutor(2) as pool:
        asked = pool.submit(get, first, "/c/compiler/5.atom", upstream.url)
        time.sleep(0.5)  # the first instance holds the page's lock, waiting on the forum
        waited = pool.submit(get, second, "/c/compiler/5.rss", upstream.url)
        answers = (asked.result().status_code, waited.result().status_code)
    assert answers == (502, 502) and upstream.count(page) == 1, (answers, upstream.count(page))
