"""What readers show beside an entry's text (issue 46): its topic's picture, the forum's icon, logo and language,
a comments link, the replies (RFC 4685) and RSS's refresh hints; and two filters readers asked for, muting an
author (`exclude_author=`) and a time window (`max_age=`). Over a real socket against the fake forum.

The fake forum (tests/upstream.py, its "What readers show" section) answers `/site/basic-info.json` as core's
`SiteController#basic_info` does and gives every third topic of its JSON lists a picture, half of them
schemaless as `UrlHelper.cook_url` leaves an upload on a plain-http forum.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import feedparser
import httpx
import pytest
from lxml import etree
from lxml import html as lxml_html

from feedbridge.config import Settings, parse_forum
from feedbridge.discourse.fields import picture_url
from feedbridge.discourse.posts import parse_latest_posts
from feedbridge.discourse.site_info import language_tag, parse_basic_info
from feedbridge.models import Site
from tests.appserver import RunningApp, running_app, settings_for
from tests.fake_posts import PostSite
from tests.upstream import IDENTITY, UPLOADS, FakeForum, basic_info, read_at, topic_picture

ATOM = "{http://www.w3.org/2005/Atom}"
MEDIA = "{http://search.yahoo.com/mrss/}"
THR = "{http://purl.org/syndication/thread/1.0}"
SY = "{http://purl.org/rss/1.0/modules/syndication/}"
SLASH = "{http://purl.org/rss/1.0/modules/slash/}"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
COMPILER = "/c/compiler/5"
JSON_LIST = read_at(COMPILER, "json")  # the JSON list of the same page: /c/compiler/5/l/latest.json?order=activity


@pytest.fixture
def forum(upstream_json: FakeForum) -> FakeForum:
    """A forum read through its JSON lists: every topic's picture is listed."""
    return upstream_json


@pytest.fixture
def app(forum: FakeForum) -> Iterator[RunningApp]:
    with running_app(settings_for(forum.url)) as running:
        yield running


def get(app: RunningApp, path: str) -> httpx.Response:
    response = httpx.get(app.feed_url(path), timeout=30)
    assert response.status_code == 200, response.text
    return response


def parsed(body: bytes) -> feedparser.FeedParserDict:
    feed = feedparser.parse(body)
    assert feed.bozo == 0, feed.get("bozo_exception")
    return feed


def pictures(body: bytes, fmt: str) -> dict[str, str | None]:
    """Entry id -> its picture, as each format writes it."""
    if fmt == "json":
        return {item["id"]: item.get("image") for item in json.loads(body)["items"]}
    root = etree.fromstring(body)
    if fmt == "atom":
        return {entry.findtext(f"{ATOM}id"): _thumbnail(entry) for entry in root.iter(f"{ATOM}entry")}
    return {item.findtext("guid"): _thumbnail(item) for item in root.iter("item")}


def _thumbnail(entry: etree._Element) -> str | None:
    found = entry.findall(f"{MEDIA}thumbnail")
    assert len(found) <= 1
    return found[0].get("url") if found else None


def expected_pictures(forum: FakeForum, body: bytes) -> dict[str, str | None]:
    """What each entry of the feed should carry: the fake's picture for its topic, made absolute with the forum's
    scheme (`http`) where it is schemaless."""
    ids = [item["id"] for item in json.loads(body)["items"]]
    found = {i: topic_picture(int(i.rsplit("/", 1)[1]), forum.url) for i in ids}
    return {i: None if url is None else "http:" + url if url.startswith("//") else url for i, url in found.items()}


# --- pictures -------------------------------------------------------------------------------------------------

def test_a_json_forums_entries_carry_their_pictures_in_every_format(forum: FakeForum, app: RunningApp) -> None:
    expected = expected_pictures(forum, get(app, f"{COMPILER}.json").content)
    assert 0 < sum(url is not None for url in expected.values()) < len(expected)  # some topics have none
    assert any(url and url.startswith("http://") for url in expected.values())
    for fmt in ("atom", "rss", "json"):
        body = get(app, f"{COMPILER}.{fmt}").content
        assert pictures(body, fmt) == expected, fmt
        if fmt != "json":
            parsed(body)
            # the Media RSS namespace, declared once, on the root
            assert body.count(b'xmlns:media="http://search.yahoo.com/mrss/"') == 1
            assert b"<feed xmlns" in body or b"<rss xmlns" in body


