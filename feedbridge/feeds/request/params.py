"""The feed parameters, declared once, as data: the one table every way in reads.

RSS-Bridge declares each bridge's parameters as an array (name, type, required, values, title); this is
that table for a feed's query string. Each row says what a parameter is called, what its value is and its
bounds, whether it is given once or many times (repeated, or comma-separated), which feeds take it, what
it needs from a forum's lists, and how the front page labels it. From the rows:

- `parse` reads a feed URL's query string (`spec.parse_feed_request`, the one validation boundary, which
  the web routes, the static config, the CLI and the front page all go through): a parameter no row
  names, or one the feed does not take, is a 400 that names it;
- `staticsite/plan.py` takes a `[[feeds]]` table's keys from the rows, `cli.py` makes `feedbridge build`'s
  options from them and `web/feedform.py` the front page's fields;
- `tests/test_docs.py` writes the reference table of `docs/parameters.md` from them and fails when it
  disagrees.

A parameter is added by a row here, the filter that reads it (its `filter_field` in `feeds/select/filters.py`),
and its test. A name may have two rows with disjoint feeds where it means two things: `q=` is the bridge's
keyword filter on most feeds and the forum's own filter query on `/filter` (whose keyword filter is
`keyword=`); `row(name, feed)` finds the one that applies.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from feedbridge.config import Settings
from feedbridge.discourse.filter_query import MAX_FILTER_CHARS, MAX_FILTER_TERMS
from feedbridge.errors import RequestError
from feedbridge.feeds.select.query import MAX_QUERY_LENGTH, MAX_TERMS, marks

if TYPE_CHECKING:
    from feedbridge.feeds.select.filters import FeedFilter

FeedKind = Literal["latest", "top", "hot", "category", "category_top", "tag", "user_topics", "filter",
                   "topic_posts", "posts", "user_posts"]
FEEDS: dict[FeedKind, str] = {
    "latest": "/latest", "top": "/top", "hot": "/hot", "category": "/c/…", "category_top": "/c/…/l/top",
    "tag": "/tag/…", "user_topics": "/u/NAME", "filter": "/filter", "topic_posts": "/t/…",
    "posts": "/posts", "user_posts": "/u/NAME/posts",
}
"""Each kind of feed a parameter may be taken by, as the docs and the messages name it: the route kinds of
`spec.ROUTES`, with a list's and a category's views apart (`/top` takes `period=`, `/latest` does not)."""
EVERY: frozenset[FeedKind] = frozenset(FEEDS)
POSTS: frozenset[FeedKind] = frozenset({"topic_posts", "posts", "user_posts"})
TOPICS: frozenset[FeedKind] = EVERY - POSTS

MAX_PARAM_CHARS = 1000  # every value of every parameter, before it is read
MAX_AUTHORS = 20
MAX_TAGS = 20
MAX_CATEGORIES = 20
MAX_LIMIT = 500
MAX_THRESHOLD = 10**9
MAX_ID = 10**9
TOP_PERIODS = ("all", "yearly", "quarterly", "monthly", "weekly", "daily")
DIGESTS = {"daily": 7, "weekly": 8}  # each digest and the periods it shows without `limit=`
HOUR, DAY, WEEK = 3600, 24 * 3600, 7 * 24 * 3600
MAX_AGE = 365 * DAY

Value = Literal["whole", "ids", "choice", "flag", "text", "names", "tags", "duration", "signature"]
"""How a parameter's text becomes its value: a whole number within bounds; whole numbers (comma-separated
or repeated); one of `choices`; 0 or 1; text; names (comma-separated or repeated); tags in Discourse's
`/filter` notation (`a,b` any, `a+b` all); a span of hours, days or weeks (`36h`, `7d`, `2w`) up to `high`
seconds, a `Duration`; a signature the bridge checks itself (`feeds/request/signing.py`)."""
_DURATION = re.compile(r"(?P<count>[0-9]{1,6})(?P<unit>[hdw])")
_UNITS = {"h": HOUR, "d": DAY, "w": WEEK}


@dataclass(frozen=True, slots=True)
class Duration:
    """A span of time as a feed URL gives it (`max_age=`). Its text is the canonical one, in the largest unit that
    divides it (`7d` is `1w`, `48h` is `2d`), so equal spans name one feed whichever way they were written."""

    seconds: int

    def __str__(self) -> str:
        unit, length = next((u, n) for u, n in (("w", WEEK), ("d", DAY), ("h", HOUR), ("s", 1))
                            if self.seconds % n == 0)
        return f"{self.seconds // length}{unit}"
_MANY: frozenset[Value] = frozenset({"ids", "names", "tags"})


@dataclass(frozen=True, slots=True)
class Param:
    """One row of the table. `help` is the sentence the docs and `--help` print; `label` and `hint` are the
    front page's (a row without a label is not on the form)."""

    name: str
    value: Value
    help: str
    feeds: frozenset[FeedKind] = EVERY
    low: int = 0
    high: int = 0
    high_setting: str = ""  # a `Settings` field that is the upper bound instead of `high`
    default: str = ""  # what a feed that takes it has when it is not given
    default_setting: str = ""  # a `Settings` field that is the default instead
    choices: tuple[tuple[str, str], ...] = ()  # the values, each with the form's words for it
    most: int = 0  # names, ids, tags: at most this many; text: at most this many terms
    chars: int = 0  # text: at most this many characters (read by the value's own parser)
    required: frozenset[FeedKind] = frozenset()  # the feeds that need it given
    example: str = ""  # a value, for the message that says a required one is missing
    needs: str = ""  # the `Topic` field a list must carry for it; a Markdown list lacks it (`Source.lacks`)
    filter_field: str = ""  # the `FeedFilter` field (and `make_filter` keyword) that holds its value
    lists: bool = False  # part of the forum list's own URL (which list is read), not a filter
    refused: str = ""  # what a feed that does not take it answers, where the general sentence misleads
    label: str = ""
    hint: str = ""
    form_field: str = ""  # the form's field, where it is not `name`
    group: str = ""  # the form's fieldset legend, shared by the rows in it
    unset: str = ""  # the form's words for giving none (a choice's or a flag's empty option)
    option: str = ""  # the CLI's option, where it is not `--name`
    short: str = ""  # and its short form
    cli: bool = True
    static: bool = True  # a key of a static config's `[[feeds]]` table

    @property
    def many(self) -> bool:
        """Given many times: repeated, or comma-separated."""
        return self.value in _MANY

    @property
    def numeric(self) -> bool:
        """Its values are whole numbers (a static config's key takes them as TOML integers)."""
        return self.value in ("whole", "ids")

    @property
    def form_name(self) -> str:
        return self.form_field or self.name

    @property
    def option_name(self) -> str:
        """The CLI option, without its dashes (`exclude-tag`)."""
        return self.option or self.name.replace("_", "-")

    def upper(self, settings: Settings) -> int:
        return int(getattr(settings, self.high_setting)) if self.high_setting else self.high

    def default_for(self, settings: Settings) -> str | int | None:
        """The value a feed that takes this parameter has when it is not given; None for none."""
        if self.default_setting:
            value: str | int = getattr(settings, self.default_setting)
            return value
        return self.default or None

    def read(self, items: Sequence[str], settings: Settings) -> object:
        """The value of `items`, its texts in the query string; None when they give none (blank)."""
        name = self.name
        if self.value in ("names", "tags"):
            found = [part for item in items for part in item.split(",") if part.strip()]
            return None if not found else _tags(items) if self.value == "tags" else tuple(found)
        if self.value == "ids":
            return tuple(self._whole(part.strip(), settings) for item in items for part in item.split(",")
                         if part.strip()) or None
        raw = items[0].strip()
        if not raw:
            return None
        if self.value == "choice" and raw not in (values := [value for value, _ in self.choices]):
            raise RequestError(f"{name} must be one of {', '.join(values)}, not {shorten(raw)!r}", param=name)
        if self.value == "flag":
            if raw not in ("0", "1"):
                raise RequestError(f"{name} must be 1 (or 0, the default), not {shorten(raw)!r}", param=name)
            return raw == "1"
        if self.value == "duration":
            return self._duration(raw)
        return self._whole(raw, settings) if self.value == "whole" else raw

    def _duration(self, raw: str) -> Duration:
        found = _DURATION.fullmatch(raw)
        seconds = int(found["count"]) * _UNITS[found["unit"]] if found else 0
        if not 0 < seconds <= self.high:
            raise RequestError(f"{self.name} must be a number of hours, days or weeks (36h, 7d, 2w) from 1h to "
                               f"{Duration(self.high)}, not {shorten(raw)!r}", param=self.name)
        return Duration(seconds)

    def _whole(self, raw: str, settings: Settings) -> int:
        high = self.upper(settings)
        if not raw.isascii() or not raw.isdigit() or not self.low <= int(raw) <= high:
            many = "whole numbers" if self.many else "a whole number"
            raise RequestError(f"{self.name} must be {many} from {self.low} to {high}, not {shorten(raw)!r}",
                               param=self.name)
        return int(raw)


