"""What the store holds: each cached value carries the moment it was stored, so every reader can tell
fresh from stale with one rule (`feedbridge.feeds.cached`).

These are plain frozen data (see `feedbridge.store.codec` for how they cross to Redis): the store is a
leaf of the tree and knows nothing of parsing or rendering.
"""

from __future__ import annotations

from dataclasses import dataclass

from feedbridge.models import Category, Listing, Topic


@dataclass(frozen=True, slots=True)
class PageEntry:
    """A parsed upstream page and the validators to revalidate it with."""

    listing: Listing
    etag: str | None
    last_modified: str | None
    stored_at: float
    size: int


@dataclass(frozen=True, slots=True)
class FeedEntry:
    """Rendered feed bytes: a hit is served without parsing or rendering anything."""

    body: bytes
    etag: str
    last_modified: float | None
    stored_at: float

    @property
    def size(self) -> int:
        return len(self.body)


@dataclass(frozen=True, slots=True)
class TopicEntry:
    """A topic enriched from its own Markdown (first post as safe HTML, creation date, category, tags).

    Keyed by topic id and last activity: a topic is read again only when it had new activity.
    `topic` is None for a topic whose page is missing: the entry keeps its excerpt.
    """

    topic: Topic | None
    stored_at: float
    size: int


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    """A forum's categories directory, cached like list pages."""

    categories: tuple[Category, ...]
    stored_at: float


@dataclass(frozen=True, slots=True)
class SourceEntry:
    """Which source (`markdown` or `json`) reads an `auto` forum, and when that was last checked.

    Shared through Redis so every worker detects a forum once per re-check period, not once each.
    `reason` and `status` are why Markdown was not chosen (the probe's error message and HTTP status),
    quoted when the JSON lists fail too.
    """

    source: str
    stored_at: float
    reason: str | None = None
    status: int | None = None


@dataclass(frozen=True, slots=True)
class FailureEntry:
    """A remembered upstream failure (negative caching): while it lives, the key's fetch is not repeated and
    the same error is answered. `kind` is "not_found", "timeout" or "error" (the service maps it back to
    its exception class); the store holds it for the negative TTL."""

    kind: str
    message: str
    stored_at: float
