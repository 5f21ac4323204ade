"""Atom 1.0 and RSS 2.0 (through feedgen) and JSON Feed 1.1 (json) from a sequence of entries (`models.Entry`).

feedgen builds the Atom and RSS documents, through its documented API (`FeedGenerator`, `FeedEntry`, its
extension mechanism), on lxml, which escapes every text and attribute: no markup is written by hand. What
it checks as a feed is built, each a `ValueError` here rather than a document a validator or a reader
rejects later:
- required elements: Atom's `id`, `title` and `updated` on the feed and on every entry; RSS's channel
  `title`, `link` and `description`, and a title or description on every item;
- an alternate link or content: an Atom entry with neither is refused (RFC 4287 §4.1.1);
- timezone-aware dates: every date setter refuses a naive `datetime`, so no date is written without its
  offset (`_utc` passes a naive one on unconverted for that);
- link relations: a feed link's `rel` must be one of IANA's registered relations, an entry link's one of
  alternate, enclosure, related, self and via.
It also has setters for what a feed may gain, used here: Atom's `icon` and `logo`, RSS's `image`, `language`
(also Atom's `xml:lang`), an item's `comments`, `ttl`. What it has none for goes through its extension
mechanism, one class per XML namespace (`_Namespace`), each declared once, on the root: `slash:comments`,
`dc:creator`, `media:thumbnail` (Media RSS), `thr:total` with Atom's `link rel="replies"` (RFC 4685), and
`sy:updatePeriod` / `sy:updateFrequency` (RSS 1.0's syndication module). feedgen's own media and syndication
extensions do not fit: the first puts every thumbnail in a `media:group` (a group says its items are one
medium in several forms, a lone thumbnail belongs to the item), the second writes `sy:UpdatePeriod` and
`sy:UpdateFrequency`, names the module does not define, which readers looking for `updatePeriod` miss.
What it costs: about 26 µs an Atom entry and 29 µs an RSS item, where lxml's element API used by hand took
14–16 and 17–19 µs (bench row 4, both measured in turn in one process): about 0.3 ms more CPU for a
30-entry feed, paid once per cache period beside a round trip to the forum.

Where feedgen's defaults would make a document impure or wrong, each is set here: it dates the feed and
every entry now unless told otherwise (every date is set from the entries; an undated RSS channel loses
the `lastBuildDate` feedgen writes anyway, `_LastBuildDate`); it prepends entries (they are appended); it takes
RSS's channel `<link>` from the last link added (the alternate is added last there); feedgen 1.0 drops
the `rel` of an entry's links (an entry has exactly one, its alternate); it writes each RSS date under
the process-wide C locale (`_RSS_DATES`), with `strftime`'s `%Y`, which glibc does not pad: a year before 1000
came out as `999` or `1`, where RSS 2.0 takes two or four digits (four preferred, and the RSS profile asks for
four), so such a date is written again (`_rss_date`; `_Entry` for an item's `pubDate`, `_LastBuildDate` for the
channel's); and its RSS `image` takes any URL, where RSS 2.0 asks for a GIF, JPEG or PNG (`_rss_image`).

Rendering is a pure function of its input: the same entries and `FeedMeta` give the same bytes. No clock is
read, entries keep the order they are given in, and JSON keys keep a fixed order. So ETags and HTTP caches
built on the output stay valid, and readers see no phantom updates.

Each entry gives other requests a turn (`render.turns`) as it is added and again as feedgen builds its XML
(`_Entry`): 500 entries of long posts take 0.1–0.2 s, and what cannot be split is the one
serialising call at the end (lxml's `tostring`, `json.dumps`), about 10 ms per 100 long entries.
"""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Sequence
from datetime import datetime
from email.utils import format_datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

from feedgen.entry import FeedEntry
from feedgen.ext.base import BaseEntryExtension, BaseExtension
from feedgen.feed import FeedGenerator
from lxml.etree import SubElement
from lxml.html import fragment_fromstring

from feedbridge import __version__
from feedbridge.models import Entry, Site
from feedbridge.render.meta import FeedMeta, categories, cleaned, description, feed_updated, newest, updated, utc
from feedbridge.render.turns import take_turn

ATOM_TYPE = "application/atom+xml; charset=utf-8"
RSS_TYPE = "application/rss+xml; charset=utf-8"

