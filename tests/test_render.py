"""Feeds from hand-built topics: validity (feedparser, lxml), identity, dates, order, determinism, hygiene.

feedparser 6.0 (the newest on PyPI) does not read JSON Feed, so JSON output is checked against the
JSON Feed 1.1 rules directly.
"""

from __future__ import annotations

import html
import json
import locale
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import feedparser
import pytest
from lxml import etree

from feedbridge import __version__
from feedbridge.models import Entry, Topic
from feedbridge.render.documents import SLASH_NS, render_atom, render_rss
from feedbridge.render.formats import FEED_FORMATS as FORMATS
from feedbridge.render.formats import FORMATS as REGISTRY
from feedbridge.render.formats import render
from feedbridge.render.json_feed import JSON_FEED_VERSION, render_json
from feedbridge.render.meta import FeedMeta, entry_id, floored, topic_entry

FORUM = "https://forum.example/sub"
ATOM = "{http://www.w3.org/2005/Atom}"
CONTENT_ENCODED = "{http://purl.org/rss/1.0/modules/content/}encoded"
DC_CREATOR = "{http://purl.org/dc/elements/1.1/}creator"
SLASH_COMMENTS = f"{{{SLASH_NS}}}comments"
XML_FORMATS = ("atom", "rss")

META = FeedMeta(
    title="forum.example · compiler · author: smth",
    forum_url=FORUM + "/",
    html_url=FORUM + "/c/compiler/5",
    feed_id="https://feeds.example/forum.example/c/5",
    self_url="https://feeds.example/forum.example/c/5.atom",
    updated=datetime(2026, 3, 28, 8, 0, tzinfo=UTC),  # when the list was read
)


def at(day: int, hour: int = 12) -> datetime:
    return datetime(2026, 3, day, hour, 30, 15, tzinfo=UTC)


def topic(topic_id: int, **fields) -> Topic:
    defaults = dict(
        title=f"Topic {topic_id} title",
        url=f"{FORUM}/t/slug-{topic_id}/{topic_id}",
        author=f"user{topic_id}",
        author_url=f"{FORUM}/u/user{topic_id}",
        replies=topic_id % 5,
        last_posted_at=at(topic_id % 28 + 1),
        excerpt=f"Excerpt of topic {topic_id}…",
    )
    return Topic(id=topic_id, **{**defaults, **fields})


def entries(topics: list[Topic], meta: FeedMeta = META) -> list[Entry]:
    """The topics as the service hands them to the renderers."""
    return [topic_entry(t, meta.forum_url) for t in topics]


# Deliberately not in id or date order: the renderer must keep the order it is given.
TOPICS = [
    topic(20, last_posted_at=at(25), replies=4),
    topic(7, last_posted_at=at(3), replies=0),
    topic(13, last_posted_at=None, author=None, author_url=None, excerpt=None, replies=None),
]


def parsed(fmt: str, meta: FeedMeta = META, topics=TOPICS) -> feedparser.FeedParserDict:
    result = feedparser.parse(render(fmt, meta, entries(topics, meta)))
    assert result.bozo == 0, result.get("bozo_exception")
    return result


def xml_root(fmt: str, meta: FeedMeta = META, topics=TOPICS) -> etree._Element:
    return etree.fromstring(render(fmt, meta, entries(topics, meta)))


def json_feed(meta: FeedMeta = META, topics=TOPICS) -> dict:
    return json.loads(render_json(meta, entries(topics, meta)).decode("utf-8", errors="strict"))


def xml_items(fmt: str, root: etree._Element) -> list[etree._Element]:
    return root.findall(f"{ATOM}entry") if fmt == "atom" else root.findall("channel/item")


