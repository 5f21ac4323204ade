"""Parse the Markdown of a Discourse topic list into a `Listing`.

Every dialect Discourse has served (core C1-C4, the roots plugin P1/P2, and the "flattened" copies that
tools make of C4) is read by one line-based pass: flattened text is first unfolded into the pristine line
layout, then the header, each `## [title](url)` block and the trailing pagination links are read by shape
(row order, links, ISO timestamps), never by localized labels. No general Markdown parser is involved:
this runs on every cold request, and a regex-and-lines pass costs a fraction of a millisecond per page.
Blocks in the current core layout are read by one regex match each (`_C4_TOPIC`); every other block goes
through the general line loop, which reads the current layout identically (tests compare the two).
"""

from __future__ import annotations

import html
import logging
import re
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qs, urlsplit

from feedbridge.discourse.fields import (
    DATED_LINK,
    MAX_PAGE_LINKS,
    MAX_ROW,
    TAG,
    USER_LINK,
    absolute,
    derive_base,
    sniff,
    splits,
    topic_link,
    unescape,
    user_link,
    utc,
    web_url,
)
from feedbridge.errors import NoBaseURL, NotAListError
from feedbridge.models import Listing, Topic

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 8 * 1024 * 1024
"""Lists are ~20 KB; anything this large is not a list, and refusing it bounds the work."""
MAX_TOPICS = 1000
"""Topics read from one list page; the rest are left out, with a log line. Discourse sends 30 a page (at
most 100 with `per_page`); a hostile page packs 200,000 minimal topics into 5 MB, which parsed and cached
would hold ~400 MB and make a feed of 30 MB. Keeping the first ones, rather than refusing the page, still
serves the newest topics of a forum that pads its list, and a list is never refused for its length."""


_EXPECTED = "expected a Discourse topic list in Markdown ('# Title' then '**URL:** …')"

_URL_BREAK = re.compile(r"[()\s]")
# A categories directory's heading: `## [name](…/c/[parent/]slug/ID)`, what a topic list never holds.
_CATEGORY_HEADING = re.compile(r"## \[.*\]\([^()\s]*/c/[^()\s]*\)[ \t]*$")
_DIRECTORY = (f"{_EXPECTED}: this looks like a categories directory (its headings link to categories, /c/…), "
              "not a topic list")
_ROW = re.compile(r"\*\*(?P<label>[^*\n]{1,80}):\*\*[ \t]*(?P<value>.*)$")
_INT = re.compile(r"[0-9]{1,9}")
# The lookahead checks that the URL runs to `)` at the end of the line before the URL is matched:
# without it, a long URL full of `?page=1` is backtracked through once per `page=` (quadratic).
_PAGE_LINK = re.compile(r"(?<!\\)\[(?P<label>[^\[\]\\\n]{1,80})\]\((?=[^()\s]*\)[ \t]*$)"
                        r"(?P<url>[^()\s]*[?&]page=(?P<n>[0-9]{1,6})[^()\s]*)\)[ \t]*$")
# The current core layout (C4, pristine or unfolded from a flattened copy), which nearly every list served
# today uses: one match reads a topic's heading, metadata rows, excerpt and separator, where the line loop
# in `_row_fields` costs a regex call and a dozen string operations per line. Any other shape (a deleted
# author, a relative or query-carrying URL, older dialects, odd spacing) falls back to the general path,
# which reads these blocks the same way: tests/test_parser.py parses every fixture both ways and compares.
# Kept for bench row 3 "parse real page (flattened, 30 topics)": ≥ 15× markdown-it-py needs it.
_C4_TOPIC = re.compile(
    r"(?P<title>[^\[\]\\\n]*(?:\\.[^\[\]\\\n]*)*)\]\((?P<url>https?://[^()\s?#]*/(?P<id>[0-9]{1,18})/*)\)[ \t]*\n"
    r'(?:\n|<div class="topic-metadata">\n)*'
    r"\*\*Author:\*\* \[@(?!\])(?P<name>[^\[\]\\\n]*(?:\\.[^\[\]\\\n]*)*)\]\((?P<profile>[^()\s]+)\)\\\n"
    r"\*\*(?!Author:\*\*)[^*\n]{1,80}:\*\* (?P<replies>[0-9]{1,9})\\\n"
    r'\*\*(?!Author:\*\*)[^*\n]{1,80}:\*\* \[[^\[\]\\\n]*(?:\\.[^\[\]\\\n]*)*\]\([^()\s]+ "(?P<iso>[^"\n]+)"\)\n'
    # then the closing `</div>`, one line of excerpt (or none) and the separator; `ended` is set only when
    # the block ends there (the list's last block, followed by its page links, does not)
    r"(?:(?:\n|</div>\n)*(?:(?P<excerpt>[^\n]+)\n)?\n*---\n?\Z(?P<ended>))?"
)


