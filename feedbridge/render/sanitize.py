"""Turn a topic's first post into HTML that is safe to put in a feed entry, and attach it to the `Topic`.

Anyone on a forum can write a post, and feed readers show entry content as HTML, web-based readers in
their own origin; so a post must not carry script, event handlers or URLs that run code. Two stages:

1. markdown-it-py renders CommonMark plus tables and strikethrough. Raw HTML is passed through (`html`
   on) because Discourse writes constructs Markdown has no syntax for (details/summary, sup/sub, kbd) as
   HTML; with it off they would show as literal tags. Its own link filter is turned off so that every
   URL decision is made once, below, rather than by two policies that disagree (markdown-it would keep
   `data:image/png` and print a refused `javascript:` link as visible text).
2. nh3 (ammonia) keeps only an explicit allow-list of tags and attributes, drops `script`, `style`,
   `iframe` and similar elements together with their content, allows only http, https and mailto URLs,
   and resolves relative `href`/`src` against the document's URL with its `url_relative` hook.
   `data:` URLs are refused, images included: SVG data can carry script, large inline payloads bloat
   every feed fetch, and many readers block them anyway.
3. What a refused URL leaves behind is tidied: nh3 drops the attribute, not the element, so a
   `javascript:` link would stay as `<a rel="nofollow noopener">` (rel without href is invalid HTML)
   and a `data:` image as an `<img>` with no source. Such a link is unwrapped (its text stays) and such
   an image removed. nh3 has no hook for this; its output is serialised HTML with every attribute
   value quoted and `<`, `>`, `"` escaped inside values and text, so a regular expression over the tags
   finds them exactly.

A JSON-read forum gives the first post as core's cooked HTML (`/t/ID.json`) instead of Markdown: stage 1
is skipped and the HTML goes through the same nh3 cleaner (`sanitize_html`). Cooked HTML is full of
wrappers (`div.lightbox-wrapper`, `aside.onebox`, `span.hashtag`) that are not on the allow-list: nh3
drops those tags and keeps their text, so a onebox reads as its link and title.

nh3's parser spends time per tag that grows with the nesting depth (20,000 nested `<ul><li>` cost it 8 s),
so before it runs, a linear pre-scan (`feedbridge.render.nesting`) refuses HTML nested deeper than any
post is; such a post keeps the excerpt the list gave, and costs the scan, never the parse.

A post costs nh3 about 1 ms per 20,000 characters, and the same posts are cleaned again whenever a
collection that holds them is rebuilt (`/posts` at each `pages=`, a user's posts, a topic's head), so what
`sanitize_html` made is kept by a digest of its input and base in a bounded LRU (`SANITIZED_BYTES`); and
each call gives other requests a turn (`render.turns`), so cleaning 500 posts never holds the process.

markdown-it is linear in its input, but what it spends per character depends on the text: the fixtures' real
posts cost it about 0.5 µs a character, tables and lists 3 to 4 µs, and text dense in delimiters that open
nothing up to 15 µs (`![` repeated: 3.9 s for 256 KiB, where 256 KiB of real posts take 0.14 s; a
32,000-character post of it, which any user can write, 0.47 s), all in one call that gave no other request
a turn. So every block and inline rule the renderer runs is metered (`_metered`): a rule call is one unit of
work and each token it makes `TOKEN_WORK` more. The time per unit stays within 0.2 to 1.6 µs for every
shape measured, where the time per character spans 0.01 to 15 µs. The meter gives other requests a turn
every `WORK_PER_TURN` units, and a post that needs more than `MAX_MARKDOWN_WORK` is shown as escaped plain
text, a paragraph per block of lines. Weighed against the alternatives: a lower length cap bounds nothing
that matters (32,000 characters of `![` are 0.47 s); refusing text by its density of delimiters guesses
which characters cost (a lone `[` costs 30 times a lone `*`, and lines of two letters, which hold no
delimiter, 10 times prose); rendering in chunks at block boundaries changes the output where a reference
definition or a loose list spans chunks, and one long paragraph is one chunk. The meter only counts what the
renderer does, so every post within the budget renders as before, byte for byte (all 7,809 Markdown texts
of the fixtures, the tests and the docs did); the meter adds about a third to markdown-it's
time (256 KiB of real posts: 92 ms, 122 ms metered).
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import nh3
from cachetools import LRUCache, cached
from markdown_it import MarkdownIt
from markdown_it.ruler import Ruler

from feedbridge.errors import HostileMarkup
from feedbridge.render.nesting import check_nesting
from feedbridge.render.turns import take_turn

log = logging.getLogger(__name__)

MAX_MARKDOWN_CHARS = 256 * 1024
"""A post longer than this (Discourse's default limit is 32,000 characters) is cut at a line end and
marked with `…`, so one hostile or broken post cannot make a feed slow to build."""
MAX_MARKDOWN_WORK = 384 * 1024
"""The work (see the module docstring) one post's Markdown may cost the renderer. 256 KiB of the fixtures'
real posts need 148,000 units; 32,000 characters (Discourse's default limit) of a table 147,000, of a list
of one-word items 279,000, of the densest shapes measured up to 760,000. The most expensive text spends it
in 0.3 to 0.6 s (256 KiB of `![` took 3.9 s), taking turns as it goes."""
TOKEN_WORK = 4
"""Units a token costs beyond the rule call that made it: making, joining and writing a token costs about
as much as four rule calls, so a text of short lines (a token per line break) is counted as it costs."""
WORK_PER_TURN = 256
"""Units between two looks at the clock (`take_turn`): 256 units take 50 to 400 µs, well within a `TURN`."""
MAX_COOKED_CHARS = 256 * 1024
"""The same bound for cooked HTML: Discourse's 32,000-character posts cook to well under it, and nh3 cleans
this much of the most expensive HTML the nesting cap lets through in about 0.1 s (a feed has up to the
topic budget of such posts). nh3 closes whatever tags the cut leaves open."""

ALLOWED_TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "dl", "dt", "em",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "li", "mark", "ol", "p",
    "pre", "s", "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead",
    "tr", "ul",
})
_ATTRIBUTES = {
    "a": {"href", "title"},
    "abbr": {"title"},
    "img": {"src", "alt", "title", "width", "height"},
    "ol": {"start"},
    "th": {"style"},  # markdown-it writes column alignment as style; only text-align survives
    "td": {"style"},
}
_CONTENT_DROPPED_TAGS = {
    "script", "style", "iframe", "frame", "object", "embed", "noscript", "template", "svg", "math",
    "textarea", "select", "title",
}
_URL_SCHEMES = {"http", "https", "mailto"}

SANITIZED_BYTES = 16 * 1024 * 1024
"""Memory the kept results of `sanitize_html` may hold (`sys.getsizeof`)."""

# A start tag of a or img, with its attributes, or an end tag of a. nh3 writes no other tag named so.
_LINK_OR_IMAGE_TAG = re.compile(r'<(?P<name>a|img)(?P<attrs>\s[^>]*)?>|</a>')
_HREF = re.compile(r'\shref="')
_SRC = re.compile(r'\ssrc="')

_markdown = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
# markdown-it's documented hook for URL policy, which is nh3's alone here (see the module docstring).
_markdown.validateLink = lambda url: True  # type: ignore[method-assign]

_WORK = "feedbridge.work"
"""The key of a render's `env` (markdown-it's dict shared by the rules of one render) holding its work so far."""
_LINKED = "feedbridge.linked"
"""The key of a render's `env` holding the characters of link and image URLs it may still write (`LINKED_CHARS`)."""
LINKED_CHARS = 4
"""A post's links and images may write at most this many times its own length in URLs, and 16 KiB more: a
reference definition with a long URL, used thousands of times (`[x][] [x][] …`), wrote it out each time, so
that 32 KB of post (Discourse's limit) made a 43 MB entry and 80 KB 200 MB, within the work bound (a use is
one rule call). Every URL written in a post counts once; a link used a few times more fits."""

_Rule = TypeVar("_Rule", bound=Callable[..., Any])


class _Overworked(Exception):
    """A post's Markdown needed more than `MAX_MARKDOWN_WORK`."""


def _metered(rule: _Rule) -> _Rule:
    """`rule`, counting its call and the tokens it made into its render's work (`_WORK`), taking a turn
    every `WORK_PER_TURN` units and stopping the render past `MAX_MARKDOWN_WORK`. Block and inline rules
    take the parser state first, whatever else they take; every state holds the render's `env`."""

    def metered(state: Any, *args: Any) -> Any:
        tokens = state.tokens
        made = len(tokens)
        found = rule(state, *args)
        env = state.env
        if found and len(tokens) > made and (left := _linked(env, tokens, made)) < 0:
            raise _Overworked(f"its links write {-left} characters of URLs more than it may")
        before = env[_WORK]
        # A rule that found nothing made nothing: the common case reads no length again.
        after = env[_WORK] = before + 1 + (TOKEN_WORK * (len(tokens) - made) if found else 0)
        if (before ^ after) >= WORK_PER_TURN:
            if after > MAX_MARKDOWN_WORK:
                raise _Overworked
            take_turn()
        return found

    return cast(_Rule, metered)


def _linked(env: dict[str, Any], tokens: list[Any], made: int) -> int:
    """What is left of the render's URL characters (`LINKED_CHARS`) once the links and images among `tokens[made:]`
    are counted."""
    left: int = env[_LINKED]
    for token in tokens[made:]:
        if token.type in ("link_open", "image"):
            left -= len(token.attrGet("href") or token.attrGet("src") or "")
    env[_LINKED] = left
    return left


def _meter(ruler: Ruler[Any]) -> None:
    """Put `_metered` around each of `ruler`'s rules, keeping the chains it is in (`alt`). `Ruler.at` is the
    documented way to replace a rule; its chains are read from `__rules__`, the list `at` itself edits, since
    `get_all_rules` gives names alone (the same attribute in markdown-it-py 3 and 4, as in markdown-it)."""
    for rule in ruler.__rules__:
        ruler.at(rule.name, _metered(rule.fn), {"alt": rule.alt})


# The core rules run once per render (normalize, block, inline, text_join): the rules they run are metered.
for _ruler in (_markdown.block.ruler, _markdown.inline.ruler, _markdown.inline.ruler2):
    _meter(_ruler)


def _render(markdown: str) -> str:
    """markdown-it's HTML of `markdown`, metered; `_Overworked` past `MAX_MARKDOWN_WORK`."""
    rendered: str = _markdown.render(markdown, {_WORK: 0, _LINKED: LINKED_CHARS * len(markdown) + 16 * 1024})
    return rendered


# markdown-it's link normalising (mdurl) fills a lookup table per set of safe characters on its first use,
# and puts the table in its module-level dict before filling it, without a lock: a thread rendering a post
# while another fills the table reads it half-made (IndexError, met in CI on Python 3.13 when a
# `content=full` feed's topic pages were parsed in the pool). One render of every kind of link at import,
# before any thread renders, makes every table the renderer uses; later renders only read them.
_render("[a](/b%20c) ![d](e) <https://f.example/g> <h@i.example>")

_BLANK_LINES = re.compile(r"\n[ \t]*\n")


def markdown_to_safe_html(markdown: str, base_url: str) -> str:
    """Render `markdown` and sanitize it; relative links and images are resolved against `base_url`.

    `base_url` is the address the post lives at (the topic URL, or the forum root); it must be http(s),
    because every relative URL inherits its scheme. A post that needs more than `MAX_MARKDOWN_WORK` is
    shown as its text, escaped, a paragraph per block of lines (see the module docstring).
    """
    if len(markdown) > MAX_MARKDOWN_CHARS:
        cut = markdown.rfind("\n", 0, MAX_MARKDOWN_CHARS)
        markdown = markdown[: cut if cut > 0 else MAX_MARKDOWN_CHARS] + "\n\n…"
    try:
        rendered = _render(markdown)
    except _Overworked:
        log.warning("the post at %s needs more work than Markdown may cost: shown as plain text", base_url)
        rendered = "".join(f"<p>{html.escape(block.strip(), quote=False)}</p>\n"
                           for block in _BLANK_LINES.split(markdown) if block.strip())
    return sanitize_html(rendered, base_url)


def sanitize_html(html: str, base_url: str) -> str:
    """Keep only the allow-list of the module docstring; relative URLs resolve against `base_url` (http(s)).

    HTML nested too deeply to parse in bounded time gives "": the entry then shows its excerpt.
    """
    if urlsplit(base_url).scheme not in ("http", "https"):
        raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
    take_turn()
    return _kept(html, base_url)


def _digest(html: str, base_url: str) -> bytes:
    """The key `sanitize_html` keeps a result by. The base is part of it: relative URLs resolve against it.
    Its length too, so no joint is ambiguous."""
    encoded_base = base_url.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(len(encoded_base).to_bytes(8, "little") + encoded_base
                           + html.encode("utf-8", "surrogatepass"), digest_size=16).digest()


# cachetools' caches are not thread-safe (a read reorders the LRU): `cached` holds the lock around each
# lookup and store, never around the cleaning, and keeps no result larger than the whole cache.
@cached(LRUCache(SANITIZED_BYTES, getsizeof=sys.getsizeof), key=_digest, lock=threading.Lock())
def _kept(html: str, base_url: str) -> str:
    """`_sanitized_now`, kept by `_digest` in a bounded LRU (see the module docstring)."""
    return _sanitized_now(html, base_url)


def _sanitized_now(html: str, base_url: str) -> str:
    """What `sanitize_html` keeps: the nesting check, nh3, the tidying."""
    try:
        check_nesting(html)
    except HostileMarkup as exc:
        log.warning("the post at %s is left out for its excerpt: %s", base_url, exc)
        return ""
    # A Cleaner per call: the base differs per topic, and building one costs ~20 µs.
    cleaner = nh3.Cleaner(
        tags=set(ALLOWED_TAGS),
        clean_content_tags=_CONTENT_DROPPED_TAGS,
        attributes=_ATTRIBUTES,
        link_rel="nofollow noopener",
        url_schemes=_URL_SCHEMES,
        filter_style_properties={"text-align"},
        url_relative=("rewrite_with_base", base_url),
    )
    return _drop_empty_links(cleaner.clean(_without_image_captions(html))).strip()


_CAPTION = '<div class="meta">'
_CAPTION_END = "</div>"
MAX_CAPTION_CHARS = 4096
"""More than core's caption block holds (two icons, a file name, its size): a longer one is left as it is."""


def _without_image_captions(html: str) -> str:
    """Cooked HTML without core's image captions: an image shown larger on a click (`a.lightbox`, core's
    `CookedProcessorMixin#add_lightbox!`) carries a `<div class="meta">` its CSS shows only on hover: two icons,
    the file's name and its size in pixels and bytes. nh3 keeps the text of the tags it drops, so every large
    image was followed by "image895×633 50.2 KB" in every format. A block holding another `<div` is left, as is
    one past `MAX_CAPTION_CHARS`: core writes neither. Found by `str.find`, no pattern over the post."""
    if _CAPTION not in html:
        return html
    kept, start = [], 0
    while (found := html.find(_CAPTION, start)) != -1:
        inside = found + len(_CAPTION)
        end = html.find(_CAPTION_END, inside, inside + MAX_CAPTION_CHARS)
        if end == -1 or "<div" in html[inside:end]:  # not core's: left as it is
            kept.append(html[start:inside])
            start = inside
        else:
            kept.append(html[start:found])
            start = end + len(_CAPTION_END)
    kept.append(html[start:])
    return "".join(kept)


def _drop_empty_links(html: str) -> str:
    """Unwrap each `<a>` without href (keeping what it holds) and remove each `<img>` without src."""
    if "<a" not in html and "<img" not in html:
        return html
    dropped: list[bool] = []  # per open <a>, whether its start tag was dropped; nh3 never nests them

    def rewrite(tag: re.Match[str]) -> str:
        name = tag["name"]
        if name is None:  # </a>
            return "" if dropped and dropped.pop() else tag.group()
        attrs = tag["attrs"] or ""
        if name == "img":
            return tag.group() if _SRC.search(attrs) else ""
        dropped.append(_HREF.search(attrs) is None)
        return "" if dropped[-1] else tag.group()

    return _LINK_OR_IMAGE_TAG.sub(rewrite, html)
