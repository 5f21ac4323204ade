"""From a feed request (path and query string) to a `FeedSpec`: which forum list to read, how to filter and
render it, and what the feed says of itself (its title, description and id: `FeedSpec.head`).

This is the service's security boundary. Every piece of an upstream URL comes from a strict pattern
match here and is percent-quoted again when the URL is built; the forum comes from configuration, never
from the request. No request text can change which host is fetched, or reach `..`, `//`, `@` or `\\`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote, unquote, urlencode

from feedbridge.config import Forum, Settings
from feedbridge.discourse.filter_query import FilterQuery, parse_filter_query
from feedbridge.errors import FeedMoved, RequestError, RouteNotFound
from feedbridge.feeds.request import params
from feedbridge.feeds.request.params import DIGESTS, FeedKind, Marked, fullmatch, reaches_back, shorten
from feedbridge.feeds.select.filters import FeedFilter, make_filter, tag_key
from feedbridge.feeds.sources.dialects import JSON, MARKDOWN, user_list_url
from feedbridge.models import Listing, Site
from feedbridge.render.formats import FORMATS
from feedbridge.render.meta import FeedMeta

# Every feed also exists as a web page (`.html`): browsers are dropping XSLT, so this is the durable view.
MAX_INTERSECTION = 5

RouteKind = Literal["list", "category", "tag", "user_topics", "filter", "topic_posts", "posts", "user_posts",
                    "personal"]
"""`personal`: a member's own list, read with their key only (feeds/members/personal.py, which builds its specs)."""
POST_KINDS: tuple[RouteKind, ...] = ("topic_posts", "posts", "user_posts")
"""Feeds of posts rather than topics (feeds/sources/post_feeds.py); the parameters they take: `params.POSTS`."""
KEYWORD_PARAMS: dict[str, str] = dict.fromkeys(params.NAMED["keyword"].feeds, "keyword")
"""The bridge's keyword filter is `q=` on every feed but these, whose `q=` is the forum's own query (a
`/filter` feed's is its Discourse filter query, as on the forum's `/filter?q=` page, so a pasted URL keeps
its meaning): there it is `keyword=` (the table's rows of `q` and `keyword`). One name per feed:
`keyword=` elsewhere is a 400 saying so."""

# The route grammar: each kind of forum list as a path pattern, read by the feed routes below and by the
# front page's form (web/feedform.py), which turns a feed path back into its values; forum URLs become feed
# paths in feeds/request/urls.py.
SLUG = r"[\w-]{1,100}"
# "slug/id", "parent/slug/id" or "grandparent/parent/slug/id": core nests categories at most three deep
# (max_category_nesting, config/site_settings.yml). A slug holds no "/", so each optional level is decided
# by the next "/" alone.
CATEGORY_VALUE = rf"(?P<slugs>{SLUG}(?:/{SLUG})?(?:/{SLUG})?)/(?P<id>[0-9]{{1,9}})"
_ONE_SLUG = re.compile(SLUG)
_SLUGS_ALONE = re.compile(rf"c/({SLUG}(?:/{SLUG})?(?:/{SLUG})?)\.\w{{1,5}}")  # `/c/compiler.atom`: no number
ROUTES: dict[RouteKind, str] = {
    "list": r"(?P<list>latest|top|hot)",
    # core: config/routes.rb, scope "c/*category_slug_path_with_id": "/" (its default view) and "/l/top"
    "category": f"c/{CATEGORY_VALUE}(?P<top>/l/top)?",
    # One tag, or an intersection `a+b` (each part a SLUG, checked after the match: no nested quantifier).
    "tag": rf"tag/(?P<tag>[\w+-]{{1,{101 * MAX_INTERSECTION}}})(?:/(?P<id>[0-9]{{1,9}}))?",
    # Lazy: a username may contain dots, and the format follows one. It begins with a letter, digit or `_`
    # (core's UsernameValidator): `/u/..` is no user, but a dot segment a link to it would climb out of.
    "user_topics": r"u/(?P<user>\w[\w.-]{0,59}?)",
    "filter": r"filter",  # core: config/routes.rb `get "filter" => "list#filter"`; the query is `q=`
    "topic_posts": rf"t/(?:(?P<slug>{SLUG})/)?(?P<topic>[0-9]{{1,9}})",
    "posts": r"posts",
    "user_posts": r"u/(?P<user>\w[\w.-]{0,59})/posts",
}
_PATHS = tuple((kind, re.compile(pattern)) for kind, pattern in ROUTES.items())
# A user name can end in what looks like a format, so the user's topics route takes only the real ones.
_FEED_ROUTES: tuple[tuple[RouteKind, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(rf"{pattern}\.(?P<fmt>{'|'.join(FORMATS) if kind == 'user_topics' else '[a-z]{2,5}'})"))
    for kind, pattern in ROUTES.items()
)


