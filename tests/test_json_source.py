"""Forums read through their JSON lists: detection, the route × format matrix, what JSON lists add, user feeds.

Every test crosses a real socket: the fake forum in JSON mode (`upstream_json`: every `.md` is 404, the JSON
site of `fixtures/site-json/` is served) and the web app on 127.0.0.1.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import feedparser
import httpx
import pytest
from click.testing import CliRunner
from lxml import etree, html

from feedbridge.cli import main
from feedbridge.config import Forum, Settings, parse_forum
from feedbridge.errors import ConfigError, DecodeError
from feedbridge.feeds.request.spec import parse_feed_request
from feedbridge.feeds.service import FeedService, build_service
from feedbridge.feeds.sources import site
from feedbridge.feeds.sources.dialects import SourceDetector
from feedbridge.store import codec
from feedbridge.store.control import MemoryControl
from feedbridge.store.entries import SourceEntry
from feedbridge.store.memory import MemoryStore
from feedbridge.upstream.fetcher import Fetcher
from tests.appserver import running_app, settings_for
from tests.upstream import DEFAULT_ROOT, JSON_ROOT, FakeForum, detected_at, read_at

ROOT = Path(__file__).resolve().parent.parent
COMPILER = "/c/compiler/5"
ROUTES = ["/latest", "/hot", "/top", "/c/compiler/5", "/c/hardware/gpu/12", "/tag/gpu", "/tag/gpu/7", "/u/jansel"]
FORMATS = ["atom", "rss", "json", "html"]


def get(url: str, **kwargs) -> httpx.Response:
    return httpx.get(url, timeout=20, **kwargs)


@pytest.fixture
def app(upstream_json):
    with running_app(settings_for(upstream_json.url)) as running:
        yield running


def targets(forum: FakeForum) -> list[str]:
    return [r.target for r in forum.requests]


def md_requests(forum: FakeForum) -> list[str]:
    return [r.target for r in forum.requests if r.path.endswith(".md")]


def parsed(response: httpx.Response):
    assert response.status_code == 200, response.text
    feed = feedparser.parse(response.content)
    assert feed.bozo == 0, feed.bozo_exception
    return feed


# --- every route and format ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("route", ROUTES)
def test_every_route_and_format_reads_the_json_lists(app, upstream_json, route, fmt):
    query = {"/top": "?period=weekly"}.get(route, "")
    response = get(app.feed_url(f"{route}.{fmt}{query}"))
    assert response.status_code == 200, response.text
    if fmt == "json":
        items = response.json()["items"]
        assert items and all(i["date_published"] and i["tags"] for i in items)
    elif fmt == "html":
        page = html.fromstring(response.content)
        assert page.xpath("//a[contains(@href, '/t/')]")
    else:
        feed = parsed(response)
        assert feed.entries and all(e.published_parsed for e in feed.entries)
    if route == "/u/jansel":  # the user's own list is JSON on every forum: the probe alone
        assert md_requests(upstream_json) == ["/latest.md"]
    else:  # the feed's own list as Markdown (refused), then the probe, nothing else
        assert md_requests(upstream_json) == detected_at(route, (("period", "weekly"),) if route == "/top" else ())
    jsons = [r.path for r in upstream_json.requests if r.path.endswith(".json")]
    assert jsons and all(p.endswith(".json") for p in jsons)


def test_category_feed_matches_the_markdown_forum(app, upstream_json):
    """The same topics, authors, ids and order as the Markdown site gives (test_web's expectations)."""
    feed = parsed(get(app.feed_url(f"{COMPILER}.atom")))
    assert len(feed.entries) == 30
    assert feed.entries[0].id == f"http://{app.forum_key}/t/3441" and feed.entries[0].author == "markbgilbert"
    items = get(app.feed_url(f"{COMPILER}.json?pages=5")).json()["items"]
    assert len(items) == 30 + 30 + 12
    assert upstream_json.count(f"{COMPILER}.json?page=4") == 0  # page 2 carries no more_topics_url



@pytest.mark.parametrize("route", ["/c/compiler/5", "/c/hardware/gpu/12", "/latest", "/top?period=weekly"])
def test_a_feed_says_where_its_topics_came_from_in_the_same_words_on_either_source(upstream, upstream_json, route):
    """A Markdown list's heading is the list it was read at: a category's is read at `/latest.md?category=ID`,
    whose heading is "Latest", where a JSON list has none. The description said "from Latest" on one forum and
    "from compiler" on the other for the same feed; both now name the list the request names."""
    path, _, query = route.partition("?")
    said = []
    for forum in (upstream, upstream_json):
        with running_app(settings_for(forum.url)) as running:
            feed = parsed(get(running.feed_url(f"{path}.rss" + (f"?{query}" if query else ""))))
            said.append(feed.feed.description.replace(running.forum_key, "FORUM"))
    assert said[0] == said[1], said
    assert "Latest" not in said[0] or route == "/latest", said

# --- what the JSON lists carry -----------------------------------------------------------------------

def test_creation_date_tags_and_category_name_come_from_the_list(app, upstream_json):
    atom = {e.id.rsplit("/", 1)[1]: e for e in parsed(get(app.feed_url(f"{COMPILER}.atom"))).entries}
    poly = atom["3341"]
    assert poly.published_parsed[:6] == (2026, 5, 28, 14, 3, 11)  # the topic's creation, not its last post
    assert poly.updated_parsed[:6] == (2026, 6, 9, 19, 10, 29)
    assert [t.term for t in poly.tags] == ["compiler", "inductor", "rfc", "loop-fusion"]
    rss = {e.id.rsplit("/", 1)[1]: e for e in parsed(get(app.feed_url(f"{COMPILER}.rss"))).entries}
    assert rss["3341"].published_parsed[:6] == (2026, 5, 28, 14, 3, 11)
    items = {i["id"].rsplit("/", 1)[1]: i for i in get(app.feed_url(f"{COMPILER}.json")).json()["items"]}
    assert items["3341"]["date_published"] == "2026-05-28T14:03:11Z"
    assert items["3341"]["tags"] == ["compiler", "inductor", "rfc", "loop-fusion"]
    # Nested category: its own name, from /categories.json, read once for every feed of the forum.
    gpu = get(app.feed_url("/c/hardware/gpu/12.json")).json()["items"]
    assert {i["tags"][0] for i in gpu} == {"gpu"}
    assert upstream_json.count("/categories.json") == 1
    assert not [r for r in upstream_json.requests if r.path.startswith("/t/")]


def test_pinned_topics_keep_their_excerpt_and_others_have_none(app):
    items = {i["id"].rsplit("/", 1)[1]: i for i in get(app.feed_url(f"{COMPILER}.json")).json()["items"]}
    assert items["14"]["summary"] == "About the compiler category."
    assert "summary" not in items["3341"] and items["3341"]["content_text"] == items["3341"]["title"]


def test_tag_filter_needs_no_topic_pages(app, upstream_json):
    items = get(app.feed_url("/latest.json?tag=gpu&pages=2")).json()["items"]
    assert len(items) == 10 and all("gpu" in i["tags"] for i in items)
    assert not [r for r in upstream_json.requests if r.path.startswith("/t/")]


def test_full_content_takes_the_cooked_first_post_and_sanitizes_it(upstream_json):
    # A list and 30 topic pages: past one client's third of the forum's 10 s window, for which the build would
    # wait (tests/test_budget_windows.py); the window is off here.
    with running_app(settings_for(upstream_json.url, forum_budget_10s=0)) as app:
        feed = get(app.feed_url(f"{COMPILER}.json?content=full")).json()
        parsed(get(app.feed_url(f"{COMPILER}.atom?content=full")))
    items = {i["id"].rsplit("/", 1)[1]: i for i in feed["items"]}
    assert "greedily" in items["3341"]["content_html"] and "<code" in items["3341"]["content_html"]
    hostile = html.fragment_fromstring(items["3411"]["content_html"], create_parent="div")
    assert not hostile.xpath("//script | //iframe | //style | //form | //*[@onerror or @onclick or @onmouseover]")
    assert all(link.startswith(("http://", "https://")) for link in hostile.xpath("//@href | //@src"))
    assert hostile.xpath("//img[@alt='results chart']")  # the harmless parts stay
    assert "content_text" in items["2742"]  # no /t/2742.json: the entry keeps what the list said
    topic_pages = [r.path for r in upstream_json.requests if r.path.startswith("/t/")]
    assert topic_pages and all(p.endswith(".json") for p in topic_pages)


@pytest.mark.parametrize(("feed", "listed"), [("/top.json?limit=3", "/top.json"), ("/hot.json?limit=3", "/hot.json"),
                                             ("/filter.json?q=order:likes&limit=3", "/filter.json?q=order:likes")])
def test_a_limit_on_a_ranked_list_keeps_its_first_topics(upstream_json, feed, listed):
    """`limit=` on a top list (or hot, or a `/filter` ordered by likes) keeps the forum's first, as it ranks
    them; the entries are then newest activity first. It kept the most recently active of the whole page. Each
    list's first three are not its three most recently active, so keeping those fails."""
    topics = httpx.get(f"{upstream_json.url}{listed}", timeout=30).json()["topic_list"]["topics"]
    first = [t["id"] for t in topics]
    newest = [t["id"] for t in sorted(topics, key=lambda t: t["last_posted_at"] or "", reverse=True)]
    assert set(first[:3]) != set(newest[:3])
    with running_app(settings_for(upstream_json.url)) as app:
        ranked = get(app.feed_url(feed)).json()
        latest = get(app.feed_url("/latest.json?limit=3")).json()
    ids = {int(item["id"].rsplit("/", 1)[1]) for item in ranked["items"]}
    assert ids == set(first[:3]), (ids, first[:3])
    dates = [item["date_modified"] for item in ranked["items"]]
    assert dates == sorted(dates, reverse=True)
    assert len(latest["items"]) == 3  # an activity list: its newest, as before


def test_lone_surrogate_escapes_in_the_forums_json_never_make_a_500():
    """A `\\ud800` escape alone (json.dumps writes each below as one) in a list's title, topic, author, tag or
    excerpt, and in a topic's title and cooked post: the `.html` views, the front page's previews and every post
    feed answered 500 (a string with no UTF-8 form reached nh3 and the page's bytes). Each is U+FFFD now."""
    topic = {"id": 1, "title": "T\ud800", "slug": "t", "posts_count": 1, "created_at": "2026-01-01T00:00:00Z",
             "last_posted_at": "2026-01-02T00:00:00Z", "visible": True, "archetype": "regular", "pinned": True,
             "excerpt": "e\ud800", "tags": ["x\udfff"], "posters": [{"user_id": 1, "description": "Original Poster"}]}
    listing = {"users": [{"id": 1, "username": "u\ud800"}], "topic_list": {"title": "L\udc00", "topics": [topic]}}
    post = {"id": 11, "post_number": 1, "topic_id": 1, "username": "u\ud800", "post_type": 1,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z", "cooked": "<p>c\ud800</p>"}
    head = {"id": 1, "title": "T\ud800", "slug": "t", "created_at": "2026-01-01T00:00:00Z",
            "post_stream": {"stream": [11], "posts": [post]}}
    with FakeForum(mode="json") as forum:
        forum.set_body("/latest.json", json.dumps(listing))
        for path in ("/t/1.json", "/t/t/1.json"):  # a post feed's first read, and content=full's
            forum.set_body(path, json.dumps(head))
        with running_app(settings_for(forum.url)) as app:
            feeds = {"/latest.{}": "e\ufffd", "/latest.{}?content=full": "c\ufffd", "/t/1.{}": "c\ufffd"}
            answers = {(feed, fmt): get(app.feed_url(feed.format(fmt))) for feed in feeds for fmt in FORMATS}
            fronts = [get(f"{app.url}/", params={"forum": app.forum_key, **form})
                      for form in ({"list": "latest"}, {"list": "topic", "topic": "1"})]
    assert [(at, r.status_code) for at, r in [*answers.items(), *enumerate(fronts)] if r.status_code != 200] == []
    for (feed, fmt), response in answers.items():
        shown = json.dumps(response.json(), ensure_ascii=False) if fmt == "json" else response.text
        assert "T\ufffd" in shown and feeds[feed] in shown and "u\ufffd" in shown, (feed, fmt, shown)
        if fmt in ("atom", "rss"):
            parsed(response)
    assert all("T\ufffd" in front.text for front in fronts)


# --- source detection ---------------------------------------------------------------------------------

def test_detection_costs_one_request_per_forum_not_one_per_feed(upstream_json):
    """One probe per re-check period, whatever the feeds: a probe decides for `RECHECK` seconds, so feeds that
    take `t` seconds cause at most 1 + t // RECHECK probes (one, on a machine that builds seven cold feeds
    within the period; on a loaded one they took over 3 s and the record fell due again, as it should)."""
    recheck = 3  # negative_ttl=0: a re-check period shorter than the 30 s a refused probe is remembered

    def probes_within(paths: tuple[str, ...]) -> int:
        began = time.monotonic()
        for path in paths:
            assert get(app.feed_url(path)).status_code == 200
        return 1 + int((time.monotonic() - began) // recheck)

    with running_app(settings_for(upstream_json.url, cache_ttl=0, source_recheck=recheck, negative_ttl=0)) as app:
        most = probes_within(("/latest.atom", "/hot.rss", f"{COMPILER}.json", "/tag/gpu.atom", "/u/jansel.rss",
                              "/top.json?period=monthly", "/latest.rss?q=torch"))
        first = md_requests(upstream_json)
        assert set(first) == {"/latest.md"} and 1 <= len(first) <= most < 7, (first, most)
        time.sleep(recheck + 0.1)  # past the re-check period: the next feed asks once more, then trusts it again
        most = probes_within(("/latest.atom", "/hot.rss", f"{COMPILER}.json"))
        again = md_requests(upstream_json)[len(first):]
        assert again[:1] == ["/latest.md"] and len(again) <= most < 3, (again, most)


def test_markdown_forum_detection_reuses_the_probe_page(upstream):
    with running_app(settings_for(upstream.url)) as app:
        assert get(app.feed_url("/latest.atom")).status_code == 200
        assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200
    assert targets(upstream).count("/latest.md") == 1  # the probe and the /latest feed share the page
    # no JSON list: the forum's basic info (its icon, feeds/sources/site.py) is the one JSON document read
    assert [r.path for r in upstream.requests if r.path.endswith(".json")] == [site.PATH]


def test_concurrent_cold_feeds_share_one_detection_and_one_fetch(upstream_json):
    upstream_json.stall("/latest.md", 0.3, times=1)
    with running_app(settings_for(upstream_json.url)) as app:
        results: list[int] = []

        def worker(fmt: str) -> None:
            results.append(get(app.feed_url(f"{COMPILER}.{fmt}")).status_code)

        threads = [threading.Thread(target=worker, args=(("atom", "rss", "json")[i % 3],)) for i in range(18)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert results == [200] * 18
    # one detection among them all (its read of the feed's own list as Markdown too), then one fetch
    assert md_requests(upstream_json) == detected_at(COMPILER) and upstream_json.count(read_at(COMPILER, "json")) == 1


def test_decision_is_shared_through_the_control_store():
    store, control = MemoryStore(1 << 24), MemoryControl()
    with FakeForum(mode="json") as forum:
        settings = settings_for(forum.url)
        spec = parse_feed_request(settings, f"{settings.forums[0].key}/latest.atom", {})
        for _ in range(2):  # two services (two workers) on one store
            fetcher = Fetcher(settings)
            try:
                build_service(settings, store, fetcher, control=control).feed(spec, None)
            finally:
                fetcher.close()
            store.delete(FeedService.feed_key(spec, None))
        assert md_requests(forum) == detected_at("/latest")
    entry = control.get(SourceDetector.key(settings.forums[0]))
    assert entry.source == "json" and entry.status == 404 and "404" in entry.reason
    assert codec.decode(codec.encode(entry)) == entry  # so Redis can carry it


def test_a_forum_that_turns_markdown_on_is_followed(tmp_path):
    # A markdown-mode forum over the JSON site: .md files are missing until one is served.
    with FakeForum(JSON_ROOT) as forum, \
            running_app(settings_for(forum.url, cache_ttl=0, source_recheck=1, negative_ttl=0)) as app:
        assert get(app.feed_url("/latest.atom")).status_code == 200
        assert forum.count("/latest.json") == 1
        forum.set_body("/latest.md", (DEFAULT_ROOT / "latest.md").read_text(encoding="utf-8"))
        time.sleep(1.1)
        feed = parsed(get(app.feed_url("/latest.atom")))
        assert len(feed.entries) == 30
        # The re-check probe, then the feed reading the list again (cache_ttl 0; core sends no validators, so
        # no 304 spares it), no JSON.
        probes = [r for r in forum.requests if r.path == "/latest.md"]
        assert forum.count("/latest.json") == 1 and len(probes) == 3 and not probes[-1].headers.get("if-none-match")


def test_transient_probe_failure_does_not_flip_the_source(upstream):
    upstream.fail("/latest.md", 500, times=1)
    with running_app(settings_for(upstream.url)) as app:
        assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200  # read as Markdown meanwhile
    assert upstream.count(read_at(COMPILER)) == 1 and upstream.count(read_at(COMPILER, "json")) == 0


def test_explicit_json_source_skips_detection(upstream_json):
    settings = replace(Settings(forums=(parse_forum(f"json:{upstream_json.url}"),)))
    with running_app(settings) as app:
        parsed(get(app.feed_url(f"{COMPILER}.atom")))
    assert md_requests(upstream_json) == []


def test_explicit_markdown_source_reports_the_plain_404(upstream_json):
    with running_app(Settings(forums=(parse_forum(f"markdown:{upstream_json.url}"),))) as app:
        response = get(app.feed_url("/latest.atom"))
    assert response.status_code == 404 and "answered 404" in response.text
    assert [r.path for r in upstream_json.requests] == ["/latest.md"]


@pytest.mark.parametrize("fault,status", [
    (lambda up: up.json_error("/latest.json", status=403), 403),
    (lambda up: up.html_login("/latest.json"), 502),
    (lambda up: up.fail("/latest.json", 404), 404),
])
def test_both_sources_refused_says_so(app, upstream_json, fault, status):
    fault(upstream_json)
    response = get(app.feed_url("/latest.atom"))
    assert response.status_code == status
    assert f"neither the Markdown nor the JSON lists of {app.forum_key} are public" in response.text
    assert "login-only?" not in response.text  # a guess: the forum said what it does
    assert "Traceback" not in response.text


def test_login_only_forum_refuses_every_list(upstream_json):
    upstream_json.json_error("/", status=403, prefix=True)  # every page, the Markdown probe too
    with running_app(settings_for(upstream_json.url)) as app:
        response = get(app.feed_url("/latest.rss"))
        category = get(app.feed_url(f"{COMPILER}.rss"))
    # Not public: 403, saying so, and that this bridge holds no key to read it with.
    assert response.status_code == 403 and "only to signed-in members" in response.text
    assert "Markdown: upstream answered 403" in response.text and "has no key" in response.text
    # Any other list may be private on a public forum: its refusal is its own error.
    assert category.status_code == 403 and "login-only" not in category.text and "answered 403" in category.text


def test_a_missing_category_on_a_json_forum_is_a_plain_404(app):
    response = get(app.feed_url("/c/nope/99.atom"))
    assert response.status_code == 404
    assert "answered 404" in response.text and "login-only" not in response.text


# --- per-author feeds ---------------------------------------------------------------------------------

def test_user_feed_reads_the_users_own_list(app, upstream_json):
    feed = parsed(get(app.feed_url("/u/jansel.atom")))
    assert upstream_json.count("/topics/created-by/jansel.json") == 1
    assert upstream_json.count("/latest.json") == 0
    assert len(feed.entries) == 8 and {e.author for e in feed.entries} == {"jansel"}
    assert "every topic they started" in feed.feed.subtitle
    latest_only = get(app.feed_url("/latest.json?author=jansel&pages=2")).json()["items"]
    assert len(latest_only) < len(feed.entries)  # the latest list misses older topics


def test_user_feed_category_filters_by_category_id(app, upstream_json):
    items = get(app.feed_url("/u/jansel.json?category=5")).json()["items"]
    everything = get(app.feed_url("/u/jansel.json")).json()["items"]
    assert 0 < len(items) < len(everything) and all(i["tags"][0] == "compiler" for i in items)
    # the forum's own list of their topics in it, as core's lists take `category=` (`ListController#topics_by`)
    assert upstream_json.count("/topics/created-by/jansel.json?category=5") == 1


def test_user_feed_category_takes_its_subcategories_as_the_latest_list_does(app, upstream_json):
    """`category=` of a user's topics feed is the category and its subcategories, as core's lists read it
    (`TopicQuery#default_results`) and as `/latest?category=` does: a topic of jansel's in hardware/gpu (12) was
    missing from `/u/jansel?category=11` (hardware), which was an empty feed, where it is a topic of hardware's."""
    items = get(app.feed_url("/u/jansel.json?category=11")).json()["items"]
    assert [i["url"].rsplit("/", 1)[-1] for i in items] == ["3401"], items
    latest = get(app.feed_url("/latest.json?category=11&author=jansel")).json()["items"]
    assert {i["id"] for i in latest} <= {i["id"] for i in items}


def test_user_feed_pages_through_its_list(app, upstream_json):
    upstream_json.set_body("/topics/created-by/jansel.json", (JSON_ROOT / "c/compiler/5.json").read_text(encoding="utf-8"))
    assert get(app.feed_url("/u/jansel.atom?pages=2")).status_code == 200
    assert upstream_json.count("/topics/created-by/jansel.json?page=1") == 1


def test_user_feed_falls_back_to_latest_when_refused(app, upstream_json):
    upstream_json.json_error("/topics/created-by/jansel.json?category=5", status=403)
    feed = parsed(get(app.feed_url("/u/jansel.rss?category=5")))
    assert upstream_json.count("/latest.json?category=5&order=activity") == 1  # not the category's own sort order
    assert "refused their own topic list" in feed.feed.subtitle
    assert all(e.author == "jansel" for e in feed.entries)
    # the category's latest list, as core answers `/latest.json?category=5` (the fake served the whole latest list)
    assert feed.entries and all(e.tags[0].term == "compiler" for e in feed.entries), [e.get("tags") for e in feed.entries]


def test_user_feed_on_a_markdown_forum_also_reads_the_json_list(upstream):
    upstream.set_body("/topics/created-by/jansel.json", (JSON_ROOT / "topics/created-by/jansel.json").read_text(encoding="utf-8"))
    with running_app(settings_for(upstream.url)) as app:
        feed = parsed(get(app.feed_url("/u/jansel.atom")))
    assert len(feed.entries) == 8 and "every topic they started" in feed.feed.subtitle
    assert upstream.count("/latest.md") == 1  # detection only


# --- caching, conditional requests, stale copies ------------------------------------------------------

@pytest.mark.parametrize("validators", [False, True], ids=["core", "a proxy adding validators"])
def test_conditional_requests_up_and_down(validators):
    """Readers get 304s from the bridge whatever the forum sends; upstream, core sends no validators, so every
    rebuild reads the list whole, and where a proxy in front adds them the bridge sends them back."""
    with FakeForum(mode="json", validators=validators) as forum, \
            running_app(settings_for(forum.url, cache_ttl=0)) as app:
        url = app.feed_url(f"{COMPILER}.atom")
        first = get(url)
        second = get(url)
        assert second.content == first.content
        assert get(url, headers={"If-None-Match": first.headers["etag"]}).status_code == 304
    reads = [r for r in forum.requests if r.target == read_at(COMPILER, "json")]
    assert len(reads) == 3 and all(bool(r.headers.get("if-none-match")) is validators for r in reads[1:])


def test_cached_feed_is_a_hit(app, upstream_json):
    url = app.feed_url("/tag/gpu.rss")
    assert get(url).headers["x-feedbridge-cache"] == "miss"
    assert get(url).headers["x-feedbridge-cache"] == "hit"
    assert upstream_json.count("/tag/gpu.json") == 1


def test_stale_copy_is_served_when_the_json_list_fails(upstream_json):
    with running_app(settings_for(upstream_json.url, cache_ttl=0)) as app:
        url = app.feed_url(f"{COMPILER}.atom")
        good = get(url)
        upstream_json.fail(read_at(COMPILER, "json"), 500)
        stale = get(url)
        fresh_filter = get(app.feed_url(f"{COMPILER}.json?author=jansel"))
    assert stale.status_code == 200 and stale.content == good.content
    assert stale.headers["x-feedbridge-cache"] == "stale"
    assert fresh_filter.status_code == 200 and fresh_filter.headers["x-feedbridge-cache"] == "stale"



def test_a_build_from_cached_lists_goes_without_names_when_no_directory_is_held(upstream_json):
    """Names come from the directory: a build from cached copies (the forum failing) whose directory was never
    read keeps its topics without their categories' names, rather than failing for want of them."""
    with running_app(settings_for(upstream_json.url, cache_ttl=0)) as app:
        upstream_json.fail("/categories.json", 500, prefix=True)
        assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200
        upstream_json.fail(read_at(COMPILER, "json"), 500)
        stale = get(app.feed_url(f"{COMPILER}.json?author=jansel"))
    assert stale.status_code == 200 and stale.headers["x-feedbridge-cache"] == "stale"
    assert stale.json()["items"]


def test_a_user_feed_from_cached_copies_moves_on_to_the_latest_list_it_holds(upstream_json):
    """The user's own list never read (the forum refused it), the latest list held: a build from cached copies
    goes on from the list it lacks to the one it holds, as the live build went on from the refused one."""
    with running_app(settings_for(upstream_json.url, cache_ttl=0)) as app:
        upstream_json.json_error("/topics/created-by/jansel.json?category=5", status=403)
        assert get(app.feed_url("/u/jansel.rss?category=5")).status_code == 200
        upstream_json.fail(read_at("/latest", "json", params=(("category", "5"),)), 500)
        stale = get(app.feed_url("/u/jansel.json?category=5"))
    assert stale.status_code == 200 and stale.headers["x-feedbridge-cache"] == "stale"
    assert stale.json()["items"] and all(i["authors"][0]["name"] == "jansel" for i in stale.json()["items"])


# --- front page, paste box, OPML, static build ---------------------------------------------------------

def test_front_page_categories_opml_and_paste_box(app, upstream_json):
    front = get(f"{app.url}/?forum={app.forum_key}")
    assert front.status_code == 200 and "hardware/gpu/12" in front.text
    opml = etree.fromstring(get(f"{app.url}/{app.forum_key}/opml").content)
    assert any("/c/hardware/gpu/12.atom" in (o.get("xmlUrl") or "") for o in opml.iter("outline"))
    assert upstream_json.count("/categories.json") == 1 and upstream_json.count("/categories.md") == 0
    for pasted, field, value in [(f"{upstream_json.url}/c/compiler/5.json?page=1", "category", "compiler/5"),
                                 (f"{upstream_json.url}/topics/created-by/jansel.json", "author", "jansel"),
                                 (f"{upstream_json.url}/tag/gpu.json", "tag", "gpu")]:
        answer = get(f"{app.url}/recognise", params={"url": pasted}).json()
        assert answer["form"][field] == value, answer
    preview = get(f"{app.url}/preview", params={"forum": app.forum_key, "list": "tag", "tag": "gpu"})
    assert preview.status_code == 200 and "/t/" in preview.text


def test_static_build_reads_a_json_forum(tmp_path, upstream_json):
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "https://feeds.example.net/"\n[fetch]\ndelay = 0\n[defaults]\n'
                      f'forum = "{upstream_json.url}"\n[[feeds]]\nname = "compiler"\npath = "c/compiler/5"\n'
                      '[[feeds]]\nname = "jansel"\npath = "u/jansel"\n')
    result = CliRunner().invoke(main, ["build", "--config", str(config)])
    assert result.exit_code == 0, result.stderr
    for name in ("compiler.atom", "compiler.rss", "jansel.atom"):
        feed = feedparser.parse((tmp_path / "public" / name).read_bytes())
        assert feed.bozo == 0 and feed.entries
    # One probe, for the user's feed or the category's, whose own list as Markdown is read only while the forum is
    # undecided: the build reads both feeds at once, so whether the probe decided before it began is a race.
    asked = md_requests(upstream_json)
    assert asked.count("/latest.md") == 1 and set(asked) <= set(detected_at(COMPILER)) and len(asked) <= 2, asked


def test_a_static_build_of_a_forum_whose_markdown_lists_fail_rewrites_its_feeds(tmp_path, upstream_json):
    """What detecting the source read and the forum failed (the feeds' own lists as Markdown, the probe: 500) leaves
    no feed the worse: the second run, with files to keep, writes them again from the JSON lists, exit 0."""
    upstream_json.fail("/latest.md", 500)
    upstream_json.fail("/tag/gpu.md", 500)
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "https://feeds.example.net/"\n[fetch]\ndelay = 0\n[defaults]\n'
                      f'forum = "{upstream_json.url}"\nformats = ["atom"]\n'
                      '[[feeds]]\nname = "compiler"\npath = "c/compiler/5"\n[[feeds]]\nname = "gpu"\npath = "tag/gpu"\n')
    for _ in range(2):
        result = CliRunner().invoke(main, ["build", "--config", str(config)])
        assert result.exit_code == 0, result.stderr
    for name in ("compiler.atom", "gpu.atom"):
        assert feedparser.parse((tmp_path / "public" / name).read_bytes()).entries
    assert upstream_json.count(read_at("/tag/gpu", "json")) == 2


# --- configuration and fixtures -----------------------------------------------------------------------

def test_source_prefixes_and_recheck_setting():
    settings = Settings.from_env({"FEEDBRIDGE_FORUMS": "https://a.example json:https://b.example/sub markdown:http://c",
                                  "FEEDBRIDGE_SOURCE_RECHECK": "600"})
    assert [(f.base_url, f.source) for f in settings.forums] == [
        ("https://a.example", "auto"), ("https://b.example/sub", "json"), ("http://c", "markdown")]
    assert settings.forums[1].key == "b.example/sub" and settings.source_recheck == 600
    with pytest.raises(ConfigError, match="source prefix must be one of auto, markdown, json"):
        Settings.from_env({"FEEDBRIDGE_FORUMS": "rss:https://a.example"})
    with pytest.raises(ConfigError, match="FEEDBRIDGE_SOURCE_RECHECK"):
        Settings.from_env({"FEEDBRIDGE_SOURCE_RECHECK": "0"})
    assert Forum("https://a.example").source == "auto"


def test_codec_refuses_a_malformed_source_entry():
    good = SourceEntry("json", 1.0, 2.0, "upstream answered 404", 404)
    assert codec.decode(codec.encode(good)) == good
    for bad in (replace(good, stored_at="soon"), replace(good, due_at="soon"), replace(good, source=None)):
        with pytest.raises(DecodeError):
            codec.decode(codec.encode(bad))


def test_json_site_fixtures_are_what_the_generator_writes():
    done = subprocess.run([sys.executable, str(ROOT / "fixtures/json/make_site_json.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
