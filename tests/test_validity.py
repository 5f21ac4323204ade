"""What strict validators and real feed parsers check, beyond parsing: dates, URIs, ids, link order, HTML
and OPML structure (issue 16).

The W3C Feed Validation Service is not on PyPI, and is not vendored here; its checks that concern this
output are written out from the specs instead: RFC 4287 (Atom), RSS 2.0, JSON Feed 1.1, RFC 3986 (URIs),
OPML 2.0, and the HTML rule the Nu Html Checker applies to links. Renderer tests work on hand-built topics;
the service tests go through a real socket, and the CLI and static-build tests run the command itself.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import replace
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import feedparser
import httpx
import pytest
from lxml import etree

from feedbridge.config import parse_forum
from feedbridge.models import Category, Entry, Site
from feedbridge.render.formats import FEED_FORMATS, render
from feedbridge.render.meta import FeedMeta
from feedbridge.render.sanitize import markdown_to_safe_html
from feedbridge.staticsite.files import Listed, feeds_opml
from feedbridge.web.pages import opml_document as web_opml
from tests.appserver import running_app, settings_for
from tests.test_cli import SEED
from tests.test_cli import run as run_cli
from tests.test_render import ATOM, FORUM, META, at, entries, topic
from tests.test_static import run as run_static
from tests.test_static import write_config

ATOM_LINK = f"{ATOM}link"
EMPTY_LIST = Path(__file__).resolve().parent.parent / "fixtures" / "dialects" / "widgets-c4-empty.md"

# RFC 3986 §3, for the absolute http(s) URIs a feed carries: scheme, authority, path, query, fragment, each
# with only the characters its grammar allows (the rest percent-encoded).
_UNRESERVED_ETC = r"A-Za-z0-9\-._~!$&'()*+,;="
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[{_UNRESERVED_ETC}:@]|{_PCT})"
URI = re.compile(
    rf"[A-Za-z][A-Za-z0-9+.\-]*://"
    rf"(?:(?:[{_UNRESERVED_ETC}:]|{_PCT})*@)?(?:\[[0-9A-Fa-f:.]+\]|(?:[{_UNRESERVED_ETC}]|{_PCT})*)(?::[0-9]*)?"
    rf"(?:/{_PCHAR}*)*(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
)
IRI_TOPICS = [
    topic(1, url=f"{FORUM}/t/café-crème/1", author="Zoë", author_url=f"{FORUM}/u/Zoë"),
    topic(2, author="用户42", author_url=f"{FORUM}/u/用户42", last_posted_at=at(2)),
    topic(3, author="a b", author_url=f"{FORUM}/u/a b?x=[1]#one#two"),
]
IRI_META = replace(META, html_url="https://bücher.example/c/Straße/5", self_url="https://feeds.example/c/é.atom",
                   feed_id="https://feeds.example/c/é.atom#q: x OR y")


def is_uri(text: str | None) -> bool:
    return text is not None and URI.fullmatch(text) is not None


def feed_urls(fmt: str, body: bytes) -> list[str]:
    """Every URL-valued field of a feed: ids, links, author URIs."""
    if fmt == "json":
        feed = json.loads(body)
        urls = [feed["home_page_url"], feed.get("feed_url")]
        for item in feed["items"]:
            urls += [item["id"], item["url"]]
            urls += [a.get("url") for a in item.get("authors", [])] + [item.get("author", {}).get("url")]
        return [u for u in urls if u is not None]
    root = etree.fromstring(body)
    if fmt == "atom":
        return root.xpath("//a:id/text() | //a:link/@href | //a:uri/text()", namespaces={"a": ATOM[1:-1]})
    return root.xpath("channel/link/text() | //item/link/text() | //item/guid/text()"
                      " | channel/*[local-name()='link']/@href")


def parsed(body: bytes) -> feedparser.FeedParserDict:
    result = feedparser.parse(body)
    assert result.bozo == 0, result.get("bozo_exception")
    return result


# --- 1. no invented dates ------------------------------------------------------------------------------

UNDATED_TOPICS = [
    topic(1, last_posted_at=None, created_at=at(4)),  # known only from its own page (full content)
    topic(2, last_posted_at=None),  # no date at all
]


@pytest.mark.parametrize("fmt", FEED_FORMATS)
@pytest.mark.parametrize("topics", [UNDATED_TOPICS, []], ids=["undated", "empty"])
def test_no_1970_and_no_render_time_anywhere(fmt, topics):
    body = render(fmt, META, entries(topics))
    assert b"1970" not in body
    assert body == render(fmt, META, entries(topics))  # deterministic: nothing depends on when it is rendered
    if fmt != "json":
        parsed(body)


def test_atom_dates_undated_entries_from_creation_or_the_feed_and_empty_feed_from_the_list():
    feed = parsed(render("atom", META, entries(UNDATED_TOPICS)))
    assert feed.feed.updated == at(4).isoformat()  # newest date a topic carries
    assert [e.updated for e in feed.entries] == [at(4).isoformat(), at(4).isoformat()]
    empty = parsed(render("atom", META, []))
    assert empty.feed.updated == META.updated.isoformat()  # when the list was read


def test_rss_and_json_leave_unknown_dates_out():
    rss = etree.fromstring(render("rss", META, entries(UNDATED_TOPICS)))
    assert [i.findtext("pubDate") is not None for i in rss.iter("item")] == [True, False]
    assert rss.findtext("channel/lastBuildDate") == "Wed, 04 Mar 2026 12:30:15 +0000"
    assert etree.fromstring(render("rss", META, [])).find("channel/lastBuildDate") is None
    assert etree.fromstring(render("rss", META, entries([topic(2, last_posted_at=None)]))).find("channel/lastBuildDate") is None
    items = json.loads(render("json", META, entries(UNDATED_TOPICS)))["items"]
    assert [sorted(k for k in i if k.startswith("date_")) for i in items] == [["date_published"], []]


def test_a_default_feed_date_is_fixed_when_the_meta_is_made():
    meta = FeedMeta(title=META.title, forum_url=META.forum_url, html_url=META.html_url, feed_id=META.feed_id)
    first = render("atom", meta, [])
    time.sleep(1.01)
    assert render("atom", meta, []) == first
    updated = datetime.fromisoformat(parsed(first).feed.updated)
    assert abs(updated.timestamp() - time.time()) < 120


# --- 2. URIs, not IRIs, in every URL field ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", FEED_FORMATS)
def test_every_url_field_is_an_rfc3986_uri(fmt):
    body = render(fmt, IRI_META, entries(IRI_TOPICS))
    urls = feed_urls(fmt, body)
    assert len(urls) >= {"atom": 11, "rss": 8, "json": 14}[fmt]
    assert [u for u in urls if not is_uri(u)] == []
    if fmt != "json":
        parsed(body)


def test_usernames_and_slugs_are_percent_encoded_in_each_format():
    zoe, user42 = f"{FORUM}/u/Zo%C3%AB", f"{FORUM}/u/%E7%94%A8%E6%88%B742"
    items = json.loads(render("json", IRI_META, entries(IRI_TOPICS)))["items"]
    assert [i["authors"][0]["url"] for i in items[:2]] == [zoe, user42]
    assert items[2]["authors"][0]["url"] == f"{FORUM}/u/a%20b?x=%5B1%5D#one%23two"
    atom = parsed(render("atom", IRI_META, entries(IRI_TOPICS)))
    assert [e.author_detail.href for e in atom.entries[:2]] == [zoe, user42]
    assert atom.entries[0].link == f"{FORUM}/t/caf%C3%A9-cr%C3%A8me/1"
    assert atom.feed.link == "https://xn--bcher-kva.example/c/Stra%C3%9Fe/5"
    rss = parsed(render("rss", IRI_META, entries(IRI_TOPICS)))
    assert rss.entries[0].link == f"{FORUM}/t/caf%C3%A9-cr%C3%A8me/1"
    assert rss.entries[0].author == "Zoë"  # names stay text


@pytest.mark.parametrize(("iri", "uri"), [
    ("https://host/u/Zoë", "https://host/u/Zo%C3%AB"),
    ("https://host/u/用户42", "https://host/u/%E7%94%A8%E6%88%B742"),
    ("https://bücher.example:8080/a b?q=ä&x=1#f g", "https://xn--bcher-kva.example:8080/a%20b?q=%C3%A4&x=1#f%20g"),
    ("https://h/a%20b%zz/100%", "https://h/a%20b%25zz/100%25"),  # escapes kept; a lone % escaped
    ("https://u:pä@h/p?x=[1]#a#b", "https://u:p%C3%A4@h/p?x=%5B1%5D#a%23b"),
    ("http://[::1]:80/ä", "http://[::1]:80/%C3%A4"),
    ("/u/Zoë", "/u/Zo%C3%AB"),
    ("https://h/\ud800", "https://h/%3F"),
    # Hosts Werkzeug copies as they are or refuses (raising): the URI is still valid, and nothing raises.
    ("https://a b<c>/ä", "https://a%20b%3Cc%3E/%C3%A4"),
    ("https://h:99999/ä?x=[1]", "https://h:99999/%C3%A4?x=%5B1%5D"),
    ("https://[::1/ä", "https://%5B::1/%C3%A4"),
    ("https://a..ü/ä", "https://a..%C3%BC/%C3%A4"),
])
def test_iri_to_uri(iri, uri):
    from feedbridge.render.uris import iri_to_uri

    assert iri_to_uri(iri) == uri
    assert iri_to_uri(uri) == uri  # idempotent


@pytest.mark.parametrize("uri", [
    "https://dev-discuss.pytorch.org/t/slug/5?page=2&x=a%2Fb#top",
    "mailto:a@b.org", "https://h/!$&'()*+,;=:@/?",
])
def test_uris_pass_through_unchanged(uri):
    from feedbridge.render.uris import iri_to_uri, is_uri

    assert is_uri(uri) and iri_to_uri(uri) == uri


IRI_LIST = "# café\n\n**URL:** https://forum.example.org/tag/caf%C3%A9.md\n" + "".join(
    f"""
