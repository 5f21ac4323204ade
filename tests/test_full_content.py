"""content=full: each entry's first post, creation date, category and tags, from the topic's own Markdown."""

from __future__ import annotations

import feedparser
import httpx
import pytest
from lxml import etree

from tests.appserver import running_app, settings_for
from tests.upstream import DEFAULT_ROOT, FakeForum, read_at

COMPILER = "/c/compiler/5"
POLYHEDRAL = "/t/rfc-polyhedral-optimization-pass-for-pytorch-inductor/3341.md"
LIST_PAGE = DEFAULT_ROOT / "c/compiler/5.md"


def get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=20)


@pytest.fixture
def app(upstream):
    # A cold content=full feed is a list and 30 topic pages, past one client's third of the forum's 10 s
    # window, for which its build waits (tests/test_budget_windows.py): these tests are about what the pages
    # add, and the window is off.
    with running_app(settings_for(upstream.url, forum_budget_10s=0)) as running:
        yield running


def by_id(entries) -> dict[str, object]:
    return {e.id.rsplit("/", 1)[1]: e for e in entries}


def topic_requests(upstream) -> list[str]:
    return [r.target for r in upstream.requests if r.path.startswith("/t/")]


def test_atom_entries_carry_first_post_dates_and_categories(app, upstream):
    response = get(app.feed_url(f"{COMPILER}.atom?content=full"))
    assert response.status_code == 200
    etree.fromstring(response.content)
    parsed = feedparser.parse(response.content)
    assert parsed.bozo == 0 and len(parsed.entries) == 30
    entries = by_id(parsed.entries)
    poly = entries["3341"]
    assert "greedily" in poly.content[0].value  # only in the first post, not in the excerpt
    assert "<pre>" in poly.content[0].value or "<code" in poly.content[0].value
    assert poly.published_parsed[:6] == (2026, 5, 28, 14, 3, 11)
    assert {t.term for t in poly.tags} >= {"compiler", "inductor", "rfc", "loop-fusion"}
    # The reader's time zone in the topic header is normalised to UTC.
    assert entries["3441"].published_parsed[:6] == (2026, 7, 15, 16, 30, 45)


def test_hostile_post_is_sanitized(app):
    body = get(app.feed_url(f"{COMPILER}.json?content=full")).json()
    hostile = next(i for i in body["items"] if i["id"].endswith("/t/3411"))
    html = hostile["content_html"].lower()
    assert "<script" not in html and "onerror" not in html and "javascript:" not in html and "<iframe" not in html


def test_missing_topic_falls_back_to_the_excerpt(app, upstream, caplog):
    caplog.set_level("WARNING", logger="feedbridge")
    body = get(app.feed_url(f"{COMPILER}.json?content=full")).json()
    missing = next(i for i in body["items"] if i["id"].endswith("/t/2742"))  # no fixture: the forum says 404
    assert "content_html" not in missing
    assert missing["content_text"].startswith("Is there any documentation")
    assert "date_published" not in missing
    assert "topic 2742 falls back to its excerpt" in caplog.text
    assert get(f"{app.url}/healthz").json()["topic_fetch_failures"] >= 1


def test_rss_pubdate_is_the_creation_date_when_known(app):
    parsed = feedparser.parse(get(app.feed_url(f"{COMPILER}.rss?content=full")).content)
    assert parsed.bozo == 0
    poly = by_id(parsed.entries)["3341"]
    assert poly.published == "Thu, 28 May 2026 14:03:11 +0000"
    assert "greedily" in poly.content[0].value


def test_topic_pages_are_cached_by_last_activity(upstream):
    """What saves the forum work, since core answers no 304: the list page is read first, whole, and a topic
    page only for a topic whose last activity the list says moved. A quiet poll is the list page alone."""
    with running_app(settings_for(upstream.url, cache_ttl=0, forum_budget_10s=0)) as app:
        get(app.feed_url(f"{COMPILER}.atom?content=full"))
        first = topic_requests(upstream)
        assert len(first) == 30  # one per entry, each once
        upstream.reset()
        get(app.feed_url(f"{COMPILER}.rss?content=full"))  # the list read again (TTL 0), topics unchanged
        assert [r.target for r in upstream.requests] == [read_at(COMPILER)]  # 404s are remembered too
        moved = LIST_PAGE.read_text(encoding="utf-8").replace('3341 "2026-06-09T19:10:29Z"', '3341 "2026-09-30T08:00:00Z"')
        assert moved != LIST_PAGE.read_text(encoding="utf-8")
        upstream.set_body(f"{COMPILER}.md", moved)  # a new post in one topic
        upstream.reset()
        body = get(app.feed_url(f"{COMPILER}.atom?content=full")).content
        assert [r.target for r in upstream.requests] == [read_at(COMPILER), POLYHEDRAL]
        assert b"greedily" in body  # its page read again, its first post in the feed


