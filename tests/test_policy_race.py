"""The cache policy's one race between looking and building, without timing: a build that another request
finished after this one looked at the cache (and found nothing) and before this one led a build of its own.
No flight is left to join then; before the fix the second request asked the forum again for what it had
just given (a fresh clone's CI saw `/latest.json` fetched twice by one static build)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from feedbridge.config import Settings
from feedbridge.feeds.admission.policy import CachePolicy
from feedbridge.store.control import MemoryControl
from feedbridge.store.memory import MemoryStore, SingleFlight

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

    def build(_held: Entry | None) -> Entry:
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

    def build(_held: Entry | None) -> Entry:
        builds.append(f"build {len(builds) + 1}")
        return Entry(time.time(), builds[-1])

    store.interleave = lambda: policy.get(KEY, build, caller=None)
    got = policy.get(KEY, build, caller=None)
    assert builds == ["build 1", "build 2"] and got.entry.text == "build 2"  # no copy is fresh with a TTL of 0