def _threshold(name: str, help: str, label: str, needs: str = "", hint: str = "") -> Param:
    """A threshold on a topic's figure: a whole number from 0, the `FeedFilter` field of its name."""
    return Param(name, "whole", help, feeds=TOPICS, high=MAX_THRESHOLD, needs=needs, filter_field=name, label=label,
                 hint=hint, group="Only topics with")


PARAMETERS: tuple[Param, ...] = (
    Param("period", "choice", "the period of a top list", feeds=frozenset({"top", "category_top"}),
          default="all", choices=tuple((p, p) for p in TOP_PERIODS), lists=True, label="Period (top)"),
    Param("category", "whole",
          "stay inside one category (its numeric id) and its subcategories, as the forum's lists do",
          feeds=frozenset({"latest", "user_topics", "posts"}), low=1, high=MAX_ID, lists=True,
          label="Inside category", hint="optional: its id, the number ending its address", form_field="in_category"),
    Param("q", "text", "the forum's own filter query, as on its /filter page (Discourse's filter terms)",
          feeds=frozenset({"filter"}), chars=MAX_FILTER_CHARS, most=MAX_FILTER_TERMS, required=frozenset({"filter"}),
          example="status:open likes-min:5", lists=True, label="Filter query",
          hint="as on the forum's /filter page, e.g. status:open likes-min:5 tag:a+b", form_field="filter_query",
          cli=False),
    Param("author", "names", "keep topics (posts, on a post feed) by these users; case-insensitive",
          feeds=EVERY - {"user_topics", "user_posts"}, most=MAX_AUTHORS, filter_field="authors",
          refused="author= is not for a user's feeds: the path names the user", label="Author(s)",
          hint="optional, comma-separated"),
    Param("q", "text", 'keyword query over title and excerpt (and the first post with content=full): words, '
          '"a phrase", OR, -exclude', feeds=EVERY - {"filter"}, chars=MAX_QUERY_LENGTH, most=MAX_TERMS,
          label="Keywords",
          hint='optional: words, "a phrase", OR, -exclude', option="query", short="-q"),
    Param("keyword", "text", "the keyword query of a /filter feed (its q= is the forum's filter query)",
          feeds=frozenset({"filter"}), chars=MAX_QUERY_LENGTH, most=MAX_TERMS,
          refused="keyword= is the keyword filter of /filter feeds, whose q= is the forum's filter query; "
                  "on this feed the keyword filter is q=", label="Keywords", form_field="q", option="query"),
    Param("tag", "tags", "keep topics with any of these tags (tag=a,b), or with all of them (tag=a+b)",
          feeds=TOPICS, most=MAX_TAGS, needs="tags", label="With tags", group="Tags", form_field="tags"),
    Param("exclude_tag", "names", "drop topics with any of these tags", feeds=TOPICS, most=MAX_TAGS, needs="tags",
          filter_field="exclude_tags", label="Without tags", group="Tags"),
    Param("exclude_category", "ids", "drop topics of these categories (numeric ids) and of their subcategories",
          feeds=TOPICS, low=1, high=MAX_ID, most=MAX_CATEGORIES, needs="category_id",
          filter_field="exclude_categories", label="Without categories",
          hint="optional: ids, comma-separated; their subcategories too"),
    Param("exclude_pinned", "flag", "leave out the topics the list shows pinned (welcome and About topics)",
          feeds=TOPICS, needs="pinned", filter_field="exclude_pinned", choices=(("1", "leave them out"),),
          label="Pinned topics", unset="keep them"),
    Param("exclude_author", "names", "drop topics (posts, on a post feed) by these users; case-insensitive",
          most=MAX_AUTHORS, filter_field="exclude_authors", label="Not by", hint="optional, comma-separated"),
    _threshold("min_replies", "keep topics with at least this many replies (posts − 1)", "replies, at least",
               needs="replies"),
    _threshold("max_replies", "keep topics with at most this many replies: 0 is the unanswered topics",
               "replies, at most", needs="replies", hint="0: the unanswered topics"),
    _threshold("min_likes", "keep topics with at least this many likes", "likes, at least", needs="likes"),
    _threshold("min_views", "keep topics with at least this many views", "views, at least", needs="views"),
    Param("digest", "choice", "one entry per UTC day or ISO week with matching topics; limit= then counts periods "
          f"({DIGESTS['daily']} days, {DIGESTS['weekly']} weeks by default)", feeds=TOPICS,
          choices=(("daily", "one a day (daily digest)"), ("weekly", "one a week (weekly digest)")), label="Entries",
          unset="one per topic"),
    Param("max_age", "duration", "keep entries active within this long (a topic's last post, a post's own time; "
          "with a digest, the periods within it): 36h, 7d, 2w, at most a year", high=MAX_AGE, filter_field="max_age",
          label="Active within", hint="optional: 36h, 7d, 2w"),
    Param("limit", "whole", "at most this many entries (with a digest: periods)", low=1, high=MAX_LIMIT,
          label="At most", hint=f"optional: entries (with a digest: periods), 1–{MAX_LIMIT}"),
    # A topic's posts and /posts always carry each post's HTML (`feeds/sources/post_feeds.py`): no choice to make.
    Param("content", "choice", "excerpt, or full: each entry also gets its first post as HTML, creation date, category "
          "and tags", feeds=EVERY - {"topic_posts", "posts"},
          default_setting="content_default", label="Content", unset="default",
          choices=(("excerpt", "excerpts"), ("full", "each topic's first post in full"))),
    Param("pages", "whole", "how many list pages to read (30 topics each): more reach further back", low=1,
          high_setting="pages_max", default_setting="pages_default", label="Pages to read",
          hint="more pages reach further back"),
    Param("token", "signature", "a signed URL's signature (`feedbridge sign`): the feed as the bridge's key for a "
          "private forum reads it", cli=False, static=False),
)
"""Every parameter, in the order the docs, `--help` and the front page show them."""


