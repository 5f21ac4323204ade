"""How a request reads a forum: in which scope, and whether live or from cached copies only, as one value.

A scope is what makes a read public, private (the forum's key) or a member's: its cache policy over its own
wrapped store, control store and single-flight (`feedbridge.store.scoped`), its gate with its budget and
credential, its source decisions. None of that changes how a list page, a topic page or a directory is read,
so the readers (`ListReader`, `TopicPages`, `Directory`, `PostFeeds`, `Identities`) are made once per
service and hold none of it: each read is given a `Read`, which names the `Scope` it reads in. A scope is
then a value the service picks per request (`FeedService.scope`), not an object graph made once per scope
and joined after the fact.

A feed is built live. When the forum fails and no copy of the feed itself is held, the service builds it
once more from what the cache holds of its parts (a new filter on a known list), and that second build
asks the forum nothing: it has just failed, and asking again would only double the load. That second way
of reading is a mode of the same `Read` (`cached_only`), not a second set of readers: the readers never
test the mode, they call the read, which answers each way:

    entry(key, build)   live: fresh copy, else `build` once (`CachePolicy.get`), the error if it fails
                        cached: the held copy, however old, else NotHeld
    fetch(url)          live: through the `Gate`                      cached: NotHeld
    source(forum)       live: the decided source, probing when due    cached: the record as it is
    moves_on            what lets a read try its second list (a user's own list → the latest list):
                        live: the forum's refusal of the first        cached: no copy of the first

`list_page` is here, below the source detector (`feeds/sources/detect.py`), because both the lists' reader and the
detector's probes read a list page, and the probes must read it through the same page cache and gate as a
feed does (a `/latest` feed built just after a probe reads the probe's page from there): with it here, the
detector calls it with the read it was given instead of reaching back up to the readers through a callback.
This module names the detector only for the type checker, so at run time it sits below `detect.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

from feedbridge.config import Forum
from feedbridge.errors import (
    FeedbridgeError,
    NotAListError,
    NotHeld,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRefused,
)
from feedbridge.feeds.admission.callers import Caller
from feedbridge.feeds.admission.gate import Gate
from feedbridge.feeds.admission.policy import OUTSIDE, Building, CachePolicy
from feedbridge.feeds.sources.dialects import MARKDOWN, Source
from feedbridge.models import Listing
from feedbridge.store import keys
from feedbridge.store.control import ControlStore
from feedbridge.store.entries import PageEntry, listing_bytes
from feedbridge.store.protocols import Store
from feedbridge.upstream.fetcher import Fetched

if TYPE_CHECKING:
    from feedbridge.feeds.sources.detect import SourceDetector

E = TypeVar("E")

PUBLIC = "public"
"""The scope of everything read without a key."""

_LIVE_MOVES_ON: tuple[type[FeedbridgeError], ...] = (UpstreamNotFound, UpstreamRefused)
_CACHED_MOVES_ON: tuple[type[FeedbridgeError], ...] = (UpstreamError, NotHeld)


@dataclass(frozen=True, slots=True)
class Scope:
    """One scope's parts, made by `feeds.service` (once, or for each member's request): `store` and `control`
    are the scope's wrapped ones (its policy's, gate's and detector's too), and `signed` says its fetches carry
    a key (the forum's, or the member's: `gate` holds which)."""

    name: str
    policy: CachePolicy
    gate: Gate
    detector: SourceDetector
    store: Store
    control: ControlStore
    signed: bool


@dataclass(frozen=True, slots=True)
class Read:
    """One request's way of reading (see the module docstring): in `scope`, for `caller` (the web request whose
    deadline, slot and budget share bound its reads: None outside one), as part of `building` (the builds under
    way that a refusal of its reads marks), live or `cached_only`. Made once where the read path begins
    (`FeedService`), and handed down (each build is handed its own: `entry`), so no layer below looks the
    request up itself, and no state of it is ambient.
    A read from cached copies notes when each copy it read was stored (`stored`), and a live read each list
    page's, so that what is built of them says how old it is (`oldest`)."""

    scope: Scope
    caller: Caller | None
    cached_only: bool = False
    building: Building = OUTSIDE
    pooled: bool = False
    until: float | None = None
    stored: list[float] = field(default_factory=list, compare=False, repr=False)

    @property
    def signed(self) -> bool:
        return self.scope.signed

    @property
    def oldest(self) -> float | None:
        """When the oldest copy this read read was stored (a read from cached copies), if it read any."""
        return min(self.stored, default=None)

    @property
    def moves_on(self) -> tuple[type[FeedbridgeError], ...]:
        return _CACHED_MOVES_ON if self.cached_only else _LIVE_MOVES_ON

    def cached(self) -> Read:
        """The same read from cached copies only: the fallback's, once the forum has failed."""
        return Read(self.scope, self.caller, cached_only=True)

    def optional(self) -> Read:
        """This read, as one its builds can do without (a forum's icon, the pictures of a Markdown list): refused
        by a budget, a share or a slot, it marks none of the builds it is part of and never has them wait for the
        window's room, so a feed goes without its icon for now rather than unkept, or waiting ten seconds for
        it. Builds begun inside (the read's own entry) are marked as usual: a refused read is never kept."""
        return replace(self, building=replace(self.building, optional_from=len(self.building.builds)))

    def hurried(self) -> Read:
        """This read as one its build can do without (`optional`), its fetches given half of what is left of
        its request's deadline (`until`, a `time.monotonic()`), so that the build keeps the rest whatever the
        forum does: a page read again to bring a list in step (`feeds/sources/lists.py`)."""
        optional = self.optional()
        return optional if self.caller is None else replace(optional, until=time.monotonic() + self.caller.left() / 2)

    def stepping(self, ahead: int) -> Read:
        """This read as a job of a wave with `ahead` reads left in its step (`CallerPool.waves`): `pooled`, so its
        fetches outlive the request's deadline to keep what they read (`Gate.fetch`)."""
        return replace(self, building=replace(self.building, ahead=ahead), pooled=True)

    def entry(self, key: str, build: Callable[[E | None, Read], E], what: str, forum: Forum, *,
              fresh_for: float | None = None, keep_for: float | None = None, any_copy: bool = False,
              dates: bool = False) -> E:
        """Live, without the stale copy: a build from stale parts is the service's decision (`FeedService`).
        `build(held, read)` reads with `read`, this read within the build it makes.
        `any_copy`: what any copy held will do for (a forum's basic info), fresh for as long as it is kept.
        `forum`: whose it is, for its part of the cold slots (`ColdSlots`). `dates`: what is built of this
        entry is as old as it (a list page's, live too: `stored`, `oldest`)."""
        if self.cached_only:
            held: E = self.scope.policy.held(key, what)
            if (stored_at := getattr(held, "stored_at", None)) is not None:
                self.stored.append(stored_at)
            return held
        got = self.scope.policy.get(key, lambda held, building: build(held, replace(self, building=building)),
                                    caller=self.caller, building=self.building, stale=False, what=what,
                                    fresh_for=fresh_for, keep_for=keep_for, any_copy=any_copy, forum=forum.key,
                                    until=self.until)
        if dates and (stored_at := getattr(got.entry, "stored_at", None)) is not None:
            self.stored.append(stored_at)
        return got.entry

    def fetch(self, forum: Forum, url: str, what: str, etag: str | None = None,
              last_modified: str | None = None) -> Fetched:
        if self.cached_only:
            raise NotHeld(f"no copy of {what} to fall back on")
        return self.scope.gate.fetch(forum, url, etag, last_modified, caller=self.caller, building=self.building,
                                     pooled=self.pooled, until=self.until)

    def source(self, forum: Forum) -> Source:
        if self.cached_only:
            return self.scope.detector.decided(forum)
        return self.scope.detector.source(self, forum)