---

## [Topic {n}](https://forum.example.org/t/{slug}/{40 + n})

<div class="topic-metadata">

**Author:** [@{name}](https://forum.example.org/u/{name})\\
**Replies:** 1\\
**Last updated:** [September 1{n}, 2026](https://forum.example.org/t/{slug}/{40 + n} "2026-09-1{n}T00:00:00Z")

</div>

An excerpt
""" for n, (name, slug) in enumerate([("Zoë", "café"), ("用户42", "other")]))


def test_the_service_turns_upstream_iris_into_uris(upstream):
    """A list whose profile links are IRIs (`/u/Zoë`), served under a non-ASCII tag: the self URL is one too."""
    upstream.set_body("/tag/caf%C3%A9.md", IRI_LIST)
    with running_app(settings_for(upstream.url)) as app:
        for fmt in FEED_FORMATS:
            response = httpx.get(app.feed_url(f"/tag/café.{fmt}"), params={"q": "topic OR excerpt"}, timeout=15)
            assert response.status_code == 200, response.text
            urls = feed_urls(fmt, response.content)
            assert [u for u in urls if not is_uri(u)] == []
            assert f"{upstream.url}/u/Zo%C3%AB" in urls or fmt == "rss"  # RSS names authors only
            if fmt == "atom":
                assert parsed(response.content).feed.id.endswith("/tag/caf%C3%A9.atom?q=topic+OR+excerpt")
            if fmt == "rss":
                assert f"{upstream.url}/t/caf%C3%A9/40" in urls


# --- 3. feed ids -------------------------------------------------------------------------------------


def test_cli_filtered_feed_id_is_a_valid_stable_iri():
    ids = []
    for args in (("--query", "inductor OR dynamo"), ("--query", "inductor OR dynamo"), ("--author", "Chillee"), ()):
        result = run_cli("build", str(SEED), "--format", "atom", *args)
        assert result.returncode == 0, result.stderr
        ids.append(parsed(result.stdout).feed.id)
    assert ids[0] == ids[1] == "https://dev-discuss.pytorch.org/c/compiler/5.md#q=inductor+OR+dynamo"
    assert ids[2] == "https://dev-discuss.pytorch.org/c/compiler/5.md#author=chillee"
    assert len(set(ids)) == 3 and all(is_uri(i) for i in ids)


def test_cli_undated_feed_is_dated_by_its_source_file(tmp_path):
    source = tmp_path / "empty.md"
    source.write_bytes(EMPTY_LIST.read_bytes())
    os.utime(source, (1_780_000_000, 1_780_000_000))
    atom = run_cli("build", str(source), "--format", "atom")
    assert atom.returncode == 0, atom.stderr
    assert parsed(atom.stdout).feed.updated == datetime.fromtimestamp(1_780_000_000, UTC).isoformat()
    assert run_cli("build", str(source), "--format", "atom").stdout == atom.stdout
    rss = run_cli("build", str(source), "--format", "rss")
    assert b"lastBuildDate" not in rss.stdout and b"1970" not in atom.stdout + rss.stdout


def test_cli_o_of_a_saved_list_keeps_its_files_date_for_a_future_list_and_a_deleted_newest_topic(tmp_path):
    """`build SAVED.md -o FILE` gives an undated list the date of the file it replaces (the same bytes when the
    list is saved again); a list dated only in the future is one too (no such date is the feed's), and was dated
    at each save. A saved list whose newest topic was deleted is not dated before the file it replaces."""
    source, out = tmp_path / "list.md", tmp_path / "feed.atom"

    def build(text: str, saved_at: int) -> str:
        source.write_text(text, encoding="utf-8")
        os.utime(source, (saved_at, saved_at))
        assert run_cli("build", str(source), "-o", str(out)).returncode == 0
        return parsed(out.read_bytes()).feed.updated

    future = dated_list({1: "2999-01-01T00:00:00Z"})
    assert build(future, 1_780_000_000) == build(future, 1_790_000_000) == datetime.fromtimestamp(
        1_780_000_000, UTC).isoformat()
    out.unlink()
    both = build(dated_list({1: "2026-05-01T00:00:00Z", 2: "2026-04-01T00:00:00Z"}), 1_780_000_000)
    assert build(dated_list({2: "2026-04-01T00:00:00Z"}), 1_790_000_000) == both == "2026-05-01T00:00:00+00:00"


def test_service_empty_feed_is_dated_when_it_was_built(upstream):
    upstream.set_body("/c/widgets/9.md", EMPTY_LIST.read_text(encoding="utf-8"))
    with running_app(settings_for(upstream.url)) as app:
        before = int(time.time())
        atom = httpx.get(app.feed_url("/c/widgets/9.atom"), timeout=15)
        after = time.time()
        rss = httpx.get(app.feed_url("/c/widgets/9.rss"), timeout=15)
        again = httpx.get(app.feed_url("/c/widgets/9.atom"), timeout=15)
    feed = parsed(atom.content)
    assert feed.entries == []
    assert before <= datetime.fromisoformat(feed.feed.updated).timestamp() <= after
    assert again.content == atom.content  # the cached copy, same bytes and date
    assert b"lastBuildDate" not in rss.content and b"1970" not in atom.content + rss.content



def dated_list(dates: dict[int, str | None]) -> str:
    """A Markdown list of the widgets category (core's C4 layout), topic N last active at `dates[N]`, or with no
    last-activity row where that is None."""
    blocks = []
    for topic_id, iso in dates.items():
        url = f"https://forum.example.org/t/widget-{topic_id}/{topic_id}"
        dated = (f'\\\n**Last updated:** [a day]({url} "{iso}")' if iso else "")
        blocks.append(f"## [Widget {topic_id}]({url})\n\n**Author:** [@alice](https://forum.example.org/u/alice)"
                      f"\\\n**Replies:** 1{dated}\n\nAbout widget {topic_id}.\n")
    return ("# widgets\n\n**URL:** https://forum.example.org/c/widgets/9.md\n\n---\n\n"
            + "\n---\n\n".join(blocks))


def test_a_topic_dated_in_the_future_never_dates_the_feed(upstream):
    """A topic dated 9999 (a hostile forum, or a broken clock) was the feed's own date (Atom's `updated`, RSS's
    `lastBuildDate`) and every undated entry's, for good: a reader's "newest" and "changed since" saw nothing
    newer ever again. A date past the build by more than `CLOCK_SKEW` is not the feed's: the feed is dated by
    its newest believable topic (and a feed whose filters keep nothing by its list's), the undated entry with
    it; the topic keeps the date the forum gives it. Rebuilt, the bytes are the same (RELIABILITY.md row 74)."""
    upstream.set_body("/c/widgets/9.md", dated_list({1: "9999-12-31T23:59:59Z", 2: "2026-09-01T12:00:00Z", 3: None}))
    believed = datetime(2026, 9, 1, 12, tzinfo=UTC)
    with running_app(settings_for(upstream.url, cache_ttl=0)) as app:
        def feed(path: str) -> httpx.Response:
            return httpx.get(app.feed_url(path), timeout=15)

        atom, rss, json_feed = (feed(f"/c/widgets/9.{fmt}") for fmt in ("atom", "rss", "json"))
        empty = feed("/c/widgets/9.atom?q=nothingmatches")
        again = [feed("/c/widgets/9.atom").content, feed("/c/widgets/9.atom?q=nothingmatches").content]
    assert [r.status_code for r in (atom, rss, json_feed, empty)] == [200] * 4
    read = parsed(atom.content)  # bozo 0, in each format
    assert datetime.fromisoformat(read.feed.updated) == believed
    dates = {entry.title: datetime.fromisoformat(entry.updated) for entry in read.entries}
    assert dates == {"Widget 1": datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), "Widget 2": believed,
                     "Widget 3": believed}
    assert parsed(rss.content).feed.updated_parsed[:6] == believed.timetuple()[:6]  # lastBuildDate
    assert [item.get("date_modified") for item in json.loads(json_feed.content)["items"]] == [
        "9999-12-31T23:59:59Z", "2026-09-01T12:00:00Z", None]
    assert parsed(empty.content).entries == [] and datetime.fromisoformat(parsed(empty.content).feed.updated) == believed
    assert again == [atom.content, empty.content]

# --- 5. sanitised HTML ----------------------------------------------------------------------------------


class Tags(HTMLParser):
    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_refused_urls_leave_no_link_without_href_or_image_without_src():
    html = markdown_to_safe_html(
        "[one](javascript:alert(1)) **[two](vbscript:x)** <a href='data:text/html,x' title='t'>three <b>b</b></a> "
        "<a name='anchor'>four</a> ![five](data:image/png;base64,AAAA) <img src='javascript:x' alt='six'> "
        "[kept](/t/1) ![kept](/i.png)\n\n<a href='javascript:1'>x<img src='data:y'></a> end",
        "https://forum.example/t/s/5",
    )
    tags = Tags(html).tags
    # Nu Html Checker: rel (added by the sanitiser) is only allowed on an a with href; an img needs a src.
    assert [a for tag, a in tags if tag == "a" and "href" not in a] == []
    assert [a for tag, a in tags if tag == "img" and "src" not in a] == []
    assert [a["href"] for tag, a in tags if tag == "a"] == ["https://forum.example/t/1"]
    assert [a["src"] for tag, a in tags if tag == "img"] == ["https://forum.example/i.png"]
    assert "one <strong>two</strong> three <b>b</b> four" in html and "<p>x end</p>" in html
    assert html.count("</a>") == 1


def test_unwrapped_links_keep_the_html_well_formed_in_the_feed():
    html = markdown_to_safe_html("[a](javascript:1) [b](/x) [c](javascript:2) [d](/y)", "https://forum.example/")
    assert html == ('<p>a <a href="https://forum.example/x" rel="nofollow noopener">b</a> c '
                    '<a href="https://forum.example/y" rel="nofollow noopener">d</a></p>')
    parsed(render("atom", META, entries([topic(1, content_html=html)])))


# --- 6. link order ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["atom", "rss"])
def test_first_link_is_the_alternate_html_page(fmt):
    """@extractus/feed-extractor reads the first <link> (fast-xml-parser keeps document order)."""
    root = etree.fromstring(render(fmt, META, entries([topic(1)])))
    if fmt == "atom":
        links = root.findall(ATOM_LINK)
        assert [(link.get("rel"), link.get("href")) for link in links] == [
            ("alternate", META.html_url), ("self", META.self_url)]
    else:
        channel = root.find("channel")
        links = [child for child in channel if etree.QName(child).localname == "link"]
        assert links[0].tag == "link" and links[0].text == META.html_url
        assert [(link.get("rel"), link.get("href")) for link in links[1:]] == [("self", META.self_url)]
    assert parsed(render(fmt, META, entries([topic(1)]))).feed.link == META.html_url


def test_rss_without_self_link_keeps_the_alternate():
    rss = etree.fromstring(render("rss", replace(META, self_url=None), entries([topic(1)])))
    assert rss.findtext("channel/link") == META.html_url
    assert rss.find("channel/{http://www.w3.org/2005/Atom}link") is None


# --- 7. OPML ---------------------------------------------------------------------------------------------


def assert_opml_2_subscription_list(body: bytes) -> list[etree._Element]:
    """OPML 2.0: version, head/title; every outline has text; body holds feeds (type rss, xmlUrl) or folders
    (no type, no xmlUrl) that hold feeds. Returns the feed outlines."""
    root = etree.fromstring(body)
    assert root.tag == "opml" and root.get("version") == "2.0"
    assert root.findtext("head/title") and root.findtext("head/docs") == "http://opml.org/spec2.opml"
    feeds = []
    for outline in root.iter("outline"):
        assert outline.get("text"), etree.tostring(outline)
        if outline.get("xmlUrl") is None:  # a folder
            assert outline.get("type") is None and outline.get("title") == outline.get("text")
            assert len(outline) and all(child.get("type") == "rss" for child in outline)
            assert outline.getparent().tag == "body"
        else:
            assert outline.get("type") == "rss" and len(outline) == 0
            assert outline.get("title") == outline.get("text")
            assert is_uri(outline.get("xmlUrl")) and is_uri(outline.get("htmlUrl"))
            feeds.append(outline)
    return feeds


def test_service_opml_is_a_valid_subscription_list_with_uris(upstream):
    upstream.set_body("/categories.md", "## [Café & co](https://x/c/café/3)\n\nAll about coffee.\n")
    with running_app(settings_for(upstream.url)) as app:
        response = httpx.get(f"{app.url}/{app.forum_key}/opml", timeout=15)
    assert response.status_code == 200
    feeds = assert_opml_2_subscription_list(response.content)
    assert [f.get("xmlUrl") for f in feeds] == [f"{app.url}/{app.forum_key}/latest.atom",
                                                f"{app.url}/{app.forum_key}/c/caf%C3%A9/3.atom"]
    assert feeds[1].get("htmlUrl") == f"{upstream.url}/c/caf%C3%A9/3"
    assert feeds[1].get("text") == f"{app.forum_key} · Café & co"


def test_static_feeds_opml_is_a_valid_subscription_list(tmp_path, upstream):
    feeds = '[[feeds]]\nname = "c"\npath = "c/compiler/5"\n'
    assert run_static(write_config(tmp_path, upstream.url, feeds))[0] == 0
    [feed] = assert_opml_2_subscription_list((tmp_path / "public" / "feeds.opml").read_bytes())
    assert feed.get("xmlUrl") == "https://feeds.example.net/dev/c.atom"


def test_service_and_static_build_share_one_opml_writer():
    from feedbridge.render.opml import Subscription, opml_document

    forum = parse_forum("https://forum.example.org")
    web = web_opml(forum, (Category("Café", "café", 3),), "https://bridge.example")
    assert web == opml_document("forum.example.org categories (feedbridge)", [
        Subscription("forum.example.org · latest", "https://bridge.example/forum.example.org/latest.atom",
                     "https://forum.example.org/latest"),
        Subscription("forum.example.org · Café", "https://bridge.example/forum.example.org/c/café/3.atom",
                     "https://forum.example.org/c/café/3"),
    ], folder="forum.example.org")
    static = feeds_opml("Mine", "https://feeds.example/", [Listed("a", "A", "https://f/c/a", (("rss", "a b.rss"),))])
    assert static == opml_document("Mine", [Subscription("A", "https://feeds.example/a%20b.rss", "https://f/c/a")])
    # a list of no feeds (a static build's first run with the forum down) still has an outline in its body
    empty = etree.fromstring(opml_document("Mine", []))
    assert [o.get("text") for o in empty.find("body")] == ["No feeds yet"]
    assert empty.find("body").find("outline").get("type") is None


# --- 10. JSON Feed 1.0 author ----------------------------------------------------------------------------


def test_json_items_carry_author_beside_authors():
    items = json.loads(render("json", META, entries([topic(1), topic(2, author=None, author_url=None)])))["items"]
    assert items[0]["authors"] == [{"name": "user1", "url": f"{FORUM}/u/user1"}]
    assert items[0]["author"] == items[0]["authors"][0]
    assert "author" not in items[1] and "authors" not in items[1]



# --- 11. what readers show (issue 46) ---------------------------------------------------------------------

SITE = Site(logo_url="https://bücher.example/logo wide.png", icon_url="https://cdn.example/ä.png",
            favicon_url="https://cdn.example/f.ico", language="pt-BR")
PICTURED = [*entries([topic(1, image_url="https://cdn.example/uploads/café 1.png", replies=4),
                      topic(2, image_url=None, replies=None, last_posted_at=at(2))]),
            Entry(kind="post", id=f"{FORUM}/t/3/2", link=f"{FORUM}/t/slug-3/3", title="Topic 3 title", author="user3",
                  author_url=f"{FORUM}/u/user3", updated=at(3), summary="Excerpt of topic 3…",
                  comments=f"{FORUM}/t/3", post_number=2)]


def new_urls(fmt: str, body: bytes) -> list[str]:
    """Every URL the issue's elements carry: thumbnails, icon, logo, image, comments, replies links."""
    if fmt == "json":
        feed = json.loads(body)
        return [feed["icon"], feed["favicon"], *(i["image"] for i in feed["items"] if "image" in i)]
    root = etree.fromstring(body)
    media = {"m": "http://search.yahoo.com/mrss/", "a": ATOM[1:-1]}
    if fmt == "atom":
        return root.xpath("//m:thumbnail/@url | a:icon/text() | a:logo/text() | //a:link[@rel='replies']/@href",
                          namespaces=media)
    return root.xpath("//m:thumbnail/@url | channel/image/url/text() | //item/comments/text()", namespaces=media)


@pytest.mark.parametrize("fmt", FEED_FORMATS)
def test_pictures_icons_comments_and_replies_are_uris_in_valid_feeds(fmt):
    meta = replace(META, site=SITE, ttl=300)
    body = render(fmt, meta, PICTURED)
    urls = new_urls(fmt, body)
    assert len(urls) == {"atom": 4, "rss": 5, "json": 3}[fmt]
    assert [u for u in urls if not is_uri(u)] == []
    assert body == render(fmt, meta, PICTURED)
    if fmt != "json":
        parsed(body)


def test_rss_image_and_refresh_hints_as_rss_2_and_the_syndication_module_define_them():
    channel = etree.fromstring(render("rss", replace(META, site=SITE, ttl=300), PICTURED)).find("channel")
    # RSS 2.0: the image's title and link are the channel's (the W3C validator warns where they differ)
    assert (channel.findtext("image/title"), channel.findtext("image/link")) == (
        channel.findtext("title"), channel.findtext("link"))
    assert channel.findtext("ttl").isdigit() and channel.findtext("language") == "pt-BR"
    sy = "{http://purl.org/rss/1.0/modules/syndication/}"
    assert channel.findtext(f"{sy}updatePeriod") in ("hourly", "daily", "weekly", "monthly", "yearly")
    assert int(channel.findtext(f"{sy}updateFrequency")) >= 1
    # comments: the topic's page, a post's topic; RFC 4685's thr:total only where the count is known
    assert [i.findtext("comments") for i in channel.iter("item")] == [
        PICTURED[0].link, PICTURED[1].link, f"{FORUM}/t/3"]
    atom = etree.fromstring(render("atom", replace(META, site=SITE), PICTURED))
    thr = "{http://purl.org/syndication/thread/1.0}total"
    assert [e.findtext(thr) for e in atom.iter(f"{ATOM}entry")] == ["4", None, None]
