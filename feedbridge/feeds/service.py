"""Feed spec → pages (cache, single-flight, rate limits, revalidation) → parse → filter → render.

Failure policy, in one place (`feedbridge.feeds.cached.CachePolicy`, used for feeds, pages, topic pages
and the categories directory alike): a fresh cached feed is served as is; otherwise the feed is rebuilt,
and if the forum fails while rebuilding, the last good copy (up to the stale TTL) is served and marked
stale; only with nothing cached does the error reach the reader. Failures are remembered briefly, upstream
requests are budgeted per forum, and one deadline bounds each request (all in `cached.py`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import Any

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
    UpstreamTimeout,
)
from feedbridge.feeds.cached import CachePolicy, Caller, ForumBudget
from feedbridge.feeds.enrich import enrich
from feedbridge.feeds.spec import FeedSpec
from feedbridge.models import Category, Listing, Topic
from feedbridge.render.feeds import FeedMeta
from feedbridge.render.formats import render
from feedbridge.store.entries import DirectoryEntry, FeedEntry, PageEntry, TopicEntry
from feedbridge.store.memory import Flight, SingleFlight, Store
from feedbridge.upstream.fetcher import Fetched, Fetcher, is_within

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FeedResult:
    entry: FeedEntry
    cache: str  # "hit", "miss" or "stale"
    stale_reason: str | None = None

    @property
    def age(self) -> float:
        return max(time.time() - self.entry.stored_at, 0.0)


@dataclass(frozen=True, slots=True)
class Topics:
    """What a preview or `.html` view shows: the first list page, the filtered topics, and why they are stale."""

    first: Listing
    topics: list[Topic]
    stale_reason: str | None = None


class FeedService:
    def __init__(self, settings: Settings, store: Store, fetcher: Fetcher, flight: Flight | None = None):
        self.settings = settings
        self.store = store
        self.fetcher = fetcher
        self.flight = flight or SingleFlight()
        self.policy = CachePolicy(settings, store, self.flight)
        self.budget = ForumBudget(store, settings.forum_budget)
        self.topic_failures = 0
        self.pool = ThreadPoolExecutor(max_workers=settings.fetch_concurrency * 4, thread_name_prefix="fetch")

    def caller(self, client: str) -> Caller:
        """A web request's budget share, deadline and slot; `client` is its remote address."""
        return self.policy.caller(client)

    @staticmethod
    def feed_key(spec: FeedSpec, self_url: str | None, stylesheet_url: str | None = None) -> str:
        key = spec.cache_key() + (f"|{self_url}|{stylesheet_url}" if self_url or stylesheet_url else "")
        return "feed:" + hashlib.sha256(key.encode()).hexdigest()[:32]

    def feed(self, spec: FeedSpec, self_url: str | None, stylesheet_url: str | None = None,
             key: str | None = None, caller: Caller | None = None) -> FeedResult:
        """`key` is `feed_key(...)` when the caller already has it (the web layer memoizes it per URL)."""
        key = key or self.feed_key(spec, self_url, stylesheet_url)
        keep = max(self.settings.stale_ttl, self.settings.cache_ttl)
        with self.policy.request(caller):
            try:
                got = self.policy.get(key, lambda _held: self._render(spec, self_url, stylesheet_url, caller),
                                      fresh_for=self.settings.cache_ttl, keep_for=keep, caller=caller, what="the feed")
            except UpstreamError as exc:
                try:  # no copy of this feed, but maybe of its pages (a new filter on a known list)
                    entry = self._render(spec, self_url, stylesheet_url, None, stale_pages=True)
                except UpstreamError:
                    raise exc from None
                log.warning("serving a feed built from stale pages: %s", exc.message)
                return FeedResult(entry, "stale", exc.message)
        return FeedResult(got.entry, got.cache, got.stale_reason)

    def view(self, spec: FeedSpec, caller: Caller | None = None) -> Topics:
        """The topics of a feed for a page (`.html`, preview): like `feed`, the last good pages when the forum
        fails, and the error only when there are none."""
        with self.policy.request(caller):
            try:
                first, topics = self.topics(spec, caller=caller)
                return Topics(first, topics)
            except UpstreamError as exc:
                try:
                    first, topics = self.topics(spec, stale_pages=True)
                except UpstreamError:
                    raise exc from None
                return Topics(first, topics, exc.message)

    def topics(self, spec: FeedSpec, stale_pages: bool = False,
               caller: Caller | None = None) -> tuple[Listing, list[Topic]]:
        """The filtered topics of a spec: the same path the feeds use, also for previews.

        With full content, the newest candidates (up to the topic budget) are enriched from their own
        pages before the keyword and tag filters run, so those filters see the whole first post.
        """
        listings = self.listings(spec, stale_pages, caller)
        everything = [t for listing in listings for t in listing.topics]
        if spec.content != "full" and not spec.filter.tags:
            return listings[0], spec.filter.apply(everything)
        candidates = replace(spec.filter, query=None, tags=frozenset(), limit=None).apply(everything)
        budget = self.settings.topic_budget
        enriched = self._enrich(spec.forum, candidates[:budget], caller, stale_pages) + candidates[budget:]
        return listings[0], spec.filter.apply(enriched)

    def _enrich(self, forum: Forum, topics: list[Topic], caller: Caller | None, cached_only: bool) -> list[Topic]:
        """Each topic with its first post, creation date, category and tags; the excerpt when that fails.

        Within the request's deadline: when it passes, the topics not read by then keep their excerpt, the
        fetches under way finish in the background (and are cached, or remembered as failed), and the
        forum's topic pages count as slow for the negative TTL, so the next rebuild uses what is cached
        without asking again. `cached_only` (stale pages: the forum just failed) asks nothing either.
        """
        slow_key = "topicslow:" + hashlib.sha256(forum.base_url.encode()).hexdigest()[:32]
        cached_only = cached_only or self.store.get(slow_key) is not None
        results: list[Topic] = []
        failures = 0
        bound = self.settings.fetch_concurrency
        for start in range(0, len(topics), bound):
            wave = topics[start : start + bound]
            if cached_only:
                results += [self._cached_topic(forum, topic) for topic in wave]
                continue
            futures = [self.pool.submit(self._topic_page, forum, topic, caller) for topic in wave]
            for topic, future in zip(wave, futures, strict=True):
                try:
                    results.append(_result(future, caller))
                except FutureTimeout:
                    if not cached_only:
                        log.warning("content=full: the %gs deadline passed; %d topics keep their excerpt",
                                    self.settings.request_deadline, len(topics) - len(results))
                        if self.settings.negative_ttl > 0:
                            self.store.set(slow_key, time.time(), self.settings.negative_ttl)
                    cached_only = True
                    results.append(self._cached_topic(forum, topic))
                except (UpstreamError, NotATopicError, ValueError) as exc:
                    failures += 1
                    log.warning("content=full: topic %d falls back to its excerpt: %s", topic.id, exc)
                    results.append(topic)
        if failures:
            self.topic_failures += failures
            log.warning("content=full: %d of %d topic fetches failed", failures, len(topics))
        return results

    def categories(self, forum: Forum, caller: Caller | None = None) -> tuple[Category, ...]:
        """The forum's directory (`/categories.md`), cached like list pages: showing the front page costs the
        forum one request per cache TTL. Raises UpstreamError only with nothing cached."""
        key = "categories:" + hashlib.sha256(forum.base_url.encode()).hexdigest()[:32]

        def fetch(_held: DirectoryEntry | None) -> DirectoryEntry:
            fetched = self.fetch(forum, forum.base_url + "/categories.md", caller=caller)
            return DirectoryEntry(parse_categories(fetched.text), time.time())

        with self.policy.request(caller):
            try:
                got = self.policy.get(key, fetch, fresh_for=self.settings.cache_ttl, caller=caller,
                                      keep_for=max(self.settings.stale_ttl, self.settings.cache_ttl),
                                      what="the categories")
            except UpstreamError as exc:
                raise type(exc)(f"could not read the categories of {forum.key}: {exc.message}",
                                exc.retry_after) from None
        return got.entry.categories

    @staticmethod
    def _topic_key(forum: Forum, topic: Topic) -> str:
        stamp = topic.last_posted_at.isoformat() if topic.last_posted_at else "-"
        return "topic:" + hashlib.sha256(f"{forum.base_url}|{topic.id}|{stamp}".encode()).hexdigest()[:32]

    def _cached_topic(self, forum: Forum, topic: Topic) -> Topic:
        entry: TopicEntry | None = self.store.get(self._topic_key(forum, topic))
        return topic if entry is None else _with_page(topic, entry)

    def _topic_page(self, forum: Forum, topic: Topic, caller: Caller | None = None) -> Topic:
        key = self._topic_key(forum, topic)

        def fetch(_held: TopicEntry | None) -> TopicEntry:
            if not is_within(forum, topic.url):
                raise UpstreamError(f"topic URL {topic.url} is not under {forum.base_url}")
            try:
                fetched = self.fetch(forum, topic.url + ".md", caller=caller)
                page = parse_topic(fetched.text, base_url=forum.base_url, source_url=fetched.url)
            except (UpstreamNotFound, NotATopicError):
                # Remembered for a while, so a deleted topic is not asked for on every rebuild.
                self.store.set(key, TopicEntry(None, time.time(), 0), max(self.settings.cache_ttl, 60))
                raise
            return TopicEntry(enrich(topic, page, forum.base_url), time.time(), len(fetched.text))

        # A topic entry is keyed by its last activity, so it never goes stale: fresh until its TTL ends.
        got = self.policy.get(key, fetch, fresh_for=float("inf"), keep_for=self.settings.topic_ttl,
                              caller=caller, stale=False, what=f"topic {topic.id}")
        return _with_page(topic, got.entry)

    def listings(self, spec: FeedSpec, stale_pages: bool = False, caller: Caller | None = None) -> list[Listing]:
        """Page 0, then further pages in waves of `fetch_concurrency` while the list announces more.

        A wave may ask for a few pages past the end (at most `fetch_concurrency - 1`): the price of not
        reading a long list one page at a time. A missing or empty page ends the list. A page not read
        within the request's deadline fails the build (a shorter feed must not pass for the whole one).
        """
        listings = [self.page(spec.forum, spec.page_url(0), stale_pages, caller)]
        wave = self.settings.fetch_concurrency
        next_page = 1
        while next_page < spec.pages and listings[-1].next_page_url is not None:
            numbers = range(next_page, min(next_page + wave, spec.pages))
            futures = [self.pool.submit(self.page, spec.forum, spec.page_url(n), stale_pages, caller)
                       for n in numbers]
            for future in futures:
                try:
                    listing = _result(future, caller)
                except UpstreamNotFound:
                    return listings
                except FutureTimeout:
                    raise UpstreamTimeout(f"the {self.settings.request_deadline:g}s deadline passed while reading "
                                          f"{spec.pages} pages of {spec.page_url(0)}") from None
                if not listing.topics:
                    return listings
                listings.append(listing)
                if listing.next_page_url is None:
                    return listings
            next_page = numbers.stop
        return listings

    def page(self, forum: Forum, url: str, stale_only: bool = False, caller: Caller | None = None) -> Listing:
        """One parsed list page: from cache while fresh, else fetched; with `stale_only`, any cached copy
        or nothing (the forum just failed: asking it again would only double the load)."""
        key = "page:" + hashlib.sha256(url.encode()).hexdigest()[:32]
        if stale_only:
            cached: PageEntry | None = self.store.get(key)
            if cached is None:
                raise UpstreamError(f"no copy of {url} to fall back on")
            return cached.listing
        ttl = max(self.settings.stale_ttl, self.settings.cache_ttl)
        got = self.policy.get(key, lambda held: self._fetch_page(forum, url, held, caller),
                              fresh_for=self.settings.cache_ttl, keep_for=ttl, caller=caller, stale=False,
                              what=url)
        return got.entry.listing

    def fresh(self, key: str) -> Any:
        """The stored entry if it is within the cache TTL, else None."""
        return self.policy.fresh(key, self.settings.cache_ttl)

    def fetch(self, forum: Forum, url: str, etag: str | None = None, last_modified: str | None = None,
              caller: Caller | None = None) -> Fetched:
        """Every upstream request goes through here: nothing is sent to a forum that asked us to wait, and a
        web request's fetches are charged to the forum's budget."""
        limited_key = "ratelimit:" + forum.key
        until = self.store.get(limited_key)
        if until is not None and until > time.time():
            wait = until - time.time()
            raise UpstreamRateLimited(f"{forum.key} asked us to wait; retry in {wait:.0f}s", retry_after=wait)
        if caller is not None:
            self.policy.take_slot(caller)
            self.budget.spend(forum, caller)
        try:
            return self.fetcher.get(forum, url, etag, last_modified)
        except UpstreamRateLimited as exc:
            wait = 60.0 if exc.retry_after is None else exc.retry_after
            self.store.set(limited_key, time.time() + wait, wait)
            raise

    def _fetch_page(self, forum: Forum, url: str, cached: PageEntry | None, caller: Caller | None) -> PageEntry:
        fetched = self.fetch(forum, url, cached.etag if cached else None, cached.last_modified if cached else None,
                             caller=caller)
        now = time.time()
        if fetched.status == 304 and cached is not None:
            return PageEntry(cached.listing, cached.etag, cached.last_modified, now, cached.size)
        try:
            listing = parse_listing(fetched.text, base_url=forum.base_url, source_url=fetched.url)
        except NotAListError as exc:
            raise UpstreamError(f"upstream sent something that is not a topic list for {url}: {exc}") from None
        if listing.skipped:
            log.warning("%s: skipped %d malformed topic block(s)", url, listing.skipped)
        return PageEntry(listing, fetched.etag, fetched.last_modified, now, len(fetched.text))

    def _render(self, spec: FeedSpec, self_url: str | None, stylesheet_url: str | None, caller: Caller | None,
                stale_pages: bool = False) -> FeedEntry:
        first, topics = self.topics(spec, stale_pages, caller)
        meta = FeedMeta(
            title=spec.title,
            forum_url=spec.forum.base_url,
            html_url=spec.html_url,
            feed_id=self_url or spec.page_url(0),
            self_url=self_url,
            description=f"{spec.title}, from {first.title or spec.label} on {spec.forum.key}",
            stylesheet_url=stylesheet_url,
        )
        body = render(spec.fmt, meta, topics)
        dates = [t.last_posted_at for t in topics if t.last_posted_at is not None]
        return FeedEntry(
            body=body,
            etag=hashlib.sha256(body).hexdigest()[:32],
            last_modified=max(dates).timestamp() if dates else None,
            stored_at=time.time(),
        )


def _result(future: Future[Any], caller: Caller | None) -> Any:
    """A pool future's result, within the request's deadline (FutureTimeout past it); unbounded without one."""
    return future.result(timeout=None if caller is None else max(caller.left(), 0.0))


def _with_page(topic: Topic, entry: TopicEntry) -> Topic:
    full = entry.topic
    if full is None:
        return topic
    return replace(topic, created_at=full.created_at, content_html=full.content_html,
                   category=full.category, tags=full.tags)