def rows(feed: FeedKind) -> tuple[Param, ...]:
    """The rows of the parameters `feed` takes."""
    return _TAKEN[feed]


def row(name: str, feed: FeedKind) -> Param | None:
    """The row of `name` on `feed`; None when `feed` does not take it."""
    return _BY_NAME[feed].get(name)


# What a feed URL's first request reads, once per feed kind (a URL is resolved once, then remembered).
_TAKEN: dict[FeedKind, tuple[Param, ...]] = {feed: tuple(p for p in PARAMETERS if feed in p.feeds) for feed in FEEDS}
_BY_NAME: dict[FeedKind, dict[str, Param]] = {feed: {p.name: p for p in taken} for feed, taken in _TAKEN.items()}
HELD: Mapping[FeedKind, tuple[Param, ...]] = {feed: tuple(p for p in taken if p.filter_field)
                                              for feed, taken in _TAKEN.items()}
"""The rows of the parameters each feed kind takes whose value the filter holds (`Param.filter_field`): data, read
where a spec is made and where it names itself."""
_FILLED: dict[FeedKind, tuple[Param, ...]] = {
    feed: tuple(p for p in taken if feed in p.required or p.default or p.default_setting)
    for feed, taken in _TAKEN.items()}
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def firsts(found: Iterable[Param], key: Callable[[Param], str]) -> tuple[Param, ...]:
    """The first of `found` for each value of `key`, in order: the one row of a name, of a form field, of a CLI
    option that several rows share."""
    first: dict[str, Param] = {}
    for param in found:
        first.setdefault(key(param), param)
    return tuple(first.values())


