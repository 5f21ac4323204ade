"""Core's category routes the bridge lacked (issue #32 item 6, issue #34): a third-level category
(`/c/a/b/c/ID`, core's `max_category_nesting` is at most 3), a category's top list (`/c/SLUG/ID/l/top`),
and `exclude_pinned=1` on every topic feed. Over a real socket, against the fake forum in both modes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import feedparser
import httpx
import pytest
from lxml import etree
from lxml import html as lxml_html

from feedbridge.config import Settings, parse_forum
from feedbridge.errors import RequestError
from feedbridge.feeds.request import signing
from feedbridge.feeds.request.spec import FeedSpec, parse_feed_request
from feedbridge.feeds.sources.dialects import JSON, MARKDOWN
from tests.appserver import RunningApp, running_app, settings_for
from tests.test_signal import app, forum  # noqa: F401  (the fake forum in both modes, and the app before it)
from tests.test_static import run as run_static
from tests.test_static import write_config
from tests.upstream import PROJECT_ROOT, FakeForum, read_at

EXPECTED = json.loads((PROJECT_ROOT / "fixtures" / "site-expected.json").read_text(encoding="utf-8"))
GRAPHS = "/c/hardware/gpu/graphs/13"
ABOUT_GRAPHS = 143  # pinned in its category (fixtures/json/make_site_json.py)
ABOUT_GPU = 40


def listed(rel: str) -> list[dict[str, Any]]:
    topics: list[dict[str, Any]] = EXPECTED[rel]["topics"]
    return topics


def get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=30)


def ids(app: RunningApp, path: str) -> list[int]:
    response = get(app.feed_url(path))
    assert response.status_code == 200, response.text
    return [int(item["id"].rsplit("/", 1)[1]) for item in response.json()["items"]]


def list_targets(forum: FakeForum) -> list[str]:
    """The requests for a category's lists: core's `/c/…` JSON routes and its `?category=` Markdown ones."""
    return [r.target for r in forum.requests if "/c/" in r.target or "category=" in r.target]


# --- a third-level category ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["atom", "rss", "json", "html"])
def test_a_third_level_category_is_a_feed_in_every_format(app, forum, fmt):
    response = get(app.feed_url(f"{GRAPHS}.{fmt}"))
    assert response.status_code == 200, response.text
    # a JSON forum's first feed reads its list as Markdown too, which is refused: that decides nothing, the probe does
    assert list_targets(forum) == {"markdown": ["/latest.md?category=13&order=activity"],
                                   "json": ["/latest.md?category=13&order=activity",
                                            f"{GRAPHS}/l/latest.json?order=activity"]}[forum.mode]
    titles = [t["title"] for t in listed("c/hardware/gpu/graphs/13.md")]
    if fmt == "json":
        assert {i["title"] for i in response.json()["items"]} == set(titles)
        assert response.json()["title"].endswith("hardware / gpu / graphs")
    elif fmt == "html":
        assert "About the graphs category" in response.text
    else:
        feed = feedparser.parse(response.content)
        assert feed.bozo == 0 and {e.title for e in feed.entries} == set(titles)
        assert feed.feed.title.endswith("hardware / gpu / graphs")


def test_a_third_level_category_takes_every_filter(app, forum):
    page0, page1 = listed("c/hardware/gpu/graphs/13.md"), listed("c/hardware/gpu/graphs/13/page-1.md")
    by_activity = sorted(page0, key=lambda t: t["last_posted_at"], reverse=True)
    assert ids(app, f"{GRAPHS}.json") == [t["id"] for t in by_activity]
    assert ids(app, f"{GRAPHS}.json?exclude_pinned=1") == [t["id"] for t in by_activity if t["id"] != ABOUT_GRAPHS]
    many = [t["id"] for t in by_activity if t["replies"] >= 20]
    assert many and ids(app, f"{GRAPHS}.json?min_replies=20") == many
    both = ids(app, f"{GRAPHS}.json?pages=2&exclude_pinned=1&limit=100")
    assert both == [t["id"] for t in sorted(page0 + page1, key=lambda t: t["last_posted_at"], reverse=True)
                    if t["id"] != ABOUT_GRAPHS]
    assert ids(app, f"{GRAPHS}.json?author=nobody") == []
    word = by_activity[1]["title"].split()[-1]
    assert by_activity[1]["id"] in ids(app, f"{GRAPHS}.json?q={word}")
    assert get(app.feed_url(f"{GRAPHS}.atom?min_likes=5&exclude_tag=x&tag=a%2Bb")).status_code == 200


def test_a_third_level_category_digest_leaves_out_where_the_pages_end_not_its_pinned_topic(app):
    """Its old pinned "About" topic comes first (2023); the list goes on past page 0. The day page 0
    ends in goes, and so does 2023's; every other day is whole."""
    page0 = listed("c/hardware/gpu/graphs/13.md")
    days = {t["last_posted_at"][:10] for t in page0 if t["id"] != ABOUT_GRAPHS}
    end = min(t["last_posted_at"][:10] for t in page0[1:])
    items = get(app.feed_url(f"{GRAPHS}.json?digest=daily&limit=50")).json()["items"]
    shown = [i["title"].split(":")[0] for i in items]
    assert shown == sorted(days - {end}, reverse=True)
    for item in items:
        day = item["title"].split(":")[0]
        assert item["title"].split(": ")[1].split()[0] == str(sum(t["last_posted_at"][:10] == day for t in page0))


