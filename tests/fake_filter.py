"""Core's `/filter.json?q=` for the fake forum (tests/upstream.py): a small, honest subset of
lib/topics_filter.rb (`TopicsFilter#filter_from_query_string`, served by `ListController#filter` as a topic
list) over the fixture topics, answered as an anonymous reader gets it.

The topics are the forum's whole latest list (`latest.json` and its pages, with `with_figures`' likes and
views), as the forum serves it: a forum that serves no JSON lists answers no `/filter.json` either. Pages
of 30 (`page=N`), `more_topics_url` on full pages as core's `TopicListSerializer` sends it, and the
sideloaded `users`.

What is read, as core reads it: terms found by core's scan (`FILTER_EXTRACTION_PATTERN`: an optional
`-`, `=`, `-=` or `=-` prefix, an ASCII key, a quoted or unquoted value), grouped by key, the aliases
`tags:` and `categories:`; then
- `status:` open, closed, archived, listed, unlisted (`closed`, `archived`, `visible` of each topic; the
  fixtures carry none, so every topic is open and listed), `public` (every fixture category is) and
  `deleted` (nothing, to an anonymous reader);
- `likes-min:`/`-max:`, `posts-min:`/`-max:`, `views-min:`/`-max:` (the last value, digits only);
- `tag:`/`-tag:`, `a,b` any of them and `a+b` all of them (an unknown tag in `a+b` keeps nothing);
- `category:` with subcategories, `=category:` without, `-category:` and `-=category:` excluded (slugs of
  `categories.json`; an unknown slug in an include keeps nothing);
- `created-by:` (the original poster's username, `@` dropped);
- `in:pinned` and `in:untagged`; any other `in:` value keeps nothing, as `filter_in` answers an
  anonymous reader (`elsif values.present?` → `@scope.none`);
- `order:` activity, created, latest-post, likes, views, title, each `-asc` too, the first the primary
  order; by default `bumped_at` newest first; the globally pinned topics first on page 0 whatever the order
  (`page_of`);
- words (no `:`): every one in the title, case-insensitive (core searches the posts' search data).
Other keys are ignored, as core ignores a key no plugin registered.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlencode

PER_PAGE = 30
PATH = "/filter.json"
_TERM = re.compile(r"""(?P<prefix>-=|=-|-|=)?(?P<key>[A-Za-z0-9_-]+):(?P<value>"[^"]*"|'[^']*'|\S+)""")
_ALIASES = {"tags": "tag", "categories": "category"}
_RANGES = {"likes": "like_count", "posts": "posts_count", "views": "views"}
_ORDERS = {"activity": "bumped_at", "created": "created_at", "latest-post": "last_posted_at", "likes": "like_count",
           "views": "views", "title": "title"}
Topic = dict[str, Any]


def filter_answer(target: str, read: Callable[[str], bytes | None]) -> bytes | None:
    """The body of `/filter.json?q=...&page=N`, or None for any other target and on a forum whose JSON
    lists `read` (relative path → body, as the fake serves it) does not find."""
    path, _, query = target.partition("?")
    if path != PATH:
        return None
    pages = _latest_pages(read)
    if not pages:
        return None
    params = {key: values[-1] for key, values in parse_qs(query).items()}
    q = params.get("q", "")
    page = int(params["page"]) if params.get("page", "").isdigit() else 0
    users = {user["id"]: user for document in pages for user in document.get("users", [])}
    topics = list({t["id"]: t for document in pages for t in document["topic_list"]["topics"]}.values())
    categories = json.loads(read("categories.json") or b'{"category_list": {"categories": []}}')
    kept = filtered(q, topics, _every_level(categories["category_list"]["categories"]), users)
    shown = page_of(kept, page)
    topic_list: dict[str, Any] = {"per_page": PER_PAGE, "topics": shown}
    if len(shown) == PER_PAGE:
        topic_list["more_topics_url"] = "/filter?" + urlencode({"q": q, "page": page + 1})
    posters = {p["user_id"] for t in shown for p in t.get("posters", [])}
    return json.dumps({"users": [u for i, u in users.items() if i in posters], "topic_list": topic_list},
                      indent=1, ensure_ascii=False).encode()


def page_of(kept: list[Topic], page: int) -> list[Topic]:
    """Page `page` of `kept`, as core's `TopicQuery#create_list` pages the filter list: `ListController#filter`
    passes no `order`, so `apply_pinning` holds whatever `order:` the query names, and `prioritize_pinned_topics`
    (no category: `pinned_globally AND pinned_at IS NOT NULL`, an anonymous reader's `pinned`) puts the
    globally pinned topics first on page 0, 30 in all; a later page is the others from `page * 30` less the
    pinned ones, so no topic is shown twice or skipped."""
    pinned = [t for t in kept if t.get("pinned_globally") and t.get("pinned")]
    others = [t for t in kept if not (t.get("pinned_globally") and t.get("pinned"))]
    if page == 0:
        return (pinned + others)[:PER_PAGE]
    start = max(page * PER_PAGE - len(pinned), 0)
    return others[start:start + PER_PAGE]


def _latest_pages(read: Callable[[str], bytes | None]) -> list[dict[str, Any]]:
    pages = []
    for number in range(100):
        body = read("latest.json" if number == 0 else f"latest/page-{number}.json")
        if body is None:
            break
        pages.append(json.loads(body))
    return pages


