"""Every feed kind against the texts a demanding feed reader is written to: RFC 4287 (Atom), RSS 2.0 and the RSS
Advisory Board's profile, JSON Feed 1.1, RFC 3339 and RFC 822 dates, and the extensions the feeds carry
(slash:comments, dc:creator, atom:link in RSS, media:thumbnail, RFC 4685's thr, the syndication module, the
xml-stylesheet processing instruction).

`violations(fmt, body)` checks one document mechanically, a rule at a time, and names each rule it breaks (the
rules are listed in `atom_violations`, `rss_violations`, `json_violations` and `xml_violations`); XML must also be
well-formed to lxml with every prefix declared, and feedparser must find nothing wrong (bozo 0). The feeds checked
are real ones: every kind the offline demo answers (`feedbridge.demo`, in process, over a real socket), `/filter`
from the fake forum, `feedbridge build` of saved lists, and forums and lists as hostile as a forum can make them
(no author, no date, dates from the year 1 to 9999, markup, entities cut short, control characters and
direction marks in titles, very long titles, non-ASCII in URLs, odd category and tag names), plus the renderer's
own entry kinds (personal ones included) from hand-built entries.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import feedparser
import httpx
import pytest
from lxml import etree
from werkzeug.serving import make_server

from feedbridge.demo import FORUM_NAME
from feedbridge.demo.wsgi import create_app as create_demo_app
from feedbridge.models import Entry, Site
from feedbridge.render.formats import FEED_FORMATS, FORMATS, render
from tests.appserver import running_app, settings_for
from tests.fake_posts import PostSite
from tests.test_cli import SEED
from tests.test_cli import run as run_cli
from tests.test_render import FORUM, META, at, entries, topic
from tests.test_validity import is_uri
from tests.upstream import FakeForum

ATOM_NS = "http://www.w3.org/2005/Atom"
A = f"{{{ATOM_NS}}}"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
XML_BASE = "{http://www.w3.org/XML/1998/namespace}base"
CONTENT_ENCODED = "{http://purl.org/rss/1.0/modules/content/}encoded"
DC_CREATOR = "{http://purl.org/dc/elements/1.1/}creator"
SLASH_COMMENTS = "{http://purl.org/rss/1.0/modules/slash/}comments"
THR_TOTAL = "{http://purl.org/syndication/thread/1.0}total"
MEDIA_THUMBNAIL = "{http://search.yahoo.com/mrss/}thumbnail"
SY = "{http://purl.org/rss/1.0/modules/syndication/}"
EMPTY_LIST = Path(__file__).resolve().parent.parent / "fixtures" / "dialects" / "widgets-c4-empty.md"

# RFC 3339 §5.6 date-time; RFC 4287 §3.3 asks for an uppercase "T" and "Z".
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")
# RFC 822 §5 as RSS 2.0 takes it, with the four-digit year the RSS profile asks for (and RFC 1123 §5.2.14).
_DAYS = "Mon|Tue|Wed|Thu|Fri|Sat|Sun"
_MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
RFC822 = re.compile(rf"(?:(?P<day>{_DAYS}), )?\d{{1,2}} (?:{_MONTHS}) \d{{4}} \d{{2}}:\d{{2}}(?::\d{{2}})? "
                    r"(?:[+-]\d{4}|UT|GMT|[ECMP][SD]T|[A-IK-Za-ik-z])")
# RFC 5646 §2.1 langtag, and a private use tag (grandfathered tags are never written here).
_ALNUM = "[A-Za-z0-9]"
BCP47 = re.compile(
    r"(?:[A-Za-z]{2,3}(?:-[A-Za-z]{3}){0,3}|[A-Za-z]{4,8})(?:-[A-Za-z]{4})?(?:-(?:[A-Za-z]{2}|[0-9]{3}))?"
    rf"(?:-(?:{_ALNUM}{{5,8}}|[0-9]{_ALNUM}{{3}}))*(?:-[0-9A-WY-Za-wy-z](?:-{_ALNUM}{{2,8}})+)*"
    rf"(?:-[Xx](?:-{_ALNUM}{{1,8}})+)?|[Xx](?:-{_ALNUM}{{1,8}})+"
)
RSS_IMAGE_TYPES = (".gif", ".jpg", ".jpeg", ".png")  # RSS 2.0 <image>: "the URL of a GIF, JPEG or PNG image"
_PSEUDO_ATTRIBUTE = re.compile(r'(\w+)="([^"<]*)"')


def rfc3339(text: str | None) -> bool:
    if text is None or not RFC3339.fullmatch(text):
        return False
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def rfc822(text: str | None) -> bool:
    """The syntax, a real date, and the day of the week that date falls on."""
    found = RFC822.fullmatch(text) if text else None
    if found is None:
        return False
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return False
    return found["day"] is None or found["day"] == ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")[moment.weekday()]


class _Links(HTMLParser):
    """Every href and src of an HTML fragment."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("href", "src") and value is not None]


def relative_urls(html: str | None) -> list[str]:
    """The links and pictures of HTML that a reader would resolve against the feed's own URL: no xml:base is
    written, so each must carry its scheme."""
    return [url for url in _Links(html or "").urls if not urlsplit(url.strip()).scheme]


def _count(parent: etree._Element, name: str) -> int:
    return len(parent.findall(f"{A}{name}"))


# --- XML, whatever the format -------------------------------------------------------------------------------