def test_a_markdown_forum_reads_the_json_list_for_pictures_only_with_full_content() -> None:
    with FakeForum(json_lists=True) as forum, running_app(settings_for(forum.url)) as app:
        plain = get(app, f"{COMPILER}.atom").content
        assert set(pictures(plain, "atom").values()) == {None}
        assert forum.count(JSON_LIST) == 0  # an excerpt feed costs no second list
        full = get(app, f"{COMPILER}.atom?content=full").content
        assert forum.count(JSON_LIST) == 1
        found = pictures(full, "atom")
        assert found == expected_pictures(forum, get(app, f"{COMPILER}.json?content=full").content)
        assert any(found.values())
        parsed(full)


def test_a_markdown_forum_without_json_lists_gives_full_content_without_pictures() -> None:
    with FakeForum() as forum, running_app(settings_for(forum.url)) as app:
        response = get(app, f"{COMPILER}.rss?content=full")
        assert forum.count(JSON_LIST) == 1  # asked, refused (404): the feed goes on without
        assert set(pictures(response.content, "rss").values()) == {None}
        assert parsed(response.content).entries


@pytest.mark.parametrize(("listed", "written"), [
    ("javascript:alert(1)", None),
    ("data:image/png;base64,AAAA", None),
    ("//", None),
    ("https://user:secret@cdn.example/a.png", None),
    ("https://cdn.example/a b.png", None),
    ("https://cdn.example/" + "a" * 3000 + ".png", None),
    ("ftp://cdn.example/a.png", None),
    (7, None),
    ("/uploads/default/original/1X/a.png", "{forum}/uploads/default/original/1X/a.png"),
    ("//cdn.example/uploads/a.png", "http://cdn.example/uploads/a.png"),
    ("https://cdn.example/uploads/caf\u00e9.png", "https://cdn.example/uploads/caf%C3%A9.png"),
])
def test_a_picture_passes_the_checks_every_link_does(forum: FakeForum, app: RunningApp, listed: object,
                                                    written: str | None) -> None:
    document = json.loads(httpx.get(f"{forum.url}{COMPILER}.json", timeout=10).content)
    topic = document["topic_list"]["topics"][1]
    topic["image_url"] = listed
    forum.set_body(f"{COMPILER}.json", json.dumps(document))
    for fmt in ("atom", "rss", "json"):
        body = get(app, f"{COMPILER}.{fmt}").content
        assert pictures(body, fmt)[f"{forum.url}/t/{topic['id']}"] == (written and written.format(forum=forum.url))
        if fmt != "json":
            parsed(body)


# --- the forum's identity -------------------------------------------------------------------------------------

def test_feeds_carry_the_forums_icon_logo_and_language_read_once(forum: FakeForum, app: RunningApp) -> None:
    info = basic_info(forum.url) | {"locale": "pt_BR"}
    forum.set_body(IDENTITY, json.dumps(info))
    atom = get(app, f"{COMPILER}.atom").content
    root = etree.fromstring(atom)
    assert root.findtext(f"{ATOM}icon") == info["logo_small_url"]  # square
    assert root.findtext(f"{ATOM}logo") == info["logo_url"]
    assert root.get(XML_LANG) == "pt-BR"
    assert parsed(atom).feed.icon == info["logo_small_url"]
    rss = etree.fromstring(get(app, "/latest.rss").content)
    channel = rss.find("channel")
    assert channel.findtext("language") == "pt-BR"
    assert (channel.findtext("image/url"), channel.findtext("image/title"), channel.findtext("image/link")) == (
        info["logo_small_url"], channel.findtext("title"), channel.findtext("link"))
    feed = get(app, "/hot.json").json()
    assert (feed["icon"], feed["favicon"], feed["language"]) == (info["logo_small_url"], info["favicon_url"], "pt-BR")
    assert forum.count(IDENTITY) == 1  # three feeds of one forum: read once