_XML_DECLARATION = b'<?xml version="1.0" encoding="UTF-8"?>\n'
_RSS_IMAGE_TYPES = (".gif", ".jpg", ".jpeg", ".png")

SLASH_NS = "http://purl.org/rss/1.0/modules/slash/"
DC_NS = "http://purl.org/dc/elements/1.1/"
MEDIA_NS = "http://search.yahoo.com/mrss/"
THREADING_NS = "http://purl.org/syndication/thread/1.0"
SYNDICATION_NS = "http://purl.org/rss/1.0/modules/syndication/"
# feedgen writes Atom's own elements in no namespace, under the root's default one (so they serialise without a
# prefix and read back as Atom's): the threading extension's link to the replies is written the same way.
ATOM_LINK = "{}link"


class _Namespace(BaseEntryExtension):
    """The elements of one XML namespace that feedgen has no setter for, as one feedgen extension class.

    A subclass names the prefix and the namespace, and is registered as both halves:
    `fg.register_extension(prefix, Cls, Cls)`. feedgen then declares the prefix once, on the root (entries
    never repeat an `xmlns`), and gives every entry an instance of its own as `entry.<prefix>`: each `add`
    becomes one element of that entry, in the order of the calls, and the feed's own instance writes its
    elements into the Atom feed or the RSS channel. A new namespace is a subclass of two lines and a
    registration."""

    prefix: ClassVar[str]
    uri: ClassVar[str]

    def __init__(self) -> None:
        self._elements: list[tuple[str, str | None, dict[str, str]]] = []

    def add(self, name: str, text: str | None = None, **attributes: str) -> None:
        """One element named `name` in this namespace (or a Clark name of another, `{uri}name`: the threading
        extension's `link rel="replies"` is Atom's, `ATOM_LINK`), with its text and attributes in the order given."""
        self._elements.append((name if name.startswith("{") else f"{{{self.uri}}}{name}", text, attributes))

    def extend_ns(self) -> dict[str, str]:
        return {self.prefix: self.uri}

    def extend_atom(self, element: Any) -> Any:
        for tag, text, attributes in self._elements:
            SubElement(element, tag, attributes).text = text
        return element

    def extend_rss(self, element: Any) -> Any:
        # The feed's instance is given the <rss> root, whose elements belong in its channel.
        self.extend_atom(element[0] if element.tag == "rss" else element)
        return element


class _Slash(_Namespace):
    """`slash:comments`: the reply count that feed readers show next to an entry."""

    prefix, uri = "slash", SLASH_NS


class _DublinCore(_Namespace):
    """`dc:creator`: RSS's author by name (RSS's own `<author>` must be an e-mail address). feedgen's own
    Dublin Core extension writes it too, but walks all fifteen DC terms for every item."""

    prefix, uri = "dc", DC_NS


class _Media(_Namespace):
    """`media:thumbnail url=…`: the entry's picture, which Feedly, Inoreader, NetNewsWire and others show
    beside the entry."""

    prefix, uri = "media", MEDIA_NS


class _Threading(_Namespace):
    """RFC 4685 on Atom entries: `link rel="replies"` to the page of its replies and `thr:total`, their count."""

    prefix, uri = "thr", THREADING_NS


class _Syndication(_Namespace):
    """`sy:updatePeriod` and `sy:updateFrequency` on an RSS channel: how often it changes (Liferea reads them)."""

    prefix, uri = "sy", SYNDICATION_NS


def _rss_date(moment: datetime) -> str:
    """An RSS date as RFC 822 writes it, with the year in four digits (RSS 2.0's preference, RFC 1123 §5.2.14's
    SHOULD, the RSS profile's) and English names whatever the locale: `email.utils.format_datetime`, for the
    dates feedgen writes wrong."""
    return format_datetime(moment)


class _LastBuildDate(BaseExtension):
    """RSS only, registered where feedgen's channel `lastBuildDate` would be wrong: it writes one in every
    channel, the time of rendering when none was set, and a made-up date is worse than none (`moment` None:
    the element goes); and a year before 1000 it writes in fewer than four digits (`_rss_date`)."""

    moment: datetime | None = None

    def extend_rss(self, rss: Any) -> Any:
        channel = rss[0]
        element = channel.find("lastBuildDate")
        if self.moment is None:
            channel.remove(element)
        else:
            element.text = _rss_date(self.moment)
        return rss


