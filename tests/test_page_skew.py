"""A list read over several pages whose copies were read at different moments (`feeds/sources/lists.py`,
`_in_step`): page 0 is shared by every one-page feed of a list, so a feed of two pages read it from the cache
and its page 1 fresh, and a topic bumped in between was on neither. Over a real socket, the app in this
process (nothing here depends on the server), the forum's lists served by `Lists` through `FakeForum`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import feedparser
import httpx
import pytest

from feedbridge.feeds.sources import lists
from tests.appserver import RunningApp, running_app, settings_for
from tests.upstream import FakeForum

START = datetime(2026, 5, 10, 12, tzinfo=UTC)


@dataclass
class Listed:
    id: int
    last: datetime
    category_id: int = 5


class Lists:
    """The latest list of a few topics, 3 a page, as Markdown and JSON. core: lib/topic_query.rb
    `TopicQuery#latest_results` orders by `bumped_at` (the last post), newest first, and
    app/controllers/list_controller.rb pages it with `?page=N`, `more_topics_url` on a full page (the page size
    is core's `per_page`, 30 by default: 3 here, so that two pages hold six topics)."""

    def __init__(self, forum: FakeForum, count: int = 6):
        self.forum = forum
        self.topics = {100 + n: Listed(100 + n, START + timedelta(hours=n)) for n in range(1, count + 1)}

    def bump(self, topic_id: int, hours: int) -> None:
        self.topics[topic_id].last = START + timedelta(hours=hours)
        self.serve()

    def page(self, number: int) -> list[Listed]:
        ordered = sorted(self.topics.values(), key=lambda t: t.last, reverse=True)
        return ordered[3 * number: 3 * number + 3]

    def serve(self) -> None:
        for number in (0, 1, 2):
            suffix = f"?page={number}" if number else ""
            self.forum.set_body(f"/latest.json{suffix}", self._json(number), headers={"Content-Type": "application/json"})
            self.forum.set_body(f"/latest.md{suffix}", self._markdown(number),
                                headers={"Content-Type": "text/markdown; charset=utf-8"})

    def _json(self, number: int) -> str:
        rows = [{"id": t.id, "title": f"Topic {t.id}", "fancy_title": f"Topic {t.id}", "slug": f"topic-{t.id}",
                 "posts_count": 2, "reply_count": 1, "created_at": _iso(START), "last_posted_at": _iso(t.last),
                 "bumped_at": _iso(t.last), "pinned": False, "visible": True, "archetype": "regular",
                 "category_id": t.category_id, "tags": [], "like_count": 1, "views": 10,
                 "posters": [{"description": "Original Poster", "user_id": 1}]} for t in self.page(number)]
        topic_list: dict[str, object] = {"per_page": 3, "topics": rows}
        if len(rows) == 3:
            topic_list["more_topics_url"] = f"/latest?page={number + 1}"
        return json.dumps({"users": [{"id": 1, "username": "alice"}], "topic_list": topic_list})

    def _markdown(self, number: int) -> str:
        base = self.forum.url
        out = ["# Latest", "", f"**URL:** {base}/latest.md", "", f"[Latest]({base}/latest.md)", ""]
        for t in self.page(number):
            url = f"{base}/t/topic-{t.id}/{t.id}"
            out += ["---", "", f"## [Topic {t.id}]({url})", "", f"**Author:** [@alice]({base}/u/alice)\\",
                    "**Replies:** 1\\", f'**Last updated:** [label]({url} "{t.last.strftime("%Y-%m-%dT%H:%M:%SZ")}")',
                    "", f"Excerpt of {t.id}", ""]
        if len(self.page(number)) == 3:
            out += [f"[Next page]({base}/latest.md?page={number + 1})", ""]
        return "\n".join(out)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


@pytest.fixture
def skew(monkeypatch: pytest.MonkeyPatch) -> float:
    """The pages' copies may be this far apart (a second, not 30: the test waits past it)."""
    monkeypatch.setattr(lists, "PAGE_SKEW", 1.0)
    return 1.0


def topic_ids(app: RunningApp, path: str) -> list[int]:
    response = httpx.get(app.feed_url(path), timeout=30)
    assert response.status_code == 200, response.text[:300]
    parsed = feedparser.parse(response.content)
    assert parsed.bozo == 0
    return [int(entry.id.rsplit("/", 1)[1]) for entry in parsed.entries]


@pytest.fixture(params=["json", "markdown"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Lists, RunningApp]]:
    with FakeForum(mode=request.param) as forum:
        site = Lists(forum)
        site.serve()
        with running_app(settings_for(f"{request.param}:{forum.url}", cache_ttl=300)) as app:
            yield site, app


def test_a_topic_bumped_between_two_pages_reads_is_in_the_feed(served: tuple[Lists, RunningApp],
                                                               skew: float) -> None:
    """Page 0 cached by the one-page feed; topic 102, on page 1, then gets a reply and moves to page 0. The
    two-page feed read page 0 from the cache (without 102) and page 1 fresh (without it too): the topic with
    the forum's newest post was not in the feed. Now page 0, out of step with page 1, is read again."""
    site, app = served
    assert topic_ids(app, "/latest.atom") == [106, 105, 104]
    time.sleep(skew + 0.5)
    site.bump(102, 20)
    assert topic_ids(app, "/latest.atom?pages=2") == [102, 106, 105, 104, 103, 101]


def test_a_markdown_topic_bumped_to_another_json_page_keeps_its_figures(skew: float) -> None:
    """A Markdown list carries no category ids or views: they come from the JSON list of the same page. The
    Markdown page 0 was cached (106, 105, 104), the JSON one read fresh after 101 to 103 were bumped above
    them: 106 was then on JSON page 1, and got no category, so `exclude_category=` let it through, and no
    views, so `min_views=` left it out."""
    with FakeForum(mode="markdown") as forum:
        site = Lists(forum)
        site.topics[106].category_id = 6
        site.serve()
        with running_app(settings_for(f"markdown:{forum.url}", cache_ttl=300)) as app:
            assert topic_ids(app, "/latest.atom") == [106, 105, 104]
            time.sleep(skew + 0.5)
            for topic_id, hours in ((101, 21), (102, 22), (103, 23)):
                site.bump(topic_id, hours)
            assert 106 not in topic_ids(app, "/latest.atom?exclude_category=6")
            assert topic_ids(app, "/latest.atom?min_views=5") == [103, 102, 101]


def test_an_empty_list_rebuilt_is_the_same_bytes() -> None:
    """A list with no topic (an empty category, a user's list with none) gave a feed dated at its build: each
    rebuild, a second later, was new bytes, a new ETag and a new download for the same empty list."""
    with FakeForum(mode="json") as forum:
        Lists(forum, count=0).serve()
        with running_app(settings_for(f"json:{forum.url}", cache_ttl=0)) as app:
            first = httpx.get(app.feed_url("/latest.atom"), timeout=30)
            time.sleep(1.2)  # past the second the first was dated in
            again = httpx.get(app.feed_url("/latest.atom"), timeout=30)
    assert first.status_code == again.status_code == 200
    assert feedparser.parse(first.content).bozo == 0 and not feedparser.parse(first.content).entries
    assert again.content == first.content and again.headers["ETag"] == first.headers["ETag"]

