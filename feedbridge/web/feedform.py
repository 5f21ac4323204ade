"""The front page's form as data: its values, the feed path they name, and forum URLs recognised into them.

Pure functions only. The form never builds an upstream URL itself: `feed_request` turns the values
into the same path and parameters a feed reader would send, and `spec.parse_feed_request` (the
service's one validation boundary) decides whether they name a feed.

The form has two kinds of fields: those that choose the list (which forum, which kind of list, which
category, tag, topic or user, the format), written here, and one field per parameter of the table
(`feeds/request/params.py`), made from its rows: their names, labels, hints, choices and the lists that take them.
"""

from __future__ import annotations

import builtins
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from feedbridge.config import Settings
from feedbridge.feeds.request import params
from feedbridge.feeds.request.params import FeedKind, Param, fullmatch
from feedbridge.feeds.request.spec import CATEGORY_VALUE, feed_kind, route_of, split_forum
from feedbridge.feeds.request.urls import NoFeed, feed_for_url
from feedbridge.render.formats import FORMATS

LIST_FEEDS: dict[str, tuple[FeedKind, ...]] = {
    "latest": ("latest",), "top": ("top",), "hot": ("hot",), "category": ("category", "category_top"),
    "tag": ("tag",), "user_topics": ("user_topics",), "filter": ("filter",), "posts": ("posts",),
    "topic": ("topic_posts",), "user_posts": ("user_posts",),
}
"""The form's lists and the feeds each names. `user_topics` is the topics a user started (`/u/NAME`); `filter`
the forum's own `/filter?q=` list; the last three are post feeds (feeds/sources/post_feeds.py): the forum's latest
posts, one topic's, one user's. A category's list is its default view or its top list (`view`). Keywords on
the latest list (`q=`) are what a list of their own once gave (`spec.MOVED`)."""
LISTS = tuple(LIST_FEEDS)
TAG_MATCHES = ("any", "all")
VIEWS = ("", "top")  # a category's default view, or its top list (`/c/SLUG/ID/l/top`)

_FORM_ROWS = tuple(p for p in params.PARAMETERS if p.label)
FIELDS: tuple[Param, ...] = params.firsts(_FORM_ROWS, lambda p: p.form_name)
"""One form field per parameter the form offers; where two rows share a field (the keywords are `q=`, and
`keyword=` on a /filter feed), the first one's label and widget."""


def _for_list(fields: Sequence[Param]) -> str:
    """The lists whose feeds take any of `fields` (`data-for-list`, which the page's script shows them for);
    "" where every list does."""
    names = {p.form_name for p in fields}
    lists = [name for name, feeds in LIST_FEEDS.items()
             if any(set(feeds) & p.feeds for p in _FORM_ROWS if p.form_name in names)]
    return "" if len(lists) == len(LISTS) else " ".join(lists)


@dataclass(frozen=True, slots=True)
class Section:
    """Fields shown together: a fieldset's (`Param.group`, its legend), or one field on its own (no legend)."""

    legend: str
    fields: tuple[Param, ...]
    for_list: str  # `_for_list`


SECTIONS: tuple[Section, ...] = tuple(
    Section(legend, fields, _for_list(fields))
    for legend, group in itertools.groupby(FIELDS, key=lambda p: p.group)
    for fields in ([tuple(group)] if legend else [(p,) for p in group]))
"""The parameter fields in the table's order, those of one fieldset together."""
KEPT = tuple(p.form_name for p in FIELDS if not p.lists) + ("tag_match", "format")
"""What a pasted URL cannot say (filters, format): kept from the choices already made."""

# The feed routes' grammar (feeds/request/spec.py), without the format: a feed path back into form values.
_CATEGORY_VALUE = re.compile(CATEGORY_VALUE)
_TOPIC_VALUE = re.compile(r"(?:[\w-]{1,100}/)?[0-9]{1,9}")
_TAG_SEPARATORS = re.compile(r"[\s,+]")


