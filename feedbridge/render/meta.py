"""What every format of a feed is made of (`FeedMeta`, its `Entry`s, a topic's as `topic_entry` makes it) and
the rules all three keep alike, so Atom, RSS (`render.documents`) and JSON Feed (`render.json_feed`) cannot
drift apart on them.

Identity: a topic's entry id (Atom `id`, RSS `guid`, JSON `id`) is `{forum}/t/{topic id}`, built from the
forum and the topic id only. The slug follows title edits and the dates move with every reply; the id
never does, so an edited or revived topic stays one entry in the reader instead of a duplicate.

Dates: the topic lists carry only the time of the last post. That is the entry's `updated` (JSON
`date_modified`). Atom `published` / JSON `date_published` appear only when the creation time is
known (full-content mode reads it from the topic). RSS has a single date per item, `pubDate`, and
readers sort by it: when the creation time is unknown it carries the last activity instead. A reader
then shows recently active topics first, like Discourse's own list does, and since the guid is
stable a topic that gets a new reply moves up rather than appearing twice.

No date is made up: an invented one (1970, or the time of rendering) makes readers show a wrong date
or see a change that did not happen. What has no true value is left out: an undated topic has no RSS
`pubDate` or JSON `date_modified`, and an RSS channel with no dated topic has no `lastBuildDate`. Atom
requires `updated` on the feed and on every entry; there the feed's date is the newest date of its
topics, else `FeedMeta.updated` (when the list was read), and an undated entry takes the feed's date.

A date from the future is the forum's word about one topic, never the feed's (`newest_believed`): the feed's own
date (Atom's `updated`, RSS's `lastBuildDate`) is the newest entry date no later than when the feed was built
(`FeedMeta.built`) plus `CLOCK_SKEW`. A topic dated 9999, by a hostile forum or a broken clock, had dated the
feed 9999, and every undated entry with it: a reader's "newest first" and "changed since" saw the feed as
changed forever after and nothing newer as newer. Entries keep the dates the forum gives them, future ones
too: a reader shows what the forum says of its topic (its id stays one entry), where a date clamped to the
build would be made up, and would move at every build, a new ETag and a new download at every poll.

URLs: every URL written (links, ids, author URIs) goes through `uris.iri_to_uri`, because a forum's
links and usernames (`/u/Zoë`) may be IRIs where RSS and JSON Feed consumers check for URIs.

Characters XML cannot carry (C0 controls other than tab/newline/carriage return, U+FFFE, U+FFFF and
lone surrogates) are removed from every string before rendering, in JSON too: one stray byte in a
forum post must not make the whole feed unparsable, or make lxml raise.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeAlias
from urllib.parse import urlsplit

import msgspec

from feedbridge.models import XML_INVALID, Entry, Listing, Site, Topic, has_xml_invalid
from feedbridge.render.turns import take_turn
from feedbridge.render.uris import iri_to_uri, is_uri


@dataclass(frozen=True, slots=True)
class FeedMeta:
    title: str  # names forum, list and filters, e.g. "dev-discuss.pytorch.org · compiler · author: smth"
    forum_url: str  # forum base URL, maybe with a subfolder path
    html_url: str  # rel=alternate: the forum's HTML page of this list
    feed_id: str  # stable feed id (a URL or other IRI, without spaces; the caller decides)
    self_url: str | None = None  # rel=self, the feed's own URL where known
    description: str | None = None  # derived from the title when None (RSS requires one)
    stylesheet_url: str | None = None  # an XSLT that lets browsers show Atom/RSS as a readable page
    # When the list was read (timezone-aware): Atom's feed `updated` when no topic carries a date. The
    # default is the moment this FeedMeta is made, for a caller that has just read the list; rendering one
    # FeedMeta twice still gives the same bytes.
    updated: datetime = field(default_factory=lambda: datetime.now(UTC).replace(microsecond=0))
    site: Site | None = None  # how the forum presents itself: the feed's icon, logo and language
    ttl: int | None = None  # seconds a copy is served before the forum is asked again: RSS's refresh hints
    # When the feed is built from what was read (timezone-aware; a saved list's date for a saved list): no date
    # past it by more than `CLOCK_SKEW` is the feed's own (`newest_believed`). A bound, never written: the bytes do not
    # depend on it unless an entry is dated in the future.
    built: datetime = field(default_factory=lambda: datetime.now(UTC).replace(microsecond=0))
    # The date the copy this feed replaces gave itself (the cache's, or the file's written before), before which
    # its own is not (`feed_updated`): None for a feed built afresh.
    floor: datetime | None = None


CLOCK_SKEW = timedelta(minutes=5)
"""How far past the moment a feed is built a forum's date may be and still be the feed's own: the forum's clock
and the bridge's differ by that much at most when both keep time (Kerberos allows 5 minutes of skew for the
same reason). Further ahead, it is a clock that is wrong or a forum that lies (see the module docstring)."""


def newest_believed(moments: Iterable[datetime | None], built: datetime) -> datetime | None:
    """The newest of `moments` that may be a feed's own date, when the feed is built at `built`: not past it by
    more than `CLOCK_SKEW`. A naive time is passed on (believed) for feedgen to refuse, as `utc` does."""
    latest = built + CLOCK_SKEW
    return max((moment for moment in moments if moment is not None and (moment.tzinfo is None or moment <= latest)),
               default=None)


def entry_id(forum_url: str, topic_id: int) -> str:
    """The topic's permanent URL: Discourse redirects `/t/ID` to the current slug."""
    return f"{_forum_uri(forum_url)}/t/{topic_id}"


