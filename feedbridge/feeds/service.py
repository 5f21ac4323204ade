"""Feed spec → pages (cache, single-flight, rate limits, revalidation) → parse → filter → render.

Failure policy, in one place: a fresh cached feed is served as is; otherwise the feed is rebuilt, and if
the forum fails while rebuilding, the last good copy (up to the stale TTL) is served and marked stale;
only with nothing cached does the error reach the reader.
"""

from __future__ import annotations

import hashlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlencode

from feedbridge.config import Forum, Settings
from feedbridge.discourse.categories import parse_categories
from feedbridge.discourse.listing import parse_listing
from feedbridge.discourse.topic import parse_topic
from feedbridge.errors import (
    NotAListError,
    NotATopicError,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRateLimited,
)
from feedbridge.feeds.enrich import enrich
from feedbridge.feeds.spec import FeedSpec
from feedbridge.models import Category, Listing, Topic
from feedbridge.render.feeds import FeedMeta
from feedbridge.render.formats import render
from feedbridge.store.entries import DirectoryEntry, FeedEntry, PageEntry, TopicEntry
from feedbridge.store.memory import Flight, SingleFlight, Store
from feedbridge.upstream.fetcher import Fetched, Fetcher, is_within

log = logging.getLogger(__name__)

CacheStatus = Literal["hit", "miss", "stale"]
"""How a feed was answered: from a fresh copy, rebuilt now, or the last good copy while the forum fails."""


@dataclass(frozen=True, slots=True)
class FeedResult:
    entry: FeedEntry
    cache: CacheStatus
    stale_reason: str | None = None

    @property
    def age(self) -> float:
        return max(time.time() - self.entry.stored_at, 0.0)