def assert_json_feed_1_1(feed: dict) -> None:
    """The MUSTs of https://jsonfeed.org/version/1.1 that this renderer is responsible for."""
    assert feed["version"] == JSON_FEED_VERSION
    assert isinstance(feed["title"], str) and feed["title"]
    assert isinstance(feed["items"], list)
    for item in feed["items"]:
        assert isinstance(item["id"], str) and item["id"]
        assert item.get("content_html") or item.get("content_text")
    assert all(key.startswith("_") for key in feed if key not in _JSON_FEED_TOP_KEYS)


_JSON_FEED_TOP_KEYS = {"version", "title", "home_page_url", "feed_url", "description", "icon", "favicon", "language",
                       "items"}


# --- validity, identity, order -------------------------------------------------------------------


@pytest.mark.parametrize("fmt", XML_FORMATS)
def test_xml_feeds_parse_cleanly_with_ids_titles_links_in_given_order(fmt):
    feed = parsed(fmt)
    assert feed.version == {"atom": "atom10", "rss": "rss20"}[fmt]
    assert feed.feed.title == META.title
    assert feed.feed.link == META.html_url
    assert [e.id for e in feed.entries] == [f"{FORUM}/t/20", f"{FORUM}/t/7", f"{FORUM}/t/13"]
    assert [e.title for e in feed.entries] == [t.title for t in TOPICS]
    assert [e.link for e in feed.entries] == [t.url for t in TOPICS]


def test_json_feed_has_required_fields_ids_and_given_order():
    feed = json_feed()
    assert_json_feed_1_1(feed)
    assert feed["home_page_url"] == META.html_url
    assert feed["feed_url"] == META.self_url
    assert [i["id"] for i in feed["items"]] == [f"{FORUM}/t/20", f"{FORUM}/t/7", f"{FORUM}/t/13"]
    assert [i["title"] for i in feed["items"]] == [t.title for t in TOPICS]
    assert [i["url"] for i in feed["items"]] == [t.url for t in TOPICS]
    assert feed["_feedbridge"] == {"version": __version__}  # no home page to name


def test_entry_id_ignores_trailing_slash_and_keeps_subfolder():
    assert entry_id("https://forum.example/sub/", 42) == "https://forum.example/sub/t/42"
    assert entry_id("https://forum.example", 42) == "https://forum.example/t/42"


@pytest.mark.parametrize("fmt", FORMATS)
def test_id_depends_on_topic_id_only_not_slug_title_or_date(fmt):
    before = [topic(5, title="Old title", url=f"{FORUM}/t/old-title/5", last_posted_at=at(1))]
    after = [topic(5, title="New title", url=f"{FORUM}/t/new-title/5", last_posted_at=at(9))]
    if fmt == "json":
        ids = [json_feed(topics=t)["items"][0]["id"] for t in (before, after)]
    else:
        ids = [parsed(fmt, topics=t).entries[0].id for t in (before, after)]
    assert ids == [f"{FORUM}/t/5"] * 2


def test_rss_guid_is_a_permalink():
    guids = xml_root("rss").findall("channel/item/guid")
    assert [g.get("isPermaLink") for g in guids] == ["true"] * 3
    assert guids[0].text == f"{FORUM}/t/20"


def test_atom_entry_has_exactly_one_alternate_link():
    """The topic's page; a second link is only the threading extension's `replies` (RFC 4685)."""
    for entry in xml_root("atom").findall(f"{ATOM}entry"):
        links = entry.findall(f"{ATOM}link")
        assert [link.get("rel", "alternate") for link in links] in (["alternate"], ["alternate", "replies"])


@pytest.mark.parametrize("fmt", XML_FORMATS)
def test_feed_links_self_and_alternate(fmt):
    feed = parsed(fmt)
    links = {link.rel: link for link in feed.feed.links}
    assert links["self"].href == META.self_url
    assert links["self"].type == REGISTRY[fmt].mime
    assert links["alternate"].href == META.html_url


def test_atom_feed_id_and_generator():
    root = xml_root("atom")
    assert root.findtext(f"{ATOM}id") == META.feed_id
    generator = root.find(f"{ATOM}generator")
    assert generator.text == "feedbridge"
    assert (generator.get("version"), generator.get("uri")) == (__version__, None)  # no home page to name


