"""The data that flows from the parser through filters to the renderers: what is read of a forum (`Topic`,
`Post`, `Listing`, ...) is selected as it was read, and only what a feed keeps becomes an `Entry`, the one
thing the renderers take.

Frozen: a parsed listing is cached and shared between requests and threads, so nothing downstream may mutate
it; enrichment (full content) makes new copies (`merged`). Frozen dataclasses, but `Topic` and `Entry`, frozen
`msgspec.Struct`s, for speed (`Topic`'s docstring).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
"""What XML 1.0 cannot carry: C0 controls but tab, newline and carriage return, U+FFFE, U+FFFF and lone
surrogates. The parsers drop them from what they read (the JSON ones make a lone surrogate escape U+FFFD,
`json_pages.load_json`) and the renderers from what they write."""
# Every byte of UTF-8 except the C0 controls XML refuses: `bytes.translate` deleting these leaves exactly the
# refused controls (their bytes appear in UTF-8 only as themselves). bench row 3, "parse real page": the
# regex scan of a whole page took a third of the parse.
_XML_VALID_BYTES = bytes(b for b in range(256) if not (b <= 0x08 or b in (0x0B, 0x0C) or 0x0E <= b <= 0x1F))


class Topic(msgspec.Struct, frozen=True):
    """One topic as a list or its own page gives it. A frozen `msgspec.Struct`, where the other models are frozen
    dataclasses: made 30 times a list page, and a frozen dataclass's `__init__`, which sets each of its 21 fields
    through `object.__setattr__`, took a sixth of the whole parse (33,000 instructions a topic, where this takes
    2,300: bench row 3, "parse real page (flattened, 30 topics)"). Copies are made with `msgspec.structs.replace`;
    the codec reads its fields as a dataclass's (`msgspec.structs.fields`), the store sizes it (`_topic_held`)."""

    id: int
    title: str
    url: str
    author: str | None = None
    author_url: str | None = None
    replies: int | None = None
    last_posted_at: datetime | None = None
    excerpt: str | None = None
    # Filled when the topic's own page was read (content=full), or from a JSON list, which carries all
    # but the content and the category's name.
    created_at: datetime | None = None
    content_html: str | None = None
    category: str | None = None
    tags: tuple[str, ...] = ()
    # Only JSON lists carry these (the Markdown lists do not).
    category_id: int | None = None
    likes: int | None = None
    views: int | None = None
    # A member's notification or bookmark (discourse/personal.py) is a row of their own list about a topic, not
    # the topic: its id there (`{forum}/my/notifications#ID`, `{forum}/my/activity/bookmarks#ID`), which its
    # entry takes (`render.meta.topic_entry`). None for a topic.
    personal_id: str | None = None
    # Whether the list shows it pinned at its top (JSON lists' `pinned`); None where the list does not say
    # (no Markdown dialect marks it), so that a filter on it must read the JSON list of the same page.
    pinned: bool | None = None
    # The topic's picture as the forum lists it (JSON lists' `image_url`), absolute: the entry's thumbnail.
    image_url: str | None = None
    # The author's picture (JSON lists' sideloaded `users[].avatar_template`), absolute: JSON Feed's `avatar`.
    author_avatar: str | None = None
    # Where a JSON list orders it (core's `bumped_at`, lib/topic_query.rb `apply_ordering`): a close, pin or other
    # small action moves `last_posted_at` and not this, an edit of the last post this and not that (a digest
    # places a topic by this, `feeds/select/digest.py`). None on Markdown lists, which do not carry it.
    bumped_at: datetime | None = None


def merged(topic: Topic, more: Topic | None, names: Iterable[str], *, keep: bool = False) -> Topic:
    """`topic` with `more`'s value of each field in `names` that `more` has (anything but None or an empty
    tuple): in place of the topic's own, or with `keep` only where the topic has none. The one way a topic
    takes what another read of it adds: its own page (`feeds/sources/topic_pages.py`), the JSON list of a Markdown
    list's page (`feeds/sources/reads.py`)."""
    if more is None:
        return topic
    found: dict[str, Any] = {}
    for name in names:
        value = getattr(more, name)
        if value is None or value == () or (keep and getattr(topic, name) not in (None, ())):
            continue
        found[name] = value
    return msgspec.structs.replace(topic, **found) if found else topic


EntryKind = Literal["topic", "post", "digest", "personal"]
"""What a feed's entry stands for: a topic; one post (`feeds/sources/post_feeds.py`); a period of a digest
(`feeds/select/digest.py`); a member's notification or bookmark (`Topic.personal_id`)."""


class Entry(msgspec.Struct, frozen=True):
    """One item of a feed, as every format writes it and the `.html` view shows it (`render/`): what a topic
    (`render.meta.topic_entry`), a post or a digest's period becomes once it is selected. Its strings are as
    read; the renderers remove what XML cannot carry and make its URLs URIs. A frozen `msgspec.Struct`, as
    `Topic` is and for its reason: made for each entry of every feed built (bench row 2, "cold feed (fetch +
    parse + filter + render) vs RSS-Bridge")."""

    kind: EntryKind
    id: str  # Atom `id`, RSS `guid`, JSON `id`: stable across edits, replies and hosts
    link: str  # its page: the entry's one alternate link
    title: str  # never blank: whoever makes an entry names one that has none
    author: str | None = None
    author_url: str | None = None
    author_avatar: str | None = None  # an absolute http(s) URL
    published: datetime | None = None  # created: a topic's first post, a post's own time, a period's start
    updated: datetime | None = None  # a topic's last post, a post's last edit, a period's newest activity
    summary: str | None = None  # plain text (an excerpt)
    content_html: str | None = None  # sanitised HTML (a first post, a post, a digest's list)
    category: str | None = None  # its name
    tags: tuple[str, ...] = ()
    replies: int | None = None  # where known: a topic's (a post's or a period's count is not)
    thumbnail: str | None = None  # an absolute http(s) URL
    comments: str | None = None  # the page its discussion is on: a topic's own, a post's topic's
    post_number: int | None = None  # a post's number in its topic (the `.html` view shows it)


