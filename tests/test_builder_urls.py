"""Any Discourse URL a person may paste, to its best feed (issue #34), by the one converter
(`feeds/request/urls.py`) the front page, `feedbridge build SOURCE` and static `source =` files share; and the feed
URL offered answers 200. Over a real socket against the fake forum (its JSON mode, with posts)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pytest
from lxml import html as lxml_html

from feedbridge.config import Settings, parse_forum
from feedbridge.feeds.request.urls import FeedTarget, NoFeed, feed_for_url
from feedbridge.web.feedform import FeedForm, form_from_path, recognise
from tests.appserver import RunningApp, running_app, settings_for
from tests.fake_posts import PostSite
from tests.test_cli import run
from tests.upstream import FakeForum

# (what is pasted, after the forum's URL; the feed path and query the builder offers)
PASTED = [
    ("/u/jansel", "/u/jansel.atom"),
    ("/u/jansel/summary", "/u/jansel.atom"),
    ("/u/jansel/activity/topics", "/u/jansel.atom"),
    ("/topics/created-by/jansel.json", "/u/jansel.atom"),
    ("/u/alice/activity", "/u/alice/posts.atom"),
    ("/u/alice/activity/replies", "/u/alice/posts.atom"),
    ("/c/compiler/5/l/top?period=weekly", "/c/compiler/5/l/top.atom?period=weekly"),
    ("/c/compiler/5/l/top/monthly", "/c/compiler/5/l/top.atom?period=monthly"),
    ("/c/compiler/5/l/latest", "/c/compiler/5.atom"),
    ("/c/compiler/5.json?page=1", "/c/compiler/5.atom"),
    ("/top?period=monthly", "/top.atom?period=monthly"),
    ("/top/yearly", "/top.atom?period=yearly"),
    ("/latest?category=5", "/latest.atom?category=5"),
    ("/c/5", "/latest.atom?category=5"),  # core finds a category by its id alone; its slug is not known here
    ("/tag/gpu", "/tag/gpu.atom"),
    ("/tag/gpu/7/l/latest", "/tag/gpu.atom"),  # `/tag/gpu.md` answers 301 to `/tag/gpu/7.md`
    ("/tags/c/hardware/gpu/12/gpu", "/c/hardware/gpu/12.atom?tag=gpu"),
    ("/tags/intersection/gpu/cuda", "/tag/gpu+cuda.atom"),
    ("/t/dynamic-shapes-the-long-thread/9446/17", "/t/dynamic-shapes-the-long-thread/9446.atom"),
    ("/t/9446", "/t/9446.atom"),
    ("/c/hardware/gpu/graphs/13", "/c/hardware/gpu/graphs/13.atom"),
    ("/search?q=inductor", "/latest.atom?q=inductor"),  # the bridge's keyword query on the latest list
    ("/search?q=inductor&category=5", "/latest.atom?category=5&q=inductor"),
    ("/filter?q=likes-min:10+tag:gpu", "/filter.atom?q=likes-min%3A10+tag%3Agpu"),  # core's /filter, its q= as is
    ("/filter?q=tag%3Agpu%2Bcuda%20order%3Alikes", "/filter.atom?q=tag%3Agpu%2Bcuda+order%3Alikes"),
    ("/filter", "/latest.atom"),  # core's /filter without a query is the latest list
    ("/posts", "/posts.atom"),
    ("/hot", "/hot.atom"),
    ("/", "/latest.atom"),
]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FakeForum, RunningApp]]:
    # One client asks for every pasted URL's feed within seconds, past its third of the forum's 10 s window
    # (tests/test_budget_windows.py): that window is off here.
    with FakeForum(mode="json", posts=PostSite.standard().answer) as forum, \
            running_app(settings_for(forum.url, forum_budget_10s=0)) as app:
        yield forum, app


def offered(app: RunningApp, pasted: str) -> str:
    """The feed URL the front page offers for a pasted URL."""
    page = lxml_html.fromstring(httpx.get(f"{app.url}/", params={"url": pasted}, timeout=30).content)
    found = page.xpath("//input[@id='feed-url']/@value")
    assert found, page.xpath("//p[@id='paste-status']/text()")
    return str(found[0])


@pytest.mark.parametrize(("pasted", "feed"), PASTED, ids=[p for p, _ in PASTED])
def test_a_pasted_url_gives_its_best_feed_and_the_feed_answers(served, pasted, feed):
    forum, app = served
    url = offered(app, forum.url + pasted)
    assert url == app.feed_url(feed)
    response = httpx.get(url, timeout=30)
    assert response.status_code == 200, response.text
    html_view = httpx.get(url.replace(".atom", ".html", 1), timeout=30)
    assert html_view.status_code == 200


@pytest.mark.parametrize(("pasted", "feed"), PASTED, ids=[p for p, _ in PASTED])
def test_the_html_views_change_link_gives_back_the_form_that_made_it(served, pasted, feed):
    forum, app = served
    found = recognise(settings_for(forum.url), forum.url + pasted)
    assert found.form is not None, found.message
    path, _, query = feed.partition("?")
    again = form_from_path(f"{app.forum_key}{path}", parse_qs(query), settings_for(forum.url))
    assert again.feed_request() == found.form.feed_request()


SETTINGS = Settings(forums=(parse_forum("https://forum.example.org"),))


@pytest.mark.parametrize("url", ["https://forum.example.org/admin/users", "https://other.example/latest", "  ",
                                 "https://forum.example.org/search", "https://forum.example.org/c/a/b/c/d/9",
                                 # an id is 0-9, as core's routes read it: Python's \d takes any Unicode digit
                                 "https://forum.example.org/t/slug/\u0661\u0662", "https://forum.example.org/t/\u0661\u0662"])
def test_urls_that_name_no_feed_say_why(url):
    found = feed_for_url(SETTINGS, url)
    assert isinstance(found, NoFeed) and found.message


def test_a_pasted_host_is_read_as_the_forums_whatever_its_port_user_or_final_dot():
    """`https://forum:443/...` (a browser's copy after a redirect), `forum.example.org.` and a user's name and
    password in the URL named no forum, and the message quoted the password back."""
    for url in ("https://forum.example.org:443/c/compiler/5", "https://u:hunter2@FORUM.example.org./c/compiler/5"):
        found = feed_for_url(SETTINGS, url)
        assert isinstance(found, FeedTarget) and found.feed_path("atom") == "forum.example.org/c/compiler/5.atom", url
    on_443 = Settings(forums=(parse_forum("https://forum.example.org:443"),))
    found = feed_for_url(on_443, "https://forum.example.org/latest")
    assert isinstance(found, FeedTarget) and found.forum == on_443.forums[0]
    for url, named in (("https://forum.example.org:8443/latest", "forum.example.org:8443 is not a forum"),
                       ("https://u:hunter2@other.example/latest", "other.example is not a forum")):
        missed = feed_for_url(SETTINGS, url)
        assert isinstance(missed, NoFeed) and missed.message.startswith(named) and "hunter2" not in missed.message


@pytest.mark.parametrize("configured", ["https://bücher.example", "https://xn--bcher-kva.example"])
def test_a_pasted_internationalised_host_names_its_forum_in_either_form(configured):
    """Browsers copy an internationalised host as Unicode or as punycode: either names the forum, configured
    either way; another host is still no forum."""
    settings = Settings(forums=(parse_forum(configured),))
    for url in ("https://bücher.example/c/books/5", "https://xn--bcher-kva.example/c/books/5",
                "https://XN--BCHER-KVA.example:443/c/books/5.md"):
        found = feed_for_url(settings, url)
        assert isinstance(found, FeedTarget) and found.path == "c/books/5" and found.forum == settings.forums[0], url
    for url in ("https://bucher.example/c/books/5", "https://xn--bcher-kvb.example/c/books/5", "https://xn--zz.example/"):
        assert isinstance(feed_for_url(settings, url), NoFeed), url


def test_a_category_named_by_its_slug_alone_says_what_to_paste():
    found = feed_for_url(SETTINGS, "https://forum.example.org/c/compiler")
    assert isinstance(found, NoFeed) and "by its slug alone" in found.message and "/c/SLUG/ID" in found.message


def test_an_intersection_of_more_tags_than_a_feed_takes_says_so_as_the_web_does():
    """The web's 404 for `/tag/a+b+c+d+e+f` says a feed takes up to 5 tags; the paste box and `feedbridge build`
    said only that the URL was not recognised."""
    for path in ("tags/intersection/a/b/c/d/e/f", "tag/a+b+c+d+e+f"):
        found = feed_for_url(SETTINGS, f"https://forum.example.org/{path}")
        assert isinstance(found, NoFeed) and "joins 6 tags" in found.message and "up to 5 tags" in found.message
    found = feed_for_url(SETTINGS, "https://forum.example.org/tags/intersection/a/b/c/d/e")
    assert isinstance(found, FeedTarget) and found.feed_path("atom") == "forum.example.org/tag/a+b+c+d+e.atom"


def test_the_one_converter_keeps_the_lists_own_query_and_drops_paging():
    found = feed_for_url(SETTINGS, "forum.example.org/latest.json?category=5&page=3&order=views")
    assert isinstance(found, FeedTarget)
    assert (found.feed_path("rss"), found.args()) == ("forum.example.org/latest.rss", {"category": ["5"]})
    weird = feed_for_url(SETTINGS, "https://forum.example.org/top?period=hourly")
    assert isinstance(weird, FeedTarget) and weird.args() == {"period": ["all"]}


def test_the_form_offers_every_parameter_the_routes_take(served):
    forum, app = served
    page = lxml_html.fromstring(httpx.get(f"{app.url}/", timeout=30).content)
    names = set(page.xpath("//form[@id='feed-form']//*[@name]/@name"))
    assert {"author", "q", "tags", "tag_match", "exclude_tag", "exclude_category", "exclude_pinned", "min_replies",
            "max_replies", "min_likes", "min_views", "digest", "limit", "pages", "content", "period", "view", "in_category",
            "category", "tag", "topic", "user", "list", "format"} <= names
    lists = set(page.xpath("//input[@name='list']/@value"))
    assert {"user_topics", "user_posts"} <= lists and not lists & {"started", "user", "search"}
    form = FeedForm(forum=app.forum_key, list="latest", in_category="5", exclude_category="6,11",
                    exclude_pinned="1", limit="7", content="full", min_likes="1")
    path, args = form.feed_request()
    response = httpx.get(f"{app.url}/{path}", params=args, timeout=30)
    assert response.status_code == 200, response.text
    shown = httpx.get(f"{app.url}/preview", params=form.args(), timeout=30).text
    query = parse_qs(urlsplit(lxml_html.fromstring(shown).xpath("//input[@id='feed-url']/@value")[0]).query)
    assert query == {"category": ["5"], "exclude_category": ["11", "6"], "exclude_pinned": ["1"], "limit": ["7"],
                     "content": ["full"], "min_likes": ["1"]}


# --- feedbridge build SOURCE: every feed kind's URL ------------------------------------------------------

@pytest.mark.parametrize(("pasted", "kind"), [
    ("/t/dynamic-shapes-the-long-thread/9446", "Dynamic shapes: the long thread"),
    ("/posts.json", "latest posts"),
    ("/u/alice/activity", "posts by alice"),
    ("/c/hardware/gpu/graphs/13.json", "graphs"),
    ("/c/compiler/5/l/top.json?period=weekly", "top (weekly)"),
    ("/search?q=torch", "latest · q: torch"),
])
def test_build_takes_every_feed_kinds_url(served, pasted, kind):
    forum, _ = served
    result = run("build", forum.url + pasted, "--format", "json", "--limit", "5")
    assert result.returncode == 0, result.stderr  # was 2, "tag= is for topic feeds", for the post feeds
    feed = json.loads(result.stdout)
    assert kind in feed["title"] and 0 < len(feed["items"]) <= 5


def test_build_of_a_third_level_category_without_pinned_topics(served):
    forum, _ = served
    result = run("build", f"{forum.url}/c/hardware/gpu/graphs/13.json", "--format", "json", "--exclude-pinned")
    assert result.returncode == 0, result.stderr
    assert all(not i["id"].endswith("/t/143") for i in json.loads(result.stdout)["items"])
    refused = run("build", f"{forum.url}/posts.json", "--exclude-pinned")
    assert refused.returncode == 2 and b"exclude_pinned" in refused.stderr
    unknown = run("build", f"{forum.url}/admin/users")
    assert unknown.returncode == 2 and b"does not recognise" in unknown.stderr


MARKED = ["अनिल", "สวัสดี", "zoe\u0308", "বাংলা"]  # Devanagari, Thai, a decomposed ë, Bengali: combining marks


@pytest.mark.parametrize("name", MARKED)
def test_names_and_slugs_with_combining_marks_name_their_feeds(name):
    """Core's usernames, slugs and tags hold combining marks (`UsernameValidator`'s `\\p{M}`, `Slug`), which `re`'s
    `\\w` does not take: `/u/अनिल`, a Hindi tag or category and a pasted profile of theirs were no feed (404)."""
    from feedbridge.feeds.request.spec import parse_feed_request

    settings = Settings(forums=(parse_forum("https://forum.example"),))
    for path, kind in ((f"u/{name}.atom", "user_topics"), (f"u/{name}/posts.rss", "user_posts"),
                       (f"tag/{name}.json", "tag"), (f"c/{name}/7.atom", "category"), (f"t/{name}/12.atom", "topic_posts")):
        spec = parse_feed_request(settings, f"forum.example/{path}", {})
        assert spec.kind == kind, path
    assert parse_feed_request(settings, f"forum.example/u/{name}.atom", {}).label.endswith(name)
    pasted = feed_for_url(settings, f"https://forum.example/u/{name}/summary")
    assert isinstance(pasted, FeedTarget) and pasted.path == f"u/{name}", pasted
    assert isinstance(feed_for_url(settings, f"https://forum.example/t/{name}/12/3"), FeedTarget)
    assert isinstance(feed_for_url(settings, f"https://forum.example/u/{name}\u200b"), NoFeed)  # no mark: no name


def test_a_user_feed_of_a_name_with_combining_marks_reads_their_list(upstream_json):
    theirs = httpx.get(f"{upstream_json.url}/topics/created-by/jansel.json", timeout=10).text
    upstream_json.set_body(quote("/topics/created-by/अनिल.json"), theirs.replace('"jansel"', '"अनिल"'))
    with running_app(settings_for(upstream_json.url)) as app:
        response = httpx.get(app.feed_url("/u/अनिल.json"), timeout=20)
    assert response.status_code == 200 and response.json()["items"], response.text
    assert upstream_json.count("/topics/created-by/%E0%A4%85%E0%A4%A8%E0%A4%BF%E0%A4%B2.json") == 1
