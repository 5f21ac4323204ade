"""The two ways of reading a Discourse forum: its Markdown lists (`/latest.md`) and its JSON lists (`/latest.json`).

One small record per source says how to build each upstream URL and which parser reads the answer, so
the service never tests "which source?" beyond picking the record. The URL paths are the same for both
(`/tag/NAME`, `/top?period=`, `/t/SLUG/ID`); the suffix and the parsers differ, and so does where each
source reads a category's lists (`Source.route`):

- A category's own path, `/c/SLUG/ID`, is its *default view* (core: app/controllers/list_controller.rb
  `ListController#category_default`): the top list for a category set to "Top", and the latest list in the
  category's own sort order otherwise (lib/topic_query.rb `TopicQuery#default_results`: without `order`, a
  category's `sort_order` (likes, views, ...) orders page 0). A feed of the category wants its new topics,
  so the bridge reads its latest list by activity wherever core serves it whatever the default view: JSON
  `/c/SLUG/ID/l/latest.json?order=activity` (`ListController#category_latest`), Markdown
  `/latest.md?category=ID&order=activity`. Core has no `/c/…/l/latest.md`: its Markdown lists are `/latest`,
  `/hot`, `/top` and `/c/…/ID` alone (lib/markdown_endpoint/controller_support.rb `markdown_list_path?`;
  spec/requests/markdown_endpoints_spec.rb expects `/c/…/l/latest.md` to be 404), with `category` and
  `order` among the query parameters it keeps (`SAFE_QUERY_PARAMETERS`).
- A category's top list: JSON `/c/SLUG/ID/l/top.json?period=P` (`ListController#category_top`), Markdown
  `/top.md?category=ID&period=P`. Top lists hold 50 topics a page (`topics_per_period_in_top_page`).
- `/latest?category=ID` (the latest and user's topics feeds' `category=`) gets `order=activity` too,
  for the same reason: without it the category's sort order applies there as well.

What each gives a feed entry (what a source's lists leave out is `Source.lacks`, the one place the
filters, the figures' completion, the service and the saved-list builds learn it from):

- Markdown (core since September 2026, admins can turn it off): title, author, replies, last activity
  and an excerpt for every topic; no creation date, tags or category (content=full reads those from
  each topic's `.md` page), no likes, views, pinned flag or picture (the JSON list of the same page has
  them; content=full reads it for the pictures, `feeds/sources/reads.py`).
- JSON (every Discourse release since 2013): title, author, replies, last activity, creation date,
  tags, category id and picture (`image_url`) for every topic, an excerpt only for pinned topics;
  content=full takes the first post's cooked HTML from `/t/ID.json`, the topic's head, read once for it and
  the topic's post feed (`feeds.sources.post_feeds.read_head`).

What a topic's own page adds to its entry (`enrich`, `enrich_json`: its first post, made safe by
`feedbridge.render.sanitize`, its creation date, category and tags) is read here too, the same for a list's
topics (`content=full`) and a topic's post feed.

Per-author feeds read `/topics/created-by/USER.json` on both: the Markdown endpoints have no per-user
list (see `ListReader.listings`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urljoin

from feedbridge.discourse.categories import next_directory_page, parse_categories
from feedbridge.discourse.json_pages import directory_goes_on, parse_json_categories, parse_json_listing
from feedbridge.discourse.listing import parse_listing
from feedbridge.discourse.topic import TopicPage, parse_topic
from feedbridge.models import Category, Listing, Topic, TopicHead, merged
from feedbridge.render.sanitize import MAX_COOKED_CHARS, markdown_to_safe_html, sanitize_html

PROBE_PATH = "/latest"
"""The list detection asks for: every public forum has it, so a refusal means the source, not the list."""


PAGE_FIELDS = ("created_at", "content_html", "category", "category_id", "tags")
"""What a topic's own page says of it, over what its list said (`models.merged`)."""


