"""What thresholds, tag and category exclusions and tag intersections need beyond the list they filter.

A Markdown list carries replies but no likes, views, tags or category ids: a feed that filters on those
reads the forum's JSON list of the same page (through the service, so cached and counted against the
forum's budget), and says so with a 400 naming the parameter when the forum refuses it, rather than
serving a feed that is silently empty or unfiltered. `exclude_category=` also drops the subcategories,
which only the forum's categories directory knows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from feedbridge.errors import RequestError, UpstreamNotFound, UpstreamRefused
from feedbridge.feeds.filters import FeedFilter
from feedbridge.feeds.sources import JSON
from feedbridge.models import Category, Listing, Topic


def completed(feed_filter: FeedFilter, listings: Sequence[Listing],
              json_page: Callable[[int], Listing]) -> list[Listing]:
    """`listings` with each Markdown page's topics given the figures of page `n` of the JSON list
    (`json_page(n)`), when the filter needs them; a topic not on that page keeps its own (none)."""
    needed = feed_filter.json_needed()
    if needed is None or all(listing.dialect == JSON.name for listing in listings):
        return list(listings)
    pages = []
    for number, listing in enumerate(listings):
        if listing.dialect == JSON.name:
            pages.append(listing)
            continue
        try:
            figures = {topic.id: topic for topic in json_page(number).topics}
        except (UpstreamNotFound, UpstreamRefused) as exc:
            raise RequestError(f"{needed} needs the forum's JSON list, since its Markdown list carries no likes, "
                               f"views, tags or category ids, and the forum refused it: {exc.message}") from None
        pages.append(replace(listing, topics=tuple(_with(topic, figures.get(topic.id)) for topic in listing.topics)))
    return pages


def _with(topic: Topic, listed: Topic | None) -> Topic:
    if listed is None:
        return topic
    return replace(topic, likes=listed.likes, views=listed.views, tags=listed.tags or topic.tags,
                   category_id=listed.category_id if topic.category_id is None else topic.category_id,
                   replies=listed.replies if topic.replies is None else topic.replies)


def excluding(feed_filter: FeedFilter, directory: Sequence[Category]) -> FeedFilter:
    """The filter with the subcategories (at any depth) of its excluded categories: a category's path
    (`slugs`) starts with its parent's."""
    paths = [c.slugs + "/" for c in directory if c.id in feed_filter.exclude_categories]
    below = frozenset(c.id for c in directory if any(c.slugs.startswith(path) for path in paths))
    return replace(feed_filter, subcategories=below - feed_filter.exclude_categories)
