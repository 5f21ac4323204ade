"""A list read over several pages whose copies were read at different moments (`feeds/sources/reads.py`,
`_in_step`): page 0 is shared by every one-page feed of a list, so a feed of two pages read it from the cache
and its page 1 fresh, and a topic bumped in between was on neither. Over a real socket, the app in this
process (nothing here depends on the server), the forum's lists served by `Lists` through `FakeForum`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import feedparser
import httpx
import pytest

from feedbridge.feeds.sources import reads
from tests.appserver import RunningApp, procfile_app, running_app, settings_for
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
    monkeypatch.setattr(reads, "PAGE_SKEW", 1.0)
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



def test_a_page_read_again_takes_half_the_time_left_and_its_failure_is_no_ones(skew: float) -> None:
    """Reading a page again to bring the list in step is a read the feed can do without. It could take the
    request's whole deadline when the forum was slow to answer it, and the feed then failed (a 504, remembered
    as the forum's failure for the next reader too). It now has half of what is left, then the copy held
    stands: the feed is built, and the next request is too."""
    with FakeForum(mode="markdown") as forum:
        site = Lists(forum)
        site.serve()
        with running_app(settings_for(f"markdown:{forum.url}", cache_ttl=300, request_deadline=2.0)) as app:
            assert topic_ids(app, "/latest.atom") == [106, 105, 104]
            time.sleep(skew + 0.5)
            forum.stall("/latest.md", 30, times=1)  # page 0 read again, after page 1 was read
            started = time.monotonic()
            first = topic_ids(app, "/latest.atom?pages=2&min_views=5")
            elapsed = time.monotonic() - started
            again = topic_ids(app, "/latest.atom?pages=2&min_views=4")
    assert first == again == [106, 105, 104, 103, 102, 101]
    assert elapsed < 2.0 + 5.0  # the deadline and generous slack, not the 30 s stall


def test_a_request_that_joined_a_fetch_its_leaders_deadline_cut_asks_again() -> None:
    """A fetch a request waits on ends by that request's deadline. Another request, which joined it with most of
    its own deadline left, was answered the first one's `DeadlinePassed`: it now asks the forum itself. On the
    Procfile's gunicorn (one worker: the two share a single flight)."""
    with FakeForum(mode="markdown") as forum:
        site = Lists(forum)
        site.serve()
        with procfile_app(settings_for(f"markdown:{forum.url}", cache_ttl=300, request_deadline=3.0)) as app:
            forum.stall("/latest.md", 1.5, times=1)  # the leader's list: 1.5 s of its 3 s
            forum.stall("/latest.json", 5.0, times=1)  # its JSON page: cut at its deadline, 1.5 s later
            with ThreadPoolExecutor(1) as pool:
                leader = pool.submit(httpx.get, app.feed_url("/latest.atom?min_views=5"), timeout=30)
                deadline = time.monotonic() + 10
                while not forum.count("/latest.json") and time.monotonic() < deadline:
                    time.sleep(0.02)  # the leader is waiting on the JSON page
                joined = httpx.get(app.feed_url("/latest.atom?min_views=3"), timeout=30)
                led = leader.result()
    assert led.status_code == 504 and "deadline passed" in led.text
    assert joined.status_code == 200, joined.text[:300]
    assert forum.count("/latest.json") == 2  # the joined request asked again


def test_a_static_build_reads_each_page_once_however_long_it_runs(tmp_path, skew: float) -> None:
    """A static build keeps every page it read for the whole run, so that each is asked once; a paced run is
    longer than the skew allowed between a list's pages, and its later feeds read the earlier feeds' pages
    again (10 requests for 6 pages). A run reads each page once, its copies as far apart as it is long."""
    from tests.test_cli import invoke

    with FakeForum(mode="markdown") as forum:
        Lists(forum).serve()
        config = tmp_path / "feeds.toml"
        config.write_text(f'site_url = "https://x.example/"\n[fetch]\ndelay = {skew + 0.5}\nconcurrency = 1\n'
                          f'[defaults]\nforum = "markdown:{forum.url}"\n'
                          '[[feeds]]\nname = "one"\npath = "latest"\nformats = ["atom"]\n'
                          '[[feeds]]\nname = "two"\npath = "latest"\npages = 2\nmin_views = 5\nformats = ["atom"]\n',
                          encoding="utf-8")
        result = invoke("build", "--config", str(config), "--out-dir", str(tmp_path / "out"))
        asked = [request.target for request in forum.requests]
    assert result.exit_code == 0, result.stderr
    assert len(asked) == len(set(asked)), asked