def test_topic_budget_bounds_fetches(upstream):
    with running_app(settings_for(upstream.url, topic_budget=4)) as app:
        parsed = feedparser.parse(get(app.feed_url(f"{COMPILER}.atom?content=full")).content)
    assert len(topic_requests(upstream)) == 4
    assert len(parsed.entries) == 30
    assert sum(1 for e in parsed.entries if "content" in e) <= 4


def test_keyword_query_matches_the_first_post(app):
    excerpt_only = get(app.feed_url(f"{COMPILER}.json?q=greedily")).json()["items"]
    full = get(app.feed_url(f"{COMPILER}.json?q=greedily&content=full")).json()["items"]
    assert excerpt_only == []
    assert [i["id"].rsplit("/", 1)[1] for i in full] == ["3341"]


def test_tag_filter_reads_topic_tags(app):
    items = get(app.feed_url(f"{COMPILER}.json?tag=loop-fusion")).json()["items"]
    assert [i["id"].rsplit("/", 1)[1] for i in items] == ["3341"]
    assert "loop-fusion" in items[0]["tags"]


def test_tag_on_a_markdown_list_takes_the_tags_of_its_json_list_not_topic_pages(upstream):
    """An any-of `tag=` on a Markdown list reads the JSON list of the same page, as `exclude_tag=` and `tag=a+b` do
    (core lists every topic's tags there: `TopicListItemSerializer`, `TopicTagsMixin`). It read the topics' own
    pages, as many as the topic budget: a tagged topic past it was left out, a topic whose page failed too, and
    every entry came with its first post, a feed of excerpts on a JSON forum and of whole posts here."""
    with FakeForum(json_lists=True) as forum, running_app(settings_for(forum.url, topic_budget=1)) as app:
        items = get(app.feed_url(f"{COMPILER}.json?tag=rfc")).json()["items"]
        excerpts = {i["id"]: i for i in get(app.feed_url(f"{COMPILER}.json?exclude_tag=none")).json()["items"]}
        assert topic_requests(forum) == []
    assert sorted(i["id"].rsplit("/", 1)[1] for i in items) == ["3341", "3441"]
    assert all(i == excerpts[i["id"]] for i in items)


def test_tag_on_a_forum_that_refuses_its_json_lists_reads_topic_pages_for_their_tags_alone(upstream, app):
    """Where the forum refuses the JSON list, the topics' own pages give their tags, and nothing else: the entries
    stay the list's excerpts (`content=full` is what adds each first post)."""
    upstream.fail(read_at(COMPILER, "json"), 403)
    response = get(app.feed_url(f"{COMPILER}.json?tag=rfc"))
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    excerpts = {i["id"]: i for i in get(app.feed_url(f"{COMPILER}.json")).json()["items"]}
    assert sorted(i["id"].rsplit("/", 1)[1] for i in items) == ["3341", "3441"]
    assert topic_requests(upstream)
    assert all("rfc" in i["tags"] and {**i, "tags": None} == {**excerpts[i["id"]], "tags": None} for i in items)


def test_rate_limited_topic_fetches_fall_back(app, upstream):
    upstream.rate_limit(POLYHEDRAL, retry_after=60)
    parsed = feedparser.parse(get(app.feed_url(f"{COMPILER}.atom?content=full")).content)
    assert parsed.bozo == 0
    assert "content" not in by_id(parsed.entries)["3341"]
    # The forum asked for quiet: the topics after the 429 were not requested.
    assert len(topic_requests(upstream)) < 30


def test_a_topic_past_the_topic_budget_keeps_what_is_cached_of_its_page(upstream):
    """The topic budget bounds the topic pages a build asks for; the topics past it were left to their excerpts,
    even when an earlier build had read their pages: a topic pushed past the budget by newer ones lost its
    content, and its RSS date went from its creation to its last activity. They now take what is cached."""
    with running_app(settings_for(upstream.url, topic_budget=3)) as app:
        one = feedparser.parse(get(app.feed_url(f"{COMPILER}.atom?content=full&author=tom")).content)
        (first,) = one.entries  # topic 3306, the seventh newest: its page read for this feed
        asked = len(topic_requests(upstream))
        whole = feedparser.parse(get(app.feed_url(f"{COMPILER}.atom?content=full")).content)
        assert len(topic_requests(upstream)) == asked + 3  # the three newest topics' pages, no more
    (again,) = [entry for entry in whole.entries if entry.id == first.id]
    assert list(whole.entries).index(again) >= 3
    assert "content" in again and again.content[0].value == first.content[0].value
    assert again.published == first.published
