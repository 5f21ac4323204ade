"""Parse Discourse's JSON lists (`/latest.json`, `/c/SLUG/ID.json`, `/categories.json`).

Every Discourse release since 2013 serves these, whether or not it has the Markdown endpoints (which
arrived in core in 2026 and which admins can turn off), so they are how feedbridge reads every other forum.
The results are the ones the Markdown parsers give: a `Listing` of `Topic`s and `Category` tuples, refused
the same way (`NotAListError` saying what came instead). A topic's own `/t/ID.json` is read by
`feedbridge.discourse.posts.parse_topic_head`, for its post feed and `content=full` alike.

The field names are those of core's serializers: `TopicListSerializer` (`topic_list.topics`,
`more_topics_url`, present only when the page is full), `TopicListItemSerializer` < `ListableTopicSerializer`
< `BasicTopicSerializer` (`id`, `title`, `slug`, `posts_count`, `reply_count`, `created_at`,
`last_posted_at`, `bumped_at`, `pinned`, `excerpt` (only for pinned topics), `image_url`, `visible`, `archetype`,
`category_id`, `tags`, `posters`), `TopicPosterSerializer` (`description`, `user_id`, the user sideloaded
in the top-level `users`). Nothing here trusts a type: a forum, a proxy or a plugin can answer anything,
and one malformed topic is skipped and counted (`Listing.skipped`), never the reason a feed fails.
"""

from __future__ import annotations

import html
import json
import logging
import re
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec

from feedbridge.discourse.fields import (
    MAX_ENCODED_SLUG,
    TAG,
    avatar_url,
    category_slug,
    html_text,
    kept_tags,
    leading_text,
    one_line,
    picture_url,
    topic_slug,
    user_link,
    utc,
)
from feedbridge.discourse.listing import MAX_TEXT_CHARS, MAX_TOPICS
from feedbridge.errors import NotAListError
from feedbridge.models import Category, Listing, Topic

log = logging.getLogger(__name__)

_EXPECTED = 'expected a Discourse topic list in JSON ({"topic_list": {"topics": [...]}})'
_EXPECTED_CATEGORIES = 'expected a Discourse categories list in JSON ({"category_list": {"categories": [...]}})'

MAX_TOPIC_CHARS = 8 * 1024 * 1024
"""A `/t/ID.json` page carries up to 20 cooked posts (HTML, up to ~32k characters of source each) plus
suggested topics: larger than a Markdown page, still far from this."""

MAX_ID = 10**18
MAX_CATEGORIES = 500
MAX_DESCRIPTION_CHARS = 500


class _Malformed(Exception):
    """One topic that cannot become a `Topic`: skipped and counted, never raised to callers."""


def load_json(text: str | bytes, max_chars: int, error: type[ValueError], expected: str) -> dict[str, Any]:
    """The top-level JSON object, or `error` saying what came instead (too large, HTML, not JSON, not an object).

    The decoder itself is the bound on the work: it is linear in the text, and a document nested deeper
    than the interpreter's recursion limit raises RecursionError, which is refused here like any other
    broken text rather than escaping as a crash. msgspec reads the text; what it refuses and Python's
    `json` reads (`Infinity`, `NaN`, a lone surrogate escape: one odd topic's field, which must cost that
    topic at most, never the page) is read again by `json.loads`, and every string of what it read has its
    lone surrogates replaced (`_without_surrogates`).
    """
    head = leading_text(text, max_chars, error, expected)
    lowered = head[:256].lower()
    if lowered.startswith(("<!doctype", "<html", "<?xml", "<head", "<body")) or "<html" in lowered:
        raise error(f"{expected}, got an HTML document (a login page or an error page?)")
    if head[0] != "{":
        raise error(f"{expected}, got text starting {head[:60]!r}")
    try:
        try:
            # bench row 3, "parse a 30-topic JSON list page": msgspec decodes in about a third of json.loads' time.
            data = msgspec.json.decode(head)
        except msgspec.DecodeError:
            data = _without_surrogates(json.loads(head))
    except RecursionError:  # json.loads', or `_without_surrogates`' over what it read
        raise error(f"{expected}, got JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and int() refusing a number of over 4300 digits
        raise error(f"{expected}, got text that is not valid JSON ({str(exc)[:100]})") from None
    if not isinstance(data, dict):
        raise error(f"{expected}, got a JSON {type(data).__name__}")
    return data


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_surrogates(value: Any) -> Any:
    """`value` as `json.loads` gave it, with each lone surrogate in its strings (keys too) made U+FFFD.

    `json.loads` keeps a lone surrogate escape (`"a\\ud800b"`; a valid pair it joins into one character),
    and such a string has no UTF-8 form: every model field that held one made whatever encodes it raise
    (the `.html` view's bytes, nh3 sanitizing a post, the Redis codec), a 500 far from this parser. Replaced
    here, where the text is read, no model ever holds one, and the reader sees where the forum's text was
    broken. The walk recurses once per level of nesting, as `json.loads` does to read it, so the interpreter's
    recursion limit bounds it as it bounds the parse: a document too deep for it raises RecursionError, which
    `load_json` refuses as nested too deeply. It runs only on the rare documents msgspec refused, in time
    linear in what they hold.
    """
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_surrogates(key): _without_surrogates(item) for key, item in value.items()}
    return value


