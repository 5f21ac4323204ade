"""The two ways the readers read a forum: live (the cache, else the forum) and from cached copies only.

A feed is built live. When the forum fails and no copy of the feed itself is held, the service builds it
once more from what the cache holds of its parts (a new filter on a known list), and that second build
asks the forum nothing: it has just failed, and asking again would only double the load. Each reader
(`ListReader`, `TopicPages`, `Directory`, `PostFeeds`) is made once over each of these two, which have the
same methods, so no reader carries a mode and `FeedService` tries the live readers, then the cached ones,
in one place.

    entry(key, build)   live: fresh copy, else `build` once (`CachePolicy.get`), the error if it fails
                        cached: the held copy, however old, else NotHeld
    fetch(url)          live: through the `Gate`                      cached: NotHeld
    source(forum)       live: the decided source, probing when due    cached: the record as it is
    moves_on            what lets a read try its second list (a user's own list → the latest list):
                        live: the forum's refusal of the first        cached: no copy of the first
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from feedbridge.config import Forum
from feedbridge.errors import FeedbridgeError, NotHeld, UpstreamError, UpstreamNotFound, UpstreamRefused
from feedbridge.feeds.detect import SourceDetector
from feedbridge.feeds.gate import Gate
from feedbridge.feeds.policy import CachePolicy
from feedbridge.feeds.sources import Source
from feedbridge.upstream.fetcher import Fetched

E = TypeVar("E")


class Reads(Protocol):
    """What a reader reads through (see the module docstring); `signed`: with the forum's key."""

    @property
    def signed(self) -> bool: ...

    @property
    def moves_on(self) -> tuple[type[FeedbridgeError], ...]: ...

    def entry(self, key: str, build: Callable[[E | None], E], what: str, *,
              fresh_for: float | None = None, keep_for: float | None = None) -> E: ...

    def fetch(self, forum: Forum, url: str, what: str, etag: str | None = None,
              last_modified: str | None = None) -> Fetched: ...

    def source(self, forum: Forum) -> Source: ...


@dataclass(frozen=True, slots=True)
class LiveReads:
    policy: CachePolicy
    gate: Gate
    detector: SourceDetector
    moves_on: tuple[type[FeedbridgeError], ...] = (UpstreamNotFound, UpstreamRefused)

    @property
    def signed(self) -> bool:
        return self.gate.signed

    def entry(self, key: str, build: Callable[[E | None], E], what: str, *,
              fresh_for: float | None = None, keep_for: float | None = None) -> E:
        """Without the stale copy: a build from stale parts is the service's decision (`FeedService`)."""
        got = self.policy.get(key, build, stale=False, what=what, fresh_for=fresh_for, keep_for=keep_for)
        return got.entry

    def fetch(self, forum: Forum, url: str, what: str, etag: str | None = None,
              last_modified: str | None = None) -> Fetched:
        return self.gate.fetch(forum, url, etag, last_modified)

    def source(self, forum: Forum) -> Source:
        return self.detector.source(forum)


@dataclass(frozen=True, slots=True)
class CachedReads:
    policy: CachePolicy
    detector: SourceDetector
    signed: bool
    moves_on: tuple[type[FeedbridgeError], ...] = (UpstreamError, NotHeld)

    def entry(self, key: str, build: Callable[[E | None], E], what: str, *,
              fresh_for: float | None = None, keep_for: float | None = None) -> E:
        held: E = self.policy.held(key, what)
        return held

    def fetch(self, forum: Forum, url: str, what: str, etag: str | None = None,
              last_modified: str | None = None) -> Fetched:
        raise NotHeld(f"no copy of {what} to fall back on")

    def source(self, forum: Forum) -> Source:
        return self.detector.decided(forum)
