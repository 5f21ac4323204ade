"""Parse Discourse's JSON posts: a topic's head (`/t/ID.json`, also what `content=full` reads of a topic listed
as JSON), the ids of a mega topic's end
(`/t/ID/post_ids.json?post_number=N`), a batch of its posts (`/t/ID/posts.json?post_ids[]=`), the forum's
latest posts (`/posts.json`) and a user's activity (`/user_actions.json?filter=4,5`).

Field names are those of core's serializers: `TopicViewSerializer` (`id`, `title`, `unicode_title`, `slug`,
`category_id`, `created_at`, `tags`, `post_stream.posts` (the first 20),
`post_stream.stream` (every post id, in order), or for a mega topic `post_stream.isMegaTopic` and
`post_stream.lastId` with `highest_post_number`), `PostSerializer` < `BasicPostSerializer` (`id`, `username`,
`created_at`, `updated_at`, `cooked`, `post_number`, `post_type`, `topic_id`, `topic_slug`, `topic_title`
and `category_id` where the list adds titles, `hidden`, `deleted_at`, `user_deleted`, `action_code`) and
`UserActionSerializer` (`action_type`, `created_at`, `excerpt`, `topic_id`, `post_number`, `post_id`, `slug`,
`title`, `username`, `acting_username`, `deleted`, `hidden`, `post_type`, `category_id`).

Only what people wrote and anyone can read becomes a `Post`: small actions ("closed", "pinned": post_type
3, empty cooked), whispers (4), deleted, withdrawn and hidden posts (whose cooked, for anonymous readers, is
a placeholder) are left out here, so no later stage can show them. Nothing trusts a type: one malformed
post is skipped and counted; an answer that is not the expected document, or whose posts are all
malformed, raises `NotPostsError` saying what came instead. Every list is cut to a bound first, so a
hostile answer costs its parse and no more.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeGuard

from feedbridge.discourse.fields import MAX_URL_CHARS, html_text, utc
from feedbridge.discourse.json_pages import MAX_TOPIC_CHARS, load_json, tag_names
from feedbridge.errors import NotATopicError, NotPostsError
from feedbridge.models import Post, TopicHead

log = logging.getLogger(__name__)

MAX_ID = 10**18
MAX_POSTS = 200
"""Posts read from one answer: a topic's head has 20, `/posts.json` 50, a user's actions 30 a page, and a
batch what was asked for (at most `feeds.sources.post_feeds.BATCH`)."""
MAX_STREAM = 200_000
"""Post ids read from a topic's `post_stream.stream`: core lists every post, and only its end is used."""
MAX_TITLE_CHARS = 1000
MAX_NAME_CHARS = 100
MAX_EXCERPT_CHARS = 4000
"""Core's excerpts are 300 characters of text; more is cut before the tags are stripped."""
REGULAR, MODERATOR_ACTION = 1, 2
_READABLE_TYPES = (REGULAR, MODERATOR_ACTION)
_NEW_TOPIC, _REPLY = 4, 5


_EXPECTED_TOPIC = 'expected a Discourse topic in JSON ({"id": ..., "post_stream": {"posts": [...], "stream": [...]}})'
_EXPECTED_IDS = 'expected a Discourse topic\'s post ids in JSON ({"post_ids": [...]})'
_EXPECTED_BATCH = 'expected a Discourse post batch in JSON ({"post_stream": {"posts": [...]}})'
_EXPECTED_LATEST = 'expected Discourse\'s latest posts in JSON ({"latest_posts": [...]})'
_EXPECTED_ACTIONS = 'expected a Discourse user\'s actions in JSON ({"user_actions": [...]})'


class _Malformed(Exception):
    """One post that cannot become a `Post`: skipped and counted."""


