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

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode, urljoin

from feedbridge.config import Forum, Settings
from feedbridge.discourse.categories import next_directory_page, parse_categories
from feedbridge.discourse.json_pages import directory_goes_on, parse_json_categories, parse_json_listing
from feedbridge.discourse.listing import parse_listing
from feedbridge.discourse.topic import TopicPage, parse_topic
from feedbridge.errors import (
    BotWall,
    BridgeBusy,
    CrawlerRefused,
    DeadlinePassed,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRateLimited,
    UpstreamRefused,
)
from feedbridge.models import Category, Listing, Topic, TopicHead, merged
from feedbridge.render.sanitize import MAX_COOKED_CHARS, markdown_to_safe_html, sanitize_html
from feedbridge.store import keys
from feedbridge.store.control import ControlStore
from feedbridge.store.entries import SourceEntry
from feedbridge.store.protocols import Flight

if TYPE_CHECKING:
    from feedbridge.feeds.request.spec import FeedSpec
    from feedbridge.feeds.sources.reads import Read

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

    def page_url(self, spec: FeedSpec, page: int = 0) -> str:
        """Page `page` (0 first) of the feed's list where this source reads it (`route`)."""
        return self.list_url(spec.forum.base_url, *self.route(spec.list_path, spec.list_params), page)

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


LACKED = MARKDOWN.lacks | {"replies"}
"""Every field `lacks_of` may find a list without: what a filter that needs none of them never reads elsewhere."""


def lacking(listings: Iterable[Listing]) -> frozenset[str]:
    """The `Topic` fields some of `listings` leave unset (`lacks_of`): none when all are JSON lists."""
    return frozenset().union(*(lacks_of(listing) for listing in listings))


def probe_url(source: Source, forum: Forum) -> str:
    """The probe's page of `forum` as `source` serves it (`PROBE_PATH`)."""
    return source.list_url(forum.base_url, PROBE_PATH)


def is_probed(spec: FeedSpec) -> bool:
    """Whether the feed's list is the probes' own page (`/latest`, no parameters)."""
    return (spec.list_path, spec.list_params) == (PROBE_PATH, ())


def detection_urls(forums: Iterable[Forum], specs: Iterable[FeedSpec] = ()) -> frozenset[str]:
    """What detecting the forums' sources may read and fail without leaving a feed the worse (a batch run's
    `BatchFetcher.unjudged`): each forum's probes, and each feed's own first list page as Markdown, read while
    its forum is undecided (`SourceDetector.source`'s `first`). Read again as the feed's list, a failure of that
    page is the feed's, and remembered or fetched again it fails the feed as ever."""
    probes = {probe_url(source, forum) for forum in forums for source in (MARKDOWN, JSON)}
    return frozenset(probes | {MARKDOWN.page_url(spec) for spec in specs})


def user_list_url(base_url: str, user: str, page: int = 0, category: int | None = None) -> str:
    """A user's own topics, newest first, 30 a page: JSON only, on every release and whatever the source. With
    `category`, those in that category and its subcategories, as core's other lists take `category=`
    (`TopicQuery#default_results`, which `ListController#topics_by` reaches through `create_list`)."""
    params = () if category is None else (("category", str(category)),)
    return JSON.list_url(base_url, f"/topics/created-by/{quote(user, safe='')}", params, page)


