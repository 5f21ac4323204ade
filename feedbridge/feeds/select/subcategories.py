"""Which subcategories an `exclude_category=` drops, and which a `/posts?category=` keeps: only the forum's
categories directory knows them, its top level, with the second level beside or inside it on most releases,
and the third level (Discourse nests no deeper) only in `/categories.json?parent_category_id=ID`, one request
per parent. A JSON directory also says which categories have children (`subcategory_ids`): only those are
asked for, so a leaf costs nothing. Pure but for `children`, the directory's reader's read of one parent's
subcategories (`Directory.excluding`, `Directory.within`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from feedbridge.errors import RequestError
from feedbridge.feeds.select.filters import FeedFilter
from feedbridge.models import Category

MAX_PARENTS = 20
"""Parents whose subcategories one feed may look up (`?parent_category_id=`): each is a request, counted
against the forum's budget and cached like the directory, so excluding a wide category costs at most this
many; past it the feed is a 400 naming `exclude_category`, never one that keeps some grandchildren."""
DEPTH = 3  # Discourse's `max_category_nesting` is 2 or 3: a third-level category has no subcategories


def excluding(feed_filter: FeedFilter, directory: Sequence[Category],
              children: Callable[[int], Sequence[Category]]) -> FeedFilter:
    """The filter with the subcategories (at any depth) of its excluded categories (`below`)."""
    return replace(feed_filter, subcategories=below(feed_filter.exclude_categories, directory, children,
                                                    "exclude_category"))


def within(feed_filter: FeedFilter, category: int, directory: Sequence[Category],
           children: Callable[[int], Sequence[Category]]) -> FeedFilter:
    """The filter of a feed that stays inside `category` and does so itself (`/posts?category=`, whose list the
    forum does not filter): that category and its subcategories at any depth (`below`), as the forum's own lists
    take `category=` (`TopicQuery#default_results`)."""
    return replace(feed_filter, within=frozenset({category}) | below(frozenset({category}), directory, children,
                                                                      "category"))


def below(categories: frozenset[int], directory: Sequence[Category], children: Callable[[int], Sequence[Category]],
          param: str) -> frozenset[int]:
    """The subcategories (at any depth) of `categories`, which `param` named. The directory gives a
    category's path (`slugs`), which starts with its parent's, and on current releases its children's ids;
    `children(id)` asks the forum for the rest, once per category that has children the directory leaves out.

    A category whose `subcategory_ids` are known costs no request when it is a leaf or when the directory
    lists all its children. Where they are unknown, a directory that shows any subcategory shows them all
    (beside their parents, or nested in them), so a top-level category asks only for its children's
    children. An answer naming a category the directory places elsewhere comes from a release that ignores
    `parent_category_id` and sent its whole directory: it adds nothing."""
    listed = {c.id: c for c in directory}
    shows_subcategories = any("/" in c.slugs for c in directory)
    found_below: set[int] = set()
    frontier: list[tuple[int, Category | None, int]] = [(c, None, _depth(listed.get(c))) for c in sorted(categories)]
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
                raise RequestError(f"{param}: more than {MAX_PARENTS} categories would each cost a request for their "
                                   "subcategories; name fewer or narrower categories", param=param)
            asked += 1
            found = list(children(parent))
            if any(c.id == parent or (c.id in listed and (path is None or not listed[c.id].slugs.startswith(path)))
                   for c in found):
                found = []
        for child in found:
            if child.id not in found_below and child.id not in categories:
                found_below.add(child.id)
                frontier.append((child.id, child, depth + 1))
    return frozenset(found_below)


def _subcategory_ids(*sources: Category | None) -> tuple[int, ...] | None:
    """The first of the directory's and the forum's answers that knows the category's children."""
    return next((c.subcategory_ids for c in sources if c is not None and c.subcategory_ids is not None), None)


def _depth(category: Category | None) -> int:
    """1 for a top-level category, and for one the directory does not list (whose depth it cannot tell)."""
    return 1 if category is None else category.slugs.count("/") + 1
