"""The formats a feed comes in, one record each: routes, response headers, the front page, the static site and the
CLI read this table. Adding a format is its record here, its renderer (`render.documents`, `render.json_feed`),
and the places that name the formats themselves: the `.html` view's links (`web/templates/feed.html`), the front
page's script (`web/static/pages.js`) and the XML formats' stylesheet (`web/routes.py`). `html` is a format of
its own for routing and links (every feed is also a web page), but it has no renderer here: the web layer renders
it with a template, from the same entries.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from feedbridge.models import Entry, Listing
from feedbridge.render.documents import ATOM_TYPE, RSS_TYPE, render_atom, render_rss
from feedbridge.render.json_feed import JSON_TYPE, render_json
from feedbridge.render.meta import Before, FeedMeta, feed_updated, floored, listed
from feedbridge.render.turns import take_turn

FormatName = Literal["atom", "rss", "json", "html"]


@dataclass(frozen=True, slots=True)
class Format:
    name: FormatName
    media_type: str  # with its charset, as sent in Content-Type
    label: str  # what a person calls it, as the static site's index names the files
    renderer: Callable[[FeedMeta, Sequence[Entry]], bytes] | None

    @property
    def mime(self) -> str:
        """The media type without parameters, as `<link type=…>` and Accept negotiation want it."""
        return self.media_type.partition(";")[0]


FEEDS = (
    Format("atom", ATOM_TYPE, "Atom", render_atom),
    Format("rss", RSS_TYPE, "RSS", render_rss),
    Format("json", JSON_TYPE, "JSON Feed", render_json),
)
HTML = Format("html", "text/html; charset=utf-8", "web page", None)
FORMATS: dict[str, Format] = {f.name: f for f in (*FEEDS, HTML)}
FEED_FORMATS: tuple[str, ...] = tuple(f.name for f in FEEDS)


def render(fmt: str, meta: FeedMeta, entries: Sequence[Entry]) -> bytes:
    renderer = FORMATS[fmt].renderer if fmt in FORMATS else None
    if renderer is None:
        raise ValueError(f"unknown feed format {fmt!r}; expected one of {', '.join(FEED_FORMATS)}")
    return renderer(meta, entries)


def document(fmt: str, meta: FeedMeta, entries: Sequence[Entry], first: Listing,
             before: Before | None) -> tuple[bytes, datetime]:
    """The render step of a build, entered once: `meta` given its date (`listed`, the date of `first`, the
    list the feed was made from, and the `floored` one of the copy it replaces, `before`), the feed's bytes
    (`render`) and the date they give themselves (`feed_updated`)."""
    meta = floored(meta, listed(first, meta.built), before)
    return render(fmt, meta, entries), feed_updated(meta, entries)


GZIP_MIN = 1024
"""Bodies shorter than this are sent as they are: their gzip saves a few hundred bytes at most."""
GZIP_SLICE = 256 * 1024
"""Bytes compressed between two turns (`render.turns`): about 1 ms at level 1."""


def gzipped(body: bytes) -> bytes | None:
    """The body's gzip (RFC 9110 §8.4.1.3), made once when a feed is built and kept beside it, so that a reader
    that takes gzip (every feed reader does) gets a quarter of the bytes and no hit compresses anything. Level 1,
    nginx's default: 0.07 ms for the compiler category's 25 KB Atom feed, 6.9 KB, where level 6 takes three
    times as long for 6.2 KB. In slices of `GZIP_SLICE` with a turn before each, as the build's other loops
    take theirs: one call held a worker 78 ms for a 19 MB feed (500 of a hostile forum's longest posts). zlib's
    gzip container writes no name and no time: the same body, the same bytes. None for a short body, or one
    gzip does not shorten."""
    if len(body) < GZIP_MIN:
        return None
    packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # 16+: the gzip container (RFC 1952)
    view, parts = memoryview(body), []
    for start in range(0, len(body), GZIP_SLICE):
        take_turn()
        parts.append(packer.compress(view[start : start + GZIP_SLICE]))
    parts.append(packer.flush())
    packed = b"".join(parts)
    return packed if len(packed) < len(body) else None
