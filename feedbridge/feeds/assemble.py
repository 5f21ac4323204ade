"""The pure end of every feed's path: which topics a spec keeps from its lists, and the feed's bytes.

The server, the static build and `feedbridge build` (of a URL or of a saved list, which stands in for its
list's URL) all reach it through `FeedService`, so a feed's title, id and description are the same whichever
way it was made. No I/O here: everything that needs the forum (pages, topic pages, category names) has
happened before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from urllib.parse import urlencode

from feedbridge.feeds.request.spec import POST_KINDS, FeedSpec
from feedbridge.models import Entry, Listing, Site, Topic
from feedbridge.render.formats import render
from feedbridge.render.meta import FeedMeta


def listed(spec: FeedSpec, listings: Sequence[Listing]) -> list[Topic]:
    """Every topic of the list pages read for `spec`, before its filter. A user's own list has no
    category filter of its own, so a user's topics feed's `category=` is applied here."""
    everything = [t for listing in listings for t in listing.topics]
    if spec.category_id is not None and listings and listings[0].started_by is not None:
        everything = [t for t in everything if t.category_id == spec.category_id]
    return everything


def feed_title(spec: FeedSpec, first: Listing) -> str:
    """What a reader lists the feed as. A post feed's request names a topic by its number and a user as
    typed ("posts of topic 35"); once read, the forum has named them (the topic's title from its head, the
    user as the forum spells them, which `feeds.sources.post_feeds` puts in the listing's title), and that name is the
    title, with the filters after it as for every feed. Where the forum named nothing, the request's label."""
    if spec.kind in POST_KINDS and first.title.strip() and first.title != spec.label:
        return replace(spec, label=first.title).title
    return spec.title


def description(spec: FeedSpec, first: Listing) -> str:
    """Says where the topics came from; for a user's topics feed, whether it is complete."""
    if spec.kind in POST_KINDS:
        return f"{feed_title(spec, first)}, newest first: {spec.label} on {spec.forum.key}"
    if spec.started_by is None:
        return f"{spec.title}, from {first.title or spec.label} on {spec.forum.key}"
    if first.started_by is not None:
        return f"{spec.title}: every topic they started, from their own topic list on {spec.forum.key}"
    return (f"{spec.title}: only those among the latest topics of {spec.forum.key} ({spec.pages} page(s)), "
            "because the forum refused their own topic list")


def feed_body(spec: FeedSpec, first: Listing, entries: Sequence[Entry], self_url: str | None,
              stylesheet_url: str | None, updated: datetime, *, site: Site | None = None,
              ttl: int | None = None) -> bytes:
    """The feed in `spec.fmt`. Without a self URL the id is the list's Markdown URL with the canonical
    query as its fragment, so filtered feeds of one list still have ids of their own. A digest's id is
    `spec.digest_id`, the start of its entries' ids: one feed whatever host, format or `limit=` reads it.
    `updated` is the feed's date when no entry has one; `site` how the forum presents itself (its icon,
    logo and language), `ttl` the seconds a copy is served before the forum is asked again."""
    query = urlencode(spec.canonical_query())
    meta = FeedMeta(
        title=feed_title(spec, first),
        forum_url=spec.forum.base_url,
        html_url=spec.html_url,
        feed_id=spec.digest_id if spec.digest else self_url or spec.list_id + (f"#{query}" if query else ""),
        self_url=self_url,
        description=description(spec, first),
        stylesheet_url=stylesheet_url,
        updated=updated,
        site=site,
        ttl=ttl,
    )
    return render(spec.fmt, meta, entries)
