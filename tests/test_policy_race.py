"""The cache policy's one race between looking and building, without timing: a build that another request
finished after this one looked at the cache (and found nothing) and before this one led a build of its own.
No flight is left to join then; before the fix the second request asked the forum again for what it had
just given (a fresh clone's CI saw `/latest.json` fetched twice by one static build)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from feedbridge.config import Settings
from feedbridge.feeds.admission.policy import CachePolicy
from feedbridge.store.control import MemoryControl
from feedbridge.store.memory import MemoryStore, SingleFlight
from tests.appserver import serving, settings_for
from tests.upstream import FakeForum

KEY = "page:https://forum.example/latest.json"


@dataclass
class Entry:
    stored_at: float
    text: str


class LookThenAnother(MemoryStore):
    """A store whose first look at `KEY` is answered as it was, and then, before the asker goes on, another
    request runs its whole `get` of the key (`interleave`): the order two threads can take."""

    def __init__(self) -> None:
        super().__init__(1 << 20)
        self.interleave: Any = None

    def get(self, key: str) -> Any:
        seen = super().get(key)
        if key == KEY and self.interleave is not None:
            interleave, self.interleave = self.interleave, None
            interleave()
        return seen


def test_a_build_stored_between_a_look_and_a_lead_is_not_run_again() -> None:
    store = LookThenAnother()
    policy = CachePolicy(Settings(), store, SingleFlight(), MemoryControl())
    builds: list[str] = []

    def build(_held: Entry | None, _building: Any) -> Entry:
        builds.append(f"build {len(builds) + 1}")
        return Entry(time.time(), builds[-1])

    other: list[Any] = []
    store.interleave = lambda: other.append(policy.get(KEY, build, caller=None))
    got = policy.get(KEY, build, caller=None)
    assert builds == ["build 1"]  # the other request's, and only it
    assert [g.cache for g in other] == ["miss"] and other[0].entry.text == "build 1"
    assert got.entry.text == "build 1"


def test_a_key_that_is_not_fresh_is_built_by_its_leader() -> None:
    store = LookThenAnother()
    policy = CachePolicy(Settings(cache_ttl=0), store, SingleFlight(), MemoryControl())
    builds: list[str] = []

    def build(_held: Entry | None, _building: Any) -> Entry:
        builds.append(f"build {len(builds) + 1}")
        return Entry(time.time(), builds[-1])

    store.interleave = lambda: policy.get(KEY, build, caller=None)
    got = policy.get(KEY, build, caller=None)
    assert builds == ["build 1", "build 2"] and got.entry.text == "build 2"  # no copy is fresh with a TTL of 0


class Counted(LookThenAnother):
    """`LookThenAnother`, counting its looks at `KEY`."""

    looks = 0

    def get(self, key: str) -> Any:
        self.looks += key == KEY
        return super().get(key)


def test_a_cold_read_looks_again_only_when_a_flight_ended_since_it_looked() -> None:
    """The one freshness check per read: the store is looked at again before a build only when a flight of this
    process ended after the look (the race above). With no other request, a cold read looks once; a flight of
    another key ending in between makes it look twice, since that one could have stored it."""
    store, flight = Counted(), SingleFlight()
    policy = CachePolicy(Settings(), store, flight, MemoryControl())

    def build(_held: Entry | None, _building: Any) -> Entry:
        return Entry(time.time(), "built")

    assert policy.get(KEY, build, caller=None).cache == "miss"
    assert store.looks == 1
    store.delete(KEY)
    store.interleave = lambda: flight.do("another key", lambda: None, 1)
    assert policy.get(KEY, build, caller=None).cache == "miss"
    assert store.looks == 3


def test_requests_waiting_on_a_forums_fetch_with_a_copy_held_take_that_forums_part_of_the_slots() -> None:
    """With two forums and four cold slots, a forum holds two. Requests waiting on another's fetch of forum
    A's page (a copy held) took a process slot without A's part, so four of them took every slot and forum B's
    cold feeds got 503 (the review of RELIABILITY.md row 67's change). The third now gets the copy at once."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from feedbridge.config import parse_forum
    from feedbridge.feeds.admission.callers import Caller

    settings = Settings(forums=(parse_forum("https://a.example"), parse_forum("https://b.example")), cold_slots=4)
    store, flight = MemoryStore(1 << 20), SingleFlight()
    store.set(KEY, Entry(time.time() - 3600, "old"), 86400)  # held, stale
    policy = CachePolicy(settings, store, flight, MemoryControl())
    release = threading.Event()
    callers = [Caller(f"client {n}", time.monotonic() + 30) for n in range(3)]
    with ThreadPoolExecutor(4) as pool:
        pool.submit(flight.do, KEY, lambda: release.wait(10), 10)  # another request's fetch, under way
        time.sleep(0.2)
        waiting = [pool.submit(policy.get, KEY, lambda _held, _building: Entry(time.time(), "new"), caller=caller,
                               forum="a.example") for caller in callers]
        time.sleep(0.5)
        done = [future.done() for future in waiting]
        release.set()
        third = waiting[2].result()
    try:
        assert done == [False, False, True], done  # two wait on the fetch with A's part; the third may not
        assert third.cache == "stale" and third.entry.text == "old" and "fetched already" in (third.stale_reason or "")
    finally:
        for caller in callers:
            caller.end()


def test_a_web_request_looks_at_its_feeds_key_once(upstream: FakeForum) -> None:
    """Over a socket, a cache TTL of 0 (no copy is ever fresh): the hit path's look at a known URL's feed key,
    which finds no fresh copy, is the one the cache policy decides with (handed on with the request), and a
    conditional request, which the hit path passes by, is looked at once by the policy."""
    with serving(settings_for(upstream.url, cache_ttl=0)) as (app, flask_app):
        url = app.feed_url("/c/compiler/5.atom")
        first = httpx.get(url, timeout=30)
        assert first.status_code == 200 and first.headers["X-Feedbridge-Cache"] == "miss"
        store = flask_app.extensions["feedbridge"].public.store
        looks: list[str] = []
        real = store.get

        def get(key: str) -> Any:
            if key.startswith("feed:"):  # the feed's (`store.keys.feed`); its pages' and its forum's are others
                looks.append(key)
            return real(key)

        store.get = get
        again = httpx.get(url, timeout=30)
        assert again.status_code == 200 and again.headers["X-Feedbridge-Cache"] == "miss"
        assert len(looks) == 1
        conditional = httpx.get(url, headers={"If-None-Match": first.headers["ETag"]}, timeout=30)
        assert conditional.status_code in (200, 304)
        assert len(looks) == 2
