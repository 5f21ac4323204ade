"""The cross-process lock of `RedisFlight` (redis-py's `Lock`) against a real redis-server.

`tests/test_redis.py` has the flight's main cases (one run among many callers, a dead owner's lock
expiring, waiters timing out); these are the edges of the lock itself: an owner that outlives its lock,
Redis dying while an owner works, and the TTL the service gives the lock.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from feedbridge.store import redis_store
from feedbridge.store.backends import LOCK_MARGIN, make_backends
from feedbridge.store.redis_flight import RedisFlight
from feedbridge.store.redis_store import RedisLink, redis_key
from tests.redis_server import RedisServer, redis_module, redis_server  # noqa: F401

KEY = "page:" + "e" * 32
LOCK = redis_key(KEY) + ":lock"


@pytest.fixture(autouse=True)
def long_breaker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A breaker that, once opened, stays open for the whole test: `link.run` answering proves it closed."""
    monkeypatch.setattr(redis_store, "BREAKER_COOLDOWN", 60.0)


def failures(link: RedisLink, monkeypatch: pytest.MonkeyPatch) -> list[BaseException]:
    """What `link` counted as a Redis failure from now on."""
    failed: list[BaseException] = []
    original = link._failed

    def counted(exc: BaseException) -> None:
        failed.append(exc)
        original(exc)

    monkeypatch.setattr(link, "_failed", counted)
    return failed


def test_an_owner_that_outlived_its_lock_leaves_the_next_owners_lock_alone(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first owner's lock expires mid-work and a second process takes it; the first owner's release
    then deletes nothing, and its not-owned answer is not a Redis failure (the breaker stays closed)."""
    client = redis_server.client()
    first_link, second_link = RedisLink(redis_server.url), RedisLink(redis_server.url)
    first_failed, second_failed = failures(first_link, monkeypatch), failures(second_link, monkeypatch)
    first, second = RedisFlight(first_link, lock_ttl=0.2), RedisFlight(second_link, lock_ttl=30)
    first_owns, second_owns, first_done = threading.Event(), threading.Event(), threading.Event()
    held_by_second: list[bytes | None] = []

    def first_work() -> str:
        first_owns.set()
        assert second_owns.wait(10)  # outlives its 0.2 s lock: the second flight took it over meanwhile
        return "first"

    def second_work() -> str:
        second_owns.set()
        assert first_done.wait(10)  # still working when the first owner releases
        held_by_second.append(client.get(LOCK))
        return "second"

    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(first.do, KEY, first_work, 10, lambda: None)
        assert first_owns.wait(10)
        two = pool.submit(second.do, KEY, second_work, 10, lambda: None)  # polls until the first lock expires
        assert one.result(15) == "first"
        first_done.set()
        assert two.result(15) == "second"
    assert held_by_second and held_by_second[0] is not None  # the first owner's release did not delete it
    assert client.get(LOCK) is None  # the second owner released its own
    assert first_failed == [] and second_failed == []
    assert first_link.run(lambda c: c.ping()) is True  # the breaker is closed: Redis is still used


def test_redis_killed_mid_flight_carries_on_in_process(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis dies while one process owns the lock and another waits on it: the waiter fetches itself
    instead of timing out, the owner returns its result though its release fails, and each process
    counts one failure (the breaker then keeps it off Redis)."""
    owner_link, waiter_link = RedisLink(redis_server.url), RedisLink(redis_server.url)
    owner_failed, waiter_failed = failures(owner_link, monkeypatch), failures(waiter_link, monkeypatch)
    owner, waiter = RedisFlight(owner_link, lock_ttl=30), RedisFlight(waiter_link, lock_ttl=30)
    locked, killed = threading.Event(), threading.Event()
    polls: list[int] = []

    def owner_work() -> str:
        locked.set()
        assert killed.wait(10)
        return "owner"

    def reread() -> None:
        polls.append(1)
        return None

    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(owner.do, KEY, owner_work, 10, lambda: None)
        assert locked.wait(10)
        two = pool.submit(waiter.do, KEY, lambda: "waiter", 10, reread)
        while not polls:  # the waiter found the lock taken and is polling the store
            assert not two.done(), two.result()
            time.sleep(0.01)
        redis_server.kill()
        assert two.result(15) == "waiter"
        killed.set()
        assert one.result(15) == "owner"
    assert len(owner_failed) == 1 and len(waiter_failed) == 1


def test_the_service_lock_outlasts_one_upstream_fetch(redis_server: RedisServer) -> None:
    """`make_backends` gives the lock the fetcher's whole deadline and a margin, read from Redis mid-work."""
    backends = make_backends(redis_server.url, max_bytes=1 << 20, fresh_for=60, fetch_deadline=20)
    seen: list[int] = []

    def work() -> str:
        seen.append(redis_server.client().pttl(LOCK))
        return "fetched"

    assert backends.flight.do(KEY, work, 5, lambda: None) == "fetched"
    assert len(seen) == 1 and (20 + LOCK_MARGIN - 5) * 1000 < seen[0] <= (20 + LOCK_MARGIN) * 1000
    assert redis_server.client().exists(LOCK) == 0
