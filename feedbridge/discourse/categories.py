"""A forum's categories directory (`/categories.md`): which category feeds the front page and OPML offer.

Core writes it in lib/markdown_endpoint/directory_renderer.rb (`DirectoryRenderer#categories`): a heading
`## [name](…/c/[grandparent/][parent/]slug/id.md)` per category, its description's excerpt, and for a
subcategory a line `Parent: [name](…/c/parent/id.md)` (the label is translated); a forum asked for
`include_subcategories=true` lists every level, each child after its parent; a paged directory (over 1,000
categories) ends with `[Next page](…/categories.md?page=N)` (`next_directory_page`). It is parsed by shape,
leniently: every heading whose link points at a category URL is a category, its first paragraph is the
description, a line whose link leads to a category or to the directory (the parent, the pages) is not part
of it, and anything else is ignored: text that is not a directory gives no categories, and the front page
then falls back to a free-text category and the paste box.
"""

from __future__ import annotations

import re
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

from feedbridge.discourse.fields import MAX_ENCODED_SLUG, category_slug, one_line, unescape
from feedbridge.models import Category

_HEADING = re.compile(r"^#{1,6}\s+\[(?P<name>.+)\]\((?P<url>[^()\s]+)(?:\s+\"[^\"]*\")?\)\s*$")
# Up to three levels, as core nests them (`max_category_nesting`, config/site_settings.yml).
_PART = rf"[\w%-]{{1,{MAX_ENCODED_SLUG}}}"  # one slug, percent-encoded or not
_CATEGORY_PATH = re.compile(rf"/c/(?P<slugs>{_PART}(?:/{_PART})?(?:/{_PART})?)/(?P<id>[0-9]{{1,9}})(?:\.md)?/?$")
_LINK = re.compile(r"\]\((?P<url>[^()\s]{1,2000})(?:\s+\"[^\"]{0,500}\")?\)")
DIRECTORY = "/categories.md"
MAX_CATEGORIES = 500


def parse_categories(text: str) -> tuple[Category, ...]:
    """Categories in page order, each id once. Text that is not a directory gives an empty tuple.

    Where the page names parents (core's `Parent:` lines: it was asked for every subcategory) and is the
    whole directory (no page links, not cut at MAX_CATEGORIES), each category's `subcategory_ids` are the
    children it names, `()` for a leaf, as `/categories.json` gives them; otherwise they stay unknown."""
    found: dict[int, Category] = {}
    parents: dict[int, int] = {}
    paged = False
    current: Category | None = None
    description: list[str] = []

    def finish() -> None:
        if current is not None and current.id not in found and len(found) < MAX_CATEGORIES:
            found[current.id] = Category(current.name, current.slugs, current.id, " ".join(description))

    for line in text.splitlines():
        stripped = line.strip()
        heading = _HEADING.match(stripped)
        if heading or stripped.startswith("#") or stripped == "---":
            finish()
            current, description = None, []
            path = _path(heading["url"]) if heading else ""
            if heading and (match := _CATEGORY_PATH.search(path)) and (slugs := _slugs(match["slugs"])):
                name = one_line(unescape(heading["name"])) or slugs
                current = Category(name, slugs, int(match["id"]))
        elif current is not None and stripped and not stripped.startswith("<"):
            links = _links(stripped)
            if any(path.endswith(DIRECTORY) for path, _ in links):  # the page links
                paged = paged or any("page" in parse_qs(query) for _, query in links)
            elif named := next((m for path, _ in links if (m := _CATEGORY_PATH.search(path))), None):
                parents.setdefault(current.id, int(named["id"]))
            elif not description or len(" ".join(description)) < 300:
                description.append(one_line(unescape(stripped)))
    finish()
    if not parents or paged or len(found) >= MAX_CATEGORIES:
        return tuple(found.values())
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        if child in found:
            children.setdefault(parent, []).append(child)
    return tuple(replace(c, subcategory_ids=tuple(children.get(c.id, ()))) for c in found.values())


def _slugs(path: str) -> str | None:
    """A category path's slugs, each as a feed path names it (`fields.category_slug`); None if one is unusable."""
    parts = path.split("/")
    slugs = [slug for part in parts if (slug := category_slug(part)) is not None]
    return "/".join(slugs) if len(slugs) == len(parts) else None


def _path(url: str) -> str:
    """The path of a heading's link; "" (no category, the heading is skipped) where urlsplit refuses the URL (a
    broken IPv6 literal, `https://[x/c/evil/77`), as `_links` leaves such a link out: one hostile heading costs
    its own category, never the directory, which the front page, its category lists and the OPML all read."""
    try:
        return urlsplit(url).path
    except ValueError:
        return ""


def _links(line: str) -> list[tuple[str, str]]:
    """The path and query of each Markdown link in `line` whose URL can be read."""
    found = []
    for match in _LINK.finditer(line):
        try:
            url = urlsplit(match["url"])
        except ValueError:  # a broken IPv6 literal
            continue
        found.append((url.path, url.query))
    return found


def next_directory_page(text: str, page: int) -> bool:
    """Whether page `page` (1 first) of the directory links to page `page + 1`, as a paged one does."""
    return any(path.endswith(DIRECTORY) and parse_qs(query).get("page", [""])[-1] == str(page + 1)
               for line in text.splitlines() if DIRECTORY in line for path, query in _links(line))