def test_the_icon_falls_back_to_the_touch_icon_then_the_favicon(forum: FakeForum, app: RunningApp) -> None:
    info = basic_info(forum.url) | {"logo_small_url": None, "apple_touch_icon_url": "", "locale": None}
    forum.set_body(IDENTITY, json.dumps(info))
    root = etree.fromstring(get(app, f"{COMPILER}.atom").content)
    assert root.findtext(f"{ATOM}icon") == info["favicon_url"] and root.get(XML_LANG) is None


@pytest.mark.parametrize(("status", "asked"), [(404, 1), (403, 1), (500, 3)])
def test_a_forum_without_basic_info_still_gets_its_feeds(forum: FakeForum, status: int, asked: int) -> None:
    forum.fail(IDENTITY, status)
    # No failure remembered: a 404 or a refusal is kept as "none" (asked once), a failure is asked again.
    with running_app(settings_for(forum.url, negative_ttl=0)) as app:
        for fmt in ("atom", "rss", "json"):
            body = get(app, f"{COMPILER}.{fmt}").content
            assert b"/uploads/default/original/1X/logo" not in body
            assert len(pictures(body, fmt)) == 30
    assert forum.count(IDENTITY) == asked


def test_an_answer_that_is_no_basic_info_gives_no_icon(forum: FakeForum, app: RunningApp) -> None:
    forum.set_body(IDENTITY, "<!DOCTYPE html><html><body>Log in</body></html>")
    body = get(app, f"{COMPILER}.atom").content
    assert etree.fromstring(body).find(f"{ATOM}icon") is None and parsed(body).entries
    assert etree.fromstring(get(app, "/latest.atom").content).find(f"{ATOM}icon") is None
    assert forum.count(IDENTITY) == 1  # kept as "none", not asked again


def test_the_basic_info_request_is_spent_from_the_forums_budget(upstream: FakeForum) -> None:
    # A client's share is a third of the minute's 6: the first cold feed's list and the forum's basic info.
    settings = replace(Settings(forums=(parse_forum(f"markdown:{upstream.url}"),)), forum_budget=6,
                       forum_budget_10s=0)
    with running_app(settings) as app:
        assert get(app, f"{COMPILER}.atom").status_code == 200
        assert upstream.count() == 2 and upstream.count(IDENTITY) == 1
        second = httpx.get(app.feed_url("/latest.atom"), timeout=30)
    assert second.status_code == 503 and "share" in second.text


def test_a_feed_whose_basic_info_read_its_share_refuses_goes_without_its_icon_and_is_kept(upstream: FakeForum) -> None:
    # A client's share is a third of the minute's 3: the cold feed's list alone. The icon is a read a feed can
    # do without (`Building.optional`): refused, the feed is built, answered and kept without it, never a 503
    # and never waiting for the window's room; a later build asks again.
    settings = replace(Settings(forums=(parse_forum(f"markdown:{upstream.url}"),)), forum_budget=3,
                       forum_budget_10s=0)
    with running_app(settings) as app:
        first = httpx.get(app.feed_url(f"{COMPILER}.atom"), timeout=30)
        assert first.status_code == 200, first.text
        assert first.headers["X-Feedbridge-Cache"] == "miss"
        assert etree.fromstring(first.content).find(f"{ATOM}icon") is None and parsed(first.content).entries
        assert upstream.count(IDENTITY) == 0  # refused before it was sent
        again = httpx.get(app.feed_url(f"{COMPILER}.atom"), timeout=30)
        assert again.status_code == 200 and again.headers["X-Feedbridge-Cache"] == "hit"


@pytest.mark.parametrize(("locale", "tag"), [
    ("pt_BR", "pt-BR"), ("en", "en"), ("zh_TW", "zh-TW"), ("sr_Latn", "sr-Latn"), ("es_419", "es-419"),
    ("EN_gb", "en-GB"), ("", None), ("english", None), ("en_", None), ("x" * 40, None), (None, None), (3, None),
])
def test_cores_locale_names_become_ietf_tags(locale: object, tag: str | None) -> None:
    assert language_tag(locale) == tag


