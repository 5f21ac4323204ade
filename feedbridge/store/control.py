"""Control state: what the service decides about forums and clients, kept apart from the cached copies.

A forum's remembered `Retry-After`, remembered failures (`failed:` keys), source decisions and the
budget counters steer what reaches a forum. In the page and feed LRU they could be pushed out by a flood
of cheap distinct URLs, and then the next cold request went straight back to a forum that asked us to
wait. Here nothing a reader asks for is stored: every entry follows an upstream request (a failure, a
429, a probe), and those are budgeted, so the bounds below are never reached by readers' traffic.

- `MemoryControl`: one bounded map per kind (the key's prefix before `:`), so even a kind with many
  entries (failures, one per failed URL) can never evict another (a forum's `Retry-After`, its source).
- `RedisControl`: the same state in Redis, shared by every worker and instance; while Redis is
  unreachable the process carries on with its own `MemoryControl` (written through, so it holds what
  this process decided).
- `Windows`: moving-window rate limits (`limits`), over memory (`LocalWindows`, which visits no window but the
  one hit) or the same Redis: the forum budgets', and in memory the CPU allowance's
  (`feedbridge.web.allowance`). A moving window
  counts the requests of the last `seconds`, so no span of that length ever holds more than the limit
  (a fixed window lets twice the limit through across its edge); with a `leeway` each hit is held that
  much longer, for a limit that someone else counts by their own clock, later (a forum counts a request
  when it arrives). No library shares a moving window between processes without a server, so each of an
  instance's `processes` (gunicorn's workers) counts its own share, 1/N of every limit, in memory:
  together they never exceed the limit (unless it is below N: each allows itself at least 1). With Redis
  the shared window holds the whole limit, and the share is what a process allows itself while Redis is
  unreachable; `capped` windows hold each process to its share with Redis too, so that what one spent
  through Redis is never spent again by another that lost sight of it (see `Windows`).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from collections.abc import Callable
from itertools import repeat
from typing import Any, TypeAlias, TypeVar

import redis
from cachetools import TLRUCache, TTLCache
from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import MovingWindowSupport, RedisStorage, Storage
from limits.strategies import MovingWindowRateLimiter

from feedbridge.store.protocols import Store
from feedbridge.store.redis_store import PREFIX, RedisLink, RedisStore

T = TypeVar("T")

WINDOW = 60
"""Seconds of the budgets' moving window."""
ENTRIES_PER_KIND = 4096
"""At most this many entries of one kind in a process (a failure costs a budgeted upstream request)."""
WINDOWS_HELD = 65536
"""In-process windows with hits in the last `seconds` that are tracked for clearing (see `IdleWindows`)."""


ControlStore: TypeAlias = Store
"""The cache's protocol (`store.protocols.Store`), over a store of its own: the name says which of the two a
part is given, state that must outlive any flood of readers' requests."""