# --- which of them an `auto` forum is read by -----------------------------------------------------------------
#
# Which source reads an `auto` forum: its Markdown lists or its JSON lists, as a small state machine.
#
# The probe decides: the forum's own `/latest.md`, the list every public forum has. Feed requests choose
# which other lists are read (a private category, a list that answers garbage), so what those answer is that
# feed's error and never a transition: no reader can move the decision that every other reader's feeds are
# built with. One answer alone stands in for the probe's: a feed's own Markdown list, read first on a forum
# with no record at all, that is a Markdown list (`SourceDetector.source`'s `first`, from `ListReader`). Only a
# forum that serves Markdown lists answers one, so it says what the probe would say, and saves the forum the
# probe's request. A 429 on it (or the request's deadline passing) is the feed's error, as on the probe, and
# nothing is written; anything else it answers (a bot wall and a crawler refusal too) decides nothing, and the
# probe runs as below. Once the probe's own page has failed and its failure is remembered, no feed reads its
# list first: a forum behind a wall is asked nothing more per feed than before, whatever lists readers invent.
# A record a probe wrote while that list was read stands.
#
#     (none) ── a feed's own list as Markdown: a Markdown list ──▶ MARKDOWN (no probe)
#            ── a 429, the deadline ──▶ (none), the feed's error      ── anything else ──▶ the probe, below
#
# States: (none), UNDECIDED, MARKDOWN, JSON. A probe runs when the record is due; its answer moves it:
#
#         ┌───────────────────── a Markdown list ─────────────────────┐
#         │                                                           ▼
#     (none) or UNDECIDED ───────── refused ─────────▶ JSON ◀─────▶ MARKDOWN
#         │   ▲                                         ▲     a list ▶ MARKDOWN and refused ▶ JSON from
#         │   └── /latest.json no list ──┐              │     either; inconclusive keeps the decision
#         └──── inconclusive ────────────┴── /latest.json a list
#
#     probe of /latest.md   a Markdown list   refused: 404/410,     inconclusive: timeout,    429: the forum's, or
#                                             401/403, not a list   5xx, too large, a bot     the bridge's budget
#                                                                   wall (but see below) ...
#     (none)                MARKDOWN          JSON                  JSON if /latest.json is   (none), the feed's error
#     UNDECIDED             MARKDOWN          JSON                  a list, else UNDECIDED    UNDECIDED, still due
#     MARKDOWN              MARKDOWN          JSON                  MARKDOWN                  MARKDOWN, still due
#     JSON                  MARKDOWN          JSON                  JSON                      JSON, still due
#
# A bot wall (`errors.BotWall`: a challenge page instead of the forum) is never "refused": the forum behind it
# may well serve Markdown. Nor is a crawler policy that refuses the bridge (`errors.CrawlerRefused`, core's
# `403 Crawler is not allowed!` to every anonymous request, JSON ones too): both are handled alike. With a
# decision it is inconclusive; with none (or UNDECIDED) it is handled as a 429 is, the feed's error with
# nothing written, since `/latest.json` stands behind the same wall.
#
# Every record says when it is due: a conclusive probe after `FEEDBRIDGE_SOURCE_RECHECK`; an inconclusive
# one (and a JSON decision reached through `/latest.json`, while `/latest.md` itself stays inconclusive)
# a tenth of that (at most `RETRY`), so a forum that recovers is read the way it wants soon. With no
# decision, JSON is tried before Markdown is assumed: every Discourse release serves `/latest.json`, so a
# forum whose Markdown probe fails (500, an oversized or slow answer) is read from what it does serve
# rather than through `.md` URLs that fail; UNDECIDED reads Markdown, the one source left. A 429 changes
# nothing: a record made then would hold for every reader on the strength of the forum's wait or of one
# client's spent budget share.
#
# The record is control state (`SourceEntry`), shared through the store so every worker and process
# detects a forum once per period; concurrent requests that find it due share one probe, charged to the
# caller like any upstream request. The probes read through the page cache (`Read.list_page`, with the read
# of the request that found the record due: live, in its scope), so a `/latest` feed built just after reads
# the probe's page from there.

log = logging.getLogger(__name__)

UNDECIDED = "undecided"
"""The record's state while no probe has decided: the lists are read as Markdown, the next probe starts over."""
RETRY = 60.0
"""Seconds (at most) until an inconclusive probe is asked again: a tenth of the re-check period, up to this."""