def xml_violations(body: bytes, version: str) -> list[str]:
    """XML 1.0 and Namespaces in XML: the UTF-8 declaration first, well-formed, every prefix declared (lxml refuses
    an undeclared one); the only processing instruction an xml-stylesheet one in the prolog, with its type and
    href ("Associating Style Sheets with XML documents"); feedparser reads it as `version` and finds nothing wrong."""
    if not body.startswith(b'<?xml version="1.0" encoding="UTF-8"?>'):
        return ["XML: no UTF-8 declaration first"]
    try:
        root = etree.fromstring(body, etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError as exc:
        return [f"XML: not well-formed or a prefix undeclared: {exc}"]
    found = []
    for node in root.itersiblings(preceding=True):
        if not isinstance(node, etree._ProcessingInstruction) or node.target != "xml-stylesheet":
            found.append(f"XML: {node!r} before the root")
            continue
        attributes = dict(_PSEUDO_ATTRIBUTE.findall(node.text or ""))
        if attributes.get("type") not in ("text/xsl", "text/css", "application/xslt+xml") or not attributes.get("href"):
            found.append(f"xml-stylesheet: type and href required, got {node.text!r}")
    if any(isinstance(node, etree._ProcessingInstruction) for node in root.iter()):
        found.append("XML: a processing instruction inside the document")
    parsed = feedparser.parse(body)
    if parsed.bozo:
        found.append(f"feedparser: bozo {parsed.bozo_exception}")
    if parsed.version != version:
        found.append(f"feedparser: read as {parsed.version!r}, not {version}")
    return found


# --- Atom ----------------------------------------------------------------------------------------------------

def _text_construct(element: etree._Element, where: str) -> list[str]:
    """RFC 4287 §3.1: type text, html or xhtml; text and html hold no child element (html is escaped text)."""
    kind = element.get("type", "text")
    if kind not in ("text", "html", "xhtml"):
        return [f"RFC 4287 3.1: {where} type {kind!r}"]
    if kind != "xhtml" and len(element):
        return [f"RFC 4287 3.1.1: {where} of type {kind} holds elements"]
    return []


def _person(person: etree._Element, where: str) -> list[str]:
    """RFC 4287 §3.2: exactly one name (and a demanding reader wants one it can show), at most one uri, an IRI,
    and at most one email."""
    found = []
    if _count(person, "name") != 1 or not (person.findtext(f"{A}name") or "").strip():
        found.append(f"RFC 4287 3.2.1: {where} has no one non-blank name")
    if _count(person, "uri") > 1 or _count(person, "email") > 1:
        found.append(f"RFC 4287 3.2: {where} has several uri or email")
    if (uri := person.findtext(f"{A}uri")) is not None and not is_uri(uri):
        found.append(f"RFC 4287 3.2.2: {where} uri {uri!r}")
    return found


def _links(parent: etree._Element, where: str) -> list[str]:
    """RFC 4287 §4.2.7: an href, an IRI; one alternate link per type and hreflang; hreflang a language tag;
    length a number. RFC 4685 §4: a replies link says its type."""
    found, alternates = [], set()
    for link in parent.findall(f"{A}link"):
        rel = link.get("rel", "alternate")
        if not is_uri(link.get("href")):
            found.append(f"RFC 4287 4.2.7.1: {where} link href {link.get('href')!r}")
        if rel == "alternate":
            key = (link.get("type"), link.get("hreflang"))
            if key in alternates:
                found.append(f"RFC 4287 4.1.1: {where} has two alternate links of type and hreflang {key}")
            alternates.add(key)
        if rel == "replies" and not link.get("type"):
            found.append(f"RFC 4685 4: {where} replies link without its type")
        if (hreflang := link.get("hreflang")) is not None and not BCP47.fullmatch(hreflang):
            found.append(f"RFC 4287 4.2.7.4: {where} hreflang {hreflang!r}")
        if (length := link.get("length")) is not None and not length.isdigit():
            found.append(f"RFC 4287 4.2.7.6: {where} link length {length!r}")
    return found


def _extensions(parent: etree._Element, where: str) -> list[str]:
    """slash:comments and thr:total (RFC 4685 §5) non-negative integers, at most one; media:thumbnail a URL."""
    found = []
    for name in (SLASH_COMMENTS, THR_TOTAL):
        counts = parent.findall(name)
        if len(counts) > 1 or any(not (c.text or "").isdigit() for c in counts):
            found.append(f"{where}: {name} not one non-negative integer")
    found += [f"Media RSS: {where} thumbnail url {t.get('url')!r}"
              for t in parent.findall(MEDIA_THUMBNAIL) if not is_uri(t.get("url"))]
    return found


def atom_violations(body: bytes, self_link: bool = True) -> list[str]:
    """RFC 4287 (§4.1.1 the feed, §4.1.2 an entry, §3 its constructs) and the extensions an Atom feed carries."""
    found = xml_violations(body, "atom10")
    if found and found[0].startswith("XML:"):
        return found
    root = etree.fromstring(body)
    if root.tag != f"{A}feed":
        return [*found, f"RFC 4287 4.1.1: the root is {root.tag}"]
    for element in root.iter():
        if isinstance(element.tag, str) and (lang := element.get(XML_LANG)) and not BCP47.fullmatch(lang):
            found.append(f"RFC 4287 2: xml:lang {lang!r} is no language tag")
    for name in ("id", "title", "updated"):
        if _count(root, name) != 1:
            found.append(f"RFC 4287 4.1.1: the feed has {_count(root, name)} {name}")
    for name in ("generator", "icon", "logo", "rights", "subtitle"):
        if _count(root, name) > 1:
            found.append(f"RFC 4287 4.1.1: the feed has several {name}")
    if not is_uri(root.findtext(f"{A}id")):
        found.append(f"RFC 4287 4.2.6: feed id {root.findtext(f'{A}id')!r} is no IRI")
    if not rfc3339(root.findtext(f"{A}updated")):
        found.append(f"RFC 4287 3.3: feed updated {root.findtext(f'{A}updated')!r}")
    if not (root.findtext(f"{A}title") or "").strip():
        found.append("RFC 4287 4.2.14: a blank feed title")
    for name in ("title", "subtitle", "rights"):
        for element in root.findall(f"{A}{name}"):
            found += _text_construct(element, f"feed {name}")
    for name in ("icon", "logo"):
        found += [f"RFC 4287 4.2.5: feed {name} {e.text!r}" for e in root.findall(f"{A}{name}") if not is_uri(e.text)]
    feed_authors = root.findall(f"{A}author")
    for person in feed_authors:
        found += _person(person, "the feed's author")
    found += _links(root, "the feed")
    selves = [link for link in root.findall(f"{A}link") if link.get("rel") == "self"]
    if self_link and [link.get("type") for link in selves] != ["application/atom+xml"]:
        found.append("RFC 4287 4.1.1: the feed SHOULD have one self link (application/atom+xml)")
    for category in root.iter(f"{A}category"):
        if category.get("term") is None:
            found.append("RFC 4287 4.2.2.1: a category without term")
    ids = []
    for n, entry in enumerate(root.findall(f"{A}entry")):
        where = f"entry {n}"
        for name in ("id", "title", "updated"):
            if _count(entry, name) != 1:
                found.append(f"RFC 4287 4.1.2: {where} has {_count(entry, name)} {name}")
        for name in ("content", "published", "rights", "source", "summary"):
            if _count(entry, name) > 1:
                found.append(f"RFC 4287 4.1.2: {where} has several {name}")
        ids.append(entry_id := entry.findtext(f"{A}id"))
        if not is_uri(entry_id):
            found.append(f"RFC 4287 4.2.6: {where} id {entry_id!r} is no IRI")
        if not (entry.findtext(f"{A}title") or "").strip():
            found.append(f"RFC 4287 4.2.14: {where} has a blank title")
        for name in ("updated", "published"):
            found += [f"RFC 4287 3.3: {where} {name} {e.text!r}" for e in entry.findall(f"{A}{name}") if not rfc3339(e.text)]
        authors = entry.findall(f"{A}author")
        if not authors and not feed_authors:
            found.append(f"RFC 4287 4.1.2: {where} has no author, nor has the feed")
        for person in authors:
            found += _person(person, f"{where}'s author")
        for name in ("title", "summary", "rights"):
            for element in entry.findall(f"{A}{name}"):
                found += _text_construct(element, f"{where} {name}")
        content = entry.find(f"{A}content")
        if content is None:
            if not [link for link in entry.findall(f"{A}link") if link.get("rel", "alternate") == "alternate"]:
                found.append(f"RFC 4287 4.1.2: {where} has neither content nor an alternate link")
        else:
            found += _text_construct(content, f"{where} content")
            if content.get("type") == "html" and entry.get(XML_BASE) is None:
                found += [f"{where}: relative URL {url!r} in its content" for url in relative_urls(content.text)]
        found += _links(entry, where)
        found += _extensions(entry, where)
    if len(set(ids)) != len(ids):
        found.append(f"RFC 4287 4.2.6: entries share ids {sorted({i for i in ids if ids.count(i) > 1})}")
    return found


# --- RSS 2.0 -------------------------------------------------------------------------------------------------

_CHANNEL_ONCE = ("language", "copyright", "managingEditor", "webMaster", "pubDate", "lastBuildDate", "generator",
                 "docs", "cloud", "ttl", "image", "rating", "textInput", "skipHours", "skipDays")
_ITEM_ONCE = ("title", "link", "description", "author", "comments", "guid", "pubDate", "source", CONTENT_ENCODED,
              DC_CREATOR)


def _channel(channel: etree._Element, self_link: bool) -> list[str]:
    found = []
    for name in ("title", "link", "description"):
        if len(channel.findall(name)) != 1 or not (channel.findtext(name) or "").strip():
            found.append(f"RSS 2.0: the channel needs one non-blank {name}")
    found += [f"RSS 2.0: the channel has several {name}" for name in _CHANNEL_ONCE if len(channel.findall(name)) > 1]
    if not is_uri(channel.findtext("link")):
        found.append(f"RSS 2.0: channel link {channel.findtext('link')!r}")
    for name in ("pubDate", "lastBuildDate"):
        if (date := channel.findtext(name)) is not None and not rfc822(date):
            found.append(f"RSS 2.0 (RFC 822, a four-digit year): channel {name} {date!r}")
    if (language := channel.findtext("language")) is not None and not BCP47.fullmatch(language):
        found.append(f"RSS profile: language {language!r}")
    if (ttl := channel.findtext("ttl")) is not None and not ttl.isdigit():
        found.append(f"RSS 2.0: ttl {ttl!r} is no number of minutes")
    if (image := channel.find("image")) is not None:
        url = image.findtext("url")
        if not (is_uri(url) and image.findtext("title") and is_uri(image.findtext("link"))):
            found.append("RSS 2.0: an image needs its url, title and link")
        elif not urlsplit(url).path.lower().endswith(RSS_IMAGE_TYPES):
            found.append(f"RSS 2.0: image url {url!r} is no GIF, JPEG or PNG image")
        if (image.findtext("title"), image.findtext("link")) != (channel.findtext("title"), channel.findtext("link")):
            found.append("RSS profile: the image's title and link are not the channel's")
        for name, bound in (("width", 144), ("height", 400)):
            if (size := image.findtext(name)) is not None and not (size.isdigit() and int(size) <= bound):
                found.append(f"RSS 2.0: image {name} {size!r} (at most {bound})")
    atom_links = channel.findall(f"{A}link")
    selves = [link for link in atom_links if link.get("rel") == "self"]
    if self_link and [link.get("type") for link in selves] != ["application/rss+xml"]:
        found.append("RSS profile: the channel should have one atom:link rel=self of type application/rss+xml")
    found += [f"RSS profile: atom:link href {link.get('href')!r}" for link in atom_links if not is_uri(link.get("href"))]
    if (period := channel.findtext(f"{SY}updatePeriod")) is not None and period not in (
            "hourly", "daily", "weekly", "monthly", "yearly"):
        found.append(f"syndication module: updatePeriod {period!r}")
    if (frequency := channel.findtext(f"{SY}updateFrequency")) is not None and not (
            frequency.isdigit() and int(frequency) > 0):
        found.append(f"syndication module: updateFrequency {frequency!r}")
    return found


def _item(item: etree._Element, where: str) -> list[str]:
    found = []
    if item.find("title") is None and item.find("description") is None:
        found.append(f"RSS 2.0: {where} has neither title nor description")
    found += [f"RSS 2.0: {where} has several {name}" for name in _ITEM_ONCE if len(item.findall(name)) > 1]
    if (title := item.find("title")) is not None and not (title.text or "").strip():
        found.append(f"RSS 2.0: {where} has a blank title")
    if item.find("author") is not None and item.find(DC_CREATOR) is not None:
        found.append(f"RSS profile: {where} has both author and dc:creator")
    if (creator := item.find(DC_CREATOR)) is not None and not (creator.text or "").strip():
        found.append(f"RSS profile: {where} has a blank dc:creator")
    for name in ("link", "comments"):
        if (url := item.findtext(name)) is not None and not is_uri(url):
            found.append(f"RSS 2.0: {where} {name} {url!r}")
    if (guid := item.find("guid")) is not None:
        permalink = guid.get("isPermaLink", "true")
        if permalink not in ("true", "false"):
            found.append(f"RSS 2.0: {where} isPermaLink {permalink!r}")
        elif permalink == "true" and not (is_uri(guid.text) and urlsplit(guid.text).scheme in ("http", "https")):
            found.append(f"RSS 2.0: {where} guid {guid.text!r} says it is a permalink and is no URL")
    if (date := item.findtext("pubDate")) is not None and not rfc822(date):
        found.append(f"RSS 2.0 (RFC 822, a four-digit year): {where} pubDate {date!r}")
    for enclosure in item.findall("enclosure"):
        if not (is_uri(enclosure.get("url")) and (enclosure.get("length") or "").isdigit() and enclosure.get("type")):
            found.append(f"RSS 2.0: {where} enclosure needs url, length and type")
    found += [f"RSS 2.0: {where} source without url" for s in item.findall("source") if not is_uri(s.get("url"))]
    for name in ("description", CONTENT_ENCODED):
        found += [f"RSS profile: relative URL {url!r} in {where}'s {name}" for url in relative_urls(item.findtext(name))]
    return found + _extensions(item, where)


def rss_violations(body: bytes, self_link: bool = True) -> list[str]:
    """RSS 2.0 and the RSS Advisory Board's profile, and the extensions an RSS feed carries."""
    found = xml_violations(body, "rss20")
    if found and found[0].startswith("XML:"):
        return found
    root = etree.fromstring(body)
    channels = root.findall("channel")
    if root.tag != "rss" or root.get("version") != "2.0" or len(channels) != 1:
        return [*found, "RSS 2.0: no rss version 2.0 root with one channel"]
    found += _channel(channels[0], self_link)
    guids = []
    for n, item in enumerate(channels[0].findall("item")):
        found += _item(item, f"item {n}")
        guids.append(item.findtext("guid"))
    if len(set(guids)) != len(guids):
        found.append(f"RSS profile: items share guids {sorted({g for g in guids if guids.count(g) > 1})}")
    return found


# --- JSON Feed 1.1 -------------------------------------------------------------------------------------------

_JSON_TOP = {"version", "title", "home_page_url", "feed_url", "description", "user_comment", "next_url", "icon",
             "favicon", "authors", "author", "language", "expired", "hubs", "items"}
_JSON_ITEM = {"id", "url", "external_url", "title", "content_html", "content_text", "summary", "image", "banner_image",
              "date_published", "date_modified", "authors", "author", "tags", "language", "attachments"}
_EXTENSION = re.compile(r"_[A-Za-z]\w*")


def _nulls(value: object, path: str) -> list[str]:
    if value is None:
        return [f"JSON Feed: null at {path} (a field without a value is left out)"]
    if isinstance(value, dict):
        return [found for key, child in value.items() for found in _nulls(child, f"{path}.{key}")]
    if isinstance(value, list):
        return [found for n, child in enumerate(value) for found in _nulls(child, f"{path}[{n}]")]
    return []


def _keys(obj: dict, known: set[str], where: str) -> list[str]:
    """Only the spec's keys, and extensions: `_` and a letter, each an object."""
    return [f"JSON Feed: {where} key {key!r} is neither the spec's nor an extension object" for key, value in obj.items()
            if key not in known and not (_EXTENSION.fullmatch(key) and isinstance(value, dict))]


def _authors(obj: dict, where: str) -> list[str]:
    """`authors` (1.1), a non-empty array of objects with a name, url or avatar, strings, the url a URL; the
    deprecated `author` only beside it (for 1.0 readers)."""
    if "author" in obj and "authors" not in obj:
        return [f"JSON Feed 1.1: {where} has the deprecated author without authors"]
    authors = obj.get("authors", [])
    if "authors" in obj and (not isinstance(authors, list) or not authors):
        return [f"JSON Feed 1.1: {where} authors is no non-empty array"]
    found = []
    for author in authors + ([obj["author"]] if "author" in obj else []):
        if not isinstance(author, dict) or not {"name", "url", "avatar"} & set(author):
            found.append(f"JSON Feed 1.1: {where} has an author with neither name, url nor avatar")
            continue
        found += _keys(author, {"name", "url", "avatar"}, f"{where}'s author")
        if any(not isinstance(author[k], str) for k in ("name", "url", "avatar") if k in author):
            found.append(f"JSON Feed 1.1: {where} has an author field that is no string")
        found += [f"JSON Feed 1.1: {where} author {k} {author[k]!r}" for k in ("url", "avatar")
                  if k in author and not is_uri(author[k])]
    return found


def json_violations(body: bytes, self_link: bool = True) -> list[str]:
    """JSON Feed 1.1: UTF-8 JSON, its required fields and types, URLs, RFC 3339 dates, unique string ids, content
    on every item, `authors`, extensions, and no null where a field is to be left out."""
    try:
        feed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return [f"JSON Feed: no UTF-8 JSON: {exc}"]
    if body.startswith(b"\xef\xbb\xbf") or not isinstance(feed, dict):
        return ["JSON Feed: no JSON object (or a byte order mark)"]
    found = _nulls(feed, "$") + _keys(feed, _JSON_TOP, "the feed") + _authors(feed, "the feed")
    if feed.get("version") != "https://jsonfeed.org/version/1.1":
        found.append(f"JSON Feed 1.1: version {feed.get('version')!r}")
    if not isinstance(feed.get("title"), str) or not feed["title"].strip():
        found.append("JSON Feed 1.1: the feed needs a title")
    for key in ("home_page_url", "feed_url", "next_url", "icon", "favicon"):
        if key in feed and not is_uri(feed[key]):
            found.append(f"JSON Feed 1.1: {key} {feed[key]!r} is no URL")
    for key in ("description", "user_comment"):
        if key in feed and not isinstance(feed[key], str):
            found.append(f"JSON Feed 1.1: {key} is no string")
    if "home_page_url" not in feed or (self_link and "feed_url" not in feed):
        found.append("JSON Feed 1.1: home_page_url and feed_url are strongly recommended")
    if "language" in feed and not (isinstance(feed["language"], str) and BCP47.fullmatch(feed["language"])):
        found.append(f"JSON Feed 1.1: language {feed['language']!r} is no RFC 5646 tag")
    if "expired" in feed and not isinstance(feed["expired"], bool):
        found.append("JSON Feed 1.1: expired is no boolean")
    items = feed.get("items")
    if not isinstance(items, list):
        return [*found, "JSON Feed 1.1: items is no array"]
    ids = []
    for n, item in enumerate(items):
        where = f"item {n}"
        if not isinstance(item, dict):
            found.append(f"JSON Feed 1.1: {where} is no object")
            continue
        found += _keys(item, _JSON_ITEM, where) + _authors(item, where)
        ids.append(item_id := item.get("id"))
        if not isinstance(item_id, str) or not item_id:
            found.append(f"JSON Feed 1.1: {where} id {item_id!r} is no non-empty string")
        if not (isinstance(item.get("content_html"), str) or isinstance(item.get("content_text"), str)):
            found.append(f"JSON Feed 1.1: {where} has neither content_html nor content_text")
        found += [f"JSON Feed 1.1: {where} {key} is no string" for key in ("title", "summary", "content_html",
                                                                            "content_text") if key in item and not isinstance(item[key], str)]
        found += [f"JSON Feed 1.1: {where} {key} {item[key]!r} is no URL" for key in ("url", "external_url", "image",
                                                                                     "banner_image") if key in item and not is_uri(item[key])]
        found += [f"JSON Feed 1.1 (RFC 3339): {where} {key} {item[key]!r}" for key in ("date_published",
                                                                                      "date_modified") if key in item and not rfc3339(item[key])]
        if "tags" in item and not (isinstance(item["tags"], list) and all(isinstance(t, str) for t in item["tags"])):
            found.append(f"JSON Feed 1.1: {where} tags is no array of strings")
        if "language" in item and not (isinstance(item["language"], str) and BCP47.fullmatch(item["language"])):
            found.append(f"JSON Feed 1.1: {where} language {item['language']!r}")
        found += [f"{where}: relative URL {url!r} in content_html" for url in relative_urls(item.get("content_html"))]
    if len(set(map(str, ids))) != len(ids):
        found.append(f"JSON Feed 1.1: items share ids {sorted({str(i) for i in ids if ids.count(i) > 1})}")
    return found


CHECKS = {"atom": atom_violations, "rss": rss_violations, "json": json_violations}


def violations(fmt: str, body: bytes, self_link: bool = True) -> list[str]:
    """Every rule of its format `body` breaks; `self_link`: whether the feed knows its own URL (a served feed
    does, `feedbridge build` without `--self-url` does not)."""
    return CHECKS[fmt](body, self_link)


def entry_ids(fmt: str, body: bytes) -> list[str]:
    if fmt == "json":
        return [item["id"] for item in json.loads(body)["items"]]
    root = etree.fromstring(body)
    return root.xpath("a:entry/a:id/text()", namespaces={"a": ATOM_NS}) if fmt == "atom" else root.xpath(
        "channel/item/guid/text()")


def feed_id(fmt: str, body: bytes) -> str | None:
    """What identifies the feed itself: Atom's id, RSS's self link, JSON's feed_url."""
    if fmt == "json":
        return json.loads(body).get("feed_url")
    root = etree.fromstring(body)
    if fmt == "atom":
        return root.findtext(f"{A}id")
    return next(iter(root.xpath("channel/a:link[@rel='self']/@href", namespaces={"a": ATOM_NS})), None)


# --- the checkers catch what they are for ---------------------------------------------------------------------

GOOD_ATOM = render("atom", META, entries([topic(1, content_html="<p>x</p>")]))
GOOD_RSS = render("rss", META, entries([topic(1)]))
GOOD_JSON = render("json", META, entries([topic(1)]))
GOOD = {"atom": GOOD_ATOM, "rss": GOOD_RSS, "json": GOOD_JSON}


@pytest.mark.parametrize(("fmt", "broken", "rule"), [
    ("atom", GOOD_ATOM.replace(b"15+00:00</updated><author><name>user1", b"15</updated><author><name>user1"),
     "RFC 4287 3.3: entry 0 updated"),
    ("atom", GOOD_ATOM.replace(b"<entry><id>", b"<entry><id>x</id><id>"), "RFC 4287 4.1.2: entry 0 has 2 id"),
    ("atom", GOOD_ATOM.replace(b'xmlns="http://www.w3.org/2005/Atom"', b'xmlns="http://www.w3.org/2005/Atom" xml:lang="e n"'),
     "RFC 4287 2: xml:lang"),
    ("atom", GOOD_ATOM.replace(b"<entry>", b"<entry><m:x/>"), "XML: not well-formed or a prefix undeclared"),
    ("atom", GOOD_ATOM.replace(b"</entry>", b'<link href="https://x/2"/></entry>'), "RFC 4287 4.1.1: entry 0 has two alternate links"),
    ("atom", GOOD_ATOM.replace(b'type="html">', b'type="html"><b>x</b>'), "RFC 4287 3.1.1: entry 0 content of type html"),
    ("atom", GOOD_ATOM.replace(b"<thr:total>1", b"<thr:total>-1"), "entry 0: {http://purl.org/syndication/thread/1.0}total"),
    ("rss", GOOD_RSS.replace(b"<description>Topics", b"<x>Topics").replace(b"</description><atom", b"</x><atom"),
     "RSS 2.0: the channel needs one non-blank description"),
    ("rss", GOOD_RSS.replace(b'true">https://forum.example/sub/t/1', b'true">topic-1'), "RSS 2.0: item 0 guid"),
    ("rss", GOOD_RSS.replace(b"<pubDate>Mon, 02 Mar 2026", b"<pubDate>Mon, 02 Mar 26"), "RSS 2.0 (RFC 822, a four-digit year)"),
    ("rss", GOOD_RSS.replace(b"</item>", b"<author>a@b.example (a)</author></item>"), "RSS profile: item 0 has both"),
    ("rss", GOOD_RSS.replace(b"<docs>", b"<image><url>https://x/i.svg</url><title>t</title><link>https://x/</link></image><docs>"),
     "RSS 2.0: image url"),
    ("rss", GOOD_RSS.replace(b"Excerpt of topic 1", b'&lt;a href="/t/2"&gt;x&lt;/a&gt;'), "RSS profile: relative URL '/t/2'"),
    ("json", GOOD_JSON.replace(b'"summary"', b'"image":null,"summary"'), "JSON Feed: null at $.items[0].image"),
    ("json", GOOD_JSON.replace(b'"id":"https://forum.example/sub/t/1"', b'"id":1'), "JSON Feed 1.1: item 0 id 1"),
    ("json", GOOD_JSON.replace(b'"content_text"', b'"text"'), "JSON Feed 1.1: item 0 has neither"),
    ("json", GOOD_JSON.replace(b'"2026-03-02T12:30:15Z"', b'"26-03-02T12:30:15Z"'), "JSON Feed 1.1 (RFC 3339): item 0"),
    ("json", GOOD_JSON.replace(b'"authors":[{"name":"user1","url":"https://forum.example/sub/u/user1"}],', b""),
     "JSON Feed 1.1: item 0 has the deprecated author"),
    ("json", GOOD_JSON.replace(b'"_feedbridge":{"replies":1}', b'"replies":1'), "JSON Feed: item 0 key 'replies'"),
])
def test_each_checker_names_what_a_broken_feed_breaks(fmt, broken, rule):
    assert violations(fmt, GOOD[fmt]) == []
    assert any(found.startswith(rule) for found in violations(fmt, broken)), violations(fmt, broken)


@pytest.mark.parametrize(("date", "valid"), [
    ("Wed, 04 Mar 2026 12:30:15 +0000", True), ("4 Mar 2026 12:30 GMT", True),
    ("Thu, 04 Mar 2026 12:30:15 +0000", False),  # a Wednesday
    ("Tue, 01 Jan 999 00:00:00 +0000", False), ("Wed, 04 Mar 26 12:30:15 +0000", False),
    ("2026-03-04T12:30:15Z", False),
])
def test_rfc822_dates_as_rss_takes_them(date, valid):
    assert rfc822(date) is valid


@pytest.mark.parametrize(("date", "valid"), [
    ("2026-03-04T12:30:15Z", True), ("0999-01-01T00:00:00+00:00", True), ("2026-03-04T12:30:15.25-05:30", True),
    ("999-01-01T00:00:00Z", False), ("2026-03-04t12:30:15z", False), ("2026-02-30T00:00:00Z", False),
    ("2026-03-04T12:30:15", False),
])
def test_rfc3339_dates(date, valid):
    assert rfc3339(date) is valid


# --- every kind the service serves -----------------------------------------------------------------------------

# Every feed kind the offline demo answers, and its filters, digests and full content.
DEMO_KINDS = [
    "latest", "top?period=monthly", "hot", "c/compiler/5", "c/compiler/5/l/top", "c/hardware/gpu/12",
    "c/hardware/gpu/graphs/13", "tag/gpu", "tag/gpu/7", "tag/gpu+cuda", "u/ezyang", "u/smth", "latest?q=inductor",
    "c/compiler/5?q=inductor OR dynamo", "latest?min_likes=5&min_views=100", "c/compiler/5?tag=rfc",
    "latest?exclude_tag=gpu&exclude_category=11&exclude_pinned=1", "c/compiler/5?max_replies=0",
    "latest?digest=daily", "c/compiler/5?digest=weekly", "c/compiler/5?content=full", "c/compiler/5?pages=2",
    "t/467", "t/467?limit=5", "t/14", "posts", "u/Chillee/posts", "u/jansel/posts?content=full",
]


@pytest.fixture(scope="module")
def demo() -> Iterator[str]:
    """The demo's service (`feedbridge.demo.wsgi`, what `serve --demo` runs) on a real socket: its feeds'
    URLs, down to the forum's key."""
    app = create_demo_app()
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.port}/{FORUM_NAME}"
    finally:
        server.shutdown()
        app.extensions["feedbridge"].fetcher.close()