def test_exclude_pinned_reads_the_json_list_of_a_markdown_page_once(forum):
    with running_app(settings_for(forum.url)) as app:
        assert ABOUT_GPU in ids(app, "/c/hardware/gpu/12.json")
        assert ABOUT_GPU not in ids(app, "/c/hardware/gpu/12.json?exclude_pinned=1")
        assert get(app.feed_url("/c/hardware/gpu/12.rss?exclude_pinned=1")).status_code == 200
    # A Markdown page's pinned flags come from the JSON list of the same page, read once and cached; a JSON
    # forum's list carries them itself: one request either way (and the Markdown one, refused, that the first
    # feed reads while the forum's source is undecided).
    assert forum.count(read_at("/c/hardware/gpu/12", "json")) == 1
    assert forum.count(read_at("/c/hardware/gpu/12")) == 1


def test_exclude_pinned_on_a_markdown_forum_without_json_lists_is_a_400_naming_it():
    with FakeForum() as forum, running_app(settings_for(forum.url)) as app:
        response = get(app.feed_url("/c/hardware/gpu/12.atom?exclude_pinned=1"))
    assert response.status_code == 400 and "exclude_pinned" in response.text


@pytest.mark.parametrize("query", ["exclude_pinned=2", "exclude_pinned=yes", "exclude_pinned=1&exclude_pinned=1"])
def test_bad_exclude_pinned_values_are_400(app, query):
    response = get(app.feed_url(f"/latest.atom?{query}"))
    assert response.status_code == 400 and "exclude_pinned" in response.text


def test_post_feeds_refuse_exclude_pinned(app):
    response = get(app.feed_url("/posts.atom?exclude_pinned=1"))
    assert response.status_code == 400 and "exclude_pinned= is for topic feeds" in response.text


@pytest.mark.parametrize("path", ["/t/467", "/t/some-topic/467", "/posts"])
@pytest.mark.parametrize("value", ["excerpt", "full"])
def test_a_topics_posts_and_the_latest_posts_refuse_content_naming_it(app, forum, path, value):
    # Their posts always carry their HTML: `content=excerpt` gave the bodies all the same, `content=full` the
    # very feed under a cache key of its own. A parameter a feed does not act on is refused by name.
    forum.reset()
    response = get(app.feed_url(f"{path}.atom?content={value}"))
    assert response.status_code == 400
    assert "content= is for" in response.text and "/t/" in response.text
    assert forum.requests == []


