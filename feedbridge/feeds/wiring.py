"""Making a `FeedService`: the one place its parts are built and joined, so the service only calls them.

    per scope:  its store, control, flight (wrapped, `store.scoped`) ─┬─ CachePolicy ─┐
                fetcher, ForumWaits, the scope's budget and key ──────┴───────────────┴─ Gate ─┬─ Scope
                its control, flight ── SourceDetector ─────────────────────────────────────────┘
    once:       settings, pool ── Readers (Identities over the public Scope) ─┬─ FeedService (current: one
                the Scopes (public; private and member when configured) ──────┘  of its Scopes)

Every scope's `CachePolicy` shares one set of cold slots and turns to wait (one process, one bound).
A scope is a value (`feeds/sources/reads.py`): the readers are made once, and each request reads in the scope its
service was given (`FeedService.scope`), live or from cached copies only.

With FEEDBRIDGE_CREDENTIALS set, a private scope is made over the same backends, each wrapped in it
(`feedbridge.store.scoped`): its pages, feeds, failures, waits and source decisions are its own, its
fetches send the forum's key, and its budget is the key's (under Discourse's limits for one key, counted in
the forum's windows too), so a 429 on it never stops public reading. It shares the pool, the cold slots and
the turns to wait for a window with the public scope: both kinds of request wait on the same forums in the
same process.

With FEEDBRIDGE_PERSONAL on, the members' scope is made for each member's request (`FeedService.scope`, from
the member `feedbridge.feeds.members.personal` opened from the URL): the same wrappers with the member's id in
every key, the member's key on every fetch, and the members' budget counted per key. The member travels as
that value, never as ambient state.

The forums' basic info (`feeds/sources/site.py`), which every forum shows without a login, is read in the public
scope for every request: once for everyone, without a key, in the forum's public budget.
"""

from __future__ import annotations

from collections.abc import Callable

from feedbridge.config import Credential, Settings
from feedbridge.feeds.admission.budget import ForumBudget
from feedbridge.feeds.admission.callers import CallerPool, ColdSlots, Turns
from feedbridge.feeds.admission.gate import ForumWaits, Gate, Pace
from feedbridge.feeds.admission.policy import CachePolicy
from feedbridge.feeds.members import handshake, personal
from feedbridge.feeds.service import FeedService, Readers
from feedbridge.feeds.sources.detect import SourceDetector
from feedbridge.feeds.sources.lists import ListReader
from feedbridge.feeds.sources.post_feeds import PostFeeds
from feedbridge.feeds.sources.reads import PUBLIC, Scope
from feedbridge.feeds.sources.site import Directory, Identities
from feedbridge.feeds.sources.topic_pages import TopicPages
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