def feed_url(base: str, kind: str, fmt: str) -> str:
    path, _, query = kind.partition("?")
    return f"{base}/{path}.{fmt}" + (f"?{query}" if query else "")


def served(url: str, fmt: str) -> bytes:
    response = httpx.get(url, timeout=60)
    assert response.status_code == 200, f"{url}: {response.text[:300]}"
    assert response.headers["Content-Type"] == FORMATS[fmt].media_type
    return response.content


@pytest.mark.parametrize("kind", DEMO_KINDS)
def test_every_demo_feed_kind_keeps_every_rule_in_every_format(demo, kind):
    """As served, with its stylesheet instruction, self link, refresh hints and the forum's identity."""
    ids = {}
    for fmt in FEED_FORMATS:
        body = served(feed_url(demo, kind, fmt), fmt)
        assert violations(fmt, body) == [], kind
        ids[fmt] = entry_ids(fmt, body)
    assert ids["atom"] == ids["rss"] == ids["json"]  # one id per entry, whatever the format
    assert ids["atom"] or kind == "latest?q=inductor", f"{kind}: no entries to check"


@pytest.fixture(scope="module")
def uncached() -> Iterator[str]:
    """The fake forum (Markdown lists, the JSON of the same pages, `/filter`, generated posts) behind a bridge
    that keeps nothing: every request builds its feed again from the forum's pages. Its feeds' URLs."""
    with FakeForum(json_lists=True, posts=PostSite.standard().answer) as forum, \
            running_app(settings_for(forum.url, cache_ttl=0, forum_budget_10s=0)) as app:
        yield f"{app.url}/{app.forum_key}"