def test_rss_generator_names_the_version():
    assert xml_root("rss").findtext("channel/generator") == f"feedbridge {__version__}"


def test_dispatch_and_media_types():
    assert set(REGISTRY) == {*FORMATS, "html"}
    assert [REGISTRY[f].mime for f in FORMATS] == ["application/atom+xml", "application/rss+xml", "application/feed+json"]
    assert render("atom", META, entries(TOPICS)) == render_atom(META, entries(TOPICS))
    assert render("rss", META, entries(TOPICS)) == render_rss(META, entries(TOPICS))
    assert render("json", META, entries(TOPICS)) == render_json(META, entries(TOPICS))
    with pytest.raises(ValueError):
        render("html", META, entries(TOPICS))


# --- authors, dates, replies -------------------------------------------------------------------------


def test_atom_authors_with_uri_and_feed_level_fallback():
    feed = parsed("atom")
    assert feed.entries[0].author_detail == {"name": "user20", "href": f"{FORUM}/u/user20"}
    assert "author" not in feed.entries[2]
    # Required by RFC 4287 because topic 13 has no author.
    assert xml_root("atom").find(f"{ATOM}author/{ATOM}name").text == "forum.example"


def test_rss_author_is_dc_creator_not_email_author():
    items = xml_root("rss").findall("channel/item")
    assert [i.findtext(DC_CREATOR) for i in items] == ["user20", "user7", None]
    assert all(i.find("author") is None for i in items)
    assert parsed("rss").entries[1].author == "user7"


def test_json_authors():
    items = json_feed()["items"]
    assert items[0]["authors"] == [{"name": "user20", "url": f"{FORUM}/u/user20"}]
    assert "authors" not in items[2]


def test_atom_dates_updated_and_no_published_without_creation_time():
    feed = parsed("atom")
    assert feed.feed.updated == at(25).isoformat()  # newest last_posted_at, not the first entry's
    # Topic 13 has no date: it takes the feed's, the newest any topic carries.
    assert [e.updated for e in feed.entries] == [at(25).isoformat(), at(3).isoformat(), at(25).isoformat()]
    assert all("published" not in e for e in feed.entries)


def test_rss_pubdate_is_last_activity_when_creation_unknown_else_creation():
    topics = [
        topic(1, last_posted_at=at(20)),
        topic(2, last_posted_at=at(21), created_at=at(2)),
        topic(3, last_posted_at=None),
    ]
    feed = parsed("rss", topics=topics)
    published = [e.get("published_parsed") for e in feed.entries]
    assert published == [at(20).utctimetuple(), at(2).utctimetuple(), None]
    assert feed.feed.updated_parsed == at(21).utctimetuple()  # lastBuildDate


def test_created_at_becomes_atom_published_and_json_date_published():
    topics = [topic(1, created_at=at(2), last_posted_at=at(20))]
    entry = parsed("atom", topics=topics).entries[0]
    assert (entry.published, entry.updated) == (at(2).isoformat(), at(20).isoformat())
    item = json_feed(topics=topics)["items"][0]
    assert (item["date_published"], item["date_modified"]) == ("2026-03-02T12:30:15Z", "2026-03-20T12:30:15Z")


@pytest.mark.parametrize("fmt", XML_FORMATS)
def test_a_date_without_a_timezone_is_refused_when_the_feed_is_built(fmt):
    """feedgen checks every date it is given for a timezone: a naive one (a parser's mistake) fails the build
    instead of being written as if it were the server's local time."""
    with pytest.raises(ValueError, match="timezone"):
        render(fmt, META, entries([topic(1, last_posted_at=datetime(2026, 3, 1, 12, 30))]))


def test_json_dates_only_when_known():
    items = json_feed()["items"]
    assert items[0]["date_modified"] == "2026-03-25T12:30:15Z"
    assert "date_published" not in items[0]
    assert "date_modified" not in items[2]