@dataclass(slots=True)
class _Block:
    """One topic: the text after its `## [`, up to the next topic's."""

    chunk: str

    @property
    def heading(self) -> str:
        return "## [" + self.chunk.partition("\n")[0]

    @property
    def lines(self) -> list[str]:
        return self.chunk.partition("\n")[2].split("\n")


def parse_listing(text: str | bytes, base_url: str | None = None, source_url: str | None = None) -> Listing:
    """Parse one page of a topic list.

    `base_url` is the forum's root (with its subfolder, if any); when absent it is derived from the list's
    own `**URL:**`, then from `source_url` (where the text was fetched from). Relative URLs in the plugin
    dialects are resolved against it.
    """
    try:
        return _parse_listing(text, base_url, source_url)
    except NotAListError:
        raise
    except ValueError as exc:  # urlsplit/urljoin refuse a URL with `[` in its host (a broken IPv6 literal)
        raise NotAListError(f"{_EXPECTED}: {exc}") from None


def _parse_listing(text: str | bytes, base_url: str | None, source_url: str | None) -> Listing:
    text = _as_text(text)
    header, blocks, trailer = _split(_unfold(text))
    fields = _header_fields(header)
    list_url_raw = next(iter(fields.get("URL", "").split()), None)  # flattened: nav follows
    origin_hint = base_url or source_url
    list_url = absolute(list_url_raw, origin_hint) if list_url_raw else source_url
    base = (base_url or derive_base(list_url) or derive_base(source_url) or "").rstrip("/")
    if not base:
        raise NoBaseURL(f"{_EXPECTED}: its URL is relative and no base URL was given")

    plugin = "Topics on this page" in fields and not (list_url_raw or "").startswith(("http://", "https://"))
    dialect = _dialect(plugin, "Topics on this page" in fields, blocks, text)

    topics: list[Topic] = []
    skipped = 0
    for block in blocks:
        try:
            topic = _topic(block, base, plugin)
        except ValueError:  # one topic with an unparsable URL is a malformed block, not a broken list
            topic = None
        if topic is None:
            skipped += 1
        else:
            topics.append(topic)
    if skipped and not topics:
        if all(_CATEGORY_HEADING.match(block.heading) for block in blocks):
            raise NotAListError(_DIRECTORY)
        raise NotAListError(f"{_EXPECTED}: all {skipped} topic blocks are malformed")
    if skipped:
        log.warning("skipped %d malformed topic block(s) in %s", skipped, list_url or "list")

    page = _page_number(list_url, fields.get("Page"))
    next_url, previous_url = _pagination(trailer, page, base)
    title = fields.get("#", "")
    return Listing(
        title=title if plugin else unescape(title),
        base_url=base,
        dialect=dialect,
        topics=tuple(topics),
        url=list_url,
        page=page,
        next_page_url=next_url,
        previous_page_url=previous_url,
        skipped=skipped,
    )


def _as_text(text: str | bytes) -> str:
    head = sniff(text, MAX_TEXT_CHARS, NotAListError, _EXPECTED)
    newline = head.find("\n")
    first = head if newline < 0 else head[:newline]
    if not first.startswith("# ") or head.find("**URL:**", 0, 4096) < 0:
        # core's directory (lib/markdown_endpoint/directory_renderer.rb) has no **URL:** line
        if first.startswith("# ") and any(_CATEGORY_HEADING.match(line) for line in head[:4096].split("\n")
                                          if line.startswith("## [") and len(line) <= 1000):
            raise NotAListError(_DIRECTORY)
        raise NotAListError(f"{_EXPECTED}, got text starting {first[:60]!r}")
    return head


def _unfold(text: str) -> str:
    """Turn a flattened copy back into the pristine line layout (a no-op on pristine text).

    Plain `str.replace` is safe here because core dialects escape every `[` and `*` in text, so
    ` --- ## [` can only start a topic and `\\ **` can only join metadata rows.
    """
    if "--- ## [" not in text and "\\ **" not in text:
        return text
    text = text.replace(" --- ## [", "\n---\n## [").replace("\n--- ## [", "\n---\n## [")
    text = text.replace("\\ **", "\\\n**")
    # The first line's `**URL:**` rows each on a line of their own: the first so many of the page's, in one
    # copy of it where cutting off the first line and joining it back made two (bench row 3, "parse real page
    # (flattened, 30 topics)"). The row holds no newline, so none straddles the line's end.
    end = text.find("\n")
    return text.replace(" **URL:**", "\n**URL:**", text.count(" **URL:**", 0, len(text) if end < 0 else end))


