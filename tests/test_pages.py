"""Front page, `.html` feed view, OPML and XSL, through Flask's test client against the fake forum."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import feedparser
import httpx
import pytest
from lxml import etree, html

from feedbridge.config import Settings, parse_forum
from feedbridge.discourse.categories import parse_categories
from feedbridge.models import Entry
from feedbridge.render.documents import render_atom, render_rss
from feedbridge.render.meta import FeedMeta
from feedbridge.web.app import content_security_policy, create_app
from feedbridge.web.feedform import FeedForm, form_from_path, recognise
from feedbridge.web.pages import http_url
from tests.appserver import running_app, settings_for
from tests.upstream import DEFAULT_ROOT

STATIC = Path(__file__).resolve().parent.parent / "feedbridge" / "web" / "static"

FORUM = "https://dev-discuss.pytorch.org"
SETTINGS = Settings(forums=(parse_forum(FORUM), parse_forum("http://127.0.0.1:8080/sub")))
SCRIPT = "<script>alert(1)</script>"


@pytest.fixture
def app(upstream):
    return create_app(Settings(forums=(parse_forum(upstream.url),)))


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def key(upstream):
    return upstream.url.split("://", 1)[1]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"{FORUM}/c/compiler/5", {"list": "category", "category": "compiler/5"}),
        (f"{FORUM}/c/compiler/5.md?page=2", {"list": "category", "category": "compiler/5"}),
        (f"{FORUM}/c/hardware/gpu/12/", {"list": "category", "category": "hardware/gpu/12"}),
        (f"{FORUM}/c/compiler/5/l/top", {"list": "category", "category": "compiler/5"}),
        ("dev-discuss.pytorch.org/tag/gpu", {"list": "tag", "tag": "gpu"}),
        (f"{FORUM}/tag/gpu/7.md", {"list": "tag", "tag": "gpu"}),
        (f"{FORUM}/latest.md", {"list": "latest"}),
        (f"{FORUM}/", {"list": "latest"}),
        (f"{FORUM}/hot", {"list": "hot"}),
        (f"{FORUM}/top?period=weekly", {"list": "top", "period": "weekly"}),
        (f"{FORUM}/top.md?period=nonsense", {"list": "top", "period": "all"}),
        (f"{FORUM}/u/smth/activity", {"list": "user_posts", "user": "smth"}),  # their posts: issue #34
        (f"{FORUM}/u/smth", {"list": "user_topics", "user": "smth", "author": "smth"}),
        (f"{FORUM}/search?q=inductor+cache", {"list": "latest", "q": "inductor cache"}),  # the keyword query
        ("HTTP://DEV-DISCUSS.PYTORCH.ORG/c/compiler/5.md", {"list": "category", "category": "compiler/5"}),
        ("http://127.0.0.1:8080/sub/c/x/3", {"forum": "127.0.0.1:8080/sub", "category": "x/3"}),
        (f"{FORUM}/t/some-topic/123", {"list": "topic", "topic": "some-topic/123"}),
        # a post's link: core routes `t/:topic_id/:post_number` before `t/:slug/:topic_id` (it was topic 45)
        (f"{FORUM}/t/123/45", {"list": "topic", "topic": "123"}),
        (f"{FORUM}/t/123/last", {"list": "topic", "topic": "123"}),
        (f"{FORUM}/t/some-topic/123/45", {"list": "topic", "topic": "some-topic/123"}),
    ],
)
def test_recognise_forum_urls(url, expected):
    found = recognise(SETTINGS, url)
    assert found.form is not None, found.message
    values = {"forum": "dev-discuss.pytorch.org"} | expected
    assert {k: getattr(found.form, k) for k in values} == values


def test_recognise_keeps_choices_the_url_does_not_make():
    found = recognise(SETTINGS, f"{FORUM}/c/compiler/5", FeedForm(author="alice", format="rss", list="tag"))
    assert (found.form.author, found.form.format, found.form.list) == ("alice", "rss", "category")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://evil.example/c/compiler/5", "not a forum this bridge serves"),
        ("https://dev-discuss.pytorch.org.evil.example/latest", "not a forum this bridge serves"),
        (f"{FORUM}/admin/users", "does not recognise"),
        ("   ", "Paste"),
    ],
)
def test_recognise_explains_what_it_cannot_use(url, message):
    found = recognise(SETTINGS, url)
    assert found.form is None and message in found.message


def test_form_builds_the_feed_path_the_service_validates():
    form = FeedForm(forum="f", list="top", period="weekly", author="a,b", q="gpu", format="rss")
    assert form.feed_request() == ("f/top.rss", {"period": ["weekly"], "author": ["a,b"], "q": ["gpu"]})
    assert FeedForm(list="category", category="nope").missing
    assert FeedForm(list="category", category="hardware/gpu/12").missing is None
    assert FeedForm.from_args({"list": "bogus", "format": "exe"}) == FeedForm()


def test_a_pasted_search_url_is_the_latest_list_with_its_words_and_says_so():
    """Discourse's search reads its own syntax; the bridge's keyword query, on the latest list, reads words."""
    found = recognise(SETTINGS, f"{FORUM}/search?q=dynamo%20in%3Atitle&category=5")
    assert found.form is not None, found.message
    assert (found.form.list, found.form.q, found.form.in_category) == ("latest", "dynamo in:title", "5")
    assert "latest topics" in found.message.lower() and "keyword query" in found.message
    assert "in:title" in found.message and "plain words" in found.message


def test_old_front_page_links_open_the_lists_by_their_new_names():
    """`started` and `user` were the user lists' values; `search`, a list no more, falls back to the latest
    list, which with the link's keywords is the feed it gave."""
    assert FeedForm.from_args({"list": "started", "user": "ann"}) == FeedForm(list="user_topics", user="ann")
    assert FeedForm.from_args({"list": "user", "user": "ann"}) == FeedForm(list="user_posts", user="ann")
    old = FeedForm.from_args({"forum": "f", "list": "search", "q": "gpu"})
    assert old.feed_request() == ("f/latest.atom", {"q": ["gpu"]})


