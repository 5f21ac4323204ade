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
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from feedbridge.config import Settings
from feedbridge.feeds.spec import CATEGORY_VALUE, DIGESTS, ROUTES, TOP_PERIODS, split_forum
from feedbridge.render.formats import FORMATS

LISTS = ("latest", "top", "hot", "category", "tag", "posts", "topic", "user")
"""The last three are post feeds (feeds/posts.py): the forum's latest posts, one topic's, one user's."""
TAG_MATCHES = ("any", "all")
THRESHOLDS = ("min_replies", "min_likes", "min_views")

# The feed routes' grammar (feeds/spec.py), with what forum URLs add: a category's `/l/top` view, a
# user's `/activity/...` pages, and `/top/PERIOD`.
_CATEGORY = re.compile(ROUTES["category"] + r"(?:/l/\w+)?")
_CATEGORY_VALUE = re.compile(CATEGORY_VALUE)
_TAG = re.compile(ROUTES["tag"])
_USER = re.compile(r"(?:topics/created-by/|u/)" + ROUTES["user"].removeprefix("u/") + r"(?:/.*)?")
# A topic's page, maybe at one post (`/t/slug/ID/NUMBER`), and a user's posts or replies.
_TOPIC = re.compile(r"t/(?:(?P<slug>[\w-]{1,100})/)?(?P<topic>\d{1,9})(?:/\d{1,9})?")
_TOPIC_VALUE = re.compile(r"(?:[\w-]{1,100}/)?\d{1,9}")
_USER_POSTS = re.compile(ROUTES["user_posts"].removesuffix("/posts") + r"/(?:posts|activity/replies)")
_TOP = re.compile(r"top(?:/(?P<period>\w+))?")
_SUFFIX = re.compile(r"\.(?:md|json|rss)$")
_TAG_SEPARATORS = re.compile(r"[\s,+]")
_INTERSECTION = re.compile(r"tags/intersection/(?P<tags>[\w/-]{1,600})")


@dataclass(frozen=True, slots=True)
class FeedForm:
    """Everything the front page asks for, as strings exactly as typed (validation happens in spec)."""

    forum: str = ""  # a configured forum key
    list: str = "latest"  # one of LISTS
    category: str = ""  # "slug/id" or "parent/slug/id", as in the category's feed path
    tag: str = ""
    topic: str = ""  # the topic list: "slug/id" or "id", as in a topic's URL
    user: str = ""  # the user list: whose posts
    period: str = "all"  # top only
    author: str = ""  # comma-separated usernames
    q: str = ""
    tags: str = ""  # filter tags, separated by commas, spaces or +
    tag_match: str = "any"  # one of TAG_MATCHES
    exclude_tag: str = ""
    min_replies: str = ""
    min_likes: str = ""
    min_views: str = ""
    digest: str = ""  # "" or a key of DIGESTS
    pages: str = ""
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
            tag_match=form.tag_match if form.tag_match in TAG_MATCHES else "any",
            digest=form.digest if form.digest in DIGESTS else "",
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
        if self.list == "category":
            name = f"c/{self.category.strip('/')}"
        elif self.list == "tag":
            name = f"tag/{self.tag}"
        elif self.list == "topic":
            name = f"t/{self.topic.strip('/')}"
        elif self.list == "user":
            name = f"u/{self.user.strip().removeprefix('@')}/posts"
        else:
            name = self.list
            if self.list == "top" and self.period != "all":
                args["period"] = [self.period]
        for key in ("author", "q", "exclude_tag", *THRESHOLDS, "digest", "pages"):
            if value := getattr(self, key):
                args[key] = [value]
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
        if self.list == "user" and not self.user.strip():
            return "Type the user's name."
        return None


@dataclass(frozen=True, slots=True)
class Recognised:
    form: FeedForm | None
    message: str  # what was recognised, or why nothing was