class _Entry(FeedEntry):
    """feedgen's entry, taking a turn before feedgen builds its XML element: `atom_str` and `rss_str` build
    every entry's element in one call, 10 ms per 100 long entries that would otherwise never yield. An RSS
    item's `pubDate` before the year 1000 is written again with its four digits (`_rss_date`); feedgen's is
    right for every later one, which keeps the path every real date takes as it was."""

    def atom_entry(self, extensions: bool = True) -> Any:
        take_turn()
        return super().atom_entry(extensions)

    def rss_entry(self, extensions: bool = True) -> Any:
        take_turn()
        item = super().rss_entry(extensions)
        if (published := self.pubDate()) is not None and published.year < 1000:
            item.find("pubDate").text = _rss_date(published)
        return item


FEED_DATE_BYTES = 1 << 16
"""Of an Atom feed written before, what `feed_date` reads: its head, before the entries, is a few KiB."""
_FEED_DATE = re.compile(rb"<updated>([0-9T:+.Z-]{10,40})</updated>")
_FEED_ID = re.compile(rb"<id>([^<]{1,4000})</id>")


def feed_date(written: bytes) -> tuple[str, float] | None:
    """The date an Atom feed this renderer wrote gave itself (its first `updated`, the feed's own: feedgen writes
    it before the entries) and the feed's id before it, from its first `FEED_DATE_BYTES`; None when it has none
    to read. The file's rebuild of the same feed gives itself no earlier date (`render.meta.floored`), and gives it
    again to a list with no date of its own (an empty list, topics dated in the future), as the web's rebuild does
    from its held copy: it was the run's time, and an empty category's file changed at every run of a static
    build. An RSS file has no id to tell its feed by, and is not read."""
    head = written[:FEED_DATE_BYTES]
    found, named = _FEED_DATE.search(head), _FEED_ID.search(head)
    if found is None or named is None or named.start() > found.start():
        return None
    try:
        return (html.unescape(named[1].decode()),
                datetime.fromisoformat(found[1].decode().replace("Z", "+00:00")).timestamp())
    except ValueError:  # not UTF-8, not a date
        return None


def render_atom(meta: FeedMeta, entries: Sequence[Entry]) -> bytes:
    meta, entries = cleaned(meta, entries)
    fg = _feed_generator(meta, entries)
    dated = feed_updated(meta, entries)
    fg.updated(utc(dated))
    # Atom needs an author on the feed unless every entry has one (deleted users have none): the
    # forum itself is the honest fallback, and entries without an author inherit it.
    fg.author(name=urlsplit(meta.forum_url).netloc or meta.forum_url, uri=meta.forum_url)
    # The alternate (the forum's page) first: readers such as @extractus/feed-extractor take the first
    # <link> as the feed's home page.
    fg.link(href=meta.html_url, rel="alternate", type="text/html")
    _self_link(fg, meta, ATOM_TYPE)
    fg.generator("feedbridge", version=__version__)
    if meta.site is not None:
        # `icon` square (the small logo or touch icon), `logo` the wide one (RFC 4287 §4.2.5, §4.2.8)
        if meta.site.icon_url:
            fg.icon(meta.site.icon_url)
        if meta.site.logo_url:
            fg.logo(meta.site.logo_url)
    threads = any(entry.replies is not None for entry in entries)
    if threads:
        fg.register_extension("thr", _Threading, _Threading, rss=False)
    for entry in entries:
        _add_atom_entry(fg, entry, dated, threads)
    return _with_prolog(fg.atom_str(xml_declaration=False), meta.stylesheet_url)