def test_form_from_a_feed_path_round_trips():
    form = form_from_path("dev-discuss.pytorch.org/c/hardware/gpu/12.html", {"author": ["ann"]}, SETTINGS)
    assert (form.list, form.category, form.author, form.format) == ("category", "hardware/gpu/12", "ann", "html")


def test_categories_directory_parsed_by_shape():
    categories = parse_categories((DEFAULT_ROOT / "categories.md").read_text(encoding="utf-8"))
    assert [(c.name, c.value) for c in categories] == [
        ("compiler", "compiler/5"), ("distributed", "distributed/6"), ("hardware", "hardware/11"),
        ("gpu", "hardware/gpu/12"), ("graphs", "hardware/gpu/graphs/13"), ("general", "general/1"),
    ]
    # core's `Parent:` lines name each subcategory's parent: the whole directory's children are known
    assert [c.subcategory_ids for c in categories] == [(), (), (12,), (13,), (), ()]
    assert categories[3].description.startswith("GPU backends") and "Parent" not in categories[3].description
    assert categories[-1].description.startswith("Anything that does not fit")
    lenient = parse_categories("### [A \\[b\\]](/c/a-b/3.md \"t\")\ntext\n## [x](https://h/t/x/1)\n# junk")
    assert [(c.name, c.value, c.description) for c in lenient] == [("A [b]", "a-b/3", "text")]
    assert parse_categories("not a directory at all") == ()
    # a heading whose URL urlsplit refuses (a broken IPv6 host) is no category; it raised, and the front page,
    # its category list and the OPML answered 500
    broken = parse_categories("## [Evil](https://[x/c/evil/77)\n\nevil\n\n## [A](/c/a/3)\n\ntext\n")
    assert [(c.name, c.value, c.description) for c in broken] == [("A", "a/3", "text")]