NAMED: dict[str, Param] = {p.name: p for p in firsts(PARAMETERS, lambda p: p.name)}
"""Each name's first row: the rows of one name agree on their value, how many they take and where they are
keys (a static config's key)."""
NAMES: tuple[str, ...] = tuple(NAMED)


def parse(settings: Settings, feed: FeedKind, args: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """`args` (each parameter's values, as a query string gives them) read for a feed of kind `feed`: each
    parameter's value as its row reads it, with the defaults of those it takes (a parameter given blank, and
    one that has no default, is absent). A RequestError (400) names the parameter at fault: one no row names,
    one `feed` does not take, one given twice that is taken once, an over-long value, a value out of its
    bounds, a required one missing."""
    values: dict[str, Any] = {}
    for name, given in args.items():
        items = list(given)
        if name not in NAMED:
            raise RequestError(_not_taken(name, feed), param=name)
        for item in items:
            if len(item) > MAX_PARAM_CHARS:
                raise RequestError(f"{name} is longer than {MAX_PARAM_CHARS} characters", param=name)
            if _CONTROL.search(item):
                raise RequestError(f"{name} contains control characters", param=name)
        if not NAMED[name].many and len(items) > 1:
            raise RequestError(f"{name} was given {len(items)} times; give it once", param=name)
        found = row(name, feed)
        if found is None:
            raise RequestError(_not_taken(name, feed), param=name)
        if items and (value := found.read(items, settings)) is not None:
            values[name] = value
    for param in _FILLED[feed]:
        if param.name in values:
            continue
        if feed in param.required:
            example = f", e.g. ?{param.name}={param.example}" if param.example else ""
            raise RequestError(f"{param.name} is required on {FEEDS[feed]}: {param.help}{example}", param=param.name)
        if (default := param.default_for(settings)) is not None:
            values[param.name] = default
    return values


def where(feeds: Iterable[FeedKind]) -> str:
    """The feeds of `feeds` in words: "topic feeds", "every feed but /u/NAME", "/top and /c/…/l/top feeds"."""
    chosen = frozenset(feeds)
    for group, words in ((EVERY, "every feed"), (TOPICS, "topic feeds"), (POSTS, "post feeds")):
        if chosen == group:
            return words
    if len(EVERY - chosen) < len(chosen):
        return "every feed but " + _and([FEEDS[f] for f in FEEDS if f not in chosen])
    return _and([FEEDS[f] for f in FEEDS if f in chosen]) + " feeds"


def taken_names(feed: FeedKind) -> list[str]:
    """The parameters `feed` takes, by name: what a refusal lists (a signed URL's token left out)."""
    return list(dict.fromkeys(p.name for p in rows(feed) if p.value != "signature"))


def _not_taken(name: str, feed: FeedKind) -> str:
    """Why `feed` refuses `name`, and what it takes instead."""
    takes = f"{FEEDS[feed]} feeds take {', '.join(taken_names(feed))}"
    others = [p for p in PARAMETERS if p.name == name]
    if not others:
        shown = f"{shorten(name, 40)}=" if name.isprintable() else f"the parameter {shorten(name, 40)!r}"
        close = difflib.get_close_matches(name, NAMES, n=1)
        return f"{shown} is not a feed parameter" + (f" (did you mean {close[0]}=?)" if close else "") + f"; {takes}"
    if refused := next((p.refused for p in others if p.refused), ""):
        return refused
    return f"{name}= is for {where(f for p in others for f in p.feeds)}; {takes}"


def _tags(values: Sequence[str]) -> tuple[list[str], list[str]]:
    """`tag=` in Discourse's `/filter` notation: `a,b` or a repeated `tag=` for any of them, `a+b` for all
    (a `+` left literal in a query string reaches us as a space, an encoded one as `+`). The two forms do
    not mix: "a+b,c" has no meaning Discourse gives it."""
    any_of: list[str] = []
    all_of: list[str] = []
    for value in values:
        groups = [group.strip() for group in value.split(",") if group.strip()]
        every = [group for group in groups if "+" in group or " " in group]
        if every and (len(groups) > 1 or len(values) > 1):
            raise RequestError(f"tag: give either any of several tags (tag=a,b) or all of them (tag=a+b), "
                               f"not both in {shorten(value)!r}", param="tag")
        if every:
            all_of = [t for t in every[0].replace(" ", "+").split("+") if t]
        else:
            any_of += groups
    return any_of, all_of


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


@functools.cache
def _marks_as_letters() -> dict[int, str]:
    """A `str.translate` table writing each combining mark as a letter (`query._marks`' marks)."""
    return dict.fromkeys(marks(), "a")


@dataclass(frozen=True, slots=True)
class Marked:
    """A path pattern's match on `text` read with its combining marks as letters (`fullmatch`): its groups are
    `text`'s own."""

    match: re.Match[str]
    text: str

    def __getitem__(self, name: str) -> Any:
        start, end = self.match.span(name)
        return None if start < 0 else self.text[start:end]

    def groupdict(self) -> dict[str, Any]:
        return {name: self[name] for name in self.match.groupdict()}


def fullmatch(pattern: re.Pattern[str], text: str) -> Marked | None:
    """`pattern.fullmatch(text)`, a combining mark taken for the letter it belongs to: core's usernames, slugs and
    tags hold them (`UsernameValidator`'s `\\p{M}`, `Slug`), and `re`'s `\\w` takes none, so `/u/अनिल`, a
    Thai tag or a decomposed `zoë` was no feed path. Each mark is one character read as one: the groups' spans
    are the text's."""
    match = pattern.fullmatch(text if text.isascii() else text.translate(_marks_as_letters()))
    return None if match is None else Marked(match, text)


def shorten(text: str, size: int = 80) -> str:
    """Outside text cut for a message."""
    return text if len(text) <= size else text[:size] + "…"


def reaches_back(feed: FeedKind, feed_filter: FeedFilter) -> bool:
    """Whether more `pages=` reach further back: not for a topic's posts without a filter (its newest posts)."""
    return feed != "topic_posts" or feed_filter.narrows or feed_filter.max_age is not None