def test_pages_on_a_topics_posts_is_for_a_filter_to_match():
    # Without a filter the feed is the topic's newest limit= posts: `pages=` read nothing more and made only
    # another cache key for the same feed. With one, it reads the stream further back for the filter to match.
    for args in ({}, {"limit": "5"}):
        with pytest.raises(RequestError) as refused:
            spec_of("t/467.atom", pages="3", **args)
        assert refused.value.param == "pages" and "filter" in refused.value.message
    for narrowing in ({"author": "jansel"}, {"exclude_author": "jansel"}, {"q": "inductor"}, {"max_age": "7d"}):
        assert spec_of("t/467.atom", pages="3", **narrowing).pages == 3
    assert spec_of("t/467.atom").pages == 1 and spec_of("posts.atom", pages="3").pages == 3


def test_feeds_that_read_one_list_have_ids_of_their_own():
    # A tag intersection reads its first tag's list, a user's topics the latest list, and each member's unread
    # list is `/unread`: their digests (and their ids without a self URL) were one id, and readers merged the
    # different entries of `tag/gpu` and `tag/gpu+cuda`, of `u/ezyang`, `u/smth` and `latest`, of every member.
    from feedbridge.config import Credential
    from feedbridge.feeds.members import personal

    groups = [("tag/gpu", "tag/gpu+cuda", "tag/gpu+cuda+rfc"), ("latest", "u/ezyang", "u/smth")]
    for group in groups:
        for digest in ({"digest": "weekly"}, {}):
            specs = [spec_of(f"{path}.atom", **digest) for path in group]
            ids = [s.digest_id if digest else s.list_id for s in specs]
            assert len(set(ids)) == len(ids), ids
    assert spec_of("tag/gpu+cuda.atom").list_id.endswith("/tags/intersection/gpu/cuda.md")
    assert spec_of("c/compiler/5.atom", digest="daily").digest_id == (
        "https://forum.example.org/c/compiler/5.md#digest=daily")  # the ids of other feeds are as they were
    forum = SETTINGS.forums[0]
    members = [personal.Member(forum, n, name, Credential(forum.key, key=name * 8)) for n, name in ((1, "ann"), (2, "bo"))]
    unread = [personal.feed_spec(SETTINGS, m, "unread.atom", {"digest": ["weekly"]}) for m in members]
    assert unread[0].digest_id != unread[1].digest_id and "member=ann" in unread[0].digest_id


def test_a_users_posts_take_content():
    assert spec_of("u/jansel/posts.atom", content="full").content == "full"
    assert spec_of("u/jansel/posts.atom", content="excerpt").content == "excerpt"


def test_every_topic_route_takes_exclude_pinned(forum):
    # Eight routes, each a Markdown page and its JSON twin, from one client within seconds: past its third of
    # the forum's 10 s window (tests/test_budget_windows.py), which is off here.
    with running_app(settings_for(forum.url, forum_budget_10s=0)) as app:
        for path in ("/latest", "/top", "/hot", "/c/compiler/5", GRAPHS, "/c/compiler/5/l/top", "/tag/gpu",
                     "/u/jansel"):
            response = get(app.feed_url(f"{path}.atom?exclude_pinned=1"))
            assert response.status_code == 200, (path, response.text)
            assert "without pinned" in feedparser.parse(response.content).feed.title


@pytest.mark.parametrize("path", ["/c/compiler/\u0665", "/c/compiler/\U0001d7d3", "/tag/gpu/\u0667",
                                  "/t/\u0661\u0662", "/t/slug/\u0661\u0662"])