def test_front_page_shows_forums_categories_and_a_preview(client, key):
    response = client.get("/")
    assert response.status_code == 200
    page = html.fromstring(response.data)
    assert page.xpath("//select[@id='forum']/option/@value") == [key]
    assert "hardware/gpu/12" in page.xpath("//select[@id='category']/option/@value")
    assert page.xpath("//input[@id='feed-url']/@value") == [f"http://localhost/{key}/latest.atom"]
    assert len(page.xpath("//ol[@class='entries']/li")) > 5
    links = page.xpath("//head/link[@rel='alternate']")
    assert [link.get("type") for link in links] == ["application/atom+xml", "application/rss+xml",
                                                     "application/feed+json"]
    for label_for in page.xpath("//label/@for"):
        assert page.xpath(f"//*[@id='{label_for}']"), f"label for missing control {label_for}"
    # the tab's icon, so browsers do not ask /favicon.ico of every page (a 404, and a log line, each time)
    [icon] = page.xpath("//head/link[@rel='icon']/@href")
    served = client.get(icon)
    assert served.status_code == 200 and served.mimetype == "image/svg+xml"
    assert html.fromstring(served.data).tag.endswith("svg")
    asked = client.get("/favicon.ico")  # by a client that does not read the page's link (some feed readers)
    assert asked.status_code == 301 and asked.headers["location"].endswith(icon)


def test_front_page_builds_a_filtered_feed_without_javascript(client, key):
    response = client.get("/", query_string={"list": "category", "category": "compiler/5", "author": "Chillee",
                                             "format": "rss"})
    page = html.fromstring(response.data)
    feed_url = page.xpath("//input[@id='feed-url']/@value")[0]
    assert feed_url == f"http://localhost/{key}/c/compiler/5.rss?author=chillee"
    assert page.xpath("//head/link[@rel='alternate']/@type")[0] == "application/rss+xml"
    authors = {a.text for a in page.xpath("//p[@class='entry-meta']/a")}
    assert authors == {"Chillee"}


def test_empty_preview_says_so_and_offers_more_pages(client):
    response = client.get("/", query_string={"q": "zzzz-no-such-word"})
    page = html.fromstring(response.data)
    empty = page.get_element_by_id("empty-preview")
    assert "No topics match" in empty.text_content()
    assert "pages=2" in empty.xpath(".//a/@href")[0]


def test_validation_errors_are_shown_escaped(client):
    response = client.get("/", query_string={"list": "tag", "tag": SCRIPT, "author": SCRIPT})
    assert response.status_code == 200
    assert b"<script>alert" not in response.data
    assert html.fromstring(response.data).xpath("//*[@role='alert']")


@pytest.mark.parametrize(("args", "label"), [({"list": "posts", "min_likes": "3"}, "likes, at least"),
                                             ({"list": "topic", "topic": "467", "content": "full"}, "Content"),
                                             ({"list": "latest", "period": "weekly"}, "Period")])
def test_a_value_in_a_field_the_list_does_not_take_is_named_not_dropped(client, key, args, label):
    """The page's script hides the fields a list's feed does not take; without it they show, and a value typed
    there was dropped from the feed built (`/posts.atom` for "likes, at least 3"), as the web refuses it."""
    page = html.fromstring(client.get("/", query_string={"forum": key, **args}).data)
    alert = " ".join(page.xpath("//*[@role='alert']//text()"))
    assert label in alert and "does not apply" in alert, alert
    assert not page.xpath("//a[@class='format-link']")  # no feed built without it
    plain = html.fromstring(client.get("/", query_string={"forum": key, "list": args["list"],
                                                           **({"topic": "467"} if "topic" in args else {})}).data)
    assert not plain.xpath("//*[@role='alert']")


def test_user_text_and_upstream_titles_are_escaped_everywhere(client, key):
    response = client.get("/", query_string={"q": SCRIPT + ' OR "x"', "url": SCRIPT})
    body = response.data.decode()
    assert "<script>alert" not in body
    assert html.fromstring(response.data).xpath("//input[@id='q']/@value") == [SCRIPT + ' OR "x"']
    feed_page = client.get(f"/{key}/latest.html")
    assert feed_page.status_code == 200
    assert b"<script>alert" not in feed_page.data
    titles = html.fromstring(feed_page.data).xpath("//h3[@class='entry-title']//text()")
    assert SCRIPT in titles
    assert all(s.get("src") for s in html.fromstring(feed_page.data).xpath("//script"))


