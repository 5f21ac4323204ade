"""Assembling a feed from a spec, one step after another as `topics` reads: its list pages with what a filter needs
beyond them (`feeds/sources/reads.py`; the directory's subcategories), the topics' own pages
(`feeds/sources/topic_pages.py`), the categories' names (`feeds/sources/site.py`), filter and digest, then render.
What is read from a forum is read through one `Gate` (`feeds/admission/gate.py`); the parts are made and joined once,
by `build_service` at the end of this module, so the service only calls them in order, each with the request's `Read`
(`feeds/sources/reads.py`: the scope it reads in, live or from cached copies only).

Failure policy, in one place (`feedbridge.feeds.admission.policy.CachePolicy`, used for feeds, pages, topic pages
and the categories directory alike): a fresh cached feed is served as is; otherwise the feed is rebuilt,
and if the forum fails while rebuilding, the last good copy (up to the stale TTL) is served and marked
stale; only with nothing cached does the error reach the reader. Failures are remembered briefly, upstream
requests are budgeted per forum, and one deadline bounds each request (`feeds/admission/`: `policy.py`,
`callers.py`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeVar

import msgspec

from feedbridge import metrics
from feedbridge.config import Credential, Forum, Settings
from feedbridge.errors import CpuSpent, NoForumAnswer, NotHeld, UpstreamError
from feedbridge.feeds.admission.callers import Caller, CallerPool, ColdSlots, ForumBudget, Turns
from feedbridge.feeds.admission.gate import ForumWaits, Gate, Pace
from feedbridge.feeds.admission.policy import OUTSIDE, Building, CachePolicy, Looked
from feedbridge.feeds.members import handshake, personal
from feedbridge.feeds.members.personal import Member
from feedbridge.feeds.request.spec import POST_KINDS, FeedSpec
from feedbridge.feeds.select.digest import digested
from feedbridge.feeds.sources.dialects import MARKDOWN, Source, SourceDetector, lacking
from feedbridge.feeds.sources.post_feeds import PostFeeds
from feedbridge.feeds.sources.reads import PUBLIC, ListReader, Read, Scope
from feedbridge.feeds.sources.site import Directory, Identities
from feedbridge.feeds.sources.topic_pages import TopicPages
from feedbridge.models import Category, Entry, Listing, Site
from feedbridge.render.formats import document, gzipped
from feedbridge.render.meta import Before, topic_entries
from feedbridge.store import keys
from feedbridge.store.control import ControlStore, MemoryControl, Windows
from feedbridge.store.entries import FeedEntry
from feedbridge.store.memory import SingleFlight
from feedbridge.store.protocols import Flight, Store
from feedbridge.store.scoped import ScopedFlight, ScopedStore
from feedbridge.upstream.fetcher import Fetcher

log = logging.getLogger(__name__)
T = TypeVar("T")

CacheStatus = Literal["hit", "miss", "stale"]
"""How a feed was answered: from a fresh copy, rebuilt now, or the last good copy while the forum fails."""


@dataclass(frozen=True, slots=True)
class FeedResult:
    entry: FeedEntry
    cache: CacheStatus
    stale_reason: str | None = None


@dataclass(frozen=True, slots=True)
class View:
    """What a page shows of a feed: the first list page (its title, for post feeds the forum's name of the
    topic or user), the entries, why they came from the last good pages, when they did, and how the forum
    presents itself (its icon), where it says."""

    first: Listing
    entries: list[Entry]
    stale: str | None = None
    site: Site | None = None


@dataclass(frozen=True, slots=True)
class Readers:
    """Everything a feed is built from, made once for every scope and way of reading (`feeds/sources/reads.py`)."""

    lists: ListReader
    topics: TopicPages
    directory: Directory
    posts: PostFeeds
    identity: Identities


@dataclass(frozen=True, slots=True)
class FeedService:
    """Feeds, views and previews, built by `build_service`: the readers, the scopes this bridge
    has (`public`; `private`, read with the forums' keys, when it has credentials; `member`, when it has
    personal feeds, which makes the members' scope as one member reads in it), and `current`, the scope this
    service reads in. A scope is a value (`scope`), so the service for a signed or a member's request is this
    one reading in another; so is the web request it serves (`caller`, made at the edge by `serving`), which
    every read it begins is handed (`Read`), and None outside one (the static build, the CLI), and the builds
    under way that its reads are part of (`building`: a page made of feeds is rendered by this service within
    the page's own build, `kept`)."""

    settings: Settings
    readers: Readers
    public: Scope
    private: Scope | None
    member: Callable[[Member], Scope] | None
    pool: CallerPool
    fetcher: Fetcher
    current: Scope
    caller: Caller | None = None
    building: Building = OUTSIDE

    def scope(self, signed: bool, member: Member | None = None) -> FeedService:
        """This service reading in the public scope, in the private one for a request whose token verified,
        or in the members' as `member` for their personal feed."""
        if member is not None:
            if self.member is None:
                raise UpstreamError("this bridge has no personal feeds")  # the route refuses this first
            return replace(self, current=self.member(member))
        elif signed:
            if self.private is None:
                raise UpstreamError("this bridge has no credentials")  # the token check refuses this first
            wanted = self.private
        else:
            wanted = self.public
        return self if wanted is self.current else replace(self, current=wanted)

    def close(self) -> None:
        """The pool's threads and the forum connections, for a process that is done (the static build)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.fetcher.close()

    def serving(self, client: str) -> FeedService:
        """This service for one web request from `client` (its remote address): the request's budget share,
        deadline and slot, a `Caller` that the web layer ends at the request's teardown (`Caller.end`)."""
        return replace(self, caller=self.current.policy.caller(client))

    @property
    def topic_failures(self) -> int:
        """Topic pages the forum failed to give since the process started, in every scope (`/healthz`)."""
        return self.readers.topics.failures

    @staticmethod
    def feed_key(spec: FeedSpec, self_url: str | None, stylesheet_url: str | None = None) -> str:
        """Everything the body depends on: the spec and the links built from the request (its own URL, the
        stylesheet's), so a copy built for one Host or script root is never served to another. Bounded:
        the web layer accepts only host names as Host, and gunicorn bounds the request line."""
        return keys.feed(spec.cache_key(), self_url, stylesheet_url)

    @staticmethod
    def page_key(spec: FeedSpec, page: str, self_url: str, script_root: str) -> str:
        """The key of a page made of a feed (`page`: "page" for its `.html` view, "preview" for the front
        page's): everything it depends on, as `feed_key` says for a feed, and never a feed's key."""
        return keys.view(spec.cache_key(), page, self_url, script_root)

    def kept(self, key: str, render: Callable[[FeedService], FeedEntry],
             admitted: Callable[[], AbstractContextManager[object]], forum: str) -> FeedEntry:
        """A page made of feeds (an `.html` view, a preview), kept as a feed is: a fresh copy; else rendered
        by `render(service)`, this service within the page's build, within `admitted` (the web layer's CPU
        allowance, entered only when no fresh copy is held) through the cache policy, never kept when a read of
        it was refused; else, when it cannot be rendered (the allowance spent, the forum failing), the copy held
        however old; what stopped it when there is none.
        What `render` raises of its own (a page that must not be kept) passes through."""
        try:
            return self.current.policy.get(key, lambda _held, building: render(replace(self, building=building)),
                                           caller=self.caller, building=self.building, what="the page",
                                           admitted=admitted, forum=forum).entry
        except (NoForumAnswer, CpuSpent):
            held = self.held(key)
            if held is None:
                raise
            return held

    def held(self, key: str) -> FeedEntry | None:
        """The copy stored under `key`, however old, without asking the forum."""
        entry: FeedEntry | None = self.current.store.get(key)
        return entry

    def feed(self, spec: FeedSpec, self_url: str | None, stylesheet_url: str | None = None,
             key: str | None = None, *,
             admitted: Callable[[], AbstractContextManager[object]] = nullcontext,
             looked: Looked | None = None) -> FeedResult:
        """The feed as the web serves it: a fresh copy, else built live, else the last good copy, else built
        from the last good pages (a new filter on a known list). `key` is `feed_key(...)` when the caller
        already has it (the web layer memoizes it per URL). Every build, live or from the last good pages, runs
        within `admitted` (the web layer's CPU allowance), entered only once the one freshness check found no
        copy. A file is built by `document`. `looked`: the request's look at the feed's key, when the web's hit
        path made it (`look`), so it is the one freshness check."""
        key = key or self.feed_key(spec, self_url, stylesheet_url)
        read = self._read()

        def live() -> FeedResult:
            got = self.current.policy.get(key, lambda held, building: self._render(
                replace(read, building=building), spec, self_url, stylesheet_url, held=held),
                caller=read.caller, building=read.building, what="the feed", admitted=admitted, forum=spec.forum.key,
                looked=looked)
            return FeedResult(got.entry, got.cache, got.stale_reason)

        def from_last_good(reason: str) -> FeedResult:
            cached = read.cached()
            with admitted():
                return FeedResult(self._render(cached, spec, self_url, stylesheet_url), "stale", reason)

        return self._either(live, from_last_good)

    def document(self, spec: FeedSpec, self_url: str | None, *, identity: bool = True,
                 written: Before | None = None) -> bytes:
        """The feed's bytes for a file (the CLI's and the static build's): built now, else from the last good
        pages, as `feed` builds them, without the feed's own cache around the build. A run starts with an empty
        store, so no copy of the feed is there to look up, and one kept would never be asked for again (each
        of a run's outputs is another feed), nor its gzip and ETag used; the pages and the forum's basic info
        are still read through the cache, shared by the run's feeds. No refresh hints: the file is rebuilt on
        its own schedule. Without `identity` (a saved list, which reads nothing but its file), no icon, logo or
        language of the forum. `written`: the id and date of the file written before (`_document`)."""
        def body(read: Read) -> bytes:
            return self._document(read, spec, self_url, None, refresh=False, identity=identity, before=written)[0]

        read = self._read()
        return self._either(lambda: body(read), lambda _reason: body(read.cached()))

    def view(self, spec: FeedSpec) -> View:
        """The entries of a feed for a page (`.html`, preview): like `feed`, the last good pages when the forum
        fails (`View.stale` then says why, and a page made of them is not kept), and the error only when
        there are none."""
        read = self._read()
        return self._either(lambda: self._view(read, spec), lambda reason: self._view(read.cached(), spec, reason))

    def _view(self, read: Read, spec: FeedSpec, stale: str | None = None) -> View:
        first, entries = self._entries(read, spec)
        return View(first, entries, stale, self.readers.identity.of(read, spec.forum))

    @staticmethod
    def _either(live: Callable[[], T], cached: Callable[[str], T]) -> T:
        """The one place a read falls back: live, else (the forum failed) from cached copies only, told why;
        the live read's error when the cache holds too little, or when the client has no CPU left for that
        second build (`CpuSpent`: the live build's failure was charged, and may have spent the allowance)."""
        try:
            return live()
        except NoForumAnswer as exc:
            try:
                made = cached(exc.message)
            except (NoForumAnswer, NotHeld, CpuSpent):
                raise exc from None
            log.warning("built from stale copies: %s", exc.message)
            return made

    def entries(self, spec: FeedSpec) -> tuple[Listing, list[Entry]]:
        """The entries of a spec (its filtered topics, posts or periods), read live: the same path the feeds
        use, also for previews."""
        return self._entries(self._read(), spec)

    def _entries(self, read: Read, spec: FeedSpec) -> tuple[Listing, list[Entry]]:
        """The entries of a spec, read as `read` says: its filtered topics as entries, or its digest's
        (`digested`). A post feed's come from `feedbridge.feeds.sources.post_feeds`.

        With full content (or a tag filter over Markdown lists, which carry no tags), the newest candidates
        (up to the topic budget) are read from their own pages before the keyword and tag filters run, so
        those filters see the whole first post and every tag.
        """
        readers = self.readers
        since, now = None, datetime.fromtimestamp(int(time.time()), UTC)  # the clock read once
        if spec.filter.max_age is not None:  # the window ends when the feed is built
            since = now - timedelta(seconds=spec.filter.max_age.seconds)
            if spec.digest is None:  # a digest keeps whole periods instead (feeds/select/digest.py)
                spec = replace(spec, filter=replace(spec.filter, since=since))
        if spec.kind in POST_KINDS:
            return readers.posts.entries(read, readers.directory.within(read, spec))
        listings = readers.lists.listings(read, spec)
        if spec.filter.exclude_categories:
            spec = readers.directory.excluding(read, spec)
        everything = [t for listing in listings for t in listing.topics]
        # Lists that carry every topic's tags (JSON's, a Markdown list completed from them): tag= then costs no topic
        # page. A forum that refuses its JSON lists gives them on the topics' pages, as many as the topic budget.
        # Without tag= no tags are kept from them either way, and nothing is asked.
        tags_listed = not spec.filter.tags or "tags" not in lacking(listings)
        if spec.content == "full" or (spec.filter.tags and not tags_listed):
            keep_tags = spec.filter.tags if tags_listed else frozenset()
            candidates = replace(spec.filter, query=None, tags=keep_tags, limit=None).apply(everything)
            budget = self.settings.topic_budget
            enriched = (readers.topics.enriched(read, spec.forum, candidates[:budget])
                        + readers.topics.held(read, spec.forum, candidates[budget:]))
            if spec.content == "full":
                everything = enriched
            else:  # their tags alone, for a feed of excerpts
                tagged = {topic.id: topic.tags for topic in enriched}
                everything = [msgspec.structs.replace(t, tags=tagged.get(t.id, t.tags)) for t in everything]
        kept = readers.directory.named(read, spec.forum, spec.filter.apply(everything, ranked=spec.ranked))
        if spec.digest is None:
            return listings[0], topic_entries(kept, spec.forum.base_url)
        return listings[0], digested(spec, listings, kept, since, now)

    def categories(self, forum: Forum, parent: int | None = None) -> tuple[Category, ...]:
        """The forum's directory (`Directory.categories`), read live; UpstreamError only with nothing cached."""
        return self.readers.directory.categories(self._read(), forum, parent)

    def look(self, key: str) -> Looked:
        """The store's entry for a feed's key, and whether it is within the cache TTL (`CachePolicy.look`)."""
        return self.current.policy.look(key)

    def page(self, forum: Forum, url: str, source: Source = MARKDOWN) -> Listing:
        """One list page read live (`ListReader.page`), for a caller that reads it outside any feed."""
        return self.readers.lists.page(self._read(), forum, url, source)

    def _read(self) -> Read:
        """Where the read path begins: the current scope, live, for the web request this service serves
        (`caller`): each layer below is handed it."""
        return Read(self.current, self.caller, building=self.building)

    def _render(self, read: Read, spec: FeedSpec, self_url: str | None, stylesheet_url: str | None,
                held: FeedEntry | None = None) -> FeedEntry:
        """The feed's bytes, with the validators of `held` (the copy this build replaces, if one is held), and
        their gzip; a signed or a member's feed has none, since each URL is served its own token in its body."""
        body, built, dated = self._document(read, spec, self_url, stylesheet_url, refresh=True, identity=True,
                                            before=None if held is None or held.dated is None else (None, held.dated))
        etag = hashlib.sha256(body).hexdigest()[:32]
        # As old as the oldest list page it was made of (`Read.oldest`), as a stale copy is: fresh for the rest of
        # that page's TTL, its `Age` counted from it. Dated at the build, an RSS built from the page the Atom feed
        # had read 5 s before was fresh for a whole TTL more, and served after the Atom feed showed a change.
        # Changed bytes are dated from the same moment: a feed built from the cached pages while the forum fails
        # (no copy of it held) had a new Last-Modified at every poll for the same bytes, and never a 304.
        stored_at = built if read.oldest is None else min(read.oldest, built)
        return FeedEntry(body=body, etag=etag, last_modified=_changed(etag, held, stored_at), stored_at=stored_at,
                         gzipped=None if read.signed else gzipped(body), dated=dated)

    def _document(self, read: Read, spec: FeedSpec, self_url: str | None, stylesheet_url: str | None, *,
                  refresh: bool, identity: bool, before: Before | None = None) -> tuple[bytes, float, float]:
        """The feed's bytes, read as `read` says, when they were built, and the date they give themselves (Atom's
        `updated`, RSS's `lastBuildDate`; `FeedEntry.dated`): with the refresh hints of the cache TTL (`refresh`)
        and the forum's icon, logo and language (`identity`). `before`: the copy held (or the file written before),
        whose date this build's is never before (`render.meta.floored`): the newest topic's date went back when
        that topic was deleted or moved out of the list, and a reader keeping the newest `updated` it saw took the
        feed for unchanged. A list with no date of its own takes it as it is, so the same empty list is the same
        bytes; it was the build's, a new ETag at every rebuild."""
        started = time.perf_counter()
        first, entries = self._entries(read, spec)
        site = self.readers.identity.of(read, spec.forum) if identity else None
        built = time.time()
        moment = datetime.fromtimestamp(int(built), UTC)
        body, dated = document(spec.fmt, spec.head(first, self_url, stylesheet_url, moment, built=moment, site=site,
                                                   ttl=self.settings.cache_ttl if refresh else None),
                               entries, first, before)
        metrics.built(spec.kind, time.perf_counter() - started)
        return body, built, dated.timestamp()


def _changed(etag: str, held: FeedEntry | None, built: float) -> float:
    """`Last-Modified`: when these bytes were first built (RFC 9110 §8.8.2: when the representation last changed),
    `built` being the moment the pages they were made of were read. The copy held keeps its date while its bytes are
    the same; changed bytes are dated at `built`, a second past the held copy's date at least, so a reader that
    validates with `If-Modified-Since` alone gets them. It was the newest entry's date, which an edit of an older
    topic, a topic gained by a filter or a topic deleted does not move forward (or moves back), and such readers got
    `304` for a feed that had changed; a topic dated in the future dated the feed there too."""
    if held is not None and held.last_modified is not None:
        if held.etag == etag:
            return held.last_modified
        return float(max(int(built), int(held.last_modified) + 1))
    return float(int(built))


# --- making a FeedService: the one place its parts are built and joined -------------------------------------
#
#     per scope:  its store, control, flight (wrapped, `store.scoped`) ─┬─ CachePolicy ─┐
#                 fetcher, ForumWaits, the scope's budget and key ──────┴───────────────┴─ Gate ─┬─ Scope
#                 its control, flight ── SourceDetector ─────────────────────────────────────────┘
#     once:       settings, pool ── Readers (Identities over the public Scope) ─┬─ FeedService (current: one
#                 the Scopes (public; private and member when configured) ──────┘  of its Scopes)
#
# Every scope's `CachePolicy` shares one set of cold slots and turns to wait (one process, one bound).
# A scope is a value (`feeds/sources/reads.py`): the readers are made once, and each request reads in the scope its
# service was given (`FeedService.scope`), live or from cached copies only.
#
# With FEEDBRIDGE_CREDENTIALS set, a private scope is made over the same backends, each wrapped in it
# (`feedbridge.store.scoped`): its pages, feeds, failures, waits and source decisions are its own, its
# fetches send the forum's key, and its budget is the key's (under Discourse's limits for one key, counted in
# the forum's windows too), so a 429 on it never stops public reading. It shares the pool, the cold slots and
# the turns to wait for a window with the public scope: both kinds of request wait on the same forums in the
# same process.
#
# With FEEDBRIDGE_PERSONAL on, the members' scope is made for each member's request (`FeedService.scope`, from
# the member `feedbridge.feeds.members.personal` opened from the URL): the same wrappers with the member's id in
# every key, the member's key on every fetch, and the members' budget counted per key. The member travels as
# that value, never as ambient state.
#
# The forums' basic info (`feeds/sources/site.py`), which every forum shows without a login, is read in the public
# scope for every request: once for everyone, without a key, in the forum's public budget.

PRIVATE = "private"
"""The scope of everything read with a forum's key (`feedbridge.store.scoped`)."""


def build_service(settings: Settings, store: Store, fetcher: Fetcher, flight: Flight | None = None, *,
                  control: ControlStore | None = None, windows: Windows | None = None,
                  pace: Pace | None = None) -> FeedService:
    """The service in the public scope, with the private one when the bridge has credentials and the members'
    when it has personal feeds. `store` holds cached copies; `control` what steers requests to forums (their
    Retry-After, remembered failures, source decisions), beyond the reach of cache floods; `windows` the
    budgets' counters; `pace` a batch run's gentler pace."""
    control = control or MemoryControl()
    flight = flight or SingleFlight()
    windows = windows or Windows()
    pool = CallerPool(max_workers=settings.fetch_concurrency * 4, thread_name_prefix="fetch")
    slots, turns = ColdSlots(settings.cold_slots, len(settings.forums)), Turns()
    hosts = {key: group[0] for group in settings.multisite for key in group}
    budget = ForumBudget(windows, settings.forum_budget, per_burst=settings.forum_budget_10s,
                         processes=settings.workers, address=settings.address_of)

    def scope(name: str, store: Store, control: ControlStore, flight: Flight, budget: ForumBudget, *,
              signed: bool, member: Credential | None = None) -> Scope:
        """One scope over its own backends and budget; what every scope shares is taken from here."""
        policy = CachePolicy(settings, store, flight, control, slots=slots, turns=turns)
        waits = ForumWaits(control, settings.retry_after_max, hosts)
        gate = Gate(fetcher, waits, policy, budget, signed=signed, member=member, pace=pace)
        return Scope(name, policy, gate, SourceDetector(settings, control, flight), store, control, signed)

    public = scope(PUBLIC, store, control, flight, budget, signed=False)
    private: Scope | None = None
    members: Callable[[personal.Member], Scope] | None = None
    if settings.credentials:
        keyed = ForumBudget(windows, settings.private_budget, scope=PRIVATE, share=1,
                            per_day=settings.private_daily_budget, processes=settings.workers, forum=budget)
        private = scope(PRIVATE, ScopedStore(store, PRIVATE), ScopedStore(control, PRIVATE),
                        ScopedFlight(flight, PRIVATE), keyed, signed=True)
    if settings.personal:  # the members' scope, made for each member's request: their part of it, their key
        handshake.RsaKey.load(settings)  # a FEEDBRIDGE_CONNECT_KEY that is no key stops the start, saying so
        name = personal.MEMBER
        own = ForumBudget(windows, settings.member_budget, scope=name, share=1, per_day=settings.member_daily_budget,
                          processes=settings.workers, forum=budget, per_member=True)

        def member_scope(member: personal.Member) -> Scope:
            """The members' scope as `member` reads in it: their id in every key, their key on every fetch, their
            windows of the members' budget. A handful of small objects per request over the shared backends."""
            mine = member.id + "/"
            return scope(name, ScopedStore(store, name, mine), ScopedStore(control, name, mine),
                         ScopedFlight(flight, name, mine), own.of(member.id), signed=True, member=member.credential)

        members = member_scope
    readers = Readers(ListReader(settings, pool), TopicPages(settings, pool), Directory(), PostFeeds(settings, pool),
                      Identities(public))
    return FeedService(settings, readers, public, private, members, pool, fetcher, current=public)
