"""A forum's categories directory (`/categories.md` or `.json`): the front page's category list, the names
a JSON list leaves out (it names a topic's category by id only), and the subcategories an
`exclude_category=` drops (`feedbridge.feeds.figures.excluding`).

Cached like list pages: showing the front page costs the forum one request per cache TTL.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from feedbridge.config import Forum
from feedbridge.errors import NotHeld, UpstreamError, upstream_error
from feedbridge.feeds.figures import excluding
from feedbridge.feeds.reads import Reads
from feedbridge.feeds.sources import JSON
from feedbridge.feeds.spec import FeedSpec
from feedbridge.models import Category, Topic
from feedbridge.store import keys
from feedbridge.store.entries import DirectoryEntry
from feedbridge.store.protocols import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Directory:
    """One scope's directories, read one way (`feeds/reads.py`)."""

    reads: Reads
    store: Store

    def categories(self, forum: Forum, parent: int | None = None) -> tuple[Category, ...]:
        """The directory; UpstreamError only with nothing cached. With `parent`, the subcategories of that
        category (`/categories.json?parent_category_id=ID`: JSON on every forum, since the Markdown directory
        has no such view)."""
        def fetch(_held: DirectoryEntry | None) -> DirectoryEntry:
            if parent is not None:
                url = f"{JSON.categories_url(forum.base_url)}?parent_category_id={parent}"  # an int: no quoting
                return DirectoryEntry(JSON.read_categories(self.reads.fetch(forum, url, url).text), time.time())
            source = self.reads.source(forum)
            url = source.categories_url(forum.base_url)
            return DirectoryEntry(source.read_categories(self.reads.fetch(forum, url, url).text), time.time())

        try:
            entry: DirectoryEntry = self.reads.entry(keys.categories(forum.base_url, parent), fetch,
                                                     f"the categories of {forum.key}")
        except UpstreamError as exc:
            raise upstream_error(exc.reason, f"could not read the categories of {forum.key}: {exc.message}",
                                 exc.retry_after, exc.upstream_status) from None
        return entry.categories

    def excluding(self, spec: FeedSpec) -> FeedSpec:
        """`spec` whose `exclude_category=` drops the subcategories of those it names, at any depth."""
        if not spec.filter.exclude_categories:
            return spec
        return replace(spec, filter=excluding(spec.filter, self.categories(spec.forum),
                                              lambda parent: self.categories(spec.forum, parent)))

    def named(self, forum: Forum, topics: list[Topic]) -> list[Topic]:
        """The topics with their categories' names where their list gave only ids.

        Any cached copy of the directory will do (names rarely change), so this costs at most one request
        per forum per stale TTL, none when the forum is failing; without the directory, no names.
        """
        if not any(t.category is None and t.category_id is not None for t in topics):
            return topics
        cached: DirectoryEntry | None = self.store.get(keys.categories(forum.base_url))
        directory = cached.categories if cached is not None else ()
        if cached is None:
            try:
                directory = self.categories(forum)
            except (UpstreamError, NotHeld) as exc:
                log.info("no category names for %s: %s", forum.key, exc.message)
        names = {category.id: category.name for category in directory}
        return [replace(t, category=names[t.category_id]) if t.category is None and t.category_id in names else t
                for t in topics]
