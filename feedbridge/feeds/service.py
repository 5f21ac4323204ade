"""Assembling a feed from a spec: its list pages (`feeds/lists.py`), the topics' own pages, the categories'
names, then filter → render. What is read from a forum is read through one `Gate` (`feeds/gate.py`).

Failure policy, in one place (`feedbridge.feeds.policy.CachePolicy`, used for feeds, pages, topic pages
and the categories directory alike): a fresh cached feed is served as is; otherwise the feed is rebuilt,
and if the forum fails while rebuilding, the last good copy (up to the stale TTL) is served and marked
stale; only with nothing cached does the error reach the reader. Failures are remembered briefly, upstream
requests are budgeted per forum, and one deadline bounds each request (`feeds/policy.py`, `feeds/callers.py`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

from feedbridge.config import Forum, Settings
from feedbridge.errors import (
    NotATopicError,
    UpstreamError,
    UpstreamNotFound,
    UpstreamTimeout,
    upstream_error,
)
from feedbridge.feeds.assemble import feed_body, listed
from feedbridge.feeds.callers import Caller, CallerPool, ForumBudget, result
from feedbridge.feeds.digest import digested
from feedbridge.feeds.figures import completed, excluding
from feedbridge.feeds.gate import Gate
from feedbridge.feeds.lists import ListReader
from feedbridge.feeds.policy import CachePolicy
from feedbridge.feeds.posts import PostFeeds
from feedbridge.feeds.sources import JSON, MARKDOWN, Source
from feedbridge.feeds.spec import POST_KINDS, FeedSpec
from feedbridge.feeds.waits import ForumWaits
from feedbridge.models import Category, Listing, Topic
from feedbridge.store import keys
from feedbridge.store.control import ControlStore, MemoryControl, Windows
from feedbridge.store.entries import DirectoryEntry, FeedEntry, TopicEntry, topic_bytes
from feedbridge.store.memory import SingleFlight
from feedbridge.store.protocols import Flight, Store
from feedbridge.store.scoped import ScopedFlight, ScopedStore
from feedbridge.upstream.fetcher import Fetched, Fetcher, is_within

log = logging.getLogger(__name__)

PRIVATE = "private"
"""The scope of everything read with a forum's key (`feedbridge.store.scoped`)."""

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


@dataclass(frozen=True, slots=True)
class View:
    """What a page shows of a feed: the first list page (its title, for post feeds the forum's name of the
    topic or user), the topics, and why they came from the last good pages, when they did."""

    first: Listing
    topics: list[Topic]
    stale: str | None = None