def enrich(topic: Topic, page: TopicPage, base_url: str) -> Topic:
    """A copy of `topic` with what its own page adds: creation time, first post as HTML, category, tags.

    Relative URLs in the post are resolved against the topic's URL (as a browser showing the topic
    would), which `base_url`, the forum root, makes absolute when the topic URL is relative. A page
    without post 1 (page 2 and later) still contributes the header fields.
    """
    if page.id != topic.id:
        raise ValueError(f"topic page {page.id} does not belong to topic {topic.id}")
    content_html = None
    if page.first_post_markdown is not None:
        root = base_url.rstrip("/") + "/"
        # the page's own URL where it is the forum's: one it names elsewhere would send the post's relative
        # links and images there (`/uploads/setup.exe` from another host), where the topic's links are the forum's
        document_url = urljoin(root, page.url or topic.url)
        if not document_url.startswith(root):
            document_url = urljoin(root, topic.url)
        content_html = markdown_to_safe_html(page.first_post_markdown, document_url) or None
    said = Topic(topic.id, topic.title, topic.url, created_at=page.created_at, content_html=content_html,
                 category=page.category, tags=page.tags)
    return merged(topic, said, PAGE_FIELDS)


def enrich_json(topic: Topic, page: TopicHead, base_url: str) -> Topic:
    """`enrich` for a `/t/ID.json` page (the topic's head, read once with its post feed's, `post_feeds.read_head`):
    the first post's cooked HTML, sanitized, and the header fields.

    The category stays what the list said (a JSON topic names it only by id); the tags and creation date
    of the topic page win over the list's, which are the same data read a little earlier.
    """
    if page.id != topic.id:
        raise ValueError(f"topic page {page.id} does not belong to topic {topic.id}")
    content_html = None
    if page.first_post_html is not None:
        document_url = urljoin(base_url.rstrip("/") + "/", topic.url)
        cooked = page.first_post_html
        cooked = cooked if len(cooked) <= MAX_COOKED_CHARS else cooked[:MAX_COOKED_CHARS] + "…"
        content_html = sanitize_html(cooked, document_url) or None
    said = Topic(topic.id, topic.title, topic.url, created_at=page.created_at, content_html=content_html,
                 category_id=page.category_id, tags=page.tags)
    return merged(topic, said, PAGE_FIELDS)


def _markdown_topic(topic: Topic, text: str, base_url: str, source_url: str) -> Topic:
    return enrich(topic, parse_topic(text, base_url=base_url, source_url=source_url), base_url)


Params = tuple[tuple[str, str], ...]
ACTIVITY = ("order", "activity")
"""core's `order=activity` (lib/topic_query.rb `SORTABLE_MAPPING`: `bumped_at`, pinned topics first)."""


def _category_view(path: str) -> tuple[str, bool] | None:
    """The category id of a category list path (`/c/SLUGS/ID`, `/c/SLUGS/ID/l/top`, as `FeedSpec.list_path`
    has it) and whether it is the top list; None for any other list."""
    if not path.startswith("/c/"):
        return None
    top = path.endswith("/l/top")
    category = path.removesuffix("/l/top").rpartition("/")[2]
    return (category, top) if category.isascii() and category.isdigit() else None


def _by_activity(path: str, params: Params) -> Params:
    """`/latest?category=ID` in order of activity, not in the category's own sort order."""
    if path == "/latest" and any(key == "category" for key, _ in params) and ACTIVITY not in params:
        return (*params, ACTIVITY)
    return params


def _markdown_route(path: str, params: Params) -> tuple[str, Params]:
    """Where the Markdown endpoints serve a list (see the module docstring): a category's latest list is
    `/latest.md?category=ID&order=activity`, its top list `/top.md?category=ID&period=P`."""
    view = _category_view(path)
    if view is None:
        return path, _by_activity(path, params)
    category, top = view
    return ("/top", (("category", category), *params)) if top else ("/latest", (("category", category), ACTIVITY))


def _json_route(path: str, params: Params) -> tuple[str, Params]:
    """Where the JSON lists are: a category's latest list is `/c/SLUGS/ID/l/latest.json?order=activity`."""
    view = _category_view(path)
    if view is None:
        return path, _by_activity(path, params)
    return (path, params) if view[1] else (path + "/l/latest", (ACTIVITY, *params))