def filtered(q: str, topics: list[Topic], categories: list[dict[str, Any]],
             users: dict[int, dict[str, Any]]) -> list[Topic]:
    """The topics `q` keeps, in its order (pure: core's scan, grouping and filters, as the module says)."""
    terms: dict[str, list[tuple[str | None, str]]] = {}
    for match in _TERM.finditer(q):
        terms.setdefault(_ALIASES.get(match["key"], match["key"]), []).append((match["prefix"], match["value"]))
    kept = [t for t in topics if all(_keeps(key, given, t, topics, categories, users) for key, given in terms.items())]
    words = [w.casefold() for w in q.split() if ":" not in w]
    kept = [t for t in kept if all(w in t["title"].casefold() for w in words)]
    orders = [v for _, value in terms.get("order", []) for v in value.split(",")]
    kept.sort(key=lambda t: t["bumped_at"], reverse=True)
    for order in reversed(orders):  # a stable sort per column, the last first: the first is the primary order
        column = _ORDERS.get(order.removesuffix("-asc"))
        if column is not None:
            kept.sort(key=functools.partial(_column, column=column), reverse=not order.endswith("-asc"))
    return kept


def _column(topic: Topic, column: str) -> Any:
    """The value core orders by: a count (0 when missing), a date (ISO strings sort as dates), a lower title."""
    if column == "title":
        return topic["title"].lower()
    return topic.get(column) or (0 if column in ("like_count", "views") else "")


def _keeps(key: str, given: list[tuple[str | None, str]], topic: Topic, topics: list[Topic],
           categories: list[dict[str, Any]], users: dict[int, dict[str, Any]]) -> bool:
    values = [value for _, value in given]
    if key == "status":
        return all(_status(value, topic) for value in values)
    if key.endswith(("-min", "-max")) and key[:-4] in _RANGES:
        last = values[-1]  # core: `value if value =~ /\A\d+\z/`, else no filter
        if not (last.isascii() and last.isdigit()):
            return True
        figure = topic.get(_RANGES[key[:-4]]) or 0
        return figure >= int(last) if key.endswith("-min") else figure <= int(last)
    if key == "tag":
        return _tags(given, topic, {tag_name(tag) for t in topics for tag in t.get("tags", [])})
    if key == "category":
        return _categories(given, topic, categories)
    if key == "created-by":
        names = {n.removeprefix("@").lower() for value in values for n in value.split(",")}
        return _original_poster(topic, users).lower() in names
    if key == "in":
        asked = {v for value in values for v in value.split(",")}
        return (("pinned" not in asked or bool(topic.get("pinned")))
                and ("untagged" not in asked or not topic["tags"]) and not asked - {"pinned", "untagged"})
    return True


def _status(value: str, topic: Topic) -> bool:
    closed, archived = bool(topic.get("closed", False)), bool(topic.get("archived", False))
    visible = bool(topic.get("visible", True))
    return {"open": not closed and not archived, "closed": closed, "archived": archived, "listed": visible,
            "unlisted": not visible}.get(value, True)


def tag_name(tag: object) -> str:
    return str(tag["name"] if isinstance(tag, dict) else tag).lower()


def _tags(given: list[tuple[str | None, str]], topic: Topic, known: set[str]) -> bool:
    tags = {tag_name(tag) for tag in topic.get("tags", [])}
    for prefix, value in given:
        if prefix and prefix != "-":
            break  # core: `break if key_prefix && key_prefix != "-"`
        every = "+" in value
        if every and "," in value:
            continue  # core's scan takes one delimiter per value
        names = {name.lower() for name in value.split("+" if every else ",") if name}
        if prefix == "-":
            if (names <= tags) if every else not names.isdisjoint(tags):
                return False
        elif every and (not names <= known or not names <= tags):
            return False
        elif not every and names.isdisjoint(tags):
            return False
    return True


def _categories(given: list[tuple[str | None, str]], topic: Topic, categories: list[dict[str, Any]]) -> bool:
    by_slug = {c["slug"]: c["id"] for c in categories}
    include: set[int] = set()
    exclude: set[int] = set()
    asked_include = False
    for prefix, value in given:
        prefix = prefix or ""
        ids = {by_slug[slug] for slug in value.split(",") if slug in by_slug}
        if "=" not in prefix:
            ids = _with_subcategories(ids, categories)
        if "-" in prefix:
            exclude |= ids
        else:
            asked_include = True
            include |= ids
    if asked_include and topic.get("category_id") not in include:
        return False
    return topic.get("category_id") not in exclude


def _every_level(categories: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The directory's categories and their `subcategory_list`s, at every level, flat."""
    return [found for c in categories for found in (c, *_every_level(c.get("subcategory_list") or []))]


def _with_subcategories(ids: set[int], categories: list[dict[str, Any]]) -> set[int]:
    found = set(ids)
    while more := {c["id"] for c in categories if c.get("parent_category_id") in found} - found:
        found |= more
    return found


def _original_poster(topic: Topic, users: dict[int, dict[str, Any]]) -> str:
    posters = topic.get("posters") or [{}]
    first = next((p for p in posters if "Original Poster" in p.get("description", "")), posters[0])
    return str(users.get(first.get("user_id"), {}).get("username", ""))
