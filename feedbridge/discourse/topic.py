"""Parse one page of a Discourse topic served as Markdown (`/t/SLUG/ID.md`) into a `TopicPage`.

Lists carry only an excerpt and the last-activity time; the topic's own page adds what feeds need for
full entries: the first post, the creation time, the category and the tags.

Post boundaries are the `<div class="post-metadata">` blocks, not the `---` separators: a post body is
Markdown, where `---` is also a horizontal rule, so only a `---` directly before a metadata block is a
separator. Flattened copies (div lines removed, other whitespace squeezed) have no divs; there the
metadata lines themselves mark the boundaries: a `####` line holding a dated link to a post, optionally
preceded by the `###` author part (metadata squeezed into the middle of a line is first put on a line
of its own). Header rows are read by shape (a dated link is the
creation time, a number is the post count), with only `URL` and `Page` trusted as fixed English labels.
Like the list parser this is a line-and-regex pass; post bodies stay Markdown for `feedbridge.render.sanitize`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit, urlunsplit

from feedbridge.discourse.fields import (
    DATED_LINK,
    MAX_PAGE_LINKS,
    MAX_ROW,
    USER_LINK,
    absolute,
    derive_base,
    first_link,
    kept_tags,
    links,
    sniff,
    splits,
    unescape,
    utc,
)
from feedbridge.errors import NotATopicError

MAX_TEXT_CHARS = 4 * 1024 * 1024
"""A page holds at most a few dozen posts of at most ~32k characters each; more is not a topic page."""
MAX_POSTS = 1000
"""Posts told apart on one page: a page has 20 or so, and only the first post and the page links at the
end are read. Past the cap, the last post read runs to the end of the page (where the page links are), so
a page of 100,000 tiny posts costs one split of its text, not 100,000 post records."""


@dataclass(frozen=True, slots=True)
class TopicPage:
    """What one page of a topic adds to a full entry: the header and the first post, which is None on pages
    that do not contain post #1."""

    id: int
    url: str
    category: str | None
    tags: tuple[str, ...]
    created_at: datetime | None
    first_post_markdown: str | None


_EXPECTED = "expected a Discourse topic in Markdown ('# Title', then '**URL:** https://host/t/slug/id')"

_ROW = re.compile(r"(?:^|(?<=\s))\*\*(?P<label>[^*\n]{1,80}?):\*\*", re.MULTILINE)
_TOPIC_PATH = re.compile(r"(?P<topic>/t/(?:[^/?#]*[^/?#0-9][^/?#]*/)?(?P<id>[0-9]+))(?:/(?P<post>[0-9]+))?(?:\.md)?/?$")
_META_DIV = r"<div\s+class=([\"'])[^\"'\n]*\bpost-metadata\b[^\"'\n]*\1[^>\n]*>"
_META_OPEN = re.compile(rf"[ \t]*{_META_DIV}[ \t]*")
_META_CLOSE = re.compile(r"[ \t]*</div>[ \t]*")
_FLAT_META = re.compile(r"[ \t]*(?:###[ \t].*?)?####[ \t].*")
# As `DATED_LINK`, the link text stops at an unescaped `[`, and the lookahead finds the `/t/` in the URL
# once per link instead of once per `/t/` and suffix.
_INLINE_META = re.compile(
    r"(?:^|(?<=\s))(?:###\s(?:(?!###).)*?)?####\s(?:(?!###).)*?"
    r"(?<!\\)\[(?:\\.|[^\[\]\\\n])*\]\((?=[^()\s]*/t/[^()\s])[^()\s]+ \"[^\"\n]+\"\)"
)
_INLINE_META_OPEN = re.compile(rf"\s*{_META_DIV}\s*")
_INLINE_META_CLOSE = re.compile(r"(?:\s*</div>)?")
_SEPARATOR_AT_END = re.compile(r"(?:\A|\s)---\Z")
_PAGE_LINKS_AT_END = re.compile(
    r"(?:\s*(?:·\s*)?(?<!\\)\[[^\[\]\n]{1,80}\]\((?=[^()\s]*\))[^()\s]*\.md(?:\?[^()\s]*)?\))"
    rf"{{1,{MAX_PAGE_LINKS}}}\s*\Z"
)
_PAGE_LINK = re.compile(r"\]\((?P<url>[^()\s]*\.md(?:\?[^()\s]*)?)\)")
_PAGE_LINKS_CHARS = MAX_PAGE_LINKS * 1024
"""Page links are looked for in this much of the page's end only: a search from every position of a 4 MB
last post (a page of thousands of tiny posts leaves one) took 2 s."""
_META_MAX_LINES = 12


