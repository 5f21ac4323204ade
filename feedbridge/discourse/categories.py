"""A forum's categories directory (`/categories.md`): which category feeds the front page and OPML offer.

FORMAT.md does not describe this page, so it is parsed by shape, leniently: every heading whose link
points at a `/c/[grandparent/][parent/]slug/id` URL is a category, its first paragraph is the description, and
anything else is ignored: text that is not a directory gives no categories, and the front page then
falls back to a free-text category and the paste box.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from feedbridge.discourse.fields import one_line, unescape
from feedbridge.models import Category

_HEADING = re.compile(r"^#{1,6}\s+\[(?P<name>.+)\]\((?P<url>[^()\s]+)(?:\s+\"[^\"]*\")?\)\s*$")
# Up to three levels, as core nests them (`max_category_nesting`, config/site_settings.yml).
_CATEGORY_PATH = re.compile(
    r"/c/(?P<slugs>[\w-]{1,100}(?:/[\w-]{1,100})?(?:/[\w-]{1,100})?)/(?P<id>\d{1,9})(?:\.md)?/?$")
MAX_CATEGORIES = 500


def parse_categories(text: str) -> tuple[Category, ...]:
    """Categories in page order, each id once. Text that is not a directory gives an empty tuple."""
    found: dict[int, Category] = {}
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
            path = urlsplit(heading["url"]).path if heading else ""
            if heading and (match := _CATEGORY_PATH.search(path)):
                name = one_line(unescape(heading["name"])) or match["slugs"]
                current = Category(name, match["slugs"], int(match["id"]))
        elif current is not None and stripped and not stripped.startswith("<"):
            if not description or len(" ".join(description)) < 300:
                description.append(one_line(unescape(stripped)))
    finish()
    return tuple(found.values())
