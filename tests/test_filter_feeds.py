"""Feeds of Discourse's own `/filter` list (`/{host}/filter.{fmt}?q=`): core's query goes to the forum's
`/filter.json?q=` as on its `/filter` page, the bridge's filters apply on top (its keyword filter is
`keyword=` there), a release without `/filter` is a 404 that says so, and what only a signed-in reader's
`/filter` reads is a 400 on a public feed. Over a real socket, against the fake forum (tests/fake_filter.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import feedparser
import httpx
import pytest
from lxml import html as lxml_html

from feedbridge.config import Settings, parse_forum
from feedbridge.discourse.filter_query import MAX_FILTER_CHARS, MAX_FILTER_TERMS, parse_filter_query, split_terms
from feedbridge.errors import RequestError
from feedbridge.feeds.request.signing import token
from feedbridge.feeds.request.spec import FeedSpec, parse_feed_request
from feedbridge.feeds.request.urls import FeedTarget, feed_for_url
from feedbridge.web.feedform import form_from_path, recognise
from tests.appserver import RunningApp, running_app, settings_for
from tests.fake_filter import filter_answer
from tests.test_cli import run
from tests.test_private import private_forum, sign
from tests.upstream import PROJECT_ROOT, FakeForum

QUERY = "likes-min:10 -tag:cuda"
HOST = "forum.example.org"
SETTINGS = Settings(forums=(parse_forum(f"https://{HOST}"),))


@pytest.fixture
def forum() -> Iterator[FakeForum]:
    with FakeForum(mode="json") as fake:
        yield fake


@pytest.fixture
def app(forum: FakeForum) -> Iterator[RunningApp]:
    with running_app(settings_for(forum.url)) as running:
        yield running


def get(address: str, **params: str) -> httpx.Response:
    """`params` added to `address` (httpx replaces a URL's own query with any `params=`, even empty ones)."""
    return httpx.get(address, params=params or None, timeout=30)


def forum_ids(forum: FakeForum, q: str, page: int = 0) -> set[int]:
    """What the forum's own /filter answers, read straight from it."""
    answer = get(f"{forum.url}/filter.json", q=q, **({"page": str(page)} if page else {})).json()
    return {topic["id"] for topic in answer["topic_list"]["topics"]}


def entry_ids(feed: feedparser.FeedParserDict) -> set[int]:
    return {int(entry.id.rsplit("/", 1)[1]) for entry in feed.entries}


def item_ids(body: bytes) -> set[int]:
    """A JSON Feed's topic ids (feedparser reads Atom and RSS only)."""
    return {int(item["id"].rsplit("/", 1)[1]) for item in json.loads(body)["items"]}


def spec(path: str, **args: str) -> FeedSpec:
    return parse_feed_request(SETTINGS, f"{HOST}/{path}", {k: [v] for k, v in args.items()})


# --- every format ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["atom", "rss", "json"])
def test_every_format_parses_holds_what_the_forum_filtered_and_names_the_query(forum, app, fmt):
    response = get(app.feed_url(f"/filter.{fmt}"), q=QUERY)
    assert response.status_code == 200, response.text
    assert [r.target for r in forum.requests if r.path.startswith("/filter")] == [
        "/filter.json?q=likes-min%3A10+-tag%3Acuda"]
    if fmt == "json":
        document = json.loads(response.content)
        assert document["version"] == "https://jsonfeed.org/version/1.1"
        title, ids = document["title"], item_ids(response.content)
    else:
        feed = feedparser.parse(response.content)
        assert feed.bozo == 0, feed.get("bozo_exception")
        title, ids = feed.feed.title, entry_ids(feed)
    assert title == f"{app.forum_key} · filter {QUERY}"
    expected = forum_ids(forum, QUERY)
    assert len(expected) == 23 and ids == expected  # 24 with 10 likes or more, one of them on cuda


def test_the_feed_links_the_forums_own_filter_page_and_its_html_view_shows_the_query(forum, app):
    document = get(app.feed_url("/filter.json"), q=QUERY).json()
    assert document["home_page_url"] == f"{forum.url}/filter?q=likes-min%3A10+-tag%3Acuda"
    page = get(app.feed_url("/filter.html"), q=QUERY)
    assert page.status_code == 200
    assert f"filter {QUERY}" in lxml_html.fromstring(page.content).findtext(".//title")


def test_the_query_is_sent_as_typed_with_its_whitespace_normalised(forum, app):
    assert get(app.feed_url("/filter.atom"), q="  tag:gpu+cuda    order:likes  ").status_code == 200
    assert forum.count("/filter.json?q=tag%3Agpu%2Bcuda+order%3Alikes") == 1


# --- the bridge's filters on top ---------------------------------------------------------------------------

def test_the_bridges_filters_apply_on_top_and_the_keyword_filter_is_keyword(forum, app):
    feed = feedparser.parse(get(app.feed_url("/filter.atom"), q="likes-min:10", author="eellison",
                                keyword="autograd").content)
    assert feed.bozo == 0
    assert feed.feed.title == f"{app.forum_key} · filter likes-min:10 · author: eellison · keyword: autograd"
    assert entry_ids(feed) == {3407}  # eellison's, with "autograd" as a word (not AOTAutograd's 3380)
    without_gpu = feedparser.parse(get(app.feed_url("/filter.atom"), q="likes-min:10", exclude_tag="gpu",
                                       min_replies="20", limit="5").content)
    kept = entry_ids(without_gpu)
    assert len(kept) == 5 and kept < forum_ids(forum, "likes-min:10") and not kept & {3458, 3430, 3407, 3366}


def test_keyword_belongs_to_filter_feeds_and_q_to_the_forum_there():
    assert spec("filter.atom", q="status:open", keyword="gpu").canonical_query() == [
        ("keyword", "gpu"), ("q", "status:open")]
    with pytest.raises(RequestError, match="keyword= is the keyword filter of /filter feeds"):
        spec("latest.atom", keyword="gpu")
    with pytest.raises(RequestError, match="q is required on /filter"):
        spec("filter.atom", keyword="gpu")


# --- what the forum cannot answer --------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["atom", "html"])
def test_a_forum_without_filter_is_a_404_that_says_so(fmt):
    with FakeForum(mode="json", filter_route=False) as old, running_app(settings_for(old.url)) as app:
        response = get(app.feed_url(f"/filter.{fmt}"), q="status:open")
        assert response.status_code == 404
        assert "has no /filter" in response.text and "a Discourse release from before /filter" in response.text
        assert "missing, or private" not in response.text
        assert get(app.feed_url("/latest.atom")).status_code == 200  # the rest of the forum reads as ever


@pytest.mark.parametrize("q", ["in:bookmarked", "status:open in:watching", "-in:tracking,pinned", "in:new-replies",
                               "order:read", "created-by:@me", "in:watching_first_post"])
def test_terms_only_a_signed_in_reader_has_are_a_400_on_a_public_feed_before_any_request(forum, app, q):
    response = get(app.feed_url("/filter.atom"), q=q)
    assert response.status_code == 400
    assert "only means something to a signed-in user" in response.text
    assert next(term for term in q.split() if term != "status:open") in response.text
    assert forum.count("/filter.json", prefix=True) == 0


def test_terms_every_reader_has_are_served(forum, app):
    for q in ("in:pinned", "created-by:jansel", "order:created-asc status:open"):
        assert get(app.feed_url("/filter.atom"), q=q).status_code == 200, q


def test_a_signed_feed_sends_them_with_the_key():
    with private_forum("json") as p, running_app(p.settings()) as app:
        url = app.url + sign(p.settings(), f"/{p.key}/filter.atom?q=in:bookmarked")
        response = get(url)
        assert response.status_code == 200, response.text
        assert feedparser.parse(response.content).bozo == 0
        assert "/filter.json?q=in%3Abookmarked" in p.site.keyed


def test_a_token_covers_the_filter_query():
    a, b = spec("filter.atom", q="tag:gpu"), spec("filter.atom", q="tag:cuda")
    assert token("s" * 16, f"/{HOST}/filter.atom", a) != token("s" * 16, f"/{HOST}/filter.atom", b)


@pytest.mark.parametrize(("q", "said"), [
    ("x" * (MAX_FILTER_CHARS + 1), f"at most {MAX_FILTER_CHARS} characters"),
    (" ".join(f"tag:t{n}" for n in range(MAX_FILTER_TERMS + 1)), f"at most {MAX_FILTER_TERMS} terms"),
    ("(in:bookmarked", "is not a filter term"),  # core's unanchored scan would find in: in it
    ("üin:bookmarked", "is not a filter term"),  # core's keys are ASCII: it would find in: here too
    ('"gpu in:bookmarked"', "a quoted phrase holds no ':'"),
    ("status:", "is not a filter term"),
])
def test_queries_the_bridge_will_not_send(q, said):
    with pytest.raises(RequestError, match=said):
        spec("filter.atom", q=q)


def test_terms_are_read_as_cores_tokenizer_cuts_them():
    assert split_terms('tag_group:"Team A"in:bookmarked  "flex attention" a"b c') == [
        'tag_group:"Team A"', "in:bookmarked", '"flex attention"', 'a"b', "c"]
    query = parse_filter_query('tag_group:"Team A"in:bookmarked =category:meta')
    assert str(query) == 'tag_group:"Team A" in:bookmarked =category:meta'
    assert query.signed_in_only == ("in:bookmarked",)


# --- how the list is read ----------------------------------------------------------------------------------

def test_a_markdown_forum_reads_the_json_route():
    with FakeForum(json_lists=True) as markdown, running_app(settings_for(markdown.url)) as app:
        assert get(app.feed_url("/latest.atom")).status_code == 200  # the forum is read as Markdown
        assert markdown.count("/latest.md") == 1
        feed = feedparser.parse(get(app.feed_url("/filter.atom"), q="tag:gpu").content)
        assert markdown.count("/filter.json?q=tag%3Agpu") == 1 and markdown.count("/filter.md", prefix=True) == 0
        assert feed.bozo == 0 and entry_ids(feed) == forum_ids(markdown, "tag:gpu") and len(feed.entries) == 10


@pytest.mark.parametrize("dialect", ["c1", "c3", "p2", "c4"])
def test_a_reply_threshold_on_a_dialect_without_reply_counts_reads_the_json_list(dialect):
    # Only C4 writes a `**Replies:**` row (FORMAT.md): on C1 to C3 and the plugin's lists `min_replies=` and
    # `max_replies=` dropped every topic, its count unknown; the JSON list of the same page has it.
    text = (PROJECT_ROOT / "fixtures" / "dialects" / f"widgets-{dialect}.md").read_text(encoding="utf-8")
    text = text.rsplit("\n[Next page]", 1)[0].replace("/c/widgets/9.md", "/latest.md") + "\n"
    posts = {11: 1, 812: 41, 799: 4, 640: 1, 512: 2}
    listed = {"topic_list": {"topics": [{"id": i, "title": f"t{i}", "slug": f"t{i}", "posts_count": n,
                                         "last_posted_at": "2026-11-20T08:15:30Z"} for i, n in posts.items()]}}
    with FakeForum(json_lists=True) as forum, running_app(settings_for(f"markdown:{forum.url}")) as app:
        forum.set_body("/latest.md", text)
        forum.set_body("/latest.json", json.dumps(listed))
        kept = [sorted(entry_ids(feedparser.parse(get(app.feed_url("/latest.atom"), **query).content)))
                for query in ({"min_replies": "1"}, {"max_replies": "0"})]
        asked = forum.count("/latest.json", prefix=True)
    assert kept == [[512, 799, 812], [11, 640]], kept
    assert asked == (0 if dialect == "c4" else 1)  # read once, cached: only where the list lacks the counts


def test_pages_are_read_as_every_list_is(forum, app):
    ids = item_ids(get(app.feed_url("/filter.json"), q="order:activity", pages="2").content)
    assert forum.count("/filter.json?q=order%3Aactivity&page=1") == 1
    assert len(ids) == 45 and ids == forum_ids(forum, "order:activity") | forum_ids(forum, "order:activity", 1)
    one = item_ids(get(app.feed_url("/filter.json"), q="tag:gpu", pages="2").content)
    assert len(one) == 10 and forum.count("/filter.json?q=tag%3Agpu&page=1") == 0  # not a full page: the end


# --- from a forum URL --------------------------------------------------------------------------------------

@pytest.mark.parametrize("pasted", ["/filter?q=likes-min:10+-tag:cuda", "/filter?q=likes-min%3A10%20-tag%3Acuda",
                                    "/filter.json?q=likes-min:10 -tag:cuda&page=2"])
def test_the_builder_maps_a_pasted_filter_url_and_its_feed_answers(forum, app, pasted):
    page = lxml_html.fromstring(get(f"{app.url}/", url=forum.url + pasted, q="autograd").content)
    offered = str(page.xpath("//input[@id='feed-url']/@value")[0])
    assert offered.startswith(app.feed_url("/filter.atom?"))
    assert parse_qs(urlsplit(offered).query) == {"q": [QUERY], "keyword": ["autograd"]}  # the form's keywords kept
    assert page.xpath("//input[@id='filter_query']/@value") == [QUERY]
    response = get(offered)
    assert response.status_code == 200 and feedparser.parse(response.content).bozo == 0


def test_the_converter_form_and_html_views_change_link_agree():
    found = feed_for_url(SETTINGS, f"https://{HOST}/filter?q=status:open+tag:gpu")
    assert isinstance(found, FeedTarget) and (found.path, found.args(), found.keyword) == (
        "filter", {"q": ["status:open tag:gpu"]}, "keyword")
    latest = feed_for_url(SETTINGS, f"https://{HOST}/filter")
    assert isinstance(latest, FeedTarget) and latest.path == "latest"  # core's /filter without a query
    form = recognise(SETTINGS, f"https://{HOST}/filter?q=status:open").form
    assert form is not None and form.list == "filter" and form.feed_request()[1] == {"q": ["status:open"]}
    again = form_from_path(f"{HOST}/filter.html", {"q": ["status:open"], "keyword": ["gpu"]}, SETTINGS)
    assert (again.list, again.filter_query, again.q) == ("filter", "status:open", "gpu")
    assert again.feed_request("atom") == (f"{HOST}/filter.atom", {"q": ["status:open"], "keyword": ["gpu"]})


def test_feedbridge_build_of_a_filter_url_takes_query_as_its_keyword_filter(forum):
    result = run("build", f"{forum.url}/filter?q=likes-min:10", "--format", "json", "--query", "autograd")
    assert result.returncode == 0, result.stderr
    feed = json.loads(result.stdout)
    assert feed["title"].endswith("· filter likes-min:10 · keyword: autograd")
    assert {int(item["id"].rsplit("/", 1)[1]) for item in feed["items"]} == {3407, 3282, 3144}


def test_the_fake_forum_pages_its_filter_list_as_core_with_pinned_topics_first():
    """Core's filter list puts the globally pinned topics first on page 0 whatever `order:` says, and starts a
    later page that many topics early (`TopicQuery#prioritize_pinned_topics`): the fake sorted by its order
    alone, so no filter feed ever met a pinned topic. Every topic is on one page, once."""
    json_root = PROJECT_ROOT / "fixtures" / "site-json"

    def read(name: str) -> bytes | None:
        file = json_root / name
        if not file.is_file():
            return None
        if name != "latest/page-1.json":
            return file.read_bytes()
        document = json.loads(file.read_bytes())
        document["topic_list"]["topics"][-1] |= {"pinned_globally": True, "pinned": True}  # an old pinned topic
        return json.dumps(document).encode()

    def page(number: int, q: str = "order:created") -> list[int]:
        target = f"/filter.json?q={q}" + (f"&page={number}" if number else "")
        answer = filter_answer(target, read)
        assert answer is not None
        return [t["id"] for t in json.loads(answer)["topic_list"]["topics"]]

    pinned = json.loads(read("latest/page-1.json") or b"")["topic_list"]["topics"][-1]["id"]
    first, second = page(0), page(1)
    assert first[0] == pinned and len(first) == 30 and pinned not in second
    everything = [t for n in range(10) for t in page(n)]
    assert len(everything) == len(set(everything)) == len(filter_answer_all(read))


def filter_answer_all(read) -> set[int]:
    """Every topic of the fake's latest list: what the filter list holds without a term that narrows it."""
    return {t["id"] for name in ("latest.json", *(f"latest/page-{n}.json" for n in range(1, 100)))
            if (body := read(name)) is not None for t in json.loads(body)["topic_list"]["topics"]}


@pytest.mark.parametrize(("q", "ranked"), [("tag:gpu", False), ("order:activity", False), ("order:latest-post", False),
                                           ("order:likes", True), ("order:created,activity", True),
                                           ("order:activity-asc", True), ("tag:gpu order:views-asc", True)])
def test_a_filter_query_says_whether_its_list_is_ranked(q, ranked):
    """A `/filter` list in another order than newest activity is cut by its own order (`limit=`) and its digest
    ends where its pages end, not at its last topic's activity (core's first `order:` is the primary)."""
    assert parse_filter_query(q).ranked is ranked