@dataclass(slots=True)
class _Post:
    meta: str  # the metadata lines: author link, dated link to the post
    body: list[str]


def parse_topic(text: str | bytes, base_url: str | None = None, source_url: str | None = None) -> TopicPage:
    """Parse one page of a topic.

    `base_url` (the forum root) resolves relative URLs; without it the root is derived from the topic's
    `**URL:**`, then from `source_url` (where the text was fetched from, which also supplies the topic
    URL and the page number when the text does not).
    """
    lines = _as_text(text).split("\n")
    pristine = any(_META_OPEN.fullmatch(line) for line in lines)
    if not pristine:
        lines = [piece for line in lines for piece in _unfold(line)]
    spans = _meta_spans(lines, pristine)
    header_lines = lines[: spans[0][0]] if spans else lines
    posts = [
        _Post(meta="\n".join(lines[start:end]), body=lines[end : following[0]] if following else lines[end:])
        for (start, end), following in zip(spans, spans[1:] + [None], strict=False)
    ]
    for post in posts[:-1]:
        _drop_separator(post.body)
    header = _header("\n".join(header_lines))

    url_raw = header.url or _first_topic_link(header_lines, posts) or source_url
    base = (base_url or derive_base(url_raw) or derive_base(source_url) or "").rstrip("/")
    topic = _topic_url(absolute(url_raw, base)) if url_raw else None
    if topic is None:
        shown = url_raw[:200] if url_raw else url_raw  # a forum's row may be megabytes long
        raise NotATopicError(f"{_EXPECTED}, got a page whose URL is {shown!r}, not a topic URL")
    url, topic_id = topic

    if posts:
        _strip_pagination(posts[-1].body, topic_id)
    first = next((post for post in posts if _post_number(post, topic_id) == 1), None)
    created_at = header.created_at
    if created_at is None and first is not None:
        dated = first_link(DATED_LINK, first.meta)
        created_at = utc(dated["iso"]) if dated else None
    return TopicPage(
        id=topic_id,
        url=url,
        category=header.category,
        tags=header.tags,
        created_at=created_at,
        first_post_markdown=_body(first.body) if first else None,
    )


def _as_text(text: str | bytes) -> str:
    """Refuse what an upstream answers instead of a topic (login page, JSON error, binary) with a reason."""
    head = sniff(text, MAX_TEXT_CHARS, NotATopicError, _EXPECTED)
    if not head.startswith("# "):
        raise NotATopicError(f"{_EXPECTED}, got text starting {head[:60]!r}")
    return head