@dataclass(frozen=True, slots=True)
class Moved:
    """A feed path that is gone (a key of `MOVED`): the path whose feed, with the same query, is what it gave,
    the parameter it required, and why it went."""

    to: str
    needs: str
    why: str


MOVED: dict[str, Moved] = {
    "search": Moved("latest", "q", "it was never the forum's search, but the latest list filtered by the bridge's "
                    "keyword query, with the same parameters"),
}
"""The feed paths (after the forum's key, without format) that named a feed once: asked for, each is a
`FeedMoved` (the web routes answer it 301, `web/routes.py`), so one feed has one path."""


@dataclass(frozen=True, slots=True)
class FeedSpec:
    forum: Forum
    kind: RouteKind
    feed: FeedKind  # the kind as the parameter table knows it: a list's and a category's views apart
    label: str
    list_path: str
    list_params: tuple[tuple[str, str], ...]
    html_path: str
    fmt: str
    filter: FeedFilter
    pages: int
    content: str = "excerpt"
    started_by: str | None = None  # the /u/USER feed's user, whose topics it holds, as typed in the path
    digest: str | None = None  # a key of DIGESTS: one entry per period (feeds/select/digest.py)
    digest_limit: int = 0  # the periods a digest shows (its `limit=`; the filter then has no limit)
    intersection: tuple[str, ...] = ()  # /tag/a+b: the tags, as quoted path segments, first tag first
    topic_id: int | None = None  # the /t/ID posts feed's topic
    poster: str | None = None  # the /u/USER/posts feed's user, as typed in the path
    forum_query: FilterQuery | None = None  # the /filter feed's query (also its `q=` in `list_params`)
    owner: str | None = None  # a member's own list's member (`feeds.members.personal`)
    ranked: bool = False  # the list is in an order of the forum's other than newest activity first (`KindSpec`)

    @property
    def list_id(self) -> str:
        """The forum's Markdown URL of the feed's own list (`/c/compiler/5.md`; a tag intersection's and a user's
        topics', not the lists they read; a member's with their name): the feed's id where no self URL is known,
        whichever source reads it. Feeds with one id had readers merge their different entries."""
        path = ("/tags/intersection/" + "/".join(self.intersection) if self.intersection else self.list_path
                if self.started_by is None else f"/topics/created-by/{quote(self.started_by)}")
        listed = MARKDOWN.list_url(self.forum.base_url, path, self.list_params)
        return listed if self.owner is None else f"{listed}{'&' if '?' in listed else '?'}member={quote(self.owner)}"

    def user_list_url(self, page: int) -> str | None:
        """A user's topics feed's own list (`/topics/created-by/USER.json`); None for every other kind of feed."""
        return None if self.started_by is None else user_list_url(self.forum.base_url, self.started_by, page,
                                                                  self.category_id)

    def intersection_url(self, page: int) -> str:
        """Discourse's own list of topics with every tag of a `/tag/a+b` feed: JSON only, on every release."""
        return JSON.list_url(self.forum.base_url, "/tags/intersection/" + "/".join(self.intersection), (), page)

    @property
    def digest_id(self) -> str:
        """What a digest's entry ids start with: the feed's id without its `limit=` and `max_age=`, so it is the
        same in every format, from every host the bridge answers to, however many periods are shown (both only
        choose how many whole periods: `feeds/select/digest.py`)."""
        query = urlencode([(k, v) for k, v in self.canonical_query() if k not in ("limit", "max_age")])
        return self.list_id + f"#{query}"

    @property
    def category_id(self) -> int | None:
        """The `category=` of a latest, user's topics or posts feed: the forum's lists take it (subcategories
        included), `/posts` has to filter itself."""
        return next((int(v) for k, v in self.list_params if k == "category"), None)

    @property
    def html_url(self) -> str:
        return self.forum.base_url + self.html_path

    @property
    def missing(self) -> str | None:
        """What the forum's 404 for the list's first page means when it is not "missing, or private"
        (`errors.explained`): the list's route itself is absent. Only `/filter` has one, a late addition to
        core: a release from before it answers 404 to `/filter.json`, whatever the query."""
        if self.forum_query is None:
            return None
        return ("the forum has no /filter (Discourse's filtered topic list): its /filter.json answered 404, as a "
                "Discourse release from before /filter does")

    @property
    def keyword(self) -> str:
        """The name of this feed's keyword filter parameter (`KEYWORD_PARAMS`)."""
        return keyword_param(self.kind)

    @property
    def title(self) -> str:
        described = " · ".join(filter(None, (self.filter.describe(self.keyword),
                                             f"{self.digest} digest" if self.digest else "")))
        return f"{self.forum.key} · {self.label}" + (f" · {described}" if described else "")

    def canonical_query(self) -> list[tuple[str, str]]:
        """The query string that names this feed: sorted and normalised, so equal feeds share one key. What
        the filter holds is named as the filter normalised it, for each parameter this feed takes."""
        query: list[tuple[str, str]] = list(self.list_params)  # a user's topics' category= too: it changes what is read
        for param in params.HELD[self.feed]:
            query += [(param.name, value) for value in _canonical(getattr(self.filter, param.filter_field))]
        if self.filter.query is not None:
            query.append((self.keyword, str(self.filter.query)))
        query += [("tag", t) for t in sorted(self.filter.tags)]
        if own := self.filter.tags_all - {tag_key(unquote(t)) for t in self.intersection}:
            query.append(("tag", "+".join(sorted(own))))
        if self.digest is not None:
            query.append(("digest", self.digest))
        limit = self.filter.limit if self.digest is None else self.digest_limit
        if limit is not None and (self.digest is None or limit != DIGESTS[self.digest]):
            query.append(("limit", str(limit)))
        if self.pages != 1:
            query.append(("pages", str(self.pages)))
        if self.content != "excerpt":
            query.append(("content", self.content))
        return sorted(set(query))

    def cache_key(self) -> str:
        """What names this feed's content: equal specs give equal keys (the query is canonical)."""
        name = (f"{self.forum.base_url}|{self.kind}|{self.list_path}|{self.list_params}|{self.fmt}|"
                f"{self.canonical_query()}" + (f"|{self.started_by}" if self.started_by is not None else ""))
        return name

    def feed_title(self, first: Listing) -> str:
        """What a reader lists the feed as. A post feed's request names a topic by its number and a user as
        typed ("posts of topic 35"); once read, the forum has named them (the topic's title from its head, the
        user as the forum spells them, which `feeds.sources.post_feeds` puts in the listing's title), and that
        name is the title, with the filters after it as for every feed. Where the forum named nothing, the
        request's label."""
        if self.kind in POST_KINDS and first.title.strip() and first.title != self.label:
            return replace(self, label=first.title).title
        return self.title

    def description(self, first: Listing, title: str) -> str:
        """Where the topics came from, in the request's words (a Markdown category list's heading is "Latest", a
        JSON list has none); for a user's topics feed, whether it is complete. `title`: `feed_title`'s."""
        if self.kind in POST_KINDS:
            return f"{title}, newest first: {self.label} on {self.forum.key}"
        if self.started_by is None:
            return f"{title}, from {self.label} on {self.forum.key}"
        if first.started_by is not None:
            return f"{title}: every topic they started, from their own topic list on {self.forum.key}"
        return (f"{title}: only those among the latest topics of {self.forum.key} ({self.pages} page(s)), "
                "because the forum refused their own topic list")

    def head(self, first: Listing, self_url: str | None, stylesheet_url: str | None, updated: datetime, *,
             built: datetime, site: Site | None = None, ttl: int | None = None) -> FeedMeta:
        """What the feed says of itself, whichever way it is made (the server, the static build, `feedbridge
        build` of a URL or of a saved list), for the renderers (`render.formats.render`). Without a self URL
        the id is the list's Markdown URL with the canonical query as its fragment, so filtered feeds of one
        list still have ids of their own. A digest's id is `digest_id`, the start of its entries' ids: one
        feed whatever host, format or `limit=` reads it. `updated` is the feed's date when no entry has one;
        `built` when the feed is built (no later date is the feed's own, `render.meta.newest_believed`); `site` how the
        forum presents itself (its icon, logo and language), `ttl` the seconds a copy is
        served before the forum is asked again."""
        query = urlencode(self.canonical_query())
        title = self.feed_title(first)
        return FeedMeta(
            title=title,
            forum_url=self.forum.base_url,
            html_url=self.html_url,
            feed_id=self.digest_id if self.digest else self_url or self.list_id + (f"#{query}" if query else ""),
            self_url=self_url,
            description=self.description(first, title),
            stylesheet_url=stylesheet_url,
            updated=updated,
            site=site,
            ttl=ttl,
            built=built,
        )