@functools.lru_cache(maxsize=256)
def _forum_uri(forum_url: str) -> str:
    """The forum's URL as every format writes it (`FeedMeta`'s, cleaned), without its trailing slash, so a
    topic's id is the same whoever builds it; made once per forum, not once per entry."""
    return iri_to_uri(_clean(forum_url)).rstrip("/")


def titled(title: str, untitled: str) -> str:
    """`title`, or `untitled` where it holds nothing once the characters XML cannot carry and the spaces are
    gone: Atom and RSS require a title. A printable title holds none of those characters (no control, no
    surrogate, no noncharacter is printable): one scan in C, not a substitution (bench row 4, "render json,
    µs/entry at 1000 vs 30 entries", which makes the entries of its topics, as the atom and rss rows do)."""
    if title.isprintable():
        return title if title.strip() else untitled
    return title if _clean(title).strip() else untitled


def topic_entry(topic: Topic, forum_url: str) -> Entry:
    """The topic as a feed's entry: its permanent id (`entry_id`), its page as the link and as where its
    replies are, its excerpt as the summary, its first post (`content=full`) as the content. A member's
    notification or bookmark (`Topic.personal_id`) takes the id of its own, and has no replies page."""
    personal = topic.personal_id is not None
    return Entry(
        kind="personal" if personal else "topic",
        id=topic.personal_id or entry_id(forum_url, topic.id),
        link=topic.url,
        title=titled(topic.title, f"Topic {topic.id}"),
        author=topic.author,
        author_url=topic.author_url,
        author_avatar=topic.author_avatar,
        published=topic.created_at,
        updated=topic.last_posted_at,
        summary=topic.excerpt,
        content_html=topic.content_html,
        category=topic.category,
        tags=topic.tags,
        replies=topic.replies,
        thumbnail=topic.image_url,
        comments=None if personal else topic.url,
    )


def topic_entries(topics: Iterable[Topic], forum_url: str) -> list[Entry]:
    """Each of `topics` as an entry (`topic_entry`), in order: the loop here, beside the renderers' own, so
    that the stages before hand over a feed's topics at once rather than one call per topic."""
    return [topic_entry(topic, forum_url) for topic in topics]


def utc(moment: datetime) -> datetime:
    """Equal times give equal text (`Entry`s that compare equal give equal feeds, and ETags): written in
    UTC and in whole seconds, as JSON Feed's and RSS's are; the parsers give UTC already. A JSON list's
    milliseconds were written into Atom's dates, and a Markdown list has none: every entry's `updated` changed,
    and readers marked them all again, when a forum's lists came to be read through the other source. A naive
    time is passed on as it is, for feedgen to refuse rather than read as the server's local time."""
    return moment.astimezone(UTC).replace(microsecond=0) if moment.tzinfo else moment