@dataclass(frozen=True, slots=True)
class Source:
    """How one source names its URLs and reads its answers."""

    name: str  # "markdown" or "json", as in FEEDBRIDGE_FORUMS prefixes
    label: str  # for people: "Markdown", "JSON"
    suffix: str  # ".md" or ".json", added to every path
    read_listing: Callable[..., Listing]  # (text, *, base_url, source_url) -> Listing
    read_categories: Callable[[str], tuple[Category, ...]]
    route: Callable[[str, Params], tuple[str, Params]]  # a list's path and parameters -> where this source reads it
    directory_goes_on: Callable[[str, int], bool]  # (directory page text, its number, 1 first) -> a next one?
    # A topic's page is one of two: its own text, read by `read_topic` (list topic, page text, base URL, page
    # URL) -> enriched; or its head, `/t/ID.json`, read as its post feed reads it, and then `from_head` (list
    # topic, head, base URL) -> enriched.
    read_topic: Callable[[Topic, str, str, str], Topic] | None = None
    from_head: Callable[[Topic, TopicHead, str], Topic] | None = None
    lacks: frozenset[str] = frozenset()  # the `Topic` fields the other source's lists carry and its own do not

    def list_url(self, base_url: str, path: str, params: Params = (), page: int = 0) -> str:
        """`path` with this source's suffix, as it is: `path` is already percent-quoted (it comes from
        `FeedSpec.list_path`)."""
        params = params + ((("page", str(page)),) if page else ())
        query = f"?{urlencode(params)}" if params else ""
        return f"{base_url}{path}{self.suffix}{query}"

    def page_url(self, base_url: str, path: str, params: Params = (), page: int = 0) -> str:
        """Page `page` of the list `path` where this source reads it (`route`)."""
        return self.list_url(base_url, *self.route(path, params), page)

    def topic_url(self, topic_url: str) -> str:
        return topic_url + self.suffix

    def categories_url(self, base_url: str, page: int = 1) -> str:
        """Page `page` (1 first) of the directory with every subcategory: core gives an anonymous reader
        top-level categories only unless asked `include_subcategories=true` (app/models/category_list.rb
        `CategoryList#find_categories`), on `/categories.json` and `.md` alike."""
        return f"{base_url}/categories{self.suffix}?include_subcategories=true" + (f"&page={page}" if page > 1 else "")


MARKDOWN = Source("markdown", "Markdown", ".md", parse_listing, parse_categories, _markdown_route,
                  next_directory_page, read_topic=_markdown_topic,
                  lacks=frozenset({"created_at", "tags", "category_id", "likes", "views", "pinned", "image_url"}))
JSON = Source("json", "JSON", ".json", parse_json_listing, parse_json_categories, _json_route,
              lambda text, _page: directory_goes_on(text), from_head=enrich_json)
SOURCES = {source.name: source for source in (MARKDOWN, JSON)}


def source_of(listing: Listing) -> Source:
    """The source a listing was read from: a JSON list's dialect is the source's name, a Markdown list's the
    version of the format it was written in (`c4`, `p1`, ...)."""
    return JSON if listing.dialect == JSON.name else MARKDOWN


def lacks_of(listing: Listing) -> frozenset[str]:
    """The `Topic` fields `listing` leaves unset: its source's (`Source.lacks`), and a Markdown list's reply
    counts where its dialect writes none (only C4 has a `**Replies:**` row: FORMAT.md). A `min_replies=` on a
    C1 list dropped every topic, its count unknown, where the JSON list of the same page has it. None of
    what the page took from that JSON list (`Listing.completed`)."""
    lacks = source_of(listing).lacks
    if lacks and listing.topics and all(topic.replies is None for topic in listing.topics):
        lacks |= {"replies"}
    return lacks - listing.completed


def lacking(listings: Iterable[Listing]) -> frozenset[str]:
    """The `Topic` fields some of `listings` leave unset (`lacks_of`): none when all are JSON lists."""
    return frozenset().union(*(lacks_of(listing) for listing in listings))


def user_list_url(base_url: str, user: str, page: int = 0, category: int | None = None) -> str:
    """A user's own topics, newest first, 30 a page: JSON only, on every release and whatever the source. With
    `category`, those in that category and its subcategories, as core's other lists take `category=`
    (`TopicQuery#default_results`, which `ListController#topics_by` reaches through `create_list`)."""
    params = () if category is None else (("category", str(category)),)
    return JSON.list_url(base_url, f"/topics/created-by/{quote(user, safe='')}", params, page)