@dataclass(frozen=True, slots=True)
class Given:
    """A feed request's parameters as the table read them (`params.parse`), read here by their types: the
    table's reading and the spec's use of it meet in this one value (which the filter holds: `params.HELD`)."""

    feed: FeedKind
    values: Mapping[str, Any]

    def whole(self, name: str) -> int | None:
        value = self.values.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def text(self, name: str) -> str | None:
        value = self.values.get(name)
        return value if isinstance(value, str) else None

    def defaulted(self, name: str) -> Any:
        """A parameter whose row has a default (`Param.default_for`): present on every feed that takes it."""
        return self.values[name]

    def tags(self, name: str) -> tuple[list[str], list[str]]:
        """A `tags` parameter: the tags any of which a topic must have, and those all of which."""
        value = self.values.get(name)
        return value if isinstance(value, tuple) else ([], [])

    def filtered(self) -> dict[str, Any]:
        """What the filter holds, by its `FeedFilter` field (`Param.filter_field`), for `make_filter`."""
        return {p.filter_field: self.values[p.name] for p in params.HELD[self.feed] if p.name in self.values}


def parse_feed_request(settings: Settings, path: str, args: Mapping[str, Sequence[str]]) -> FeedSpec:
    """`path` is the request path without its leading slash; `args` maps each parameter to its values, which
    the parameter table reads (`params.parse`: a parameter the feed does not take is refused by name)."""
    found = split_forum(settings, path)
    if found is None:
        raise RouteNotFound(f"unknown forum {shorten(path.split('/', 1)[0])!r}: this bridge serves "
                            + ", ".join(f.key for f in settings.forums))
    forum, rest = found

    def unmatched() -> str:  # what a path no route matches is told: made only for one
        return f"no feed route matches /{shorten(rest)} on {forum.key}"

    for name, pattern in _FEED_ROUTES:  # noqa: B007 (the match and its name are used after the loop)
        match = _fullmatch(pattern, rest)
        if match:
            break
    else:
        message = unmatched()
        if (slugs := _SLUGS_ALONE.fullmatch(rest)) and not any(s.isdigit() for s in slugs[1].split("/")):
            message += f": a category's feed ends in its number, /c/{shorten(slugs[1])}/ID, as its forum address does"
        raise _moved(rest) or RouteNotFound(message)
    parts = match.groupdict()
    fmt = parts["fmt"]
    if fmt not in FORMATS:
        raise RouteNotFound(f"unknown feed format {fmt!r}: use one of {', '.join(FORMATS)}")
    feed = feed_kind(name, parts)
    given = Given(feed, params.parse(settings, feed, args))
    own = KINDS[name](parts, given, unmatched)
    held = given.filtered()
    if own.authors is not None:
        held["authors"] = own.authors
    digest = given.text("digest")
    limit = given.whole("limit")
    any_tags, given_all = given.tags("tag")
    keyword = keyword_param(name)
    feed_filter = make_filter(query=given.text(keyword), limit=limit if digest is None else None, tags=any_tags,
                              tags_all=[*own.tags_all, *given_all], keyword=keyword, **held)
    if "pages" in args and not reaches_back(feed, feed_filter):
        raise RequestError("pages= on a topic's posts reads further back for a filter to match (author=, "
                           "exclude_author=, q=, max_age=); without one the feed is its newest limit= posts", "pages")
    return FeedSpec(forum, name, feed, own.label, own.list_path, own.list_params, own.html_path, fmt, feed_filter,
                    given.defaulted("pages"), given.values.get("content", "excerpt"),  # none: posts carry their HTML
                    own.started_by, digest, (limit or DIGESTS[digest]) if digest is not None else 0, own.intersection,
                    own.topic_id, own.poster, own.forum_query, ranked=own.ranked)