def _add_atom_entry(fg: Any, entry: Entry, feed_date: datetime, threads: bool) -> None:
    item = _add_entry(fg, entry)
    item.id(entry.id)
    item.updated(utc(updated(entry) or feed_date))  # required by Atom, optional (absent) elsewhere
    if entry.author:
        item.author(name=entry.author, uri=entry.author_url)  # feedgen skips a None uri
    if entry.summary or not entry.content_html:
        # Type text: the excerpt is plain text. An entry without content should have a summary (RFC 4287
        # §4.1.1.1): one whose list row has no excerpt is summed up by its title, as its JSON Feed item's text is.
        item.summary(entry.summary or entry.title)
    if entry.published:
        item.published(utc(entry.published))
    if threads and entry.replies is not None and entry.comments:  # a topic's (a post's or a period's is not known)
        # RFC 4685 §3, §4: the replies are on the topic's page, and how many there are
        item.thr.add(ATOM_LINK, rel="replies", type="text/html", href=entry.comments)
        item.thr.add("total", str(entry.replies))


def render_rss(meta: FeedMeta, entries: Sequence[Entry]) -> bytes:
    meta, entries = cleaned(meta, entries)
    fg = _feed_generator(meta, entries)
    fg.register_extension("dc", _DublinCore, _DublinCore, atom=False)
    if (last_build := newest(entries, meta.built)) is not None:
        last_build = utc(feed_updated(meta, entries))
        fg.lastBuildDate(last_build)
    if last_build is None or last_build.year < 1000:
        fg.register_extension("last_build_date", _LastBuildDate, atom=False)  # feedgen skips it on the entries
        fg.last_build_date.moment = last_build
    _self_link(fg, meta, RSS_TYPE)
    fg.link(href=meta.html_url, rel="alternate", type="text/html")  # the last link is the channel's <link>
    fg.generator(f"feedbridge {__version__}")
    if meta.site is not None and (picture := _rss_image(meta.site)):
        # title and link left out: feedgen writes the channel's, as RSS 2.0 asks of an image
        fg.image(picture)
    if meta.ttl:
        minutes, period, frequency = _refresh(meta.ttl)
        fg.ttl(minutes)
        fg.register_extension("sy", _Syndication, atom=False)
        fg.sy.add("updatePeriod", period)
        fg.sy.add("updateFrequency", str(frequency))
    for entry in entries:
        _add_rss_entry(fg, entry)
    with _RSS_DATES:
        rss = fg.rss_str(xml_declaration=False)
    return _with_prolog(rss, meta.stylesheet_url)


# feedgen writes each RSS date between `setlocale(LC_ALL, "C")` and a restore of the locale it saw before
# (`feedgen.util.formatRFC2822`), for English day and month names. Two threads doing that at once can leave
# the whole process in the C locale for good (one saves the other's "C" and restores it), after which every
# text file opened without an encoding is read as ASCII: seen in the test suite. One RSS string at a time
# keeps the dance whole. Greenlets never interleave inside it (it does not wait), and under the gevent
# worker this lock is gevent's, as the worker patches `threading` before it imports the app: an RSS render
# that takes its turns while holding it makes the other RSS renders wait, never the worker's loop. (Made
# before the patch, as gunicorn's `preload_app` would, it would be a thread lock that hangs the worker.)
_RSS_DATES = threading.Lock()


def _add_rss_entry(fg: Any, entry: Entry) -> None:
    item = _add_entry(fg, entry)
    # guid isPermaLink="true": the id URL resolves (Discourse redirects /t/ID to the topic), so
    # readers that link the guid still land on the topic; a post's (`/t/ID/NUMBER`) is its page. A digest's
    # id names a period, a notification's or a bookmark's a row of a member's list: no page.
    item.guid(entry.id, permalink=entry.kind in ("topic", "post"))
    if entry.author:
        item.dc.add("creator", entry.author)
    if summary := entry.summary or (entry.content_html and (_text_of(entry.content_html) or entry.title)):
        # <description> is HTML by RSS convention: the plain-text excerpt escaped, so `a<b` stays text, and the
        # content (a first post, a post, a digest's list) in content:encoded beside it. An entry with content
        # and no excerpt is described by its content's text (its title, for a picture alone): with no
        # description, feedgen wrote the content as the description, where the browser view took it for an
        # escaped excerpt and showed its markup.
        item.summary(html.escape(summary, quote=False))
    if published := entry.published or entry.updated:
        item.pubDate(utc(published))
    if entry.comments:
        # The topic's page (Miniflux shows it as the comments button); a post's is its topic's, a digest has none.
        item.comments(entry.comments)


