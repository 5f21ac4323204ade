"""Field readers and Markdown field patterns shared by the list, topic and categories parsers: the Markdown
formats of one forum write timestamps, links and escapes the same way, so they are read the same way, by one
set of patterns that every parser gets in the same hardened form. The HTML tag and control-character patterns
are here too, once, for the JSON parsers and the keyword filter as well.

Every pattern here runs on text an upstream controls, inside a worker that `re` blocks (it holds the GIL),
so each one is written to scan any character from a bounded number of start positions: a link text stops at
an unescaped `[` and never starts after a backslash (core escapes every `[` in link texts), and a URL is
checked for its shape by a lookahead before it is matched, so no suffix of the input is rescanned once per
possible start. tests/test_fuzz.py runs the hostile shapes against all three parsers.
"""

from __future__ import annotations

import html
import operator
import re
import unicodedata
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from urllib.parse import quote, unquote, urljoin, urlsplit

from feedbridge.models import XML_INVALID, has_xml_invalid

# `[@name](profile)`: the author link of list rows and of a post's `###` line.
USER_LINK = re.compile(r"(?<!\\)\[@(?P<name>(?:\\.|[^\[\]\\\n])+)\]\((?P<url>[^()\s]+)\)")
# `[LABEL](url "ISO")`: the last-activity row of a list, a topic's Created row and each post's `####` line.
DATED_LINK = re.compile(r"(?<!\\)\[(?:\\.|[^\[\]\\\n])*\]\((?P<url>[^()\s]+) \"(?P<iso>[^\"\n]+)\"\)")
MAX_ROW = 4096
"""Characters of a metadata row that the link patterns read: a row is a label, a username or a date, and a
URL (core's are far shorter). The two patterns above repeat a group, and on a long row of escapes
(`[@\\]\\]…`, 512,000 characters) the backtracking state they keep made a search cost 3.7× more for twice
the text (tests/test_fuzz.py, "escaped author"); every parser reads a longer row as no link."""

MAX_TAGS = 100
"""Tags kept of one topic, the first so many (core's `max_tags_per_topic` is 5 by default, its admin's
bound far below this): a forum's list with 100,000 tags on one topic held a worker until gunicorn killed it,
and every entry would carry them all (RELIABILITY.md row 72)."""


def kept_tags(names: Iterable[str]) -> tuple[str, ...]:
    """`names` stripped, without blanks or repeats, the first `MAX_TAGS`: one pass, whatever the input's length."""
    kept: dict[str, None] = {}
    for name in names:
        if name := name.strip():
            kept[name] = None
            if len(kept) == MAX_TAGS:
                break
    return tuple(kept)


