"""Feeds of unanswered topics (meta.discourse.org's "RSS for unanswered topics"): `max_replies=N` keeps the
topics with at most N replies on every topic feed, the mirror of `min_replies=`, and `max_replies=0` means
no replies, not "no threshold". Pure tests of the filter and the spec, then over a real socket against the
fake forum: the feed, the 400s, the front page's form, a signed URL's token, `feedbridge build` and a
static config. The expectations come from the fixtures' expected JSON, never from the code under test."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import feedparser
import httpx
import pytest
from lxml import html as lxml_html

from feedbridge.config import Settings, parse_forum
from feedbridge.errors import FilterError, RequestError
from feedbridge.feeds.request.spec import parse_feed_request
from feedbridge.feeds.select.filters import MAX_THRESHOLD, FeedFilter, make_filter
from feedbridge.feeds.sources.dialects import MARKDOWN
from feedbridge.models import Topic
from feedbridge.web.feedform import FeedForm, form_from_path
from tests.appserver import RunningApp, running_app, settings_for
from tests.test_cli import run
from tests.test_private import private_forum, sign
from tests.upstream import FakeForum, list_reads

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
# The compiler category as the fake forum serves it: its first page is a copy of the saved real page
# (fixtures/site/README.md), whose parse fixtures/dev-discuss-compiler.expected.json records; the next two
# pages are in fixtures/site-expected.json.
FIRST_PAGE = FIXTURES / "dev-discuss-compiler.md"
CATEGORY = "/c/compiler/5"
HOST = "forum.example.org"
SETTINGS = Settings(forums=(parse_forum(f"https://{HOST}"),))


def replies_by_id(pages: int = 1) -> dict[int, int | None]:
    """Each topic of the compiler category's first `pages` pages and its reply count, as the fixtures'
    expected JSON says (first sighting kept, as the feed keeps it)."""
    assert (FIXTURES / "site" / "c/compiler/5.md").read_bytes() == FIRST_PAGE.read_bytes()
    site = json.loads((FIXTURES / "site-expected.json").read_text(encoding="utf-8"))
    listed = [json.loads(FIRST_PAGE.with_suffix(".expected.json").read_text(encoding="utf-8"))]
    listed += [site[f"c/compiler/5/page-{n}.md"] for n in range(1, pages)]
    found: dict[int, int | None] = {}
    for page in listed:
        for topic in page["topics"]:
            found.setdefault(topic["id"], topic["replies"])
    return found


def expected(keep: int, pages: int = 1, least: int = 0) -> set[int]:
    """The ids of the category's topics with `least` to `keep` replies, checked to tell the filter apart."""
    figures = replies_by_id(pages)
    kept = {i for i, n in figures.items() if n is not None and least <= n <= keep}
    assert kept and kept != set(figures), "a threshold the fixture cannot tell apart"
    return kept


def entry_ids(body: bytes) -> set[int]:
    return {int(entry.id.rstrip("/").rsplit("/", 1)[1]) for entry in feedparser.parse(body).entries}


def topic(id: int, replies: int | None) -> Topic:
    return Topic(id=id, title=f"Topic {id}", url=f"https://{HOST}/t/t/{id}", replies=replies)


@pytest.fixture
def app(upstream: FakeForum) -> Iterator[RunningApp]:
    with running_app(settings_for(upstream.url)) as running:
        yield running


# --- the filter, pure -----------------------------------------------------------------------------------

TOPICS = [topic(1, 0), topic(2, 1), topic(3, 2), topic(4, None), topic(5, 0), topic(6, 7)]


def kept(feed_filter: FeedFilter) -> set[int]:
    return {t.id for t in feed_filter.apply(TOPICS)}


def test_max_replies_zero_keeps_only_the_topics_without_replies_and_drops_unknown_ones():
    unanswered = make_filter(max_replies=0)
    assert unanswered.max_replies == 0 and unanswered.narrows  # 0 is a ceiling, not "no threshold"
    assert kept(unanswered) == {1, 5}
    assert not unanswered.keeps(topic(4, None))  # the list did not say: not kept, as min_replies does
    # replies: on every list
    assert unanswered.json_needed(MARKDOWN.lacks) is None


def test_a_floor_of_zero_is_no_threshold_but_a_ceiling_of_zero_is_one():
    assert make_filter(min_replies=0).min_replies is None and not make_filter(min_replies=0).narrows
    assert kept(make_filter(min_replies=0, max_replies=0)) == {1, 5}


def test_floor_and_ceiling_together_keep_the_range_both_ends_included():
    assert kept(make_filter(max_replies=2)) == {1, 2, 3, 5}
    assert kept(make_filter(min_replies=1, max_replies=2)) == {2, 3}
    assert kept(make_filter(min_replies=2, max_replies=2)) == {3}
    assert kept(make_filter(max_replies=MAX_THRESHOLD)) == {1, 2, 3, 5, 6}


