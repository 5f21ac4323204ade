"""The web service over a real socket, against the fake forum on 127.0.0.1."""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from urllib.parse import parse_qsl, urlsplit

import feedparser
import httpx
import pytest
from lxml import etree

from tests.appserver import procfile_app, procfile_web, running_app, settings_for
from tests.upstream import IDENTITY, FakeForum, list_reads, read_at

COMPILER = "/c/compiler/5"
LIST = read_at(COMPILER)  # where the bridge reads the category: /latest.md?category=5&order=activity


@pytest.fixture
def app(upstream):
    with running_app(settings_for(upstream.url, access_log=True)) as running:  # the request lines are tested here
        yield running


def get(url: str, **kwargs) -> httpx.Response:
    return httpx.get(url, timeout=15, **kwargs)


# --- routes and formats -------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt,media", [("atom", "application/atom+xml"), ("rss", "application/rss+xml"),
                                       ("json", "application/feed+json")])
def test_category_feed_in_every_format(app, fmt, media):
    response = get(app.feed_url(f"{COMPILER}.{fmt}"))
    assert response.status_code == 200
    assert response.headers["content-type"] == f"{media}; charset=utf-8"
    if fmt == "json":
        feed = response.json()
        assert feed["version"] == "https://jsonfeed.org/version/1.1"
        items = feed["items"]
        assert len(items) == 30
        assert items[0]["id"].endswith("/t/3441")  # newest first: the 2021 "About" topic sorts last
        assert items[-1]["id"].endswith("/t/14")
    else:
        etree.fromstring(response.content)
        parsed = feedparser.parse(response.content)
        assert parsed.bozo == 0
        assert len(parsed.entries) == 30
        assert parsed.entries[0].id == f"http://{app.forum_key}/t/3441"
        assert parsed.entries[0].author == "markbgilbert"


@pytest.mark.parametrize("path,count", [
    ("/latest.atom", 30), ("/hot.atom", None), ("/top.atom?period=weekly", None),
    ("/c/hardware/gpu/12.atom", None), ("/tag/gpu.atom", None), ("/tag/gpu/7.rss", None),
])
def test_list_routes(app, upstream, path, count):
    response = get(app.feed_url(path))
    assert response.status_code == 200, response.text
    parsed = feedparser.parse(response.content)
    assert parsed.bozo == 0
    assert len(parsed.entries) == (count or len(parsed.entries)) > 0


def test_tag_redirect_is_followed_on_the_same_forum(app, upstream):
    assert get(app.feed_url("/tag/gpu.atom")).status_code == 200
    assert upstream.count("/tag/gpu.md") == 1
    assert upstream.count("/tag/gpu/7.md") == 1


def test_top_period_is_passed_upstream_and_validated(app, upstream):
    assert get(app.feed_url("/top.rss?period=monthly")).status_code == 200
    assert list_reads(upstream.requests)[-1].target == "/top.md?period=monthly"
    bad = get(app.feed_url("/top.rss?period=forever"))
    assert bad.status_code == 400
    assert "period must be one of" in bad.text


def test_author_filter_across_pages(app, upstream):
    response = get(app.feed_url(f"{COMPILER}.atom?author=JANSEL&pages=3"))
    parsed = feedparser.parse(response.content)
    assert parsed.bozo == 0
    assert len(parsed.entries) >= 2
    assert {e.author for e in parsed.entries} == {"jansel"}
    updated = [e.updated_parsed for e in parsed.entries]
    assert updated == sorted(updated, reverse=True)
    assert "author: jansel" in parsed.feed.title
    assert upstream.count(read_at(COMPILER, page=1)) == 1 and upstream.count(read_at(COMPILER, page=2)) == 1


def test_pages_stop_at_the_last_page(app, upstream):
    assert get(app.feed_url(f"{COMPILER}.json?pages=5")).status_code == 200
    # Pages 1-3 are one wave (fetch_concurrency 3); page 2 has no Next link, so page 4 is never asked for.
    assert upstream.count(read_at(COMPILER, page=4)) == 0
    items = get(app.feed_url(f"{COMPILER}.json?pages=5")).json()["items"]
    assert len(items) == 30 + 30 + 12


def test_user_feed_reads_latest_and_keeps_category(app, upstream):
    response = get(app.feed_url("/u/jansel.rss?category=5"))
    assert response.status_code == 200
    # Its category's latest list by activity, whatever the category's own sort order (TopicQuery#default_results)
    assert list_reads(upstream.requests)[-1].target == "/latest.md?category=5&order=activity"
    parsed = feedparser.parse(response.content)
    assert parsed.bozo == 0
    assert all(e.author == "jansel" for e in parsed.entries)


def test_keyword_query_on_a_category_and_the_latest_list(app):
    items = get(app.feed_url(f"{COMPILER}.json?q=inductor")).json()["items"]
    assert items and all("inductor" in (i["title"] + i.get("summary", "")).lower() for i in items)
    excluded = get(app.feed_url(f"{COMPILER}.json?q=inductor%20-rfc")).json()["items"]
    assert 0 < len(excluded) < len(items)
    latest = get(app.feed_url("/latest.json?q=caf%C3%A9"))
    assert latest.status_code == 200
    assert any("Café" in i["title"] for i in latest.json()["items"])


# --- a moved path: /search is the latest list with the same query -------------------------------------------