class FeedService:
    """Assembles feeds, views and previews; `signed_in` is its twin for signed feed URLs (`feeds/signing.py`)."""

    def __init__(self, settings: Settings, store: Store, fetcher: Fetcher, flight: Flight | None = None, *,
                 control: ControlStore | None = None, windows: Windows | None = None,
                 public: FeedService | None = None):
        """`store` holds cached copies; `control` what steers requests to forums (their Retry-After, remembered
        failures, source decisions), beyond the reach of cache floods; `windows` the budgets' counters.

        With FEEDBRIDGE_CREDENTIALS set, `signed_in` is a second service over the same backends, each wrapped
        in the private scope (`feedbridge.store.scoped`): its pages, feeds, failures, waits and source
        decisions are its own, its fetches send the forum's key, and its budget is the key's (under
        Discourse's limits for one key), so a 429 on it never stops public reading. It shares the pool and
        the cold slots (`public`): both kinds of request wait on the same forums in the same process."""
        self.settings = settings
        self.store = store
        self.control: ControlStore = control or MemoryControl()
        self.fetcher = fetcher
        self.flight = flight or SingleFlight()
        self.policy: CachePolicy = CachePolicy(settings, store, self.flight, self.control,
                                               slots=public.policy.slots if public else None)
        windows = windows or Windows()
        self.budget: ForumBudget = ForumBudget(
            windows, settings.forum_budget, per_burst=settings.forum_budget_10s, processes=settings.workers,
        ) if public is None else ForumBudget(
            windows, settings.private_budget, scope=PRIVATE, share=1, per_day=settings.private_daily_budget,
            processes=settings.workers, forum=public.budget)
        self.waits = ForumWaits(self.control, self.settings.retry_after_max)
        self.topic_failures = 0
        self.pool: CallerPool = public.pool if public else CallerPool(max_workers=settings.fetch_concurrency * 4,
                                                                      thread_name_prefix="fetch")
        self.public = public is None
        self.signed_in: FeedService | None = None if public is not None or not settings.credentials else FeedService(
            settings, ScopedStore(store, PRIVATE), fetcher,
            ScopedFlight(self.flight, PRIVATE), control=ScopedStore(self.control, PRIVATE), windows=windows,
            public=self)
        self.gate = Gate(fetcher, self.waits, self.policy, self.budget, signed=not self.public)
        self.lists = ListReader(settings, self.gate, self.policy, self.pool, self.control, self.flight)
        self.posts = PostFeeds(settings, self.gate, self.policy, store, self.pool)

    def scope(self, signed: bool) -> FeedService:
        """This service, or its signed-in twin for a request whose token verified."""
        if not signed:
            return self
        if self.signed_in is None:
            raise UpstreamError("this bridge has no credentials")  # the token check refuses this first
        return self.signed_in

    def close(self) -> None:
        """The pool's threads and the forum connections, for a process that is done (the static build)."""
        if self.public:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.fetcher.close()

    def caller(self, client: str) -> Caller:
        """A web request's budget share, deadline and slot; `client` is its remote address."""
        return self.policy.caller(client)

    @staticmethod
    def feed_key(spec: FeedSpec, self_url: str | None, stylesheet_url: str | None = None) -> str:
        """Everything the body depends on: the spec and the links built from the request (its own URL, the
        stylesheet's), so a copy built for one Host or script root is never served to another. Bounded:
        the web layer accepts only host names as Host, and gunicorn bounds the request line."""
        return keys.feed(spec.cache_key(), self_url, stylesheet_url)

    def feed(self, spec: FeedSpec, self_url: str | None, stylesheet_url: str | None = None,
             key: str | None = None, caller: Caller | None = None) -> FeedResult:
        """`key` is `feed_key(...)` when the caller already has it (the web layer memoizes it per URL)."""
        key = key or self.feed_key(spec, self_url, stylesheet_url)
        try:
            got = self.policy.get(key, lambda _held: self._render(spec, self_url, stylesheet_url, caller),
                                  caller=caller, what="the feed")
        except UpstreamError as exc:
            try:  # no copy of this feed, but maybe of its pages (a new filter on a known list)
                entry = self._render(spec, self_url, stylesheet_url, None, stale_pages=True)
            except UpstreamError:
                raise exc from None
            log.warning("serving a feed built from stale pages: %s", exc.message)
            return FeedResult(entry, "stale", exc.message)
        return FeedResult(got.entry, got.cache, got.stale_reason)

    def view(self, spec: FeedSpec, caller: Caller | None = None) -> View:
        """The topics of a feed for a page (`.html`, preview): like `feed`, the last good pages when the forum
        fails (`View.stale` then says why, and a page made of them is not kept), and the error only when
        there are none."""
        try:
            return View(*self.topics(spec, caller=caller))
        except UpstreamError as exc:
            try:
                return View(*self.topics(spec, stale_pages=True), stale=exc.message)
            except UpstreamError:
                raise exc from None

    def topics(self, spec: FeedSpec, stale_pages: bool = False,
               caller: Caller | None = None) -> tuple[Listing, list[Topic]]:
        """The filtered topics of a spec: the same path the feeds use, also for previews.

        With full content, the newest candidates (up to the topic budget) are enriched from their own
        pages before the keyword and tag filters run, so those filters see the whole first post.
        A post feed's posts come from `feedbridge.feeds.posts`.
        """
        if spec.kind in POST_KINDS:
            return self.posts.topics(spec, stale_pages, caller)
        listings = self.lists.listings(spec, stale_pages, caller)
        spec, listings = self._completed(spec, listings, stale_pages, caller)
        everything = listed(spec, listings)
        # JSON lists carry every topic's tags: tag= then costs no topic page.
        tags_listed = all(listing.dialect == JSON.name for listing in listings)
        if spec.content != "full" and (tags_listed or not spec.filter.tags):
            return listings[0], digested(spec, listings,
                                         self._named(spec.forum, spec.filter.apply(everything), stale_pages, caller))
        keep_tags = spec.filter.tags if tags_listed else frozenset()
        candidates = replace(spec.filter, query=None, tags=keep_tags, limit=None).apply(everything)
        budget = self.settings.topic_budget
        enriched = self._enrich(spec.forum, candidates[:budget], caller, stale_pages) + candidates[budget:]
        return listings[0], digested(spec, listings,
                                     self._named(spec.forum, spec.filter.apply(enriched), stale_pages, caller))

    def _completed(self, spec: FeedSpec, listings: list[Listing], stale_pages: bool,
                   caller: Caller | None) -> tuple[FeedSpec, list[Listing]]:
        """What `feedbridge.feeds.figures` adds to the lists: the JSON list's figures for a Markdown page, the
        subcategories of excluded categories (from the directory and its deeper levels; only cached copies
        when the forum fails)."""
        listings = completed(spec.filter, listings,
                             lambda n: self.lists.page(spec.forum, spec.page_url(n, JSON), stale_pages, caller, JSON))
        if not spec.filter.exclude_categories:
            return spec, listings
        directory = self.categories(spec.forum, caller, stale_pages=stale_pages)
        return replace(spec, filter=excluding(
            spec.filter, directory,
            lambda parent: self.categories(spec.forum, caller, parent, stale_pages=stale_pages))), listings

    def _named(self, forum: Forum, topics: list[Topic], stale_pages: bool,
               caller: Caller | None) -> list[Topic]:
        """JSON lists name a topic's category by id only; its name comes from the forum's directory.

        Any cached copy of the directory will do (names rarely change), so this costs at most one request
        per forum per stale TTL, none when the forum is failing; without the directory, no names.
        """
        if not any(t.category is None and t.category_id is not None for t in topics):
            return topics
        cached: DirectoryEntry | None = self.store.get(keys.categories(forum.base_url))
        directory = cached.categories if cached is not None else ()
        if cached is None and not stale_pages:
            try:
                directory = self.categories(forum, caller)
            except UpstreamError as exc:
                log.info("no category names for %s: %s", forum.key, exc.message)
        names = {category.id: category.name for category in directory}
        return [replace(t, category=names[t.category_id]) if t.category is None and t.category_id in names else t
                for t in topics]

    def _enrich(self, forum: Forum, topics: list[Topic], caller: Caller | None, stale_pages: bool) -> list[Topic]:
        """Each topic with its first post, creation date, category and tags; the excerpt when that fails.

        Within the request's deadline: when it passes, the topics not read by then keep their excerpt, the
        fetches under way finish in the background (and are cached, or remembered as failed), those not
        started never start (cancelled here, or refused by `_topic_page` when a busy pool starts them late),
        and the forum's topic pages count as slow for the negative TTL, so the next rebuild uses what is
        cached without asking again. With `stale_pages` (the forum just failed) it asks nothing either.
        """
        slow_key = keys.topic_slow(forum.base_url)
        cached_only = stale_pages or self.control.get(slow_key) is not None
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
                if cached_only:  # past the deadline: what finished is cached, what has not started never will
                    future.cancel()
                    results.append(self._cached_topic(forum, topic))
                    continue
                try:
                    results.append(result(future, caller))
                except FutureTimeout:
                    log.warning("content=full: the %gs deadline passed; %d topics keep their excerpt",
                                self.settings.request_deadline, len(topics) - len(results))
                    if self.settings.negative_ttl > 0:
                        self.control.set(slow_key, time.time(), self.settings.negative_ttl)
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

    def categories(self, forum: Forum, caller: Caller | None = None, parent: int | None = None,
                   stale_pages: bool = False) -> tuple[Category, ...]:
        """The forum's directory (`/categories.md` or `.json`), cached like list pages: showing the front page
        costs the forum one request per cache TTL. Raises UpstreamError only with nothing cached.

        With `parent`, the subcategories of that category (`/categories.json?parent_category_id=ID`: JSON on
        every forum, since the Markdown directory has no such view). With `stale_pages` (the forum just
        failed), the cached copy or UpstreamError, and no request."""
        key = keys.categories(forum.base_url, parent)
        if stale_pages:
            held: DirectoryEntry = self.policy.held(key, f"the categories of {forum.key}")
            return held.categories

        def fetch(_held: DirectoryEntry | None) -> DirectoryEntry:
            if parent is not None:
                url = f"{JSON.categories_url(forum.base_url)}?parent_category_id={parent}"  # an int: no quoting
                fetched = self.gate.fetch(forum, url, caller=caller)
                return DirectoryEntry(JSON.read_categories(fetched.text), time.time())
            source = self.lists.detector.source(forum, caller)
            fetched = self.gate.fetch(forum, source.categories_url(forum.base_url), caller=caller)
            return DirectoryEntry(source.read_categories(fetched.text), time.time())

        try:
            got = self.policy.get(key, fetch, caller=caller, what="the categories")
        except UpstreamError as exc:
            raise upstream_error(exc.reason, f"could not read the categories of {forum.key}: {exc.message}",
                                 exc.retry_after, exc.upstream_status) from None
        return got.entry.categories

    def _cached_topic(self, forum: Forum, topic: Topic) -> Topic:
        entry: TopicEntry | None = self.store.get(keys.topic(forum.base_url, topic.id, topic.last_posted_at))
        return topic if entry is None else _with_page(topic, entry)

    def _topic_page(self, forum: Forum, topic: Topic, caller: Caller | None = None) -> Topic:
        """The topic enriched from its page; UpstreamTimeout, before any work, when the pool starts it after
        the request's deadline (nobody waits for it then; nothing is stored, so no failure is remembered)."""
        if caller is not None and caller.left() <= 0:
            raise UpstreamTimeout(f"the request's deadline passed before topic {topic.id} was read")
        key = keys.topic(forum.base_url, topic.id, topic.last_posted_at)

        def fetch(_held: TopicEntry | None) -> TopicEntry:
            if not is_within(forum, topic.url):
                raise UpstreamError(f"topic URL {topic.url} is not under {forum.base_url}")
            source = self.lists.detector.source(forum, caller)
            try:
                fetched = self.gate.fetch(forum, source.topic_url(topic.url), caller=caller)
                full = source.read_topic(topic, fetched.text, forum.base_url, fetched.url)
            except (UpstreamNotFound, NotATopicError):
                self.policy.remember_missing(key, TopicEntry(None, time.time(), topic_bytes(None)))
                raise
            return TopicEntry(full, time.time(), topic_bytes(full))

        # A topic entry is keyed by its last activity, so it never goes stale: fresh until its TTL ends.
        got = self.policy.get(key, fetch, fresh_for=float("inf"), keep_for=self.policy.keep_read_for,
                              caller=caller, stale=False, what=f"topic {topic.id}")
        return _with_page(topic, got.entry)

    def fresh(self, key: str) -> Any:
        """The stored entry if it is within the cache TTL, else None."""
        return self.policy.fresh(key)

    def fetch(self, forum: Forum, url: str, etag: str | None = None, last_modified: str | None = None,
              caller: Caller | None = None) -> Fetched:
        """This scope's `Gate.fetch`, for a caller that reads one URL outside any feed."""
        return self.gate.fetch(forum, url, etag, last_modified, caller)

    def page(self, forum: Forum, url: str, stale_pages: bool = False, caller: Caller | None = None,
             source: Source = MARKDOWN) -> Listing:
        """This scope's `ListReader.page`, for a caller that reads one list page outside any feed."""
        return self.lists.page(forum, url, stale_pages, caller, source)

    def _render(self, spec: FeedSpec, self_url: str | None, stylesheet_url: str | None, caller: Caller | None,
                stale_pages: bool = False) -> FeedEntry:
        first, topics = self.topics(spec, stale_pages, caller)
        built = time.time()
        body = feed_body(spec, first, topics, self_url, stylesheet_url, datetime.fromtimestamp(int(built), UTC))
        dates = [t.last_posted_at for t in topics if t.last_posted_at is not None]
        return FeedEntry(
            body=body,
            etag=hashlib.sha256(body).hexdigest()[:32],
            last_modified=max(dates).timestamp() if dates else None,
            stored_at=built,
        )


def _with_page(topic: Topic, entry: TopicEntry) -> Topic:
    full = entry.topic
    if full is None:
        return topic
    return replace(topic, created_at=full.created_at, content_html=full.content_html,
                   category=full.category or topic.category, tags=full.tags,
                   category_id=topic.category_id if full.category_id is None else full.category_id)
