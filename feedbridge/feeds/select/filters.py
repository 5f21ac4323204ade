"""Narrowing a listing's topics to what one feed asks for: authors, tags, a keyword query, thresholds
(at least so many replies, likes, views; at most so many replies), excluded tags, categories and authors,
a time window, a count.

Filters run on topics already parsed and cached, so they are pure; the values they hold come from feed
URLs, so `make_filter` validates them and says exactly which one is wrong.

Topics are selected as they were read, before they become entries; a post feed's posts, which take only
`author=`, `exclude_author=`, `q=` and `max_age=` (the parameter table refuses the rest there), are selected
as their entries (`FeedFilter.keeps_post`), which hold all of that.

What a keyword query reads of a topic or a post (`text_haystack`: its text, first post included, normalised)
costs far more than the search itself and is the same for every query, so it is kept, by a digest of the
text, in a bounded LRU: every `q=` variant of a 500-post topic feed after the first costs the searches and
the rendering, not 500 posts' worth of HTML parsing and Unicode folding. The scan gives other requests a
turn (`render.turns`) as it goes.
"""

from __future__ import annotations

import hashlib
import html
import re
import sys
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from cachetools import LRUCache, cached

from feedbridge.discourse.fields import TAG
from feedbridge.errors import FilterError, QueryError
from feedbridge.feeds.request.params import (
    MAX_AGE,
    MAX_AUTHORS,
    MAX_CATEGORIES,
    MAX_LIMIT,
    MAX_TAGS,
    MAX_THRESHOLD,
    PARAMETERS,
    Duration,
    Param,
)
from feedbridge.feeds.select.query import Query, haystack, parse_query
from feedbridge.models import Entry, Topic
from feedbridge.render.turns import take_turn

# The bounds of what a filter holds are the parameter table's (`feeds/request/params.py`), whose rows name the
# `FeedFilter` field each parameter fills (`Param.filter_field`); a threshold is a whole number from 0 to
# MAX_THRESHOLD: a floor of 0 keeps every topic, a ceiling of 0 (`max_replies=0`, the unanswered topics) is one.
MAX_USERNAME_LENGTH = 60
# Discourse's max_tag_length can be raised to 100; tags longer than that cannot exist on any site.
MAX_TAG_LENGTH = 100

# The characters Discourse strips from tag names (DiscourseTagging::TAGS_FILTER_REGEXP).
_TAG_FORBIDDEN = re.compile(r"""[/?#\[\]@!$&'()*+,;=.%\\`^\s|{}"<>]""")
_OLDEST = datetime.min.replace(tzinfo=UTC)


def _username_key(name: str) -> str:
    # Discourse compares usernames NFC-normalised and lower-cased (`User.normalize_username`: `unicode_normalize`,
    # `downcase`). Not casefolded: `Straße` and `strasse` are two users there, and were one author here.
    return unicodedata.normalize("NFC", name).lower()


def _has_valid_username_chars(name: str) -> bool:
    # Discourse's Unicode usernames: letters of any script with their marks, digits, `_ . -`.
    return all(
        char.isalnum() or char in "_.-" or unicodedata.category(char).startswith("M") for char in name
    )


def _author(raw: str) -> str:
    name = raw.strip().removeprefix("@")
    if not name or len(name) > MAX_USERNAME_LENGTH or not _has_valid_username_chars(name):
        raise FilterError(
            f"{raw!r} is not a valid username"
            f" (letters, digits, _ . - and at most {MAX_USERNAME_LENGTH} characters)", param="author"
        )
    return _username_key(name)


def tag_key(tag: str) -> str:
    """How a tag is compared: NFC-normalised and casefolded: `über` typed decomposed, as some keyboards and URLs give
    it, matched nothing."""
    return unicodedata.normalize("NFC", tag).casefold()


def _tag(raw: str) -> str:
    tag = raw.strip()
    if not tag or len(tag) > MAX_TAG_LENGTH or _TAG_FORBIDDEN.search(tag):
        raise FilterError(
            f"{raw!r} is not a valid tag"
            f" (no spaces or /?#[]@!$&'()*+,;=.%\\`^|{{}}\"<>, at most {MAX_TAG_LENGTH} characters)"
        )
    return tag_key(tag)


def _as_names(values: Iterable[str] | str) -> list[str]:
    # A lone string would otherwise be iterated character by character: treat it as one value.
    return [values] if isinstance(values, str) else list(values)


HAYSTACK_BYTES = 16 * 1024 * 1024
"""Memory the kept haystacks may hold (`sys.getsizeof`): 500 posts of 20,000 characters take about 8 MiB."""