class MemoryControl:
    """Thread-safe per-item TTLs, bounded per kind; an entry leaves when its TTL ends or its kind is full."""

    def __init__(self, per_kind: int = ENTRIES_PER_KIND):
        self.per_kind = per_kind
        self._kinds: dict[str, TLRUCache[str, tuple[Any, float]]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            found = self._kind(key).get(key)
        return None if found is None else found[0]

    def set(self, key: str, value: Any, ttl: float) -> None:
        if ttl <= 0:
            return
        with self._lock:
            self._kind(key)[key] = (value, time.monotonic() + ttl)

    def delete(self, key: str) -> None:
        with self._lock:
            self._kind(key).pop(key, None)

    def _kind(self, key: str) -> TLRUCache[str, tuple[Any, float]]:
        kind = key.partition(":")[0]
        cache = self._kinds.get(kind)
        if cache is None:
            cache = self._kinds[kind] = TLRUCache(self.per_kind, _expires, timer=time.monotonic)
        return cache


def _expires(_key: str, value: tuple[Any, float], _now: float) -> float:
    return value[1]


class RedisControl:
    """Control state in Redis (keys like the cache's, `feedbridge:<schema>:<kind>:<hash>`), read from there
    first so that every worker sees one decision, and kept in-process too for when Redis is unreachable."""

    def __init__(self, link: RedisLink, local: MemoryControl | None = None):
        self.shared = RedisStore(link)
        self.local = local or MemoryControl()

    def get(self, key: str) -> Any | None:
        """Redis's value, else this process's own: what it decided and Redis lost or was too full to write
        (nothing deletes control state, so a value Redis lacks was never taken back; each copy ends with its
        TTL). A process forgot a forum's `Retry-After` it had written through once Redis answered again."""
        found = self.shared.lookup(key)
        return self.local.get(key) if found is None or found[0] is None else found[0]

    def set(self, key: str, value: Any, ttl: float) -> None:
        self.local.set(key, value, ttl)
        self.shared.set(key, value, ttl)

    def delete(self, key: str) -> None:
        self.local.delete(key)
        self.shared.delete(key)


class Windows:
    """Moving-window limits, `limit` hits per `seconds` for each tuple of identifiers, each hit held for
    `held` seconds: its `seconds` and a `leeway`.

    Identifiers are hashed, so no client address or forum name reaches Redis as text. With Redis, the
    shared window decides, and every hit is counted in-process too: when a call fails (the link's breaker
    open), the process goes on limiting from what it has itself spent, never from a fresh window.

    The in-process window allows this process's share of each limit (`share`): `processes` of them, one per
    worker of the instance, never add up to more than the limit, with or without Redis. That holds for what
    each spends once Redis is gone, not for what they spent through it: a worker that sent 40 of a shared
    40 leaves its sibling's in-process window empty, and when Redis failed mid-window the sibling sent its 20
    on top (52 to 53 in 10 s measured, where core refuses past 50). No worker can know what the others sent
    through Redis once it is gone, nor whether a Redis that answers again (restarted empty) still holds it,
    so `capped` windows, the forum's, hold each worker to its share with Redis as well (`hit` and `test`
    ask the in-process window first; a hit it counted that Redis then refused stays counted in-process
    until it ages out, which errs towards the forum): the instance stays within every limit whatever Redis
    does, and Redis adds what no process can count alone, the instances' sum. A client's share
    (`feedbridge.feeds.admission.callers`) is not capped: it is the bridge's own fairness, and one request's build
    may take more of it than one worker's share.
    """

    def __init__(self, seconds: int = WINDOW, storage: Storage | None = None, link: RedisLink | None = None,
                 processes: int = 1, leeway: int = 0, capped: bool = False):
        self.seconds = seconds
        self.processes = max(processes, 1)
        self.leeway = max(leeway, 0)
        self.capped = capped
        self._storage, self._link = storage, link
        self._local = MovingWindowRateLimiter(LocalWindows())
        self._shared = None if storage is None or link is None else (MovingWindowRateLimiter(storage), link)
        self._idle = IdleWindows(self._local, self._item, self.held)
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """Seconds a hit counts: the window's length and its leeway."""
        return self.seconds + self.leeway

    def each(self, *changes: dict[str, Any]) -> list[Windows]:
        """These windows with some of what `__init__` takes changed, over the same storage and link, for each of
        `changes` (each over these windows): `seconds`, another length (the 10 s and daily budgets, held, split
        and capped the same way); `processes`, each limit split between the instance's gunicorn workers;
        `leeway`, every hit held that long past the window's length, so that no span of `seconds` at whoever
        counts the hits later, by up to `leeway`, holds more than the limit; `capped`, each process held to its
        share while Redis answers too (see the class). One call makes a budget's windows (`ForumBudget`)."""
        own = {"seconds": self.seconds, "processes": self.processes, "leeway": self.leeway, "capped": self.capped}
        return [Windows(storage=self._storage, link=self._link, **{**own, **changed}) for changed in changes]

    def share(self, limit: int) -> int:
        """What this process may spend of `limit` on its own: 1/processes of it, rounded down, at least 1."""
        return max(limit // self.processes, 1)

    def hit(self, limit: int, *ids: str) -> bool:
        """Count one hit unless the window is full; whether it was counted."""
        item, mine_item, names = self._item(limit), self._item(self.share(limit)), _hashed(ids)
        mine = self._local.hit(mine_item, *names)
        with self._lock:
            self._idle[(self.share(limit), *names)] = None
        if self.capped and not mine:
            return False
        shared = self._ask(lambda limiter: limiter.hit(item, *names))
        return mine if shared is None else shared

    def test(self, limit: int, *ids: str) -> bool:
        """Whether one more hit would be counted (nothing is counted)."""
        item, names = self._item(limit), _hashed(ids)
        mine = self._local.test(self._item(self.share(limit)), *names)
        if self.capped and not mine:
            return False
        shared = self._ask(lambda limiter: limiter.test(item, *names))
        return mine if shared is None else shared

    def reset_in(self, limit: int, *ids: str) -> float:
        """Seconds until the window has room again (0 when it has room now), at most `held`."""
        item, mine_item, names = self._item(limit), self._item(self.share(limit)), _hashed(ids)
        local = self._local.get_window_stats(mine_item, *names)
        shared = self._ask(lambda limiter: limiter.get_window_stats(item, *names))
        full = [stats.reset_time for stats in (local if shared is None or self.capped else None, shared)
                if stats is not None and stats.remaining <= 0]
        now = time.time()
        return max(max(full, default=now) - now, 0.0)

    def capacity(self, limit: int, seconds: float) -> int:
        """At most how many hits the window could take within `seconds` from now: the limit this process
        counts against (the shared one, else its share) for the window under way and each whole `held`
        after it. A bound, not a promise: what others spend meanwhile only lowers it."""
        counted = limit if self._shared is not None and not self.capped else self.share(limit)
        return counted * (1 + int(max(seconds, 0.0) // self.held))

    def charge(self, limit: int, cost: int, *ids: str) -> None:
        """Count `cost` hits at once, as many as the window has room for: a cost known only once the work is
        done (the CPU allowance's, `feedbridge.web.allowance`) counts whole up to the limit, where `limits`
        refuses a cost larger than the room left and counts none of it."""
        item, mine_item, names = self._item(limit), self._item(self.share(limit)), _hashed(ids)
        with self._lock:  # the room read and the hit together, or two charges could each find the same room
            self._idle[(self.share(limit), *names)] = None
            _charged(self._local, mine_item, cost, names)
        self._ask(lambda limiter: _charged(limiter, item, cost, names))

    def _item(self, limit: int) -> RateLimitItem:
        return RateLimitItemPerSecond(limit, self.held, namespace="window")

    def _ask(self, op: Callable[[MovingWindowRateLimiter], T]) -> T | None:
        """`op` on the shared windows; None without Redis or when it could not be asked."""
        if self._shared is None:
            return None
        limiter, link = self._shared
        return link.run(lambda _client: op(limiter))


class LocalWindows(Storage, MovingWindowSupport):
    """`limits`' moving windows in this process (`Windows`), as a storage of its own through `limits`' documented
    extension point (a `Storage` with `MovingWindowSupport`): each window's hits, newest first, trimmed to the
    window whenever it is read or hit, and nothing done in between.

    `limits`' own `MemoryStorage` sweeps every window it holds from a `threading.Timer` started 10 ms after any
    hit while none is running, so its cost grows with the windows held, not the hits: one sweep of 65,536
    windows (`WINDOWS_HELD`) took 172 ms of CPU, and 100 hits a second kept a process 5% busy with no other
    window held and 85% with 30,000 idle clients' windows (bench row 9b: 1.7% here, either way;
    `tests/test_control.py` counts what a hit touches). A flood of addresses, or only a public instance's
    readers, made every charged request pay for every client of the last minute, and under the gevent worker
    each sweep held the event loop. Windows that saw no hit for a whole window are cleared
    by `IdleWindows`; so no window is ever visited but the one asked about.

    Only moving windows are kept: `Storage`'s fixed-window counters (`incr`, `get`, `get_expiry`) are refused,
    no strategy of this project asks for them."""

    STORAGE_SCHEME = None  # made directly by `Windows`, never from a URI

    def __init__(self) -> None:
        super().__init__()
        self._hits: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    @property
    def base_exceptions(self) -> type[Exception]:
        return ValueError

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        """`amount` hits now, unless the window would then hold more than `limit`."""
        if amount > limit:
            return False
        now = time.time()
        with self._lock:
            hits = self._within(key, expiry, now)
            if len(hits) + amount > limit:
                return False
            hits.extendleft(repeat(now, amount))
            self._hits[key] = hits
            return True

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        """When the window's oldest hit was, and how many it holds (now and 0 for none); a read stores nothing."""
        now = time.time()
        with self._lock:
            hits = self._within(key, expiry, now)
            if not hits:
                self._hits.pop(key, None)
                return now, 0
            return hits[-1], len(hits)

    def _within(self, key: str, expiry: int, now: float) -> deque[float]:
        """The key's hits of the last `expiry` seconds, the older ones dropped (an empty deque for none)."""
        hits = self._hits.get(key, deque())
        cutoff = now - expiry
        while hits and hits[-1] < cutoff:
            hits.pop()
        return hits

    def clear(self, key: str) -> None:
        with self._lock:
            self._hits.pop(key, None)

    def reset(self) -> int:
        with self._lock:
            count = len(self._hits)
            self._hits.clear()
        return count

    def check(self) -> bool:
        return True

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        raise NotImplementedError("LocalWindows keeps moving windows only")

    def get(self, key: str) -> int:
        raise NotImplementedError("LocalWindows keeps moving windows only")

    def get_expiry(self, key: str) -> float:
        raise NotImplementedError("LocalWindows keeps moving windows only")


class IdleWindows(TTLCache[tuple[Any, ...], None]):
    """The in-process windows hit within the last `seconds` (a window's `held`), keyed `(limit, *ids)`; one
    that leaves is cleared from the storage. Also the CPU allowance's (`feedbridge.web.allowance`).

    `LocalWindows` drops a window's hits as they age, when the window is next read or hit, but keeps the
    window of a client that never comes back; clearing it once nothing was hit for a whole window frees it
    and changes no count. Leaving by the size bound clears too: that window loses its count, the process
    keeps its bound.
    """

    def __init__(self, limiter: MovingWindowRateLimiter, item: Callable[[int], RateLimitItem], seconds: int):
        super().__init__(WINDOWS_HELD, seconds, timer=time.monotonic)
        self.limiter = limiter
        self.item = item

    def expire(self, time: float | None = None) -> list[tuple[tuple[Any, ...], None]]:
        gone: list[tuple[tuple[Any, ...], None]] = list(super().expire(time))
        for (limit, *names), _ in gone:
            self.limiter.clear(self.item(limit), *names)
        return gone

    def popitem(self) -> tuple[tuple[Any, ...], None]:
        key, value = super().popitem()
        limit, *names = key
        self.limiter.clear(self.item(limit), *names)
        return key, value


def _charged(limiter: MovingWindowRateLimiter, item: RateLimitItem, cost: int, names: list[str]) -> bool:
    """`cost` hits counted in `limiter`'s window, or as many as it has room for."""
    counted = min(cost, limiter.get_window_stats(item, *names).remaining)
    return counted > 0 and limiter.hit(item, *names, cost=counted)


def _hashed(ids: tuple[str, ...]) -> list[str]:
    return [hashlib.sha256(part.encode()).hexdigest()[:32] for part in ids]


def redis_windows(link: RedisLink, seconds: int = WINDOW) -> Windows:
    """`Windows` over the link's own connection pool, so its calls share the link's short timeouts; keys are
    `feedbridge:<schema>:budget:window/<hash>/.../<limit>/<held>/second`."""
    pool: redis.ConnectionPool = link.client.connection_pool
    return Windows(seconds, RedisStorage("redis://", connection_pool=pool, key_prefix=PREFIX + "budget"), link)
