"""A forum's categories directory (`/categories.md` or `.json`): the front page's category list, the names
a JSON list leaves out (it names a topic's category by id only), and the subcategories an
`exclude_category=` drops (`feedbridge.feeds.select.subcategories.excluding`).

Cached like list pages: showing the front page costs the forum one request per cache TTL (a forum of over
1,000 categories, which pages its directory, one per page read, at most `MAX_PAGES`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from feedbridge.config import Forum
from feedbridge.errors import NoForumAnswer, NotHeld, UpstreamError, upstream_error
from feedbridge.feeds.request.spec import FeedSpec
from feedbridge.feeds.select.subcategories import excluding
from feedbridge.feeds.sources.dialects import JSON
from feedbridge.feeds.sources.reads import Read
from feedbridge.models import Category, Topic
from feedbridge.store import keys
from feedbridge.store.entries import DirectoryEntry

log = logging.getLogger(__name__)

MAX_PAGES = 10
"""Pages of a paged directory read (core: 20 top-level categories a page, each with up to five children)."""
MAX_CATEGORIES = 500


@dataclass(frozen=True, slots=True)
class Directory:
    """The directories of every scope, each read as its `Read` says (`feeds/sources/reads.py`)."""

    def categories(self, read: Read, forum: Forum, parent: int | None = None) -> tuple[Category, ...]:
        """The directory, every level of it, in pages while a paged one goes on (`Source.directory_goes_on`);
        UpstreamError only with nothing cached. With `parent`, the subcategories of that category
        (`/categories.json?parent_category_id=ID`: JSON on every forum, since the Markdown directory has no
        such view)."""
        def fetch(_held: DirectoryEntry | None, read: Read) -> DirectoryEntry:
            if parent is not None:
                url = f"{forum.base_url}/categories.json?parent_category_id={parent}"  # an int: no quoting
                return DirectoryEntry(JSON.read_categories(read.fetch(forum, url, url).text), time.time())
            source = read.source(forum)
            found: dict[int, Category] = {}
            for page in range(1, MAX_PAGES + 1):
                url = source.categories_url(forum.base_url, page)
                text = read.fetch(forum, url, url).text
                new = [c for c in source.read_categories(text) if c.id not in found]
                found.update((c.id, c) for c in new)
                if not new or len(found) >= MAX_CATEGORIES or not source.directory_goes_on(text, page):
                    break
            return DirectoryEntry(tuple(found.values())[:MAX_CATEGORIES], time.time())

        try:
            entry: DirectoryEntry = read.entry(keys.categories(forum.base_url, parent), fetch,
                                               f"the categories of {forum.key}", forum)
        except UpstreamError as exc:
            raise upstream_error(exc.reason, f"could not read the categories of {forum.key}: {exc.message}",
                                 exc.retry_after, exc.upstream_status) from None
        return entry.categories

    def excluding(self, read: Read, spec: FeedSpec) -> FeedSpec:
        """`spec` whose `exclude_category=` drops the subcategories of those it names, at any depth."""
        if not spec.filter.exclude_categories:
            return spec
        return replace(spec, filter=excluding(spec.filter, self.categories(read, spec.forum),
                                              lambda parent: self.categories(read, spec.forum, parent)))

    def named(self, read: Read, forum: Forum, topics: list[Topic]) -> list[Topic]:
        """The topics with their categories' names where their list gave only ids.

        Any cached copy of the directory will do (names rarely change), so this costs at most one request
        per forum per stale TTL, none when the forum is failing; without the directory, no names.
        """
        if not any(t.category is None and t.category_id is not None for t in topics):
            return topics
        cached: DirectoryEntry | None = read.scope.store.get(keys.categories(forum.base_url))
        directory = cached.categories if cached is not None else ()
        if cached is None:
            try:
                directory = self.categories(read, forum)
            except (NoForumAnswer, NotHeld) as exc:
                log.info("no category names for %s: %s", forum.key, exc.message)
        names = {category.id: category.name for category in directory}
        return [replace(t, category=names[t.category_id]) if t.category is None and t.category_id in names else t
                for t in topics]
