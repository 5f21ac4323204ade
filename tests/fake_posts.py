"""Posts for the fake forum (tests/upstream.py): real-shaped `/t/ID.json`, `/t/ID/posts.json?post_ids[]=`,
`/posts.json` and `/user_actions.json` bodies, built the way core's serializers build them.

The keys are those of `TopicViewSerializer` (with `post_stream.posts`, the first `CHUNK_SIZE` posts, and
`post_stream.stream`, every post id), `PostSerializer` < `BasicPostSerializer` (with the `topic_title`,
`topic_html_title`, `category_id` and `raw` that `/posts.json` adds) and `UserActionSerializer`; values
that a feed never reads (avatars, flags, permissions) are there with plausible values so a parser is
tested against the whole document, not the part it reads.

`PostSite.standard()` is the site the tests read: topic 9446 has 446 posts, among them a small action,
a whisper, a hidden post, a withdrawn one, a deleted one and one moved in with an older date; topic 9003
(category 6) has 5 posts. `site.reply(topic_id, username)` adds a post, as a busy topic gets.

`PostSite.core()` adds the shapes of core's topics that a feed must read past (tests/test_posts_core.py):
a closed topic (`CLOSED`, its last slot the "closed" small action), one whose end mixes small actions and
whispers (`MIXED`), one ending in 150 small actions (`BOT`), and a mega topic (`MEGA`, 12,000 posts, served
without its stream). Its 12,000 posts are plain objects: building them takes about 40 ms and a topic view
of them about 10 ms, so nothing is generated lazily.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

CHUNK_SIZE = 20
MEGA_TOPIC_POSTS_COUNT = 10_000  # core: lib/topic_view.rb, TopicView::MEGA_TOPIC_POSTS_COUNT
CLOSED, MIXED, BOT, MEGA = 9500, 9600, 9700, 9777
MEGA_POSTS = 12_000
START = datetime(2026, 11, 1, tzinfo=UTC)
USERS = {"alice": 11, "bob": 12, "carol": 13, "zoë": 14}
REGULAR, MODERATOR_ACTION, SMALL_ACTION, WHISPER = 1, 2, 3, 4
HIDDEN_PLACEHOLDER = "<p>This post was flagged by the community and is temporarily hidden.</p>"
WITHDRAWN = "<p>(post withdrawn by author, will be automatically deleted in 24 hours unless flagged)</p>"


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass
class FakePost:
    id: int
    topic_id: int
    post_number: int
    username: str
    created_at: datetime
    cooked: str
    updated_at: datetime | None = None
    post_type: int = REGULAR
    hidden: bool = False
    deleted_at: datetime | None = None
    user_deleted: bool = False
    action_code: str | None = None
    reply_to_post_number: int | None = None


@dataclass
class FakeTopic:
    id: int
    title: str
    slug: str
    category_id: int
    posts: list[FakePost] = field(default_factory=list)
    unicode_title: str | None = None
    start: datetime = START

    @property
    def visible(self) -> list[FakePost]:
        """What an anonymous reader's stream holds: everything but deleted posts (core leaves whispers out
        too; they stay here, as a staff API key would see them, to show they never reach a feed)."""
        return [p for p in self.posts if p.deleted_at is None]


class PostSite:
    def __init__(self) -> None:
        self.topics: dict[int, FakeTopic] = {}
        self.next_id = 50_000

    @classmethod
    def standard(cls) -> PostSite:
        site = cls()
        big = site.topic(9446, "Dynamic shapes: the long thread", "dynamic-shapes-the-long-thread", 5)
        names = list(USERS)
        for n in range(1, 447):
            site.add(big, names[n % 3], f"<p>Post {n} of the long thread, about symint number {n}.</p>")
        special = {
            200: {"post_type": SMALL_ACTION, "cooked": "", "action_code": "closed.enabled", "username": "alice"},
            300: {"post_type": WHISPER, "cooked": "<p>staff whisper secretword</p>"},
            440: {"hidden": True, "cooked": HIDDEN_PLACEHOLDER},
            441: {"user_deleted": True, "cooked": WITHDRAWN},
            442: {"deleted_at": START + timedelta(days=30)},
        }
        for number, values in special.items():
            post = big.posts[number - 1]
            for key, value in values.items():
                setattr(post, key, value)
        big.posts[444].created_at = START  # post 445 was moved in from an older topic: it keeps its time
        big.posts[445].cooked = ('<p>The last post, with <a href="/t/other/1">a relative link</a>, '
                                 '<img src="/uploads/x.png" alt="x"> and <script>alert(1)</script>.</p>')
        big.posts[445].updated_at = big.posts[445].created_at + timedelta(hours=5)
        small = site.topic(9003, "Inductor: small question ☃", "inductor-small-question", 6,
                           START + timedelta(days=40))
        small.unicode_title = "Inductor: small question ☃"
        for n in range(1, 6):
            site.add(small, ["bob", "alice", "zoë", "bob", "carol"][n - 1], f"<p>Small thread post {n} on inductor.</p>")
        return site

    @classmethod
    def core(cls) -> PostSite:
        """The standard site and the topics of core's shapes (see the module docstring)."""
        site = cls.standard()
        names = list(USERS)
        closed = site.topic(CLOSED, "RFC: retire the old tracer", "rfc-retire-the-old-tracer", 5,
                            START + timedelta(days=50))
        for n in range(1, 9):
            site.add(closed, names[n % 4], f"<p>Closed thread post {n} on the tracer.</p>")
        # core: lib/topic_status_updater.rb closes a topic with a small action (action_code "closed.enabled").
        site.small_action(closed, "closed.enabled")
        mixed = site.topic(MIXED, "Weekly sync notes", "weekly-sync-notes", 5, START + timedelta(days=60))
        for n in range(1, 28):
            if n in (21, 24, 27):
                site.small_action(mixed, {21: "pinned.enabled", 24: "visible.disabled", 27: "closed.enabled"}[n])
            elif n in (23, 26):
                site.add(mixed, "carol", f"<p>Whisper {n}: staff only secretword.</p>").post_type = WHISPER
            else:
                site.add(mixed, names[n % 4], f"<p>Sync notes post {n}.</p>")
        bot = site.topic(BOT, "Nightly bot announcements", "nightly-bot-announcements", 5, START + timedelta(days=70))
        for n in range(1, 6):
            site.add(bot, "bob", f"<p>Announcement {n}.</p>")
        for _ in range(150):
            site.small_action(bot, "autobumped")
        mega = site.topic(MEGA, "Megathread: nightly build status", "megathread-nightly-build-status", 5,
                          START + timedelta(days=80))
        for n in range(1, MEGA_POSTS + 1):
            site.add(mega, names[n % 4], f"<p>Mega post {n}: build {n} is green.</p>")
        # The end of a mega topic, as a feed reads it: small actions, a whisper and a deleted post among its posts.
        for number, values in {11_991: {"post_type": SMALL_ACTION, "cooked": "", "action_code": "pinned.enabled"},
                               11_996: {"post_type": WHISPER},
                               11_998: {"deleted_at": START + timedelta(days=90)},
                               12_000: {"post_type": SMALL_ACTION, "cooked": "", "action_code": "closed.enabled"}
                               }.items():
            for key, value in values.items():
                setattr(mega.posts[number - 1], key, value)
        return site

    def small_action(self, topic: FakeTopic, action_code: str) -> FakePost:
        """A small action as core adds it (app/models/topic.rb#add_small_action: post_type 3, empty raw, the
        action code; by the system user)."""
        post = self.add(topic, "system", "")
        post.post_type, post.action_code = SMALL_ACTION, action_code
        return post

    def topic(self, topic_id: int, title: str, slug: str, category_id: int, start: datetime = START) -> FakeTopic:
        self.topics[topic_id] = FakeTopic(topic_id, title, slug, category_id, start=start)
        return self.topics[topic_id]

    def add(self, topic: FakeTopic, username: str, cooked: str) -> FakePost:
        self.next_id += 1
        number = len(topic.posts) + 1
        post = FakePost(self.next_id, topic.id, number, username, topic.start + timedelta(hours=number), cooked,
                        reply_to_post_number=number - 1 if number > 2 else None)
        topic.posts.append(post)
        return post

    def reply(self, topic_id: int, username: str, cooked: str = "<p>A new reply.</p>") -> FakePost:
        topic = self.topics[topic_id]
        post = self.add(topic, username, cooked)
        post.created_at = max(p.created_at for p in topic.posts) + timedelta(minutes=5)
        return post

    # --- the serializers ---------------------------------------------------------------------------------

    def post_json(self, post: FakePost, topic: FakeTopic, with_title: bool = False) -> dict[str, Any]:
        hidden_from_anonymous = post.hidden
        data: dict[str, Any] = {
            "id": post.id, "name": post.username.title(), "username": post.username,
            "avatar_template": f"/user_avatar/forum/{post.username}/{{size}}/1_2.png",
            "created_at": iso(post.created_at),
            "cooked": HIDDEN_PLACEHOLDER if hidden_from_anonymous else post.cooked,
            "post_number": post.post_number, "post_type": post.post_type,
            "posts_count": len(topic.posts),
            "updated_at": iso(post.updated_at or post.created_at),
            "reply_count": 0, "reply_to_post_number": post.reply_to_post_number, "quote_count": 0,
            "incoming_link_count": 0, "reads": 3, "readers_count": 2, "score": 0.4, "yours": False,
            "topic_id": topic.id, "topic_slug": topic.slug, "display_username": post.username.title(),
            "primary_group_name": None, "flair_name": None, "flair_url": None, "flair_bg_color": None,
            "flair_color": None, "flair_group_id": None, "version": 1, "can_edit": False, "can_delete": False,
            "can_recover": False, "can_see_hidden_post": False, "can_wiki": False, "user_title": None,
            "bookmarked": False, "actions_summary": [{"id": 2, "count": 1}], "moderator": False, "admin": False,
            "staff": False, "user_id": USERS.get(post.username, 99), "hidden": post.hidden, "trust_level": 1,
            "deleted_at": iso(post.deleted_at) if post.deleted_at else None, "user_deleted": post.user_deleted,
            "edit_reason": None, "can_view_edit_history": True, "wiki": False, "post_url":
                f"/t/{topic.slug}/{topic.id}/{post.post_number}", "reviewable_id": 0,
            "reviewable_score_count": 0, "reviewable_score_pending_count": 0, "mentioned_users": [],
        }
        if hidden_from_anonymous:
            data["cooked_hidden"] = True
        if post.action_code:
            data["action_code"] = post.action_code
        if with_title:
            data.update({"topic_title": topic.title, "topic_html_title": topic.title.replace("&", "&amp;"),
                         "category_id": topic.category_id, "raw": "raw markdown"})
        return data

    def topic_view(self, topic: FakeTopic) -> dict[str, Any]:
        visible = topic.visible
        regular = [p for p in visible if p.post_type != SMALL_ACTION]
        last = max(p.created_at for p in regular)
        stream: dict[str, Any] = {"posts": [self.post_json(p, topic) for p in visible[:CHUNK_SIZE]]}
        mega = len(regular) >= MEGA_TOPIC_POSTS_COUNT  # core: lib/topic_view.rb#is_mega_topic? (posts_count)
        if mega:
            # core: app/serializers/concerns/post_stream_serializer_mixin.rb#post_stream: no stream, but
            # isMegaTopic and lastId (lib/topic_view.rb#last_post_id); no timeline_lookup either.
            stream.update(isMegaTopic=True, lastId=visible[-1].id)
        else:
            stream["stream"] = [p.id for p in visible]
        data: dict[str, Any] = {
            "post_stream": stream, "suggested_topics": [], "tags": [], "tags_descriptions": {},
            "fancy_title": topic.title.replace("&", "&amp;"), "id": topic.id, "title": topic.title,
            "posts_count": len(regular), "created_at": iso(topic.posts[0].created_at), "views": 100,
            "reply_count": 3, "like_count": 2, "last_posted_at": iso(last), "visible": True, "closed": False,
            "archived": False, "has_summary": False, "archetype": "regular", "slug": topic.slug,
            "category_id": topic.category_id, "word_count": 4000, "deleted_at": None,
            "user_id": USERS.get(topic.posts[0].username, 99), "featured_link": None, "pinned_globally": False,
            "pinned_at": None, "pinned_until": None, "image_url": None, "slow_mode_seconds": 0, "draft": None,
            "draft_key": f"topic_{topic.id}", "draft_sequence": None, "unpinned": None, "pinned": False,
            "current_post_number": 1, "highest_post_number": max(p.post_number for p in topic.posts),
            "deleted_by": None, "has_deleted": True, "actions_summary": [], "chunk_size": CHUNK_SIZE,
            "bookmarked": False, "topic_timer": None, "message_bus_last_id": 4, "participant_count": 3,
            "show_read_indicator": False, "thumbnails": None, "slow_mode_enabled_until": None,
            "summarizable": False,
            "details": {"can_edit": False, "notification_level": 1, "participants": [],
                        "created_by": {"id": 11, "username": topic.posts[0].username},
                        "last_poster": {"id": 12, "username": regular[-1].username}, "links": []},
        }
        if not mega:
            data["timeline_lookup"] = [[1, 30]]
        if topic.unicode_title:
            data["unicode_title"] = topic.unicode_title
        return data

    def post_ids(self, topic: FakeTopic, post_number: int | None) -> dict[str, Any]:
        """core: app/controllers/topics_controller.rb#post_ids, lib/topic_view.rb#filter_posts_by_post_number
        (skip_limit, asc): the ids of every post whose sort order is past that of post `post_number`, or of
        the post numbered closest to it (#get_sort_order, over all posts, deleted ones too). Without a post
        number, #filter_posts_paged's first page. Here a post's sort order is its post number."""
        visible = topic.visible
        if post_number is None:
            return {"post_ids": [p.id for p in visible[:CHUNK_SIZE]]}
        closest = min(topic.posts, key=lambda p: abs(p.post_number - post_number)).post_number
        return {"post_ids": [p.id for p in visible if p.post_number > closest]}

    def action_json(self, post: FakePost, topic: FakeTopic) -> dict[str, Any]:
        first = post.post_number == 1
        return {
            "excerpt": post.cooked.replace("<p>", "").replace("</p>", "")[:300], "action_type": 4 if first else 5,
            "created_at": iso(post.created_at),
            "avatar_template": f"/user_avatar/forum/{post.username}/{{size}}/1_2.png",
            "acting_avatar_template": f"/user_avatar/forum/{post.username}/{{size}}/1_2.png",
            "slug": topic.slug, "topic_id": topic.id, "target_user_id": USERS.get(post.username, 99),
            "target_name": post.username.title(), "target_username": post.username,
            "post_number": post.post_number, "post_id": None if first else post.id,
            "reply_to_post_number": post.reply_to_post_number, "username": post.username,
            "name": post.username.title(), "user_id": USERS.get(post.username, 99),
            "acting_username": post.username, "acting_name": post.username.title(),
            "acting_user_id": USERS.get(post.username, 99), "title": topic.title, "deleted": False,
            "hidden": None if first else post.hidden, "post_type": None if first else post.post_type,
            "action_code": post.action_code, "category_id": topic.category_id, "closed": False, "archived": False,
        }

    # --- the endpoints -----------------------------------------------------------------------------------

    def answer(self, target: str) -> bytes | None:
        """The body for `target` (path and query), or None where this site has nothing (the files then)."""
        path, _, query = target.partition("?")
        params = parse_qs(query)
        parts = path.strip("/").split("/")
        document: Any = None
        if len(parts) == 2 and parts[0] == "t" and parts[1].endswith(".json"):
            topic = self.topics.get(_int(parts[1].removesuffix(".json")))
            document = topic and self.topic_view(topic)
        elif len(parts) == 3 and parts[0] == "t" and parts[2] == "posts.json":
            topic = self.topics.get(_int(parts[1]))
            wanted = {_int(i) for i in params.get("post_ids[]", [])}
            if topic:
                document = {"post_stream": {"posts": [self.post_json(p, topic) for p in topic.visible
                                                      if p.id in wanted]}, "id": topic.id}
        elif len(parts) == 3 and parts[0] == "t" and parts[2] == "post_ids.json":
            topic = self.topics.get(_int(parts[1]))
            number = params.get("post_number")
            document = topic and self.post_ids(topic, _int(number[0]) if number else None)
        elif path == "/posts.json":
            document = self.latest(_int(params.get("before", ["0"])[0]))
        elif path == "/user_actions.json":
            document = self.actions(params.get("username", [""])[0], _int(params.get("offset", ["0"])[0]))
        return None if document is None else json.dumps(document, indent=1, ensure_ascii=False).encode()

    def latest(self, before: int) -> dict[str, Any]:
        # core: app/queries/latest_posts_query.rb `public_posts`: `where(post_type: Post.types[:regular])`, newest
        # id first, 50 (`PAGE_SIZE`), and with `before` (PostsController#latest: `params[:before].to_i`, none when
        # not positive) `posts.where("posts.id < ?", before_post_id)`: strictly older, the post named not repeated.
        every = [(p, t) for t in self.topics.values() for p in t.visible if p.post_type == REGULAR and not p.hidden]
        every.sort(key=lambda pair: pair[0].id, reverse=True)
        page = [pair for pair in every if before <= 0 or pair[0].id < before][:50]
        return {"latest_posts": [self.post_json(p, t, with_title=True) for p, t in page]}

    def actions(self, username: str, offset: int) -> dict[str, Any]:
        # core: app/models/user_action.rb `UserAction.stream` selects no `user_deleted`: a withdrawn post is listed,
        # its placeholder as its excerpt, until the deletion job sets `deleted_at` (24 h later).
        rows = [(p, t) for t in self.topics.values() for p in t.visible
                if p.username == username and p.post_type == REGULAR]
        rows.sort(key=lambda pair: pair[0].created_at, reverse=True)
        return {"user_actions": [self.action_json(p, t) for p, t in rows[offset: offset + 30]]}


def _int(text: str) -> int:
    return int(text) if text.isascii() and text.isdigit() and len(text) < 12 else -1
