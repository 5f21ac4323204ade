"""Discourse's `/filter` query (core: lib/topics_filter.rb, `TopicsFilter#filter_from_query_string`), read
only as far as the bridge needs to: to bound it, and to find what a public feed cannot serve.

Core's grammar: terms separated by whitespace, each either `key:value` (an optional prefix before the key:
`-` excludes, `=` leaves out subcategories, `-=`/`=-` both; a value in quotes may hold spaces,
`tag_group:"Team A"`) or a plain word, which current core searches for in the posts. Keys are ASCII
(`[\\w-]+` in Ruby). The bridge sends the query to the forum as typed, whitespace normalised: the forum
decides what each term means, plugins' terms (`status:solved`) included, so nothing here second-guesses it.

What it does refuse is what a feed would serve wrong. A term core does not know does nothing at all
(`TopicsFilter#apply_filter` has no branch for an unknown key, and `filter_status`, `filter_in` and
`order_by` record an unknown value as invalid and go on): `staus:closed` gives the whole list where
`status:closed` gives the closed topics, and a reader would never learn why. `FilterQuery.ignored` names
every such term, from core's keys and values (`KEYS`, `VALUES`, `NUMBERS`, `DATES`, as lib/topics_filter.rb
has them) and those an operator lists for a forum's plugins (FEEDBRIDGE_FILTER_TERMS: `assigned`,
`status:solved`); `feeds.sources.reads` refuses them before anything is fetched. And the terms core reads for the
signed-in user alone. To an anonymous reader `filter_in` gives no topics at all for them (`elsif values.present?` →
`@scope.none`) and `order:read` orders by nothing, so a public feed of `in:bookmarked` would be an empty
feed forever; `FilterQuery.signed_in_only` names them, and `feeds.sources.reads` refuses them to an unsigned read.

The query is outside text: it is cut to `MAX_FILTER_CHARS` and `MAX_FILTER_TERMS` before it is read, and
read piece by piece with string methods, no regex. A term with a colon must be a real `key:value` term, so
no text can hide a term from this reading that core's unanchored scan would still find (`(in:bookmarked`,
`üin:bookmarked`: core's ASCII `[\\w-]+` finds `in:` in both).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from feedbridge.errors import FilterQueryError

MAX_FILTER_CHARS = 500
MAX_FILTER_TERMS = 20
MAX_KEY_CHARS = 40
PREFIXES = ("-=", "=-", "-", "=")  # longest first: core's `(?:-|=|-=|=-)?` before the key
_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "_-")
_QUOTES = "\"'"

# Values core reads only `if @guardian.authenticated?`, by key (exact, as core compares them; the key after
# its prefix, which these filters ignore). `in:`: filter_in's new-topics, new-replies, new, unseen and
# bookmarked, and the topic notification levels (TopicUser.notification_levels; `normal` is `regular`),
# watching_first_post in both spellings; `in:pinned` and `in:untagged` are read for everyone (`filter_in` takes
# both before `if @guardian.authenticated?`; a release from before `untagged` gives every reader, signed in or
# not, no topics for it, so a key would not help there either). `order:read`
# is the reader's own last visit (ORDER_BY_MAPPINGS["read"]); `created-by:me` the signed-in user.
SIGNED_IN_ONLY: dict[str, frozenset[str]] = {
    "in": frozenset({"new", "new-topics", "new-replies", "unseen", "bookmarked", "watching", "tracking",
                     "regular", "normal", "muted", "watching_first_post", "watching-first-post"}),
    "order": frozenset({"read", "read-asc"}),
    "created-by": frozenset({"me"}),
}


# core: lib/topics_filter.rb, as of the release with `TopicsFilter#invalid_filters`. The keys `apply_filter`
# reads (after FILTER_ALIASES); any other is ignored unless a plugin registered it
# (DiscoursePluginRegistry.custom_filter_mappings).
ALIASES = {"categories": "category", "tag-group": "tag_group", "tags": "tag", "groups": "group", "user": "users"}
NUMBERS = frozenset({"likes-min", "likes-max", "likes-op-min", "likes-op-max", "posts-min", "posts-max",
                     "posters-min", "posters-max", "views-min", "views-max"})  # RANGE_FILTERS: digits
DATES = frozenset({"activity-before", "activity-after", "created-before", "created-after", "latest-post-before",
                   "latest-post-after", "bookmarked-before", "bookmarked-after"})  # YYYY-MM-DD, or days ago
KEYS = NUMBERS | DATES | frozenset({"category", "created-by", "in", "order", "users", "group", "status",
                                    "tag_group", "tag", "topic", "locale"})
_ORDERS = ("activity", "category", "created", "latest-post", "likes", "likes-op", "posters", "posts", "title",
           "views", "hot", "read")  # ORDER_BY_MAPPINGS, each also `-asc`
VALUES: dict[str, frozenset[str]] = {
    # filter_status; a plugin's own through TopicsFilter.add_filter_by_status (discourse-solved's `solved`)
    "status": frozenset({"open", "closed", "archived", "listed", "unlisted", "deleted", "public", "noreplies",
                         "single_user", "single-user", "scheduled"}),
    # IN_VALUES: TopicUser.notification_levels and the rest; a plugin's own as a custom filter `in:X`
    "in": frozenset({"muted", "regular", "normal", "tracking", "watching", "watching_first_post",
                     "watching-first-post", "pinned", "bookmarked", "untagged", "new", "new-replies", "new-topics",
                     "unseen"}),
    "order": frozenset({*_ORDERS, *(f"{order}-asc" for order in _ORDERS)}),
}
"""The keys whose every value is one of a set: another value is ignored (`invalid_filter!`). `in:` and `order:`
take several, comma-separated; `status:` one per term."""


@dataclass(frozen=True, slots=True)
class FilterQuery:
    """A `/filter` query as the forum will be sent it, and what of it only a signed-in reader can use."""

    terms: tuple[str, ...]
    signed_in_only: tuple[str, ...] = ()  # the terms of `terms` a public feed refuses

    def __str__(self) -> str:
        return " ".join(self.terms)

    @property
    def ranked(self) -> bool:
        """Whether the forum lists its topics in another order than newest activity first: its first `order:`
        value (core's primary order) names another column, or activity oldest first."""
        for term in self.terms:
            read = term_key(term)
            if read is not None and ALIASES.get(read[0], read[0]) == "order":
                first = read[1].split(",")[0]
                return first not in ("activity", "latest-post")
        return False

    def ignored(self, extra: frozenset[str] = frozenset()) -> tuple[tuple[str, str], ...]:
        """Each term core's `/filter` would ignore, with why; `extra` is what the forum's plugins add: a key
        (`assigned`, any value) or a value of a key in `VALUES` (`status:solved`)."""
        found = []
        for term in self.terms:
            read = term_key(term)
            if read is None:
                continue
            given, value = read
            key = ALIASES.get(given, given)
            if why := _ignored(term, key, value, extra):
                found.append((term, why))
        return tuple(found)


def parse_filter_query(text: str) -> FilterQuery:
    """The query's terms, checked; FilterQueryError (a 400) saying what is wrong. Pure."""
    if len(text) > MAX_FILTER_CHARS:
        raise FilterQueryError(f"q: a filter query of at most {MAX_FILTER_CHARS} characters, not {len(text)}",
                               param="q")
    terms = split_terms(text)
    if not terms:
        raise FilterQueryError("q is required on /filter: a Discourse filter query, e.g. ?q=status:open likes-min:5",
                               param="q")
    if len(terms) > MAX_FILTER_TERMS:
        raise FilterQueryError(f"q: a filter query of at most {MAX_FILTER_TERMS} terms, not {len(terms)}", param="q")
    read = [(term, term_key(term)) for term in terms]  # every term checked, whatever its key
    return FilterQuery(tuple(terms), tuple(term for term, found in read if found and _signed_in_only(*found)))


def split_terms(text: str) -> list[str]:
    """`text` cut at whitespace and after a closing quote, a quoted value (`key:"a b"`) or phrase kept whole,
    as core's tokenizer (TOKENIZER_PATTERN) cuts it; an unclosed quote is an ordinary character. A quote
    costs a `find` to the end at most, and `text` is at most `MAX_FILTER_CHARS` long."""
    terms: list[str] = []
    start, size = 0, len(text)
    while start < size:
        if text[start].isspace():
            start += 1
            continue
        end = start
        while end < size and not text[end].isspace():
            if text[end] in _QUOTES and (end == start or text[end - 1] == ":"):
                close = text.find(text[end], end + 1)
                if close != -1:  # the term ends with its closing quote, as core's tokenizer ends it
                    end = close + 1
                    break
            end += 1
        terms.append(text[start:end])
        start = end
    return terms


def term_key(term: str) -> tuple[str, str] | None:
    """A `key:value` term's key (its prefix removed) and value; None for a word. FilterQueryError for a
    term with a colon that is no such term, which core would read in ways this module cannot see."""
    if term[0] in _QUOTES or ":" not in term:
        if ":" in term:  # core's scan would still find `in:x` inside `"a in:x"`
            raise FilterQueryError(f"q: {_quoted(term)}: a quoted phrase holds no ':' (write key:value terms "
                                   "outside quotes)", param="q")
        return None
    given, _, value = term.partition(":")
    key = given.removeprefix(next((p for p in PREFIXES if given.startswith(p)), ""))
    if not 0 < len(key) <= MAX_KEY_CHARS or not set(key) <= _KEY_CHARS or not value:
        raise FilterQueryError(f"q: {_quoted(term)} is not a filter term: write key:value (status:open, tag:a+b, "
                               f"-category:meta; a key of letters, digits, _ and -), or a word without ':'", param="q")
    return key, value


def _ignored(term: str, key: str, value: str, extra: frozenset[str]) -> str | None:
    """Why core ignores a term of key `key` (its alias resolved), or None when core reads it."""
    if key in extra:
        return None
    if key not in KEYS:
        return f"core has no filter {key}:"
    if key == "tag" and "=" in term.partition(":")[0]:
        return "core reads tag: with no prefix but - (=tag: does nothing)"
    if key in NUMBERS and not (value.isascii() and value.isdigit()):
        return f"{key}: takes a whole number"
    if key in DATES and not (value.isascii() and value.isdigit()) and not _is_date(value):
        return f"{key}: takes a date (2026-01-31) or a number of days ago"
    if key in VALUES:
        values = value.split(",") if key in ("in", "order") else [value]
        unknown = [v for v in values if v not in VALUES[key] and f"{key}:{v}" not in extra]
        if unknown:
            known = ", ".join(_ORDERS) + " (each also -asc)" if key == "order" else ", ".join(sorted(VALUES[key]))
            return f"core's {key}: is one of {known}, not {', '.join(unknown)}"
    return None


def _is_date(value: str) -> bool:
    """core's YYYY_MM_DD_REGEXP: a year from 1000 to 2999, a month and a day, each without a sign."""
    parts = value.split("-")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
        return False
    year, month, day = parts
    return len(year) == 4 and year[0] in "12" and 0 < len(month) <= 2 and 1 <= int(month) <= 12 \
        and 0 < len(day) <= 2 and 1 <= int(day) <= 31


def _signed_in_only(key: str, value: str) -> bool:
    """Whether core reads this term only for a signed-in user: one of its comma-separated values is."""
    if key not in SIGNED_IN_ONLY:
        return False
    values = {v.removeprefix("@") if key == "created-by" else v for v in value.split(",")}
    return not values.isdisjoint(SIGNED_IN_ONLY[key])


def _quoted(term: str, size: int = 60) -> str:
    return repr(term if len(term) <= size else term[:size] + "…")
