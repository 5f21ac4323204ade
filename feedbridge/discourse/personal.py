"""Parse what only a signed-in member reads: their notifications, their bookmarks, and who they are.

Each document becomes a `Listing` of `Topic`s, one per notification or bookmark, read and filtered as every
list is, so formats, `author=`, `q=`, `limit=` and the `.html` view work as for every feed; each carries the
id of its row (`Topic.personal_id`), which its entry takes. The field names are core's:

- `/notifications.json` (app/controllers/notifications_controller.rb#index without `recent`, which does not
  bump the member's last seen notification; 60 a page, `offset=`), each one a `NotificationSerializer`
  (app/serializers/notification_serializer.rb): `id`, `notification_type` (app/models/notification.rb
  `Notification.types`), `created_at`, `topic_id`, `post_number`, `slug`, `fancy_title`, `data` (its
  `display_username` or `original_username`, `topic_title`, `badge_name`, `count`, ...), `read`, and
  `acting_user_avatar_template` where the notification has an acting user.
- `/u/USER/bookmarks.json` (app/controllers/users_controller.rb#bookmarks: `{"bookmarks": []}` when there are
  none, else `user_bookmark_list.bookmarks`, 20 a page, `more_bookmarks_url` when the page is full), each a
  `UserBookmarkBaseSerializer` (app/serializers/user_bookmark_base_serializer.rb: `id`, `created_at`,
  `name`, `title`, `fancy_title`, `excerpt`, `bookmarkable_type`, `bookmarkable_url`, `user`: a
  `BasicUserSerializer`, with its `avatar_template`) with the
  post's `topic_id`, `linked_post_number` and `slug` (user_post_topic_bookmark_base_serializer.rb).
- `/session/current.json` (app/controllers/session_controller.rb#current, `CurrentUserSerializer` under
  `current_user`): the key's owner, `id` and `username`.

Nothing here trusts a type, as in `json_pages`: a malformed item is skipped and counted.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from feedbridge.discourse.fields import MAX_USERNAME, avatar_url, topic_slug, user_link
from feedbridge.discourse.json_pages import MAX_ID, load_json, moment, on_forum, plain_excerpt
from feedbridge.discourse.listing import MAX_TEXT_CHARS, MAX_TOPICS
from feedbridge.errors import NotAListError
from feedbridge.models import Listing, Topic

MAX_FIELD_CHARS = 1000
NOTIFICATIONS_PAGE = 60
"""core: NotificationsController::INDEX_LIMIT, the most a page holds (and what a full page holds)."""

# app/models/notification.rb `Notification.types`, and what each entry's title says happened.
_SAID: dict[int, str] = {
    1: "{who} mentioned you in “{topic}”",
    2: "{who} replied to “{topic}”",
    3: "{who} quoted you in “{topic}”",
    4: "{who} edited your post in “{topic}”",
    5: "{who} liked your post in “{topic}”",
    6: "{who} sent you a message: “{topic}”",
    7: "{who} invited you to a message: “{topic}”",
    8: "{who} accepted your invitation",
    9: "{who} posted in “{topic}”",
    10: "{who} moved a post to “{topic}”",
    11: "{who} linked to your post from “{topic}”",
    12: "You were granted the badge “{badge}”",
    13: "{who} invited you to “{topic}”",
    15: "{who} mentioned {group} in “{topic}”",
    16: "{count} messages in your {group} inbox",
    17: "{who} started “{topic}”",
    18: "Reminder: “{topic}”",
    19: "{who} liked {count} of your posts",
    20: "Your post in “{topic}” was approved",
    24: "Bookmark reminder: “{topic}”",
    25: "{who} reacted to your post in “{topic}”",
}
_SOMEONE = "Someone"


@dataclass(frozen=True, slots=True)
class Owner:
    """The member a key belongs to (`/session/current.json`)."""

    user_id: int
    username: str


def parse_current_user(text: str | bytes) -> Owner:
    """The key's owner; NotAListError when the answer is not a `current_user`."""
    expected = 'expected the signed-in user in JSON ({"current_user": {"id": ..., "username": ...}})'
    data = load_json(text, 256 * 1024, NotAListError, expected)
    user = data.get("current_user")
    if not isinstance(user, dict):
        raise NotAListError(expected)
    user_id, username = user.get("id"), user.get("username")
    if type(user_id) is not int or not 0 < user_id < MAX_ID or not _name(username):
        raise NotAListError(expected)
    assert isinstance(username, str)
    return Owner(user_id, username.strip())


def parse_notifications(text: str | bytes, *, base_url: str, source_url: str | None = None) -> Listing:
    """One page of `/notifications.json` as a `Listing` (see the module docstring); `next_page_url` is the
    forum's `load_more_notifications` while the page is full and more are counted."""
    expected = 'expected Discourse notifications in JSON ({"notifications": [...]})'
    data = load_json(text, MAX_TEXT_CHARS, NotAListError, expected)
    base = base_url.rstrip("/")
    items = data.get("notifications")
    if not isinstance(items, list):
        raise NotAListError(expected)
    topics, skipped = _each(items, lambda raw: _notification(raw, base))
    total = data.get("total_rows_notifications")
    full = len(items) >= NOTIFICATIONS_PAGE and type(total) is int and total > len(items)
    more = data.get("load_more_notifications") if full else None
    return Listing("notifications", base, "json", topics, source_url, 0, on_forum(more, base), None, skipped)


