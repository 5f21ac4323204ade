"""The front page's form as data: its values, the feed path they name, and forum URLs recognised into them.

Pure functions only. The form never builds an upstream URL itself: `feed_request` turns the values
into the same path and parameters a feed reader would send, and `spec.parse_feed_request` (the
service's one validation boundary) decides whether they name a feed.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from feedbridge.config import Settings
from feedbridge.feeds.filters import THRESHOLDS
from feedbridge.feeds.spec import CATEGORY_VALUE, DIGESTS, TOP_PERIODS, keyword_param, route_of, split_forum
from feedbridge.feeds.urls import NoFeed, feed_for_url
from feedbridge.render.formats import FORMATS

LISTS = ("latest", "top", "hot", "category", "tag", "started", "search", "filter", "posts", "topic", "user")
"""`started` is the topics a user started (`/u/NAME`); `filter` the forum's own `/filter?q=` list; the last
three are post feeds (feeds/post_feeds.py): the forum's latest posts, one topic's, one user's."""
TAG_MATCHES = ("any", "all")
VIEWS = ("", "top")  # a category's default view, or its top list (`/c/SLUG/ID/l/top`)
_IN_CATEGORY = ("latest", "started", "search", "posts")  # the lists that take `category=` (an id)
# Parameters the form passes to the feed as typed; spec.parse_feed_request checks them.
_PASSED = ("author", "q", "exclude_tag", "exclude_category", *THRESHOLDS, "exclude_pinned", "digest", "limit",
           "pages", "content")

# The feed routes' grammar (feeds/spec.py), without the format: a feed path back into form values.
_CATEGORY_VALUE = re.compile(CATEGORY_VALUE)
_TOPIC_VALUE = re.compile(r"(?:[\w-]{1,100}/)?\d{1,9}")
_TAG_SEPARATORS = re.compile(r"[\s,+]")


@dataclass(frozen=True, slots=True)
class FeedForm:
    """Everything the front page asks for, as strings exactly as typed (validation happens in spec)."""

    forum: str = ""  # a configured forum key
    list: str = "latest"  # one of LISTS
    category: str = ""  # "slug/id" up to three slugs deep, as in the category's feed path
    view: str = ""  # the category's: one of VIEWS
    tag: str = ""
    topic: str = ""  # the topic list: "slug/id" or "id", as in a topic's URL
    user: str = ""  # the started and user lists: whose topics, whose posts
    filter_query: str = ""  # the filter list: a Discourse /filter query, its `q=` (the keywords below are `q`)
    period: str = "all"  # top lists only
    in_category: str = ""  # latest, started, search, posts: stay inside this category (its id)
    author: str = ""  # comma-separated usernames
    q: str = ""
    tags: str = ""  # filter tags, separated by commas, spaces or +
    tag_match: str = "any"  # one of TAG_MATCHES
    exclude_tag: str = ""
    exclude_category: str = ""  # comma-separated category ids
    exclude_pinned: str = ""  # "1" leaves out pinned topics
    min_replies: str = ""
    max_replies: str = ""  # "0": the unanswered topics
    min_likes: str = ""
    min_views: str = ""
    digest: str = ""  # "" or a key of DIGESTS
    limit: str = ""
    pages: str = ""
    content: str = ""  # "" (the bridge's default), "excerpt" or "full"
    format: str = "atom"

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> FeedForm:
        values = {f.name: str(args.get(f.name, "")).strip() for f in fields(cls) if args.get(f.name)}
        form = cls(**values)
        return replace(
            form,
            list=form.list if form.list in LISTS else "latest",
            format=form.format if form.format in FORMATS else "atom",
            period=form.period if form.period in TOP_PERIODS else "all",
            view=form.view if form.view in VIEWS else "",
            tag_match=form.tag_match if form.tag_match in TAG_MATCHES else "any",
            digest=form.digest if form.digest in DIGESTS else "",
            content=form.content if form.content in ("excerpt", "full") else "",
        )

    def args(self) -> dict[str, Any]:
        """The front page's own query string for these values (defaults left out)."""
        default = FeedForm()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}

    def feed_request(self, fmt: str | None = None) -> tuple[str, dict[str, builtins.list[str]]]:
        """The feed's path (no leading slash) and query parameters, in the shape `parse_feed_request` takes."""
        fmt = fmt or self.format
        args: dict[str, list[str]] = {}
        top = self.list == "top" or (self.list == "category" and self.view == "top")
        if self.list == "category":
            name = f"c/{self.category.strip('/')}" + ("/l/top" if top else "")
        elif self.list == "tag":
            name = f"tag/{self.tag}"
        elif self.list == "topic":
            name = f"t/{self.topic.strip('/')}"
        elif self.list == "started":
            name = f"u/{self.user.strip().removeprefix('@')}"
        elif self.list == "user":
            name = f"u/{self.user.strip().removeprefix('@')}/posts"
        else:
            name = self.list
        if self.list == "filter":
            args["q"] = [self.filter_query]
        if top and self.period != "all":
            args["period"] = [self.period]
        if self.in_category and self.list in _IN_CATEGORY:
            args["category"] = [self.in_category]
        for key in _PASSED:
            if value := getattr(self, key):
                args[keyword_param(self.list) if key == "q" else key] = [value]
        if names := [t for t in _TAG_SEPARATORS.split(self.tags) if t]:
            args["tag"] = ["+".join(names) if self.tag_match == "all" else ",".join(names)]
        return f"{self.forum}/{name}.{fmt}", args

    @property
    def missing(self) -> str | None:
        """What the form still needs before it names a feed, as a sentence; None when complete."""
        if self.list == "category" and not _CATEGORY_VALUE.fullmatch(self.category.strip("/")):
            return "Choose a category (or paste its URL, e.g. https://forum/c/compiler/5)."
        if self.list == "tag" and not self.tag:
            return "Type a tag name."
        if self.list == "topic" and not _TOPIC_VALUE.fullmatch(self.topic.strip("/")):
            return "Paste the topic's URL (e.g. https://forum/t/some-topic/123), or type its id."
        if self.list in ("started", "user") and not self.user.strip():
            return "Type the user's name."
        if self.list == "search" and not self.q.strip():
            return "Type the keywords to search for."
        if self.list == "filter" and not self.filter_query.strip():
            return "Type a filter query, as on the forum's /filter page (e.g. status:open likes-min:5)."
        return None