# /filter (the demo's copy has none), and a kind of each shape of id: a topic's, a post's, a digest's.
REBUILT_KINDS = ["filter?q=status:open", "filter?q=tag:gpu&keyword=cuda OR triton", "latest?content=full",
                 "tag/gpu+cuda", "u/Chillee", "c/compiler/5?digest=daily", "t/9003", "posts", "u/zoë/posts"]


@pytest.mark.parametrize("kind", REBUILT_KINDS)
def test_feeds_keep_every_rule_and_their_ids_across_rebuilds(uncached, kind):
    """Built twice from the forum's pages, a feed keeps its id and each entry's (RFC 4287 §4.2.6: an id never
    changes; JSON Feed: an item's id is unique and does not change), and its entries the same ids in every
    format."""
    ids = {}
    for fmt in FEED_FORMATS:
        url = feed_url(uncached, kind, fmt)
        first, again = served(url, fmt), served(url, fmt)
        assert violations(fmt, first) == [], kind
        assert (feed_id(fmt, again), entry_ids(fmt, again)) == (feed_id(fmt, first), entry_ids(fmt, first))
        ids[fmt] = entry_ids(fmt, first)
    assert ids["atom"] == ids["rss"] == ids["json"]
    assert ids["atom"] or "keyword" in kind, f"{kind}: no entries to check"


