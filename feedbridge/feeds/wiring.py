"""Making a `FeedService`: the one place its parts are built and joined, so the service only calls them.

    backends (store, control, flight, windows) ─┬─ CachePolicy (cold slots, turns to wait: one set per process)
    fetcher, ForumWaits, ForumBudget ───────────┴─ Gate ── LiveReads ─┬─ Readers (live)
                                      SourceDetector ── CachedReads ──┴─ Readers (cached)

With FEEDBRIDGE_CREDENTIALS set, a second scope is made over the same backends, each wrapped in the
private scope (`feedbridge.store.scoped`): its pages, feeds, failures, waits and source decisions are its
own, its fetches send the forum's key, and its budget is the key's (under Discourse's limits for one key,
counted in the forum's windows too), so a 429 on it never stops public reading. It shares the pool, the
cold slots and the turns to wait for a window with the public scope: both kinds of request wait on the same
forums in the same process.

With FEEDBRIDGE_PERSONAL on, a third scope reads as the current member (`feedbridge.feeds.personal`): the
same wrappers with the member's id in every key, the member's key on every fetch, and a budget per key.

Both take the public scope's reader of the forums' basic info (`feeds/identity.py`), which every forum shows
without a login: it is read once for everyone, without a key, in the forum's public budget.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from feedbridge.config import Credential, Settings
from feedbridge.feeds import handshake, personal
from feedbridge.feeds.callers import CallerPool, ForumBudget, Turns
from feedbridge.feeds.detect import SourceDetector
from feedbridge.feeds.directory import Directory
from feedbridge.feeds.gate import ForumWaits, Gate, Pace
from feedbridge.feeds.identity import Identities
from feedbridge.feeds.lists import ListReader
from feedbridge.feeds.policy import CachePolicy
from feedbridge.feeds.post_feeds import PostFeeds
from feedbridge.feeds.reads import CachedReads, LiveReads, Reads
from feedbridge.feeds.service import FeedService, Readers
from feedbridge.feeds.topic_pages import TopicPages
from feedbridge.store.control import ControlStore, MemoryControl, Windows
from feedbridge.store.memory import SingleFlight
from feedbridge.store.protocols import Flight, Store
from feedbridge.store.scoped import ScopedFlight, ScopedStore
from feedbridge.upstream.fetcher import Fetcher

PRIVATE = "private"
"""The scope of everything read with a forum's key (`feedbridge.store.scoped`)."""


def build_service(settings: Settings, store: Store, fetcher: Fetcher, flight: Flight | None = None, *,
                  control: ControlStore | None = None, windows: Windows | None = None,
                  pace: Pace | None = None) -> FeedService:
    """The public scope, and its signed-in twin when the bridge has credentials. `store` holds cached copies;
    `control` what steers requests to forums (their Retry-After, remembered failures, source decisions),
    beyond the reach of cache floods; `windows` the budgets' counters; `pace` a batch run's gentler pace."""
    control = control or MemoryControl()
    flight = flight or SingleFlight()
    windows = windows or Windows()
    pool = CallerPool(max_workers=settings.fetch_concurrency * 4, thread_name_prefix="fetch")
    slots, turns = threading.BoundedSemaphore(settings.cold_slots), Turns()
    budget = ForumBudget(windows, settings.forum_budget, per_burst=settings.forum_budget_10s,
                         processes=settings.workers, address=settings.address_of)
    public = _scope(settings, store, control, flight, fetcher, pool, slots, turns, budget, pace, signed=False)
    if settings.credentials:
        keyed = ForumBudget(windows, settings.private_budget, scope=PRIVATE, share=1,
                            per_day=settings.private_daily_budget, processes=settings.workers, forum=budget)
        public.signed_in = _shared_identity(
            _scope(settings, ScopedStore(store, PRIVATE), ScopedStore(control, PRIVATE), ScopedFlight(flight, PRIVATE),
                   fetcher, pool, slots, turns, keyed, pace, signed=True), public)
    if settings.personal:  # the members' scope: each member's part of it named by the current member
        handshake.RsaKey.load(settings)  # a FEEDBRIDGE_CONNECT_KEY that is no key stops the start, saying so
        scope, mine = personal.MEMBER, personal.within
        own = ForumBudget(windows, settings.member_budget, scope=scope, share=1, per_day=settings.member_daily_budget,
                          processes=settings.workers, forum=budget, who=personal.who)
        public.members = _shared_identity(
            _scope(settings, ScopedStore(store, scope, mine), ScopedStore(control, scope, mine),
                   ScopedFlight(flight, scope, mine), fetcher, pool, slots, turns, own, pace, signed=True,
                   member=personal.credential), public)
    return public


def _shared_identity(twin: FeedService, public: FeedService) -> FeedService:
    """`twin` reading the forums' basic info from the public scope: it is public, a login-only forum's too, so
    neither the forum's key nor a member's is sent for it, nor is it kept once per key or per member."""
    twin.live, twin.cached = (replace(twin.live, identity=public.live.identity),
                              replace(twin.cached, identity=public.cached.identity))
    return twin


def _scope(settings: Settings, store: Store, control: ControlStore, flight: Flight, fetcher: Fetcher,
           pool: CallerPool, slots: threading.BoundedSemaphore, turns: Turns, budget: ForumBudget,
           pace: Pace | None, *, signed: bool, member: Callable[[], Credential] | None = None) -> FeedService:
    policy = CachePolicy(settings, store, flight, control, slots=slots, turns=turns)
    gate = Gate(fetcher, ForumWaits(control, settings.retry_after_max), policy, budget, signed=signed, member=member,
                pace=pace)
    # The probes read list pages live, through the page cache: a `/latest` feed built just after a probe
    # reads the probe's page from there.
    detector = SourceDetector(settings, control, flight,
                              lambda forum, url, source: live.lists.page(forum, url, source))

    def readers(reads: Reads) -> Readers:
        return Readers(ListReader(settings, reads, pool, detector),
                       TopicPages(settings, reads, policy, store, control, pool),
                       Directory(reads, store), PostFeeds(settings, reads, policy, store, pool),
                       Identities(reads, store))

    live = readers(LiveReads(policy, gate, detector))
    return FeedService(settings, store, control, policy, budget, gate, detector, pool, fetcher, live,
                       readers(CachedReads(policy, detector, signed)), public=not signed)