@pytest.mark.parametrize("fmt", XML_FORMATS)
def test_slash_comments(fmt):
    feed = parsed(fmt)
    assert [e.get("slash_comments") for e in feed.entries] == ["4", "0", None]
    root = xml_root(fmt, topics=[topic(1, replies=12)])
    assert xml_items(fmt, root)[0].findtext(SLASH_COMMENTS) == "12"


def test_json_replies_extension():
    items = json_feed(topics=[topic(1, replies=12), topic(2, replies=None)])["items"]
    assert items[0]["_feedbridge"] == {"replies": 12}
    assert "_feedbridge" not in items[1]


# --- summaries, content, categories --------------------------------------------------------------


def test_summary_is_the_excerpt_as_text():
    tricky = "Compare a<b and c>d & keep <script> as text"
    topics = [topic(1, excerpt=tricky)]
    assert parsed("atom", topics=topics).entries[0].summary == tricky
    assert html.unescape(parsed("rss", topics=topics).entries[0].summary) == tricky
    assert json_feed(topics=topics)["items"][0]["summary"] == tricky


def test_json_content_text_falls_back_to_excerpt_then_title():
    items = json_feed()["items"]
    assert items[0]["content_text"] == TOPICS[0].excerpt
    assert items[2]["content_text"] == TOPICS[2].title


def test_an_atom_entry_without_an_excerpt_or_content_is_summed_up_by_its_title():
    """RFC 4287 §4.1.1.1: an entry without content should carry a summary (the W3C validator's "Missing textual
    content"): a topic whose list row has no excerpt had only its title; JSON Feed's item had its text."""
    bare, body = topic(1, excerpt=None), topic(2, excerpt=None, content_html="<p>post</p>")
    entries = xml_items("atom", xml_root("atom", topics=[bare, body]))
    assert entries[0].findtext(f"{ATOM}summary") == bare.title
    assert entries[1].find(f"{ATOM}summary") is None and entries[1].findtext(f"{ATOM}content") == "<p>post</p>"


def test_full_content_and_summary_together():
    body = "<p>Full <b>post</b> body &amp; more</p>"
    topics = [topic(1, content_html=body)]
    atom = parsed("atom", topics=topics).entries[0]
    assert (atom.content[0].type, atom.content[0].value) == ("text/html", body)
    assert atom.summary == topics[0].excerpt
    item = xml_items("rss", xml_root("rss", topics=topics))[0]
    assert item.findtext(CONTENT_ENCODED) == body
    assert item.findtext("description") == topics[0].excerpt
    json_item = json_feed(topics=topics)["items"][0]
    assert (json_item["content_html"], json_item["summary"]) == (body, topics[0].excerpt)
    assert "content_text" not in json_item


def test_categories_and_tags():
    topics = [topic(1, category="compiler", tags=("inductor", "compiler", "dynamo"))]  # no duplicate
    for fmt in XML_FORMATS:
        terms = [t.term for t in parsed(fmt, topics=topics).entries[0].tags]
        assert terms == ["compiler", "inductor", "dynamo"]
    assert json_feed(topics=topics)["items"][0]["tags"] == ["compiler", "inductor", "dynamo"]
    assert "tags" not in json_feed()["items"][0]


# --- determinism and hygiene -------------------------------------------------------------------------


def test_byte_identical_across_renders():
    first = [render(fmt, META, entries(TOPICS)) for fmt in FORMATS]
    time.sleep(1.01)  # a clock anywhere in the output would show up across a second boundary
    assert [render(fmt, META, entries(TOPICS)) for fmt in FORMATS] == first


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_list_is_a_valid_feed_with_fixed_date(fmt):
    if fmt == "json":
        feed = json_feed(topics=[])
        assert_json_feed_1_1(feed)
        assert feed["items"] == []
        return
    feed = parsed(fmt, topics=[])
    assert feed.entries == []
    # Atom requires a date: when the list was read. RSS leaves lastBuildDate out rather than invent one.
    assert feed.feed.get("updated_parsed") == (META.updated.utctimetuple() if fmt == "atom" else None)