def test_a_feed_built_from_a_page_read_again_is_as_old_as_what_it_kept(served: tuple[Lists, RunningApp],
                                                                       skew: float) -> None:
    """What is built of a list is as old as its oldest page (`Age`, `Last-Modified`, how long it stays fresh):
    a page read again to bring the list in step left its old copy's time behind as well, and the feed was
    dated by a copy it did not use."""
    _site, app = served
    first = httpx.get(app.feed_url("/latest.atom"), timeout=30)
    assert first.status_code == 200
    time.sleep(skew + 1.5)
    response = httpx.get(app.feed_url("/latest.atom?pages=2"), timeout=30)
    assert response.status_code == 200
    assert int(response.headers.get("Age", "0")) < skew + 1.5
    # dated by the page read again, seconds after the copy it replaced (which dated the first feed), not by it
    assert parsedate_to_datetime(response.headers["Last-Modified"]) > parsedate_to_datetime(first.headers["Last-Modified"])


def test_an_empty_list_rebuilt_is_the_same_bytes_whatever_it_held_before() -> None:
    """A list with no topic (an empty category, a user's list with none) gave a feed dated at its build: each
    rebuild, a second later, was new bytes, a new ETag and a new download for the same empty list. The date it
    gave itself is kept with the copy and given again, also after the list had held topics."""
    with FakeForum(mode="json") as forum:
        site = Lists(forum, count=2)
        site.serve()
        with running_app(settings_for(f"json:{forum.url}", cache_ttl=0)) as app:
            assert topic_ids(app, "/latest.atom") == [102, 101]
            site.topics.clear()
            site.serve()
            answers = []
            for _ in range(3):
                answers.append(httpx.get(app.feed_url("/latest.atom"), timeout=30))
                time.sleep(1.1)  # past the second the last one was built in
    assert all(answer.status_code == 200 for answer in answers)
    assert not feedparser.parse(answers[0].content).entries and feedparser.parse(answers[0].content).bozo == 0
    assert answers[1].content == answers[2].content and answers[1].headers["ETag"] == answers[2].headers["ETag"]
    assert answers[0].content == answers[1].content


def test_a_page_read_again_that_joins_another_requests_fetch_waits_half_the_time_left(skew: float) -> None:
    """A page read again to bring a list in step, which joined another request's fetch of it, waited on it as long
    as its own request had left: then the JSON page the feed's filter needs could not start, and the feed was a
    504. It waits half of what is left, as its own fetch would, and the copy held stands. In this process (the
    skew allowed is set here; both requests go through one single-flight either way)."""
    with FakeForum(mode="markdown") as forum:
        site = Lists(forum)
        site.serve()
        with running_app(settings_for(f"markdown:{forum.url}", cache_ttl=3, request_deadline=8.0)) as app:
            warmed = time.monotonic()
            assert topic_ids(app, "/latest.atom") == [106, 105, 104]
            time.sleep(2.0)  # page 0 is still fresh for the next request
            forum.stall("/latest.md?page=1", 3.0, times=1)
            with ThreadPoolExecutor(1) as pool:
                first = pool.submit(topic_ids, app, "/latest.atom?pages=2&min_views=5")
                time.sleep(max(warmed + 3.2 - time.monotonic(), 0.0))  # page 0 is stale now, for another feed
                forum.stall("/latest.md", 30.0, times=1)
                httpx.get(app.feed_url("/latest.rss"), timeout=30)  # its fetch of page 0, cut at its deadline
                shown = first.result()  # a 200 (`topic_ids`): it was a 504, its deadline spent on the wait
    assert shown == [106, 105, 104, 103, 102, 101]