@pytest.mark.parametrize("query,shown", [("q=inductor%20-rfc&category=5&limit=4", "nductor"), ("q=caf%C3%A9", "Café")])
@pytest.mark.parametrize("fmt", ["atom", "json", "html"])
def test_the_search_path_answers_301_to_the_latest_list_with_the_same_query(app, upstream, fmt, query, shown):
    """A feed reader subscribed to `/search?q=` moves to `/latest?q=`, which gives the very same feed: the 301
    asks the forum nothing, and following it gives the bytes the latest feed's own URL gives."""
    moved = get(app.feed_url(f"/search.{fmt}?{query}"))
    assert moved.status_code == 301, moved.text
    location = urlsplit(moved.headers["location"])
    assert location.path == f"/{app.forum_key}/latest.{fmt}" and not location.netloc
    assert parse_qsl(location.query) == parse_qsl(query)
    assert upstream.count() == 0 and "\n" not in moved.text.strip()
    followed = get(app.feed_url(f"/search.{fmt}?{query}"), follow_redirects=True)
    direct = get(f"{app.url}{moved.headers['location']}")
    assert followed.status_code == direct.status_code == 200, followed.text
    assert str(followed.url) == f"{app.url}{moved.headers['location']}"
    assert followed.content == direct.content and shown in direct.text


def test_the_301_carries_the_query_escaped_and_only_once_it_is_valid(app, upstream):
    """What the query holds reaches `Location` percent-encoded (a `&`, `#`, quote or non-ASCII letter stays
    inside its value), and a query the latest feed refuses is its 400, with no `Location` at all."""
    words = 'café "dynamic shapes" OR a&b=c #x +y'
    moved = get(app.feed_url("/search.rss"), params={"q": words})
    assert moved.status_code == 301
    location = moved.headers["location"]
    assert parse_qsl(urlsplit(location).query) == [("q", words)]
    assert not set(location) & set(' "#\r\n<>') and location.isascii()
    for query, words in [("q=a%0d%0aX-Injected:%201", "control characters"), (f"q={'a' * 1001}", "longer than"),
                         ("q=x&author=a%20b", "valid username")]:
        refused = get(app.feed_url(f"/search.atom?{query}"))
        assert refused.status_code == 400 and words in refused.text and "location" not in refused.headers
    assert upstream.count() == 0


def test_limit(app):
    items = get(app.feed_url(f"{COMPILER}.json?limit=3")).json()["items"]
    assert [i["id"].rsplit("/", 1)[1] for i in items] == ["3441", "3411", "3341"]