def test_html_pages_carry_security_headers(client, key):
    for path in ("/", f"/{key}/latest.html", f"/{key}/c/nope/99.html", "/preview"):
        response = client.get(path)
        csp = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "no-referrer"


def test_pictures_of_a_plain_http_forum_may_come_from_its_bucket_over_http():
    """A picture a plain-http forum names without a scheme (`//bucket/…`) takes the forum's scheme: the page's CSP
    allowed plain http from the forum's own origin only, and the browser blocked it there."""
    def images(*urls: str) -> str:
        policy = content_security_policy(Settings(forums=tuple(parse_forum(url) for url in urls)))
        return next(part for part in policy.split("; ") if part.startswith("img-src"))

    assert images("https://a.example") == "img-src 'self' data: https:"
    assert images("https://a.example", "http://b.example:8080") == "img-src 'self' data: https: http:"


def test_html_view_errors_are_pages_with_the_right_status(client, key):
    missing = client.get(f"/{key}/c/nope/99.html")
    assert missing.status_code == 404 and missing.mimetype == "text/html"
    unknown = client.get("/nowhere.example/latest.html")
    assert unknown.status_code == 404 and b"unknown forum" in unknown.data
    bad = client.get(f"/{key}/latest.html?limit=0")
    assert bad.status_code == 400 and bad.mimetype == "text/html"


def test_html_view_discovers_its_feeds(client, key):
    page = html.fromstring(client.get(f"/{key}/tag/gpu.html?author=x,y").data)
    hrefs = page.xpath("//head/link[@rel='alternate']/@href")
    assert hrefs == [f"http://localhost/{key}/tag/gpu.{fmt}?author=x&author=y" for fmt in ("atom", "rss", "json")]
    assert "list=tag" in page.xpath("//a[contains(., 'front page')]/@href")[0]


def test_an_html_view_spelled_two_ways_is_one_page_made_of_its_canonical_query(upstream_json):
    """The view is kept under the feed's canonical query; its link back to the front page's form was made from
    the first requester's spelling, which every later reader of the same feed was then served."""
    with running_app(settings_for(upstream_json.url)) as app:
        first = httpx.get(app.feed_url("/latest.html?q=%22GPU%22&author=BOB&min_likes=0005"), timeout=30)
        second = httpx.get(app.feed_url("/latest.html?min_likes=5&author=bob&q=gpu"), timeout=30)
    assert first.status_code == second.status_code == 200
    assert first.content == second.content
    edit = html.fromstring(first.content).xpath("//a[starts-with(text(), 'Change this feed')]/@href")[0]
    assert dict(httpx.URL(edit).params) == {"forum": app.forum_key, "format": "html", "q": "gpu", "author": "bob",
                                            "min_likes": "5"}


def test_an_html_view_of_full_content_shows_the_posts_its_feed_carries(upstream_json):
    """Every feed is also a web page with the same entries (docs/entries.md): with `content=full` the `.html` view
    showed each topic's excerpt only, and a JSON list gives excerpts for pinned topics alone, so most entries
    were titles."""
    with running_app(settings_for(upstream_json.url, forum_budget_10s=0)) as app:
        feed = httpx.get(app.feed_url("/c/compiler/5.json?content=full"), timeout=30).json()
        page = html.fromstring(httpx.get(app.feed_url("/c/compiler/5.html?content=full"), timeout=30).content)
    with_content = [item for item in feed["items"] if "content_html" in item]
    posts = page.xpath("//li[@class='entry']/div[@class='entry-post']")
    assert with_content and len(posts) == len(with_content)
    assert not page.xpath("//div[@class='entry-post']//script | //div[@class='entry-post']//*[@onerror]")


@pytest.mark.parametrize("fmt", ["atom", "rss"])
def test_feeds_point_at_the_stylesheet_and_stay_valid(client, key, fmt):
    response = client.get(f"/{key}/latest.{fmt}")
    assert b'<?xml-stylesheet type="text/xsl" href="/static/feed.xsl"?>' in response.data.split(b"\n")[1]
    assert feedparser.parse(response.data).bozo == 0
    assert b"xml-stylesheet" not in client.get(f"/{key}/latest.json").data