class FeedService:
    def __init__(self, settings: Settings, store: Store, fetcher: Fetcher, flight: Flight | None = None):
        self.settings = settings
        self.store = store
        self.fetcher = fetcher
        self.flight = flight or SingleFlight()
        self.topic_failures = 0
        self.pool = ThreadPoolExecutor(max_workers=settings.fetch_concurrency * 4, thread_name_prefix="fetch")

    @staticmethod
    def feed_key(spec: FeedSpec, self_url: str | None, stylesheet_url: str | None = None) -> str:
        """Everything the body depends on: the spec and the links built from the request (its own URL, the
        stylesheet's), so a copy built for one Host or script root is never served to another. Bounded:
        the web layer accepts only host names as Host, and gunicorn bounds the request line."""
        key = spec.cache_key() + (f"|{self_url}|{stylesheet_url}" if self_url or stylesheet_url else "")
        return "feed:" + hashlib.sha256(key.encode()).hexdigest()[:32]

    def feed(self, spec: FeedSpec, self_url: str | None, stylesheet_url: str | None = None,
             key: str | None = None) -> FeedResult:
        """`key` is `feed_key(...)` when the caller already has it (the web layer memoizes it per URL)."""
        key = key or self.feed_key(spec, self_url, stylesheet_url)
        cached: FeedEntry | None = self.store.get(key)
        if self._is_fresh(cached):
            return FeedResult(cached, "hit")
        try:
            entry = self.flight.do(key, lambda: self._build(key, spec, self_url, stylesheet_url),
                                   self.settings.singleflight_wait, lambda: self.fresh(key))
        except UpstreamError as exc:
            reason = exc.message
            if cached is not None:
                log.warning("serving stale feed (%.0fs old): %s", time.time() - cached.stored_at, reason)
                return FeedResult(cached, "stale", reason)
            try:  # no copy of this feed, but maybe of its pages (a new filter on a known list)
                entry = self._render(spec, self_url, stylesheet_url, stale_pages=True)
            except UpstreamError:
                raise exc from None
            log.warning("serving a feed built from stale pages: %s", reason)
            return FeedResult(entry, "stale", reason)
        return FeedResult(entry, "miss")

    def topics(self, spec: FeedSpec, stale_pages: bool = False) -> tuple[Listing, list[Topic]]:
        """The filtered topics of a spec: the same path the feeds use, also for previews.

        With full content, the newest candidates (up to the topic budget) are enriched from their own
        pages before the keyword and tag filters run, so those filters see the whole first post.
        """
        listings = self.listings(spec, stale_pages)
        everything = [t for listing in listings for t in listing.topics]
        if spec.content != "full" and not spec.filter.tags:
            return listings[0], spec.filter.apply(everything)
        candidates = replace(spec.filter, query=None, tags=frozenset(), limit=None).apply(everything)
        budget = self.settings.topic_budget
        enriched = self._enrich(spec.forum, candidates[:budget]) + candidates[budget:]
        return listings[0], spec.filter.apply(enriched)

    def _enrich(self, forum: Forum, topics: list[Topic]) -> list[Topic]:
        """Each topic with its first post, creation date, category and tags; the excerpt when that fails."""
        results: list[Topic] = []
        failures = 0
        bound = self.settings.fetch_concurrency
        for start in range(0, len(topics), bound):
            wave = topics[start : start + bound]
            futures = [self.pool.submit(self._topic_page, forum, topic) for topic in wave]
            for topic, future in zip(wave, futures):
                try:
                    results.append(future.result())
                except (UpstreamError, NotATopicError, ValueError) as exc:
                    failures += 1
                    log.warning("content=full: topic %d falls back to its excerpt: %s", topic.id, exc)
                    results.append(topic)
        if failures:
            self.topic_failures += failures
            log.warning("content=full: %d of %d topic fetches failed", failures, len(topics))
        return results

    def categories(self, forum: Forum) -> tuple[Category, ...]:
        """The forum's directory (`/categories.md`), cached like list pages: showing the front page costs the
        forum one request per cache TTL. Raises UpstreamError only with nothing cached."""
        key = "categories:" + hashlib.sha256(forum.base_url.encode()).hexdigest()[:32]
        cached: DirectoryEntry | None = self.store.get(key)
        if self._is_fresh(cached):
            return cached.categories

        def fetch() -> DirectoryEntry:
            fetched = self.fetch(forum, forum.base_url + "/categories.md")
            entry = DirectoryEntry(parse_categories(fetched.text), time.time())
            self.store.set(key, entry, max(self.settings.stale_ttl, self.settings.cache_ttl))
            return entry

        try:
            return self.flight.do(key, fetch, self.settings.singleflight_wait, lambda: self.fresh(key)).categories
        except UpstreamError as exc:
            if cached is not None:
                log.warning("serving stale categories of %s: %s", forum.key, exc.message)
                return cached.categories
            raise UpstreamError(f"could not read the categories of {forum.key}: {exc.message}",
                                exc.retry_after) from None

    def _topic_page(self, forum: Forum, topic: Topic) -> Topic:
        stamp = topic.last_posted_at.isoformat() if topic.last_posted_at else "-"
        key = "topic:" + hashlib.sha256(f"{forum.base_url}|{topic.id}|{stamp}".encode()).hexdigest()[:32]

        def cached() -> TopicEntry | None:
            return self.store.get(key)

        def fetch() -> TopicEntry:
            if not is_within(forum, topic.url):
                raise UpstreamError(f"topic URL {topic.url} is not under {forum.base_url}")
            try:
                fetched = self.fetch(forum, topic.url + ".md")
                page = parse_topic(fetched.text, base_url=forum.base_url, source_url=fetched.url)
            except (UpstreamNotFound, NotATopicError):
                # Remembered for a while, so a deleted topic is not asked for on every rebuild.
                self.store.set(key, TopicEntry(None, time.time(), 0), max(self.settings.cache_ttl, 60))
                raise
            entry = TopicEntry(enrich(topic, page, forum.base_url), time.time(), len(fetched.text))
            self.store.set(key, entry, self.settings.topic_ttl)
            return entry

        entry = cached() or self.flight.do(key, fetch, self.settings.singleflight_wait, cached)
        full = entry.topic
        if full is None:
            return topic
        return replace(topic, created_at=full.created_at, content_html=full.content_html,
                       category=full.category, tags=full.tags)

    def listings(self, spec: FeedSpec, stale_pages: bool = False) -> list[Listing]:
        """Page 0, then further pages in waves of `fetch_concurrency` while the list announces more.

        A wave may ask for a few pages past the end (at most `fetch_concurrency - 1`): the price of not
        reading a long list one page at a time. A missing or empty page ends the list.
        """
        listings = [self.page(spec.forum, spec.page_url(0), stale_pages)]
        wave = self.settings.fetch_concurrency
        next_page = 1
        while next_page < spec.pages and listings[-1].next_page_url is not None:
            numbers = range(next_page, min(next_page + wave, spec.pages))
            futures = [self.pool.submit(self.page, spec.forum, spec.page_url(n), stale_pages) for n in numbers]
            for future in futures:
                try:
                    listing = future.result()
                except UpstreamNotFound:
                    return listings
                if not listing.topics:
                    return listings
                listings.append(listing)
                if listing.next_page_url is None:
                    return listings
            next_page = numbers.stop
        return listings

    def page(self, forum: Forum, url: str, stale_only: bool = False) -> Listing:
        """One parsed list page: from cache while fresh, else fetched; with `stale_only`, any cached copy
        or nothing (the forum just failed: asking it again would only double the load)."""
        key = "page:" + hashlib.sha256(url.encode()).hexdigest()[:32]
        cached: PageEntry | None = self.store.get(key)
        if cached is not None and (stale_only or self._is_fresh(cached)):
            return cached.listing
        if stale_only:
            raise UpstreamError(f"no copy of {url} to fall back on")
        entry: PageEntry = self.flight.do(
            key, lambda: self._fetch_page(key, forum, url, cached), self.settings.singleflight_wait,
            lambda: self.fresh(key),
        )
        return entry.listing

    def fresh(self, key: str) -> Any:
        """The stored entry if it is within the cache TTL, else None."""
        entry = self.store.get(key)
        return entry if self._is_fresh(entry) else None

    def _is_fresh(self, entry: Any) -> bool:
        return entry is not None and time.time() - entry.stored_at < self.settings.cache_ttl

    def fetch(self, forum: Forum, url: str, etag: str | None = None, last_modified: str | None = None) -> Fetched:
        """Every upstream request goes through here: nothing is sent to a forum that asked us to wait."""
        limited_key = "ratelimit:" + forum.key
        until = self.store.get(limited_key)
        longest = self.settings.retry_after_max
        # A wait past the maximum can only be a copy stored before the clamp existed: it is not honoured.
        if until is not None and time.time() < until <= time.time() + longest:
            wait = until - time.time()
            raise UpstreamRateLimited(f"{forum.key} asked us to wait; retry in {wait:.0f}s", retry_after=wait)
        try:
            return self.fetcher.get(forum, url, etag, last_modified)
        except UpstreamRateLimited as exc:
            wait = min(60.0 if exc.retry_after is None else exc.retry_after, longest)
            self.store.set(limited_key, time.time() + wait, wait)
            raise

    def _fetch_page(self, key: str, forum: Forum, url: str, cached: PageEntry | None) -> PageEntry:
        fetched = self.fetch(forum, url, cached.etag if cached else None, cached.last_modified if cached else None)
        now = time.time()
        ttl = max(self.settings.stale_ttl, self.settings.cache_ttl)
        if fetched.status == 304 and cached is not None:
            entry = PageEntry(cached.listing, cached.etag, cached.last_modified, now, cached.size)
            self.store.set(key, entry, ttl)
            return entry
        try:
            listing = parse_listing(fetched.text, base_url=forum.base_url, source_url=fetched.url)
        except NotAListError as exc:
            raise UpstreamError(f"upstream sent something that is not a topic list for {url}: {exc}") from None
        if listing.skipped:
            log.warning("%s: skipped %d malformed topic block(s)", url, listing.skipped)
        entry = PageEntry(listing, fetched.etag, fetched.last_modified, now, len(fetched.text))
        self.store.set(key, entry, ttl)
        return entry

    def _build(self, key: str, spec: FeedSpec, self_url: str | None, stylesheet_url: str | None) -> FeedEntry:
        entry = self._render(spec, self_url, stylesheet_url)
        self.store.set(key, entry, max(self.settings.stale_ttl, self.settings.cache_ttl))
        return entry

    def _render(self, spec: FeedSpec, self_url: str | None, stylesheet_url: str | None,
                stale_pages: bool = False) -> FeedEntry:
        first, topics = self.topics(spec, stale_pages)
        built = time.time()
        query = urlencode(spec.canonical_query())  # without a self URL, the id still tells filtered feeds apart
        meta = FeedMeta(
            title=spec.title,
            forum_url=spec.forum.base_url,
            html_url=spec.html_url,
            feed_id=self_url or spec.page_url(0) + (f"#{query}" if query else ""),
            self_url=self_url,
            description=f"{spec.title}, from {first.title or spec.label} on {spec.forum.key}",
            stylesheet_url=stylesheet_url,
            updated=datetime.fromtimestamp(int(built), UTC),  # the feed's date when no topic has one
        )
        body = render(spec.fmt, meta, topics)
        dates = [t.last_posted_at for t in topics if t.last_posted_at is not None]
        return FeedEntry(
            body=body,
            etag=hashlib.sha256(body).hexdigest()[:32],
            last_modified=max(dates).timestamp() if dates else None,
            stored_at=built,
        )