class FeedForm:
    """Everything the front page asks for, as strings exactly as typed (validation happens in spec): the
    fields that choose the list (`STRUCTURE`) and one per parameter field (`FIELDS`), read as attributes.
    Immutable: `replace` makes a changed copy."""

    STRUCTURE: ClassVar[dict[str, str]] = {
        "forum": "",  # a configured forum key
        "list": "latest",  # one of LISTS
        "category": "",  # "slug/id" up to three slugs deep, as in the category's feed path
        "view": "",  # the category's: one of VIEWS
        "tag": "",  # the tag list's tag
        "topic": "",  # the topic list: "slug/id" or "id", as in a topic's URL
        "user": "",  # the user_topics and user_posts lists: whose topics, whose posts
        "tag_match": "any",  # the tag filter's: one of TAG_MATCHES
        "format": "atom",
    }
    DEFAULTS: ClassVar[dict[str, str]] = {**STRUCTURE, **{p.form_name: p.default for p in FIELDS}}
    __slots__ = ("_values",)
    _values: dict[str, str]

    def __init__(self, **values: str) -> None:
        if unknown := set(values) - set(self.DEFAULTS):
            raise TypeError(f"FeedForm has no field {sorted(unknown)[0]!r}")
        object.__setattr__(self, "_values", {**self.DEFAULTS, **values})

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):  # a half-made copy (copy, pickle) has no `_values` yet: never recurse on it
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name: str) -> str:  # the template's `form[name]`
        return self._values[name]

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a FeedForm is immutable: use replace()")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FeedForm) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __repr__(self) -> str:
        return f"FeedForm({', '.join(f'{k}={v!r}' for k, v in self.args().items())})"

    def replace(self, **values: str) -> FeedForm:
        return FeedForm(**{**self._values, **values})

    def as_dict(self) -> dict[str, str]:
        return dict(self._values)

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> FeedForm:
        """The form of the front page's own query string: unknown fields left out, and a choice that is
        not one of its values taken as its default."""
        values = {name: str(args.get(name, "")).strip() for name in cls.DEFAULTS if args.get(name)}
        # links made before the user lists took the feeds' names (an old `search` list falls back to latest)
        values["list"] = {"started": "user_topics", "user": "user_posts"}.get(old := values.get("list", ""), old)
        choices = {"list": LISTS, "format": tuple(FORMATS), "view": VIEWS, "tag_match": TAG_MATCHES,
                   **{p.form_name: tuple(v for v, _ in p.choices) for p in FIELDS if p.value == "choice"}}
        return cls(**{name: value for name, value in values.items() if name not in choices or value in choices[name]})

    def args(self) -> dict[str, Any]:
        """The front page's own query string for these values (defaults left out)."""
        return {name: value for name, value in self._values.items() if value != self.DEFAULTS[name]}

    @property
    def feed(self) -> FeedKind:
        """The kind of feed these values name (a category's top view apart)."""
        feeds = LIST_FEEDS.get(self.list, ("latest",))
        return feeds[-1] if self.list == "category" and self.view == "top" else feeds[0]

    def feed_request(self, fmt: str | None = None) -> tuple[str, dict[str, builtins.list[str]]]:
        """The feed's path (no leading slash) and query parameters, in the shape `parse_feed_request` takes:
        each field the feed takes, by its parameter's name on this feed."""
        fmt = fmt or self.format
        if self.list == "category":
            name = f"c/{self.category.strip('/')}" + ("/l/top" if self.view == "top" else "")
        elif self.list == "tag":
            name = f"tag/{self.tag}"
        elif self.list == "topic":
            name = f"t/{self.topic.strip('/')}"
        elif self.list == "user_topics":
            name = f"u/{self.user.strip().removeprefix('@')}"
        elif self.list == "user_posts":
            name = f"u/{self.user.strip().removeprefix('@')}/posts"
        else:
            name = self.list
        args: dict[str, list[str]] = {}
        for param in params.rows(self.feed):
            value = self._values.get(param.form_name, "") if param.label else ""
            if param.value == "tags" and (names := [t for t in _TAG_SEPARATORS.split(value) if t]):
                args[param.name] = ["+".join(names) if self.tag_match == "all" else ",".join(names)]
            elif value and value != param.default:
                args[param.name] = [value]
        return f"{self.forum}/{name}.{fmt}", args

    @property
    def missing(self) -> str | None:
        """What the form still needs before it names a feed, as a sentence; None when complete."""
        if self.list == "category" and not fullmatch(_CATEGORY_VALUE, self.category.strip("/")):
            return "Choose a category (or paste its URL, e.g. https://forum/c/compiler/5)."
        if self.list == "tag" and not self.tag:
            return "Type a tag name."
        if self.list == "topic" and not fullmatch(_TOPIC_VALUE, self.topic.strip("/")):
            return "Paste the topic's URL (e.g. https://forum/t/some-topic/123), or type its id."
        if self.list in ("user_topics", "user_posts") and not self.user.strip():
            return "Type the user's name."
        if self.list == "filter" and not self.filter_query.strip():
            return "Type a filter query, as on the forum's /filter page (e.g. status:open likes-min:5)."
        # A value in a field this list's feed does not take (the page's script hides such fields; without it they
        # show): named, where the feed was built without it, as the web refuses a parameter a feed does not take.
        taken = {p.form_name for p in params.rows(self.feed) if p.label}
        own = self.author.strip().casefold() == self.user.strip().casefold()
        if self.list in ("user_topics", "user_posts") and own:
            taken.add("author")  # the user's own name, which a pasted user's URL fills in for the lists it switches to
        if stray := next((p for p in FIELDS if p.form_name not in taken
                          and self._values[p.form_name].strip() not in ("", p.default)), None):
            return f"“{stray.label}” does not apply to this list: clear it, or choose a list it applies to."
        return None


