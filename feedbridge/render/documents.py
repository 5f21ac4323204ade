"""Atom 1.0 and RSS 2.0 (lxml's element tree) and JSON Feed 1.1 (json) from a sequence of topics.

The XML is built with lxml's documented element API (`Element`, `SubElement`, `tostring`), which escapes
every text and attribute: no markup is written by hand. feedgen, which builds the same tree through lxml,
was left for it: its per-entry setters (each checks and copies a dict of fields, then `atom_str` walks
them all again) made the same bytes cost 27 µs an Atom entry and 30 µs an RSS item, against 16 and 19 µs
here (bench row 4, two runs each on one machine), and a cold feed request's server CPU 3.20 ms against
2.93–2.97 ms (row 2, "server CPU per cold request"). It also set the process's C locale around every RSS
date (`email.utils.format_datetime` writes English names without one).

Rendering is a pure function of its input: the same topics and `FeedMeta` give the same bytes. No clock is
read (every `updated`/`lastBuildDate` is set from the topics or left out), entries keep the order they are
given in, and JSON keys keep a fixed order. So ETags and HTTP caches built
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

Each entry gives other requests a turn (`render.turns`) as it is built: 500 entries of long posts take
0.1–0.2 s, and what cannot be split is the one serialising call at the end (lxml's `tostring`,
`json.dumps`), about 10 ms per 100 long entries.
"""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from urllib.parse import urlsplit

from lxml import etree
from lxml.etree import Element, SubElement

from feedbridge import __version__
from feedbridge.models import XML_INVALID, Topic, has_xml_invalid, iso_utc
from feedbridge.render.turns import take_turn
from feedbridge.render.uris import iri_to_uri, is_uri

ATOM_TYPE = "application/atom+xml; charset=utf-8"
RSS_TYPE = "application/rss+xml; charset=utf-8"
JSON_TYPE = "application/feed+json; charset=utf-8"
JSON_FEED_VERSION = "https://jsonfeed.org/version/1.1"

_XML_DECLARATION = b'<?xml version="1.0" encoding="UTF-8"?>\n'

ATOM_NS = "http://www.w3.org/2005/Atom"
SLASH_NS = "http://purl.org/rss/1.0/modules/slash/"  # slash:comments, the reply count readers show
DC_NS = "http://purl.org/dc/elements/1.1/"  # dc:creator, RSS's author by name
CONTENT_NS = "http://purl.org/rss/1.0/modules/content/"  # content:encoded, RSS's full content
SLASH_COMMENTS = f"{{{SLASH_NS}}}comments"
DC_CREATOR = f"{{{DC_NS}}}creator"
CONTENT_ENCODED = f"{{{CONTENT_NS}}}encoded"
ATOM_LINK = f"{{{ATOM_NS}}}link"
# Every prefix is declared once, on the root element, so entries never repeat an xmlns declaration. Atom's
# elements are plain names under the root's `xmlns` attribute, which declares them Atom's to any parser
# (as feedgen wrote them): the same elements named in Clark notation (`{ATOM_NS}entry`) cost lxml 1.5 to
# 2 times as much each to build (measured on a 30-entry tree).
_ATOM_NSMAP = {"slash": SLASH_NS}
_RSS_NSMAP = {"slash": SLASH_NS, "dc": DC_NS, "atom": ATOM_NS, "content": CONTENT_NS}
_BOOL = {True: "true", False: "false"}


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
    feed = Element("feed", xmlns=ATOM_NS, nsmap=_ATOM_NSMAP)
    feed_date = _newest(topics) or meta.updated
    _text(feed, "id", meta.feed_id)
    _text(feed, "title", meta.title)
    _text(feed, "updated", _iso(feed_date))
    # Atom needs an author on the feed unless every entry has one (deleted users have none): the
    # forum itself is the honest fallback, and entries without an author inherit it.
    _person(feed, urlsplit(meta.forum_url).netloc or meta.forum_url, meta.forum_url)
    # The alternate (the forum's page) first: readers such as @extractus/feed-extractor take the first
    # <link> as the feed's home page.
    SubElement(feed, "link", href=meta.html_url, rel="alternate", type="text/html")
    if meta.self_url:
        SubElement(feed, "link", href=meta.self_url, rel="self", type=_media(ATOM_TYPE))
    _text(feed, "generator", "feedbridge").set("version", __version__)
    _text(feed, "subtitle", _description(meta))
    for topic in topics:
        feed.append(_atom_entry(meta.forum_url, topic, feed_date))
    return _with_prolog(etree.tostring(feed, encoding="UTF-8", xml_declaration=False), meta.stylesheet_url)