def parse_bookmarks(text: str | bytes, *, base_url: str, source_url: str | None = None) -> Listing:
    """One page of `/u/USER/bookmarks.json` as a `Listing`; core answers `{"bookmarks": []}` when there are none."""
    expected = 'expected Discourse bookmarks in JSON ({"user_bookmark_list": {"bookmarks": [...]}})'
    data = load_json(text, MAX_TEXT_CHARS, NotAListError, expected)
    base = base_url.rstrip("/")
    listed = data.get("user_bookmark_list", data)
    items = listed.get("bookmarks") if isinstance(listed, dict) else None
    if not isinstance(items, list):
        raise NotAListError(expected)
    topics, skipped = _each(items, lambda raw: _bookmark(raw, base))
    more = on_forum(listed.get("more_bookmarks_url"), base) if isinstance(listed, dict) else None
    return Listing("bookmarks", base, "json", topics, source_url, 0, more, None, skipped)


def _each(items: list[Any], made: Callable[[Any], Topic | None]) -> tuple[tuple[Topic, ...], int]:
    topics: list[Topic] = []
    skipped = 0
    for raw in items[:MAX_TOPICS]:
        topic = made(raw) if isinstance(raw, dict) else None
        if topic is None:
            skipped += 1
        else:
            topics.append(topic)
    if skipped and not topics:
        raise NotAListError(f"all {skipped} items of the page are malformed")
    return tuple(topics), skipped


def _notification(raw: dict[str, Any], base: str) -> Topic | None:
    note_id, kind, created = raw.get("id"), raw.get("notification_type"), moment(raw.get("created_at"))
    if type(note_id) is not int or not 0 < note_id < MAX_ID or type(kind) is not int or created is None:
        return None
    data = raw.get("data") if isinstance(raw.get("data"), dict) else {}
    assert isinstance(data, dict)
    who = _text(data.get("display_username")) or _text(data.get("original_username")) or _text(data.get("username"))
    topic_title = _text(data.get("topic_title")) or html.unescape(_text(raw.get("fancy_title")) or "")
    group = _text(data.get("group_name"))
    count = data.get("count") if type(data.get("count")) is int else data.get("inbox_count")
    said = _SAID.get(kind, "A notification about “{topic}”" if topic_title else "A notification")
    title = said.format(who=who or _SOMEONE, topic=topic_title or "a topic", badge=_text(data.get("badge_name")) or "",
                        group=f"@{group}" if group else "a group", count=count if type(count) is int else "some")
    topic_id, number = raw.get("topic_id"), raw.get("post_number")
    if type(topic_id) is int and 0 < topic_id < MAX_ID:
        url = f"{base}/t/{topic_slug(raw.get('slug'))}/{topic_id}"
        if type(number) is int and 0 < number < MAX_ID:
            url += f"/{number}"
    elif kind == 12 and type(data.get("badge_id")) is int:
        url = f"{base}/badges/{data['badge_id']}/{topic_slug(data.get('badge_slug'))}"
    else:
        url = f"{base}/my/notifications"
    return Topic(id=topic_id if type(topic_id) is int and 0 < topic_id < MAX_ID else note_id, title=title, url=url,
                 author=who, author_url=user_link(base, who),
                 author_avatar=avatar_url(raw.get("acting_user_avatar_template"), base),
                 last_posted_at=created, created_at=created,
                 personal_id=f"{base}/my/notifications#{note_id}")


def _bookmark(raw: dict[str, Any], base: str) -> Topic | None:
    mark_id, created = raw.get("id"), moment(raw.get("created_at"))
    title = _text(raw.get("title")) or html.unescape(_text(raw.get("fancy_title")) or "")
    if type(mark_id) is not int or not 0 < mark_id < MAX_ID or created is None or not title:
        return None
    topic_id, number = raw.get("topic_id"), raw.get("linked_post_number")
    user = raw.get("user") if isinstance(raw.get("user"), dict) else {}
    assert isinstance(user, dict)
    author = _text(user.get("username"))
    if type(topic_id) is int and 0 < topic_id < MAX_ID:
        url = f"{base}/t/{topic_slug(raw.get('slug'))}/{topic_id}"
        if type(number) is int and 1 < number < MAX_ID:
            url += f"/{number}"
    else:  # a bookmark of something else (a chat message): its own URL when it is one of the forum's
        url = on_forum(raw.get("bookmarkable_url"), base) or f"{base}/my/activity/bookmarks"
    name = _text(raw.get("name"))
    excerpt = plain_excerpt(raw.get("excerpt"))
    return Topic(id=topic_id if type(topic_id) is int and 0 < topic_id < MAX_ID else mark_id,
                 title=f"{title} ({name})" if name else title, url=url, author=author,
                 author_url=user_link(base, author), author_avatar=avatar_url(user.get("avatar_template"), base),
                 last_posted_at=moment(raw.get("updated_at")) or created,
                 created_at=created, excerpt=excerpt, personal_id=f"{base}/my/activity/bookmarks#{mark_id}")


def _text(value: object) -> str | None:
    return value.strip()[:MAX_FIELD_CHARS] if isinstance(value, str) and value.strip() else None


def _name(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value.strip()) <= MAX_USERNAME