def parse_topic_head(text: str | bytes) -> TopicHead:
    """One `/t/ID.json` page, for its post feed and `content=full` alike; `NotATopicError` for what is no topic
    at all. A topic whose stream or posts are not what core sends still gives what `content=full` reads (its
    creation date, tags and first post, leniently: a first post with no id is still the first post), and
    says in `unreadable` why it gives a post feed nothing."""
    data = load_json(text, MAX_TOPIC_CHARS, NotATopicError, _EXPECTED_TOPIC)
    topic_id, stream = data.get("id"), data.get("post_stream")
    if not _is_id(topic_id) or not isinstance(stream, dict):
        raise NotATopicError(_describe(data, _EXPECTED_TOPIC))
    title = _title(data)
    slug = data.get("slug")
    slug = slug.strip() if isinstance(slug, str) and 0 < len(slug.strip()) <= MAX_TITLE_CHARS else "topic"
    category_id = data.get("category_id")
    category_id = category_id if _is_id(category_id) else None
    raw_posts = stream.get("posts")
    first = raw_posts[0] if isinstance(raw_posts, list) and raw_posts and isinstance(raw_posts[0], dict) else {}
    # A first post hidden by flags sends a placeholder for its text (`cooked_hidden`): no content for a feed.
    cooked = first.get("cooked") if first.get("post_number", 1) == 1 and _readable(first) else None
    created = _moment(data.get("created_at")) or (_moment(first.get("created_at")) if cooked is not None else None)
    head = TopicHead(id=topic_id, title=title, slug=slug, category_id=category_id, stream=(), posts=(),
                     created_at=created, tags=tag_names(data.get("tags")),
                     first_post_html=cooked if isinstance(cooked, str) else None)
    try:
        return _with_posts(head, data, stream)
    except NotPostsError as exc:
        return replace(head, unreadable=exc.message)


def _with_posts(head: TopicHead, data: dict[str, Any], stream: dict[str, Any]) -> TopicHead:
    """`head` with what its post feed reads: NotPostsError when the stream or the posts are not core's."""
    ids, last_id, highest = stream.get("stream"), None, None
    if ids is None and stream.get("isMegaTopic") is True:
        # core: app/serializers/concerns/post_stream_serializer_mixin.rb#post_stream: a topic of
        # TopicView::MEGA_TOPIC_POSTS_COUNT (lib/topic_view.rb) posts or more is sent without its stream, with
        # `isMegaTopic` and `lastId`; app/serializers/topic_view_serializer.rb adds `highest_post_number`.
        ids, last_id, highest = [], stream.get("lastId"), data.get("highest_post_number")
        if not _is_id(last_id) or not _is_id(highest):
            raise NotPostsError(f"{_EXPECTED_TOPIC}, got a mega topic's post_stream without its lastId or "
                                "highest_post_number")
    if not isinstance(ids, list):
        raise NotPostsError(f"{_EXPECTED_TOPIC}, got a post_stream whose stream is a JSON {type(ids).__name__}")
    ids = ids[-MAX_STREAM:]
    if not all(_is_id(i) for i in ids):
        raise NotPostsError(f"{_EXPECTED_TOPIC}, got a stream with something other than post ids in it")
    context = _Context(head.id, head.title, head.slug, head.category_id)
    read, skipped = _posts(_list(stream.get("posts"), _EXPECTED_TOPIC, "post_stream.posts"), context)
    return replace(
        head, stream=tuple(dict.fromkeys(ids)), posts=tuple(post for _, post in read if post is not None),
        read=tuple(read), skipped=skipped, last_id=last_id, highest_post_number=highest,
    )


def parse_post_ids(text: str | bytes) -> tuple[int, ...]:
    """`/t/ID/post_ids.json?post_number=N`: the ids of the topic's posts after post N, in stream order
    (core: app/controllers/topics_controller.rb#post_ids, what the client reads a mega topic's end with)."""
    data = load_json(text, MAX_TOPIC_CHARS, NotPostsError, _EXPECTED_IDS)
    ids = data.get("post_ids")
    if not isinstance(ids, list):
        raise NotPostsError(_describe(data, _EXPECTED_IDS))
    ids = ids[-MAX_STREAM:]
    if not all(_is_id(i) for i in ids):
        raise NotPostsError(f"{_EXPECTED_IDS}, got something other than post ids in it")
    return tuple(dict.fromkeys(ids))


