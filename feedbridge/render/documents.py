"""Atom 1.0 and RSS 2.0 (through feedgen) and JSON Feed 1.1 (json) from a sequence of topics.

Rendering is a pure function of its input: the same topics and `FeedMeta` give the same bytes. No clock is
read (feedgen would default every `updated`/`lastBuildDate` to now; each one is set or left out here),
entries keep the order they are given in, and JSON keys keep a fixed order. So ETags and HTTP caches built
on the output stay valid, and readers see no phantom updates.

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

Each entry gives other requests a turn (`render.turns`) as it is added and again as feedgen builds its XML
(`_TurnTakingEntry`): 500 entries of long posts take 0.1–0.2 s, and what cannot be split is the one
serialising call at the end (lxml's `tostring`, `json.dumps`), about 10 ms per 100 long entries.
"""

from __future__ import annotations

import dataclasses
import html
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from feedgen.entry import FeedEntry
from feedgen.feed import FeedGenerator

from feedbridge import __version__
from feedbridge.models import XML_INVALID, Topic, has_xml_invalid, iso_utc
from feedbridge.render.feedgen_ext import (
    ChannelExtension,
    CreatorEntryExtension,
    CreatorExtension,
    SlashEntryExtension,
    SlashExtension,
)
from feedbridge.render.turns import take_turn
from feedbridge.render.uris import iri_to_uri, is_uri

ATOM_TYPE = "application/atom+xml; charset=utf-8"
RSS_TYPE = "application/rss+xml; charset=utf-8"
JSON_TYPE = "application/feed+json; charset=utf-8"
JSON_FEED_VERSION = "https://jsonfeed.org/version/1.1"

_XML_DECLARATION = b'<?xml version="1.0" encoding="UTF-8"?>\n'


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


def entry_id(forum_url: str, topic_id: int) -> str:
    """The topic's permanent URL: Discourse redirects `/t/ID` to the current slug."""
    return f"{forum_url.rstrip('/')}/t/{topic_id}"


def render_atom(meta: FeedMeta, topics: Sequence[Topic]) -> bytes:
    meta, topics = _cleaned(meta, topics)
    fg = _feed_generator(meta, ATOM_TYPE)
    feed_date = _newest(topics) or meta.updated
    fg.updated(_utc(feed_date))
    # Atom needs an author on the feed unless every entry has one (deleted users have none): the
    # forum itself is the honest fallback, and entries without an author inherit it.
    fg.author(name=urlsplit(meta.forum_url).netloc or meta.forum_url, uri=meta.forum_url)
    fg.generator("feedbridge", version=__version__)
    for topic in topics:
        _add_atom_entry(fg, meta.forum_url, topic, feed_date)
    return _with_prolog(fg.atom_str(xml_declaration=False), meta.stylesheet_url)


def _add_atom_entry(fg: FeedGenerator, forum_url: str, topic: Topic, feed_date: datetime | None) -> None:
    entry = _add_entry(fg, forum_url, topic)
    entry.updated(_utc(_updated(topic) or feed_date))  # required by Atom, optional (absent) elsewhere
    if topic.author:
        entry.author(name=topic.author, uri=topic.author_url)  # feedgen skips a None uri
    if topic.excerpt:
        entry.summary(topic.excerpt)  # type text: the excerpt is plain text
    if topic.created_at:
        entry.published(_utc(topic.created_at))


def render_rss(meta: FeedMeta, topics: Sequence[Topic]) -> bytes:
    meta, topics = _cleaned(meta, topics)
    fg = _feed_generator(meta, RSS_TYPE)
    fg.register_extension("dc", CreatorExtension, CreatorEntryExtension, atom=False)
    last_build = _newest(topics)
    if last_build:
        fg.lastBuildDate(_utc(last_build))
    fg.register_extension("rss_channel", ChannelExtension, atom=False)
    fg.rss_channel.set(link=meta.html_url, has_last_build_date=last_build is not None)
    fg.generator(f"feedbridge {__version__}")
    for topic in topics:
        _add_rss_entry(fg, meta.forum_url, topic)
    with _RSS_DATES:
        rss = fg.rss_str(xml_declaration=False)
    return _with_prolog(rss, meta.stylesheet_url)