def _moved(rest: str) -> FeedMoved | None:
    """The `FeedMoved` of `rest` (the path after the forum's key) when its feed moved (`MOVED`)."""
    name, dot, fmt = rest.partition(".")
    if not dot or (moved := MOVED.get(name)) is None:
        return None
    return FeedMoved(f"/{name} is /{moved.to} with the same {moved.needs}= now: {moved.why}", rest,
                     f"{moved.to}.{fmt}", moved.needs)


def feed_kind(kind: RouteKind, parts: Mapping[str, Any]) -> FeedKind:
    """The kind of feed as the parameter table knows it, from its route's kind and the parts it matched."""
    if kind == "list":
        return _LIST_FEEDS[parts["list"]]
    if kind == "category" and parts.get("top"):
        return "category_top"
    return _SAME_FEEDS[kind]


_LIST_FEEDS: dict[str, FeedKind] = {"latest": "latest", "top": "top", "hot": "hot"}
_SAME_FEEDS: dict[RouteKind, FeedKind] = {
    "category": "category", "tag": "tag", "user_topics": "user_topics", "filter": "filter",
    "topic_posts": "topic_posts", "posts": "posts", "user_posts": "user_posts"}


@dataclass(frozen=True, slots=True)
class KindSpec:
    """The part of a `FeedSpec` one route kind decides: the list and page it reads, its label, and the
    fields only that kind has (`FeedSpec` says what each means)."""

    list_path: str
    html_path: str
    label: str
    list_params: tuple[tuple[str, str], ...] = ()
    authors: tuple[str, ...] | None = None  # the path's user, in place of `author=` (None: `author=`)
    tags_all: tuple[str, ...] = ()  # the path's tags, added to `tag=a+b`'s
    intersection: tuple[str, ...] = ()
    forum_query: FilterQuery | None = None
    topic_id: int | None = None
    started_by: str | None = None
    poster: str | None = None
    ranked: bool = False  # a score's order (top, hot) or a `/filter` query's `order:` (likes, views, created...)