def test_basic_info_pictures_are_checked_and_absolute() -> None:
    site = parse_basic_info(json.dumps({"logo_url": "javascript:x", "mobile_logo_url": "//cdn.example/m.png",
                                        "logo_small_url": "/uploads/s.png", "favicon_url": 5, "title": "A"}),
                            "https://forum.example/sub")
    assert site == Site(logo_url="https://cdn.example/m.png", icon_url="https://forum.example/uploads/s.png")
    assert parse_basic_info('{"errors": ["not found"]}', "https://forum.example") is None
    assert picture_url("//h/x.png", "http://forum.example") == "http://h/x.png"


# --- comments, replies, refresh ---------------------------------------------------------------------------------

def test_rss_items_link_their_comments_and_atom_entries_their_replies(app: RunningApp) -> None:
    rss = etree.fromstring(get(app, f"{COMPILER}.rss").content)
    items = list(rss.iter("item"))
    assert items and all(item.findtext("comments") == item.findtext("link") for item in items)
    atom = etree.fromstring(get(app, f"{COMPILER}.atom").content)
    for entry in atom.iter(f"{ATOM}entry"):
        [alternate] = [link for link in entry.findall(f"{ATOM}link") if link.get("rel", "alternate") == "alternate"]
        [replies] = [link for link in entry.findall(f"{ATOM}link") if link.get("rel") == "replies"]
        assert (replies.get("href"), replies.get("type")) == (alternate.get("href"), "text/html")
        assert entry.findtext(f"{THR}total") == entry.findtext(f"{SLASH}comments") is not None
    entries = parsed(etree.tostring(atom)).entries
    assert all(int(e.thr_total) >= 0 for e in entries)


def test_a_post_feeds_items_link_their_topic_as_comments() -> None:
    with FakeForum(mode="json", posts=PostSite.standard().answer) as forum, \
            running_app(settings_for(forum.url)) as app:
        rss = etree.fromstring(get(app, "/t/9446.rss?limit=5").content)
        items = list(rss.iter("item"))
        assert len(items) == 5
        assert {item.findtext("comments") for item in items} == {f"{forum.url}/t/9446"}
        assert all(item.findtext("link").startswith(f"{forum.url}/t/") for item in items)
        atom = etree.fromstring(get(app, "/t/9446.atom?limit=5").content)
        assert atom.find(f".//{THR}total") is None  # a post's replies are not counted: no thread elements


def test_a_post_feeds_items_show_their_authors_picture() -> None:
    """Core sends each post's `avatar_template` (BasicPostSerializer, for a topic's posts and `/posts.json`;
    UserActionSerializer, for a user's): a post feed's JSON Feed item gives its author that picture, asked at
    96 px and made absolute as a topic feed's are. A template no picture can be made of (a `javascript:` URL,
    one past the 2,048 characters a URL may have) gives none. Atom and RSS have no such element."""
    site = PostSite.standard()
    hostile = {"bob": "javascript:alert(1)//{size}", "carol": "/user_avatar/forum/carol/{size}/" + "9" * 3000 + ".png"}

    def swap(value: object) -> None:
        if isinstance(value, dict):
            if value.get("username") in hostile and "avatar_template" in value:
                value["avatar_template"] = hostile[value["username"]]
            for inner in value.values():
                swap(inner)
        elif isinstance(value, list):
            for inner in value:
                swap(inner)

    def answer(target: str) -> bytes | None:
        body = site.answer(target)
        if body is None:
            return None
        data = json.loads(body)
        swap(data)
        return json.dumps(data).encode()

    with FakeForum(mode="json", posts=answer) as forum, running_app(settings_for(forum.url)) as app:
        for path in ("/t/9446.json?limit=9", "/posts.json", "/u/alice/posts.json"):
            authors = [item["authors"][0] for item in get(app, path).json()["items"]]
            shown = [author for author in authors if author.get("avatar")]
            assert shown and len(authors) >= 5, (path, authors)
            for author in authors:
                if author["name"] in hostile:
                    assert "avatar" not in author, (path, author)
                elif author["name"].isascii():
                    expected = f"{forum.url}/user_avatar/forum/{author['name']}/96/1_2.png"
                    assert author.get("avatar") == expected, (path, author)
        assert b"user_avatar" not in get(app, "/t/9446.atom?limit=9").content
    # and a post keeps no template longer than a URL may be: it is kept, with its post, for the topic TTL
    kept = {post.username: post.avatar_template for _, post in parse_latest_posts(answer("/posts.json") or b"")
            if post is not None}
    assert kept["carol"] is None and kept["alice"] == "/user_avatar/forum/alice/{size}/1_2.png", kept