def parse_post_batch(text: str | bytes, head: TopicHead) -> tuple[tuple[int, Post | None], ...]:
    """The posts of `/t/ID/posts.json?post_ids[]=…` as (post id, Post or None for an unreadable one); posts
    of another topic are dropped (an id can name any post of the forum)."""
    data = load_json(text, MAX_TOPIC_CHARS, NotPostsError, _EXPECTED_BATCH)
    stream = data.get("post_stream")
    if not isinstance(stream, dict):
        raise NotPostsError(_describe(data, _EXPECTED_BATCH))
    context = _Context(head.id, head.title, head.slug, head.category_id)
    read, _ = _posts(_list(stream.get("posts"), _EXPECTED_BATCH, "post_stream.posts"), context)
    return tuple(read)


def parse_latest_posts(text: str | bytes) -> tuple[tuple[int, Post | None], ...]:
    """`/posts.json`: (post id, Post or None) newest first, each with its topic's title and slug."""
    data = load_json(text, MAX_TOPIC_CHARS, NotPostsError, _EXPECTED_LATEST)
    if "latest_posts" not in data:
        raise NotPostsError(_describe(data, _EXPECTED_LATEST))
    read, _ = _posts(_list(data.get("latest_posts"), _EXPECTED_LATEST, "latest_posts"), None)
    return tuple(read)


def parse_user_actions(text: str | bytes) -> tuple[tuple[int, Post | None], ...]:
    """`/user_actions.json?filter=4,5`: each row's (topic id × 10⁶ + post number, Post or None). A new-topic
    row (action type 4) has no post id and stands for the topic's first post; rows carry an excerpt only."""
    data = load_json(text, MAX_TOPIC_CHARS, NotPostsError, _EXPECTED_ACTIONS)
    if "user_actions" not in data:
        raise NotPostsError(_describe(data, _EXPECTED_ACTIONS))
    rows = _list(data.get("user_actions"), _EXPECTED_ACTIONS, "user_actions")
    found: list[tuple[int, Post | None]] = []
    skipped = 0
    for raw in rows[:MAX_POSTS]:
        try:
            found.append(_action(raw))
        except _Malformed:
            skipped += 1
    if skipped and not found:
        raise NotPostsError(f"{_EXPECTED_ACTIONS}: all {skipped} rows are malformed")
    return tuple(found)


@dataclass(frozen=True, slots=True)
class _Context:
    """The topic a topic's posts belong to; None for lists whose posts name their own topic."""

    topic_id: int
    title: str
    slug: str
    category_id: int | None


def _posts(raw_posts: list[Any], context: _Context | None) -> tuple[list[tuple[int, Post | None]], int]:
    if len(raw_posts) > MAX_POSTS:
        log.warning("an answer holds %d posts; reading the first %d", len(raw_posts), MAX_POSTS)
    read: list[tuple[int, Post | None]] = []
    skipped = 0
    for raw in raw_posts[:MAX_POSTS]:
        try:
            read.append(_post(raw, context))
        except _Malformed:
            skipped += 1
    if skipped and not read:
        raise NotPostsError(f"expected Discourse posts: all {skipped} posts are malformed")
    return read, skipped


def _post(raw: object, context: _Context | None) -> tuple[int, Post | None]:
    if not isinstance(raw, dict):
        raise _Malformed
    post_id, number, topic_id = raw.get("id"), raw.get("post_number"), raw.get("topic_id")
    if context is not None and topic_id is None:
        topic_id = context.topic_id
    if not _is_id(post_id) or not _is_id(number) or not _is_id(topic_id):
        raise _Malformed
    if context is not None and topic_id != context.topic_id:
        return post_id, None
    cooked = raw.get("cooked")
    if not _readable(raw) or not isinstance(cooked, str) or not cooked.strip():
        return post_id, None
    category_id = raw.get("category_id")
    return post_id, Post(
        topic_id=topic_id, post_number=number, post_id=post_id,
        username=_name(raw.get("username")),
        created_at=_moment(raw.get("created_at")),
        updated_at=_moment(raw.get("updated_at")),
        cooked=cooked,
        topic_title=context.title if context else _title(raw, "topic_"),
        topic_slug=context.slug if context else _slug(raw.get("topic_slug")),
        category_id=context.category_id if context else category_id if _is_id(category_id) else None,
        avatar_template=_template(raw.get("avatar_template")),
    )