def _meta_spans(lines: list[str], pristine: bool) -> list[tuple[int, int]]:
    """`[start, end)` line ranges of the posts' metadata: the div blocks, or in flattened copies the lines."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(lines) and len(spans) < MAX_POSTS:
        if pristine:
            close = _meta_close(lines, i)
            span = (i, close + 1) if close is not None else None
        else:
            span = _flat_meta(lines, i)
        if span is None:
            i += 1
        else:
            spans.append(span)
            i = span[1]
    return spans


def _meta_close(lines: list[str], i: int) -> int | None:
    """Index of the `</div>` closing a metadata block opening at `i`, if the block holds a dated post link."""
    if not _META_OPEN.fullmatch(lines[i]):
        return None
    for j in range(i + 1, min(i + _META_MAX_LINES, len(lines))):
        if _META_CLOSE.fullmatch(lines[j]):
            dated = first_link(DATED_LINK, "\n".join(lines[i + 1 : j]))
            return j if dated and _topic_path(dated["url"]) else None
    return None


def _unfold(line: str) -> list[str]:
    """Put metadata that runs on with other text (a page squeezed onto one line) on lines of its own.

    Inline metadata divs, where a squeezing tool kept them, go. A line that starts with its metadata is
    left alone, so words after the dated link stay metadata.
    """
    squeezed = _INLINE_META_OPEN.sub(" ", line)
    found = [m for m in _INLINE_META.finditer(squeezed) if m.start() > 0]
    if not found:
        return [line]
    pieces, start = [], 0
    for match in found:
        pieces += [squeezed[start : match.start()].rstrip(), match.group()]
        start = match.end()
        close = _INLINE_META_CLOSE.match(squeezed, start)
        start = close.end() if close else start
    return pieces + [squeezed[start:].lstrip()]


def _flat_meta(lines: list[str], i: int) -> tuple[int, int] | None:
    """A `####` line with a dated post link, with the `###` author part on it or on the line before."""
    line = lines[i]
    if not _FLAT_META.fullmatch(line):
        return None
    dated = first_link(DATED_LINK, line[line.index("####") :])
    if not (dated and _topic_path(dated["url"])):
        return None
    author_before = i > 0 and lines[i - 1].startswith("### ") and first_link(USER_LINK, lines[i - 1])
    if line.lstrip().startswith("####") and author_before:
        return i - 1, i + 1
    return i, i + 1


def _drop_separator(body: list[str]) -> None:
    """Remove the `---` that separates this post from the next (its own line, or ` ---` when flattened)."""
    while body and not body[-1].strip():
        body.pop()
    if body:
        last = _SEPARATOR_AT_END.sub("", body[-1].rstrip())
        if last.strip():
            body[-1] = last
        else:
            body.pop()


@dataclass(slots=True)
class _Header:
    """The header rows. Only `URL` and `Page` are fixed English labels; the others are found by shape."""

    url: str | None = None
    category: str | None = None
    tags: tuple[str, ...] = ()
    created_at: datetime | None = None


def _header(text: str) -> _Header:
    header = _Header()
    matches = list(_ROW.finditer(text))
    plain: list[str] = []
    for row, following in zip(matches, matches[1:] + [None], strict=False):
        end = following.start() if following else len(text)
        value = _strip_hard_break(text[row.end() : end].split("\n", 1)[0])
        label = row["label"].strip()
        dated = DATED_LINK.fullmatch(value) if len(value) <= MAX_ROW else None
        if label == "URL":
            header.url = header.url or value or None
        elif label == "Page":
            continue  # whatever it holds, never the category
        elif dated:
            header.created_at = header.created_at or utc(dated["iso"])
        elif label == "Category":  # under its English label, a category or tag named `2024` is one
            header.category = unescape(value) or None
        elif label == "Tags":
            header.tags = _tags(value)
        elif value.isdigit():
            continue  # the post count, whatever its (translated) label: never the category or the tags
        elif value:
            plain.append(value)
    # Translated labels: the format puts Category before Tags, and a topic is in a category far more
    # often than it has tags, so a lone unknown text row is taken for the category.
    if plain and header.category is None:
        header.category = unescape(plain.pop(0))
    if plain and not header.tags:
        header.tags = _tags(plain.pop(0))
    return header


def _tags(value: str) -> tuple[str, ...]:
    return kept_tags(unescape(part) for part in value.split(","))


def _first_topic_link(header: list[str], posts: list[_Post]) -> str | None:
    """A topic URL when the `**URL:**` row is missing: from the Created link or the first post's link."""
    for text in ["\n".join(header)] + [p.meta for p in posts[:1]]:
        for link in links(DATED_LINK, text):
            if _topic_path(link["url"]):
                return link["url"]
    return None


def _post_number(post: _Post, topic_id: int) -> int | None:
    """From the post's dated link, `/t/slug/ID/N`; a link to the topic itself is post 1."""
    dated = first_link(DATED_LINK, post.meta)
    match = _topic_path(dated["url"]) if dated else None
    return int(match["post"] or 1) if match and int(match["id"]) == topic_id else None


def _strip_pagination(body: list[str], topic_id: int) -> None:
    """Cut the trailing page links (links to this topic's `.md`) off the last post's body: they are the
    page's, not the post's. A post that ends with a link to another topic keeps it."""
    text = "\n".join(body).rstrip()
    trailer = _PAGE_LINKS_AT_END.search(text, max(len(text) - _PAGE_LINKS_CHARS, 0))
    if trailer is None or not any((match := _topic_path(link["url"])) and int(match["id"]) == topic_id
                                  for link in _PAGE_LINK.finditer(trailer.group())):
        return
    body[:] = text[: trailer.start()].split("\n")
    _drop_separator(body)


def _body(lines: list[str]) -> str:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return "\n".join(line.rstrip() for line in lines[start:end])


def _strip_hard_break(value: str) -> str:
    """Drop a trailing Markdown hard break (an unpaired `\\`), keeping an escaped backslash."""
    value = value.strip()
    trailing = len(value) - len(value.rstrip("\\"))
    return value[:-1].rstrip() if trailing % 2 else value


def _topic_path(url: str) -> re.Match[str] | None:
    """The `/t/[slug/]ID[/POST][.md]` end of a URL's path: its `topic` part, `id` and `post` number. None for a URL
    urlsplit refuses (`fields.splits`): a post's date link to `https://[x/t/s/7/2` is no link, where it raised and
    cost the topic its content."""
    return _TOPIC_PATH.search(urlsplit(url).path) if splits(url) else None


def _topic_url(url: str) -> tuple[str, int] | None:
    """The topic's HTML address (no `.md`, post number, query or fragment) and its id."""
    match = _topic_path(url)
    if match is None:
        return None
    parts = urlsplit(url)
    path = parts.path[: match.start()] + match["topic"]
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), int(match["id"])