def _split(text: str) -> tuple[list[str], list[_Block], list[str]]:
    """Header lines, topic blocks, and the lines that may hold pagination links.

    Every topic heading starts a line with `## [`: splitting on that (in C) beats a loop over lines.
    """
    chunks = ("\n" + text).split("\n## [", MAX_TOPICS + 1)
    header = chunks[0][1:].split("\n")
    blocks = [_Block(chunk) for chunk in chunks[1 : MAX_TOPICS + 1]]
    if len(chunks) > MAX_TOPICS + 1:  # the blocks past the cap, with the page links at their end
        log.warning("a list page holds more than %d topics; reading the first %d", MAX_TOPICS, MAX_TOPICS)
        return header, blocks, chunks[-1].rsplit("\n", 12)[1:]
    trailer = blocks[-1].lines if blocks else header
    return header, blocks, trailer


def _header_fields(header: list[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in header:
        line = line.strip()
        if line.startswith("# ") and "#" not in fields:
            fields["#"] = line[2:].strip()
            continue
        row = _ROW.match(line)
        if row:
            fields.setdefault(row["label"], row["value"].strip())
    return fields


def _dialect(plugin: bool, counted: bool, blocks: list[_Block], text: str) -> str:
    if plugin:
        return "p1" if "_More topics on page" in text else "p2"
    if counted:
        return "c1"
    if not blocks:
        return "c4"  # an empty list has no rows to tell by; only current sites serve a nav line and no topics
    if 'class="topic-metadata"' in text or any(
        '"' in line and DATED_LINK.search(line, 0, MAX_ROW) for b in blocks[:3] for line in b.lines[:6]
    ):
        return "c4"
    return "c3" if any(USER_LINK.search(line, 0, MAX_ROW) for b in blocks for line in b.lines[:6]) else "c2"


def _topic(block: _Block, base: str, plugin: bool) -> Topic | None:
    # A block longer than four rows' worth takes the general path, which reads each row capped: the fast
    # path's one regex repeats groups over the whole block, as the link patterns do (MAX_ROW).
    fast = None if plugin or len(block.chunk) > 4 * MAX_ROW else _C4_TOPIC.match(block.chunk)
    if fast is not None and (topic := _c4_topic(fast, base)) is not None:
        return topic
    heading = block.heading.rstrip()
    cut = heading.rfind("](")  # plugin titles may hold "](": the title ends at the last one
    raw_url = heading[cut + 2 : -1]
    if cut < 0 or not heading.endswith(")") or not raw_url or _URL_BREAK.search(raw_url):
        return None
    raw_title = heading[4:cut]
    url = web_url(raw_url, base)
    if url is None:
        return None  # a javascript: or data: "topic" must never become a feed reader's link
    named = topic_link(url, base)  # a link naming no topic by its id (a category's `/c/slug/5`) is no topic
    if named is None:
        return None
    topic_id, url = named
    fields = _row_fields(block.lines, base, plugin)
    if fields is None:
        return None
    author, author_url, replies, last_posted, excerpt_lines = fields
    return Topic(
        id=topic_id,
        title=raw_title if plugin else unescape(raw_title),
        url=url,
        author=author,
        author_url=author_url,
        replies=replies,
        last_posted_at=last_posted,
        excerpt=_excerpt(excerpt_lines, plugin),
    )


def _c4_topic(match: re.Match[str], base: str) -> Topic | None:
    """The fast path's topic, or None where the general path must decide (it may still refuse the block)."""
    title, url, _, name, _, replies, iso, excerpt, ended = match.groups()  # the profile link: `user_link`
    moment = utc(iso)
    excerpt = excerpt.strip() if excerpt else ""
    named = topic_link(url, base) if splits(url) else None
    if moment is None or ended is None or named is None or (
        excerpt and (excerpt[:2] == "**" or "page=" in excerpt or _is_layout(excerpt))
    ):
        return None  # a bad time or URL, the last block's page links, or what may be a fourth row
    start, end = match.end("url"), match.end("iso")  # the metadata rows: short enough in all, each is too
    if end - start > MAX_ROW and any(len(row) > MAX_ROW for row in match.string[start:end].split("\n")):
        return None  # a row the general path reads capped (`_author`, the dated link): it decides
    topic_id, url = named
    return Topic(
        id=topic_id,
        title=unescape(title),
        url=url,
        author=(author := unescape(name)),
        author_url=user_link(base, author),
        replies=int(replies),
        last_posted_at=moment,
        excerpt=_c4_excerpt(excerpt) if excerpt else None,
    )


def _c4_excerpt(line: str) -> str | None:
    """`_excerpt([line], False)` for the fast path's one stripped line, which holds no page links. Core writes
    it with one space between words already: printable text holds no blank but the space, so with no two
    spaces in a row and none at either end, `split` and `join` would only copy it (a third of the fast path's
    own time; bench row 3, "parse real page (flattened, 30 topics)")."""
    text = unescape(line)
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text or None
    return " ".join(text.split()) or None


def _is_layout(stripped: str) -> bool:
    """Separators and the metadata `<div>` lines: not part of any topic's text."""
    return stripped == "---" or (stripped[0] == "<" and stripped.startswith(("<div", "</div")))


def _is_plugin_separator(lines: list[str], index: int) -> bool:
    """In the plugin dialects only a line that is exactly `---` between blank lines separates topics: their
    excerpts are raw, and a line such as ` --- ` in one is text (FORMAT.md)."""
    return (
        lines[index] == "---"
        and (index == 0 or not lines[index - 1].strip())
        and (index + 1 == len(lines) or not lines[index + 1].strip())
    )


def _row_fields(
    lines: list[str], base: str, plugin: bool
) -> tuple[str | None, str | None, int | None, datetime | None, list[str]] | None:
    """Metadata rows in any order, by shape: author, profile URL, replies, last activity, and the excerpt's
    lines (everything after the rows). None for a block to skip."""
    author = author_url = None
    replies: int | None = None
    last_posted: datetime | None = None
    excerpt_lines: list[str] = []
    in_rows = True
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or (_is_plugin_separator(lines, index) if plugin else _is_layout(stripped)):
            continue
        row = _ROW.match(stripped) if in_rows and stripped[:2] == "**" else None
        if row is None:
            in_rows = False
            excerpt_lines.append(stripped)
            continue
        label, value = row.group("label", "value")
        value = value.rstrip("\\ \t")
        if label == "Author":
            author, author_url = _author(value, base, plugin)
        elif value.isdigit() and value.isascii() and len(value) < 10:
            replies = int(value)
        else:
            dated = DATED_LINK.match(value) if len(value) <= MAX_ROW else None
            moment = utc(dated["iso"] if dated else value)
            if moment is None:
                return None
            last_posted = moment
            tail = value[dated.end():].strip() if dated else ""
            if tail:
                excerpt_lines.append(tail)
    return author, author_url, replies, last_posted, excerpt_lines


def _author(value: str, base: str, plugin: bool) -> tuple[str | None, str | None]:
    link = USER_LINK.match(value) if len(value) <= MAX_ROW else None
    if link:
        name = unescape(link["name"])
    elif value.startswith("@") and len(value) >= 2:
        name = value[1:] if plugin else unescape(value[1:])
    else:
        return None, None
    return name, user_link(base, name)


def _excerpt(lines: list[str], plugin: bool) -> str | None:
    while lines and "page=" in lines[-1] and _PAGE_LINK.search(lines[-1]):
        last = _strip_page_links(lines.pop())
        if last:  # text before the links: the excerpt ends here
            lines.append(last)
            break
    if plugin:
        lines = [line for line in lines if not line.startswith("_More topics on page")]
        text = html.unescape(TAG.sub(" ", " ".join(lines)))
    else:
        text = unescape(" ".join(lines))
    return " ".join(text.split()) or None


def _strip_page_links(line: str) -> str:
    for _ in range(MAX_PAGE_LINKS):
        if (match := _PAGE_LINK.search(line)) is None:
            break
        line = line[: match.start()].rstrip()
    return line


def _pagination(trailer: list[str], page: int, base: str) -> tuple[str | None, str | None]:
    """Next/previous by the page number in the link, since the labels are localized."""
    next_url = previous_url = None
    for line in trailer[-12:]:
        for _ in range(MAX_PAGE_LINKS):
            if (match := _PAGE_LINK.search(line)) is None:
                break
            target, url = int(match["n"]), web_url(match["url"], base)
            if url is not None and target > page:
                next_url = url
            elif url is not None and target < page:
                previous_url = url
            line = line[: match.start()].rstrip()
    return next_url, previous_url


def _page_number(list_url: str | None, page_field: str | None) -> int:
    if list_url:
        values = parse_qs(urlsplit(list_url).query).get("page")
        if values and _INT.fullmatch(values[0]):
            return int(values[0])
    if page_field and _INT.fullmatch(page_field):
        return max(int(page_field) - 1, 0)
    return 0