@dataclass(frozen=True, slots=True)
class Listing:
    title: str
    base_url: str
    dialect: str
    topics: tuple[Topic, ...]
    url: str | None = None
    page: int = 0
    next_page_url: str | None = None
    previous_page_url: str | None = None
    # Topic blocks that were malformed and left out; a good list with a bad block is still a list.
    skipped: int = 0
    # Set by the service on a page of a user's own list (`/topics/created-by/USER`), never by a parser: that
    # list holds the topics they started (of the feed's category, when it names one) and nothing else.
    started_by: str | None = None
    # Set by the service on a Markdown page whose topics took their figures from the JSON list of the same page
    # (`feeds.sources.reads._completed`), never by a parser: the fields it no longer lacks (`lacks_of`).
    completed: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Site:
    """How a forum presents itself (`/site/basic-info.json`): its pictures, absolute http(s) URLs or None where it
    has none, and its language as an IETF tag (`pt-BR`)."""

    logo_url: str | None = None  # the header's logo, usually wide
    icon_url: str | None = None  # square: the small logo, else the touch icon, else the favicon
    favicon_url: str | None = None
    language: str | None = None


@dataclass(frozen=True, slots=True)
class Category:
    name: str
    slugs: str  # "compiler" or "hardware/gpu": the path between /c/ and the id
    id: int
    description: str = ""
    # Its children's ids, where the directory says (`subcategory_ids` in JSON; `()` is a leaf); None where it
    # does not, so that whoever needs the level below must ask the forum for it.
    subcategory_ids: tuple[int, ...] | None = None

    @property
    def value(self) -> str:
        """How the front page's form names the category: the path of its feed, `slugs/id`."""
        return f"{self.slugs}/{self.id}"


def has_xml_invalid(text: str) -> bool:
    """`XML_INVALID.search(text)`, for long texts (a whole page, a whole feed): a lone surrogate has no UTF-8."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return bool(data.translate(None, _XML_VALID_BYTES)) or "\ufffe" in text or "\uffff" in text


def iso_utc(moment: datetime | None) -> str | None:
    """The `YYYY-MM-DDTHH:MM:SSZ` form the expected fixtures and JSON output use (RFC 3339's, as JSON Feed asks):
    `isoformat`, whose year always has four digits, where `strftime`'s `%Y` has none added under glibc (the
    year 999 as `999`)."""
    if moment is None:
        return None
    return moment.astimezone(UTC).replace(tzinfo=None, microsecond=0).isoformat() + "Z"


def listing_to_dict(listing: Listing) -> dict[str, Any]:
    """Plain JSON-ready form: exactly the keys of the `*.expected.json` files, plus a few extras."""
    return {
        "title": listing.title,
        "url": listing.url,
        "page": listing.page,
        "dialect": listing.dialect,
        "base_url": listing.base_url,
        "next_page_url": listing.next_page_url,
        "previous_page_url": listing.previous_page_url,
        "skipped": listing.skipped,
        "topics": [
            {
                "id": t.id,
                "title": t.title,
                "url": t.url,
                "author": t.author,
                "author_url": t.author_url,
                "replies": t.replies,
                "last_posted_at": iso_utc(t.last_posted_at),
                "excerpt": t.excerpt,
            }
            for t in listing.topics
        ],
    }


@dataclass(frozen=True, slots=True)
class Post:
    """One readable post. `cooked` is core's HTML, unsanitised (it must go through the nh3 cleaner before any
    feed carries it), None where the answer has only `excerpt` (plain text)."""

    topic_id: int
    post_number: int
    post_id: int | None
    username: str | None
    created_at: datetime | None
    updated_at: datetime | None
    cooked: str | None
    excerpt: str | None = None
    topic_title: str | None = None
    topic_slug: str | None = None
    category_id: int | None = None
    avatar_template: str | None = None
    """Its author's picture as core's serializers send it (`{size}` left in): the entry makes it a URL."""


@dataclass(frozen=True, slots=True)
class TopicHead:
    """What `/t/ID.json` says about a topic: for its post feed, its first page of posts and the ids of all of
    them, in order; for `content=full`, its creation date, tags and first post."""

    id: int
    title: str
    slug: str
    category_id: int | None
    stream: tuple[int, ...]
    posts: tuple[Post, ...]
    # post id -> its Post, or None for an id of the first page that is no readable post (a small action)
    read: tuple[tuple[int, Post | None], ...] = ()
    skipped: int = 0
    # A mega topic (core's TopicView::MEGA_TOPIC_POSTS_COUNT posts or more) comes without its stream but with
    # `lastId` and its highest post number, from which feeds/sources/post_feeds.py asks for the ids of its end; on the
    # end as read so far, `after_number` is the post number its ids come after.
    last_id: int | None = None
    highest_post_number: int | None = None
    after_number: int | None = None
    created_at: datetime | None = None
    tags: tuple[str, ...] = ()
    # Post 1's cooked HTML, unsanitised (the nh3 cleaner runs before any feed carries it), or None when the
    # page does not start at post 1.
    first_post_html: str | None = None
    # Why the page gives a post feed nothing (a stream or posts that are not what core sends), when it does
    # not: what `content=full` reads of it is still read.
    unreadable: str | None = None