def first_link(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The first match of a link pattern (`USER_LINK`, `DATED_LINK`) in `text`, read a line at a time and in
    each line its first `MAX_ROW` characters only: no link spans lines (their texts, URLs and dates hold
    no newline), and a line longer than that is a hostile row's, read as holding no link from there on."""
    for line in text.split("\n"):
        if found := pattern.search(line, 0, MAX_ROW):
            return found
    return None


def links(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """Every match of a link pattern in `text`, a line at a time, as `first_link` reads them."""
    for line in text.split("\n"):
        yield from pattern.finditer(line, 0, MAX_ROW)


# An HTML tag, in core's excerpts and descriptions or in what nh3 wrote (`feeds.select.filters`): `[^<>]` stops a scan
# at the next `<`, so a stray one costs its own characters, never a rescan.
TAG = re.compile(r"<[^<>]*>")
# What a name or a description drops: what XML cannot carry (`models.XML_INVALID`), and DEL.
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff\ud800-\udfff]")


MAX_ENCODED_SLUG = 1200
"""The longest percent-encoded slug read: a decoded slug's bound (100 characters, `_slug_of`), each as up to four
UTF-8 bytes of three characters each. Core never cuts an encoded slug (lib/slug.rb, `max_length = 9999` for
`:encoded`), so a category named in 34 CJK characters (names take 50) has one of over 300: cut at 300, it was
left out of the directory, its feed offered nowhere and its entries without its name."""


def category_slug(raw: str) -> str | None:
    """A category's slug as a feed path names it: decoded, as core stores it percent-encoded when its
    `slug_generation_method` is `encoded` (`Slug.encoded_generator`: `/c/%E4%B8%AD%E6%96%87/7`), where it is
    letters, digits, `_`, `-` and combining marks, what the feed routes read; else as written, when that is such
    a slug or percent-encoded (an emoji's: kept for the category's name, though no feed path names it); None for
    any other."""
    decoded = unquote(raw) if "%" in raw else raw
    if _slug_of(decoded, "_-"):
        return decoded
    return raw if _slug_of(raw, "_-%", MAX_ENCODED_SLUG) else None


def _slug_of(text: str, allowed: str, longest: int = 100) -> bool:
    """Letters, digits, combining marks and the `allowed` characters, 1 to `longest` of them: an encoded slug
    kept as written (one with an emoji) is read as far as `MAX_ENCODED_SLUG`, as one that decodes is."""
    return 0 < len(text) <= longest and all(c.isalnum() or c in allowed or unicodedata.category(c)[0] == "M"
                                            for c in text)


def one_line(text: str) -> str:
    """A category's name or description: without `CONTROL` characters, each run of blanks one space."""
    return " ".join(CONTROL.sub("", text).split())


def html_text(value: str) -> str | None:
    """Plain text of core's HTML excerpts (entities, the odd tag), on one line; None when nothing is left. An
    emoji, which core's excerpts keep as its image (`PrettyText.excerpt`, `keep_emoji_images`), is its name."""
    text = html.unescape(TAG.sub(_tag_text, value)) if ("<" in value or "&" in value) else value
    return " ".join(text.split()) or None


_EMOJI_NAME = re.compile(r'\balt="(:[\w+-]{1,60}:)"')


def _tag_text(tag: re.Match[str]) -> str:
    """What a tag of an excerpt is in its text: an emoji image's name (`:tada:`, its alt), else a space."""
    text = tag.group()
    name = _EMOJI_NAME.search(text) if text.startswith("<img") and 'class="emoji' in text else None
    return f" {name[1]} " if name else " "


_ESCAPE = re.compile(r"\\(.)")
_escaped_char = operator.itemgetter(1)

# Control characters that binary data is full of and text has at most a stray one of; U+FFFD is what a
# lossy decode left of bytes that were not text.
_NOT_TEXT = re.compile(r"[\x00-\x08\x0e-\x1f\ufffd]")
_SNIFF_CHARS = 4096
_BINARY_SHARE = 20
"""Binary when more than one sniffed character in this many is a control character (text has a stray few)."""
_MAGIC = {
    "\x1f\x8b": "gzip-compressed data",
    "\x89PNG": "a PNG image",
    "%PDF-": "a PDF document",
    "PK\x03\x04": "a zip archive",
    "GIF87a": "a GIF image",
    "GIF89a": "a GIF image",
    "\xff\xd8\xff": "a JPEG image",
    "BZh91AY&SY": "bzip2-compressed data",
    "\xfd7zXZ\x00": "xz-compressed data",
    "(\xb5/\xfd": "zstd-compressed data",
}
_ROUTE_START = re.compile(r"/(?:c|tag|tags|latest|top|hot|new|unread|categories|u|t)(?:[/.?]|$)")


def leading_text(text: str | bytes, max_chars: int, error: type[ValueError], expected: str) -> str:
    """The text (bytes decoded as UTF-8) without leading blanks, or `error`: binary data, not UTF-8, over
    `max_chars`, or empty. What every Discourse reader, Markdown or JSON, refuses first."""
    if isinstance(text, bytes):
        if kind := _magic(text[:16].decode("latin-1")):
            raise error(f"{expected}, got binary data ({kind})")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{expected}, got bytes that are not UTF-8 text ({exc.reason} at {exc.start})") from None
    if len(text) > max_chars:
        raise error(f"{expected}, got {len(text)} characters (limit {max_chars})")
    head = text.lstrip("\ufeff \t\r\n")
    if not head:
        raise error(f"{expected}, got an empty body")
    return head


MAX_PAGE_LINKS = 4
"""A list or topic page ends with at most a Previous and a Next link; reading a few more, never a run of
them, keeps a line made of thousands of page links linear-time."""


def sniff(text: str | bytes, max_chars: int, error: type[ValueError], expected: str) -> str:
    """The text without leading blanks, or `error` saying what came instead of Discourse Markdown.

    Forums answer with login pages, JSON errors and binary as readily as with Markdown; both parsers
    refuse them the same way, with a message naming what was seen. Line ends come back as `\\n`.
    """
    head = leading_text(text, max_chars, error, expected)
    if kind := _magic(head[:16]):
        raise error(f"{expected}, got binary data ({kind})")
    window = min(len(head), _SNIFF_CHARS)
    if len(_NOT_TEXT.findall(head, 0, window)) * _BINARY_SHARE > window:
        raise error(f"{expected}, got binary data")
    # What XML cannot carry is dropped before any field is read, as docs/entries.md promises: a stray NUL or ESC
    # in a title leaves the list fine and the character goes.
    if has_xml_invalid(head):
        head = XML_INVALID.sub("", head).lstrip("\ufeff \t\r\n")
        if not head:
            raise error(f"{expected}, got only control characters")
    lowered = head[:256].lower()
    if lowered.startswith(("<!doctype", "<html", "<?xml", "<head", "<body")) or "<html" in lowered:
        raise error(f"{expected}, got an HTML document (a login page or an error page?)")
    if head[0] in "{[":
        raise error(f"{expected}, got JSON")
    return head.replace("\r\n", "\n") if "\r" in head else head


def _magic(start: str) -> str | None:
    """What a known binary format's leading bytes (as Latin-1 characters) say the body is."""
    return next((kind for magic, kind in _MAGIC.items() if start.startswith(magic)), None)


def unescape(text: str) -> str:
    """Core dialects' text with its backslash escapes undone: one left-to-right pass `\\X -> X` (FORMAT.md).

    A callable replacement, not the template r"\\1": re expands a template through Python code on every
    match, which made this a seventh of the list parser's time (bench/RESULTS.md, target 3).
    """
    return _ESCAPE.sub(_escaped_char, text) if "\\" in text else text


def utc(value: str) -> datetime | None:
    """An ISO 8601 timestamp (any offset, the reader's time zone included) as aware UTC; None if invalid. A leap
    second (`23:59:60`, which RFC 3339 allows and `datetime` cannot hold) is the second before it: it was invalid,
    and its Markdown topic block was dropped as malformed."""
    value = value.strip()
    if value[17:19] == "60" and value[16:17] == ":":
        value = value[:17] + "59" + value[19:]
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is UTC:  # `Z` and `+00:00`, as core writes every time: already the moment to return
            return moment
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: "0001-01-01T00:00:00+01:00" is before year 1 in UTC
        return None


def absolute(url: str, base: str | None) -> str:
    if url.startswith(("http://", "https://")) or not base:
        return url
    return urljoin(base.rstrip("/") + "/", url)


def splits(url: str) -> bool:
    """Whether `urlsplit` reads `url`. It refuses a broken IPv6 literal (`https://[x/t/1`), a bracketed host that
    is no address, and a host that NFKC-normalises to a separator; the pages' `http_url` and every reader that
    splits a link would raise on it, so the parsers emit no such URL. Only a bracket or a non-ASCII character
    can make it raise: a URL of neither (every one a forum writes) is not split again here, which would cost
    a list page's parse a third more (2.6 µs a URL, two a topic)."""
    if url.isascii() and "[" not in url and "]" not in url:
        return True
    try:
        urlsplit(url)
    except ValueError:
        return False
    return True


def web_url(url: str, base: str | None) -> str | None:
    """`url` made absolute against `base`, or None unless that is an http(s) URL `urlsplit` reads (`splits`): a
    `javascript:` or `data:` link from the forum never becomes a reader's, nor one no reader can split."""
    try:
        found = absolute(url, base)
    except ValueError:  # urljoin splits a relative URL too (`//[x/t/1`)
        return None
    return found if found.startswith(("http://", "https://")) and splits(found) else None


# A path segment browsers and servers read as `.` or `..` (`%2e` is a dot to the WHATWG URL parser too).
_DOT_SEGMENT = re.compile(r"(?:\.|%2e){1,2}", re.IGNORECASE)
_QUOTE_KEEPS = re.compile(r"[A-Za-z0-9_.~-]+")
"""The characters `urllib.parse.quote` never encodes (its `_ALWAYS_SAFE`): a name of them alone is its own quote."""
_SLUG_SAFE = "-._~%"


def _is_slug(segment: str) -> bool:
    """Whether a path segment may be a topic's slug in its link: one core could write (lib/slug.rb), or at least
    one that leaves the link the topic's. Core never makes a slug of digits alone ("indistinguishable from
    id's": `/t/123/5` is topic 123's post 5, routed before `/t/:slug/:topic_id`), and no slug is a dot segment
    (`/t/../5` is `/5`) or holds a backslash (a browser reads it as `/`)."""
    return bool(segment) and not (segment.isascii() and segment.isdigit()) and "\\" not in segment \
        and not _is_dot_segment(segment)


def _is_dot_segment(segment: str) -> bool:
    """Whether a path segment is `.` or `..`, its dots written or percent-encoded (`_DOT_SEGMENT`). One with no
    dot and no `%` (almost every slug and name) is not: the pattern is not run on it (bench row 3, "parse real
    page (flattened, 30 topics)")."""
    return ("." in segment or "%" in segment) and _DOT_SEGMENT.fullmatch(segment) is not None


def topic_slug(value: object) -> str:
    """A topic's slug as its link's segment, percent-quoted; core's own `topic` where the forum gives none, or
    one that would make the link another page's (`_is_slug`). The JSON lists, posts and a member's lists name a
    topic by its id and slug: its link is made of them."""
    if not isinstance(value, str) or not value.strip():
        return "topic"
    segment = quote(value.strip(), safe=_SLUG_SAFE, errors="replace")
    return segment if _is_slug(segment) else "topic"


MAX_USERNAME = 60
"""Core's longest username: `users.username` is 60 characters (migration `AllowLongerUsernames`; the
site setting `max_username_length` is 20 by default)."""


AVATAR_SIZE = "96"
"""The size a user's picture is asked in (core's `avatar_template` leaves `{size}` to the reader): one of the
sizes core makes by default (site setting `avatar_sizes`), twice the 48 px feed readers show an author at."""


def avatar_url(template: object, base: str) -> str | None:
    """A user's picture from core's `avatar_template` (`/user_avatar/{host}/{name}/{size}/{id}.png`, a CDN's
    schemaless, or a letter avatar's absolute URL) at `AVATAR_SIZE`, made absolute as `picture_url` makes
    every picture the forum names; None where it is none."""
    return picture_url(template.replace("{size}", AVATAR_SIZE), base) if isinstance(template, str) else None


def user_link(base: str, name: str | None) -> str | None:
    """A user's page on the forum, `{base}/u/{name}` (core's `/u/:username` route), made from the name whatever
    link a list wrote beside it: a Markdown list's author link named any host (`[@smth](https://elsewhere/)`),
    where an entry's author is the forum's user. Every reader of names makes the link here, percent-encoded as
    core encodes unicode names. A name no username of core could be gets none: a dot segment (`{base}/u/..` is the
    forum's front page to a browser, not a user's), or one past `MAX_USERNAME` (a hostile list's 4 KB name of
    CJK characters made a link nine times its length, 36 KB, in every entry)."""
    if not name or len(name) > MAX_USERNAME or _is_dot_segment(name):
        return None
    if _QUOTE_KEEPS.fullmatch(name):  # what `quote` would return unchanged, without its encoding (bench row 3)
        return f"{base}/u/{name}"
    return f"{base}/u/{quote(name, safe='', errors='replace')}"


def topic_link(url: str, base: str) -> tuple[int, str] | None:
    """The topic a Markdown list's link names, and the link its entry takes; None for a link that names no
    topic by its id.

    Core links a topic as `{base}/t/{slug}/{id}` (`Topic#url`; `/t/{id}` is the same topic): the id is the
    link's last segment, and the segments before it must be `t` and a slug (`_is_slug`), or `t`. The link is
    then made on the forum the list was read from, `{base}/t/{slug}/{id}`, and is core's own text for core's
    links. A hostile list could pair an id with another page: `{base}/t/{slug}/12/13` (topic 12's post 13,
    read as topic 13), `/t/12/13` (a numeric slug: topic 12 to Discourse), or a link off the forum's host
    (`https://elsewhere/t/x/13`). Its entry then had one topic's id, which readers keep it by, and another
    page as its link; such shapes name no topic now, and a topic's link on another host is made on the forum:
    `content=full` reads, and the entry links, the page of the topic its id names, on the forum the feed is of.
    """
    start = url.find("/", url.find("://") + 3)
    if start < 0:
        return None
    path = url[start:].partition("?")[0].partition("#")[0].rstrip("/")
    rest, _, number = path.rpartition("/")
    if not (number.isascii() and number.isdigit()) or len(number) > 18:
        return None  # int() refuses non-ASCII digits such as '²' and over 4300 digits
    rest, _, slug = rest.rpartition("/")
    if slug == "t":
        made = f"{base}/t/{number}"
    elif rest.rpartition("/")[2] == "t" and _is_slug(slug):
        made = f"{base}/t/{slug}/{number}"
    else:
        return None
    return int(number), url if url == made else made


MAX_URL_CHARS = 2048
"""An image URL longer than this is no upload's (core's are a path of a hash and a size, under 200)."""
_NOT_IN_URL = re.compile(r"[\s\\\x00-\x1f\x7f]")


def picture_url(value: object, base: str) -> str | None:
    """An image URL as core writes it, made absolute with the forum's scheme, or None where it is no usable one.

    Core sends a topic's `image_url` through `UrlHelper.cook_url`, whose `schemaless` leaves an upload on a plain
    http forum or an S3 bucket as `//host/uploads/…`, and `basic-info.json`'s pictures through
    `UrlHelper.absolute`, which leaves a CDN's schemaless; an older release may send a path. So `//host/…`
    takes the forum's scheme and `/path` its origin. What is left must be an absolute http(s) URL with a host
    and no credentials, and carry no blank, backslash or control character: the checks every link a feed
    takes from the forum passes (`http_url` in the pages, nh3's schemes in posts)."""
    if not isinstance(value, str):
        return None
    url = value.strip()
    if not url or len(url) > MAX_URL_CHARS or _NOT_IN_URL.search(url):
        return None
    forum = urlsplit(base)
    if url.startswith("//"):
        url = f"{forum.scheme}:{url}"
    elif url.startswith("/"):
        url = f"{forum.scheme}://{forum.netloc}{url}"
    try:
        parts = urlsplit(url)
        host, _ = parts.hostname, parts.port
    except ValueError:  # a broken `[`, a port that is no number
        return None
    if parts.scheme.lower() not in ("http", "https") or not host or "@" in parts.netloc:
        return None
    return url


def derive_base(url: str | None) -> str | None:
    """The forum root of a list or topic URL (with any subfolder): everything before the first route segment."""
    if not url or not url.startswith(("http://", "https://")):
        return None
    parts = urlsplit(url)
    match = _ROUTE_START.search(parts.path)
    path = parts.path[: match.start()] if match else ""
    return f"{parts.scheme}://{parts.netloc}{path}"