# --- hostile forums ---------------------------------------------------------------------------------------------

def raw_topic(topic_id: int, **fields: object) -> dict[str, object]:
    """A topic of a JSON list as core writes it; `fields` replace or add core's fields."""
    return {"id": topic_id, "title": f"Topic {topic_id}", "fancy_title": f"Topic {topic_id}", "slug": f"topic-{topic_id}",
            "posts_count": 3, "reply_count": 1, "created_at": "2026-09-10T10:00:00.000Z",
            "last_posted_at": "2026-09-19T23:59:59.000Z", "bumped_at": "2026-09-19T23:59:59.000Z", "pinned": False,
            "visible": True, "archetype": "regular", "category_id": 5, "tags": [], "excerpt": "An excerpt",
            "posters": [{"extras": "latest single", "description": "Original Poster", "user_id": 1}], **fields}


HOSTILE_TOPICS = [
    # dates as far back and forward as a date goes: RSS needs four digits for the year, RFC 3339 too
    # (bumped then too: a digest places a topic where the list orders it, by `bumped_at`)
    raw_topic(1, created_at="0001-01-01T00:00:00Z", last_posted_at="0999-12-31T23:59:59Z", bumped_at="0999-12-31T23:59:59Z"),
    raw_topic(2, created_at="9999-12-31T23:59:59Z", last_posted_at="9999-12-31T23:59:59Z", bumped_at="9999-12-31T23:59:59Z"),
    raw_topic(3, created_at=None, last_posted_at=None, bumped_at=None),  # no date at all
    raw_topic(4, posters=[]),  # no author
    raw_topic(5, posters=[{"description": "Original Poster", "user_id": 404}]),  # a deleted user
    raw_topic(6, title="<script>alert(1)</script> &amp; <b>\u202eevil\u202c</b> \u200f\x01\x7f\x9f",
              excerpt="ends mid-entity &am"),
    raw_topic(7, title="t" * 20_000, excerpt="e" * 20_000, image_url="//cdn.example/up loads/café.png"),
    raw_topic(8, slug="café crème/../ü?x=1#y", tags=["a b", "<t>", "&amp;", "\u202e", "ü" * 100], category_id=9),
    raw_topic(9, title="   ", excerpt="   "),
]
HOSTILE_USERS = [{"id": 1, "username": "Zoë"}]
HOSTILE_CATEGORIES = {"category_list": {"categories": [
    {"id": 5, "name": "<Odd> & \u202ename", "slug": "odd", "subcategory_ids": []},
    {"id": 9, "name": "   ", "slug": "blank", "subcategory_ids": []},
]}}