def html_to_text(fragment: str) -> str:
    """Text of an HTML fragment for keyword matching (not display).

    The text between tags, joined by spaces so "<p>a</p><p>b</p>" does not become the word "ab"; the price
    is that a word split by inline markup (<em>un</em>likely) is seen as two. A split on tags and one
    `html.unescape`, where `HTMLParser` cost 15 times as much (1.7 ms for a 20,000-character post). A
    content_html holds nh3's output (`render.sanitize`) or text escaped here (digests), where every `<` in text
    or in an attribute value is escaped, so each `<` opens a tag that the next `>` closes.
    """
    return html.unescape(" ".join(chunk for chunk in TAG.split(fragment) if chunk))


def topic_text(topic: Topic) -> str:
    """What a keyword query reads: title, excerpt and, in full-content mode, the first post's text."""
    return _text(topic.title, topic.excerpt, topic.content_html)


def _text(title: str, excerpt: str | None, content_html: str | None) -> str:
    """A topic's or a post's title, excerpt and content, as `topic_text` says."""
    parts = [title, excerpt or ""]
    if content_html:
        parts.append(html_to_text(content_html))
    return "\n".join(parts)


def _text_digest(title: str, excerpt: str | None, content_html: str | None) -> bytes:
    """A digest of the text a haystack is made from. Lengths go into it too, so no two different texts share
    a key by their joints."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (title, excerpt or "", content_html or ""):
        encoded = part.encode("utf-8", "surrogatepass")  # lone surrogates reach here from hostile posts
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.digest()


# cachetools' caches are not thread-safe (a read reorders the LRU): `cached` holds the lock around each
# lookup and store, never around the making, and keeps no haystack larger than the whole cache.
@cached(LRUCache(HAYSTACK_BYTES, getsizeof=sys.getsizeof), key=_text_digest, lock=threading.Lock())
def text_haystack(title: str, excerpt: str | None, content_html: str | None) -> str:
    """`query.haystack` of the text (`topic_text`), kept by a digest of it (see the module docstring)."""
    return haystack(_text(title, excerpt, content_html))


def topic_haystack(topic: Topic) -> str:
    """What a keyword query searches of a topic (`text_haystack`)."""
    return text_haystack(topic.title, topic.excerpt, topic.content_html)


@dataclass(frozen=True, slots=True)
class FeedFilter:
    """What one feed keeps of a listing. Authors and tags each match any of their values."""

    authors: frozenset[str] = frozenset()  # username keys (NFC, casefolded); empty = any author
    query: Query | None = None
    limit: int | None = None
    tags: frozenset[str] = frozenset()  # `tag_key`s; empty = any. Lists carry no tags: full mode only
    # What only JSON lists carry (a Markdown list is completed from the JSON list of the same page, see
    # `feeds.sources.reads`); a topic whose figure is unknown is not kept by a threshold on it.
    tags_all: frozenset[str] = frozenset()  # every one of them
    exclude_tags: frozenset[str] = frozenset()
    exclude_categories: frozenset[int] = frozenset()  # as given
    subcategories: frozenset[int] = frozenset()  # theirs, from the forum's directory
    within: frozenset[int] = frozenset()  # a `/posts?category=`'s category and its subcategories, from the directory
    min_replies: int | None = None
    # A ceiling: 0 keeps the topics nobody has answered yet, so it is never turned into "no threshold".
    max_replies: int | None = None
    min_likes: int | None = None
    min_views: int | None = None
    # Leave out what the list shows pinned at its top (a welcome or "About" topic, old but always first).
    exclude_pinned: bool = False
    exclude_authors: frozenset[str] = frozenset()  # username keys, as `authors`
    max_age: Duration | None = None  # as given; `since` is where it reaches back to, once a build knows when it runs
    # The oldest activity kept (a topic's last post, a post's own time): `max_age` before the build that reads the
    # clock (`FeedService.entries`); a digest keeps the periods that start from it instead (`feeds/select/digest.py`).
    since: datetime | None = None

    def keeps(self, topic: Topic) -> bool:
        take_turn()  # called once per topic of a feed: a scan of 500 long first posts takes turns
        if self.exclude_pinned and topic.pinned:
            return False
        if not self._keeps_written(topic.author, topic.last_posted_at):
            return False
        if self.tags or self.tags_all or self.exclude_tags:
            tags = {tag_key(tag) for tag in topic.tags}
            if ((self.tags and self.tags.isdisjoint(tags)) or not self.tags_all <= tags
                    or not self.exclude_tags.isdisjoint(tags)):
                return False
        if topic.category_id in self.exclude_categories or topic.category_id in self.subcategories:
            return False
        for name, least, most in self.bounds():
            if least is None and most is None:
                continue
            figure: int | None = getattr(topic, name)
            if figure is None or (least is not None and figure < least) or (most is not None and figure > most):
                return False
        return self.query is None or self.query.found_in(topic_haystack(topic))

    def keeps_post(self, post: Entry) -> bool:
        """`keeps` for a post feed's post, as its entry: by its author, its own time (not its last edit) and
        its text, title included ("Re: …"). A post feed takes no other filter (the parameter table's rows say
        which feeds take each parameter)."""
        take_turn()  # called once per post of a feed: a scan of 500 long posts takes turns
        return (self._keeps_written(post.author, post.published)
                and (self.query is None
                     or self.query.found_in(text_haystack(post.title, post.summary, post.content_html))))

    def _keeps_written(self, author: str | None, moment: datetime | None) -> bool:
        """Whether the author and the time of a topic's last post or of a post pass `authors`,
        `exclude_authors` and `since`."""
        if self.authors and (author is None or _username_key(author) not in self.authors):
            return False
        if self.exclude_authors and author is not None and _username_key(author) in self.exclude_authors:
            return False
        return self.since is None or (moment is not None and moment >= self.since)

    @property
    def narrows(self) -> bool:
        """Whether `keeps` can refuse a topic at all: the common unfiltered feed skips the scan."""
        return bool(self.authors or self.tags or self.tags_all or self.exclude_tags or self.exclude_categories
                    or self.exclude_pinned or self.exclude_authors or self.since is not None or self.query is not None
                    or any(least is not None or most is not None for _, least, most in self.bounds()))

    def bounds(self) -> tuple[tuple[str, int | None, int | None], ...]:
        """Each figure a threshold reads (its `Topic` attribute, also its name in titles) with its floor and
        its ceiling, None for none: the one table `keeps`, `narrows` and `describe` read, so a threshold
        added here is applied, noticed and named alike."""
        return (("replies", self.min_replies, self.max_replies), ("likes", self.min_likes, None),
                ("views", self.min_views, None))

    def json_needed(self, lacks: frozenset[str]) -> str | None:
        """The first parameter that reads a `Topic` field of `lacks` (what a list of some source leaves out,
        `Source.lacks`; the table's `Param.needs`), which the JSON list of the same page then supplies; None
        when the list's own will do."""
        return next((p.name for p in PARAMETERS if p.needs in lacks and self._reads_list(p)), None)

    def _reads_list(self, param: Param) -> bool:
        """Whether this filter reads `param`'s field from the list: its value is set (`tag=`: either form). An
        any-of `tag=` read its tags from the topics' own pages, as many as the topic budget, and a tagged topic
        past it was left out of the feed, and every topic read came with its first post."""
        if param.name == "tag":
            return bool(self.tags or self.tags_all)
        value = getattr(self, param.filter_field)
        return value is not None and value is not False and value != frozenset()

    def apply(self, topics: Iterable[Topic], ranked: bool = False) -> list[Topic]:
        """Unique topics, filtered, cut to `limit`, newest activity first (undated last). `ranked`: the list is
        in an order of the forum's other than activity (top, hot, `/filter`'s `order:`), and the cut keeps its
        first: `limit=2` of a top list kept the two most recently active, not the top two.

        Pages are fetched at different moments, so a topic bumped in between appears on two of
        them: the copy of its latest activity is kept, in the place of its first sighting. Sorting is stable,
        so ties keep the upstream order.
        """
        unique: dict[int, Topic] = {}
        for topic in topics:
            held = unique.get(topic.id)
            if held is None or (topic.last_posted_at or _OLDEST) > (held.last_posted_at or _OLDEST):
                unique[topic.id] = topic
        kept = [t for t in unique.values() if self.keeps(t)] if self.narrows else list(unique.values())
        if ranked and self.limit is not None:
            kept = kept[: self.limit]
        ordered = sorted(kept, key=lambda t: t.last_posted_at or _OLDEST, reverse=True)
        return ordered if self.limit is None else ordered[: self.limit]

    def describe(self, keyword: str = "q") -> str:
        """The filter for a feed title, e.g. "author: alice, bob · q: gpu OR cuda"; "" when none. The query
        is named as the feed's parameter is (`keyword`: `keyword` on a `/filter` feed, whose `q` is the forum's).

        The limit is left out: how many entries a feed shows does not change what it is about.
        """
        parts = []
        if self.authors:
            parts.append("author: " + ", ".join(sorted(self.authors)))
        if self.exclude_authors:
            parts.append("not by: " + ", ".join(sorted(self.exclude_authors)))
        if self.max_age is not None:
            parts.append(f"active within {self.max_age}")
        if self.tags:
            parts.append("tag: " + ", ".join(sorted(self.tags)))
        if self.tags_all:
            parts.append("tags: " + " + ".join(sorted(self.tags_all)))
        if self.exclude_tags:
            parts.append("without tag: " + ", ".join(sorted(self.exclude_tags)))
        if self.exclude_categories:
            parts.append("without category: " + ", ".join(map(str, sorted(self.exclude_categories)))
                         + " and subcategories")
        for name, least, most in self.bounds():
            if least is not None:
                parts.append(f"{name} ≥ {least}")
            if most is not None:
                # what Discourse users ask for by name ("unanswered topics"), rather than "replies ≤ 0"
                parts.append("unanswered" if (name, most) == ("replies", 0) else f"{name} ≤ {most}")
        if self.exclude_pinned:
            parts.append("without pinned")
        if self.query is not None:
            parts.append(f"{keyword}: {self.query}")
        return " · ".join(parts)


def make_filter(
    authors: Iterable[str] | str = (),
    query: str | None = None,
    limit: int | None = None,
    tags: Iterable[str] | str = (),
    tags_all: Iterable[str] | str = (),
    exclude_tags: Iterable[str] | str = (),
    exclude_categories: Iterable[int] = (),
    min_replies: int | None = None,
    max_replies: int | None = None,
    min_likes: int | None = None,
    min_views: int | None = None,
    exclude_pinned: bool = False,
    exclude_authors: Iterable[str] | str = (),
    max_age: Duration | None = None,
    keyword: str = "q",
) -> FeedFilter:
    """Validate raw feed parameters into a FeedFilter.

    A blank query means no query (an empty `?q=` in a URL), not an error, and a floor (`min_*`) of 0 no
    threshold; a ceiling of 0 stays one (`max_replies=0`: no replies). Raises FilterError for authors (kept
    or excluded), tags, categories, thresholds (a ceiling below its floor too: no topic could be kept), the
    time window and limit,
    QueryError for the query; each names its parameter (`param`), the query's as `keyword` says (a `/filter`
    feed's is `keyword`).
    """
    author_keys = frozenset(map(_author, _as_names(authors)))
    if len(author_keys) > MAX_AUTHORS:
        raise FilterError(f"{len(author_keys)} authors given; at most {MAX_AUTHORS}", param="author")
    try:
        excluded_authors = frozenset(map(_author, _as_names(exclude_authors)))
    except FilterError as exc:
        raise FilterError(f"exclude_author: {exc.message}", param="exclude_author") from None
    if len(excluded_authors) > MAX_AUTHORS:
        raise FilterError(f"exclude_author: {len(excluded_authors)} authors given; at most {MAX_AUTHORS}",
                          param="exclude_author")
    if max_age is not None and not (isinstance(max_age, Duration) and 0 < max_age.seconds <= MAX_AGE):
        raise FilterError(f"max_age {max_age!r} is not a span from 1h to a year", param="max_age")
    tag_sets = []
    for name, given in (("tag", tags), ("tag", tags_all), ("exclude_tag", exclude_tags)):
        try:
            keys = frozenset(map(_tag, _as_names(given)))
        except FilterError as exc:
            raise FilterError(f"{name}: {exc.message}", param=name) from None
        if len(keys) > MAX_TAGS:
            raise FilterError(f"{name}: {len(keys)} tags given; at most {MAX_TAGS}", param=name)
        tag_sets.append(keys)
    tag_keys, all_keys, excluded_tags = tag_sets
    categories = frozenset(exclude_categories)
    if len(categories) > MAX_CATEGORIES or not all(
            type(c) is int and 1 <= c <= MAX_THRESHOLD for c in categories):
        raise FilterError(f"exclude_category takes up to {MAX_CATEGORIES} category ids from 1 to {MAX_THRESHOLD}",
                          param="exclude_category")
    bound: dict[str, int | None] = {}
    for name, value in (("min_replies", min_replies), ("max_replies", max_replies), ("min_likes", min_likes),
                        ("min_views", min_views)):
        if value is not None and (type(value) is not int or not 0 <= value <= MAX_THRESHOLD):
            raise FilterError(f"{name} {value!r} is not a whole number from 0 to {MAX_THRESHOLD}", param=name)
        bound[name] = value if name.startswith("max_") else value or None
    if max_replies is not None and min_replies is not None and max_replies < min_replies:
        raise FilterError(f"max_replies {max_replies} is below min_replies {min_replies}: no topic has at least "
                          f"{min_replies} and at most {max_replies} replies", param="max_replies")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT
    ):
        raise FilterError(f"limit {limit!r} is not a whole number from 1 to {MAX_LIMIT}", param="limit")
    try:
        parsed = parse_query(query) if query is not None and query.strip() else None
    except QueryError as exc:
        raise QueryError(exc.message, param=keyword) from None
    return FeedFilter(authors=author_keys, query=parsed, limit=limit, tags=tag_keys, tags_all=all_keys,
                      exclude_tags=excluded_tags, exclude_categories=categories, min_replies=bound["min_replies"],
                      max_replies=bound["max_replies"], min_likes=bound["min_likes"], min_views=bound["min_views"],
                      exclude_pinned=exclude_pinned is True, exclude_authors=excluded_authors, max_age=max_age)
