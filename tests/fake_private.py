"""The fake forum's login-only side (tests/upstream.py `FakeForum(private=PrivateSite().answer)`).

A staff category, `/c/staff/9`, holds three topics that also lead `/latest` (they are the newest), each
with its own topic page; all of it on Markdown (`.md`) and JSON (`.json`), at core's routes too
(`/latest.md?category=9`, `/c/staff/9/l/latest.json`). A request gets them only when it carries the bot's
key, as Discourse checks it: `User-Api-Key: USER_API_KEY`, or `Api-Key: ADMIN_API_KEY` with
`Api-Username: ADMIN_USERNAME`. Anyone else gets what an anonymous visitor gets from core: the staff
category's own paths answer 403 with the InvalidAccess body, as core does with `detailed_404` on, or 404
with `refusal=404`, core's default (ListController#set_category: `SiteSetting.detailed_404 ? raise
Discourse::InvalidAccess : raise Discourse::NotFound`; tests/test_private.py runs both), `/latest.md?category=9` a list without a topic (it
lists what the reader may see), a private topic page 404 and its posts (`/t/ID/posts.json`) 403, as core's
topics#show and topics#posts do with `detailed_404` off, and `/latest` and `/categories` exactly the public
files. A
request with a key that is not the bot's gets 403 on every path, as Discourse refuses an unknown key.

The documents are written by `fixtures/make_site.py`'s own renderer (lists and directory) and in the
shapes of `fixtures/site/t/*.md` and `fixtures/site-json/` (topic pages, JSON lists), and a keyed list
is the public file with the private topics put in: the parsers read them exactly as they read the rest
of the fake forum. Every private topic carries `PRIVATE_MARKER` in its title, excerpt and first post, so
a test finds a leak by looking for one word.

`site.keyed` lists the targets of the requests that carried a key header (right or wrong); across
processes (`python -m tests.upstream --private`) `carries_key(request)` reads the same from the request log.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
USER_API_KEY = "uak3f9c2a51d84b6e9f00c1d2e3f4a5b6c7"
ADMIN_API_KEY = "adm0d9c8b7a6f5e4d3c2b1a09f8e7d6c5b4"
ADMIN_USERNAME = "feedbot"
KEY_HEADERS = ("user-api-key", "api-key", "api-username")
PRIVATE_MARKER = "sekritstaffword"
STAFF_ID = 9
STAFF_PATH = f"/c/staff/{STAFF_ID}"
STAFF_DESCRIPTION = "Moderators and admins only."
INVALID_ACCESS = json.dumps({"errors": ["You are not permitted to view the requested resource."],
                             "error_type": "invalid_access"})
NOT_FOUND = json.dumps({"errors": ["The requested URL or resource could not be found."], "error_type": "not_found"})
BAD_KEY = json.dumps({"errors": ["You are not permitted to view the requested resource. The API username or key "
                                 "is invalid."], "error_type": "invalid_access"})


def _load_make_site() -> ModuleType:
    """`fixtures/make_site.py` is a script, not a package module: loaded from its file, once (under the name
    `fixtures/json/make_site_json.py` imports it by)."""
    if "make_site" in sys.modules:
        return sys.modules["make_site"]
    spec = importlib.util.spec_from_file_location("make_site", FIXTURES / "make_site.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_site"] = module  # its dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module


make_site = _load_make_site()
HOST: str = make_site.HOST


@dataclass(frozen=True)
class PrivateTopic:
    id: int
    title: str
    author: str
    user_id: int
    replies: int
    created_at: datetime
    last_posted_at: datetime
    excerpt: str
    body: str  # the first post, Markdown as the topic page shows it; cooked for JSON as <p>body</p>

    @property
    def slug(self) -> str:
        return str(make_site.slugify(self.title))

    @property
    def url(self) -> str:
        return f"{HOST}/t/{self.slug}/{self.id}"

    def as_list_topic(self) -> Any:
        return make_site.Topic(self.id, self.title, self.author, self.replies, self.last_posted_at,
                               self.excerpt, "staff")


TOPICS = (
    PrivateTopic(7003, f"Incident review {PRIVATE_MARKER} build farm outage", "opslead", 901, 4,
                 datetime(2026, 9, 21, 8, 0, tzinfo=UTC), datetime(2026, 9, 22, 18, 45, 10, tzinfo=UTC),
                 f"The build farm was down for six hours. Timeline and follow ups {PRIVATE_MARKER} inside.",
                 f"The build farm was down for six hours on Monday. {PRIVATE_MARKER} timeline follows."),
    PrivateTopic(7002, f"Moderation policy draft {PRIVATE_MARKER}", "modteam", 902, 2,
                 datetime(2026, 9, 20, 9, 30, tzinfo=UTC), datetime(2026, 9, 21, 12, 5, 0, tzinfo=UTC),
                 f"A first draft of the new moderation policy {PRIVATE_MARKER}, comments welcome.",
                 f"Here is the draft of the moderation policy. {PRIVATE_MARKER} is the code word."),
    PrivateTopic(7001, f"Sponsor contract renewal {PRIVATE_MARKER}", "opslead", 901, 0,
                 datetime(2026, 9, 20, 7, 0, tzinfo=UTC), datetime(2026, 9, 20, 7, 0, 0, tzinfo=UTC),
                 f"The sponsor contract ends in December {PRIVATE_MARKER}.",
                 f"The sponsor contract ends in December; the terms are {PRIVATE_MARKER} confidential."),
)


def carries_key(request: Any) -> bool:
    """Whether a request (tests/upstream.py `Request`, in process or from `/__requests`) sent any key."""
    headers: Mapping[str, str] = request.headers
    return any(name in headers for name in KEY_HEADERS)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


class PrivateSite:
    """The hook: `answer(target, headers, public)` -> (status, body, headers), or None to serve `public`."""

    def __init__(self, *, refusal: int = 403) -> None:
        if refusal not in (403, 404):
            raise ValueError("a private category is refused with 403 or 404")
        self.refusal = refusal
        self.topics = TOPICS
        self._lock = threading.Lock()
        self._keyed: list[str] = []

    @property
    def keyed(self) -> list[str]:
        with self._lock:
            return list(self._keyed)

    def reset(self) -> None:
        with self._lock:
            self._keyed.clear()

    @staticmethod
    def authorised(headers: Mapping[str, str]) -> bool | None:
        """True for the bot's key, False for another key, None for a request without one."""
        if not any(name in headers for name in KEY_HEADERS):
            return None
        if "user-api-key" in headers:
            return headers["user-api-key"] == USER_API_KEY and "api-key" not in headers
        return headers.get("api-key") == ADMIN_API_KEY and headers.get("api-username") == ADMIN_USERNAME

    def answer(self, target: str, headers: Mapping[str, str], public: bytes | None
               ) -> tuple[int, bytes, dict[str, str]] | None:
        path, _, query = target.partition("?")
        stem, dot, suffix = path.rpartition(".")
        category = parse_qs(query).get("category", [""])[-1]
        if not dot or suffix not in ("md", "json"):
            return None
        allowed = self.authorised(headers)
        if allowed is not None:
            with self._lock:
                self._keyed.append(target)
        if allowed is False:
            return 403, BAD_KEY.encode(), {"Content-Type": "application/json; charset=utf-8"}
        topic = self._topic(stem)
        batched = self._batched(stem) if suffix == "json" else None
        if batched is not None:
            if not allowed:  # core: app/controllers/topics_controller.rb#posts (fetch_topic_view: TopicView's
                return self._refuse(403, suffix)  # InvalidAccess, with no detailed_404 rescue as #show has)
            return 200, self._batch(batched, target), {"Content-Type": "application/json; charset=utf-8"}
        # The category's own path, its /l/ views, and core's Markdown `/latest.md?category=ID` (tests/upstream.py)
        listed = stem in ("/latest", "/top") and category == str(STAFF_ID)
        if stem == STAFF_PATH or stem.startswith(STAFF_PATH + "/") or listed:
            if not allowed and listed:  # TopicQuery lists what the reader may see: none of the category's topics
                return 200, self._staff(suffix, target, ()), {}
            if not allowed:  # ListController#set_category: InvalidAccess (or NotFound, as detailed_404 is off)
                return self._refuse(self.refusal, suffix)
            return 200, self._staff(suffix, target), {}
        if topic is not None:
            if not allowed:  # core: app/controllers/topics_controller.rb#show, InvalidAccess → NotFound
                return self._refuse(404, suffix)  # unless SiteSetting.detailed_404 (off by default)
            return 200, self._topic_page(topic, suffix), {}
        if allowed and public is not None and stem == "/latest" and "page=" not in target and not category:
            return 200, self._latest(public, suffix), {}
        if allowed and public is not None and stem == "/categories":
            return 200, self._categories(public, suffix), {}
        return None

    # --- the documents ------------------------------------------------------------------------------------

    def _topic(self, stem: str) -> PrivateTopic | None:
        parts = stem.strip("/").split("/")
        if parts[0] != "t" or len(parts) not in (2, 3):
            return None
        return next((t for t in self.topics if str(t.id) == parts[-1] and (len(parts) == 2 or parts[1] == t.slug)),
                    None)

    def _batched(self, stem: str) -> PrivateTopic | None:
        """The private topic of a `/t/ID/posts.json` batch request, if it names one."""
        parts = stem.strip("/").split("/")
        if len(parts) != 3 or parts[0] != "t" or parts[2] != "posts":
            return None
        return next((t for t in self.topics if str(t.id) == parts[1]), None)

    def _batch(self, topic: PrivateTopic, target: str) -> bytes:
        """core: TopicViewPostsSerializer, `post_stream.posts` of the ids asked for (a private topic's one post)."""
        wanted = parse_qs(target.partition("?")[2]).get("post_ids[]", [])
        posts = [self._first_post(topic)] if str(topic.id * 10) in wanted else []
        return json.dumps({"post_stream": {"posts": posts}, "id": topic.id}, indent=1, ensure_ascii=False).encode()

    @staticmethod
    def _first_post(topic: PrivateTopic) -> dict[str, Any]:
        return {"id": topic.id * 10, "post_number": 1, "username": topic.author, "created_at": _iso(topic.created_at),
                "cooked": f"<p>{topic.body}</p>\n"}

    @staticmethod
    def _refuse(status: int, suffix: str) -> tuple[int, bytes, dict[str, str]]:
        if suffix == "json":
            body = INVALID_ACCESS if status == 403 else NOT_FOUND
            return status, body.encode(), {"Content-Type": "application/json; charset=utf-8"}
        text = "403 Forbidden\n" if status == 403 else "404 Not Found\n"
        return status, text.encode(), {"Content-Type": "text/plain; charset=utf-8"}

    def _staff(self, suffix: str, target: str, topics: tuple[PrivateTopic, ...] | None = None) -> bytes:
        if "page=" in target.partition("?")[2]:
            listed: tuple[PrivateTopic, ...] = ()
        else:
            listed = self.topics if topics is None else topics
        if suffix == "md":
            page = make_site.render_page("staff", STAFF_PATH, [t.as_list_topic() for t in listed], 0)
            return str(page).encode()
        document = {"users": self._users(listed), "primary_groups": [],
                    "topic_list": {"can_create_topic": False, "per_page": make_site.PER_PAGE,
                                   "topics": [self._item(t) for t in listed]}}
        return json.dumps(document, indent=1, ensure_ascii=False).encode()

    def _latest(self, public: bytes, suffix: str) -> bytes:
        if suffix == "md":
            text = public.decode()
            cut = text.index("---\n\n") + len("---\n\n")
            blocks = "".join(f"{make_site.render_topic(t.as_list_topic())}\n\n---\n\n" for t in self.topics)
            return (text[:cut] + blocks + text[cut:]).encode()
        document = json.loads(public)
        document["topic_list"]["topics"][:0] = [self._item(t) for t in self.topics]
        known = {user["id"] for user in document["users"]}
        document["users"] += [user for user in self._users(self.topics) if user["id"] not in known]
        return json.dumps(document, indent=1, ensure_ascii=False).encode()

    def _categories(self, public: bytes, suffix: str) -> bytes:
        if suffix == "md":
            block = f"## [staff]({HOST}{STAFF_PATH})\n\n{make_site.escape(STAFF_DESCRIPTION)}"
            return (public.decode().rstrip("\n") + f"\n\n---\n\n{block}\n").encode()
        document = json.loads(public)
        document["category_list"]["categories"].append(
            {"id": STAFF_ID, "name": "staff", "slug": "staff", "description_text": STAFF_DESCRIPTION,
             "topic_count": len(self.topics)})
        return json.dumps(document, indent=1, ensure_ascii=False).encode()

    def _topic_page(self, topic: PrivateTopic, suffix: str) -> bytes:
        if suffix == "json":
            post_id, first = topic.id * 10, self._first_post(topic)
            document = {"id": topic.id, "title": topic.title, "slug": topic.slug, "created_at": _iso(topic.created_at),
                        "category_id": STAFF_ID, "posts_count": topic.replies + 1, "tags": [],
                        "post_stream": {"posts": [first], "stream": [post_id]}}
            return json.dumps(document, indent=1, ensure_ascii=False).encode()
        when = topic.created_at
        stamp = f'[{make_site.label(when)}]({topic.url} "{make_site.iso(when)}")'
        avatar = f"{HOST}/user_avatar/dev-discuss.pytorch.org/{topic.author}/48/9_2.png"
        return (f"# {make_site.escape(topic.title)}\n\n**URL:** {topic.url}\n\n**Category:** staff\n\n"
                f"**Created:** {stamp}\n\n**Posts on this page:** 1\n\n<div class=\"post-metadata\">\n\n"
                f"### ![{topic.author}]({avatar}) [@{topic.author}]({HOST}/u/{topic.author})\n"
                f'#### [{make_site.label(when)}]({topic.url}/1 "{make_site.iso(when)}")\n\n</div>\n\n'
                f"{topic.body}\n").encode()

    @staticmethod
    def _item(topic: PrivateTopic) -> dict[str, Any]:
        """A `topic_list` entry with the keys `fixtures/json/make_site_json.py` writes for every topic."""
        return {"id": topic.id, "title": topic.title, "fancy_title": topic.title, "slug": topic.slug,
                "posts_count": topic.replies + 1, "reply_count": max(topic.replies - 1, 0),
                "created_at": _iso(topic.created_at), "last_posted_at": _iso(topic.last_posted_at),
                "bumped_at": _iso(topic.last_posted_at), "pinned": False, "visible": True, "archetype": "regular",
                "category_id": STAFF_ID, "tags": [],
                "posters": [{"extras": "latest single", "description": "Original Poster, Most Recent Poster",
                             "user_id": topic.user_id}]}

    @staticmethod
    def _users(topics: tuple[PrivateTopic, ...]) -> list[dict[str, Any]]:
        seen = {t.user_id: t.author for t in topics}
        return [{"id": uid, "username": name, "name": name,
                 "avatar_template": f"/user_avatar/dev-discuss.pytorch.org/{name}/{{size}}/1_2.png"}
                for uid, name in sorted(seen.items())]