@pytest.mark.parametrize("topics", [HOSTILE_TOPICS, []], ids=["hostile", "empty"])
@pytest.mark.parametrize("kind", ["latest", "latest?digest=daily", "latest?digest=weekly", "latest?content=full"])
def test_a_hostile_forums_feeds_keep_every_rule(kind, topics):
    with FakeForum(mode="json") as forum:
        forum.set_body("/latest.json", json.dumps({"users": HOSTILE_USERS, "topic_list": {"topics": topics}}))
        forum.set_body("/categories.json", json.dumps(HOSTILE_CATEGORIES))
        with running_app(settings_for(forum.url)) as app:
            for fmt in FEED_FORMATS:
                body = served(feed_url(f"{app.url}/{app.forum_key}", kind, fmt), fmt)
                assert violations(fmt, body) == [], kind
                # one entry a topic, or a period a day or week: the year 999 or 1000 and 2026 (9999 is past the build,
                # and in no period: feeds/select/digest.py)
    assert len(entry_ids(fmt, body)) == (0 if not topics else 2 if "digest" in kind else len(topics))


def test_an_rss_image_is_a_gif_jpeg_or_png_and_atom_and_json_keep_the_forums_icon(demo, upstream_json):
    """The demo's forum has SVG pictures only, as many forums have: RSS 2.0's image must be a GIF, JPEG or PNG,
    so its channel has none, while Atom's icon and JSON Feed's icon, which may be any image, keep them. A forum
    whose small logo is an SVG still gets its PNG favicon as the RSS image."""
    rss = etree.fromstring(served(feed_url(demo, "latest", "rss"), "rss"))
    assert rss.find("channel/image") is None
    atom = etree.fromstring(served(feed_url(demo, "latest", "atom"), "atom"))
    assert atom.findtext(f"{A}icon").endswith("/dev-discuss-icon.svg")
    assert json.loads(served(feed_url(demo, "latest", "json"), "json"))["icon"].endswith("/dev-discuss-icon.svg")
    info = json.loads(httpx.get(f"{upstream_json.url}/site/basic-info.json", timeout=10).content)
    small = info["logo_small_url"].replace(".png", ".svg")
    upstream_json.set_body("/site/basic-info.json", json.dumps(info | {"logo_small_url": small}))
    with running_app(settings_for(upstream_json.url)) as app:
        body = served(app.feed_url("/latest.rss"), "rss")
        assert violations("rss", body) == []
        assert etree.fromstring(body).findtext("channel/image/url") == info["logo_url"]
        assert etree.fromstring(served(app.feed_url("/latest.atom"), "atom")).findtext(f"{A}icon") == small