@pytest.mark.parametrize("fmt", ["atom", "rss"])
def test_xsl_renders_feeds_escaped_with_only_http_links(client, key, fmt):
    response = client.get("/static/feed.xsl")
    assert response.status_code == 200
    stylesheet = etree.fromstring(response.data)
    assert stylesheet.xpath("//@disable-output-escaping") == []
    transform = etree.XSLT(stylesheet)
    link = b'href="' if fmt == "atom" else b"<link>"
    feed = client.get(f"/{key}/latest.{fmt}").data
    out = str(transform(etree.fromstring(feed.replace(link + b"http://127", link + b"JavaScript:alert(1)//"))))
    page = html.fromstring(out)
    assert SCRIPT in page.xpath("//h3[@class='entry-title']//text()")
    assert "<script" not in out
    assert page.xpath("//h3[@class='entry-title']") and not page.xpath("//h3[@class='entry-title']/a")
    assert all(re.match(r"https?://|/", href) for href in page.xpath("//a/@href"))
    safe = html.fromstring(str(transform(etree.fromstring(feed))))
    assert len(safe.xpath("//h3[@class='entry-title']/a")) == len(safe.xpath("//h3[@class='entry-title']"))
    assert page.xpath("//a[@id='html-view']/@href")[0] == f"http://localhost/{key}/latest.html"


def test_opml_lists_every_category_feed(client, key, upstream):
    upstream.set_body("/categories.md", "## [A & <b>](https://x/c/a-b/3)\n\n" + SCRIPT + "\n")
    response = client.get(f"/{key}/opml")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/x-opml; charset=utf-8"
    assert response.headers["Content-Disposition"].startswith("attachment; filename=")
    root = etree.fromstring(response.data)
    assert root.get("version") == "2.0"
    outlines = root.xpath("//outline[@xmlUrl]")
    assert [o.get("xmlUrl") for o in outlines] == [f"http://localhost/{key}/latest.atom",
                                                   f"http://localhost/{key}/c/a-b/3.atom"]
    assert outlines[1].get("text") == f"{key} · A & <b>"
    assert b"A &amp; &lt;b&gt;" in response.data


def test_opml_link_and_unknown_forum(client, key):
    page = html.fromstring(client.get("/").data)
    assert page.xpath("//a[@id='opml-link']/@href") == [f"/{key}/opml"]
    assert client.get("/nowhere.example/opml").status_code == 404


def test_front_page_works_when_the_categories_directory_fails(client, upstream):
    upstream.fail("/categories.md", 500, prefix=True)
    response = client.get("/", query_string={"url": f"{upstream.url}/c/compiler/5.md"})
    page = html.fromstring(response.data)
    assert response.status_code == 200
    assert page.xpath("//input[@id='category']/@value") == ["compiler/5"]
    assert page.xpath("//input[@id='feed-url']/@value")[0].endswith("/c/compiler/5.atom")


def test_directory_is_cached_like_lists(client, upstream):
    for _ in range(3):
        client.get("/")
    assert upstream.count("/categories.md") == 1


def test_preview_fragment_and_recognise_endpoint(client, key, upstream):
    fragment = client.get("/preview", query_string={"list": "tag", "tag": "gpu", "format": "json"})
    page = html.fromstring(fragment.data)
    assert page.get("id") == "result-body" and page.get("data-format") == "json"
    assert page.xpath("//a[@data-format='json']/@href") == [f"http://localhost/{key}/tag/gpu.json"]
    answer = client.get("/recognise", query_string={"url": f"{upstream.url}/c/hardware/gpu/12.md?page=1",
                                                     "format": "rss"}).json
    assert answer["form"]["category"] == "hardware/gpu/12" and answer["form"]["format"] == "rss"
    refused = client.get("/recognise", query_string={"url": "https://else.example/" + quote(SCRIPT)}).json
    assert refused["form"] is None and "not a forum" in refused["message"]


