"""One cache policy for everything the service reads from a forum: feeds, list pages, topic pages and the
categories directory (and so the `.html` views and previews built on them).

    fresh copy?            → served as is ("hit"), nothing else is asked
    failure remembered?    → the same error, or the stale copy, without asking the forum
    one fetch (single-flight, within the request's deadline, charged to the forum's budget, in one of
               a few slots: else 503 + Retry-After or the stale copy)
        ok                 → stored, served ("miss")
        upstream failed    → remembered for FEEDBRIDGE_NEGATIVE_TTL, then: the stale copy, or the error
        a window has room soon (`RoomSoon`, a cold build's later read: `feeds/admission/gate.py`)
                           → the outermost build gives its attempt up, waits outside every flight and
                             without its slot (one request per client, `Turns`), and is made again

The bounds, and why each exists (a public service reading other people's servers); the request's own
(its deadline, the forum's budget and the client's share) are in `feedbridge.feeds.admission.callers`:

- Negative caching: a failure or 404 is remembered (in the control store, so through Redis for every
  instance, and never pushed out by a flood of cached copies), and requests for the same key meanwhile
  cost the forum nothing. 200 requests for an unknown category are one upstream request, not 200.
- Cold slots: at most FEEDBRIDGE_COLD_SLOTS requests per process fetch from upstream at once (a
  `BoundedSemaphore`, never waited on); a request that would start one more gets 503 + Retry-After (or
  the stale copy) at once, so a slow forum holds a bounded number of builds and their pages in memory.
  Requests that join a fetch already under way (the same cold key) with nothing else to answer with
  need no slot: they add no upstream load. With a copy held, joining takes a slot, and with none left
  they get that copy at once instead of waiting.
"""


from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, Generic, Literal, TypeVar

from feedbridge import metrics
from feedbridge.config import Settings
from feedbridge.errors import (
    BridgeBusy,
    DeadlinePassed,
    NoForumAnswer,
    NotHeld,
    RoomSoon,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamTimeout,
    upstream_error,
)
from feedbridge.feeds.admission.callers import Caller, ColdSlots, Turns
from feedbridge.store import keys
from feedbridge.store.control import ControlStore
from feedbridge.store.entries import FailureEntry, is_fresh
from feedbridge.store.protocols import Flight, Store
from feedbridge.upstream import batch

log = logging.getLogger(__name__)
E = TypeVar("E")
T = TypeVar("T")
Cache = Literal["hit", "miss", "stale"]

BUSY_RETRY = 5.0
CLOCK_SKEW = 30.0
"""Seconds by which the clocks of instances sharing a Redis may differ: a failure remembered by another is taken
as stored up to this far in the future."""


@dataclass(slots=True)
class _Tally:
    """One build under way: the refusal any read made for it met, if one did, and whether it is cold (no
    copy of what it builds is held to answer with)."""

    cold: bool
    refused: BridgeBusy | None = None


@dataclass(frozen=True, slots=True)
class Building:
    """What a read knows of the builds it is part of: one value handed down with the read (`Read.building`,
    `FeedService.building`) and into each build the policy runs (`CachePolicy.get` gives `build` its own),
    never ambient state. Pool work is handed its submitter's read, so a topic page read in the pool counts for
    the feed whose build asked for it.

    `builds`: the builds under way, innermost last. `optional_from`: for a read its builds can do without
    (`Read.optional`), how many of them were under way when it began (those it must not mark). `ahead`: the
    upstream reads the current step of a build may still make, itself included (`CallerPool.waves` says, for
    each wave's jobs; 1 for a read of its own)."""

    builds: tuple[_Tally, ...] = ()
    optional_from: int | None = None
    ahead: int = 1

    def within(self, tally: _Tally) -> Building:
        return replace(self, builds=(*self.builds, tally))

    def refused(self, exc: BridgeBusy) -> BridgeBusy:
        """`exc`, after marking every build it is part of: a share, the forum's budget or a slot refused one of
        its reads, so what it builds lacks something another client would get, and is never stored for them
        (`CachePolicy.get` answers the refused client with this error, or the stale copy). A `RoomSoon` marks
        them to be made again once the window has room, unless a read was refused outright, which no wait
        mends: that refusal is kept. For an optional read, only the builds it began are marked."""
        for tally in self.builds[self.optional_from or 0:]:
            if tally.refused is None or isinstance(tally.refused, RoomSoon):
                tally.refused = exc
        return exc

    def waitable(self) -> bool:
        """Whether the current read, refused for now, may have its build wait for the room (`Gate`): it is part
        of a build that is cold (a held copy is the answer at once, as before waiting existed), none of its
        reads was refused outright, and it is not a read the build can do without (`Read.optional`)."""
        return self.optional_from is None and bool(self.builds) and self.builds[0].cold and not any(
            tally.refused is not None and not isinstance(tally.refused, RoomSoon) for tally in self.builds)