def test_the_title_says_unanswered_for_zero_and_replies_at_most_n_otherwise():
    assert make_filter(max_replies=0).describe() == "unanswered"
    assert make_filter(max_replies=3).describe() == "replies ≤ 3"
    assert make_filter(min_replies=1, max_replies=3, min_likes=2).describe() == "replies ≥ 1 · replies ≤ 3 · likes ≥ 2"


@pytest.mark.parametrize("value", [-1, MAX_THRESHOLD + 1, True, 1.0, "0"])
def test_out_of_bounds_ceilings_are_refused_by_name(value):
    with pytest.raises(FilterError, match=rf"max_replies .* not a whole number from 0 to {MAX_THRESHOLD}"):
        make_filter(max_replies=value)


def test_a_ceiling_below_the_floor_is_refused_saying_why():
    with pytest.raises(FilterError) as refused:
        make_filter(min_replies=3, max_replies=2)
    assert refused.value.message == ("max_replies 2 is below min_replies 3: no topic has at least 3 and at most 2 "
                                     "replies")


# --- the spec: canonical query, topic feeds only ------------------------------------------------------------

def test_the_spec_keeps_max_replies_zero_in_its_canonical_query_and_title():
    spec = parse_feed_request(SETTINGS, f"{HOST}{CATEGORY}.atom", {"max_replies": ["0"]})
    assert ("max_replies", "0") in spec.canonical_query()
    assert spec.title == f"{HOST} · compiler · unanswered"
    plain = parse_feed_request(SETTINGS, f"{HOST}{CATEGORY}.atom", {})
    assert plain.cache_key() != spec.cache_key()


@pytest.mark.parametrize("path", ["t/35", "posts", "u/alice/posts"])
def test_post_feeds_refuse_max_replies_as_a_topic_parameter(path):
    with pytest.raises(RequestError, match="max_replies= is for topic feeds"):
        parse_feed_request(SETTINGS, f"{HOST}/{path}.atom", {"max_replies": ["0"]})


# --- over a real socket --------------------------------------------------------------------------------------

@pytest.mark.parametrize("pages", [1, 3])
def test_the_category_feed_of_unanswered_topics_holds_exactly_the_fixtures_topics_without_replies(
        app, upstream, pages):
    response = httpx.get(app.feed_url(f"{CATEGORY}.atom"), params={"max_replies": "0", "pages": str(pages)},
                         timeout=30)
    assert response.status_code == 200, response.text
    feed = feedparser.parse(response.content)
    assert feed.bozo == 0, feed.get("bozo_exception")
    assert entry_ids(response.content) == expected(0, pages)
    assert "unanswered" in feed.feed.title
    # Replies are on the Markdown list itself: no JSON list, no topic page is read for them.
    assert not [r for r in list_reads(upstream.requests) if r.path.endswith(".json") or r.path.startswith("/t/")]


def test_every_format_holds_the_same_unanswered_topics(app):
    json_feed = httpx.get(app.feed_url(f"{CATEGORY}.json?max_replies=0"), timeout=30)
    rss = httpx.get(app.feed_url(f"{CATEGORY}.rss?max_replies=0"), timeout=30)
    assert json_feed.status_code == rss.status_code == 200
    assert {int(item["id"].rstrip("/").rsplit("/", 1)[1]) for item in json_feed.json()["items"]} == expected(0)
    assert entry_ids(rss.content) == expected(0)
    assert "unanswered" in json_feed.json()["title"]


def test_a_range_of_replies_over_the_socket(app):
    response = httpx.get(app.feed_url(f"{CATEGORY}.atom?min_replies=1&max_replies=2"), timeout=30)
    assert response.status_code == 200, response.text
    assert entry_ids(response.content) == expected(2, least=1)
    assert "replies ≥ 1 · replies ≤ 2" in feedparser.parse(response.content).feed.title


@pytest.mark.parametrize(("query", "message"), [
    ("max_replies=-1", f"max_replies must be a whole number from 0 to {MAX_THRESHOLD}, not '-1'"),
    (f"max_replies={MAX_THRESHOLD + 1}", f"max_replies must be a whole number from 0 to {MAX_THRESHOLD}"),
    ("max_replies=abc", "max_replies must be a whole number"),
    ("max_replies=0&max_replies=1", "max_replies was given 2 times; give it once"),
    ("min_replies=3&max_replies=2", "max_replies 2 is below min_replies 3"),
])
def test_bad_ceilings_are_a_400_saying_what_is_wrong_and_nothing_is_fetched(app, upstream, query, message):
    response = httpx.get(app.feed_url(f"{CATEGORY}.atom?{query}"), timeout=30)
    assert response.status_code == 400 and message in response.text, response.text
    assert upstream.requests == []


