"""A forum's categories directory (`/categories.md`): which category feeds the front page and OPML offer.

FORMAT.md does not describe this page, so it is parsed by shape, leniently: every heading whose link
points at a `/c/[parent/]slug/id` URL is a category, its first paragraph is the description, and
anything else is ignored. A directory that cannot be fetched or read is not an error for the caller:
the front page then falls back to a free-text category and the paste box.

The parsed directory is kept in the service's store like list pages are (fresh for the cache TTL, kept
until the stale TTL, served stale when the forum fails), so showing the front page costs the forum one
request per TTL.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from .config import Forum
from .fetch import UpstreamError
from .service import FeedService

log = logging.getLogger(__name__)

_HEADING = re.compile(r"^#{1,6}\s+\[(?P<name>.+)\]\((?P<url>[^()\s]+)(?:\s+\"[^\"]*\")?\)\s*$")
_CATEGORY_PATH = re.compile(r"/c/(?P<slugs>[\w-]{1,100}(?:/[\w-]{1,100})?)/(?P<id>\d{1,9})(?:\.md)?/?$")
_ESCAPED = re.compile(r"\\(.)")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")
MAX_CATEGORIES = 500


@dataclass(frozen=True, slots=True)
class Category:
    name: str
    slugs: str  # "compiler" or "hardware/gpu": the path between /c/ and the id
    id: int
    description: str = ""

    @property
    def value(self) -> str:
        """How the front page's form names the category: the path of its feed, `slugs/id`."""
        return f"{self.slugs}/{self.id}"


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    """The cached directory; shared through Redis like lists (see codec)."""

    categories: tuple[Category, ...]
    stored_at: float


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
            if match := _CATEGORY_PATH.search(path):
                name = _clean(_ESCAPED.sub(r"\1", heading["name"])) or match["slugs"]
                current = Category(name, match["slugs"], int(match["id"]))
        elif current is not None and stripped and not stripped.startswith("<"):
            if not description or len(" ".join(description)) < 300:
                description.append(_clean(_ESCAPED.sub(r"\1", stripped)))
    finish()
    return tuple(found.values())


def _clean(text: str) -> str:
    return " ".join(_CONTROL.sub("", text).split())


def load_categories(service: FeedService, forum: Forum) -> tuple[Category, ...]:
    """The forum's directory through the service's store; raises UpstreamError only with nothing cached."""
    key = "categories:" + hashlib.sha256(forum.base_url.encode()).hexdigest()[:32]
    settings = service.settings
    cached: DirectoryEntry | None = service.store.get(key)

    if (entry := service.fresh(key)) is not None:
        return entry.categories

    def fetch() -> DirectoryEntry:
        fetched = service.fetch(forum, forum.base_url + "/categories.md")
        entry = DirectoryEntry(parse_categories(fetched.text), time.time())
        service.store.set(key, entry, max(settings.stale_ttl, settings.cache_ttl))
        return entry

    try:
        return service.flight.do(key, fetch, settings.singleflight_wait, lambda: service.fresh(key)).categories
    except (UpstreamError, TimeoutError) as exc:
        if cached is not None:
            log.warning("serving stale categories of %s: %s", forum.key, exc)
            return cached.categories
        raise UpstreamError(f"could not read the categories of {forum.key}: {exc}") from None