def test_healthz(app):
    response = get(f"{app.url}/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert app.forum_key in response.json()["forums"]


def test_robots_txt_keeps_crawlers_to_the_front_page(app, upstream):
    """A crawler following the pages' links would make every feed, filter and view a cold read of the forum,
    spent from the readers' budget: robots.txt allows the front page only (RFC 9309's `$`)."""
    from urllib.robotparser import RobotFileParser

    answer = get(f"{app.url}/robots.txt")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    assert answer.text.splitlines() == ["User-agent: *", "Allow: /$", "Disallow: /"]
    robots = RobotFileParser()
    robots.parse(answer.text.splitlines())
    for path in (f"{COMPILER}.atom", f"{COMPILER}.html?q=x", "/opml"):
        assert not robots.can_fetch("AnyBot", app.feed_url(path))
    assert upstream.count() == 0


# --- HTTP caching -------------------------------------------------------------------------------------

def test_a_reader_that_takes_gzip_gets_the_gzip_kept_with_the_feed(app, upstream):
    """A feed's gzip is made once, when it is built, and kept beside it: a built feed and a hit are both served
    gzipped to a client that takes gzip, as a representation of its own (its ETag, `Vary`), and as they are
    to one that does not. `gzip;q=0` refuses gzip whatever `*` says (RFC 9110 §12.5.3)."""
    import gzip

    def raw(url: str, coding: str, **headers: str) -> tuple[httpx.Response, bytes]:
        with httpx.stream("GET", url, headers={"Accept-Encoding": coding, **headers}, timeout=30) as answer:
            return answer, b"".join(answer.iter_raw())

    for query in ("", "?limit=5"):  # built for a client that takes gzip, then for one that does not
        url = app.feed_url(f"{COMPILER}.atom{query}")
        built, packed = raw(url, "gzip, deflate")
        plain, body = raw(url, "identity")
        hit, again = raw(url, "gzip")
        assert [built.headers["x-feedbridge-cache"], hit.headers["x-feedbridge-cache"]] == ["miss", "hit"]
        for answer in (built, hit, plain):
            assert answer.status_code == 200 and answer.headers["vary"] == "Accept, Accept-Encoding"
        assert built.headers["content-encoding"] == hit.headers["content-encoding"] == "gzip"
        assert "content-encoding" not in plain.headers
        assert packed == again and gzip.decompress(packed) == body and 2 * len(packed) < len(body)
        assert int(hit.headers["content-length"]) == len(packed)
        assert hit.headers["etag"] == plain.headers["etag"][:-1] + '-gzip"'
        assert raw(url, "gzip", **{"If-None-Match": hit.headers["etag"]})[0].status_code == 304
        assert raw(url, "identity", **{"If-None-Match": hit.headers["etag"]})[0].status_code == 200
    url = app.feed_url(f"{COMPILER}.atom")
    for coding, gzipped in [("*", True), ("x-gzip", True), ("GZIP;q=0.5", True), ("gzip;q=0, *", False),
                            ("*;q=0", False), ("br", False), ("", False), ("deflate , gzip ; q=0.001", True),
                            ("gzip;q=abc", False), ("gzip;q=1.5, *", True), ("gzip;q=0.0000, *", False)]:
        answer, _ = raw(url, coding)
        assert (answer.headers.get("content-encoding") == "gzip") is gzipped, coding
    assert upstream.count(LIST) == 1  # both feeds built from one read of the list; a gzip is no build of its own


def test_the_procfiles_worker_sends_the_kept_gzip_whole():
    """The Procfile's gevent worker sends a kept body in views of its bytes (`web/worker.py`): the gzip too, on
    the miss and on the hit path, whole and as kept."""
    import gzip

    with FakeForum() as forum, procfile_app(settings_for(forum.url)) as app:
        url = app.feed_url(f"{COMPILER}.atom?content=full")
        answers = []
        for _ in range(2):
            with httpx.stream("GET", url, headers={"Accept-Encoding": "gzip"}, timeout=30) as answer:
                answers.append((answer, b"".join(answer.iter_raw())))
        plain = get(url, headers={"Accept-Encoding": "identity"})
    assert [answer.headers["x-feedbridge-cache"] for answer, _ in answers] == ["miss", "hit"]
    assert all(answer.headers["content-encoding"] == "gzip" and int(answer.headers["content-length"]) == len(raw)
               and gzip.decompress(raw) == plain.content for answer, raw in answers)


def test_a_feeds_html_view_is_gzipped_as_the_feed_is(app):
    """A `.html` view is kept as a feed is, with its gzip; a page not kept (the last good pages) has none."""
    import gzip

    url = app.feed_url(f"{COMPILER}.html")
    with httpx.stream("GET", url, headers={"Accept-Encoding": "gzip"}, timeout=30) as packed:
        raw = b"".join(packed.iter_raw())
    plain = get(url, headers={"Accept-Encoding": "identity"})
    assert packed.headers["content-encoding"] == "gzip" and "content-encoding" not in plain.headers
    assert gzip.decompress(raw) == plain.content and 3 * len(raw) < len(plain.content)
    assert "Accept-Encoding" in packed.headers["vary"] and packed.headers["etag"] == plain.headers["etag"][:-1] + '-gzip"'
    again = get(url, headers={"Accept-Encoding": "gzip", "If-None-Match": packed.headers["etag"]})
    assert again.status_code == 304


HOSTILE_CODINGS = {  # each as long as gunicorn admits a header line (8190 bytes)
    "parameters": ("gzip" + ";a=b" * 2100)[:8190],
    "items": ("gzip;q=0.5," * 750)[:8190],
    "escapes": ('gzip;a="' + '\\"' * 4100)[:8189] + '"',
}


def test_a_hit_parses_each_accept_encoding_once_and_a_hostile_one_never(app, monkeypatch):
    """The hit path reads `Accept-Encoding` on every hit, and charges no client's allowance for it: Werkzeug's
    parser took 6 to 15 µs of `gzip, deflate, br` and 0.3 to 8 ms of an 8 KB header, the longest gunicorn admits.
    Counted, not timed: a header is parsed once per process, and one longer than any client's never."""
    from feedbridge.web import responses

    parsed: list[str] = []
    real = responses.parse_accept_header
    monkeypatch.setattr(responses, "parse_accept_header", lambda value: parsed.append(value) or real(value))
    responses._gzip_quality.cache_clear()
    url = app.feed_url(f"{COMPILER}.atom")
    with httpx.Client(timeout=15) as client:
        client.get(url)
        for coding, gzipped in [("gzip, deflate, br", True), *((hostile, False) for hostile in HOSTILE_CODINGS.values())]:
            for _ in range(20):
                answer = client.get(url, headers={"Accept-Encoding": coding})
                assert answer.headers["x-feedbridge-cache"] == "hit"
                assert (answer.headers.get("content-encoding") == "gzip") is gzipped, coding[:20]
    assert parsed.count("gzip, deflate, br") == 1 and all(len(value) <= 256 for value in parsed), parsed


def test_conditional_get(app):
    url = app.feed_url(f"{COMPILER}.atom")
    first = get(url)
    assert first.headers["cache-control"] == "public, max-age=300" and "age" not in first.headers
    # when these bytes were built (`FeedService._changed`), never the future, as an entry's date may be
    assert parsedate_to_datetime(first.headers["last-modified"]) <= datetime.now(UTC)
    etag = first.headers["etag"]
    assert get(url, headers={"If-None-Match": etag}).status_code == 304
    assert get(url, headers={"If-Modified-Since": first.headers["last-modified"]}).status_code == 304
    assert get(url, headers={"If-None-Match": '"other"'}).status_code == 200
    earlier = format_datetime(datetime(2026, 1, 1, tzinfo=UTC), usegmt=True)
    assert get(url, headers={"If-Modified-Since": earlier}).status_code == 200
    # a field of more than one date is ignored (RFC 9110 §13.1.3, §13.1.4): the first was taken, a 304, a 412
    listed = f"{first.headers['last-modified']}, {earlier}"
    assert get(url, headers={"If-Modified-Since": listed}).status_code == 200
    assert get(url, headers={"If-Unmodified-Since": f"{earlier}, {first.headers['last-modified']}"}).status_code == 200


def test_a_reader_validating_by_date_alone_gets_a_feed_whose_older_topic_changed(upstream):
    """RFC 9110 §8.8.2: `Last-Modified` is when the representation last changed. It was the newest entry's
    date, which an edit of an older topic's title does not move: a reader sending `If-Modified-Since` alone got
    `304` for a feed that had changed. Now changed bytes are dated past the copy they replace, and a rebuild
    into the same bytes keeps its date (so its `304` still comes)."""
    with running_app(settings_for(upstream.url, cache_ttl=0)) as app:
        url = app.feed_url(f"{COMPILER}.atom")
        first = get(url)
        listed = httpx.get(upstream.url + LIST, timeout=10).text
        oldest = next(e.title for e in reversed(feedparser.parse(first.content).entries) if e.title in listed)
        time.sleep(1.1)  # a reader's next poll, past the second of the first answer's date (`Last-Modified` <= `Date`)
        upstream.set_body(LIST, listed.replace(oldest, f"{oldest} (edited)", 1))
        changed = get(url, headers={"If-Modified-Since": first.headers["last-modified"]})
        again = get(url, headers={"If-Modified-Since": changed.headers["last-modified"]})
    assert changed.status_code == 200 and f"{oldest} (edited)" in changed.text
    assert parsedate_to_datetime(changed.headers["last-modified"]) > parsedate_to_datetime(first.headers["last-modified"])
    assert again.status_code == 304


@pytest.mark.parametrize("ahead", [None, 120], ids=["past", "within the clock skew"])
def test_a_feeds_own_date_does_not_go_back_when_its_newest_topic_is_deleted(upstream, ahead):
    """A feed gives itself its newest topic's date (Atom's `updated`, RSS's `lastBuildDate`). When that topic was
    deleted (or moved to another category), the next build's date went back to the next newest's, and a reader
    that keeps the newest date it saw took the changed feed for an old one. Now a rebuild's date is never before
    the date of the copy it replaces, one a couple of minutes ahead of the clock too (a feed's own within the
    5 minutes a forum's clock may be ahead)."""
    with running_app(settings_for(upstream.url, cache_ttl=0)) as app:
        listed = httpx.get(upstream.url + LIST, timeout=10).text
        if ahead:  # the newest topic dated 2 minutes from now
            latest = max(re.findall(r'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"', listed))
            soon = (datetime.now(UTC) + timedelta(seconds=ahead)).strftime("%Y-%m-%dT%H:%M:%SZ")
            upstream.set_body(LIST, listed := listed.replace(latest, soon))
        first = {fmt: feedparser.parse(get(app.feed_url(f"{COMPILER}.{fmt}")).content) for fmt in ("atom", "rss")}
        newest = max(first["atom"].entries, key=lambda e: e.updated_parsed)
        start = listed.rindex("## [", 0, listed.index(f"]({newest.link})"))
        end = listed.find("---", start)
        upstream.set_body(LIST, listed[:start] + (listed[end + 3:] if end >= 0 else ""))
        again = {fmt: feedparser.parse(get(app.feed_url(f"{COMPILER}.{fmt}")).content) for fmt in ("atom", "rss")}
    for fmt in ("atom", "rss"):
        assert newest.title not in [e.title for e in again[fmt].entries], fmt  # deleted, so the feed was rebuilt
        assert again[fmt].bozo == 0 and again[fmt].feed.updated_parsed == first[fmt].feed.updated_parsed, fmt
    # the date the next newest topic would have given it is earlier: the date held is what kept it
    assert max(e.updated_parsed for e in again["atom"].entries) < first["atom"].feed.updated_parsed


def test_a_feed_that_changes_at_each_request_is_never_dated_past_its_answer(upstream):
    """RFC 9110 §8.8.2.1: `Last-Modified` is never later than the answer's `Date`. Changed bytes are dated a second
    past the copy they replace, so a feed rebuilt into new bytes at each of a few requests within a second (cache
    TTL 0) was dated seconds ahead of the answers carrying it."""
    with running_app(settings_for(upstream.url, cache_ttl=0)) as app:
        url = app.feed_url(f"{COMPILER}.atom")
        listed = httpx.get(upstream.url + LIST, timeout=10).text
        oldest = next(e.title for e in reversed(feedparser.parse(get(url).content).entries) if e.title in listed)
        answers = []
        for n in range(5):
            upstream.set_body(LIST, listed.replace(oldest, f"{oldest} (edit {n})", 1))
            answers.append(get(url))
    assert [f"{oldest} (edit {n})" in answer.text for n, answer in enumerate(answers)] == [True] * 5
    for answer in answers:
        assert parsedate_to_datetime(answer.headers["last-modified"]) <= parsedate_to_datetime(answer.headers["date"])



def test_a_reader_validating_by_date_alone_gets_bytes_changed_within_the_second(upstream):
    """While the copy's date is ahead of the clock, `Last-Modified` says now, which tells nothing from the copy a
    reader got earlier in the same second: `If-Modified-Since` answered `304` for bytes changed since (cache TTL 0).
    It is not read then; the ETag still is."""
    with running_app(settings_for(upstream.url, cache_ttl=0)) as app:
        url = app.feed_url(f"{COMPILER}.atom")
        listed = httpx.get(upstream.url + LIST, timeout=10).text
        previous = get(url)
        oldest = next(e.title for e in reversed(feedparser.parse(previous.content).entries) if e.title in listed)
        for n in range(5):
            upstream.set_body(LIST, listed.replace(oldest, f"{oldest} (edit {n})", 1))
            answer = get(url, headers={"If-Modified-Since": previous.headers["last-modified"]})
            assert answer.status_code == 200 and f"{oldest} (edit {n})" in answer.text, (n, answer.status_code)
            previous = answer
        assert get(url, headers={"If-None-Match": previous.headers["etag"]}).status_code == 304


def test_a_feed_whose_filters_keep_nothing_is_the_same_bytes_while_its_list_is(upstream):
    """An Atom feed must have a date: one with no entry was dated at its build, so a keyword feed that matched
    nothing was a new ETag, and a whole download, at every poll. Its date is now its list's newest."""
    with running_app(settings_for(upstream.url, cache_ttl=0)) as app:
        whole = feedparser.parse(get(app.feed_url(f"{COMPILER}.atom")).content)
        url = app.feed_url(f"{COMPILER}.atom?q=zzzznothingmatches")
        first = get(url)
        time.sleep(1.1)  # past the second the first build was in
        second = get(url, headers={"If-None-Match": first.headers["etag"]})
    empty = feedparser.parse(first.content)
    assert empty.bozo == 0 and empty.entries == [] and empty.feed.updated == whole.feed.updated
    assert second.status_code == 304


def test_a_kept_copy_says_how_old_it_is(app):
    """RFC 9111 §5.1: a hit says its `Age`, so a cache in front keeps it for what is left of `max-age`."""
    url = app.feed_url(f"{COMPILER}.json?limit=3")
    built = get(url)
    time.sleep(1.1)
    hit = get(url)
    assert "age" not in built.headers and hit.headers["x-feedbridge-cache"] == "hit"
    assert 1 <= int(hit.headers["age"]) <= 300


def test_a_feed_built_from_cached_pages_while_the_forum_fails_says_their_age(upstream):
    """RFC 9111 §5.1: `Age` is the time since the content came from the origin. A feed not held when the forum
    failed is built from the cached pages of its list; it said `Age: 0` as if just read."""
    with running_app(settings_for(upstream.url, cache_ttl=1)) as app:
        assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200  # its list page is cached
        time.sleep(2.1)
        upstream.fail(LIST, 500)
        built = get(app.feed_url(f"{COMPILER}.atom?q=inductor"))  # a feed of that list not built before
    assert built.status_code == 200 and built.headers["x-feedbridge-cache"] == "stale"
    assert int(built.headers["age"]) >= 2 and f"from {built.headers['age']}s ago" in built.headers["x-feedbridge-stale"]


def test_a_feed_built_from_a_cached_page_is_as_old_as_the_page(upstream):
    """A feed built live from a list page another feed had read is as old as that page: fresh for what is left
    of the page's TTL, its `Age` counted from it. It was dated at its build: an RSS built from the page the Atom
    feed read 2 s before was served as a hit, with the old list, a second after the Atom feed showed the change."""
    # Seconds apart by margins a loaded machine keeps: the page is fresh from 0 to 6, the RSS feed built from it
    # at 2 (4 s before it expires), asked again at 6.6, before a copy dated at its build would expire (8).
    with running_app(settings_for(upstream.url, cache_ttl=6)) as app:
        started = time.monotonic()
        assert "Café ünïcödé" in get(app.feed_url("/latest.atom")).text  # the list page, cached
        changed = httpx.get(f"{upstream.url}/latest.md", timeout=30).text.replace("Café ünïcödé", "Café changed")
        upstream.set_body("/latest.md", changed)
        time.sleep(max(2 - (time.monotonic() - started), 0))
        rss = get(app.feed_url("/latest.rss"))  # from the cached page: no request to the forum
        assert rss.headers["x-feedbridge-cache"] == "miss" and int(rss.headers.get("age", "0")) >= 1
        assert "Café ünïcödé" in rss.text
        time.sleep(max(6.6 - (time.monotonic() - started), 0))
        later = get(app.feed_url("/latest.rss"))
        atom = get(app.feed_url("/latest.atom"))
    assert "Café changed" in later.text and "Café changed" in atom.text, later.headers


def test_a_feed_built_from_cached_pages_while_the_forum_fails_keeps_its_date_from_poll_to_poll(upstream):
    """With no copy of itself held, such a feed is built again at each poll: the same bytes and ETag got a new
    Last-Modified each time, so a reader validating by date alone downloaded it whole every time."""
    with running_app(settings_for(upstream.url, cache_ttl=1)) as app:
        assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200  # its list page is cached
        time.sleep(1.2)
        upstream.fail(LIST, 500)
        first = get(app.feed_url(f"{COMPILER}.rss"))
        time.sleep(1.2)
        again = get(app.feed_url(f"{COMPILER}.rss"), headers={"If-Modified-Since": first.headers["last-modified"]})
    assert first.status_code == 200 and first.headers["x-feedbridge-cache"] == "stale"
    assert again.status_code == 304, (first.headers["last-modified"], again.headers.get("last-modified"))


def test_a_stale_reason_naming_a_feed_reads_in_its_header_as_in_its_body(upstream):
    """A header is ASCII: the "·" a feed's title joins its parts with reads as "-" there, not as "?"."""
    with running_app(settings_for(upstream.url, cache_ttl=1)) as app:
        assert get(app.feed_url("/latest.atom")).status_code == 200
        time.sleep(1.1)
        upstream.rate_limit("/latest.md", 120)
        built = get(app.feed_url("/latest.atom?q=x"))
    said = built.headers["x-feedbridge-stale"]
    assert built.status_code == 200 and " - latest" in said and "?" not in said, said


def test_cached_feed_is_served_without_upstream_and_bytes_are_stable(app, upstream):
    url = app.feed_url(f"{COMPILER}.rss")
    first = get(url)
    second = get(url)
    assert first.headers["x-feedbridge-cache"] == "miss"
    assert second.headers["x-feedbridge-cache"] == "hit"
    assert first.content == second.content
    assert upstream.count(LIST) == 1


def polled_twice(upstream: FakeForum, monkeypatch: pytest.MonkeyPatch) -> tuple[httpx.Response, httpx.Response, int]:
    """A category feed built, then rebuilt (cache TTL 0): both answers, and how many pages the rebuild parsed."""
    import feedbridge.discourse.listing as listing_module

    with running_app(settings_for(upstream.url, cache_ttl=0)) as app:
        url = app.feed_url(f"{COMPILER}.atom")
        first = get(url)
        parses = []
        original = listing_module._parse_listing
        monkeypatch.setattr(listing_module, "_parse_listing", lambda *a, **k: parses.append(1) or original(*a, **k))
        second = get(url)
    return first, second, len(parses)


def test_a_quiet_poll_of_a_core_forum_downloads_and_parses_the_list_page_again(upstream, monkeypatch):
    """Core sends no validators on lists (Rack::ETag removed, `Cache-Control: no-cache, no-store`), so a
    rebuild has none to send: the list page comes whole again and is parsed again, for the same feed."""
    first, second, parses = polled_twice(upstream, monkeypatch)
    assert second.status_code == 200 and second.content == first.content
    assert [r.target for r in upstream.requests].count(LIST) == 2
    assert not {"if-none-match", "if-modified-since"} & set(upstream.requests[-1].headers)
    assert parses == 1


def test_where_a_proxy_adds_validators_a_revalidation_sends_them_and_a_304_costs_no_parse(monkeypatch):
    with FakeForum(validators=True) as upstream:
        first, second, parses = polled_twice(upstream, monkeypatch)
    assert second.status_code == 200 and second.content == first.content
    assert upstream.requests[-1].headers.get("if-none-match")
    assert parses == 0


def test_same_filters_in_another_order_share_one_cache_entry(app, upstream):
    a = get(app.feed_url(f"{COMPILER}.atom?author=jansel&author=ezyang&pages=2"))
    b = get(app.feed_url(f"{COMPILER}.atom?pages=2&author=EZYANG,jansel"))
    assert b.headers["x-feedbridge-cache"] == "hit"
    assert a.content == b.content


# --- errors -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path,status,words", [
    ("/latest.atom?limit=0", 400, "limit"),
    ("/latest.atom?limit=abc", 400, "limit"),
    ("/latest.atom?limit=5&limit=6", 400, "given 2 times"),
    ("/latest.atom?pages=99", 400, "pages"),
    ("/latest.atom?q=%22", 400, "q"),
    ("/latest.atom?author=a%20b", 400, "not a valid username"),
    ("/latest.atom?content=everything", 400, "content"),
    ("/search.atom", 400, "q is required"),  # the 400 it was before it moved: no 301 to a feed it never gave
    ("/search.atom?q=%20", 400, "q is required"),
    ("/search.atom?q=x&colour=red", 400, "colour= is not a feed parameter"),
    ("/search.xml?q=x", 404, "unknown feed format"),
    ("/latest.xml", 404, "unknown feed format"),
    ("/nothing/here.atom", 404, "no feed route"),
])
def test_bad_requests_are_precise(app, upstream, path, status, words):
    response = get(app.feed_url(path))
    assert response.status_code == status
    assert words in response.text
    assert response.headers["content-type"].startswith("text/plain")
    assert upstream.count() == 0