def test_the_front_pages_form_offers_the_field_and_the_url_it_offers_answers(app, upstream):
    page = lxml_html.fromstring(httpx.get(f"{app.url}/", timeout=30).content)
    field = page.xpath("//form[@id='feed-form']//input[@name='max_replies']")
    assert field and page.xpath("//label[@for='max_replies']")
    form = FeedForm(forum=app.forum_key, list="category", category="compiler/5", max_replies="0")
    shown = lxml_html.fromstring(httpx.get(f"{app.url}/preview", params=form.args(), timeout=30).content)
    offered = str(shown.xpath("//input[@id='feed-url']/@value")[0])
    assert urlsplit(offered).path == f"/{app.forum_key}{CATEGORY}.atom"
    assert parse_qs(urlsplit(offered).query) == {"max_replies": ["0"]}
    response = httpx.get(offered, timeout=30)
    assert response.status_code == 200 and entry_ids(response.content) == expected(0)
    # and the feed's URL gives back the form that made it (the HTML view's "change" link)
    again = form_from_path(f"{app.forum_key}{CATEGORY}.atom", {"max_replies": ["0"]}, settings_for(upstream.url))
    assert again.max_replies == "0" and again.feed_request() == form.feed_request()


def test_a_signed_urls_token_does_not_open_the_feed_with_max_replies_changed():
    with private_forum("markdown") as p:
        settings = p.settings()
        with running_app(settings) as app:
            signed = sign(settings, f"/{app.forum_key}{CATEGORY}.atom?max_replies=0")
            whole = sign(settings, f"/{app.forum_key}{CATEGORY}.atom?limit=30")
            assert httpx.get(app.url + signed, timeout=30).status_code == 200
            p.reset()
            for changed in (signed.replace("max_replies=0", "max_replies=1"),
                            signed.replace("max_replies=0&", "").replace("?max_replies=0", "?"),
                            whole + "&max_replies=0"):  # 0 is a ceiling: added, it is another feed
                response = httpx.get(app.url + changed, timeout=30)
                assert response.status_code == 403, (changed, response.text)
                assert "\n" not in response.text.strip()
            assert p.forum.requests == []  # refused before anything is fetched
            # a floor of 0 is no threshold: the same feed, which the token opens
            assert httpx.get(app.url + signed + "&min_replies=0", timeout=30).status_code == 200


def test_the_forums_own_filter_agrees_on_the_topics_it_covers():
    """The server-side alternative docs/feeds.md names, `filter?q=posts-max:1`, is the same topics where both
    read the same ones: the whole latest list of the fake forum (its /filter reads that list)."""
    with FakeForum(mode="json") as forum, running_app(settings_for(forum.url)) as app:
        bridged = httpx.get(app.feed_url("/latest.atom?max_replies=0&pages=2"), timeout=30)
        asked = httpx.get(app.feed_url("/filter.atom?q=posts-max:1&pages=2"), timeout=30)
    assert bridged.status_code == asked.status_code == 200
    assert entry_ids(bridged.content) == entry_ids(asked.content) != set()


# --- feedbridge build and static configs ---------------------------------------------------------------------

def test_build_of_a_saved_markdown_list_takes_max_replies():
    result = run("build", str(FIRST_PAGE), "--format", "json", "--max-replies", "0")
    assert result.returncode == 0, result.stderr
    feed = json.loads(result.stdout)
    assert {int(item["id"].rstrip("/").rsplit("/", 1)[1]) for item in feed["items"]} == expected(0)
    assert "unanswered" in feed["title"]


def test_build_refuses_a_ceiling_below_the_floor_with_exit_2():
    result = run("build", str(FIRST_PAGE), "--min-replies", "3", "--max-replies", "2")
    assert result.returncode == 2 and b"max_replies 2 is below min_replies 3" in result.stderr


def test_a_static_config_builds_the_unanswered_feed_from_a_source_file_and_points_at_a_bad_ceiling(tmp_path):
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "https://feeds.example.org/"\n[[feeds]]\nname = "unanswered"\n'
                      f'source = "{FIRST_PAGE}"\nmax_replies = 0\nformats = ["atom"]\n', encoding="utf-8")
    result = run("build", "--config", str(config))
    assert result.returncode == 0, result.stderr
    body = (tmp_path / "public" / "unanswered.atom").read_bytes()
    assert feedparser.parse(body).bozo == 0 and entry_ids(body) == expected(0)
    config.write_text(config.read_text(encoding="utf-8").replace("max_replies = 0", "min_replies = 3\n"
                                                                 "max_replies = 2"), encoding="utf-8")
    result = run("build", "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.decode().startswith(f"{config}:6: ") and b"max_replies 2 is below" in result.stderr
