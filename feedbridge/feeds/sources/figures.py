"""What thresholds, tag exclusions and tag intersections need beyond the list they filter.

A Markdown list carries replies but no likes, views, tags or category ids: a feed that filters on those
reads the forum's JSON list of the same page (through the service, so cached and counted against the
forum's budget), and says so with a 400 naming the parameter when the forum refuses it, rather than
serving a feed that is silently empty or unfiltered. (Which subcategories an `exclude_category=` drops is
`feeds.select.subcategories`.)

A Markdown list carries no pictures of the topics either: a feed with `content=full`, which reads every topic's
page anyway, reads the JSON list of the same page for them too (one request per list page beside one per
topic), and goes without thumbnails when the forum will not give it; an excerpt feed of a Markdown list has
none, rather than cost the forum a second list for every feed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from feedbridge.errors import NoForumAnswer, NotHeld, RequestError, UpstreamNotFound, UpstreamRefused
from feedbridge.feeds.select.filters import FeedFilter
from feedbridge.feeds.sources.dialects import source_of
from feedbridge.models import Listing, merged

FIGURES = ("likes", "views", "tags", "pinned", "category_id", "replies", "image_url")
"""What a topic of a Markdown list takes from the JSON list of the same page, where it has none of its own
(`image_url`: its picture, read for `content=full`)."""

log = logging.getLogger(__name__)


def completed(feed_filter: FeedFilter, listings: Sequence[Listing],
              json_page: Callable[[int, bool], Listing], pictures: bool = False) -> list[Listing]:
    """`listings` with each page's topics given the figures of page `n` of the JSON list (`json_page(n, optional)`:
    read as one the build can do without when `optional`, `Read.optional`),
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
            # the pictures alone: a read the build can do without
            figures = {topic.id: topic for topic in json_page(number, needed is None).topics}
        except (NoForumAnswer, NotHeld) as exc:
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