# --- feedbridge build -------------------------------------------------------------------------------------------

HOSTILE_LIST = "# hostile\n\n**URL:** https://forum.example.org/latest.md\n" + "".join(f"""
---

## [{title}](https://forum.example.org/t/{slug}/{n})

<div class="topic-metadata">

**Author:** [@{author}](https://forum.example.org/u/{author})\\
**Replies:** {n}\\
**Last updated:** [then](https://forum.example.org/t/{slug}/{n} "{iso}")

</div>

{excerpt}
""" for n, (title, slug, author, iso, excerpt) in enumerate([
    ("\\<b\\>bold\\</b\\> &amp; \u202eRTL\u200f", "bold", "Zoë", "0999-01-01T00:00:00Z", "ends mid &am"),
    ("x" * 5000, "long", "\\ ", "9999-12-31T23:59:59Z", "&#x26"),
    ("caf\u00e9 \U0001f600", "caf%C3%A9", "用户42", "2026-01-01T00:00:00+05:00", "&lt;script&gt;"),
], start=1))


@pytest.mark.parametrize("fmt", FEED_FORMATS)
@pytest.mark.parametrize("args", [(str(SEED),), (str(SEED), "--digest", "weekly"), (str(EMPTY_LIST),),
                                  ("-", "--self-url", "https://feeds.example/hostile.xml")],
                         ids=["fixture", "digest", "empty", "hostile"])
