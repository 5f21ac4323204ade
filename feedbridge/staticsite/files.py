"""The two files that make a folder of feeds discoverable: `index.html` and `feeds.opml`.

Both are pure functions of the feeds they list (no dates, no clock), so an unchanged set of feeds gives
unchanged bytes and the files are left alone. Every name and URL in them comes from a config file or an
upstream forum, so it is escaped: by `html.escape` in HTML, by `render.opml` (the service's `/opml`
writer too) in OPML.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, urljoin

from feedbridge.render.formats import FORMATS
from feedbridge.render.opml import Subscription, opml_document


@dataclass(frozen=True, slots=True)
class Listed:
    """A feed as the index shows it: its title, the forum page it follows, and its files by format."""

    name: str
    title: str
    html_url: str
    files: tuple[tuple[str, str], ...]  # (format, path relative to the output folder)


def index_html(title: str, feeds: Sequence[Listed]) -> bytes:
    esc = html.escape
    head = [
        f'<link rel="alternate" type="{esc(FORMATS[fmt].mime)}" '
        f'title="{esc(feed.title)} ({FORMATS[fmt].label})" href="{esc(quote(path))}">'
        for feed in feeds for fmt, path in feed.files
    ]
    rows = [
        f'<li><a href="{esc(feed.html_url)}">{esc(feed.title)}</a>: '
        + " · ".join(f'<a href="{esc(quote(path))}">{FORMATS[fmt].label}</a>' for fmt, path in feed.files)
        + "</li>"
        for feed in feeds
    ]
    page = "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        *head,
        '<link rel="outline" type="text/x-opml" title="All feeds (OPML)" href="feeds.opml">',
        "</head>",
        "<body>",
        f"<h1>{esc(title)}</h1>",
        "<ul>",
        *rows,
        "</ul>",
        '<p><a href="feeds.opml">All feeds as OPML</a>, for importing into a feed reader. Built by feedbridge.</p>',
        "</body>",
        "</html>",
        "",
    ])
    return page.encode("utf-8")


def feeds_opml(title: str, site_url: str, feeds: Sequence[Listed], preferred: str = "atom") -> bytes:
    """OPML 2.0 subscription list: one outline per feed, pointing at its `preferred` format when built."""
    subscriptions = []
    for feed in feeds:
        formats = dict(feed.files)
        fmt = preferred if preferred in formats else next(iter(formats))
        subscriptions.append(Subscription(feed.title, urljoin(site_url, quote(formats[fmt])), feed.html_url))
    return opml_document(title, subscriptions)