@pytest.mark.parametrize(("ttl", "minutes", "period", "frequency"), [
    (300, "5", "hourly", "12"), (90, "2", "hourly", "40"), (7200, "120", "daily", "12"),
    (3 * 86400, "4320", "weekly", "2"),
])
def test_rss_says_how_often_to_look_again_from_the_cache_ttl(forum: FakeForum, ttl: int, minutes: str,
                                                             period: str, frequency: str) -> None:
    with running_app(settings_for(forum.url, cache_ttl=ttl)) as app:
        body = get(app, f"{COMPILER}.rss").content
    channel = etree.fromstring(body).find("channel")
    assert channel.findtext("ttl") == minutes
    assert (channel.findtext(f"{SY}updatePeriod"), channel.findtext(f"{SY}updateFrequency")) == (period, frequency)
    assert parsed(body).feed.ttl == minutes


def test_new_elements_are_byte_stable_across_rebuilds(forum: FakeForum) -> None:
    with running_app(settings_for(forum.url, cache_ttl=0)) as app:
        for fmt in ("atom", "rss", "json"):
            first = get(app, f"{COMPILER}.{fmt}").content
            assert get(app, f"{COMPILER}.{fmt}").content == first, fmt
            assert b"thumbnail" in first or b'"image"' in first


def test_the_demo_forum_shows_an_icon() -> None:
    from feedbridge.demo import ORIGIN, page

    status, headers, body = page("/site/basic-info.json", "")
    info = json.loads(body)
    assert status == 200 and info["logo_small_url"].startswith(f"{ORIGIN}/{UPLOADS.lstrip('/')}")
    icon = urlsplit(info["logo_small_url"]).path
    status, headers, body = page(icon, "")
    assert status == 200 and headers["Content-Type"] == "image/svg+xml" and body.startswith(b"<svg")


# --- muting an author, a time window ----------------------------------------------------------------------------

def authors(body: bytes) -> list[str | None]:
    return [item.get("author", {}).get("name") for item in json.loads(body)["items"]]


def test_exclude_author_drops_their_topics_whatever_the_case_repeated_or_comma_separated(app: RunningApp) -> None:
    every = authors(get(app, f"{COMPILER}.json").content)
    first, second = sorted({name for name in every if name}, key=every.count)[-2:]  # the two most frequent
    for query in (f"exclude_author={first.upper()},{second.lower()}",
                  f"exclude_author={first.lower()}&exclude_author=@{second.upper()}"):
        kept = authors(get(app, f"{COMPILER}.json?{query}").content)
        assert kept == [name for name in every if name not in (first, second)], query
        assert len(kept) <= len(every) - 2
    feed = parsed(get(app, f"{COMPILER}.atom?exclude_author={first.upper()}").content)
    assert feed.feed.title.endswith(f"not by: {first.casefold()}")
    too_many = httpx.get(app.feed_url(f"{COMPILER}.atom"), params={"exclude_author": [f"u{n}" for n in range(21)]},
                         timeout=30)
    assert too_many.status_code == 400 and "exclude_author" in too_many.text and "at most 20" in too_many.text


def test_exclude_author_drops_their_posts_from_a_post_feed() -> None:
    with FakeForum(mode="json", posts=PostSite.standard().answer) as forum, \
            running_app(settings_for(forum.url)) as app:
        every = authors(get(app, "/t/9003.json").content)
        kept = authors(get(app, "/t/9003.json?exclude_author=Bob").content)
    assert "bob" in every and kept == [name for name in every if name != "bob"] and kept