@pytest.mark.parametrize("fmt", XML_FORMATS)
def test_html_ish_title_is_escaped_and_round_trips(fmt):
    title = '<script>alert("x")</script> & <b>bold</b>'
    raw = render(fmt, META, entries([topic(1, title=title)]))
    assert b"<script>" not in raw
    title_tag = f"{ATOM}title" if fmt == "atom" else "title"
    assert xml_items(fmt, etree.fromstring(raw))[0].findtext(title_tag) == title
    assert parsed(fmt, topics=[topic(1, title=title)]).entries[0].title == title


DIRTY = "a\x00b\x08c\x0bd\x1fe\ufffef\uffffg\ud800h\udfffi\tj\nk"
CLEAN = "abcdefghi\tj\nk"


@pytest.mark.parametrize("fmt", FORMATS)
def test_invalid_characters_are_removed_from_every_field(fmt):
    dirty_topic = topic(
        1,
        title=DIRTY,
        author=DIRTY,
        excerpt=DIRTY,
        content_html=DIRTY,
        category=DIRTY,
        tags=(DIRTY + "2", "\x00"),
    )
    dirty_meta = replace(META, title=DIRTY, html_url=META.html_url + "\x00", description=DIRTY)
    raw = render(fmt, dirty_meta, entries([dirty_topic], dirty_meta))
    raw.decode("utf-8", errors="strict")
    if fmt == "json":
        feed = json_feed(dirty_meta, [dirty_topic])
        item = feed["items"][0]
        assert (feed["title"], feed["home_page_url"], feed["description"]) == (CLEAN, META.html_url, CLEAN)
        texts = (item["title"], item["authors"][0]["name"], item["summary"], item["content_html"])
        assert texts == (CLEAN,) * 4
        assert item["tags"] == [CLEAN, CLEAN + "2"]
        return
    etree.fromstring(raw)
    feed = parsed(fmt, dirty_meta, [dirty_topic])
    assert feed.feed.title == CLEAN
    assert feed.entries[0].title == CLEAN
    assert feed.entries[0].author == CLEAN
    assert [t.term for t in feed.entries[0].tags] == [CLEAN, CLEAN + "2"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_blank_title_and_missing_url_get_fallbacks(fmt):
    topics = [topic(9, title="\x00 ", url="")]
    if fmt == "json":
        item = json_feed(topics=topics)["items"][0]
        assert (item["title"], item["url"]) == ("Topic 9", f"{FORUM}/t/9")
        return
    entry = parsed(fmt, topics=topics).entries[0]
    assert (entry.title, entry.link) == ("Topic 9", f"{FORUM}/t/9")


@pytest.mark.parametrize("fmt", XML_FORMATS)
def test_stylesheet_processing_instruction_only_when_asked(fmt):
    assert b"xml-stylesheet" not in render(fmt, META, entries(TOPICS))
    meta = replace(META, stylesheet_url="/static/feed.xsl?v=1&x=2")
    raw = render(fmt, meta, entries(TOPICS))
    assert raw.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n<?xml-stylesheet ')
    pi = etree.fromstring(raw).getprevious()
    assert pi.target == "xml-stylesheet"
    assert pi.get("type") == "text/xsl" and html.unescape(pi.get("href")) == "/static/feed.xsl?v=1&x=2"
    parsed(fmt, meta)


def test_description():
    rss = xml_root("rss", META)
    assert rss.findtext("channel/description") == f"Topics from {META.title}"
    assert json_feed(META)["description"] == f"Topics from {META.title}"
    custom = replace(META, description="Mine", self_url=None)
    assert json_feed(custom)["description"] == "Mine"
    assert "feed_url" not in json_feed(custom)


# --- performance -------------------------------------------------------------------------------------


def calls_to_render(fmt: str, topics: list[Topic]) -> int:
    """Python and C function calls made while rendering: a count of the work, the same on any machine
    however busy (the timings are bench/micro.py's)."""
    calls, made = 0, entries(topics)

    def count(frame, event, arg) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(count)
    try:
        render(fmt, META, made)
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("fmt", FORMATS)
def test_cost_per_entry_stays_flat(fmt):
    many = [topic(i, last_posted_at=at(1) - timedelta(minutes=i)) for i in range(1, 1001)]
    small, large = calls_to_render(fmt, many[:100]), calls_to_render(fmt, many)
    # Linear work makes ten times the calls for ten times the entries (a little less: the feed's own
    # elements are made once); anything done per entry for every other entry would make ~100 times.
    assert large < 10 * small * 1.1


# --- renders share nothing -------------------------------------------------------------------------


def test_threads_rendering_the_same_topics_all_get_the_same_bytes():
    topics = [topic(i, content_html=f"<p>{i}</p>", tags=("gpu",)) for i in range(1, 31)]
    want = {fmt: render(fmt, META, entries(topics)) for fmt in XML_FORMATS}

    def renders(n: int) -> list[bool]:
        return [render(fmt, META, entries(topics)) == want[fmt] for fmt in (XML_FORMATS * 20)[n % 2:][:20]]

    with ThreadPoolExecutor(8) as pool:
        results = [ok for done in pool.map(renders, range(8)) for ok in done]
    assert len(results) == 160 and all(results)


def test_threads_rendering_rss_leave_the_process_locale_as_it_was():
    """feedgen writes each RSS date between `setlocale(LC_ALL, "C")` and a restore of the locale it saw: two
    threads doing so at once could leave the whole process in the C locale, and every later text file opened
    without an encoding was read as ASCII (the suite failed so on Python 3.13). With the interpreter asked to
    switch threads every microsecond, these renders without the renderer's lock left the process in the C
    locale in 30 runs of 31 here."""
    before = locale.setlocale(locale.LC_ALL)
    assert before != "C"  # else a process left in the C locale would look unchanged
    topics = [topic(i) for i in range(1, 31)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: [render("rss", META, entries(topics)) for _ in range(40)], range(8)))
    finally:
        sys.setswitchinterval(interval)
        after = locale.setlocale(locale.LC_ALL)
        locale.setlocale(locale.LC_ALL, before)  # a failure here must not change the rest of the suite
    assert after == before


