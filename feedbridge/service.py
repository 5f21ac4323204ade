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
from dataclasses import dataclass
from typing import Any
from email.utils import formatdate

from .cache import FeedEntry, Flight, PageEntry, SingleFlight, Store
from .config import Forum, Settings
from .fetch import Fetcher, UpstreamError, UpstreamNotFound, UpstreamRateLimited, UpstreamTimeout
from .models import Listing, Topic
from .parser import NotAListError, parse_listing
from .render import FeedMeta, render
from .spec import FeedSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FeedResult:
    entry: FeedEntry
    cache: str  # "hit", "miss" or "stale"
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
        self.pool = ThreadPoolExecutor(max_workers=settings.fetch_concurrency * 4, thread_name_prefix="fetch")

    def feed(self, spec: FeedSpec, self_url: str | None, stylesheet_url: str | None = None) -> FeedResult:
        key = spec.cache_key() + (f"|{self_url}|{stylesheet_url}" if self_url or stylesheet_url else "")
        key = "feed:" + hashlib.sha256(key.encode()).hexdigest()[:32]
        cached: FeedEntry | None = self.store.get(key)
        if cached is not None and time.time() - cached.stored_at < self.settings.cache_ttl:
            return FeedResult(cached, "hit")
        try:
            entry = self.flight.do(key, lambda: self._build(key, spec, self_url, stylesheet_url),
                                   self.settings.singleflight_wait, lambda: self._fresh(key))
        except (UpstreamError, TimeoutError) as exc:
            if cached is not None:
                reason = exc.message if isinstance(exc, UpstreamError) else str(exc)
                log.warning("serving stale feed (%.0fs old): %s", time.time() - cached.stored_at, reason)
                return FeedResult(cached, "stale", reason)
            if isinstance(exc, TimeoutError):
                raise UpstreamTimeout(str(exc)) from None
            raise
        return FeedResult(entry, "miss")

    def topics(self, spec: FeedSpec) -> tuple[Listing, list[Topic]]:
        """The filtered topics of a spec: the same path the feeds use, also for previews."""
        listings = self.listings(spec)
        topics = spec.filter.apply(t for listing in listings for t in listing.topics)
        return listings[0], topics

    def listings(self, spec: FeedSpec) -> list[Listing]:
        """Page 0, then further pages in waves of `fetch_concurrency` while the list announces more.

        A wave may ask for a few pages past the end (at most `fetch_concurrency - 1`): the price of not
        reading a long list one page at a time. A missing or empty page ends the list.
        """
        listings = [self.page(spec.forum, spec.page_url(0))]
        wave = self.settings.fetch_concurrency
        next_page = 1
        while next_page < spec.pages and listings[-1].next_page_url is not None:
            numbers = range(next_page, min(next_page + wave, spec.pages))
            futures = [self.pool.submit(self.page, spec.forum, spec.page_url(n)) for n in numbers]
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

    def page(self, forum: Forum, url: str) -> Listing:
        key = "page:" + hashlib.sha256(url.encode()).hexdigest()[:32]
        cached: PageEntry | None = self.store.get(key)
        if cached is not None and time.time() - cached.stored_at < self.settings.cache_ttl:
            return cached.listing
        entry: PageEntry = self.flight.do(
            key, lambda: self._fetch_page(key, forum, url, cached), self.settings.singleflight_wait,
            lambda: self._fresh(key),
        )
        return entry.listing

    def _fresh(self, key: str) -> Any:
        """The stored entry if it is within the cache TTL, else None."""
        entry = self.store.get(key)
        if entry is not None and time.time() - entry.stored_at < self.settings.cache_ttl:
            return entry
        return None

    def _fetch_page(self, key: str, forum: Forum, url: str, cached: PageEntry | None) -> PageEntry:
        limited_key = "ratelimit:" + forum.key
        until = self.store.get(limited_key)
        if until is not None and until > time.time():
            wait = until - time.time()
            if cached is not None:
                return cached
            raise UpstreamRateLimited(f"{forum.key} asked us to wait; retry in {wait:.0f}s", retry_after=wait)
        try:
            fetched = self.fetcher.get(
                forum, url, cached.etag if cached else None, cached.last_modified if cached else None
            )
        except UpstreamRateLimited as exc:
            wait = exc.retry_after or 60.0
            self.store.set(limited_key, time.time() + wait, wait)
            raise
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
        first, topics = self.topics(spec)
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
        entry = FeedEntry(
            body=body,
            etag=hashlib.sha256(body).hexdigest()[:32],
            last_modified=max(dates).timestamp() if dates else None,
            stored_at=time.time(),
        )
        self.store.set(key, entry, max(self.settings.stale_ttl, self.settings.cache_ttl))
        return entry


def http_date(timestamp: float) -> str:
    return formatdate(timestamp, usegmt=True)
