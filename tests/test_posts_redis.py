"""Post feeds' entries shared through Redis: a real redis-server, the fake forum serving Discourse's JSON
posts (tests/fake_posts.py) and two apps on one Redis, as two instances behind one balancer are.

What is counted is the forum's requests: a post read by one instance is not read again by the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import feedparser
import httpx
import pytest

from feedbridge.discourse.posts import parse_post_batch, parse_topic_head
from feedbridge.errors import DecodeError
from feedbridge.feeds.sources.post_feeds import shown
from feedbridge.models import Post
from feedbridge.store import codec
from feedbridge.store.entries import CollectedEntry, HeadEntry, PostsEntry, Shown
from tests.appserver import RunningApp, running_app, settings_for
from tests.fake_posts import PostSite
from tests.redis_server import RedisServer, redis_module, redis_server  # noqa: F401
from tests.test_hostile_content import retained, within_twice
from tests.upstream import FakeForum

Instances = tuple[FakeForum, RunningApp, RunningApp]


@pytest.fixture
def instances(redis_server: RedisServer) -> Iterator[Instances]:
    """One forum, and two apps with nothing in common but the Redis they cache in."""
    with FakeForum(mode="json", posts=PostSite.standard().answer) as forum, \
            running_app(settings_for(forum.url, cache_url=redis_server.url)) as first, \
            running_app(settings_for(forum.url, cache_url=redis_server.url)) as second:
        yield forum, first, second


def get(app: RunningApp, path: str) -> httpx.Response:
    response = httpx.get(app.feed_url(path), timeout=30)
    assert response.status_code == 200, response.text[:300]
    return response


def entry_ids(response: httpx.Response) -> list[str]:
    return [e.id for e in feedparser.parse(response.content).entries]


@pytest.mark.parametrize("path", ["/posts.atom?pages=2", "/u/alice/posts.atom"])
def test_a_second_instance_builds_a_post_list_feed_without_asking_the_forum(instances: Instances,
                                                                             path: str) -> None:
    forum, first, second = instances
    one = get(first, path)
    assert forum.count() > 0
    forum.reset()
    two = get(second, path)
    # Built anew (its links name the second instance), from the posts the first one read.
    assert two.headers["X-Feedbridge-Cache"] == "miss"
    assert forum.requests == []
    assert entry_ids(two) == entry_ids(one)


def test_a_second_instance_reads_no_post_of_a_topic_again(instances: Instances) -> None:
    forum, first, second = instances
    one = get(first, "/t/9446.atom?limit=60")
    assert forum.count("/t/9446/posts.json", prefix=True) > 0  # the 60 newest are past the head's first 20
    forum.reset()
    two = get(second, "/t/9446.atom?limit=60")
    assert two.headers["X-Feedbridge-Cache"] == "miss"
    assert forum.requests == []  # neither the head (/t/9446.json) nor a batch of its posts
    assert entry_ids(two) == entry_ids(one)


# --- the entries themselves ----------------------------------------------------------------------------

BASE = "https://forum.example"


def a_post(number: int, content_html: str | None = "<p>caf\u00e9 ☃</p>", **changes: Any) -> Shown:
    post = Post(topic_id=9446, post_number=number, post_id=50_000 + number, username="zoë",
                created_at=datetime(2026, 11, 2, tzinfo=UTC), updated_at=datetime(2026, 11, 2, 5, tzinfo=UTC),
                cooked=None, topic_title="a thread", topic_slug="a-thread", category_id=5)
    return Shown(replace(post, **changes), content_html, 1_800_000_000.25)


def test_a_topics_posts_round_trip() -> None:
    entry = PostsEntry(((50_003, a_post(3)), (50_002, None), (50_001, a_post(1, None, excerpt="e"))),
                       1_800_000_000.5)
    assert codec.decode(codec.encode(entry)) == entry


def test_a_topics_head_round_trips() -> None:
    head = parse_topic_head(PostSite.standard().answer("/t/9446.json") or b"")
    entry = HeadEntry(head, '"v1"', None, 1_800_000_000.5)
    assert head.posts and head.read and codec.decode(codec.encode(entry)) == entry


def test_collected_posts_round_trip() -> None:
    entry = CollectedEntry((a_post(7), Shown(a_post(6).post, None, 1.0)), 1_800_000_000.5)
    assert codec.decode(codec.encode(entry)) == entry


@pytest.mark.parametrize("entry", [
    PostsEntry(((50_003, a_post(3, created_at=datetime(2026, 11, 2))),), 1.0),
    CollectedEntry((a_post(7, updated_at=datetime(2026, 11, 2)),), 1.0),
], ids=["a topic's posts", "collected posts"])
def test_a_post_dated_without_its_offset_is_refused(entry: object) -> None:
    """The check reaches into the (id, post) pairs: sorting an aware date against a naive one would raise."""
    with pytest.raises(DecodeError, match="offset"):
        codec.decode(codec.encode(entry))


def test_a_topics_posts_are_counted_by_what_they_hold() -> None:
    site = PostSite.standard()
    head = parse_topic_head(site.answer("/t/9446.json") or b"")
    text = site.answer("/t/9446/posts.json?" + "&".join(f"post_ids[]={i}" for i in head.stream[-200:])) or b""

    def build() -> PostsEntry:
        return PostsEntry(tuple((i, None if p is None else shown(p, BASE, 1.0))
                                for i, p in parse_post_batch(text, head)), 1.0)

    entry, truth = retained(build)
    assert len(entry.posts) == 200
    assert within_twice(entry.size, truth)
    assert within_twice(CollectedEntry(tuple(s for _, s in entry.posts if s is not None), 1.0).size, truth)


def test_a_topics_head_is_counted_by_what_it_holds() -> None:
    text = PostSite.standard().answer("/t/9446.json") or b""
    head, truth = retained(lambda: parse_topic_head(text))
    assert within_twice(HeadEntry(head, None, None, 1.0).size, truth)
