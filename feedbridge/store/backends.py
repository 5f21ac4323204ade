"""Choose the cache store and the single-flight for this process from the settings.

Without a cache URL, one process is the whole service: an in-process cache and single-flight. With
one (`FEEDBRIDGE_CACHE_URL` or a PaaS add-on's `REDIS_URL`), every worker of every instance shares
pages, feeds and rate-limit state in Redis and takes a Redis lock before fetching, so the forum sees
one request per page per cache TTL however many workers there are.
"""

from __future__ import annotations

from feedbridge.config import Settings
from feedbridge.errors import ConfigError
from feedbridge.store.memory import Flight, MemoryStore, SingleFlight, Store
from feedbridge.store.redis_flight import RedisFlight
from feedbridge.store.redis_store import RedisLink, RedisStore, TieredStore

# How long a worker trusts its in-process copy before asking Redis whether another worker has a newer one.
LOCAL_RECHECK = 5.0
# Past the fetcher's own deadline, so a live lock owner never loses its lock mid-fetch.
LOCK_MARGIN = 5.0


def make_backends(settings: Settings) -> tuple[Store, Flight]:
    memory = MemoryStore(settings.cache_max_bytes)
    if not settings.cache_url:
        return memory, SingleFlight()
    try:
        link = RedisLink(settings.cache_url)
    except ValueError as exc:
        raise ConfigError(f"FEEDBRIDGE_CACHE_URL / REDIS_URL: {exc}") from None
    store = TieredStore(memory, RedisStore(link), fresh_for=settings.cache_ttl,
                        recheck=min(settings.cache_ttl, LOCAL_RECHECK))
    return store, RedisFlight(link, lock_ttl=settings.total_timeout + LOCK_MARGIN)