# feedgen writes each RSS date between `setlocale(LC_ALL, "C")` and a restore of the locale it saw before
# (`feedgen.util.formatRFC2822`). Two threads doing that at once can leave the whole process in the C
# locale for good (one saves the other's "C" and restores it), after which every text file opened without
# an encoding is read as ASCII: seen in the test suite. One RSS string at a time keeps the dance whole.
_RSS_DATES = threading.Lock()


def _add_rss_entry(fg: FeedGenerator, forum_url: str, topic: Topic) -> None:
    entry = _add_entry(fg, forum_url, topic)
    # guid isPermaLink="true": the id URL resolves (Discourse redirects /t/ID to the topic), so
    # readers that link the guid still land on the topic. A digest's id names a period, no page; a post's
    # (`/t/ID/NUMBER`) is its page.
    entry.guid(entry.id(), permalink=topic.entry_id is None or topic.post_number is not None)
    if topic.author:
        entry.dc.creator(topic.author)
    if topic.excerpt:
        # <description> is HTML by RSS convention; escape the plain-text excerpt so `a<b` stays text.
        entry.summary(html.escape(topic.excerpt, quote=False))
    if published := topic.created_at or topic.last_posted_at:
        entry.pubDate(_utc(published))


def render_json(meta: FeedMeta, topics: Sequence[Topic]) -> bytes:
    meta, topics = _cleaned(meta, topics)
    feed: dict[str, object] = {"version": JSON_FEED_VERSION, "title": meta.title, "home_page_url": meta.html_url}
    if meta.self_url:
        feed["feed_url"] = meta.self_url
    feed["description"] = _description(meta)
    feed["_feedbridge"] = {"version": __version__}
    feed["items"] = [_json_item(topic, meta.forum_url) for topic in topics]
    return json.dumps(feed, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _json_item(topic: Topic, forum_url: str) -> dict[str, object]:
    take_turn()
    item: dict[str, object] = {"id": topic.entry_id or entry_id(forum_url, topic.id), "url": topic.url,
                               "title": topic.title}
    # JSON Feed requires content_html or content_text on every item.
    if topic.content_html:
        item["content_html"] = topic.content_html
    else:
        item["content_text"] = topic.excerpt or topic.title
    if topic.excerpt:
        item["summary"] = topic.excerpt
    if topic.created_at:
        item["date_published"] = iso_utc(topic.created_at)
    if topic.last_posted_at:
        item["date_modified"] = iso_utc(topic.last_posted_at)
    if topic.author:
        author = {"name": topic.author}
        if topic.author_url:
            author["url"] = topic.author_url
        # `author` is deprecated in 1.1 but allowed beside `authors`; JSON Feed 1.0 readers know only it.
        item["authors"] = [author]
        item["author"] = author
    if tags := _categories(topic):
        item["tags"] = tags
    if topic.replies is not None:
        item["_feedbridge"] = {"replies": topic.replies}
    return item


def _feed_generator(meta: FeedMeta, self_type: str) -> FeedGenerator:
    """The parts Atom and RSS share; `self_type` is the media type of the rel=self link. The dates differ
    (Atom requires them, RSS leaves out what is unknown) and are set by the caller."""
    fg = FeedGenerator()
    fg.register_extension("slash", SlashExtension, SlashEntryExtension)
    fg.id(meta.feed_id)
    fg.title(meta.title)
    fg.description(_description(meta))
    # The alternate (the forum's page) first: readers such as @extractus/feed-extractor take the first
    # <link> as the feed's home page. feedgen would take the RSS <channel><link> from the last link added,
    # the self link; ChannelExtension sets it to the alternate.
    fg.link(href=meta.html_url, rel="alternate", type="text/html")
    if meta.self_url:
        fg.link(href=meta.self_url, rel="self", type=self_type.partition(";")[0])
    return fg


class _TurnTakingEntry(FeedEntry):  # type: ignore[misc]  # feedgen has no type hints
    """feedgen's entry, taking a turn before feedgen builds its XML element: `atom_str` and `rss_str` build
    every entry's element in one call, 10 ms per 100 long entries that would otherwise never yield."""

    def atom_entry(self, extensions: bool = True) -> Any:
        take_turn()
        return super().atom_entry(extensions)

    def rss_entry(self, extensions: bool = True) -> Any:
        take_turn()
        return super().rss_entry(extensions)


def _add_entry(fg: FeedGenerator, forum_url: str, topic: Topic) -> Any:
    """The part Atom and RSS share; feedgen gives the entry the extensions registered on the feed."""
    take_turn()
    # feedgen prepends by default, which would reverse the caller's order
    entry = fg.add_entry(_TurnTakingEntry(), order="append")
    entry.id(topic.entry_id or entry_id(forum_url, topic.id))
    entry.title(topic.title)
    # Exactly one link: feedgen 1.0 drops rel attributes on entry links, so a second one would
    # turn into a duplicate rel=alternate that validators reject.
    entry.link(href=topic.url)
    if topic.content_html:
        entry.content(topic.content_html, type="html")  # Atom content, RSS content:encoded
    if topic.category or topic.tags:
        for term in _categories(topic):
            entry.category(term=term)
    if topic.replies is not None:
        entry.slash.comments(topic.replies)
    return entry


def _utc(moment: datetime | None) -> datetime | None:
    """Equal times give equal text (`Topic`s that compare equal give equal feeds, and ETags): written in
    UTC, as JSON Feed's are; the parsers give UTC already."""
    return moment.astimezone(UTC) if moment is not None else None


def _updated(topic: Topic) -> datetime | None:
    return topic.last_posted_at or topic.created_at


def _newest(topics: Sequence[Topic]) -> datetime | None:
    """The newest date any topic carries: the feed's date, when there is one."""
    return max(filter(None, map(_updated, topics)), default=None)


def _categories(topic: Topic) -> list[str]:
    """The category first, then the tags; a tag named like the category is not repeated."""
    return list(dict.fromkeys((topic.category, *topic.tags) if topic.category else topic.tags))


def _description(meta: FeedMeta) -> str:
    return meta.description or f"Topics from {meta.title}"


def _with_prolog(body: bytes, stylesheet_url: str | None) -> bytes:
    if not stylesheet_url:
        return _XML_DECLARATION + body
    href = html.escape(stylesheet_url, quote=True)  # also makes a `?>` in the URL harmless
    return _XML_DECLARATION + f'<?xml-stylesheet type="text/xsl" href="{href}"?>\n'.encode() + body


def _clean(text: str) -> str:
    return XML_INVALID.sub("", text)


def _clean_optional(text: str | None) -> str | None:
    return _clean(text) or None if text else None


def _clean_url(url: str | None) -> str | None:
    cleaned = _clean_optional(url)
    return iri_to_uri(cleaned) if cleaned else None


def _cleaned(meta: FeedMeta, topics: Sequence[Topic]) -> tuple[FeedMeta, Sequence[Topic]]:
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
    urls = "/".join([url for topic in topics for url in (topic.url, topic.author_url) if url])
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
    )


def _texts(topic: Topic) -> tuple[str | None, ...]:
    """Every string of a topic that ends up in a feed."""
    return (topic.title, topic.url, topic.author, topic.author_url, topic.excerpt, topic.content_html,
            topic.category, *topic.tags)


def _clean_topic(topic: Topic, forum_url: str) -> Topic:
    """Also fills what Atom and RSS cannot do without: a title and a link; and makes its URLs URIs."""
    if (topic.title.strip() and topic.url and is_uri(topic.url)
            and (topic.author_url is None or is_uri(topic.author_url))
            and all(t and not XML_INVALID.search(t) or t is None for t in _texts(topic))):
        return topic  # the common case: nothing to remove, no copy to make
    return dataclasses.replace(
        topic,
        title=_clean(topic.title).strip() or f"Topic {topic.id}",
        url=_clean_url(topic.url) or entry_id(forum_url, topic.id),
        author=_clean_optional(topic.author),
        author_url=_clean_url(topic.author_url),
        excerpt=_clean_optional(topic.excerpt),
        content_html=_clean_optional(topic.content_html),
        category=_clean_optional(topic.category),
        tags=tuple(tag for tag in map(_clean, topic.tags) if tag),
    )