KindBuilder = Callable[[Mapping[str, Any], Given, Callable[[], str]], KindSpec]
"""A route kind's part of its spec, from the parts its route's match names, the parameters as the table read
them, and what a path the route lets through but the kind refuses is told (`no feed route matches`, made then)."""


def _list(parts: Mapping[str, Any], given: Given, unmatched: Callable[[], str]) -> KindSpec:
    name = parts["list"]
    if name == "top":
        period = given.defaulted("period")
        return KindSpec(f"/{name}", f"/{name}", f"top ({period})", (("period", period),), ranked=True)
    return KindSpec(f"/{name}", f"/{name}", name, _category(given), ranked=name == "hot")


def _category_list(parts: Mapping[str, Any], given: Given, unmatched: Callable[[], str]) -> KindSpec:
    path = "/c/" + "/".join(quote(s) for s in parts["slugs"].split("/")) + f"/{parts['id']}"
    label = parts["slugs"].replace("/", " / ")
    if not parts["top"]:
        return KindSpec(path, path, label)
    period = given.defaulted("period")
    return KindSpec(path + "/l/top", path + "/l/top", f"{label} · top ({period})", (("period", period),), ranked=True)


def _tag_list(parts: Mapping[str, Any], given: Given, unmatched: Callable[[], str]) -> KindSpec:
    names = parts["tag"].split("+")
    if len(names) > MAX_INTERSECTION or not all(_fullmatch(_ONE_SLUG, n) for n in names) or (
            len(names) > 1 and parts["id"]):
        raise RouteNotFound(f"{unmatched()}: a tag, or up to {MAX_INTERSECTION} tags joined by + (tag/a+b)")
    path = f"/tag/{quote(names[0])}" + (f"/{parts['id']}" if parts["id"] else "")
    label = f"tag {parts['tag']}"
    if len(names) == 1:
        return KindSpec(path, path, label)
    intersection = tuple(quote(n) for n in names)
    return KindSpec(path, "/tags/intersection/" + "/".join(intersection), label, tags_all=tuple(names),
                    intersection=intersection)