def test_cli_builds_keep_every_rule(fmt, args):
    result = run_cli("build", *args, "--format", fmt, stdin=HOSTILE_LIST.encode() if args[0] == "-" else None)
    assert result.returncode == 0, result.stderr
    assert violations(fmt, result.stdout, self_link="--self-url" in args) == []


# --- the renderer's own entry kinds -------------------------------------------------------------------------------

KINDS = [
    *entries([topic(1, image_url="https://cdn.example/a.png", content_html='<p><a href="https://x/y">y</a></p>'),
              topic(2, author=None, author_url=None, last_posted_at=None, replies=None, excerpt=None)]),
    Entry(kind="post", id=f"{FORUM}/t/3/2", link=f"{FORUM}/t/slug-3/3/2", title="Re: Topic 3 #2", author="Zoë",
          author_url=f"{FORUM}/u/Zo%C3%AB", published=at(3), updated=at(4), content_html="<p>a post</p>",
          comments=f"{FORUM}/t/3", post_number=2),
    Entry(kind="digest", id=f"{FORUM}/latest.md#digest=daily/digest/2026-03-05", link=f"{FORUM}/latest#digest-2026-03-05",
          title="2026-03-05: 1 topic", published=datetime(2026, 3, 5, tzinfo=UTC), updated=at(5),
          content_html='<ul><li><a href="https://forum.example/t/1">x</a></li></ul>'),
    Entry(kind="personal", id=f"{FORUM}/my/notifications#12", link=f"{FORUM}/t/slug-4/4/3",
          title="bob replied to “Topic 4”", author="bob", author_url=f"{FORUM}/u/bob", published=at(6), updated=at(6)),
    Entry(kind="personal", id=f"{FORUM}/my/activity/bookmarks#7", link=f"{FORUM}/t/slug-5/5",
          title="Topic 5", published=datetime(1, 1, 1, tzinfo=UTC), updated=datetime(999, 6, 1, tzinfo=UTC)),
]
SITE = Site(logo_url="https://cdn.example/logo.svg", icon_url="https://cdn.example/icon.svg",
            favicon_url="https://cdn.example/favicon.ico", language="sr-Latn")


@pytest.mark.parametrize("fmt", FEED_FORMATS)
@pytest.mark.parametrize("meta", [META, replace(META, site=SITE, ttl=86_401, stylesheet_url="/feed.xsl?a=1&b=\"?>")],
                         ids=["plain", "site"])
def test_every_entry_kind_the_renderer_takes_keeps_every_rule(fmt, meta):
    body = render(fmt, meta, KINDS)
    assert violations(fmt, body) == []
    assert len(entry_ids(fmt, body)) == len(KINDS)


def test_only_a_topics_and_a_posts_guid_say_they_are_permalinks():
    """RSS 2.0: isPermaLink="true" says the guid is the item's page. A topic's (`/t/ID`, which Discourse sends on
    to the topic) and a post's are; a digest's names a period and a notification's or bookmark's a row of a
    member's list, which no page is."""
    guids = etree.fromstring(render("rss", META, KINDS)).findall("channel/item/guid")
    assert [(guid.text, guid.get("isPermaLink")) for guid in guids] == [
        (entry.id, "true" if entry.kind in ("topic", "post") else "false") for entry in KINDS]


def test_a_date_before_the_year_1000_keeps_its_four_digits_in_every_format():
    """RFC 3339 and RSS 2.0 (with the RSS profile) write a year in four digits; `strftime`'s `%Y` gives `999` and
    `1` under glibc, which is how RSS's dates and JSON Feed's came out. A forum's JSON may say such a date."""
    ancient = entries([topic(1, created_at=datetime(1, 1, 1, tzinfo=UTC),
                             last_posted_at=datetime(999, 12, 31, 23, 59, 59, tzinfo=UTC))])
    rss = etree.fromstring(render("rss", META, ancient))
    assert rss.findtext("channel/lastBuildDate") == "Tue, 31 Dec 0999 23:59:59 +0000"
    assert rss.findtext("channel/item/pubDate") == "Mon, 01 Jan 0001 00:00:00 +0000"
    item = json.loads(render("json", META, ancient))["items"][0]
    assert (item["date_published"], item["date_modified"]) == ("0001-01-01T00:00:00Z", "0999-12-31T23:59:59Z")
    atom = etree.fromstring(render("atom", META, ancient)).find(f"{A}entry")
    assert (atom.findtext(f"{A}published"), atom.findtext(f"{A}updated")) == (
        "0001-01-01T00:00:00+00:00", "0999-12-31T23:59:59+00:00")
    for fmt in FEED_FORMATS:
        assert violations(fmt, render(fmt, META, ancient)) == []