def _action(raw: object) -> tuple[int, Post | None]:
    if not isinstance(raw, dict):
        raise _Malformed
    action, topic_id, number = raw.get("action_type"), raw.get("topic_id"), raw.get("post_number")
    if action == _NEW_TOPIC and number is None:
        number = 1
    if action not in (_NEW_TOPIC, _REPLY) or not _is_id(topic_id) or not _is_id(number) or number >= 10**6:
        raise _Malformed
    key = topic_id * 10**6 + number
    post_type = raw.get("post_type")
    if (raw.get("deleted") is True or raw.get("hidden") is True
            or (post_type is not None and post_type not in _READABLE_TYPES)):
        return key, None
    post_id, category_id = raw.get("post_id"), raw.get("category_id")
    return key, Post(
        topic_id=topic_id, post_number=number, post_id=post_id if _is_id(post_id) else None,
        username=_name(raw.get("username")),
        created_at=_moment(raw.get("created_at")),
        updated_at=None,
        cooked=None,
        excerpt=_text(raw.get("excerpt")),
        topic_title=_title(raw),
        topic_slug=_slug(raw.get("slug")),
        category_id=category_id if _is_id(category_id) else None,
        avatar_template=_template(raw.get("avatar_template")),  # the user's, whose action it is (`username`)
    )


def _readable(raw: dict[str, Any]) -> bool:
    """Not a small action or whisper, not deleted, withdrawn or hidden (whose cooked is a placeholder)."""
    post_type = raw.get("post_type", REGULAR)
    return (post_type in _READABLE_TYPES and raw.get("deleted_at") is None and raw.get("user_deleted") is not True
            and raw.get("hidden") is not True and raw.get("cooked_hidden") is not True
            and not raw.get("action_code"))


def _list(value: object, expected: str, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise NotPostsError(f"{expected}, got {name} as a JSON {type(value).__name__}")
    return value


def _is_id(value: object) -> TypeGuard[int]:
    return type(value) is int and 0 < value < MAX_ID


def _title(raw: dict[str, Any], prefix: str = "") -> str:
    """`unicode_title` (emoji as characters) where core sends it, else `title`, else the HTML `fancy_title`."""
    for key in ("unicode_title", "title"):
        value = raw.get(prefix + key)
        if isinstance(value, str) and value.strip():
            return " ".join(value[:MAX_TITLE_CHARS].split())
    fancy = raw.get(prefix + "fancy_title") if not prefix else raw.get("topic_html_title")
    return _text(fancy) or "" if isinstance(fancy, str) else ""


def _slug(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and 0 < len(value.strip()) <= MAX_TITLE_CHARS else None


def _name(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and 0 < len(value.strip()) <= MAX_NAME_CHARS else None


def _template(value: object) -> str | None:
    """An `avatar_template` kept as sent, when it could be a picture's URL (`fields.avatar_url` checks the
    rest when the entry is made): a longer one is no URL a feed takes, and would be kept with every post."""
    return value if isinstance(value, str) and len(value) <= MAX_URL_CHARS else None


def _moment(value: object) -> datetime | None:
    return utc(value) if isinstance(value, str) and len(value) < 64 else None


def _text(value: object) -> str | None:
    """Plain text from core's HTML excerpts (entities, the odd tag)."""
    return html_text(value[:MAX_EXCERPT_CHARS]) if isinstance(value, str) else None


def _describe(data: dict[str, Any], expected: str) -> str:
    errors = data.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], str):
        return f"{expected}, got the forum's error: {errors[0][:200]!r}"
    keys = ", ".join(repr(str(key)[:40]) for key in list(data)[:5])
    return f"{expected}, got a JSON object with keys {keys}" if keys else f"{expected}, got an empty JSON object"