def recognise(settings: Settings, url: str, base: FeedForm = FeedForm()) -> Recognised:
    """Form values from any forum URL a user might paste: a category, tag, list, user or search page.

    `.md`/`.json`/`.rss` suffixes (a JSON list's URL, `/topics/created-by/USER.json` too), `?page=`,
    trailing slashes and a missing scheme are all accepted;
    what the user already chose and the URL does not say (format, author, query) is kept from `base`.
    """
    text = url.strip()
    if not text:
        return Recognised(None, "Paste the address of a forum page.")
    try:
        parts = urlsplit(text if "://" in text else "https://" + text)
    except ValueError:  # a host that NFKC-normalises to '/' or '?' ('．．／'), a broken IPv6 literal
        return Recognised(None, f"{text[:80]} is not a web address.")
    host = (parts.netloc or "").lower()
    path = unquote(parts.path)
    found = split_forum(settings, f"{host}{path}/")
    if found is None:
        served = ", ".join(f.key for f in settings.forums)
        return Recognised(None, f"{host or text[:80]} is not a forum this bridge serves (it serves {served}).")
    forum, rest = found[0], _SUFFIX.sub("", found[1].strip("/"))
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    form = replace(base, forum=forum.key, list="latest", category="", tag="", topic="", user="", period="all")
    if rest in ("", "latest", "new", "categories"):
        return Recognised(form, f"Latest topics on {forum.key}.")
    if rest == "posts":
        return Recognised(replace(form, list="posts"), f"Latest posts on {forum.key}.")
    if rest == "hot":
        return Recognised(replace(form, list="hot"), f"Hot topics on {forum.key}.")
    if match := _TOP.fullmatch(rest):
        period = match["period"] or query.get("period", "all")
        period = period if period in TOP_PERIODS else "all"
        return Recognised(replace(form, list="top", period=period), f"Top topics ({period}) on {forum.key}.")
    if match := _CATEGORY.fullmatch(rest):
        category = f"{match['slugs']}/{match['id']}"
        return Recognised(replace(form, list="category", category=category), f"Category {match['slugs']}.")
    if match := _TAG.fullmatch(rest):
        return Recognised(replace(form, list="tag", tag=match["tag"]), f"Tag {match['tag']}.")
    if match := _INTERSECTION.fullmatch(rest):
        both = "+".join(match["tags"].strip("/").split("/"))
        return Recognised(replace(form, list="tag", tag=both), f"Topics tagged {both.replace('+', ' and ')}.")
    if match := _USER_POSTS.fullmatch(rest):
        return Recognised(replace(form, list="user", user=match["user"]), f"Posts by {match['user']}.")
    if match := _USER.fullmatch(rest):
        return Recognised(replace(form, author=match["user"]), f"Topics by {match['user']}.")
    if rest == "search" and query.get("q"):
        return Recognised(replace(form, q=query["q"]), "Latest topics matching the search.")
    if match := _TOPIC.fullmatch(rest):
        topic = f"{match['slug']}/{match['topic']}" if match["slug"] else match["topic"]
        return Recognised(replace(form, list="topic", topic=topic), f"The posts of topic {match['topic']}.")
    return Recognised(None, f"The bridge does not recognise /{rest[:80]} on {forum.key}: paste a category, "
                            "tag, latest, top, topic or user URL.")


def form_from_path(path: str, args: Mapping[str, Sequence[str]], settings: Settings) -> FeedForm:
    """The form that builds the feed at `path` (a feed URL path without its leading slash)."""
    stem, _, fmt = path.rpartition(".")
    flat = {k: v[0] for k, v in args.items() if v}
    # The feed's `tag=` (a filter) is the form's `tags`; the form's own `tag` is the tag list's.
    tags = ",".join(args.get("tag", []))
    every = "+" in tags or " " in tags.strip()
    flat.pop("tag", None)
    base = FeedForm.from_args({**flat, "format": fmt, "tags": tags, "tag_match": "all" if every else "any"})
    found = split_forum(settings, stem)
    if found is None:
        return base
    forum, rest = found
    recognised = recognise(settings, f"{forum.base_url}/{rest}?{urlencode(flat)}", base)
    return recognised.form or base
