"""What every format of a feed is made of (`FeedMeta`, a topic's entry id) and the rules all three keep alike,
so Atom, RSS (`render.documents`) and JSON Feed (`render.json_feed`) cannot drift apart on them.

Identity: an entry's id (Atom `id`, RSS `guid`, JSON `id`) is `{forum}/t/{topic id}`, built from the
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

URLs: every URL written (links, ids, author URIs) goes through `uris.iri_to_uri`, because a forum's
links and usernames (`/u/Zoë`) may be IRIs where RSS and JSON Feed consumers check for URIs.

Characters XML cannot carry (C0 controls other than tab/newline/carriage return, U+FFFE, U+FFFF and
lone surrogates) are removed from every string before rendering, in JSON too: one stray byte in a
forum post must not make the whole feed unparsable, or make lxml raise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlsplit

from feedbridge.models import XML_INVALID, Site, Topic, has_xml_invalid
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


def entry_id(forum_url: str, topic_id: int) -> str:
    """The topic's permanent URL: Discourse redirects `/t/ID` to the current slug."""
    return f"{forum_url.rstrip('/')}/t/{topic_id}"


def utc(moment: datetime) -> datetime:
    """Equal times give equal text (`Topic`s that compare equal give equal feeds, and ETags): written in
    UTC, as JSON Feed's are; the parsers give UTC already. A naive time is passed on as it is, for feedgen
    to refuse rather than read as the server's local time."""
    return moment.astimezone(UTC) if moment.tzinfo else moment


def updated(topic: Topic) -> datetime | None:
    return topic.last_posted_at or topic.created_at


def newest(topics: Sequence[Topic]) -> datetime | None:
    """The newest date any topic carries: the feed's date, when there is one."""
    return max(filter(None, map(updated, topics)), default=None)


def categories(topic: Topic) -> list[str]:
    """The category first, then the tags; a tag named like the category is not repeated."""
    return list(dict.fromkeys((topic.category, *topic.tags) if topic.category else topic.tags))


def description(meta: FeedMeta) -> str:
    return meta.description or f"Topics from {meta.title}"


def _clean(text: str) -> str:
    return XML_INVALID.sub("", text)


def _clean_optional(text: str | None) -> str | None:
    return _clean(text) or None if text else None


def _clean_url(url: str | None) -> str | None:
    cleaned = _clean_optional(url)
    return iri_to_uri(cleaned) if cleaned else None


def cleaned(meta: FeedMeta, topics: Sequence[Topic]) -> tuple[FeedMeta, Sequence[Topic]]:
    meta = _clean_meta(meta)
    # The common case, nothing to remove, is found with one scan of each topic's text: a scan per field cost
    # a tenth of an Atom render (bench/RESULTS.md, target 2), and one of all the text (13 MB for 500 long
    # posts, 40 ms) would be the longest stretch of a render without a turn.
    valid = True
    for topic in topics:
        take_turn()
        if has_xml_invalid("".join([field for field in _texts(topic) if field])):
            valid = False
            break
    # Joined with "/", which a URI may hold anywhere: a `#` or any character a URI cannot carry sends
    # the topics through `_clean_topic`, which looks at each URL alone.
    urls = "/".join([url for topic in topics for url in (topic.url, topic.author_url, topic.image_url) if url])
    if (valid and "#" not in urls and is_uri(urls)
            and all(t.title.strip() and t.url for t in topics)):
        return meta, topics
    return meta, [_clean_topic(topic, meta.forum_url) for topic in topics]


def _clean_meta(meta: FeedMeta) -> FeedMeta:
    forum_url = iri_to_uri(_clean(meta.forum_url))
    return dataclasses.replace(
        meta,
        title=_clean(meta.title) or urlsplit(forum_url).netloc or forum_url,
        forum_url=forum_url,
        html_url=iri_to_uri(_clean(meta.html_url)),
        feed_id=iri_to_uri(_clean(meta.feed_id)),
        self_url=_clean_url(meta.self_url),
        description=_clean_optional(meta.description),
        stylesheet_url=_clean_url(meta.stylesheet_url),
        site=meta.site and dataclasses.replace(
            meta.site, logo_url=_clean_url(meta.site.logo_url), icon_url=_clean_url(meta.site.icon_url),
            favicon_url=_clean_url(meta.site.favicon_url), language=_clean_optional(meta.site.language)),
    )


def _texts(topic: Topic) -> tuple[str | None, ...]:
    """Every string of a topic that ends up in a feed."""
    return (topic.title, topic.url, topic.author, topic.author_url, topic.excerpt, topic.content_html,
            topic.category, topic.image_url, *topic.tags)


def _clean_topic(topic: Topic, forum_url: str) -> Topic:
    """Also fills what Atom and RSS cannot do without: a title and a link; and makes its URLs URIs."""
    if (topic.title.strip() and topic.url and is_uri(topic.url)
            and (topic.author_url is None or is_uri(topic.author_url))
            and (topic.image_url is None or is_uri(topic.image_url))
            and all(t and not XML_INVALID.search(t) or t is None for t in _texts(topic))):
        return topic  # the common case: nothing to remove, no copy to make
    return dataclasses.replace(
        topic,
        title=_clean(topic.title).strip() or f"Topic {topic.id}",
        url=_clean_url(topic.url) or entry_id(forum_url, topic.id),
        author=_clean_optional(topic.author),
        author_url=_clean_url(topic.author_url),
        image_url=_clean_url(topic.image_url),
        excerpt=_clean_optional(topic.excerpt),
        content_html=_clean_optional(topic.content_html),
        category=_clean_optional(topic.category),
        tags=tuple(tag for tag in map(_clean, topic.tags) if tag),
    )
