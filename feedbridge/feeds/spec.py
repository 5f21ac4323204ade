"""From a feed request (path and query string) to a `FeedSpec`: which forum list to read and how to
filter and render it.

This is the service's security boundary. Every piece of an upstream URL comes from a strict pattern
match here and is percent-quoted again when the URL is built; the forum comes from configuration, never
from the request. No request text can change which host is fetched, or reach `..`, `//`, `@` or `\\`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, overload
from urllib.parse import quote, urlencode

from feedbridge.config import Forum, Settings
from feedbridge.errors import RequestError, RouteNotFound
from feedbridge.feeds.filters import MAX_LIMIT, FeedFilter, make_filter
from feedbridge.feeds.sources import MARKDOWN, Source, user_list_url
from feedbridge.render.formats import FORMATS

# Every feed also exists as a web page (`.html`): browsers are dropping XSLT, so this is the durable view.
TOP_PERIODS = ("all", "yearly", "quarterly", "monthly", "weekly", "daily")
MAX_PARAM_CHARS = 1000

RouteKind = Literal["list", "category", "tag", "user", "search"]

# The route grammar: each kind of forum list as a path pattern, read by the feed routes below and by the
# front page's URL recogniser (web/feedform.py), which matches the same shapes in forum URLs.
SLUG = r"[\w-]{1,100}"
CATEGORY_VALUE = rf"(?P<slugs>{SLUG}(?:/{SLUG})?)/(?P<id>\d{{1,9}})"  # "slug/id" or "parent/slug/id"
ROUTES: dict[RouteKind, str] = {
    "list": r"(?P<list>latest|top|hot)",
    "category": f"c/{CATEGORY_VALUE}",
    "tag": rf"tag/(?P<tag>{SLUG})(?:/(?P<id>\d{{1,9}}))?",
    "user": r"u/(?P<user>[\w.-]{1,60}?)",  # lazy: a username may contain dots, the format follows one
    "search": r"search",
}
# A user name can end in what looks like a format, so the user route takes only the real ones.
_FEED_ROUTES: tuple[tuple[RouteKind, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(rf"{pattern}\.(?P<fmt>{'|'.join(FORMATS) if kind == 'user' else '[a-z]{2,5}'})"))
    for kind, pattern in ROUTES.items()
)


@dataclass(frozen=True, slots=True)
class FeedSpec:
    forum: Forum
    kind: RouteKind
    label: str
    list_path: str
    list_params: tuple[tuple[str, str], ...]
    html_path: str
    fmt: str
    filter: FeedFilter
    pages: int
    content: str = "excerpt"
    user: str | None = None  # the /u/USER feeds' user, as typed in the path

    def page_url(self, page: int, source: Source = MARKDOWN) -> str:
        """Page `page` (0 first) of the list, as `source` names it. The Markdown URL is also the feed's
        id where no self URL is known, so it does not change with the forum's source."""
        return source.list_url(self.forum.base_url, self.list_path, self.list_params, page)

    def user_list_url(self, page: int) -> str | None:
        """A user feed's own list (`/topics/created-by/USER.json`); None for every other kind of feed."""
        return None if self.user is None else user_list_url(self.forum.base_url, self.user, page)

    @property
    def category_id(self) -> int | None:
        """The `category=` of a latest or user feed, which a user's own list has to filter itself."""
        return next((int(v) for k, v in self.list_params if k == "category"), None)

    @property
    def html_url(self) -> str:
        return self.forum.base_url + self.html_path

    @property
    def title(self) -> str:
        described = self.filter.describe()
        return f"{self.forum.key} · {self.label}" + (f" · {described}" if described else "")

    def canonical_query(self) -> list[tuple[str, str]]:
        """The query string that names this feed: sorted and normalised, so equal feeds share one key."""
        params: list[tuple[str, str]] = [(k, v) for k, v in self.list_params if k != "category" or self.kind != "user"]
        params += [("author", a) for a in sorted(self.filter.authors) if self.kind != "user"]
        if self.filter.query is not None:
            params.append(("q", str(self.filter.query)))
        params += [("tag", t) for t in sorted(self.filter.tags)]
        if self.filter.limit is not None:
            params.append(("limit", str(self.filter.limit)))
        if self.pages != 1:
            params.append(("pages", str(self.pages)))
        if self.content != "excerpt":
            params.append(("content", self.content))
        return sorted(set(params))

    def cache_key(self) -> str:
        """What names this feed's content: equal specs give equal keys (the query is canonical)."""
        name = (f"{self.forum.base_url}|{self.kind}|{self.list_path}|{self.list_params}|{self.fmt}|"
                f"{self.canonical_query()}" + (f"|{self.user}" if self.user is not None else ""))
        return hashlib.sha256(name.encode()).hexdigest()[:32]


