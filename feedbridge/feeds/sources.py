"""The two ways of reading a Discourse forum: its Markdown lists (`/latest.md`) and its JSON lists (`/latest.json`).

One small record per source says how to build each upstream URL and which parser reads the answer, so
the service never tests "which source?" beyond picking the record. The URL paths are the same for both
(`/c/SLUG/ID`, `/tag/NAME`, `/top?period=`, `/t/SLUG/ID`); only the suffix and the parsers differ.

What each gives a feed entry (what a source's lists leave out is `Source.lacks`, the one place the
filters, the figures' completion, the service and the saved-list builds learn it from):

- Markdown (core since September 2026, admins can turn it off): title, author, replies, last activity
  and an excerpt for every topic; no creation date, tags or category (content=full reads those from
  each topic's `.md` page), no likes, views or pinned flag (the JSON list of the same page has them).
- JSON (every Discourse release since 2013): title, author, replies, last activity, creation date,
  tags and category id for every topic, an excerpt only for pinned topics; content=full takes the first
  post's cooked HTML from `/t/ID.json`, the topic's head, read once for it and the topic's post feed
  (`feeds.post_feeds.read_head`).

Per-author feeds read `/topics/created-by/USER.json` on both: the Markdown endpoints have no per-user
list (see `ListReader.listings`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from feedbridge.discourse.categories import parse_categories
from feedbridge.discourse.json_pages import parse_json_categories, parse_json_listing
from feedbridge.discourse.listing import parse_listing
from feedbridge.discourse.topic import parse_topic
from feedbridge.feeds.enrich import enrich, enrich_json
from feedbridge.models import Category, Listing, Topic, TopicHead

PROBE_PATH = "/latest"
"""The list detection asks for: every public forum has it, so a refusal means the source, not the list."""


def _markdown_topic(topic: Topic, text: str, base_url: str, source_url: str) -> Topic:
    return enrich(topic, parse_topic(text, base_url=base_url, source_url=source_url), base_url)


@dataclass(frozen=True, slots=True)
class Source:
    """How one source names its URLs and reads its answers."""

    name: str  # "markdown" or "json", as in FEEDBRIDGE_FORUMS prefixes
    label: str  # for people: "Markdown", "JSON"
    suffix: str  # ".md" or ".json", added to every path
    read_listing: Callable[..., Listing]  # (text, *, base_url, source_url) -> Listing
    read_categories: Callable[[str], tuple[Category, ...]]
    # A topic's page is one of two: its own text, read by `read_topic` (list topic, page text, base URL, page
    # URL) -> enriched; or its head, `/t/ID.json`, read as its post feed reads it, and then `from_head` (list
    # topic, head, base URL) -> enriched.
    read_topic: Callable[[Topic, str, str, str], Topic] | None = None
    from_head: Callable[[Topic, TopicHead, str], Topic] | None = None
    lacks: frozenset[str] = frozenset()  # the `Topic` fields the other source's lists carry and its own do not

    def list_url(self, base_url: str, path: str, params: tuple[tuple[str, str], ...] = (), page: int = 0) -> str:
        """`path` is already percent-quoted (it comes from `FeedSpec.list_path`)."""
        params = params + ((("page", str(page)),) if page else ())
        query = f"?{urlencode(params)}" if params else ""
        return f"{base_url}{path}{self.suffix}{query}"

    def topic_url(self, topic_url: str) -> str:
        return topic_url + self.suffix

    def categories_url(self, base_url: str) -> str:
        return f"{base_url}/categories{self.suffix}"


MARKDOWN = Source("markdown", "Markdown", ".md", parse_listing, parse_categories, read_topic=_markdown_topic,
                  lacks=frozenset({"created_at", "tags", "category_id", "likes", "views", "pinned"}))
JSON = Source("json", "JSON", ".json", parse_json_listing, parse_json_categories, from_head=enrich_json)
SOURCES = {source.name: source for source in (MARKDOWN, JSON)}


def source_of(listing: Listing) -> Source:
    """The source a listing was read from: a JSON list's dialect is the source's name, a Markdown list's the
    version of the format it was written in (`c4`, `p1`, ...)."""
    return JSON if listing.dialect == JSON.name else MARKDOWN


def lacking(listings: Iterable[Listing]) -> frozenset[str]:
    """The `Topic` fields some of `listings` leave unset (`Source.lacks`): none when all are JSON lists."""
    return frozenset().union(*(source_of(listing).lacks for listing in listings))


def user_list_url(base_url: str, user: str, page: int = 0) -> str:
    """A user's own topics, newest first, 30 a page: JSON only, on every release and whatever the source."""
    return JSON.list_url(base_url, f"/topics/created-by/{quote(user, safe='')}", (), page)