def recent_list(forum: FakeForum, hours: list[float]) -> list[int]:
    """The compiler list with its topics last active `hours` ago (one each, in order), complete on one page."""
    document = json.loads(httpx.get(f"{forum.url}{COMPILER}.json", timeout=10).content)
    now = datetime.now(UTC)
    topics = document["topic_list"]["topics"][: len(hours)]
    for topic, ago in zip(topics, hours, strict=True):
        topic["last_posted_at"] = topic["bumped_at"] = (now - timedelta(hours=ago)).isoformat()
    document["topic_list"]["topics"] = topics
    document["topic_list"].pop("more_topics_url", None)
    forum.set_body(f"{COMPILER}.json", json.dumps(document))
    return [topic["id"] for topic in topics]


def ids(body: bytes) -> list[int]:
    return [int(item["id"].rsplit("/", 1)[1]) for item in json.loads(body)["items"]]


@pytest.mark.parametrize(("max_age", "kept"), [("36h", 3), ("1d", 2), ("2d", 4), ("1w", 14), ("52w", 30)])
def test_max_age_keeps_the_topics_active_within_it(forum: FakeForum, app: RunningApp, max_age: str, kept: int) -> None:
    listed = recent_list(forum, [ago * 12 + 0.5 for ago in range(30)])  # every 12 hours, half an hour off
    assert ids(get(app, f"{COMPILER}.json?max_age={max_age}").content) == listed[:kept]


def test_max_age_is_canonical_and_bounded(forum: FakeForum, app: RunningApp) -> None:
    recent_list(forum, [1.5, 30.5])
    assert get(app, f"{COMPILER}.json?max_age=7d").content == get(app, f"{COMPILER}.json?max_age=1w").content
    assert "active within 1w" in get(app, f"{COMPILER}.json?max_age=168h").json()["title"]
    for value in ("53w", "0h", "7", "7 d", "1y", "-1d"):
        refused = httpx.get(app.feed_url(f"{COMPILER}.atom"), params={"max_age": value}, timeout=30)
        assert refused.status_code == 400 and "max_age must be" in refused.text, value


def test_max_age_with_a_digest_keeps_whole_periods_within_it(forum: FakeForum, app: RunningApp) -> None:
    hours = [ago * 12 + 0.5 for ago in range(30)]  # 15 days of topics, two a day
    recent_list(forum, hours)
    every = get(app, f"{COMPILER}.json?digest=daily&limit=20").json()["items"]
    assert len(every) >= 15
    started = datetime.now(UTC)
    week = get(app, f"{COMPILER}.json?digest=daily&limit=20&max_age=7d").json()["items"]
    starts = [datetime.fromisoformat(item["date_published"]) for item in week]
    # The days that start within the week and have a topic: today (none in the half hour after midnight, the
    # newest topic being half an hour old), and the six whole days before it (seven, at midnight itself).
    today = started.replace(hour=0, minute=0, second=0, microsecond=0)
    days = {(started - timedelta(hours=h)).date() for h in hours if started - timedelta(hours=h) >= today - timedelta(days=6)}
    assert len(days) >= 6
    assert len(week) in (len(days), len(days) + 1), (started, len(week), sorted(days))
    assert all(start >= started - timedelta(days=7, seconds=30) for start in starts)
    assert [item["id"] for item in week] == [item["id"] for item in every[: len(week)]]
    assert [item["content_html"] for item in week] == [item["content_html"] for item in every[: len(week)]]


def test_max_age_on_a_post_feed_reads_each_posts_own_time() -> None:
    site = PostSite.standard()
    posts = site.topics[9003].posts
    now = datetime.now(UTC)
    for post, ago in zip(reversed(posts), [0.5, 10.5, 30.5, 40.5, 100.5], strict=False):
        post.created_at = post.updated_at = now - timedelta(hours=ago)
    with FakeForum(mode="json", posts=site.answer) as forum, running_app(settings_for(forum.url)) as app:
        found = [int(item["id"].rsplit("/", 1)[1]) for item in get(app, "/t/9003.json?max_age=36h").json()["items"]]
    assert found == [5, 4, 3]