def _user_topics(parts: Mapping[str, Any], given: Given, unmatched: Callable[[], str]) -> KindSpec:
    user = parts["user"]
    return KindSpec("/latest", f"/u/{quote(user)}/activity/topics", f"topics by {user}", _category(given),
                    authors=(user,), started_by=user)


def _filter_list(parts: Mapping[str, Any], given: Given, unmatched: Callable[[], str]) -> KindSpec:
    forum_query = parse_filter_query(given.text("q") or "")
    list_params = (("q", str(forum_query)),)
    return KindSpec("/filter", "/filter?" + urlencode(list_params), f"filter {forum_query}", list_params,
                    forum_query=forum_query, ranked=forum_query.ranked)


def _topic_posts(parts: Mapping[str, Any], given: Given, unmatched: Callable[[], str]) -> KindSpec:
    topic = parts["topic"]
    return KindSpec(f"/t/{topic}", f"/t/{quote(parts['slug'] or 'topic')}/{topic}", f"posts of topic {topic}",
                    topic_id=int(topic))


def _latest_posts(parts: Mapping[str, Any], given: Given, unmatched: Callable[[], str]) -> KindSpec:
    return KindSpec("/posts", "/latest", "latest posts", _category(given))


def _user_posts(parts: Mapping[str, Any], given: Given, unmatched: Callable[[], str]) -> KindSpec:
    user = parts["user"]
    return KindSpec(f"/u/{quote(user)}/posts", f"/u/{quote(user)}/activity", f"posts by {user}", authors=(user,),
                    poster=user)


KINDS: dict[RouteKind, KindBuilder] = {
    "list": _list,
    "category": _category_list,
    "tag": _tag_list,
    "user_topics": _user_topics,
    "filter": _filter_list,
    "topic_posts": _topic_posts,
    "posts": _latest_posts,
    "user_posts": _user_posts,
}
"""Each route kind's part of its spec: the one place a kind's list, page, label and own fields are decided."""


def _category(given: Given) -> tuple[tuple[str, str], ...]:
    """A list's own `category=` (an id), for the kinds whose forum list takes one."""
    category = given.whole("category")
    return () if category is None else (("category", str(category)),)


def keyword_param(kind: str | None) -> str:
    """The name of the keyword filter on feeds of `kind` (`KEYWORD_PARAMS`; `q` for the rest)."""
    return KEYWORD_PARAMS.get(kind or "", "q")


def _fullmatch(pattern: re.Pattern[str], text: str) -> re.Match[str] | Marked | None:
    """`params.fullmatch` for a path that may hold a combining mark; an ASCII one is matched here, no call out."""
    return pattern.fullmatch(text) if text.isascii() else fullmatch(pattern, text)


def route_of(path: str) -> tuple[RouteKind, dict[str, str | Any]] | None:
    """The kind of the feed path `path` (after the forum's key, without its format) and the parts its route
    names (`slugs`, `id`, `user`, ...), as the routes read it; None when no route matches."""
    return next(((kind, match.groupdict()) for kind, pattern in _PATHS if (match := _fullmatch(pattern, path))), None)


def feed_kind_of(path: str) -> FeedKind | None:
    """The feed kind of the feed path `path` (`feed_kind` of what `route_of` reads), None when no route matches."""
    found = route_of(path)
    return None if found is None else feed_kind(*found)


def kind_of(path: str) -> RouteKind | None:
    """The kind of the feed path `path`, as `route_of` reads it."""
    found = route_of(path)
    return None if found is None else found[0]


def _canonical(value: object) -> list[str]:
    """A filter field's value as query values: none for none, `1` for a flag, each member of a set in order."""
    if value is None or value is False:
        return []
    if value is True:
        return ["1"]
    if isinstance(value, frozenset):
        return [str(v) for v in sorted(value)]
    return [str(value)]


def split_forum(settings: Settings, path: str) -> tuple[Forum, str] | None:
    """The forum whose key prefixes `path` (`key/...`) and the rest after `key/`: the longest key wins, so
    subfolder forums on one host coexist. The one forum lookup for feed paths and pasted forum URLs."""
    for forum in sorted(settings.forums, key=lambda f: len(f.key), reverse=True):
        if path.startswith(forum.key + "/"):
            return forum, path[len(forum.key) + 1 :]
    return None
