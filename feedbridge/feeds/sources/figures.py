"""What thresholds, tag and category exclusions and tag intersections need beyond the list they filter.

A Markdown list carries replies but no likes, views, tags or category ids: a feed that filters on those
reads the forum's JSON list of the same page (through the service, so cached and counted against the
forum's budget), and says so with a 400 naming the parameter when the forum refuses it, rather than
serving a feed that is silently empty or unfiltered. `exclude_category=` also drops the subcategories,
which only the forum's categories directory knows: its top level, with the second level beside or inside
it on most releases, and the third level (Discourse nests no deeper) only in
`/categories.json?parent_category_id=ID`, one request per parent. A JSON directory also says which
categories have children (`subcategory_ids`): only those are asked for, so a leaf costs nothing.

A Markdown list carries no pictures of the topics either: a feed with `content=full`, which reads every topic's
page anyway, reads the JSON list of the same page for them too (one request per list page beside one per
topic), and goes without thumbnails when the forum will not give it; an excerpt feed of a Markdown list has
none, rather than cost the forum a second list for every feed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import replace

from feedbridge.errors import NotHeld, RequestError, UpstreamError, UpstreamNotFound, UpstreamRefused
from feedbridge.feeds.admission.policy import optional
from feedbridge.feeds.select.filters import FeedFilter
from feedbridge.feeds.sources.dialects import source_of
from feedbridge.models import Category, Listing, merged

FIGURES = ("likes", "views", "tags", "pinned", "category_id", "replies", "image_url")
"""What a topic of a Markdown list takes from the JSON list of the same page, where it has none of its own
(`image_url`: its picture, read for `content=full`)."""

log = logging.getLogger(__name__)


def completed(feed_filter: FeedFilter, listings: Sequence[Listing],
              json_page: Callable[[int], Listing], pictures: bool = False) -> list[Listing]:
    """`listings` with each page's topics given the figures of page `n` of the JSON list (`json_page(n)`),
    when the filter needs what its source lacks, or (`pictures`) the feed wants the topics' pictures; a topic
    not on that page keeps its own (none). Read for the pictures alone, a page the forum does not give is
    left as it is."""
    pages = []
    for number, listing in enumerate(listings):
        lacks = source_of(listing).lacks
        needed = feed_filter.json_needed(lacks)
        if needed is None and not (pictures and "image_url" in lacks):
            pages.append(listing)
            continue
        try:
            with optional() if needed is None else nullcontext():  # the pictures alone: a build can do without
                figures = {topic.id: topic for topic in json_page(number).topics}
        except (UpstreamError, NotHeld) as exc:
            if needed is None:  # the pictures alone: a failure, a refused read (the build kept all the same), no copy
                log.info("no thumbnails for page %d of %s: %s", number, listing.url, exc.message)
                pages.append(listing)
                continue
            if not isinstance(exc, UpstreamNotFound | UpstreamRefused):
                raise
            raise RequestError(f"{needed} needs the forum's JSON list, since its Markdown list carries no likes, "
                               f"views, tags or category ids, and the forum refused it: {exc.message}",
                               param=needed) from None
        pages.append(replace(listing, topics=tuple(merged(topic, figures.get(topic.id), FIGURES, keep=True)
                                                   for topic in listing.topics)))
    return pages


MAX_PARENTS = 20
"""Parents whose subcategories one feed may look up (`?parent_category_id=`): each is a request, counted
against the forum's budget and cached like the directory, so excluding a wide category costs at most this
many; past it the feed is a 400 naming `exclude_category`, never one that keeps some grandchildren."""
DEPTH = 3  # Discourse's `max_category_nesting` is 2 or 3: a third-level category has no subcategories


def excluding(feed_filter: FeedFilter, directory: Sequence[Category],
              children: Callable[[int], Sequence[Category]]) -> FeedFilter:
    """The filter with the subcategories (at any depth) of its excluded categories. The directory gives a
    category's path (`slugs`), which starts with its parent's, and on current releases its children's ids;
    `children(id)` asks the forum for the rest, once per category that has children the directory leaves out.

    A category whose `subcategory_ids` are known costs no request when it is a leaf or when the directory
    lists all its children. Where they are unknown, a directory that shows any subcategory shows them all
    (beside their parents, or nested in them), so a top-level category asks only for its children's
    children. An answer naming a category the directory places elsewhere comes from a release that ignores
    `parent_category_id` and sent its whole directory: it adds nothing."""
    listed = {c.id: c for c in directory}
    shows_subcategories = any("/" in c.slugs for c in directory)
    below: set[int] = set()
    frontier: list[tuple[int, Category | None, int]] = [
        (c, None, _depth(listed.get(c))) for c in sorted(feed_filter.exclude_categories)]
    asked = 0
    while frontier:
        parent, category, depth = frontier.pop(0)
        if depth >= DEPTH:
            continue
        subcategory_ids = _subcategory_ids(listed.get(parent), category)
        path = listed[parent].slugs + "/" if parent in listed else None
        if subcategory_ids is not None and all(c in listed for c in subcategory_ids):
            found = [listed[c] for c in subcategory_ids]
        elif subcategory_ids is None and depth == 1 and shows_subcategories and path is not None:
            found = [c for c in directory if c.slugs.startswith(path) and "/" not in c.slugs[len(path):]]
        else:
            if asked == MAX_PARENTS:
                raise RequestError(f"exclude_category: more than {MAX_PARENTS} categories would each cost a "
                                   "request for their subcategories; exclude fewer categories",
                                   param="exclude_category")
            asked += 1
            found = list(children(parent))
            if any(c.id == parent or (c.id in listed and (path is None or not listed[c.id].slugs.startswith(path)))
                   for c in found):
                found = []
        for child in found:
            if child.id not in below and child.id not in feed_filter.exclude_categories:
                below.add(child.id)
                frontier.append((child.id, child, depth + 1))
    return replace(feed_filter, subcategories=frozenset(below))


def _subcategory_ids(*sources: Category | None) -> tuple[int, ...] | None:
    """The first of the directory's and the forum's answers that knows the category's children."""
    return next((c.subcategory_ids for c in sources if c is not None and c.subcategory_ids is not None), None)


def _depth(category: Category | None) -> int:
    """1 for a top-level category, and for one the directory does not list (whose depth it cannot tell)."""
    return 1 if category is None else category.slugs.count("/") + 1