def test_browsers_get_feeds_as_xml_so_the_stylesheet_applies(client, key):
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    reader = "application/atom+xml, application/rss+xml;q=0.9, */*;q=0.5"
    assert client.get(f"/{key}/latest.atom", headers={"Accept": browser}).mimetype == "application/xml"
    assert client.get(f"/{key}/latest.atom", headers={"Accept": reader}).mimetype == "application/atom+xml"
    plain = client.get(f"/{key}/latest.rss", headers={"Accept": "*/*"})
    assert plain.mimetype == "application/rss+xml" and "Accept" in plain.headers["Vary"]


def test_http_url_refuses_what_urlsplit_refuses():
    assert http_url("https://f.example/t/1") == "https://f.example/t/1" and http_url(" HTTP://f/ ") == " HTTP://f/ "
    for url in ("https://[x/t/t/1", "http://[::1/u/a", "javascript:alert(1)", "", None):
        assert http_url(url) is None, url


def test_links_urlsplit_refuses_are_no_links_in_any_page(upstream):
    """A broken IPv6 host (`https://[x/…`) in a list's topic and author links and in a categories heading, over a
    socket: the `.html` view and the front page's preview raised in `http_url` (500), and the directory's parser
    in urlsplit, which made the front page, its category list and the OPML 500 for everyone. The topic is
    skipped, the author linked to their page on the forum (made from the name, `fields.user_link`), the category
    left out; every page answers."""
    text = (DEFAULT_ROOT / "latest.md").read_text(encoding="utf-8")
    text = text.replace("(https://dev-discuss.pytorch.org/t/script-alert-1-script/3460)", "(https://[x/t/s/3460)")
    upstream.set_body("/latest.md", text.replace("(https://dev-discuss.pytorch.org/u/Chillee)", "(https://[x/u/c)"))
    directory = (DEFAULT_ROOT / "categories.md").read_text(encoding="utf-8")
    upstream.set_body("/categories.md", directory.replace("\n## [", "\n## [Evil](https://[x/c/evil/77)\n\n## [", 1))
    with running_app(settings_for(upstream.url)) as app:
        pages = {path: httpx.get(app.url + path, timeout=30) for path in (
            *(f"/{app.forum_key}/latest.{fmt}" for fmt in ("html", "atom", "rss", "json")),
            "/", f"/?forum={app.forum_key}&list=latest", f"/?forum={app.forum_key}&list=category",
            f"/preview?forum={app.forum_key}&list=latest", f"/{app.forum_key}/opml")}
    assert {path: r.status_code for path, r in pages.items() if r.status_code != 200} == {}
    assert all("[x" not in r.text and "evil" not in r.text.lower() for r in pages.values())
    view = html.fromstring(pages[f"/{app.forum_key}/latest.html"].content)
    assert view.xpath("//h3[@class='entry-title']") and SCRIPT not in view.xpath("//h3[@class='entry-title']//text()")
    assert set(view.xpath("//p[@class='entry-meta']//a[contains(., 'Chillee')]/@href")) == {f"{upstream.url}/u/Chillee"}
    front = html.fromstring(pages["/"].content)
    assert "hardware/gpu/12" in front.xpath("//select[@id='category']/option/@value")
    assert len(front.xpath("//ol[@class='entries']/li")) > 5


def test_html_view_answers_conditional_requests_and_survives_an_outage(upstream):
    with running_app(settings_for(upstream.url, cache_ttl=0)) as app:
        url = app.feed_url("/c/compiler/5.html")
        first = httpx.get(url, timeout=10)
        assert first.status_code == 200 and first.headers["etag"]
        assert httpx.get(url, headers={"If-None-Match": first.headers["etag"]}, timeout=10).status_code == 304
        upstream.fail("/c/compiler/5.md", 500)
        during = httpx.get(url, timeout=10)
        assert during.status_code == 200
        assert "About the compiler category" in during.text


@pytest.mark.parametrize("summary", ["<" * 10_000, "a & b < c > d \" e " * 2_000, "&lt; is not <" * 1_000,
                                     "x" * 9_000 + "&" * 1_000])