@dataclass(frozen=True, slots=True)
class Recognised:
    form: FeedForm | None
    message: str  # what was recognised, or why nothing was


def recognise(settings: Settings, url: str, base: FeedForm = FeedForm()) -> Recognised:
    """Form values from any forum URL a user might paste, through the one converter of forum URLs into
    feeds (`feeds.urls.feed_for_url`): what the user already chose and the URL does not say (format,
    author, query, filters) is kept from `base`."""
    found = feed_for_url(settings, url)
    if isinstance(found, NoFeed):
        return Recognised(None, found.message)
    form = form_of_feed(found.path, found.args(), replace(base, forum=found.forum.key))
    return Recognised(form, found.what)


def form_of_feed(path: str, args: Mapping[str, Sequence[str]], base: FeedForm) -> FeedForm:
    """`base` with the list of the feed path `path` (after the forum's key, without format) and what its
    list-naming parameters (`period=`, `category=`, `q=` of a search or a filter, a list's `tag=`) say; the
    keywords are the feed's `q=`, or `keyword=` where `q=` is the forum's (`spec.KEYWORD_PARAMS`)."""
    form = replace(base, list="latest", category="", view="", tag="", topic="", user="", period="all",
                   in_category="", filter_query="")
    kind, parts = route_of(path) or ("list", {"list": "latest"})
    period = next(iter(args.get("period", [])), "all")
    period = period if period in TOP_PERIODS else "all"
    in_category = next(iter(args.get("category", [])), "")
    if q := next(iter(args.get(keyword_param(kind), [])), ""):
        form = replace(form, q=q)
    if tags := ",".join(args.get("tag", [])):
        form = replace(form, tags=tags, tag_match="all" if "+" in tags or " " in tags.strip() else "any")
    if kind == "list":
        form = replace(form, list=parts["list"], period=period if parts["list"] == "top" else "all")
    elif kind == "category":
        form = replace(form, list="category", category=f"{parts['slugs']}/{parts['id']}",
                       view="top" if parts["top"] else "", period=period if parts["top"] else "all")
    elif kind == "tag":
        form = replace(form, list="tag", tag=parts["tag"])  # `/tag/NAME.md` answers 301 to `/tag/NAME/ID.md`
    elif kind == "user":
        # the author too: the user's topics are the latest list's by that author where the forum refuses
        # the user's own list, and the field keeps them if the list is changed
        form = replace(form, list="started", user=parts["user"], author=parts["user"])
    elif kind == "topic_posts":
        form = replace(form, list="topic", topic=f"{parts['slug']}/{parts['topic']}" if parts["slug"]
                       else parts["topic"])
    elif kind == "user_posts":
        form = replace(form, list="user", user=parts["user"])
    elif kind == "filter":
        form = replace(form, list="filter", filter_query=next(iter(args.get("q", [])), ""))
    else:  # search, posts
        form = replace(form, list=kind)
    return replace(form, in_category=in_category if form.list in _IN_CATEGORY else "")


def form_from_path(path: str, args: Mapping[str, Sequence[str]], settings: Settings) -> FeedForm:
    """The form that builds the feed at `path` (a feed URL path without its leading slash)."""
    stem, _, fmt = path.rpartition(".")
    flat = {k: ",".join(v) for k, v in args.items() if v and k not in ("tag", "category", "period", "q", "keyword")}
    base = FeedForm.from_args({**flat, "format": fmt})
    found = split_forum(settings, stem)
    if found is None:
        return base
    forum, rest = found
    return form_of_feed(rest, args, replace(base, forum=forum.key))