def _describe(data: dict[str, Any], expected: str) -> str:
    """What a JSON object that is not the expected one says: Discourse's `{"errors": [...]}` answers
    (a private category, a deleted topic, a rate limit) are quoted so the user sees the forum's reason."""
    errors = data.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], str):
        return f"{expected}, got the forum's error: {errors[0][:200]!r}"
    if isinstance(data.get("error"), str):
        return f"{expected}, got the forum's error: {data['error'][:200]!r}"
    keys = ", ".join(repr(str(key)[:40]) for key in list(data)[:5])  # a forum's key may be megabytes long
    return f"{expected}, got a JSON object with keys {keys}" if keys else f"{expected}, got an empty JSON object"


def parse_json_listing(text: str | bytes, *, base_url: str, source_url: str | None = None,
                       archetype: str = "regular") -> Listing:
    """Parse one page of a JSON topic list into the `Listing` the Markdown parser would give.

    `base_url` is the forum's root (with its subfolder, if any): JSON lists carry only relative paths.
    `source_url` is where the page was fetched from; its `?page=N` is the page number. `archetype` is the
    kind of topic kept: `private_message` for a member's own messages (`feedbridge.feeds.members.personal`).
    """
    base = base_url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise NotAListError(f"{_EXPECTED}: the forum's base URL {base_url!r} is not an http(s) URL")
    data = load_json(text, MAX_TEXT_CHARS, NotAListError, _EXPECTED)
    topic_list = data.get("topic_list")
    if not isinstance(topic_list, dict):
        raise NotAListError(_describe(data, _EXPECTED))
    raw_topics = topic_list.get("topics", [])
    if not isinstance(raw_topics, list):
        raise NotAListError(f"{_EXPECTED}, got a topic_list whose topics are a JSON {type(raw_topics).__name__}")
    users = _users(data.get("users"))

    if len(raw_topics) > MAX_TOPICS:  # see MAX_TOPICS: the first ones are kept
        log.warning("%s holds %d topics; reading the first %d", source_url or "a list page", len(raw_topics),
                    MAX_TOPICS)
    topics: list[Topic] = []
    skipped = 0
    for raw in raw_topics[:MAX_TOPICS]:
        try:
            topic = _topic(raw, base, users, archetype)
        except _Malformed:
            skipped += 1
            continue
        if topic is not None:
            topics.append(topic)
    if skipped and not topics:
        raise NotAListError(f"{_EXPECTED}: all {skipped} topics are malformed")
    if skipped:
        log.warning("skipped %d malformed topic(s) in %s", skipped, source_url or "list")
    title = topic_list.get("title")
    return Listing(
        title=title.strip() if isinstance(title, str) else "",
        base_url=base,
        dialect="json",
        topics=tuple(topics),
        url=source_url,
        page=_page_number(source_url),
        next_page_url=_on_forum(topic_list.get("more_topics_url"), base),
        skipped=skipped,
    )


