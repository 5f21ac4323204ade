"""Choose the cache store, the control store and the single-flight for this process.

Without a cache URL, one process is the whole service: an in-process cache, control store and
single-flight. With one (`FEEDBRIDGE_CACHE_URL` or a PaaS add-on's `REDIS_URL`), every worker of every
instance shares pages, feeds, control state and budgets in Redis and takes a Redis lock before
fetching, so the forum sees one request per page per cache TTL however many workers there are.

Plain arguments rather than `Settings`: the store is a leaf of the tree and reads no configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

from feedbridge.store.control import ControlStore, MemoryControl, RedisControl, Windows, redis_windows
from feedbridge.store.memory import MemoryStore, SingleFlight
from feedbridge.store.protocols import Flight, Store
from feedbridge.store.redis_flight import RedisFlight
from feedbridge.store.redis_store import CONNECTIONS, RedisLink, RedisStore, Room, TieredStore

# How long a worker trusts its in-process copy before asking Redis whether another worker has a newer one.
LOCAL_RECHECK = 5.0
# Past the fetcher's own deadline, so a live lock owner never loses its lock mid-fetch.
LOCK_MARGIN = 5.0


@dataclass(frozen=True, slots=True)
class Backends:
    """`store`: cached copies (evictable); `control` and `windows`: decisions and budgets (never evicted by
    readers' traffic, see `feedbridge.store.control`); `flight`: one fetch per cold key; `cache`: the
    process's own cache, the store itself or its first level (what `/metrics` measures); `link`: Redis, when
    configured (whether it answers, `/healthz` says)."""

    store: Store
    control: ControlStore
    windows: Windows
    flight: Flight
    cache: MemoryStore
    link: RedisLink | None = None


def memory_backends(max_bytes: int) -> Backends:
    """One process alone: the static build, the CLI, a server without Redis."""
    cache = MemoryStore(max_bytes)
    return Backends(cache, MemoryControl(), Windows(), SingleFlight(), cache)


def make_backends(cache_url: str | None, *, max_bytes: int, fresh_for: float, fetch_deadline: float,
                  connections: int = CONNECTIONS) -> Backends:
    """Raises ValueError for a cache URL that is not a Redis URL. `connections`: to Redis, at most."""
    if not cache_url:
        return memory_backends(max_bytes)
    link = RedisLink(cache_url, connections=connections)
    cache = MemoryStore(max_bytes)
    store = TieredStore(cache, RedisStore(link, room=Room(link)), fresh_for=fresh_for,
                        recheck=min(fresh_for, LOCAL_RECHECK))
    return Backends(store, RedisControl(link), redis_windows(link),
                    RedisFlight(link, lock_ttl=fetch_deadline + LOCK_MARGIN), cache, link)