def test_xsl_unescapes_excerpts_of_ten_thousand_escaped_characters(summary):
    """Its unescaping called itself once per `&`: libxslt gave up on an excerpt of 1,000 `<` (XSLTApplyError)."""
    entry = Entry(kind="topic", id="https://f.example/t/1", link="https://f.example/t/x/1", title="t",
                  summary=summary, updated=datetime(2025, 1, 1, tzinfo=UTC))
    meta = FeedMeta(title="f", forum_url="https://f.example", html_url="https://f.example/latest",
                    feed_id="https://f.example/latest")
    transform = etree.XSLT(etree.parse(STATIC / "feed.xsl"))
    page = html.fromstring(str(transform(etree.fromstring(render_rss(meta, [entry])))))
    assert page.xpath("//p[@class='entry-excerpt']")[0].text_content().strip() == summary.strip()


def test_an_rss_item_with_content_alone_is_described_by_its_text_and_the_browser_view_shows_no_markup():
    """A post, a digest's period, a JSON list's topic with content=full: content and no excerpt. feedgen wrote
    the content as the item's description and no content:encoded, which the browser view showed as text, tags
    and all; a digest was "by a deleted user", and every RSS date was called the last activity (a JSON list's
    `pubDate` is the topic's creation)."""
    start, newest = datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 1, 1, 18, tzinfo=UTC)
    post = Entry(kind="post", id="https://f.example/t/1/2", link="https://f.example/t/x/1/2", title="Re: x",
                 author="ann", content_html="<div>Small<p><b>post</b> &amp; " + "word " * 100 + "</p></div>",
                 published=start)
    picture = Entry(kind="post", id="https://f.example/t/1/3", link="https://f.example/t/x/1/3", title="Re: y",
                    author="bob", content_html='<p><img src="https://f.example/a.png"></p>', published=start)
    digest = Entry(kind="digest", id="https://f.example/latest.md#digest=daily/digest/2025-01-01",
                   link="https://f.example/latest#digest-2025-01-01", title="2025-01-01: 2 topics", published=start,
                   updated=newest, content_html='<ul><li><a href="https://f.example/t/x/1">x</a> · by ann</li>'
                                                '<li><a href="https://f.example/t/y/2">y</a> · by bob</li></ul>')
    # a forum under a /digest folder: its topics' ids hold "/digest/" too, before any "#"
    subfolder = Entry(kind="topic", id="https://f.example/digest/t/7", link="https://f.example/digest/t/z/7",
                      title="z", author="cy", summary="z's first post", updated=start)
    meta = FeedMeta(title="f", forum_url="https://f.example", html_url="https://f.example/latest",
                    feed_id="https://f.example/latest")
    rss = etree.fromstring(render_rss(meta, [post, picture, digest, subfolder]))
    content = "{http://purl.org/rss/1.0/modules/content/}encoded"
    items = rss.findall("channel/item")[:3]
    assert [item.findtext(content) for item in items] == [post.content_html, picture.content_html, digest.content_html]
    described = [item.findtext("description") for item in items]
    assert described[0].startswith("Small post &amp; word") and described[0].endswith("…") and len(described[0]) < 320
    assert described[1:] == ["Re: y", "x · by ann y · by bob"]  # one topic after another, not "annx"
    page = html.fromstring(str(etree.XSLT(etree.parse(STATIC / "feed.xsl"))(rss)))
    excerpts = [p.text_content().strip() for p in page.xpath("//p[@class='entry-excerpt']")]
    assert excerpts[0].startswith("Small post & word") and excerpts[1:3] == ["Re: y", "x · by ann y · by bob"]
    metas = [p.text_content().strip() for p in page.xpath("//p[@class='entry-meta']")]
    assert metas[0] == "by ann · Wed, 01 Jan 2025 00:00:00 +0000" and metas[2] == "Wed, 01 Jan 2025 00:00:00 +0000"
    assert metas[3].startswith("by cy")
    atom = html.fromstring(str(etree.XSLT(etree.parse(STATIC / "feed.xsl"))(etree.fromstring(
        render_atom(meta, [digest, subfolder])))))
    assert [p.text_content().strip() for p in atom.xpath("//p[@class='entry-meta']")] == [
        "2025-01-01T00:00:00+00:00 to 2025-01-01T18:00:00+00:00", "by cy · last activity 2025-01-01T00:00:00+00:00"]