def test_an_id_in_a_feed_path_is_ascii_digits_or_no_route_and_nothing_is_fetched(app, forum, path):
    # Python's `\d` takes every Unicode digit: `/c/compiler/٥` matched the category route, then the forum was
    # asked for `/c/compiler/%D9%A5.md` (a request that cannot succeed, on the forum's budget), and `/t/١٢` was
    # topic 12 under another cache key. An id is 0-9 only, as core's routes read it.
    forum.reset()
    response = get(app.feed_url(f"{path}.atom"))
    assert response.status_code == 404 and "no feed route matches" in response.text
    assert forum.requests == []
    assert get(app.feed_url("/c/compiler/5.atom")).status_code == 200  # the ASCII id is the feed


# --- a category's top list --------------------------------------------------------------------------------

def test_a_category_top_list_reads_cores_route(app, forum):
    """core has no Markdown `/c/…/l/top` (lib/markdown_endpoint/controller_support.rb): a Markdown forum's
    category top list is `/top.md?category=ID&period=P`, a JSON one's `/c/…/ID/l/top.json?period=P`."""
    top = listed("c/compiler/5/l/top.md")
    feed = get(app.feed_url("/c/compiler/5/l/top.json?period=weekly")).json()
    assert list_targets(forum) == {"markdown": ["/top.md?category=5&period=weekly"],
                                   "json": ["/top.md?category=5&period=weekly",  # the refused Markdown read
                                            "/c/compiler/5/l/top.json?period=weekly"]}[forum.mode]
    assert {int(i["id"].rsplit("/", 1)[1]) for i in feed["items"]} == {t["id"] for t in top}
    assert feed["title"].endswith("compiler · top (weekly)")
    assert feed["home_page_url"].endswith("/c/compiler/5/l/top")
    assert get(app.feed_url("/c/compiler/5/l/top.atom")).status_code == 200  # period=all
    bad = get(app.feed_url("/c/compiler/5/l/top.atom?period=hourly"))
    assert bad.status_code == 400 and "period" in bad.text


# --- names, keys, tokens -----------------------------------------------------------------------------------

SETTINGS = Settings(forums=(parse_forum("https://forum.example.org"),))


def spec_of(path: str, **args: str) -> FeedSpec:
    return parse_feed_request(SETTINGS, f"forum.example.org/{path}", {k: [v] for k, v in args.items()})


def test_exclude_pinned_is_in_the_canonical_query_cache_key_token_and_digest_id():
    plain, pinned = spec_of("latest.atom"), spec_of("latest.atom", exclude_pinned="1")
    assert ("exclude_pinned", "1") in pinned.canonical_query() and plain.canonical_query() == []
    assert spec_of("latest.atom", exclude_pinned="0").cache_key() == plain.cache_key() != pinned.cache_key()
    assert signing.token("k" * 32, "/forum.example.org/latest.atom", plain) != signing.token(
        "k" * 32, "/forum.example.org/latest.atom", pinned)
    assert "exclude_pinned=1" in spec_of("latest.atom", exclude_pinned="1", digest="daily").digest_id
    with pytest.raises(RequestError, match="exclude_pinned"):
        spec_of("latest.atom", exclude_pinned="true")


def test_three_level_and_top_category_specs():
    third = spec_of("c/a/b/c/9.rss")
    assert (third.list_path, third.html_path, third.label) == ("/c/a/b/c/9", "/c/a/b/c/9", "a / b / c")
    # Its latest list by activity where core serves it, whatever the category's default view; its id is its own.
    assert MARKDOWN.page_url(third, 1) == "https://forum.example.org/latest.md?category=9&order=activity&page=1"
    assert JSON.page_url(third, 1) == "https://forum.example.org/c/a/b/c/9/l/latest.json?order=activity&page=1"
    assert third.list_id == "https://forum.example.org/c/a/b/c/9.md"
    top = spec_of("c/a/b/c/9/l/top.rss", period="daily")
    assert MARKDOWN.page_url(top, 0) == "https://forum.example.org/top.md?category=9&period=daily"
    assert JSON.page_url(top, 0) == "https://forum.example.org/c/a/b/c/9/l/top.json?period=daily"
    assert top.list_id == "https://forum.example.org/c/a/b/c/9/l/top.md?period=daily"
    assert top.cache_key() != spec_of("c/a/b/c/9/l/top.rss", period="weekly").cache_key()
    for path in ("c/a/b/c/d/9.rss", "c/a/../9.rss", "c/9.rss"):
        with pytest.raises(Exception, match="no feed route"):
            spec_of(path)