def test_unknown_forum_is_404_and_not_fetched(app, upstream):
    for path in ("latest.atom", "search.atom?q=x"):  # a moved path too: 404, not a 301 to nowhere
        response = get(f"{app.url}/example.com/{path}")
        assert response.status_code == 404
        assert "unknown forum" in response.text
    assert upstream.count() == 0


@pytest.mark.parametrize("fault,status,words", [
    (lambda up: up.fail("/latest.md", 500), 502, "answered 500"),
    (lambda up: up.fail("/latest.md", 502), 502, "answered 502"),
    (lambda up: up.fail("/latest.md", 404), 404, "answered 404"),
    (lambda up: up.fail("/latest.md", 410), 404, "answered 410"),
    (lambda up: up.html_login("/latest.md"), 502, "not a topic list"),
    (lambda up: up.json_error("/latest.md", status=200), 502, "not a topic list"),
    (lambda up: up.bad_utf8("/latest.md"), 502, "UTF-8"),
    (lambda up: up.huge("/latest.md"), 502, "limit"),
    (lambda up: up.huge("/latest.md", declare_length=False), 502, "limit"),
    (lambda up: up.truncate("/latest.md"), 502, "connection failed"),
    (lambda up: up.close("/latest.md"), 502, "connection failed"),
    (lambda up: up.redirect("/latest.md", "http://169.254.169.254/latest/meta-data"), 502, "outside"),
    (lambda up: up.redirect("/latest.md", "http://127.0.0.1:1/latest.md"), 502, "outside"),
    (lambda up: up.redirect("/latest.md", "/latest.md"), 502, "more than"),
])
def test_upstream_failures_with_a_cold_cache(app, upstream, fault, status, words):
    fault(upstream)
    response = get(app.feed_url("/latest.atom"))
    assert response.status_code == status
    assert words in response.text
    assert "Traceback" not in response.text


