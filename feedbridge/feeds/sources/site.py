"""What a forum says of itself beside its lists, each read once per forum and kept in the store by forum: its
categories directory and its basic info. Both are the forum's own (core's `/site.json` carries both), asked
once for every feed of the forum, and neither is a feed's list.

The directory (`/categories.md` or `.json`, `Directory`): the front page's category list, the names a JSON
list leaves out (it names a topic's category by id only), and the subcategories an `exclude_category=`
drops (`feedbridge.feeds.select.subcategories.excluding`). Cached like list pages: showing the front page
costs the forum one request per cache TTL (a forum of over 1,000 categories, which pages its directory, one
per page read, at most `MAX_PAGES`).

The basic info (`/site/basic-info.json`, `Identities`): the icon, logo, title and language its feeds carry.
Any copy held will do (a forum's logo and language change rarely), so it costs the forum one request per stale TTL
(FEEDBRIDGE_STALE_TTL), charged to its budget like every read (it goes through the `Gate`), and none while the
forum is failing. Failure-tolerant, since a forum without it still gets its feeds, only without an icon: a
forum that answers 404 or refuses it (a release from before it, a proxy in front), or answers something that
is no basic info, is kept as having none, for as long as a copy would be; one that fails (a timeout, a 5xx) is
asked again once its failure is forgotten (FEEDBRIDGE_NEGATIVE_TTL). A read refused by the forum's budget, a
client's share or a slot is optional (`Read.optional`): the feed goes without its icon this time, is kept
all the same, and never waits for the window's room for an icon; the next build asks again.

The basic info is read in the public scope whatever the request's (`Identities.of`): every forum shows it
without a login, a login-only forum too, so neither the forum's key nor a member's is sent for it, nor is it
kept once per key or per member.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

import msgspec

from feedbridge.config import Forum
from feedbridge.discourse.site_info import parse_basic_info
from feedbridge.errors import (
    NoForumAnswer,
    NotHeld,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRefused,
    upstream_error,
)
from feedbridge.feeds.request.spec import FeedSpec
from feedbridge.feeds.select.subcategories import excluding, within
from feedbridge.feeds.sources.dialects import JSON
from feedbridge.feeds.sources.reads import Read, Scope
from feedbridge.models import Category, Site, Topic
from feedbridge.store import keys
from feedbridge.store.entries import DirectoryEntry, SiteEntry

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
        """`spec` whose `exclude_category=` drops the subcategories of those it names, at any depth: for a spec
        with an `exclude_category=` (`FeedService` asks only then)."""
        return replace(spec, filter=excluding(spec.filter, self.categories(read, spec.forum),
                                              lambda parent: self.categories(read, spec.forum, parent)))

    def within(self, read: Read, spec: FeedSpec) -> FeedSpec:
        """`spec` of a `/posts?category=` feed, which keeps its category's posts itself, with the subcategories of
        that category too (`FeedFilter.within`): the forum's own lists take `category=` so."""
        if spec.kind != "posts" or spec.category_id is None:
            return spec
        return replace(spec, filter=within(spec.filter, spec.category_id, self.categories(read, spec.forum),
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
        return [msgspec.structs.replace(t, category=names[t.category_id])
                if t.category is None and t.category_id in names else t for t in topics]


# --- the basic info ----------------------------------------------------------------------------------

PATH = "/site/basic-info.json"


@dataclass(frozen=True, slots=True)
class Identities:
    """The forums' identities, read in `public`, the public scope (see the module docstring)."""

    public: Scope

    def of(self, read: Read, forum: Forum) -> Site | None:
        """The forum's `Site`: the copy held, else read now (live or from cached copies only, as `read` is,
        in the public scope); None when it has none or cannot give it now."""
        public = Read(self.public, read.caller, read.cached_only, read.building)

        def fetch(_held: SiteEntry | None, public: Read) -> SiteEntry:
            url = forum.base_url + PATH
            try:
                text = public.fetch(forum, url, url).text
            except (UpstreamNotFound, UpstreamRefused) as exc:
                log.info("%s gives no basic info: %s", forum.key, exc.message)
                return SiteEntry(None, time.time())
            return SiteEntry(parse_basic_info(text, forum.base_url), time.time())

        try:
            entry: SiteEntry = public.entry(keys.site(forum.base_url), fetch, f"the basic info of {forum.key}", forum,
                                            any_copy=True, optional=True)
        except (NoForumAnswer, NotHeld) as exc:  # NotHeld: read from cached copies, and none is held
            log.info("feeds of %s go without its icon for now: %s", forum.key, exc.message)
            return None
        return entry.site