def updated(entry: Entry) -> datetime | None:
    return entry.updated or entry.published


def newest(entries: Sequence[Entry], built: datetime) -> datetime | None:
    """The newest date an entry carries that is believed of a feed built at `built` (`newest_believed`): the
    feed's date, when there is one."""
    return newest_believed(map(updated, entries), built)


def listed(first: Listing, built: datetime) -> datetime | None:
    """The newest date of the list a feed was made from, before its filters: the feed's own date when none
    of its entries has one (Atom's `updated`, which is required), so that a feed whose filters keep nothing
    is the same bytes, and the same ETag, for as long as its list is the same. It was the time of the build,
    and a keyword feed that matched nothing was a new download at every poll. A date from the future is not
    the feed's (`newest_believed`, of a feed built at `built`)."""
    return newest_believed([t.last_posted_at or t.created_at for t in first.topics], built)


def feed_updated(meta: FeedMeta, entries: Sequence[Entry]) -> datetime:
    """The feed's own date (Atom's `updated`; RSS's `lastBuildDate`, where an entry is dated): its newest entry
    date (`newest`), else when its list was read (`FeedMeta.updated`), and never before `FeedMeta.floor`. The newest
    topic's date went back when that topic was deleted, moved out of the list or aged out of a `max_age=` window,
    and a reader keeping the newest date it saw took the changed feed for an old one."""
    dated = newest(entries, meta.built) or meta.updated
    return dated if meta.floor is None or dated >= meta.floor else meta.floor


Before: TypeAlias = tuple[str | None, float]
"""What a copy written before says of itself: the id of its feed (None: this feed's own cached copy, `FeedEntry`)
and the date it gave itself (`feed_updated`)."""


def floored(meta: FeedMeta, listed: datetime | None, before: Before | None) -> FeedMeta:
    """`meta` with the floor of the copy it replaces (`FeedMeta.floor`) and its `updated`: the list's own date
    (`listed`), else that floor (the same empty list, the same bytes), else the build. A copy is this feed's floor
    only if it is this feed (its id as written, `_written_id`: a file of another feed's is another feed's date)
    and its date could be this feed's own (no later than the build and `CLOCK_SKEW`, as `newest_believed` takes a
    topic's; a shared Redis holds whatever was written to it).

    Each process floors from the copy it holds: without a shared store, a worker that holds none dates the feed
    by its list alone until it holds one."""
    floor = None
    if before is not None and before[0] in (None, _written_id(meta.feed_id)) and \
            0 <= before[1] <= (meta.built + CLOCK_SKEW).timestamp():
        floor = datetime.fromtimestamp(before[1], UTC)
    return dataclasses.replace(meta, updated=listed or floor or meta.built, floor=floor)


def categories(entry: Entry) -> list[str]:
    """The category first, then the tags; a tag named like the category is not repeated."""
    if not entry.tags:  # a Markdown list's topics have none: no dict to make (bench row 4, "render json, ...")
        return [entry.category] if entry.category else []
    return list(dict.fromkeys((entry.category, *entry.tags) if entry.category else entry.tags))


def description(meta: FeedMeta) -> str:
    return meta.description or f"Topics from {meta.title}"


def _clean(text: str) -> str:
    return XML_INVALID.sub("", text)


def _clean_optional(text: str | None) -> str | None:
    return _clean(text) or None if text else None


def _written_id(feed_id: str) -> str:
    """A feed's id as its Atom file holds it (`_clean_meta`), which a file written before is told by (`floored`)."""
    return iri_to_uri(_clean(feed_id))


def _clean_url(url: str | None) -> str | None:
    cleaned = _clean_optional(url)
    return iri_to_uri(cleaned) if cleaned else None


def cleaned(meta: FeedMeta, entries: Sequence[Entry]) -> tuple[FeedMeta, Sequence[Entry]]:
    meta = _clean_meta(meta)
    # Joined with "/", which a URI may hold anywhere: a `#` or any character a URI cannot carry sends
    # the entries through `_clean_entry`, which looks at each URL alone.
    urls = "/".join([url for entry in entries for url in _urls(entry) if url])
    if ("#" not in urls and is_uri(urls) and all(e.title.strip() and e.link for e in entries)
            and _valid_texts(entries)):
        return meta, entries
    return meta, [_clean_entry(entry) for entry in entries]