def test_rate_limited_upstream_is_honoured(app, upstream):
    upstream.rate_limit("/latest.md", retry_after=120)
    first = get(app.feed_url("/latest.atom"))
    assert first.status_code == 503
    assert 100 <= int(first.headers["retry-after"]) <= 120
    second = get(app.feed_url("/hot.atom"))  # another list on the same forum: nobody asks until then
    assert second.status_code == 503
    assert upstream.count("/hot.md") == 0


def test_rate_limit_with_http_date(app, upstream):
    upstream.rate_limit("/latest.md", retry_after=datetime.now(UTC) + timedelta(seconds=90))
    response = get(app.feed_url("/latest.atom"))
    assert response.status_code == 503
    assert 60 <= int(response.headers["retry-after"]) <= 91


def test_timeout_is_504(upstream):
    upstream.stall("/latest.md", 3)
    with running_app(settings_for(upstream.url, read_timeout=0.5, retries=0)) as app:
        started = time.monotonic()
        response = get(app.feed_url("/latest.atom"))
    assert response.status_code == 504
    assert time.monotonic() - started < 2.5


def test_dripping_body_hits_the_overall_deadline(upstream):
    upstream.drip("/latest.md", 200)
    with running_app(settings_for(upstream.url, total_timeout=1.0)) as app:
        started = time.monotonic()
        response = get(app.feed_url("/latest.atom"))
    assert response.status_code == 504
    assert time.monotonic() - started < 3


