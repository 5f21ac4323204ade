"""Single-flight across processes: one upstream fetch per cold key among every worker of every instance.

Threads of one worker first share one attempt (`SingleFlight`); that attempt then tries redis-py's `Lock`
without blocking. The owner runs the work, which stores its result in the shared store, and releases the
lock; the lock's token check means a lock that expired and was taken by someone else is never released
by the late first owner. Everyone else polls the shared store (`reread`) with a short backoff rather
than blocking on the lock, since the result they wait for lands in the store, not in the lock; if the
owner dies, its lock expires and the next poller takes over.

The lock TTL outlasts one upstream fetch (the fetcher's total timeout) so a live owner does not lose its
lock mid-fetch. If Redis fails, the flight carries on as the in-process single-flight alone: more fetches
from the forum for a while, no failed request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from redis.exceptions import LockNotOwnedError
from redis.lock import Lock

from feedbridge.errors import UpstreamTimeout
from feedbridge.store.memory import SingleFlight
from feedbridge.store.redis_store import RedisLink, redis_key

log = logging.getLogger(__name__)
T = TypeVar("T")

FIRST_POLL = 0.02
MAX_POLL = 0.25
MIN_LOCK_TTL = 0.001  # redis-py reads a zero timeout as "never expires": a dead owner's lock would stay


class RedisFlight:
    def __init__(self, link: RedisLink, lock_ttl: float):
        self.link = link
        self.lock_ttl = max(lock_ttl, MIN_LOCK_TTL)
        self.local = SingleFlight()

    def do(self, key: str, fn: Callable[[], T], wait: float, reread: Callable[[], T | None]) -> T:
        return self.local.do(key, lambda: self._across(key, fn, wait, reread), wait, reread)

    def busy(self, key: str) -> bool:
        return self.local.busy(key)

    @property
    def ended(self) -> int:
        """This process's ended calls: what another process stored meanwhile, its owner rereads (`_across`)."""
        return self.local.ended

    def _across(self, key: str, fn: Callable[[], T], wait: float, reread: Callable[[], T | None]) -> T:
        """Own the lock and run `fn`, or wait for the owner's result; UpstreamTimeout after `wait` seconds.

        Waiters give up rather than fetch themselves: an owner slower than `wait` means the forum is
        slow, and more requests would not help it; the service serves its stale copy instead.
        """
        # One Lock per attempt, acquired and released by the same thread or greenlet and never shared:
        # the token needs no thread-local slot (which under gevent would be a greenlet's).
        lock = self.link.client.lock(redis_key(key) + ":lock", timeout=self.lock_ttl, blocking=False,
                                     thread_local=False)
        deadline = time.monotonic() + wait
        pause = FIRST_POLL
        while True:
            owner = self.link.run(lambda _: bool(lock.acquire()))
            if owner is None:
                return fn()  # Redis unavailable: this process's single-flight is all we have
            if owner:
                try:
                    # The previous owner may have finished between our store miss and our lock.
                    done = reread()
                    return done if done is not None else fn()
                finally:
                    self.link.run(lambda _: _release(lock))
            done = reread()
            if done is not None:
                return done
            left = deadline - time.monotonic()
            if left <= 0:
                raise UpstreamTimeout(f"waited {wait:g}s for another worker to fetch the same page")
            time.sleep(min(pause, left))
            pause = min(pause * 1.5, MAX_POLL)


def _release(lock: Lock) -> None:
    """Release the lock if it is still ours; one that expired (and may be someone else's now) is left be.

    `LockNotOwnedError` is a `RedisError`, but not a Redis failure: it must not reach the link's breaker.
    """
    try:
        lock.release()
    except LockNotOwnedError:
        log.info("lock %s was no longer ours at release (it expired, or Redis lost it); left alone", lock.name)
