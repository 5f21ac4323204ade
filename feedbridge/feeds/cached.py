"""One cache policy for everything the service reads from a forum: feeds, list pages, topic pages and the
categories directory (and so the `.html` views and previews built on them).

    fresh copy?            → served as is ("hit"), nothing else is asked
    failure remembered?    → the same error, or the stale copy, without asking the forum
    one fetch (single-flight, within the request's deadline, charged to the forum's budget, in one of
               a few slots: else 503 + Retry-After or the stale copy, so hits keep their threads)
        ok                 → stored, served ("miss")
        upstream failed    → remembered for FEEDBRIDGE_NEGATIVE_TTL, then: the stale copy, or the error

The bounds, and why each exists (a public service reading other people's servers):

- Negative caching: a failure or 404 is remembered (in the store, so through Redis for every instance),
  and requests for the same key meanwhile cost the forum nothing. 200 requests for an unknown category
  are one upstream request, not 200.
- `ForumBudget`: at most FEEDBRIDGE_FORUM_BUDGET upstream requests per forum per minute (a fixed window,
  counted in the store: shared through Redis), well under Discourse's anonymous limit (about 200 a
  minute per IP), so the bridge is never the client that gets the forum to rate-limit it for everyone.
  One client (its address as the WSGI server sees it, which honours `FORWARDED_ALLOW_IPS`) may spend at
  most a third of it (`CLIENT_SHARE`). Past either: `BridgeBusy`, a 503 with Retry-After = the end of the
  window, or the stale copy. A fixed window is one INCR per request; its price is the edge, where a
  budget spent at the end of one minute and the start of the next puts up to twice it in sixty seconds.
- `ColdSlots`: at most FEEDBRIDGE_THREADS - 2 request threads per process fetch from upstream at once;
  a request that would start one more gets 503 + Retry-After (or the stale copy) at once, so two threads
  always stay free for cached feeds and `/healthz`. Requests that join a fetch already under way (the
  same cold key) need no slot: they add no upstream load, and a cold key has nothing else to answer
  with. When a copy is held and the slots are full, they get that copy at once instead of waiting.
- `Caller.deadline`: one FEEDBRIDGE_REQUEST_DEADLINE per request bounds every wait on top of a fetch
  (further pages, topic pages, another request's fetch); the service answers with what it has by then.

Callers without a `Caller` (the static build, the CLI) get the cache and negative caching only: they
pace themselves (`upstream/batch.py`) and have no readers waiting on a thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from feedbridge.config import Forum, Settings
from feedbridge.errors import BridgeBusy, UpstreamError, UpstreamNotFound, UpstreamRateLimited, UpstreamTimeout
from feedbridge.store.entries import FailureEntry
from feedbridge.store.memory import Flight, Store

log = logging.getLogger(__name__)
E = TypeVar("E")
Cache = Literal["hit", "miss", "stale"]

CLIENT_SHARE = 3
"""One client may spend at most 1/CLIENT_SHARE of a forum's budget per window."""
WINDOW = 60.0
BUSY_RETRY = 5.0

_KINDS: dict[str, type[UpstreamError]] = {"not_found": UpstreamNotFound, "timeout": UpstreamTimeout,
                                           "error": UpstreamError}


@dataclass(frozen=True, slots=True)
class Got(Generic[E]):
    entry: E
    cache: Cache
    stale_reason: str | None = None


@dataclass
class Caller:
    """One web request: who asks (for the budget's fair share), until when, and whether it holds a slot.

    Made in the request's own thread; the service's fetch pool threads get it passed along for the budget
    and the deadline, but never take slots (the request thread holds the one that covers them).
    """

    client: str
    deadline: float  # time.monotonic()
    thread: int = field(default_factory=threading.get_ident)
    slot: bool = False

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def wait(self, longest: float) -> float:
        return max(min(longest, self.left()), 0.0)


class ColdSlots:
    """A counting semaphore for the request threads that fetch from upstream, never waited on.

    Taken without waiting: when every slot is held the forum is being slow for this many requests
    already, and a thread that queued for a slot would be a thread not serving hits.
    """

    def __init__(self, size: int):
        self.size = size
        self._held = 0
        self._lock = threading.Lock()

    def acquire(self, caller: Caller) -> bool:
        with self._lock:
            if self._held >= self.size:
                return False
            self._held += 1
        caller.slot = True
        return True

    def release(self, caller: Caller) -> None:
        if not caller.slot:
            return
        caller.slot = False
        with self._lock:
            self._held -= 1

    @property
    def full(self) -> bool:
        with self._lock:
            return self._held >= self.size