# --- stale-if-error -----------------------------------------------------------------------------------

def test_stale_feed_is_served_when_upstream_fails(upstream):
    with running_app(settings_for(upstream.url, cache_ttl=0)) as app:
        url = app.feed_url(f"{COMPILER}.atom")
        good = get(url)
        for fail in (lambda: upstream.fail(LIST, 500), lambda: upstream.html_login(LIST),
                     lambda: upstream.rate_limit(LIST, 30)):
            upstream.clear()
            fail()
            stale = get(url)
            assert stale.status_code == 200
            assert stale.content == good.content
            assert stale.headers["x-feedbridge-cache"] == "stale"
            assert "upstream failed" in stale.headers["x-feedbridge-stale"]
            assert int(stale.headers["age"]) >= 0


def test_stale_copy_expires(upstream):
    with running_app(settings_for(upstream.url, cache_ttl=0, stale_ttl=1)) as app:
        url = app.feed_url("/latest.atom")
        assert get(url).status_code == 200
        time.sleep(1.2)
        upstream.fail("/latest.md", 500)
        assert get(url).status_code == 502


# --- single flight ------------------------------------------------------------------------------------

def test_concurrent_cold_requests_share_one_fetch(upstream):
    upstream.stall(LIST, 0.5, times=1)
    with running_app(settings_for(upstream.url)) as app:
        results = []

        def worker(fmt: str) -> None:
            results.append(get(app.feed_url(f"{COMPILER}.{fmt}")).status_code)

        threads = [threading.Thread(target=worker, args=(("atom", "rss", "json")[i % 3],)) for i in range(24)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert results == [200] * 24
    assert upstream.count(LIST) == 1


# --- SSRF and escaping --------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [
    "/169.254.169.254/latest.atom",
    "/127.0.0.1:1/latest.atom",
    "/{forum}@169.254.169.254/latest.atom",
    "/{forum}/c/..%2f..%2fadmin/5.atom",
    "/{forum}/c/x%2F..%2F..%2Fetc/5.atom",
    "/{forum}/c/%5c%5cevil.example/5.atom",
    "/{forum}/tag/..%2F..%2Fadmin.atom",
    "/{forum}/tag/a%0d%0aX-Injected:%201.atom",
    "/{forum}//evil.example/latest.atom",
    "/{forum}/u/..%2f..%2fadmin.atom",
    "/{forum}/c/%EF%BC%8E%EF%BC%8E/5.atom",
])
def test_path_tricks_never_fetch_anything_unexpected(app, upstream, path):
    response = get(app.url + path.format(forum=app.forum_key))
    assert response.status_code in (400, 404, 308)
    assert "X-Injected" not in response.headers
    assert all(r.path in ("/latest.md",) for r in upstream.requests)