EXCERPT_CHARS = 300
"""The longest description an RSS item's content gives it, cut at a word (`_text_of`)."""
_BLOCKS = ("address", "article", "aside", "blockquote", "br", "dd", "details", "div", "dl", "dt", "figcaption",
           "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li", "ol", "p", "pre", "section", "summary", "table",
           "td", "th", "tr", "ul")
"""Elements whose start and end are a break in the text (HTML's block and table elements, and `br`): a digest's
`<li>`s, a post's paragraphs and a quote's title before its text are written with nothing between them, and their
words ran together."""


def _text_of(content_html: str) -> str:
    """The text of an entry's HTML content (sanitised by `render.sanitize`, or a digest's list of escaped
    text), on one line, cut at a word to at most `EXCERPT_CHARS` characters; empty when it holds none."""
    root = fragment_fromstring(content_html, create_parent="div")
    for block in root.iter(*_BLOCKS):  # a break at its start and at its end
        block.text, block.tail = " " + (block.text or ""), " " + (block.tail or "")
    text = " ".join(root.text_content().split())
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS].rsplit(" ", 1)[0] + "…"


def _feed_generator(meta: FeedMeta, entries: Sequence[Entry]) -> Any:
    """The parts Atom and RSS share. The dates and the links' order differ, and are set by the caller."""
    fg = FeedGenerator()
    fg.register_extension("slash", _Slash, _Slash)
    if any(entry.thumbnail for entry in entries):
        fg.register_extension("media", _Media, _Media)
    fg.id(meta.feed_id)
    fg.title(meta.title)
    fg.description(description(meta))  # RSS's description, Atom's subtitle
    if meta.site is not None and meta.site.language:
        fg.language(meta.site.language)  # RSS's language, Atom's xml:lang
    return fg


def _self_link(fg: Any, meta: FeedMeta, media_type: str) -> None:
    if meta.self_url:
        fg.link(href=meta.self_url, rel="self", type=media_type.partition(";")[0])


def _add_entry(fg: Any, entry: Entry) -> Any:
    """The part Atom and RSS share; feedgen gives the item the extensions registered on the feed."""
    take_turn()
    # feedgen prepends by default, which would reverse the caller's order
    item = fg.add_entry(_Entry(), order="append")
    item.title(entry.title)
    # Exactly one link, the entry's page, which feedgen takes as the entry's alternate: feedgen 1.0 drops
    # rel attributes on entry links, so a second one would turn into a duplicate rel=alternate.
    item.link(href=entry.link)
    if entry.content_html:
        item.content(entry.content_html, type="html")  # Atom content, RSS content:encoded
    if terms := categories(entry):
        item.category([{"term": term} for term in terms])
    if entry.replies is not None:
        item.slash.add("comments", str(entry.replies))
    if entry.thumbnail:
        item.media.add("thumbnail", url=entry.thumbnail)
    return item


def _rss_image(site: Site) -> str | None:
    """RSS 2.0's `image` is "the URL of a GIF, JPEG or PNG image": the forum's square icon, else its logo, else
    its favicon, the first whose name says it is one. Many forums' logos are SVG and their favicons ICO, which
    a reader decoding the image as RSS promises cannot show; Atom's `icon` and `logo` and JSON Feed's `icon`
    and `favicon` may be any image, and keep them."""
    return next((url for url in (site.icon_url, site.logo_url, site.favicon_url)
                 if url and urlsplit(url).path.lower().endswith(_RSS_IMAGE_TYPES)), None)


def _refresh(ttl: int) -> tuple[int, str, int]:
    """RSS's `ttl` (whole minutes, at least one) and the syndication module's period and frequency (the times a
    reader may look again in that period, rounded down) for a copy served `ttl` seconds."""
    minutes = max(1, -(-ttl // 60))
    period, seconds = next(((name, length) for name, length in (("hourly", 3600), ("daily", 86400))
                            if ttl <= length), ("weekly", 7 * 86400))
    return minutes, period, max(1, seconds // ttl)


def _with_prolog(body: bytes, stylesheet_url: str | None) -> bytes:
    if not stylesheet_url:
        return _XML_DECLARATION + body
    href = html.escape(stylesheet_url, quote=True)  # also makes a `?>` in the URL harmless
    return _XML_DECLARATION + f'<?xml-stylesheet type="text/xsl" href="{href}"?>\n'.encode() + body