_User = tuple[str, object]
"""A sideloaded user: their username, and their `avatar_template` as sent (`fields.avatar_url` reads it)."""


def _users(users: object) -> dict[int, _User]:
    """The sideloaded `users[]` by id; entries of the wrong shape are left out."""
    if not isinstance(users, list):
        return {}
    found: dict[int, _User] = {}
    for user in users:
        if isinstance(user, dict):
            user_id, username = user.get("id"), user.get("username")
            if type(user_id) is int and isinstance(username, str) and username.strip():
                found[user_id] = (username.strip(), user.get("avatar_template"))
    return found


def _topic(raw: object, base: str, users: dict[int, _User], kept: str = "regular") -> Topic | None:
    """One list item as a `Topic`; None for a topic the list shows but a feed must not (unlisted, a
    private message or another archetype); `_Malformed` for one without a usable id or title."""
    if not isinstance(raw, dict):
        raise _Malformed
    # `unicode_title`: the title with its emoji as characters, which core sends when it has a `:shortcode:`
    # (`ListableTopicSerializer#include_unicode_title?`), as the forum shows it and a topic's post feed names it
    topic_id, title, emoji = raw.get("id"), raw.get("title"), raw.get("unicode_title")
    if isinstance(emoji, str) and emoji.strip():
        title = emoji
    if type(topic_id) is not int or not 0 < topic_id < MAX_ID:
        raise _Malformed
    if not isinstance(title, str):
        fancy = raw.get("fancy_title")
        if not isinstance(fancy, str):
            raise _Malformed
        title = html.unescape(fancy)
    if raw.get("visible") is False:
        return None
    archetype = raw.get("archetype", "regular")
    if archetype != kept:
        return None
    author, avatar = _original_poster(raw.get("posters"), users) or (None, None)
    last_posted = _moment(raw.get("last_posted_at")) or _moment(raw.get("bumped_at"))
    category_id = raw.get("category_id")
    return Topic(
        id=topic_id,
        title=title.strip(),
        url=f"{base}/t/{topic_slug(raw.get('slug'))}/{topic_id}",  # core's `Topic#url`
        author=author,
        author_url=user_link(base, author),
        replies=_replies(raw.get("posts_count"), raw.get("reply_count")),
        last_posted_at=last_posted,
        bumped_at=_moment(raw.get("bumped_at")),
        excerpt=_excerpt(raw.get("excerpt")),
        created_at=_moment(raw.get("created_at")),
        tags=tag_names(raw.get("tags")),
        category_id=category_id if type(category_id) is int else None,
        likes=_count(raw.get("like_count")),
        views=_count(raw.get("views")),
        # core: app/serializers/listable_topic_serializer.rb#pinned (PinnedCheck: pinned for an anonymous reader)
        pinned=raw.get("pinned") if type(raw.get("pinned")) is bool else None,
        # core: app/serializers/listable_topic_serializer.rb#image_url (Topic#image_url, through UrlHelper.cook_url)
        image_url=picture_url(raw.get("image_url"), base),
        # core: app/serializers/basic_user_serializer.rb#avatar_template (User#avatar_template_url)
        author_avatar=avatar_url(avatar, base),
    )


def _count(value: object) -> int | None:
    return value if type(value) is int and 0 <= value < MAX_ID else None


def _original_poster(posters: object, users: dict[int, _User]) -> _User | None:
    """The topic's author (their username and avatar template): the poster described as "Original Poster",
    else the first one.

    The description is translated on forums in other languages ("原始发帖人"), and core always puts the
    original poster first, so the first poster is the right fallback. A poster whose user is not in
    `users[]` (a deleted account) gives no author rather than a wrong one.
    """
    if not isinstance(posters, list):
        return None
    entries = [poster for poster in posters if isinstance(poster, dict)]
    if not entries:
        return None
    original = next((p for p in entries if _is_original(p.get("description"))), entries[0])
    user_id = original.get("user_id")
    if type(user_id) is int and user_id in users:
        return users[user_id]
    user = original.get("user")  # some plugins and proxies embed the user instead of sideloading it
    if not isinstance(user, dict):
        return None
    name = user.get("username")
    return (name.strip(), user.get("avatar_template")) if isinstance(name, str) and name.strip() else None