class ForumBudget:
    """Upstream requests per forum per `WINDOW`, and each client's share of them, counted in the store."""

    def __init__(self, store: Store, per_window: int):
        self.store = store
        self.per_window = per_window
        self.share = max(per_window // CLIENT_SHARE, 1)

    def spend(self, forum: Forum, caller: Caller) -> None:
        if self.per_window <= 0:
            return
        now = time.time()
        window = math.floor(now / WINDOW)
        retry = (window + 1) * WINDOW - now
        mine = self.store.incr(f"budget:{forum.key}|{window}|{caller.client}", WINDOW * 2)
        if mine > self.share:
            raise BridgeBusy(f"this client has used its share ({self.share}) of the {self.per_window} upstream "
                             f"requests a minute the bridge makes to {forum.key}; retry in {retry:.0f}s",
                             retry_after=retry)
        if self.store.incr(f"budget:{forum.key}|{window}", WINDOW * 2) > self.per_window:
            raise BridgeBusy(f"the bridge has made its {self.per_window} upstream requests this minute to "
                             f"{forum.key}; retry in {retry:.0f}s", retry_after=retry)


class CachePolicy:
    """The one path from a cache key to an entry (see the module docstring)."""

    def __init__(self, settings: Settings, store: Store, flight: Flight):
        self.settings = settings
        self.store = store
        self.flight = flight
        self.slots = ColdSlots(settings.cold_slots)

    def caller(self, client: str) -> Caller:
        return Caller(client, time.monotonic() + self.settings.request_deadline)

    @contextmanager
    def request(self, caller: Caller | None) -> Iterator[None]:
        """The scope of one web request: whatever slot it took is given back at the end."""
        try:
            yield
        finally:
            if caller is not None:
                self.slots.release(caller)

    def fresh(self, key: str, fresh_for: float) -> Any:
        entry = self.store.get(key)
        return entry if _is_fresh(entry, fresh_for) else None

    def get(self, key: str, build: Callable[[E | None], E], *, fresh_for: float, keep_for: float,
            caller: Caller | None, stale: bool = True, what: str = "") -> Got[E]:
        """The entry for `key`: fresh, else built once by `build(held_copy)`, else (with `stale`) the held copy.

        `build` fetches and parses; the policy stores what it returns for `keep_for` seconds. Without
        `stale` the error is raised even when a copy is held (the feed decides about stale pages itself).
        """
        held: E | None = self.store.get(key)
        if _is_fresh(held, fresh_for):
            return Got(held, "hit")  # type: ignore[arg-type]
        try:
            return Got(self._build(key, build, held, fresh_for, keep_for, caller, what), "miss")
        except UpstreamError as exc:
            if stale and held is not None:
                log.warning("serving a stale copy (%.0fs old): %s", time.time() - held.stored_at,  # type: ignore[attr-defined]
                            exc.message)
                return Got(held, "stale", exc.message)
            raise

    def take_slot(self, caller: Caller | None) -> None:
        """Before a request thread sends anything upstream (`FeedService.fetch`): a slot, or BridgeBusy.

        Taken where the fetch happens, not where a build starts: a feed built from pages that are cached or
        being fetched by another request needs none. The service's fetch pool threads never take one."""
        if caller is None or caller.slot or caller.thread != threading.get_ident():
            return
        if not self.slots.acquire(caller):
            raise BridgeBusy(f"{self.slots.size} requests are already waiting on the forum in this process; "
                             f"retry in {BUSY_RETRY:.0f}s", retry_after=BUSY_RETRY)

    def remembered(self, key: str) -> UpstreamError | None:
        """The failure remembered for `key`, as the error to answer, with Retry-After = what is left of it."""
        failure: FailureEntry | None = self.store.get("failed:" + key)
        if failure is None:
            return None
        left = max(failure.stored_at + self.settings.negative_ttl - time.time(), 1.0)
        return _KINDS.get(failure.kind, UpstreamError)(
            f"{failure.message} (remembered; the forum is asked again in {left:.0f}s)", retry_after=left)

    def remember(self, key: str, exc: UpstreamError) -> None:
        """Failures of the forum only: a budget or slot refusal, or a 429 (kept per forum), is not remembered."""
        if self.settings.negative_ttl <= 0 or isinstance(exc, UpstreamRateLimited):
            return
        kind = "not_found" if isinstance(exc, UpstreamNotFound) else "timeout" if isinstance(exc, UpstreamTimeout) \
            else "error"
        self.store.set("failed:" + key, FailureEntry(kind, exc.message, time.time()), self.settings.negative_ttl)

    def _build(self, key: str, build: Callable[[E | None], E], held: E | None, fresh_for: float, keep_for: float,
               caller: Caller | None, what: str) -> E:
        remembered = self.remembered(key)
        if remembered is not None:
            raise remembered
        # A copy is held and another request is fetching it already: with every slot taken, waiting would
        # hold one more thread away from the hits, so the held copy is served at once.
        waiter = caller is not None and caller.thread == threading.get_ident() and not caller.slot
        if waiter and held is not None and self.slots.full and self.flight.busy(key):
            raise BridgeBusy(f"{what or key} is being fetched already and this process's {self.slots.size} "
                             f"slots for waiting on the forum are taken; retry in {BUSY_RETRY:.0f}s",
                             retry_after=BUSY_RETRY)
        wait = self.settings.singleflight_wait if caller is None else caller.wait(self.settings.singleflight_wait)
        if wait <= 0:
            raise UpstreamTimeout(f"the request's {self.settings.request_deadline:g}s deadline passed before "
                                  f"{what or 'the fetch'} could start")

        def once() -> E:
            try:
                entry = build(held)
            except UpstreamError as exc:
                self.remember(key, exc)
                raise
            self.store.set(key, entry, keep_for)
            return entry

        got: E = self.flight.do(key, once, wait, lambda: self.fresh(key, fresh_for))
        return got


def _is_fresh(entry: Any, fresh_for: float) -> bool:
    return entry is not None and time.time() - entry.stored_at < fresh_for
