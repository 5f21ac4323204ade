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
    list_page(url)      live: from the page cache, else fetched       cached: any copy, else NotHeld

`list_page` is the read's own, because both the lists' reader and the source detector's probes read a list
page, and the probes must read it through the same page cache and gate as a feed does (a `/latest` feed built
just after a probe reads the probe's page from there): the detector calls it on the read it was given instead
of reaching back up to the readers through a callback. This module names the detector only for the type
checker, so at run time it sits below it (`feeds/sources/dialects.py`).

The lists themselves are read here too (`ListReader`), page by page: the part of a feed that costs the forum
the most requests. Kept apart from assembling a feed (`feedbridge.feeds.service`) because it is the same work
for every consumer of a list (feeds, views, previews, the source probes, the CLI): which URLs make up a list,
how far to page, and when a missing page ends it. What the forum answered reaches the reader in the words
every route uses (`errors.explained`: missing or private, members only, a bot wall, slow down). Every page
goes through the page cache (`CachePolicy`) and every request through the `Gate`, when read live (`Read`).

What a feed's lists lack is read here too, from the JSON list of the same page (`FIGURES`). A Markdown list
carries replies but no likes, views, tags or category ids: a feed that filters on those reads the forum's
JSON list of the same page (cached and counted against the forum's budget like any page), and says so with
a 400 naming the parameter when the forum refuses it, rather than serving a feed that is silently empty or
unfiltered. (Which subcategories an `exclude_category=` drops is `feeds.select.subcategories`.) Nor does it
carry the topics' pictures: a feed with `content=full`, which reads every topic's page anyway, reads the
JSON list of the same page for them too (one request per list page beside one per topic), and goes without
thumbnails when the forum will not give it; an excerpt feed of a Markdown list has none, rather than cost
the forum a second list for every feed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from feedbridge.config import Forum, Settings
from feedbridge.errors import (
    DeadlinePassed,
    FeedbridgeError,
    NoForumAnswer,
    NotAListError,
    NotHeld,
    RequestError,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRefused,
    explained,
)
from feedbridge.feeds.admission.callers import Caller, CallerPool
from feedbridge.feeds.admission.gate import Gate
from feedbridge.feeds.admission.policy import OUTSIDE, Building, CachePolicy
from feedbridge.feeds.members.personal import own_pages
from feedbridge.feeds.request.spec import FeedSpec
from feedbridge.feeds.sources.dialects import JSON, LACKED, MARKDOWN, Source, is_probed, lacks_of
from feedbridge.models import Listing, merged
from feedbridge.store import keys
from feedbridge.store.control import ControlStore
from feedbridge.store.entries import PageEntry, listing_bytes
from feedbridge.store.protocols import Store
from feedbridge.upstream.fetcher import Fetched

if TYPE_CHECKING:
    from feedbridge.feeds.sources.dialects import SourceDetector

E = TypeVar("E")
log = logging.getLogger(__name__)

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
        forum does: a page read again to bring a list in step (`ListReader`)."""
        optional = self.optional()
        return optional if self.caller is None else replace(optional, until=time.monotonic() + self.caller.left() / 2)

    def stepping(self, ahead: int) -> Read:
        """This read as a job of a wave with `ahead` reads left in its step (`CallerPool.waves`): `pooled`, so its
        fetches outlive the request's deadline to keep what they read (`Gate.fetch`)."""
        return replace(self, building=replace(self.building, ahead=ahead), pooled=True)

    def entry(self, key: str, build: Callable[[E | None, Read], E], what: str, forum: Forum, *,
              fresh_for: float | None = None, keep_for: float | None = None, any_copy: bool = False,
              dates: bool = False, optional: bool = False, ahead: int | None = None) -> E:
        """Live, without the stale copy: a build from stale parts is the service's decision (`FeedService`).
        `build(held, read)` reads with `read`, this read within the build it makes.
        `any_copy`: what any copy held will do for (a forum's basic info), fresh for as long as it is kept.
        `forum`: whose it is, for its part of the cold slots (`ColdSlots`). `dates`: what is built of this
        entry is as old as it (a list page's, live too: `stored`, `oldest`). `optional`, `ahead`: read as
        `optional()` and `stepping(ahead)` read, in one call (a forum's basic info, a topic page of a wave)."""
        if optional or ahead is not None:
            moded = self if ahead is None else self.stepping(ahead)
            return (moded.optional() if optional else moded).entry(key, build, what, forum, fresh_for=fresh_for,
                                                                   keep_for=keep_for, any_copy=any_copy, dates=dates)
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

    def source(self, forum: Forum, first: Callable[[], object] | None = None) -> Source:
        """The forum's source (`SourceDetector.source`, and its `first`)."""
        if self.cached_only:
            return self.scope.detector.decided(forum)
        return self.scope.detector.source(self, forum, first)

    def list_page(self, forum: Forum, url: str, source: Source = MARKDOWN) -> Listing:
        """One parsed list page: from cache while fresh, else fetched (read live); any cached copy, or NotHeld
        (read from cached copies)."""
        return list_entry(self, forum, url, source).listing


def list_entry(read: Read, forum: Forum, url: str, source: Source = MARKDOWN, *,
               fresh_for: float | None = None, dates: bool = True) -> PageEntry:
    """`Read.list_page` with when its copy was stored (`PageEntry.stored_at`), fresh within `fresh_for` seconds
    (the cache TTL by default): what a list read of several pages brings into line (`ListReader`),
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


@dataclass(frozen=True, slots=True)
class ListReader:
    """The lists of every scope, each read as its `Read` says (`Read`, above)."""

    settings: Settings
    pool: CallerPool

    def listings(self, read: Read, spec: FeedSpec) -> list[Listing]:
        """Page 0, then further pages in waves of `fetch_concurrency` while the list announces more, each with
        what the feed needs of the JSON list of the same page (`_completed`).

        A wave may ask for a few pages past the end (at most `fetch_concurrency - 1`): the price of not
        reading a long list one page at a time. A missing or empty page ends the list. A page not read
        within the request's deadline fails the build (a shorter feed must not pass for the whole one).

        The list is read through the forum's source (`feedbridge.feeds.sources.dialects`). A user feed reads the user's
        own topic list (`/topics/created-by/USER.json`, on every forum) and the latest list, filtered by
        author, only when the forum refuses that.
        """
        try:
            entries = self._read(read, spec)
        except NoForumAnswer as exc:
            raise explained(exc, spec.forum.key, spec.label, keyed=self.settings.credential_for(spec.forum) is not None,
                            signed=read.signed, missing=spec.missing) from None
        return _completed(read, spec, entries)

    def _read(self, read: Read, spec: FeedSpec) -> list[PageEntry]:
        """`listings` before the forum's answer is put in the reader's words. A bot wall on a user's own list
        is not a refusal of that list: the latest list is behind the same wall, and is not asked. A `/filter`
        feed reads `/filter.json` on every forum (core's filtered list has no Markdown twin), so it needs no
        source; a term core's `/filter` would ignore is refused before any request (the forum would answer
        the whole list), and so is what only a signed-in reader's `/filter` reads, to a public read: to the
        forum's anonymous reader it is no topics at all."""
        if spec.forum_query is not None:
            if ignored := spec.forum_query.ignored(self.settings.filter_terms_for(spec.forum)):
                raise RequestError(_ignored(spec, ignored), param="q")
            if spec.forum_query.signed_in_only and not read.signed:
                raise RequestError(self._signed_in_only(spec, spec.forum_query.signed_in_only))
            return self._pages(read, spec, lambda n: JSON.page_url(spec, n), JSON)
        if spec.kind == "personal":  # a member's own list: JSON on every forum, its own parser
            return self._pages(read, spec, *own_pages(spec))
        source, first = self._source(read, spec)
        if spec.started_by is not None:
            try:
                own = self._pages(read, spec, lambda n: spec.user_list_url(n) or "", JSON)
                return [replace(entry, listing=replace(entry.listing, started_by=spec.started_by)) for entry in own]
            except read.moves_on as exc:
                log.info("%s on %s: %s; reading the latest list instead", spec.label, spec.forum.key, exc.message)
        if spec.intersection:  # /tag/a+b: Discourse's own list where it has one, else the first tag's, filtered
            try:
                return self._pages(read, spec, spec.intersection_url, JSON)
            except read.moves_on as exc:
                log.info("%s on %s: %s; filtering the first tag's list", spec.label, spec.forum.key, exc.message)
        try:
            entries = self._pages(read, spec, lambda n: source.page_url(spec, n), source, first)
            if source is MARKDOWN and spec.kind == "category" and not entries[0].listing.topics:
                self._category_is_readable(read, spec)
            return entries
        except (UpstreamNotFound, UpstreamRefused) as exc:
            raise read.scope.detector.refused(spec, source, exc) from None

    def _source(self, read: Read, spec: FeedSpec) -> tuple[Source, PageEntry | None]:
        """The source of the feed's list, with its first page when reading it decided the source: on a forum
        with no record of its source, the list read as Markdown stands in for the probe when it is a Markdown
        list (`SourceDetector.source`'s `first`). Anything else it answers decides nothing (it is this feed's
        list, chosen by its reader), the probe runs as ever, and the answer is remembered for the list like any
        failure: a Markdown forum's feed fails with it, a JSON forum's reads its JSON list. Not for a `/latest`
        feed, whose list is the probe's own page, read by the probe, nor for a user's or a tag intersection's feed,
        which reads its own JSON list first."""
        if spec.started_by is not None or spec.intersection or is_probed(spec):
            return read.source(spec.forum), None
        got: list[PageEntry] = []
        source = read.source(spec.forum, lambda: got.append(
            list_entry(read, spec.forum, MARKDOWN.page_url(spec), MARKDOWN, dates=False)))
        return source, (got[0] if got and source is MARKDOWN else None)

    def _category_is_readable(self, read: Read, spec: FeedSpec) -> None:
        """A Markdown category list with no topics: the category may be missing or private. Core reads it at
        `/latest.md?category=ID` (`Source.route`), which lists only what the reader may see and says nothing
        of the category itself; a category the reader can see always lists its "About" topic there
        (lib/topic_query.rb `TopicQuery#default_results` keeps `categories.topic_id`). Its own path,
        `/c/SLUG/ID.md`, answers 404 or 403 as core's `ListController#set_category` does: one request more,
        only for an empty list, raising the forum's refusal."""
        self.page(read, spec.forum, _own_path(spec), MARKDOWN)

    def _signed_in_only(self, spec: FeedSpec, terms: tuple[str, ...]) -> str:
        """The 400's message for a public `/filter` feed of terms only a signed-in reader can use."""
        how = ("a signed feed URL reads them as the bridge's key's user (`feedbridge sign`)"
               if self.settings.credential_for(spec.forum) is not None
               else f"this bridge has no key for {spec.forum.key}")
        return (f"q: {' '.join(terms)} only means something to a signed-in user of the forum (core's /filter reads "
                f"it for the signed-in user alone, and gives anyone else no topics): {how}")

    def _pages(self, read: Read, spec: FeedSpec, url: Callable[[int], str], source: Source,
               first: PageEntry | None = None) -> list[PageEntry]:
        return _in_step(read, [(entry, _again(read, spec.forum, partial(url, n), source))
                               for n, entry in enumerate(self._entries(read, spec, url, source, first))])

    def _entries(self, read: Read, spec: FeedSpec, url: Callable[[int], str], source: Source,
                 first: PageEntry | None) -> list[PageEntry]:
        """The list's pages; `first`, page 0 when it has been read already (`_source`)."""
        entries = [first or list_entry(read, spec.forum, url(0), source, dates=False)]
        if entries[-1].listing.next_page_url is None or spec.pages == 1:
            return entries
        try:
            for _n, done in self.pool.waves(range(1, spec.pages),
                                            lambda n, ahead: list_entry(read.stepping(ahead), spec.forum, url(n),
                                                                        source, dates=False),
                                            self.settings.fetch_concurrency, caller=read.caller):
                try:
                    entry = done.result()
                except UpstreamNotFound:
                    return entries
                if not entry.listing.topics:
                    return entries
                entries.append(entry)
                if entry.listing.next_page_url is None:
                    return entries
        except FutureTimeout:
            raise DeadlinePassed(f"the {self.settings.request_deadline:g}s deadline passed while reading "
                                 f"{spec.pages} pages of {url(0)}") from None
        return entries

    def page(self, read: Read, forum: Forum, url: str, source: Source = MARKDOWN) -> Listing:
        """One parsed list page (`Read.list_page`, which the source probes read through too)."""
        return read.list_page(forum, url, source)


PAGE_SKEW = 30.0
"""Seconds apart the copies of one list's pages may have been read: a topic bumped in between moves up from a
later page read before to an earlier one read before it was bumped, and is on neither (a page read later loses
the topics pushed down to it the same way). Page 0 is shared by every one-page feed of the list, so it is
often the oldest copy."""


Again = Callable[[float], PageEntry | None]
"""How `_in_step` reads a page again, fresh within so many seconds (`_again`): None when it cannot."""


def _in_step(read: Read, pages: list[tuple[PageEntry, Again]]) -> list[PageEntry]:
    """The pages of one list, each whose copy is older than the newest by more than `PAGE_SKEW` read again,
    fresh from then on: one request more, for the pages out of step alone. Then what is built of them is as
    old as the oldest copy kept (`Read.stored`), not one read again. Not for a read outside a web request (a
    static build, the CLI): a run reads each page once, its copies as far apart as the run is long."""
    if len(pages) > 1 and read.caller is not None:
        since = max(entry.stored_at for entry, _ in pages) - PAGE_SKEW
        pages = [((again(time.time() - since) or entry) if entry.stored_at < since else entry, again)
                 for entry, again in pages]
    read.stored.extend(entry.stored_at for entry, _ in pages)
    return [entry for entry, _ in pages]


def _again(read: Read, forum: Forum, url: Callable[[], str], source: Source) -> Again:
    """A page read again as a read the feed can do without, in half the time its request has left
    (`Read.hurried`): refused, failed or late, None, and the copy held is kept. `url` is made only then: most
    pages are never read again."""
    def again(fresh_for: float) -> PageEntry | None:
        try:
            return list_entry(read.hurried(), forum, url(), source, fresh_for=fresh_for, dates=False)
        except (NoForumAnswer, NotHeld) as exc:
            log.info("%s is read as it was: %s", url(), exc.message)
            return None
    return again


def _own_path(spec: FeedSpec) -> str:
    """A category feed's category at its own Markdown path (`/c/SLUG/ID.md`, its default view)."""
    return MARKDOWN.list_url(spec.forum.base_url, spec.list_path.removesuffix("/l/top"))


def saved_pages(spec: FeedSpec, text: str, source: Source = MARKDOWN) -> dict[str, str]:
    """The pages a saved copy of `spec`'s list stands for, as the fetcher of a static build or of the CLI
    holds them (its one source of pages): the list's first page where `source` reads it, and for a category
    its own path too, where an empty Markdown list of it would be confirmed (`_category_is_readable`)."""
    own = {_own_path(spec): text} if spec.kind == "category" and source is MARKDOWN else {}
    return {source.page_url(spec): text, **own}


def _ignored(spec: FeedSpec, terms: tuple[tuple[str, str], ...]) -> str:
    """The 400's message for a `/filter` feed with terms core's `/filter` would ignore, each with why."""
    named = "; ".join(f"{term} ({why})" for term, why in terms)
    return (f"q: the forum's /filter would ignore {named}, and answer as if it were not there; a term a plugin "
            f"of {spec.forum.key} adds is read once FEEDBRIDGE_FILTER_TERMS names it")


FIGURES = ("likes", "views", "tags", "pinned", "category_id", "replies", "image_url", "author_avatar")
"""What a topic of a Markdown list takes from the JSON list of the same page, where it has none of its own
(`image_url` and `author_avatar`: its pictures, read for `content=full`)."""


def _completed(read: Read, spec: FeedSpec, entries: Sequence[PageEntry]) -> list[Listing]:
    """The listings of `entries` with each page's topics given their figures from the JSON list's pages of the
    same numbers, read as ones the build can do without where only pictures are wanted (`Read.optional`),
    when the filter needs what its source lacks, or (`content=full`) the feed wants the topics' pictures.
    Those pages are read in step with the Markdown ones (`_in_step`), and each topic takes its figures from
    whichever of them lists it: a topic bumped between the reads of a Markdown page and the JSON one of its
    number is on another, and was left without its category (through `exclude_category=`) or its views (out,
    by `min_views=`). A topic on none keeps its own (none). Read for the pictures alone, a page the forum does
    not give is left as it is."""
    pictures, forum = spec.content == "full", spec.forum
    if not pictures and spec.filter.json_needed(LACKED) is None:  # no page can need anything: none is looked at
        return [entry.listing for entry in entries]
    both: list[tuple[PageEntry, Again]] = []
    completed = []
    for number, entry in enumerate(entries):
        lacks = lacks_of(entry.listing)
        needed = spec.filter.json_needed(lacks)
        if needed is None and not (pictures and "image_url" in lacks):
            continue
        url = JSON.page_url(spec, number)
        try:
            # the pictures alone: a read the build can do without
            figures = list_entry(read.optional() if needed is None else read, forum, url, JSON, dates=False)
        except (NoForumAnswer, NotHeld) as exc:
            if needed is None:  # the pictures alone: a failure, a refused read (the build kept all the same), no copy
                log.info("no thumbnails for page %d of %s: %s", number, entry.listing.url, exc.message)
                continue
            if not isinstance(exc, UpstreamNotFound | UpstreamRefused):
                raise
            if needed == "tag" and not spec.filter.tags_all and spec.filter.json_needed(lacks - {"tags"}) is None:
                continue  # an any-of `tag=` alone: the topics' own pages give their tags (`FeedService`)
            raise RequestError(f"{needed} needs the forum's JSON list, since its Markdown list carries no likes, "
                               f"views, tags or category ids, and the forum refused it: {exc.message}",
                               param=needed) from None
        completed.append(number)
        both += [(entry, _again(read, forum, partial(MARKDOWN.page_url, spec, number), MARKDOWN)),
                 (figures, _again(read, forum, partial(str, url), JSON))]
    stepped = _in_step(read, both)  # in pairs, as `both` is: each Markdown page, then its JSON one
    pages = [entry.listing for entry in entries]
    found = {topic.id: topic for entry in stepped[1::2] for topic in entry.listing.topics}
    for number, entry in zip(completed, stepped[::2], strict=True):
        pages[number] = replace(entry.listing, topics=tuple(merged(topic, found.get(topic.id), FIGURES, keep=True)
                                                            for topic in entry.listing.topics),
                                completed=frozenset(FIGURES))
    return pages
