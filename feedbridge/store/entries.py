"""What the store holds: each cached value carries the moment it was stored, so every reader can tell
fresh from stale with one rule (`feedbridge.feeds.admission.policy`).

These are plain frozen data (see `feedbridge.store.codec` for how they cross to Redis): the store is a
leaf of the tree and knows nothing of parsing or rendering.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from feedbridge.errors import Reason
from feedbridge.models import Category, Listing, Post, Site, Topic, TopicHead


def is_fresh(entry: Any, fresh_for: float) -> bool:
    """The one rule for "fresh", for the cache policy, the hit path and Redis's first level alike: an entry
    stored less than `fresh_for` seconds ago."""
    stored_at = getattr(entry, "stored_at", None)
    return stored_at is not None and time.time() - stored_at < fresh_for


@dataclass(frozen=True, slots=True)
class PageEntry:
    """A parsed upstream page and the validators to revalidate it with; `size` is `listing_bytes(listing)`."""

    listing: Listing
    etag: str | None
    last_modified: str | None
    stored_at: float
    size: int


@dataclass(frozen=True, slots=True)
class FeedEntry:
    """Rendered feed bytes: a hit is served without parsing or rendering anything. `gzipped`: the body's gzip,
    for the readers that take it (`render.formats.gzipped`), None when it has none. `dated`: the date the feed
    gave itself (its newest topic's, or for a list with none the one given before), before which its next build's
    is not (`FeedService._document`)."""

    body: bytes
    etag: str
    last_modified: float | None
    stored_at: float
    gzipped: bytes | None = None
    dated: float | None = None

    @property
    def size(self) -> int:
        return len(self.body) + len(self.gzipped or b"")


@dataclass(frozen=True, slots=True)
class TopicEntry:
    """A topic enriched from its own Markdown (first post as safe HTML, creation date, category, tags).

    Keyed by topic id and last activity: a topic is read again only when it had new activity.
    `topic` is None for a topic whose page is missing: the entry keeps its excerpt. `size` is
    `topic_bytes(topic)`.
    """

    topic: Topic | None
    stored_at: float
    size: int


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    """A forum's categories directory, cached like list pages."""

    categories: tuple[Category, ...]
    stored_at: float

    @property
    def size(self) -> int:
        return _held(self.categories)


@dataclass(frozen=True, slots=True)
class SiteEntry:
    """How a forum presents itself (`feedbridge.feeds.sources.site`); `site` is None for a forum that gives no
    basic info, remembered as such like a present one."""

    site: Site | None
    stored_at: float

    @property
    def size(self) -> int:
        return _held(self.site)


@dataclass(frozen=True, slots=True)
class SourceEntry:
    """The source decision of an `auto` forum (`feedbridge.feeds.sources.dialects`): control state, never evicted.

    `source` is `markdown`, `json`, or `undecided` (no probe has decided yet). `stored_at` is when the
    probe last ran, `due_at` when it runs again. Shared through Redis so every worker detects a forum once
    per re-check period, not once each. `reason` is why Markdown was not chosen (the Markdown probe's
    answer) and `status` the error's status when that answer was a refusal, quoted when the JSON probe
    list is refused too.
    """

    source: str
    stored_at: float
    due_at: float
    reason: str | None = None
    status: int | None = None


@dataclass(frozen=True, slots=True)
class FailureEntry:
    """A remembered upstream failure (negative caching): while it lives, the key's fetch is not repeated and
    the same error is answered, rebuilt from its reason and the forum's status (`errors.upstream_error`);
    the store holds it for the negative TTL."""

    kind: Reason
    message: str
    stored_at: float
    status: int | None = None


@dataclass(frozen=True, slots=True)
class HeadEntry:
    """A topic's `/t/ID.json` head (`feeds.sources.post_feeds.read_head`): its first posts and the ids of all of
    them, with the validators to ask again with; read once for the topic's post feed and `content=full` alike.
    Shared through Redis like the posts read after it."""

    head: TopicHead
    etag: str | None
    last_modified: str | None
    stored_at: float

    @property
    def size(self) -> int:
        return _held(self.head)


@dataclass(frozen=True, slots=True)
class Shown:
    """A post as a post feed keeps it (`feeds.sources.post_feeds`): the post without its cooked HTML, what the
    sanitizer made of that (`content_html`), and when it was read (for the topic TTL)."""

    post: Post
    content_html: str | None
    read_at: float


@dataclass(frozen=True, slots=True)
class PostsEntry:
    """Posts of one topic already read: post id -> its entry, or None for an id that is no readable post.
    Shared through Redis, so every instance reads a topic's posts from the forum once, not once each."""

    posts: tuple[tuple[int, Shown | None], ...]
    stored_at: float

    @property
    def size(self) -> int:
        return _held(self.posts)


@dataclass(frozen=True, slots=True)
class CollectedEntry:
    """The posts of `/posts` or of a user's actions, as read for one `pages=`, newest first."""

    posts: tuple[Shown, ...]
    stored_at: float

    @property
    def size(self) -> int:
        return _held(self.posts)


# --- what an entry holds in a process ------------------------------------------------------------------
#
# The memory store is bounded by the bytes its entries hold, so each is counted by what its parsed objects
# take, not by the length of the text they came from: 200,000 minimal topics are 5 MB of JSON and were
# 56 MB of `Topic`s. The counts are CPython's object sizes (tests/test_hostile_content.py checks them
# against tracemalloc, small pages and large, within a factor of two).

def _held(value: Any) -> int:
    """The bytes `value` holds of its own, with what its fields or items hold: `sys.getsizeof` is O(1) for
    every kind a model holds (a str's length and character width are in its header). None, bools, the
    small ints and the empty tuple are objects shared by everyone, and count nothing."""
    # The fields read in one `attrgetter` call and summed by `map`: "count the bytes a parsed real page
    # holds" (bench/micro.py), 96 → 69 µs a page.
    if value is None or value is True or value is False:
        return 0
    kind = type(value)
    if kind is Topic:
        return _topic_held(value)
    if kind is int:
        return 0 if -5 <= value <= 256 else sys.getsizeof(value)
    if kind is tuple:
        return sys.getsizeof(value) + sum(map(_held, value)) if value else 0
    read = _FIELDS.get(kind)
    return sys.getsizeof(value) if read is None else sys.getsizeof(value) + sum(map(_held, read(value)))


_FIELDS: dict[type, Callable[[Any], tuple[Any, ...]]] = {
    model: attrgetter(*(field.name for field in fields(model)))
    for model in (Category, Listing, Shown, Post, TopicHead, Site)
}
_TOPIC_FIELDS = attrgetter(*Topic.__struct_fields__)


def _topic_held(topic: Topic) -> int:
    """`_held` of a topic, its fields sized in C (`map`, `filter`) rather than one call of `_held` each: a
    topic's fields are strings, numbers, dates, a flag and its tags, and only the tags hold more (their
    strings, counted beside their tuple). What is false (None, False, 0, "", no tags) is shared and left out;
    True and the small ints are shared too and counted, 28 bytes each, an overcount on the side of the
    bound. Bench row 3, "count the bytes a parsed real page holds" (at most a quarter of the parse): once topics
    were quick to make, the count took 1.12M instructions to the parse's 4.38M, and takes 0.69M."""
    return (sys.getsizeof(topic) + sum(map(sys.getsizeof, filter(None, _TOPIC_FIELDS(topic))))
            + sum(map(sys.getsizeof, topic.tags)))


def listing_bytes(listing: Listing) -> int:
    """The bytes a parsed list page holds: its topics, their strings, dates and tags."""
    return _held(listing)


def topic_bytes(topic: Topic | None) -> int:
    """The bytes an enriched topic holds (its first post's HTML, mostly)."""
    return _held(topic)