def _atom_entry(forum_url: str, topic: Topic, feed_date: datetime) -> etree._Element:
    take_turn()
    entry = Element("entry")
    _text(entry, "id", topic.entry_id or entry_id(forum_url, topic.id))
    _text(entry, "title", topic.title)
    _text(entry, "updated", _iso(_updated(topic) or feed_date))  # required by Atom, optional (absent) elsewhere
    if topic.author:
        _person(entry, topic.author, topic.author_url)
    if topic.content_html:
        _text(entry, "content", topic.content_html).set("type", "html")
    # Exactly one link, the topic's page: a reader takes it as the entry's alternate.
    SubElement(entry, "link", href=topic.url)
    if topic.excerpt:
        _text(entry, "summary", topic.excerpt)  # type text: the excerpt is plain text
    for term in _categories(topic):
        SubElement(entry, "category", term=term)
    if topic.created_at:
        _text(entry, "published", _iso(topic.created_at))
    if topic.replies is not None:
        _text(entry, SLASH_COMMENTS, str(topic.replies))
    return entry


def render_rss(meta: FeedMeta, topics: Sequence[Topic]) -> bytes:
    meta, topics = _cleaned(meta, topics)
    rss = Element("rss", version="2.0", nsmap=_RSS_NSMAP)
    channel = SubElement(rss, "channel")
    _text(channel, "title", meta.title)
    _text(channel, "link", meta.html_url)
    _text(channel, "description", _description(meta))
    if meta.self_url:
        SubElement(channel, ATOM_LINK, href=meta.self_url, rel="self", type=_media(RSS_TYPE))
    _text(channel, "docs", "http://www.rssboard.org/rss-specification")  # what format this is, for a human
    _text(channel, "generator", f"feedbridge {__version__}")
    # No date is made up: a channel none of whose topics is dated has no lastBuildDate.
    if last_build := _newest(topics):
        _text(channel, "lastBuildDate", _rfc822(last_build))
    for topic in topics:
        channel.append(_rss_item(meta.forum_url, topic))
    return _with_prolog(etree.tostring(rss, encoding="UTF-8", xml_declaration=False), meta.stylesheet_url)


def _rss_item(forum_url: str, topic: Topic) -> etree._Element:
    take_turn()
    item = Element("item")
    _text(item, "title", topic.title)
    _text(item, "link", topic.url)
    # <description> is HTML by RSS convention: the plain-text excerpt escaped, so `a<b` stays text; the
    # first post, when there is one, in content:encoded beside it, or as the description without an excerpt.
    description = html.escape(topic.excerpt, quote=False) if topic.excerpt else topic.content_html
    if description:
        _text(item, "description", description)
    if topic.excerpt and topic.content_html:
        _text(item, CONTENT_ENCODED, topic.content_html)
    # guid isPermaLink="true": the id URL resolves (Discourse redirects /t/ID to the topic), so
    # readers that link the guid still land on the topic. A digest's id names a period, no page; a post's
    # (`/t/ID/NUMBER`) is its page.
    permalink = topic.entry_id is None or topic.post_number is not None
    _text(item, "guid", topic.entry_id or entry_id(forum_url, topic.id)).set("isPermaLink", _BOOL[permalink])
    for term in _categories(topic):
        _text(item, "category", term)
    if published := topic.created_at or topic.last_posted_at:
        _text(item, "pubDate", _rfc822(published))
    if topic.replies is not None:
        _text(item, SLASH_COMMENTS, str(topic.replies))
    if topic.author:
        _text(item, DC_CREATOR, topic.author)  # RSS's own <author> must be an e-mail address
    return item


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


def _text(parent: etree._Element, tag: str, text: str) -> etree._Element:
    child = SubElement(parent, tag)
    child.text = text
    return child


def _person(parent: etree._Element, name: str, uri: str | None) -> None:
    author = SubElement(parent, "author")
    _text(author, "name", name)
    if uri:
        _text(author, "uri", uri)


def _iso(moment: datetime) -> str:
    """Equal times give equal text (`Topic`s that compare equal give equal feeds, and ETags): written in
    UTC, as JSON Feed's are; the parsers give UTC already."""
    return moment.astimezone(UTC).isoformat()


def _rfc822(moment: datetime) -> str:
    """RSS's date, in UTC as Atom's: English day and month names whatever the process locale."""
    return format_datetime(moment.astimezone(UTC))


def _media(media_type: str) -> str:
    """The type of a rel=self link: the media type without its parameters."""
    return media_type.partition(";")[0]


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