def list_page(read: Read, forum: Forum, url: str, source: Source = MARKDOWN) -> Listing:
    """One parsed list page: from cache while fresh, else fetched (read live); any cached copy, or NotHeld
    (read from cached copies)."""
    return list_entry(read, forum, url, source).listing


def list_entry(read: Read, forum: Forum, url: str, source: Source = MARKDOWN, *,
               fresh_for: float | None = None, dates: bool = True) -> PageEntry:
    """`list_page` with when its copy was stored (`PageEntry.stored_at`), fresh within `fresh_for` seconds
    (the cache TTL by default): what a list read of several pages brings into line (`feeds/sources/lists.py`),
    which says itself which copies date the feed (`dates` False: `Read.stored`)."""
    def fetch(held: PageEntry | None, read: Read) -> PageEntry:
        fetched = read.fetch(forum, url, url, held.etag if held else None, held.last_modified if held else None)
        now = time.time()
        if fetched.status == 304 and held is not None:
            return PageEntry(held.listing, held.etag, held.last_modified, now, held.size)
        try:
            listing = source.read_listing(fetched.text, base_url=forum.base_url, source_url=fetched.url)
        except NotAListError as exc:
            raise UpstreamRefused(f"upstream sent something that is not a topic list for {url}: {exc}") from None
        return PageEntry(listing, fetched.etag, fetched.last_modified, now, listing_bytes(listing))

    return read.entry(keys.page(url), fetch, url, forum, dates=dates, fresh_for=fresh_for)