def test_the_front_page_the_cli_and_a_static_config_take_both(tmp_path, upstream: FakeForum) -> None:
    from tests.test_cli import SEED
    from tests.test_cli import run as run_cli
    from tests.test_static import run as run_static
    from tests.test_static import write_config

    with running_app(settings_for(upstream.url)) as app:
        shown = httpx.get(f"{app.url}/preview", params={"forum": app.forum_key, "list": "latest",
                                                        "exclude_author": "Smth", "max_age": "14d"}, timeout=30).text
    url = lxml_html.fromstring(shown).xpath("//input[@id='feed-url']/@value")[0]
    assert parse_qs(urlsplit(url).query) == {"exclude_author": ["smth"], "max_age": ["2w"]}
    every = feedparser.parse(run_cli("build", str(SEED)).stdout).entries
    muted = feedparser.parse(run_cli("build", str(SEED), "--exclude-author", "SMTH").stdout).entries
    assert "smth" in {e.author.lower() for e in every}
    assert [e.id for e in muted] == [e.id for e in every if e.author.lower() != "smth"]
    assert feedparser.parse(run_cli("build", str(SEED), "--max-age", "1h").stdout).entries == []  # saved long ago
    config = write_config(tmp_path, upstream.url, '[[feeds]]\nname = "c"\npath = "c/compiler/5"\n'
                                                  'exclude_author = ["smth", "jansel"]\nmax_age = "1h"\n')
    assert run_static(config)[0] == 0
    assert parsed((tmp_path / "public" / "c.atom").read_bytes()).entries == []  # nothing in the last hour


def test_json_feed_items_show_their_authors_picture(upstream_json: FakeForum) -> None:
    """A JSON list sideloads each poster with their `avatar_template` (core's BasicUserSerializer), and JSON
    Feed 1.1 gives an author an `avatar`: a reader shows it beside the item. The template's `{size}` is asked
    at 96 px and the URL made absolute as every picture the forum names (`fields.picture_url`); a template no
    picture can be made of (a `javascript:` URL, no template) gives none. Atom and RSS have no such element."""
    listing = json.loads((upstream_json.root / "latest.json").read_text(encoding="utf-8"))
    users = listing["users"]
    posters = {t["id"]: t["posters"][0]["user_id"] for t in listing["topic_list"]["topics"]}
    hostile = {users[0]["id"]: "javascript:alert(1)//{size}", users[1]["id"]: None}
    for user in users:
        if user["id"] in hostile:
            user["avatar_template"] = hostile[user["id"]]
    upstream_json.set_body("/latest.json", json.dumps(listing))
    with running_app(settings_for(upstream_json.url)) as app:
        items = get(app, "/latest.json").json()["items"]
        atom = get(app, "/latest.atom").content
    templates = {user["id"]: user["avatar_template"] for user in users}
    shown = {int(item["id"].rpartition("/")[2]): item.get("authors", [{}])[0].get("avatar") for item in items}
    assert len(shown) == 30
    for topic_id, avatar in shown.items():
        template = templates.get(posters[topic_id])  # a poster the list does not sideload has no author at all
        if template is None or posters[topic_id] in hostile:
            assert avatar is None, (topic_id, avatar)
        else:
            assert avatar == upstream_json.url + template.replace("{size}", "96"), (topic_id, avatar)
    assert sum(avatar is not None for avatar in shown.values()) > 10
    assert {posters[topic_id] for topic_id in shown} >= set(hostile)  # both hostile users post listed topics
    assert b"user_avatar" not in atom


def test_a_markdown_lists_full_content_feed_takes_its_authors_pictures_from_the_json_list() -> None:
    """A Markdown list sideloads no pictures: `content=full` reads the JSON list of the same page for the
    topics' pictures anyway, and takes the authors' from it too; an excerpt feed reads no second list."""
    with FakeForum(json_lists=True) as forum, running_app(settings_for(forum.url)) as app:
        full = get(app, "/latest.json?content=full").json()["items"]
        excerpts = get(app, "/latest.json").json()["items"]
    avatars = [item.get("authors", [{}])[0].get("avatar") for item in full]
    assert sum(avatar is not None for avatar in avatars) > 20
    assert all(avatar.startswith(f"{forum.url}/user_avatar/") and "/96/" in avatar for avatar in avatars if avatar)
    assert not any(item.get("authors", [{}])[0].get("avatar") for item in excerpts)