def test_errors_do_not_reflect_markup(app):
    response = get(app.feed_url("/latest.atom?author=<script>alert(1)</script>"))
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/plain")
    assert response.headers["x-content-type-options"] == "nosniff"


def test_script_titles_are_escaped_in_feeds(app):
    response = get(app.feed_url("/latest.atom"))
    assert b"<script>" not in response.content
    titles = [e.title for e in feedparser.parse(response.content).entries]
    assert "<script>alert(1)</script>" in titles


# --- logging and deployment ---------------------------------------------------------------------------

def test_one_log_line_per_request_and_fetch(app, capsys, caplog):
    caplog.set_level("INFO", logger="feedbridge")
    get(app.feed_url("/latest.atom"))
    get(app.feed_url("/latest.atom"))
    lines = [r.getMessage() for r in caplog.records]
    requests = [line for line in lines if line.startswith("GET /")]
    fetches = [line for line in lines if line.startswith("upstream GET")]
    assert len(requests) == 2 and "cache=miss" in requests[0] and "cache=hit" in requests[1]
    assert " 200 " in requests[0] and "ms" in requests[0]
    assert len(fetches) == 2 and sum(IDENTITY in line for line in fetches) == 1  # the list, the forum's basic info


def test_a_failed_fetch_has_its_log_line(upstream, caplog):
    """Only fetches the forum answered were logged: a forum failing (5xx, a timeout, a connection refused) left
    no line, and with the access log off an operator could not see it. A failure is a WARNING; a page the forum
    says is gone, an answer as any other (INFO)."""
    caplog.set_level("INFO", logger="feedbridge")
    upstream.fail(LIST, 500)
    with running_app(settings_for(upstream.url)) as app:
        assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 502
        assert get(app.feed_url("/c/no-such/999.atom")).status_code == 404
    failed = [r for r in caplog.records if r.getMessage().startswith(f"upstream GET {upstream.url}{LIST} failed")]
    assert failed and failed[0].levelname == "WARNING" and "500" in failed[0].getMessage()
    assert failed[0].fields["status"] == 500 and failed[0].fields["url"] == f"{upstream.url}{LIST}"
    gone = [r for r in caplog.records if "failed" in r.getMessage() and "no-such" in r.getMessage()]
    assert gone and {r.levelname for r in gone} == {"INFO"}