def parse_feed_request(settings: Settings, path: str, args: Mapping[str, Sequence[str]]) -> FeedSpec:
    """`path` is the request path without its leading slash; `args` maps each parameter to its values."""
    found = split_forum(settings, path)
    if found is None:
        raise RouteNotFound(f"unknown forum {_shorten(path.split('/', 1)[0])!r}: this bridge serves "
                            + ", ".join(f.key for f in settings.forums))
    forum, rest = found
    for name, pattern in _FEED_ROUTES:  # noqa: B007 (the match and its name are used after the loop)
        match = pattern.fullmatch(rest)
        if match:
            break
    else:
        raise RouteNotFound(f"no feed route matches /{_shorten(rest)} on {forum.key}")
    parts = match.groupdict()
    fmt = parts["fmt"]
    if fmt not in FORMATS:
        raise RouteNotFound(f"unknown feed format {fmt!r}: use one of {', '.join(FORMATS)}")
    values = _checked_args(args)
    pages = _int_arg(values, "pages", settings.pages_default, 1, settings.pages_max)
    content = _one(values, "content") or settings.content_default
    if content not in ("excerpt", "full"):
        raise RequestError(f"content must be 'excerpt' or 'full', not {content!r}")
    authors = [a for value in values.get("author", []) for a in value.split(",") if a.strip()]
    list_params: tuple[tuple[str, str], ...] = ()

    if name == "list":
        list_path = html_path = "/" + parts["list"]
        label = parts["list"]
        if parts["list"] == "top":
            period = _one(values, "period") or "all"
            if period not in TOP_PERIODS:
                raise RequestError(f"period must be one of {', '.join(TOP_PERIODS)}, not {_shorten(period)!r}")
            list_params = (("period", period),)
            label = f"top ({period})"
        elif parts["list"] == "latest" and "category" in values:
            list_params = (("category", str(_int_arg(values, "category", 0, 1, 10**9))),)
    elif name == "category":
        slugs = [quote(s) for s in parts["slugs"].split("/")]
        list_path = html_path = f"/c/{'/'.join(slugs)}/{parts['id']}"
        label = parts["slugs"].replace("/", " / ")
    elif name == "tag":
        tag = quote(parts["tag"])
        list_path = html_path = f"/tag/{tag}" + (f"/{parts['id']}" if parts["id"] else "")
        label = f"tag {parts['tag']}"
    else:
        list_path = "/latest"
        if "category" in values:
            list_params = (("category", str(_int_arg(values, "category", 0, 1, 10**9))),)
        if name == "user":
            authors = [parts["user"]]
            html_path = f"/u/{quote(parts['user'])}/activity/topics"
            label = f"topics by {parts['user']}"
        else:
            if not _one(values, "q"):
                raise RequestError("q is required on /search: give a keyword query, e.g. ?q=inductor")
            html_path = "/search?" + urlencode({"q": _one(values, "q")})
            label = "search"

    feed_filter = make_filter(
        authors=authors,
        query=_one(values, "q"),
        limit=_int_arg(values, "limit", None, 1, MAX_LIMIT),
        tags=values.get("tag", []),
    )
    return FeedSpec(forum, name, label, list_path, list_params, html_path, fmt, feed_filter, pages, content,
                    parts["user"] if name == "user" else None)


def split_forum(settings: Settings, path: str) -> tuple[Forum, str] | None:
    """The forum whose key prefixes `path` (`key/...`) and the rest after `key/`: the longest key wins, so
    subfolder forums on one host coexist. The one forum lookup for feed paths and pasted forum URLs."""
    for forum in sorted(settings.forums, key=lambda f: len(f.key), reverse=True):
        if path.startswith(forum.key + "/"):
            return forum, path[len(forum.key) + 1 :]
    return None


_SINGLE = ("q", "limit", "pages", "period", "category", "content")


def _checked_args(args: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for key, items in args.items():
        items = list(items)
        for item in items:
            if len(item) > MAX_PARAM_CHARS:
                raise RequestError(f"{key} is longer than {MAX_PARAM_CHARS} characters")
            if any(ord(c) < 32 or ord(c) == 127 for c in item):
                raise RequestError(f"{key} contains control characters")
        if key in _SINGLE and len(items) > 1:
            raise RequestError(f"{key} was given {len(items)} times; give it once")
        values[key] = items
    return values


def _one(values: Mapping[str, list[str]], key: str) -> str | None:
    items = values.get(key)
    return items[0].strip() if items else None


@overload
def _int_arg(values: Mapping[str, list[str]], key: str, default: int, low: int, high: int) -> int: ...
@overload
def _int_arg(values: Mapping[str, list[str]], key: str, default: None, low: int, high: int) -> int | None: ...
def _int_arg(values: Mapping[str, list[str]], key: str, default: int | None, low: int, high: int) -> int | None:
    raw = _one(values, key)
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or not low <= int(raw) <= high:
        raise RequestError(f"{key} must be a whole number from {low} to {high}, not {_shorten(raw)!r}")
    return int(raw)


def _shorten(text: str, size: int = 80) -> str:
    return text if len(text) <= size else text[:size] + "…"