OUTSIDE = Building()
"""A read that is part of no build (a static build's, a test's): what every reader starts from."""


@dataclass(frozen=True, slots=True)
class Looked:
    """One look at the store for `key`: what was `held` (None: nothing), whether it is `fresh` (stored less
    than `fresh_for` seconds before), and how many flights of the process had ended just before
    (`Flight.ended`). Made by `CachePolicy.look`, where a request first looks (the web's hit path, or `get`),
    and handed to `CachePolicy.get` for the same key and rule, so the request looks once."""

    key: str
    fresh_for: float
    held: Any
    fresh: bool
    ended: int


@dataclass(frozen=True, slots=True)
class Got(Generic[E]):
    entry: E
    cache: Cache
    stale_reason: str | None = None


class CachePolicy:
    """The one path from a cache key to an entry (see the module docstring)."""

    def __init__(self, settings: Settings, store: Store, flight: Flight, control: ControlStore,
                 slots: ColdSlots | None = None, turns: Turns | None = None):
        """`slots` and `turns`: another policy's cold slots and turns to wait, to share them (one process,
        one bound)."""
        self.settings = settings
        self.store = store
        self.flight = flight
        self.control = control
        self.slots = slots or ColdSlots(settings.cold_slots, len(settings.forums))
        self.turns = turns or Turns()

    def caller(self, client: str) -> Caller:
        return Caller(client, time.monotonic() + self.settings.request_deadline)

    def fresh(self, key: str, fresh_for: float | None = None) -> Any:
        entry = self.store.get(key)
        return entry if is_fresh(entry, self.fresh_for if fresh_for is None else fresh_for) else None

    def look(self, key: str, fresh_for: float | None = None) -> Looked:
        """The look `get` makes (fresh: within `fresh_for`, by default the cache TTL), also for a caller that
        answers a fresh copy itself and hands the look to `get` otherwise. A cold key asks no rule."""
        fresh_for = self.fresh_for if fresh_for is None else fresh_for
        ended = self.flight.ended  # before the look: a build that ends after it may have stored the entry
        held = self.store.get(key)
        return Looked(key, fresh_for, held, held is not None and is_fresh(held, fresh_for), ended)

    @property
    def fresh_for(self) -> float:
        """How long a copy is served without asking the forum (FEEDBRIDGE_CACHE_TTL)."""
        return float(self.settings.cache_ttl)

    @property
    def keep_for(self) -> float:
        """How long a copy is kept to fall back on (FEEDBRIDGE_STALE_TTL, at least the cache TTL)."""
        return float(max(self.settings.stale_ttl, self.settings.cache_ttl))

    @property
    def keep_read_for(self) -> float:
        """How long what is keyed by its own version is kept: a topic page at its last activity, the posts of a
        topic by their ids (FEEDBRIDGE_TOPIC_TTL); such an entry never goes stale, it only ends."""
        return float(self.settings.topic_ttl)

    def keep_read(self, key: str, entry: Any) -> None:
        """Posts read outside `get` (a batch added to what a topic's entry holds), kept like a topic page."""
        self.store.set(key, entry, self.keep_read_for)

    def remember_missing(self, key: str, entry: Any) -> None:
        """A topic the forum says is gone: remembered for the cache TTL (a minute at least), so a deleted
        topic is not asked for on every rebuild, and asked again after it in case it comes back."""
        self.store.set(key, entry, max(self.fresh_for, 60.0))

    def get(self, key: str, build: Callable[[E | None, Building], E], *, caller: Caller | None,
            building: Building = OUTSIDE, stale: bool = True, what: str = "", fresh_for: float | None = None,
            keep_for: float | None = None, any_copy: bool = False,
            admitted: Callable[[], AbstractContextManager[object]] = nullcontext, forum: str | None = None,
            looked: Looked | None = None, until: float | None = None) -> Got[E]:
        """The entry for `key`: fresh, else built once by `build(held_copy, building)`, else (with `stale`) the held
        copy. `caller` is the web request it is read for (its deadline, slot and turn to wait), None outside one;
        `building` the builds this read is part of, and `build` is given them with its own as the innermost.
        `admitted` is entered only past the one freshness check, around the build: what the caller charges for
        work a copy did not answer (the web layer's CPU allowance), and may refuse (`CpuSpent`, which passes).

        `build` fetches and parses; the policy stores what it returns for `keep_for` seconds. Without
        `stale` the error is raised even when a copy is held (the feed decides about stale pages itself).
        `fresh_for` and `keep_for` default to the policy's own; only entries keyed by their content's own
        version (a topic page, keyed by its last activity) say otherwise, and with `any_copy` a copy is fresh
        for as long as it is kept (what changes so rarely that any copy will do: a forum's basic info).
        `forum`: whose it is (its key), for its part of the cold slots a wait on another's fetch takes.
        `looked`: this request's look at `key` with the same rule already made (`look`), not made again.
        `until`: a `time.monotonic()` sooner than the caller's deadline that waits on another's fetch end by too
        (a read its build can do without, `Read.hurried`: it would have waited the whole deadline out).
        """
        fresh_for = self.keep_for if any_copy else self.fresh_for if fresh_for is None else fresh_for
        keep_for = self.keep_for if keep_for is None else keep_for
        if looked is None or (looked.key, looked.fresh_for) != (key, fresh_for):
            looked = self.look(key, fresh_for)
        held: E | None = looked.held
        if looked.fresh:
            return Got(held, "hit")  # type: ignore[arg-type]
        try:
            with admitted():
                return Got(self._build(key, build, held, looked.ended, fresh_for, keep_for, what, caller, building,
                                       forum, until), "miss")
        except NoForumAnswer as exc:
            if stale and held is not None:
                log.warning("serving a stale copy (%.0fs old): %s", time.time() - held.stored_at,  # type: ignore[attr-defined]
                            exc.message)
                return Got(held, "stale", exc.message)
            raise

    def held(self, key: str, what: str) -> Any:
        """The copy held for `key`, however old, without asking the forum: what a build from stale pages
        reads once the forum has just failed (`feeds/sources/reads.py`). NotHeld naming `what` when there is none."""
        entry = self.store.get(key)
        if entry is None:
            raise NotHeld(f"no copy of {what} to fall back on")
        return entry

    def take_slot(self, caller: Caller | None, why: str = "", forum: str | None = None,
                  building: Building = OUTSIDE) -> None:
        """Before a request sends anything upstream (`Gate.fetch`), or waits on another's fetch with a
        copy to fall back on: the request's slot (taken once, by whichever of its reads comes first, pool
        work included), or BridgeBusy (with `why` as its message).

        Taken where the fetch happens, not where a build starts: a feed built from pages that are cached or
        being fetched by another request needs none. Work that outlives its request (pool work the request
        stopped waiting for) gets DeadlinePassed: no slot is ever taken that nobody gives back. Reads outside
        a web request (a static build, the CLI; `caller` None) take none. `forum`: the one it waits on, whose
        part of the slots it takes too (`ColdSlots`); `building`, the builds a refusal marks."""
        if caller is None:
            return
        admission = caller.admission
        with admission.lock:
            if admission.slot is not None:
                return
            if admission.ended:
                raise DeadlinePassed("the request this read was for has ended; nothing is fetched for it")
            taken = self.slots.take(forum, caller.client)
            if isinstance(taken, str):
                metrics.refused("slot")
                raise building.refused(BridgeBusy(why or f"{taken}; retry in {BUSY_RETRY:.0f}s",
                                                  retry_after=BUSY_RETRY))
            admission.slot = taken

    def remembered(self, failed: str) -> UpstreamError | None:
        """The failure remembered under `failed` (`keys.FAILED` and the entry's key), as the error to answer, with
        Retry-After = what is left of it."""
        failure: FailureEntry | None = self.control.get(failed)
        ttl = self.settings.negative_ttl
        left = 0.0 if failure is None else failure.stored_at + ttl - time.time()
        # Past its TTL, or stored later than now by more than instances' clocks differ: what a store holding it
        # longer than it was set for (a Redis shared with another version, a value written by hand) says.
        if failure is None or not 0 < left <= ttl + CLOCK_SKEW:
            return None
        left = max(left, 1.0)
        error = upstream_error(failure.kind, f"{failure.message} (remembered; the forum is asked again in {left:.0f}s)",
                               left, failure.status)
        error.remembered = True
        return error

    def remember(self, failed: str, exc: UpstreamError) -> None:
        """Under `failed` (`keys.FAILED` and the entry's key), failures of the forum only: a budget or slot refusal, a
        429 (kept per forum) or a fetch the request's deadline cut short is not remembered, nor one remembered already
        (a feed's build failing on its list's remembered failure): remembered again from now, it outlived its TTL,
        and its note was written twice."""
        if self.settings.negative_ttl <= 0 or isinstance(exc, UpstreamRateLimited | DeadlinePassed) or exc.remembered:
            return
        failure = FailureEntry(exc.reason, exc.message, time.time(), exc.upstream_status)
        self.control.set(failed, failure, self.settings.negative_ttl)

    def _build(self, key: str, build: Callable[[E | None, Building], E], held: E | None, ended: int,
               fresh_for: float, keep_for: float, what: str, caller: Caller | None, building: Building,
               forum: str | None, until: float | None = None) -> E:
        # A copy is held and another request is fetching it already: waiting on that fetch takes a slot, and
        # with every slot taken it would hold one more thread away from the hits, so the copy is served.
        if held is not None and self.flight.busy(key):
            self.take_slot(caller, f"{what or key} is being fetched already and this process's "
                           f"slots for waiting on the forum are taken; retry in {BUSY_RETRY:.0f}s", forum, building)
        ran = False

        def once() -> E:
            nonlocal ran
            # Stored by a build that ended after this request looked (`held`) and before its turn to lead one:
            # no flight was left to join, and building again would ask the forum for what it just gave. Looked
            # up again only when a flight of this process has ended since (`ended`, as the look found it): else
            # nothing of this process stored it, and another process's store is looked at by its flight
            # (`RedisFlight`).
            if self.flight.ended != ended:
                again: E | None = self.fresh(key, fresh_for)
                if again is not None:
                    return again
            # A failure remembered, checked by the leader: one that another instance's leader met while this
            # request waited for its lock is the answer too, not a request more to the forum.
            failed = keys.FAILED + key  # made once for the look and the failure it may remember
            remembered = self.remembered(failed)
            if remembered is not None:
                raise remembered
            ran = True
            tally = _Tally(cold=held is None)
            try:
                entry = build(held, building.within(tally))
            except UpstreamError as exc:
                self.remember(failed, exc)
                raise
            except BridgeBusy:
                # What a read that waits for room met, though a reader in between made it another error.
                if tally.refused is not None:
                    raise tally.refused from None
                raise
            if tally.refused is not None:  # built without what a share, budget or slot refused: not for others
                raise tally.refused
            self.store.set(key, entry, keep_for)
            return entry

        joined = 0
        while True:
            wait = self.settings.singleflight_wait if caller is None else caller.wait(self.settings.singleflight_wait)
            if until is not None:
                wait = min(wait, until - time.monotonic())
            if wait <= 0:
                raise DeadlinePassed(f"the request's {self.settings.request_deadline:g}s deadline passed before "
                                      f"{what or 'the fetch'} could start")
            ran = False
            try:
                got: E = self.flight.do(key, once, wait, lambda: self.fresh(key, fresh_for))
                return got
            except RoomSoon as soon:
                if ran and not building.builds:  # this request's own build, and the outermost: it waits
                    began = time.monotonic()
                    if caller is None or not self.turns.wait(caller, soon.until):
                        raise BridgeBusy(soon.message, soon.retry_after) from None
                    log.info("%s waited %.1fs for room (%s)", what or key, time.monotonic() - began, soon.message)
                    continue
                if ran:  # a part: the build it is part of gives its attempt up, and waits, whole
                    raise
            except BridgeBusy:
                if ran:
                    raise
            except DeadlinePassed:
                if ran or (caller is not None and caller.left() <= 0):
                    raise
            except UpstreamError as exc:
                if not ran:  # a failure met without a request: remembered, or the flight it joined failed
                    batch.met(exc)
                raise
            # Another request's build was refused for its own share or slot, waits for room, or was cut by its own
            # deadline: that says nothing of this one, which builds (or joins) once more.
            joined += 1
            if joined == 2:
                raise UpstreamTimeout(f"{what or key}: two other requests' builds were refused in turn; retry")