def _is_original(description: object) -> bool:
    return isinstance(description, str) and "Original Poster" in description


def _replies(posts_count: object, reply_count: object) -> int | None:
    """Replies as forum readers see them, posts_count - 1 (Discourse's own "Replies" column).

    `reply_count` is not that number: core counts only posts that reply to another post there (the real
    captures show posts_count 4 with reply_count 1, and 4 with 9), so it is used only when posts_count
    is missing.
    """
    if type(posts_count) is int and 0 < posts_count < MAX_ID:
        return posts_count - 1
    if type(reply_count) is int and 0 <= reply_count < MAX_ID:
        return reply_count
    return None


def _moment(value: object) -> datetime | None:
    return utc(value) if isinstance(value, str) and len(value) < 64 else None


def _excerpt(value: object) -> str | None:
    """Plain text like the Markdown parser's excerpts: core's excerpt is HTML (entities, the odd tag)."""
    return html_text(value) if isinstance(value, str) else None


def tag_names(value: object) -> tuple[str, ...]:
    """Tag names, from strings (releases before 2025) or `{id, name, slug}` objects (newer).

    The name, not the slug: a CJK tag's slug is often empty.
    """
    if not isinstance(value, list):
        return ()
    names = (tag.get("name") if isinstance(tag, dict) else tag for tag in value)
    return kept_tags(name for name in names if isinstance(name, str))


def _on_forum(url: object, base: str) -> str | None:
    """`more_topics_url` made absolute, or None unless it is a path on the forum (or a URL of its origin).

    Core writes it relative to the host, with the subfolder of a subfolder install already in it;
    older releases may leave the subfolder out, so it is added when missing.
    """
    if not isinstance(url, str) or not url.strip():
        return None
    url = url.strip()
    parts = urlsplit(base)
    origin = f"{parts.scheme}://{parts.netloc}"
    if url.startswith(("http://", "https://")):
        return url if url == origin or url.startswith(origin + "/") else None
    if not url.startswith("/") or url.startswith("//") or any(c in url for c in " \t\r\n\\"):
        return None
    prefix = parts.path.rstrip("/")
    return origin + url if not prefix or url.startswith(prefix + "/") else base + url


def _page_number(source_url: str | None) -> int:
    if not source_url:
        return 0
    values = parse_qs(urlsplit(source_url).query).get("page")
    if values and values[0].isascii() and values[0].isdigit() and len(values[0]) < 7:
        return int(values[0])
    return 0


def parse_json_categories(text: str | bytes) -> tuple[Category, ...]:
    """Categories of `/categories.json` in page order, each id once, subcategories after their parent.

    Lenient like the Markdown directory parser: text that is not a directory gives an empty tuple (the
    front page then offers a free-text category). A subcategory's `slugs` is its parent's path and its own
    slug ("hardware/gpu"), found through `parent_category_id`. Core (app/models/category_list.rb
    `CategoryList#find_categories`) lists top-level categories only, with `subcategory_ids`, unless asked
    `include_subcategories=true`: then each lists its children in `subcategory_list`, and each child its own
    (core nests three deep), read here in that order. A forum of over 1,000 categories pages its directory
    instead, and lists up to five children of each category flat beside them (`directory_goes_on`).
    Current releases give each category's `subcategory_ids`, even of children the page leaves out: that is
    what spares `exclude_category=` a lookup of the level below a leaf.
    """
    try:
        data = load_json(text, MAX_TEXT_CHARS, NotAListError, _EXPECTED_CATEGORIES)
    except NotAListError as exc:
        log.info("not a categories list: %s", exc)
        return ()
    category_list = data.get("category_list")
    raw = category_list.get("categories") if isinstance(category_list, dict) else None
    if not isinstance(raw, list):
        return ()
    entries = _with_children(raw, NESTING)
    slugs = {e["id"]: slug for e in entries if type(e.get("id")) is int and isinstance(e.get("slug"), str)
             and (slug := category_slug(e["slug"][:MAX_ENCODED_SLUG])) is not None}
    parents = {e["id"]: e.get("parent_category_id") for e in entries if type(e.get("id")) is int}
    found: dict[int, Category] = {}
    for entry in entries:
        category_id = entry.get("id")
        if type(category_id) is not int or category_id in found or not 0 < category_id < MAX_ID:
            continue
        if category_id not in slugs or len(found) >= MAX_CATEGORIES:
            continue
        path = _category_path(category_id, slugs, parents)
        name = entry.get("name")
        name = one_line(name) if isinstance(name, str) else ""
        found[category_id] = Category(name or path, path, category_id, _description(entry),
                                      _subcategory_ids(entry.get("subcategory_ids")))
    return tuple(found.values())


