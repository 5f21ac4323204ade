"""A post feed is titled by what it reads, over a real socket: a topic's posts by the topic's title (read from
its head, `/t/ID.json`), a user's posts by the user as the forum spells them, in every format, from a Markdown
forum and a JSON one; the request's label ("posts of topic 9446") only where the forum names nothing.

A reader lists a feed by its title: "posts of topic 9446" among a dozen subscriptions says nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.appserver import RunningApp, running_app, settings_for
from tests.fake_posts import PostSite
from tests.test_render import assert_json_feed_1_1
from tests.test_validity import parsed
from tests.upstream import MODES, FakeForum

FORMATS = ("atom", "rss", "json")


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest) -> Iterator[tuple[FakeForum, RunningApp]]:
    with FakeForum(mode=request.param, posts=PostSite.standard().answer) as forum, \
            running_app(settings_for(forum.url)) as app:
        yield forum, app


def feed(app: RunningApp, path: str) -> tuple[str, str]:
    """The title and description of a feed, read back by feedparser (Atom, RSS) or as JSON Feed."""
    response = httpx.get(app.feed_url(path), timeout=30)
    assert response.status_code == 200, response.text[:300]
    if path.split("?")[0].endswith(".json"):
        document = json.loads(response.content)
        assert_json_feed_1_1(document)
        assert document["items"]
        return document["title"], document["description"]
    parsed_feed = parsed(response.content)
    assert parsed_feed.bozo == 0 and parsed_feed.entries
    return parsed_feed.feed.title, parsed_feed.feed.get("subtitle", parsed_feed.feed.get("description", ""))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("route", ["/t/9446", "/t/dynamic-shapes-the-long-thread/9446"])
def test_a_topics_posts_feed_is_titled_by_the_topic(served, route, fmt):
    _, app = served
    title, description = feed(app, f"{route}.{fmt}")
    assert title == f"{app.forum_key} · Dynamic shapes: the long thread"
    assert "posts of topic" not in title
    assert "Dynamic shapes: the long thread" in description and "posts of topic 9446" in description


def test_the_title_is_the_topics_unicode_title_and_filters_follow_it(served):
    _, app = served
    assert feed(app, "/t/9003.atom")[0] == f"{app.forum_key} · Inductor: small question ☃"
    title, _ = feed(app, "/t/9446.rss?author=bob&q=symint")
    assert title == f"{app.forum_key} · Dynamic shapes: the long thread · author: bob · q: symint"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_users_posts_feed_is_titled_by_the_user(served, fmt):
    _, app = served
    title, _ = feed(app, f"/u/alice/posts.{fmt}")
    assert title.startswith(f"{app.forum_key} · posts by alice")


def test_a_topic_whose_head_names_no_title_keeps_the_requests_label():
    site = PostSite.standard()
    head = site.topic_view(site.topics[9003])
    for key in ("title", "fancy_title", "unicode_title"):
        head.pop(key, None)
    with FakeForum(mode="json", posts=site.answer) as forum, running_app(settings_for(forum.url)) as app:
        forum.set_body("/t/9003.json", json.dumps(head))
        title, _ = feed(app, "/t/9003.atom")
        assert forum.count("/t/9003.json") == 1
    assert title == f"{app.forum_key} · posts of topic 9003"