@dataclass(frozen=True, slots=True)
class Recognised:
    form: FeedForm | None
    message: str  # what was recognised, or why nothing was


def recognise(settings: Settings, url: str, base: FeedForm | None = None) -> Recognised:
    """Form values from any forum URL a user might paste, through the one converter of forum URLs into
    feeds (`feeds.request.urls.feed_for_url`): what the user already chose and the URL does not say (format,
    author, query, filters) is kept from `base`."""
    found = feed_for_url(settings, url)
    if isinstance(found, NoFeed):
        return Recognised(None, found.message)
    form = form_of_feed(found.path, found.args(), (base or FeedForm()).replace(forum=found.forum.key))
    return Recognised(form, found.what)


def form_of_feed(path: str, args: Mapping[str, Sequence[str]], base: FeedForm) -> FeedForm:
    """`base` with the list of the feed path `path` (after the forum's key, without format) and what its
    parameters say: those that name the list (`period=`, `category=`, a /filter's `q=`) from `args` alone,
    the others (the keywords, `tag=`, ...) where `args` gives them."""
    form = base.replace(list="latest", category="", view="", tag="", topic="", user="",
                        **{p.form_name: p.default for p in FIELDS if p.lists})
    kind, parts = route_of(path) or ("list", {"list": "latest"})
    if kind == "list":
        form = form.replace(list=parts["list"])
    elif kind == "category":
        form = form.replace(list="category", category=f"{parts['slugs']}/{parts['id']}",
                            view="top" if parts["top"] else "")
    elif kind == "tag":
        form = form.replace(list="tag", tag=parts["tag"])  # `/tag/NAME.md` answers 301 to `/tag/NAME/ID.md`
    elif kind == "user_topics":
        # the author too: the user's topics are the latest list's by that author where the forum refuses
        # the user's own list, and the field keeps them if the list is changed
        form = form.replace(list="user_topics", user=parts["user"], author=parts["user"])
    elif kind == "topic_posts":
        form = form.replace(list="topic",
                            topic=f"{parts['slug']}/{parts['topic']}" if parts["slug"] else parts["topic"])
    elif kind == "user_posts":
        form = form.replace(list="user_posts", user=parts["user"])
    else:  # filter, posts
        form = form.replace(list=kind)
    values: dict[str, str] = {}
    for param in params.rows(feed_kind(kind, parts)):
        given = [value for value in args.get(param.name, []) if value]
        if not param.label or not given:
            continue
        values[param.form_name] = ",".join(given)
        if param.value == "choice" and values[param.form_name] not in (v for v, _ in param.choices):
            values[param.form_name] = param.default
        if param.value == "tags":
            values["tag_match"] = "all" if "+" in values["tags"] or " " in values["tags"].strip() else "any"
    return form.replace(**values)


def form_from_path(path: str, args: Mapping[str, Sequence[str]], settings: Settings) -> FeedForm:
    """The form that builds the feed at `path` (a feed URL path without its leading slash)."""
    stem, _, fmt = path.rpartition(".")
    base = FeedForm.from_args({"format": fmt})
    found = split_forum(settings, stem)
    if found is None:
        return base
    forum, rest = found
    return form_of_feed(rest, args, base.replace(forum=forum.key))
