"""Reading a forum's topic lists, page by page: the part of a feed that costs the forum the most requests.

Kept apart from assembling a feed (`feedbridge.feeds.service`) because it is the same work for every
consumer of a list (feeds, views, previews, the source probes, the CLI): which URLs make up a list, how far
to page, and when a missing page ends it. What the forum answered reaches the reader in the words every
route uses (`errors.explained`: missing or private, members only, a bot wall, slow down). Every page goes through the
page cache (`CachePolicy`) and every request through the `Gate`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace

from feedbridge.config import Forum, Settings
from feedbridge.errors import (
    NotAListError,
    RequestError,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRefused,
    UpstreamTimeout,
    explained,
)
from feedbridge.feeds.callers import Caller, CallerPool, result
from feedbridge.feeds.detect import SourceDetector
from feedbridge.feeds.gate import Gate
from feedbridge.feeds.policy import CachePolicy
from feedbridge.feeds.sources import JSON, MARKDOWN, Source
from feedbridge.feeds.spec import FeedSpec
from feedbridge.models import Listing
from feedbridge.store import keys
from feedbridge.store.control import ControlStore
from feedbridge.store.entries import PageEntry, listing_bytes
from feedbridge.store.protocols import Flight

log = logging.getLogger(__name__)


class ListReader:
    """The lists of one scope (public, or the signed-in twin's): its gate, page cache and pool."""

    def __init__(self, settings: Settings, gate: Gate, policy: CachePolicy, pool: CallerPool,
                 control: ControlStore, flight: Flight):
        """The source detector is built here because its probes are list pages read through this reader's
        cache: a `/latest` feed built just after a probe reads the probe's page from there."""
        self.settings = settings
        self.gate = gate
        self.policy = policy
        self.pool = pool
        self.detector = SourceDetector(settings, control, flight,
                                       lambda forum, url, source, caller: self.page(forum, url, False, caller, source))

    def listings(self, spec: FeedSpec, stale_pages: bool = False, caller: Caller | None = None) -> list[Listing]:
        """Page 0, then further pages in waves of `fetch_concurrency` while the list announces more.

        A wave may ask for a few pages past the end (at most `fetch_concurrency - 1`): the price of not
        reading a long list one page at a time. A missing or empty page ends the list. A page not read
        within the request's deadline fails the build (a shorter feed must not pass for the whole one).

        The list is read through the forum's source (`feedbridge.feeds.detect`). A user feed reads the user's
        own topic list (`/topics/created-by/USER.json`, on every forum) and the latest list, filtered by
        author, only when the forum refuses that.
        """
        try:
            return self._read(spec, stale_pages, caller)
        except UpstreamError as exc:
            raise explained(exc, spec.forum.key, spec.label, keyed=self.settings.credential_for(spec.forum) is not None,
                            signed=self.gate.signed, missing=spec.missing) from None

    def _read(self, spec: FeedSpec, stale_pages: bool, caller: Caller | None) -> list[Listing]:
        """`listings` before the forum's answer is put in the reader's words. A bot wall on a user's own list
        is not a refusal of that list: the latest list is behind the same wall, and is not asked. A `/filter`
        feed reads `/filter.json` on every forum (core's filtered list has no Markdown twin), so it needs no
        source, and what only a signed-in reader's `/filter` reads is refused to a public read before any
        request: to the forum's anonymous reader it is no topics at all."""
        if spec.forum_query is not None:
            if spec.forum_query.signed_in_only and not self.gate.signed:
                raise RequestError(self._signed_in_only(spec, spec.forum_query.signed_in_only))
            return self._pages(spec, lambda n: spec.page_url(n, JSON), JSON, stale_pages, caller)
        source = self.detector.source(spec.forum, caller, ask=not stale_pages)
        if spec.user is not None:
            refusals = UpstreamError if stale_pages else (UpstreamNotFound, UpstreamRefused)
            try:
                own = self._pages(spec, lambda n: spec.user_list_url(n) or "", JSON, stale_pages, caller)
                return [replace(listing, started_by=spec.user) for listing in own]
            except refusals as exc:
                log.info("%s on %s: %s; reading the latest list instead", spec.label, spec.forum.key, exc.message)
        if spec.intersection:  # /tag/a+b: Discourse's own list where it has one, else the first tag's, filtered
            missing = UpstreamError if stale_pages else (UpstreamNotFound, UpstreamRefused)
            try:
                return self._pages(spec, spec.intersection_url, JSON, stale_pages, caller)
            except missing as exc:
                log.info("%s on %s: %s; filtering the first tag's list", spec.label, spec.forum.key, exc.message)
        try:
            return self._pages(spec, lambda n: spec.page_url(n, source), source, stale_pages, caller)
        except (UpstreamNotFound, UpstreamRefused) as exc:
            raise self.detector.refused(spec, source, exc) from None

    def _signed_in_only(self, spec: FeedSpec, terms: tuple[str, ...]) -> str:
        """The 400's message for a public `/filter` feed of terms only a signed-in reader can use."""
        how = ("a signed feed URL reads them as the bridge's key's user (`feedbridge sign`)"
               if self.settings.credential_for(spec.forum) is not None
               else f"this bridge has no key for {spec.forum.key}")
        return (f"q: {' '.join(terms)} only means something to a signed-in user of the forum (core's /filter reads "
                f"it for the signed-in user alone, and gives anyone else no topics): {how}")

    def _pages(self, spec: FeedSpec, url: Callable[[int], str], source: Source, stale_pages: bool,
               caller: Caller | None) -> list[Listing]:
        listings = [self.page(spec.forum, url(0), stale_pages, caller, source)]
        wave = self.settings.fetch_concurrency
        next_page = 1
        while next_page < spec.pages and listings[-1].next_page_url is not None:
            numbers = range(next_page, min(next_page + wave, spec.pages))
            futures = [self.pool.submit(self.page, spec.forum, url(n), stale_pages, caller, source)
                       for n in numbers]
            for future in futures:
                try:
                    listing = result(future, caller)
                except UpstreamNotFound:
                    return listings
                except FutureTimeout:
                    raise UpstreamTimeout(f"the {self.settings.request_deadline:g}s deadline passed while reading "
                                          f"{spec.pages} pages of {url(0)}") from None
                if not listing.topics:
                    return listings
                listings.append(listing)
                if listing.next_page_url is None:
                    return listings
            next_page = numbers.stop
        return listings

    def page(self, forum: Forum, url: str, stale_pages: bool = False, caller: Caller | None = None,
             source: Source = MARKDOWN) -> Listing:
        """One parsed list page: from cache while fresh, else fetched; with `stale_pages`, any cached copy
        or nothing (the forum just failed: asking it again would only double the load)."""
        key = keys.page(url)
        if stale_pages:
            held: PageEntry = self.policy.held(key, url)
            return held.listing
        got = self.policy.get(key, lambda held: self._fetch_page(forum, url, held, caller, source),
                              caller=caller, stale=False,
                              what=url)
        return got.entry.listing

    def _fetch_page(self, forum: Forum, url: str, cached: PageEntry | None, caller: Caller | None,
                    source: Source) -> PageEntry:
        fetched = self.gate.fetch(forum, url, cached.etag if cached else None,
                                  cached.last_modified if cached else None, caller=caller)
        now = time.time()
        if fetched.status == 304 and cached is not None:
            return PageEntry(cached.listing, cached.etag, cached.last_modified, now, cached.size)
        try:
            listing = source.read_listing(fetched.text, base_url=forum.base_url, source_url=fetched.url)
        except NotAListError as exc:
            raise UpstreamRefused(f"upstream sent something that is not a topic list for {url}: {exc}") from None
        return PageEntry(listing, fetched.etag, fetched.last_modified, now, listing_bytes(listing))