GREENLETS = """
from gevent import monkey
monkey.patch_all()  # first, as gunicorn's gevent worker does before it imports the app
import locale
import gevent
from feedbridge.render import turns
from feedbridge.render.formats import render
from tests.test_render import META, entries, topic
turns.TURN = 0.0  # a turn at every entry, also while an RSS render holds the lock
before = locale.setlocale(locale.LC_ALL)
topics = entries([topic(i) for i in range(1, 31)])
jobs = [gevent.spawn(lambda: [render("rss", META, topics) for _ in range(5)]) for _ in range(8)]
gevent.joinall(jobs, raise_error=True)
print(len({body for job in jobs for body in job.value}), locale.setlocale(locale.LC_ALL) == before)
"""


def test_greenlets_rendering_rss_wait_for_each_other_without_blocking_the_loop():
    """Under the gevent worker, eight greenlets render RSS at once, each taking its turns while it holds the lock
    around feedgen's locale switch: they all finish, with the same bytes, and the locale as it was. The lock is
    gevent's once gevent has patched `threading`; one made before (the renderer imported before the patch) would
    block the worker's only thread when a second render asks for it, and this script never ends."""
    done = subprocess.run([sys.executable, "-c", GREENLETS], cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "True"]


def test_an_undated_entry_takes_each_feeds_own_date():
    undated = [topic(1, last_posted_at=None)]
    for day in (3, 9):
        feed = parsed("atom", replace(META, updated=at(day)), undated)
        assert feed.entries[0].updated_parsed == at(day).utctimetuple()