def test_procfile_serves_a_feed_through_gunicorn(upstream, tmp_path):
    env = {"FEEDBRIDGE_FORUMS": upstream.url, "WEB_CONCURRENCY": "2", "FEEDBRIDGE_ACCESS_LOG": "on"}
    # Append mode, as a pipe would behave: gunicorn reopens /dev/stdout, and two offsets must not overwrite.
    with open(tmp_path / "out", "a+") as out, open(tmp_path / "err", "a+") as err:
        # Stopped as a PaaS stops it (SIGTERM): what the shutdown writes is checked below.
        with procfile_web(env, stdout=out, stderr=err, graceful=True) as (url, _process):
            forum = upstream.url.split("//", 1)[1]
            response = get(f"{url}/{forum}{COMPILER}.atom")
            assert response.status_code == 200
            assert feedparser.parse(response.content).bozo == 0
            assert get(f"{url}/healthz").json()["status"] == "ok"
            assert get(f"{url}/{forum}/latest.atom?limit=x").status_code == 400
    stdout, stderr = (tmp_path / "out").read_text(encoding="utf-8"), (tmp_path / "err").read_text(encoding="utf-8")
    # Logs on stdout, one stream for a PaaS drain: ours (requests, fetches) and gunicorn's own.
    assert f"GET /{forum}{COMPILER}.atom 200" in stdout and "cache=miss" in stdout
    assert f"upstream GET {upstream.url}{LIST} -> 200" in stdout
    assert "Booting worker" in stdout and "Worker exiting" in stdout
    assert stderr == ""


def test_self_link_follows_the_host_and_urls_are_resolved_per_host(app):
    url = app.feed_url(f"{COMPILER}.atom?limit=2")
    other = get(url, headers={"Host": "feeds.example.org"})
    mine = get(url)
    def self_links(response):
        return [link.href for link in feedparser.parse(response.content).feed.links if link.rel == "self"]

    assert self_links(other) == [url.replace(app.url, "http://feeds.example.org")]
    assert self_links(mine) == [url]
    assert other.content != mine.content



def test_hits_on_the_hot_path_match_the_first_response(app, caplog):
    caplog.set_level("INFO", logger="feedbridge")
    url = app.feed_url(f"{COMPILER}.rss?limit=5")
    miss, hit = get(url), get(url)
    assert (miss.headers["x-feedbridge-cache"], hit.headers["x-feedbridge-cache"]) == ("miss", "hit")
    assert hit.content == miss.content
    for name in ("content-type", "etag", "last-modified", "cache-control", "vary", "content-length"):
        assert hit.headers[name] == miss.headers[name], name
    assert any("cache=hit" in r.getMessage() and "limit=5" in r.getMessage() for r in caplog.records)
    # A browser still gets the readable media type, and a conditional request Werkzeug's 304.
    browser_accept = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    browser = get(url, headers=browser_accept)
    assert browser.headers["content-type"] == "application/xml; charset=utf-8"
    assert browser.content == miss.content
    # the browser shows it as a page (`/static/feed.xsl`, links and all), with a page's CSP and no-referrer
    assert "script-src 'self'" in browser.headers["content-security-policy"]
    assert browser.headers["referrer-policy"] == "no-referrer"
    assert "content-security-policy" not in hit.headers  # a reader's feed is no page
    assert get(url, headers={"If-None-Match": hit.headers["etag"]}).status_code == 304
    # The browser's answer is another representation (`Vary: Accept`), with an ETag of its own (RFC 9110
    # §8.8.3): with the reader's, a cache in front could answer a browser's 304 with the reader's copy.
    assert browser.headers["etag"] != hit.headers["etag"]
    assert get(url, headers={**browser_accept, "If-None-Match": browser.headers["etag"]}).status_code == 304
    assert get(url, headers={**browser_accept, "If-None-Match": hit.headers["etag"]}).status_code == 200


def test_every_response_says_nosniff(app):
    url = app.feed_url("/latest.json")
    for response in (get(url), get(url), get(f"{app.url}/healthz"), get(app.feed_url("/nope.atom"))):
        assert response.headers["x-content-type-options"] == "nosniff"


def test_retry_after_zero_means_ask_again(app, upstream):
    upstream.rate_limit("/latest.md", retry_after=0, times=1)
    first = get(app.feed_url("/latest.atom"))
    assert first.status_code == 503 and first.headers["retry-after"] == "1"
    assert upstream.count("/latest.md") == 1  # a failure is not retried behind the reader's back
    assert get(app.feed_url("/latest.atom")).status_code == 200
    assert upstream.count("/latest.md") == 2


def test_new_filter_on_a_failing_forum_is_built_from_stale_pages(upstream):
    with running_app(settings_for(upstream.url, cache_ttl=0)) as app:
        assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200
        upstream.fail(LIST, 500)
        response = get(app.feed_url(f"{COMPILER}.json?author=jansel"))  # never built before
    assert response.status_code == 200
    assert response.headers["x-feedbridge-cache"] == "stale"
    assert [i["authors"][0]["name"] for i in response.json()["items"]] == ["jansel"]
    assert upstream.count(LIST) == 2  # the first build, and the one failed rebuild


def test_a_category_feed_path_without_its_number_says_what_it_lacks(app):
    """`/c/compiler.atom` answered only "no feed route matches", where the CLI and the paste box explain."""
    response = get(app.feed_url("/c/compiler.atom"))
    assert response.status_code == 404 and "/c/compiler/ID" in response.text, response.text
    assert "ends in its number" not in get(app.feed_url("/c/nothing/at/all/here.atom")).text