# --- the directory, OPML, the builder's list, static configs ----------------------------------------------

@pytest.mark.parametrize("mode", ["markdown", "json"])
def test_a_third_level_category_in_the_directory_is_offered_and_in_the_opml(mode):
    """core lists subcategories only when asked `include_subcategories=true` (CategoryList#find_categories):
    the bridge asks, so the third level is on the front page and in the OPML, in either source."""
    with FakeForum(mode=mode) as forum, running_app(settings_for(forum.url)) as app:
        front = lxml_html.fromstring(get(f"{app.url}/?forum={app.forum_key}").content)
        assert "hardware/gpu/graphs/13" in front.xpath("//select[@id='category']/option/@value")
        opml = etree.fromstring(get(f"{app.url}/{app.forum_key}/opml").content)
        feeds = [o.get("xmlUrl") for o in opml.iter("outline") if o.get("xmlUrl")]
        assert f"{app.url}/{app.forum_key}{GRAPHS}.atom" in feeds
        assert all(get(url).status_code == 200 for url in feeds if GRAPHS in url)
        chosen = httpx.get(f"{app.url}/preview", timeout=30, params={"forum": app.forum_key, "list": "category",
                                                   "category": "hardware/gpu/graphs/13", "exclude_pinned": "1"})
        assert f"/{app.forum_key}{GRAPHS}.atom?exclude_pinned=1" in chosen.text


def test_a_static_config_builds_a_third_level_category_without_pinned_topics(tmp_path: Path):
    with FakeForum(mode="json") as forum:
        feeds = (f'[[feeds]]\nname = "graphs"\npath = "{GRAPHS.lstrip("/")}"\nexclude_pinned = true\n'
                 'formats = ["json"]\n[[feeds]]\nname = "top"\npath = "c/compiler/5/l/top"\nperiod = "weekly"\n'
                 'formats = ["json"]\n')
        status, _, err = run_static(write_config(tmp_path, forum.url, feeds))
        assert status == 0, err
    built = json.loads((tmp_path / "public" / "graphs.json").read_text(encoding="utf-8"))
    got = {int(i["id"].rsplit("/", 1)[1]) for i in built["items"]}
    assert got == {t["id"] for t in listed("c/hardware/gpu/graphs/13.md")} - {ABOUT_GRAPHS}
    assert "without pinned" in built["title"]
    assert json.loads((tmp_path / "public" / "top.json").read_text(encoding="utf-8"))["title"].endswith("(weekly)")
    bad = write_config(tmp_path, "https://forum.example.org",
                       '[[feeds]]\nname = "g"\npath = "c/a/b/c/9"\nexclude_pinned = "yes"\n')
    status, _, err = run_static(bad)
    assert status == 2 and "exclude_pinned must be true or false" in err


def test_the_markdown_directory_reads_categories_three_levels_deep() -> None:
    """Core nests categories three deep (`max_category_nesting`): a third-level heading is a category too."""
    from feedbridge.discourse.categories import parse_categories

    text = ("## [graphs](https://forum.example.org/c/hardware/gpu/graphs/13)\n\nCUDA graphs.\n\n---\n\n"
            "## [gpu](https://forum.example.org/c/hardware/gpu/12)\n\nGPUs.\n")
    found = parse_categories(text)
    assert [(c.slugs, c.id, c.description) for c in found] == [("hardware/gpu/graphs", 13, "CUDA graphs."),
                                                                   ("hardware/gpu", 12, "GPUs.")]