def test_equal_times_in_any_zone_give_the_same_bytes():
    """Topics that compare equal give equal feeds (and ETags): dates are written in UTC."""
    plus_two = timezone(timedelta(hours=2))
    zoned = [topic(1, last_posted_at=at(5).astimezone(plus_two), created_at=at(4).astimezone(plus_two))]
    utc = [topic(1, last_posted_at=at(5), created_at=at(4))]
    assert zoned == utc
    for fmt in XML_FORMATS:
        first = render(fmt, META, entries(zoned))
        assert render(fmt, META, entries(utc)) == first
        assert b"+02:00" not in first and b"+0200" not in first


# --- real data ---------------------------------------------------------------------------------------


def test_round_trip_of_the_dev_discuss_fixture():
    from feedbridge.discourse import listing as parser
    text = (Path(__file__).parent.parent / "fixtures" / "dev-discuss-compiler.md").read_text(encoding="utf-8")
    listing = parser.parse_listing(text)
    forum = "https://dev-discuss.pytorch.org"
    meta = FeedMeta(
        title="dev-discuss.pytorch.org · compiler",
        forum_url=forum,
        html_url=f"{forum}/c/compiler/5",
        feed_id=f"{forum}/c/compiler/5",
    )
    want_ids = [f"{forum}/t/{t.id}" for t in listing.topics]
    assert len(want_ids) > 10
    for fmt in XML_FORMATS:
        feed = parsed(fmt, meta, listing.topics)
        assert [e.id for e in feed.entries] == want_ids
        assert [e.title for e in feed.entries] == [t.title for t in listing.topics]
    feed = json_feed(meta, listing.topics)
    assert_json_feed_1_1(feed)
    assert [i["id"] for i in feed["items"]] == want_ids


def test_a_time_in_milliseconds_is_written_as_the_same_time_in_whole_seconds_in_every_format() -> None:
    """A JSON list dates to the millisecond (core's `2026-03-05T12:30:15.789Z`), a Markdown list to the second: Atom
    wrote the milliseconds, so every entry's `updated` changed, and readers marked them all again, when a forum's
    lists came to be read through the other source. Each format now writes the same whole seconds for both."""
    exact = [topic(7, last_posted_at=at(5), created_at=at(4))]
    fine = [topic(7, last_posted_at=at(5) + timedelta(milliseconds=789), created_at=at(4) + timedelta(microseconds=250))]
    for fmt in ("atom", "rss", "json"):
        assert render(fmt, META, entries(fine)) == render(fmt, META, entries(exact)), fmt


def test_feed_date_reads_back_the_date_an_atom_feed_gave_itself() -> None:
    from feedbridge.render.documents import feed_date

    written = render("atom", META, [])
    assert feed_date(written) == (META.feed_id, META.updated.timestamp())
    assert feed_date(render("atom", META, entries(TOPICS))) == (META.feed_id, at(25).timestamp())  # the newest entry's
    odd = replace(META, feed_id="https://f.example/latest.md?a=1&b=<2>")  # its id as written, unescaped
    assert feed_date(render("atom", odd, [])) == ("https://f.example/latest.md?a=1&b=%3C2%3E", META.updated.timestamp())
    # which is the floor of that feed's next build (`floored`), and of no other's
    floor = feed_date(render("atom", odd, []))
    assert floored(odd, None, floor).floor == floored(odd, None, (None, floor[1])).floor == META.updated
    assert floored(META, None, floor).floor is None
    for junk in (b"", b"<updated>yesterday</updated>", b"<updated>2026-13-40T99:00:00Z</updated>", b"\xff" * 70_000,
                 b"<updated>2026-01-01T00:00:00Z</updated>", b"<updated>2026-01-01T00:00:00Z</updated><id>x</id>"):
        assert feed_date(junk) is None  # no date, or no feed id before it