SCAN_CHARS = 1 << 16
"""Characters of the entries' text scanned at once by `_valid_texts`: about 0.2 ms of scanning between turns."""


def _valid_texts(entries: Sequence[Entry]) -> bool:
    """Whether no entry's text holds a character XML cannot carry: the common case, nothing to remove, found
    with one scan of the text of as many entries as make `SCAN_CHARS`, a turn before each. A scan per field
    cost a tenth of an Atom render (bench/RESULTS.md, target 2), a scan per entry 50 µs of a 30-entry one, and
    one of all the text (13 MB for 500 long posts, 40 ms) would be the longest stretch of a render without a
    turn. Kept for bench row 4, "render json, µs/entry at 1000 vs 30 entries" (and "render atom, ...", measured
    in process CPU time), with `uris.is_uri`."""
    texts: list[str] = []
    held = 0
    for entry in entries:
        # Its URLs are left out: `cleaned` asks this only of entries whose URLs are URIs, which hold none.
        for text in _prose(entry):
            if text:
                texts.append(text)
                held += len(text)
        if held >= SCAN_CHARS:
            take_turn()
            if has_xml_invalid("".join(texts)):
                return False
            texts.clear()
            held = 0
    take_turn()
    return not has_xml_invalid("".join(texts))


def _clean_meta(meta: FeedMeta) -> FeedMeta:
    forum_url = iri_to_uri(_clean(meta.forum_url))
    return dataclasses.replace(
        meta,
        title=_clean(meta.title) or urlsplit(forum_url).netloc or forum_url,
        forum_url=forum_url,
        html_url=iri_to_uri(_clean(meta.html_url)),
        feed_id=_written_id(meta.feed_id),
        self_url=_clean_url(meta.self_url),
        description=_clean_optional(meta.description),
        stylesheet_url=_clean_url(meta.stylesheet_url),
        site=meta.site and dataclasses.replace(
            meta.site, logo_url=_clean_url(meta.site.logo_url), icon_url=_clean_url(meta.site.icon_url),
            favicon_url=_clean_url(meta.site.favicon_url), language=_clean_optional(meta.site.language)),
    )


def _urls(entry: Entry) -> tuple[str | None, ...]:
    return entry.link, entry.author_url, entry.author_avatar, entry.thumbnail, entry.comments


def _prose(entry: Entry) -> tuple[str | None, ...]:
    """Every string of an entry that ends up in a feed but its URLs and its id."""
    return entry.title, entry.author, entry.summary, entry.content_html, entry.category, *entry.tags


def _texts(entry: Entry) -> tuple[str | None, ...]:
    """Every string of an entry that ends up in a feed but its id (a forum's, cleaned by `entry_id`, or one
    made of it)."""
    return *_prose(entry), *_urls(entry)


def _clean_entry(entry: Entry) -> Entry:
    """Also fills what Atom and RSS cannot do without, a link (its id, a topic's permanent URL, where its own
    is nothing but characters XML cannot carry), and makes its URLs URIs."""
    if (entry.title.strip() and entry.link and all(url is None or is_uri(url) for url in _urls(entry))
            and all(t and not XML_INVALID.search(t) or t is None for t in _texts(entry))):
        return entry  # the common case: nothing to remove, no copy to make
    return msgspec.structs.replace(
        entry,
        title=_clean(entry.title).strip(),
        link=_clean_url(entry.link) or entry.id,
        author=_clean_optional(entry.author),
        author_url=_clean_url(entry.author_url),
        author_avatar=_clean_url(entry.author_avatar),
        thumbnail=_clean_url(entry.thumbnail),
        comments=None if entry.comments is None else _clean_url(entry.comments) or entry.id,
        summary=_clean_optional(entry.summary),
        content_html=_clean_optional(entry.content_html),
        category=_clean_optional(entry.category),
        tags=tuple(tag for tag in map(_clean, entry.tags) if tag),
    )