@dataclass(frozen=True, slots=True)
class SourceDetector:
    """One scope's decisions (`control`, `flight`: the scope's own, `feedbridge.store.scoped`)."""

    settings: Settings
    control: ControlStore
    flight: Flight

    def source(self, read: Read, forum: Forum, first: Callable[[], object] | None = None) -> Source:
        """The configured source, else the decided one, probing first when the record is due. `read` is a
        live read in this detector's scope (`Read.source` sends only those here): the probes read through it.
        `first`: the read of a feed's own list as Markdown, which on a forum with no record at all stands in
        for the probe when it reads a Markdown list (the module docstring), unless the probe's page has failed
        and its failure is remembered. It is read outside the probes' flight, as the feed's own list: a slow
        list holds up its own feed, not every feed of the forum while it is undecided. A wait the forum asked
        for or the request's deadline passed is the feed's error at once, as it is the probe's (the probe would
        only meet it again), and so is a refusal by the bridge itself (`BridgeBusy`, no `UpstreamError`);
        anything else it answers decides nothing, and the probe runs."""
        if forum.source != "auto":
            return SOURCES[forum.source]
        key = self.key(forum)
        entry: SourceEntry | None = self.control.get(key)
        if entry is None and first is not None and read.scope.policy.remembered(_probe_failed(forum)) is None:
            try:
                first()
            except (UpstreamRateLimited, DeadlinePassed):
                raise
            except UpstreamError as exc:
                log.info("%s: a feed's own list decides nothing of its source (%s)", forum.key, exc.message)
            else:  # a record a probe wrote meanwhile stands (the probe's own page is what decides)
                entry = self.control.get(key) or self._store(forum, key, None, MARKDOWN.name, settled=True)
                return _read_by(entry)
        if self._due(entry):
            previous = entry
            entry = self.flight.do(key, lambda: self._probe(read, forum, key, previous),
                                   self.settings.singleflight_wait, lambda: self._settled(key))
        return _read_by(entry)

    def decided(self, forum: Forum) -> Source:
        """The configured source, else the record as it is (or Markdown), never probing: what a read from
        cached copies uses, the forum having just failed."""
        if forum.source != "auto":
            return SOURCES[forum.source]
        return _read_by(self.control.get(self.key(forum)))

    def refused(self, spec: FeedSpec, source: Source, exc: UpstreamError) -> UpstreamError:
        """The error for a list the forum refused: that list's own, except for the JSON probe list of a forum
        whose Markdown probe was refused too, where both answers are quoted. Nothing is changed."""
        entry: SourceEntry | None = self.control.get(self.key(spec.forum))
        if spec.forum.source != "auto" or source is not JSON or entry is None or entry.source != JSON.name \
                or entry.reason is None or not is_probed(spec):
            return exc
        message = (f"neither the Markdown nor the JSON lists of {spec.forum.key} are public "
                   f"(Markdown: {entry.reason}; JSON: {exc.message})")
        if isinstance(exc, UpstreamNotFound) and entry.status == UpstreamNotFound.status:
            return UpstreamNotFound(message, reason=exc.reason, upstream_status=exc.upstream_status)
        return UpstreamRefused(message, upstream_status=exc.upstream_status)  # refused, whatever JSON said

    @staticmethod
    def key(forum: Forum) -> str:
        return keys.source(forum.base_url)

    def _probe(self, read: Read, forum: Forum, key: str, previous: SourceEntry | None) -> SourceEntry:
        """One transition of the table in the module docstring; stores and returns the new record.

        A 429 (the forum's, or the bridge's own budget or slots) is no answer at all: the record is left as
        it was, still due, so no client can postpone a re-check by being refused. A bot wall is the forum's
        front door, not its Markdown: it keeps a decision as a 5xx does, and with none it is the feed's error
        and nothing is written (the JSON probe would only meet the same wall)."""
        inconclusive: UpstreamError
        try:
            read.list_page(forum, probe_url(MARKDOWN, forum), MARKDOWN)
            return self._store(forum, key, previous, MARKDOWN.name, settled=True)
        except (UpstreamNotFound, UpstreamRefused) as exc:
            return self._store(forum, key, previous, JSON.name, settled=True, reason=exc.message, status=exc.status)
        except (UpstreamRateLimited, BridgeBusy):
            if previous is None:
                raise
            return previous
        except (BotWall, CrawlerRefused) as exc:
            if previous is None:
                raise
            if previous.source == UNDECIDED:
                return previous
            inconclusive = exc
        except UpstreamError as exc:
            inconclusive = exc
        log.warning("%s: its Markdown probe decides nothing (%s)", forum.key, inconclusive.message)
        if previous is not None and previous.source != UNDECIDED:
            return self._store(forum, key, previous, previous.source, settled=False, reason=previous.reason,
                               status=previous.status)
        try:
            read.list_page(forum, probe_url(JSON, forum), JSON)
            state = JSON.name
        except (UpstreamRateLimited, BridgeBusy, BotWall, CrawlerRefused):
            if previous is None:
                raise
            return previous
        except UpstreamError as exc:
            log.warning("%s: its JSON probe is no list either (%s)", forum.key, exc.message)
            state = UNDECIDED
        return self._store(forum, key, previous, state, settled=False, reason=inconclusive.message)

    def _store(self, forum: Forum, key: str, previous: SourceEntry | None, state: str, *, settled: bool,
               reason: str | None = None, status: int | None = None) -> SourceEntry:
        """`settled`: the Markdown probe was conclusive, so the record holds for the whole re-check period; `key` is
        the record's (`key(forum)`, made once per probe by `source`)."""
        now = time.time()
        wait = self.settings.source_recheck if settled else min(RETRY, self.settings.source_recheck / 10)
        entry = SourceEntry(state, now, now + wait, reason, status)
        if state != UNDECIDED and (previous is None or previous.source != state):
            log.info("%s: reading its %s lists%s", forum.key, SOURCES[state].label, f" ({reason})" if reason else "")
        keep = self.settings.source_recheck + max(self.settings.stale_ttl, self.settings.cache_ttl)
        self.control.set(key, entry, keep)
        return entry

    @staticmethod
    def _due(entry: SourceEntry | None) -> bool:
        return entry is None or time.time() >= entry.due_at

    def _settled(self, key: str) -> SourceEntry | None:
        entry: SourceEntry | None = self.control.get(key)
        return None if self._due(entry) else entry


def _probe_failed(forum: Forum) -> str:
    """Where the failure of the Markdown probe's page is remembered (`CachePolicy.remember`, read back by its
    `remembered`, which knows a failure's TTL and the instances' clock skew)."""
    return keys.FAILED + keys.page(probe_url(MARKDOWN, forum))


def _read_by(entry: SourceEntry | None) -> Source:
    return MARKDOWN if entry is None else SOURCES.get(entry.source, MARKDOWN)