def test_previews_and_the_paste_box_are_charged_as_the_front_page_is(upstream):
    """A kept preview still parses its form (three times a feed hit's CPU), and a client refused the front page
    had 500 of them a minute, the paste box's too, never refused. Both are charged now: past the client's
    allowance the preview is the reason, in the result's place, and the paste box says it, with a 429."""
    with running_app(settings_for(upstream.url, cpu_allowance=0.05)) as app, httpx.Client(timeout=30) as client:
        form = f"forum={parse_forum(upstream.url).key}&list=latest&q=" + "+".join(f"w{i}" for i in range(30))
        previews = [client.get(f"{app.url}/preview?{form}") for _ in range(40)]
        pasted = client.get(f"{app.url}/recognise?url={quote(upstream.url + '/c/compiler/5')}&{form}")
    refused = [answer for answer in previews if answer.status_code == 429]
    assert previews[0].status_code == 200 and refused and 1 <= int(refused[0].headers["retry-after"]) <= 60
    assert 'id="result-body"' in refused[0].text and "CPU" in refused[0].text
    assert pasted.status_code == 429 and pasted.json() == {"form": None, "message": pasted.json()["message"]}
    assert "CPU" in pasted.json()["message"]


@pytest.mark.parametrize("name", ["..", ".", "-x", ".hidden"])
def test_a_user_name_core_would_not_make_names_no_feed(upstream, name):
    """Core's usernames begin with a letter, a digit or `_` (UsernameValidator). `/u/..` was taken for a user,
    and its feed linked to `/u/../activity/topics`, which a browser reads as the forum's `/activity/topics`."""
    key = parse_forum(upstream.url).key
    found = recognise(Settings(forums=(parse_forum(upstream.url),)), f"{upstream.url}/u/{name}", FeedForm(forum=key))
    assert found.form is None
    if name.strip("."):  # a client makes `/u/../x` `/x` itself
        with running_app(settings_for(upstream.url)) as app:
            feeds = [httpx.get(f"{app.url}/{key}/u/{name}{tail}", timeout=30) for tail in (".atom", "/posts.atom")]
        assert [feed.status_code for feed in feeds] == [404, 404]
    assert not upstream.count(f"/topics/created-by/{name}", prefix=True)


def test_a_page_writes_every_date_with_its_four_digit_year():
    """The `.html` views' dates: `strftime`'s `%Y` wrote a topic of the year 999 as `999-01-02` (glibc pads nothing)."""
    from datetime import UTC, datetime

    from feedbridge.web.pages import when

    assert when(datetime(999, 1, 2, 3, 4, 5, tzinfo=UTC)) == "0999-01-02 03:04 UTC"
    assert when(datetime(2026, 12, 6, 17, 5, 59, tzinfo=UTC)) == "2026-12-06 17:05 UTC"
    assert when(None) == "never"


def test_the_front_page_echoes_a_long_query_a_bounded_number_of_times(client, key):
    """The feed URL was in the front page 12 times: the three autodiscovery links, the copy field, the four
    "Open as" links, and again in four `data-` attributes the script made the discovery links from after a
    preview, with the feed's title a fifth time; a query of 450 characters grew the page by 19 times its
    length. The script reads the "Open as" links and the title shown instead, so the URL is in the page 8
    times: what the response adds for a longer query is a bounded multiple of what the request adds (RELIABILITY.md
    row 78)."""
    word = "y" * 450  # the keyword query is 500 characters at most
    short = client.get("/", query_string={"q": "x"})
    long = client.get("/", query_string={"q": "x" + word})
    assert short.status_code == long.status_code == 200
    page = html.fromstring(long.data)
    feed_url = f"http://localhost/{key}/latest.atom?q=x{word}"
    assert page.xpath("//input[@id='feed-url']/@value") == [feed_url]
    assert long.data.count(f"/{key}/latest.".encode()) == 8
    assert long.data.count(word.encode()) <= 15  # the 8 URLs, 4 titles, the field, the paste box's, "Read 2 pages"
    assert len(long.data) - len(short.data) <= 15 * len(word)
