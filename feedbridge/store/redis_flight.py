"""Single-flight across processes: one upstream fetch per cold key among every worker of every instance.

Threads of one worker first share one attempt (`SingleFlight`); that attempt then takes a Redis lock,
`SET <lock> <token> NX PX <ttl>`. The owner runs the work, which stores its result in the shared store,
and releases the lock with a compare-and-delete script, so a lock that expired and was taken by someone
else is never released by the late first owner. Everyone else polls the shared store (`reread`) with a
short backoff; if the owner dies, its lock expires and the next poller takes over.

The lock TTL outlasts one upstream fetch (the fetcher's total timeout) so a live owner does not lose its
lock mid-fetch. If Redis fails, the flight carries on as the in-process single-flight alone: more fetches
from the forum for a while, no failed request.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import TypeVar

from feedbridge.errors import UpstreamTimeout
from feedbridge.store.memory import SingleFlight
from feedbridge.store.redis_store import RedisLink, redis_key

T = TypeVar("T")

# KEYS[1] the lock, ARGV[1] the owner's token: delete only if we still own it.
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""
FIRST_POLL = 0.02
MAX_POLL = 0.25


class RedisFlight:
    def __init__(self, link: RedisLink, lock_ttl: float):
        self.link = link
        self.lock_ms = max(int(lock_ttl * 1000), 1)
        self.local = SingleFlight()
        self._release = link.client.register_script(_RELEASE)

    def do(self, key: str, fn: Callable[[], T], wait: float, reread: Callable[[], T | None]) -> T:
        return self.local.do(key, lambda: self._across(key, fn, wait, reread), wait, reread)

    def busy(self, key: str) -> bool:
        return self.local.busy(key)

    def _across(self, key: str, fn: Callable[[], T], wait: float, reread: Callable[[], T | None]) -> T:
        """Own the lock and run `fn`, or wait for the owner's result; UpstreamTimeout after `wait` seconds.

        Waiters give up rather than fetch themselves: an owner slower than `wait` means the forum is
        slow, and more requests would not help it; the service serves its stale copy instead.
        """
        lock = redis_key(key) + ":lock"
        token = secrets.token_hex(16)
        deadline = time.monotonic() + wait
        pause = FIRST_POLL
        while True:
            owner = self.link.run(lambda client: bool(client.set(lock, token, nx=True, px=self.lock_ms)))
            if owner is None:
                return fn()  # Redis unavailable: this process's single-flight is all we have
            if owner:
                try:
                    # The previous owner may have finished between our store miss and our lock.
                    done = reread()
                    return done if done is not None else fn()
                finally:
                    self.link.run(lambda client: self._release(keys=[lock], args=[token], client=client))
            done = reread()
            if done is not None:
                return done
            left = deadline - time.monotonic()
            if left <= 0:
                raise UpstreamTimeout(f"waited {wait:g}s for another worker to fetch the same page")
            time.sleep(min(pause, left))
            pause = min(pause * 1.5, MAX_POLL)