NESTING = 3
"""Levels of `subcategory_list` read: core nests categories three deep (`max_category_nesting`)."""
CATEGORIES_PER_PAGE = 20
"""core's `CategoryList::CATEGORIES_PER_PAGE`: a paged directory's top-level categories per page."""


def _with_children(items: list[Any], levels: int) -> list[dict[str, Any]]:
    """Each category of `items`, then its `subcategory_list`'s, `levels` deep; at most MAX_CATEGORIES."""
    entries: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, dict) and len(entries) < MAX_CATEGORIES:
            entries.append(item)
            nested = item.get("subcategory_list")
            if levels > 1 and isinstance(nested, list):
                entries.extend(_with_children(nested, levels - 1)[:MAX_CATEGORIES - len(entries)])
    return entries


def directory_goes_on(text: str | bytes) -> bool:
    """Whether `/categories.json` has a next page: a forum of over 1,000 categories pages it
    (`CategoryList#paginate_results?`, `CATEGORIES_PER_PAGE` top-level categories a page, each followed by up
    to five children, flat, and no `subcategory_list`); any other answers every category on page 1 and an empty
    page 2. A full page with no `subcategory_list` anywhere may be either: the next page tells, at the cost of
    one request."""
    try:
        data = load_json(text, MAX_TEXT_CHARS, NotAListError, _EXPECTED_CATEGORIES)
    except NotAListError:
        return False
    category_list = data.get("category_list")
    raw = category_list.get("categories") if isinstance(category_list, dict) else None
    if not isinstance(raw, list):
        return False
    entries = [item for item in raw if isinstance(item, dict)]
    if any(isinstance(item.get("subcategory_list"), list) and item["subcategory_list"] for item in entries):
        return False  # include_subcategories answered in full: not paged
    return sum(item.get("parent_category_id") is None for item in entries) >= CATEGORIES_PER_PAGE


def _subcategory_ids(value: object) -> tuple[int, ...] | None:
    """The ids as listed, or None (unknown: the level below must be asked for) when the field is missing or
    any item is not an id, since a partial list would hide the children it lost."""
    if not isinstance(value, list) or len(value) > MAX_CATEGORIES:
        return None
    if not all(type(item) is int and 0 < item < MAX_ID for item in value):
        return None
    return tuple(dict.fromkeys(value))


def _category_path(category_id: int, slugs: dict[int, str], parents: dict[int, object]) -> str:
    """`parent/child` (up to core's three levels). A parent that is not in the list (a private one), or whose slug
    is unusable, leaves the child's own slug, which core also answers to."""
    chain = [slugs[category_id]]
    current = category_id
    for _ in range(2):
        parent = parents.get(current)
        if type(parent) is not int or parent == category_id or parent not in slugs:  # not listed, or unusable
            break
        chain.append(slugs[parent])
        current = parent
    return "/".join(reversed(chain))


def _description(entry: dict[str, Any]) -> str:
    """Plain text: `description_text` (newer), else the HTML `description_excerpt`/`description`."""
    for key in ("description_text", "description_excerpt", "description"):
        value = entry.get(key)
        if isinstance(value, str) and value.strip():
            text = value if key == "description_text" else html.unescape(TAG.sub(" ", value))
            return one_line(text)[:MAX_DESCRIPTION_CHARS]
    return ""


# What a member's own documents (discourse/personal.py) are read with, as the lists' are.
moment, plain_excerpt, on_forum = _moment, _excerpt, _on_forum
