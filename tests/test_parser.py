"""The list parser against every dialect fixture produced by the real upstream renderers, and the edge cases."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlsplit

import feedparser
import pytest

from feedbridge.discourse.fields import MAX_ROW
from feedbridge.discourse.listing import parse_listing
from feedbridge.errors import NotAListError
from feedbridge.models import listing_to_dict
from feedbridge.render.formats import render
from feedbridge.render.meta import FeedMeta, topic_entry

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GOLDEN = sorted(p for p in FIXTURES.rglob("*.md") if p.with_suffix(".expected.json").exists())
C4 = (FIXTURES / "dialects" / "widgets-c4.md").read_text(encoding="utf-8")


def test_every_golden_fixture_is_present():
    names = {p.name for p in GOLDEN}
    assert "dev-discuss-compiler.md" in names
    assert {f"widgets-{d}.md" for d in ("c1", "c2", "c3", "c4", "c4-empty", "c4-flattened", "c4-page2", "p2")} <= names


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_fixture_parses_to_expected(path: Path):
    expected = json.loads(path.with_suffix(".expected.json").read_text(encoding="utf-8"))
    # The plugin dialects carry relative URLs: the caller supplies the forum, as the fetcher does.
    base = expected["base_url"] if expected["dialect"].startswith("p") else None
    got = listing_to_dict(parse_listing(path.read_text(encoding="utf-8"), base_url=base))
    for key, value in expected.items():
        if key == "topics":
            continue
        assert got[key] == value, key
    assert len(got["topics"]) == len(expected["topics"])
    for want, have in zip(expected["topics"], got["topics"], strict=False):
        assert {k: have[k] for k in want} == want
    assert got["skipped"] == 0


def test_seed_list_details():
    listing = parse_listing((FIXTURES / "dev-discuss-compiler.md").read_text(encoding="utf-8"))
    assert listing.url == "https://dev-discuss.pytorch.org/c/compiler/5.md"
    assert len(listing.topics) == 30
    first = listing.topics[1]
    assert first.id == 3441
    assert first.author_url == "https://dev-discuss.pytorch.org/u/markbgilbert"
    assert first.last_posted_at == datetime(2026, 9, 21, 16, 26, 22, tzinfo=UTC)
    assert listing.previous_page_url is None


def test_source_url_resolves_relative_plugin_urls():
    text = (FIXTURES / "dialects" / "widgets-p2.md").read_text(encoding="utf-8")
    listing = parse_listing(text, source_url="https://forum.example.org/c/widgets/9.md")
    assert listing.base_url == "https://forum.example.org"
    assert listing.topics[0].url == "https://forum.example.org/t/about-the-widgets-category/11"
    assert listing.topics[1].author_url == "https://forum.example.org/u/alice_w"


def test_relative_plugin_list_without_a_base_is_refused():
    with pytest.raises(NotAListError, match="relative"):
        parse_listing((FIXTURES / "dialects" / "widgets-p2.md").read_text(encoding="utf-8"))


def test_plugin_text_is_not_unescaped_and_title_ends_at_last_bracket_paren():
    text = "# x\n\n**URL:** /latest.md\n**Topics on this page:** 1\n\n## [a \\[b\\] [c](d) e](/t/slug/5)\n\n**Author:** @a\\b\n"
    topic = parse_listing(text, base_url="https://f.example").topics[0]
    assert topic.title == "a \\[b\\] [c](d) e"
    assert topic.author == "a\\b"
    assert topic.url == "https://f.example/t/slug/5"


def test_plugin_p1_more_topics_marker():
    text = (FIXTURES / "dialects" / "widgets-p2.md").read_text(encoding="utf-8") + "\n_More topics on page 2…_\n"
    listing = parse_listing(text, base_url="https://forum.example.org")
    assert listing.dialect == "p1"
    assert listing.topics[-1].excerpt == "Posted by a deleted account."


def test_localized_labels_and_reader_time_zone():
    text = (
        C4.replace("**Replies:**", "**Antworten:**")
        .replace("**Last updated:**", "**Zuletzt aktualisiert:**")
        .replace("[Next page]", "[Nächste Seite]")
        .replace('"2026-11-20T08:15:30Z"', '"2026-11-20T03:15:30-05:00"')
    )
    listing = parse_listing(text)
    assert listing.dialect == "c4"
    assert listing.next_page_url == "https://forum.example.org/c/widgets/9.md?page=1"
    widget = listing.topics[1]
    assert widget.replies == 40
    assert widget.last_posted_at == datetime(2026, 11, 20, 8, 15, 30, tzinfo=UTC)
    assert widget.last_posted_at.tzinfo is UTC


def test_subfolder_install():
    text = C4.replace("https://forum.example.org/", "https://example.com/forum/")
    listing = parse_listing(text)
    assert listing.base_url == "https://example.com/forum"
    assert listing.topics[0].url == "https://example.com/forum/t/about-the-widgets-category/11"


def test_escaped_text_round_trips():
    listing = parse_listing(C4)
    titles = [t.title for t in listing.topics]
    assert "Widget 2.0 [beta] feedback thread" in titles
    assert "`inline code` in a title" in titles
    assert listing.topics[2].excerpt == "I tried widget --reset but it says <permission denied>."


def test_excerpt_that_looks_like_markdown_stays_text():
    text = C4.replace("Body", "x").replace(
        "Please post your feedback", "\\# not a heading \\--- 1. item \\\\ backslash"
    )
    excerpt = parse_listing(text).topics[1].excerpt
    assert excerpt.startswith("# not a heading --- 1. item \\ backslash")


def test_malformed_block_is_skipped_and_counted(caplog):
    broken = C4.replace(
        "## [Release notes: 1.9](https://forum.example.org/t/release-notes-1-9/640)",
        "## [Release notes: 1.9](https://forum.example.org/t/release-notes-1-9/not-a-number)",
    ).replace('"2026-11-18T22:01:02Z"', '"yesterday-ish"')
    listing = parse_listing(broken)
    assert listing.skipped == 2
    assert [t.id for t in listing.topics] == [11, 812, 512]
    assert "skipped 2 malformed" in caplog.text


def test_all_blocks_malformed_is_not_a_list():
    text = "# t\n\n**URL:** https://f.example/latest.md\n\n---\n\n## [x](https://f.example/t/x/y)\n"
    with pytest.raises(NotAListError, match="malformed"):
        parse_listing(text)


@pytest.mark.parametrize(
    ("body", "seen"),
    [
        ("", "empty"),
        ("   \n\n", "empty"),
        ("<!DOCTYPE html><html><body><form action=/login>", "HTML"),
        ("<html><head><title>Log In</title>", "HTML"),
        ('{"errors": ["not found"]}', "JSON"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00", "not UTF-8|binary"),
        ("# Title only\n\nno url here", "starting"),
        ("Just some text", "starting 'Just some text'"),
        ("\x00\x01binary", "binary"),
    ],
)
def test_not_a_list(body, seen):
    with pytest.raises(NotAListError, match="expected a Discourse topic list") as info:
        parse_listing(body)
    assert info.match(seen)


def test_bytes_input_is_decoded():
    listing = parse_listing(C4.encode("utf-8"))
    assert len(listing.topics) == 5


def test_crlf_line_endings():
    assert listing_to_dict(parse_listing(C4.replace("\n", "\r\n"))) == listing_to_dict(parse_listing(C4))


def test_non_web_urls_never_become_links():
    text = C4.replace("(https://forum.example.org/t/release-notes-1-9/640)", "(javascript:alert(1)//640)").replace(
        "(https://forum.example.org/u/bob)", "(data:text/html,x)")
    listing = parse_listing(text)
    assert 640 not in [t.id for t in listing.topics] and listing.skipped == 1
    bob = next(t for t in listing.topics if t.author == "bob")
    assert bob.author_url == "https://forum.example.org/u/bob"  # made on the forum from the name, not the link


def test_urls_urlsplit_refuses_never_become_links():
    """A broken IPv6 host (`https://[x/…`), which urlsplit refuses: the pages' `http_url` raised on such a link
    (the `.html` view and the front page's preview answered 500). A topic so linked is skipped as a javascript:
    one is, a page link so written is none (a profile link is made from the name: `fields.user_link`), by the fast path and the line loop alike; a relative
    `//[x/…`, which urljoin refuses, refused the whole list."""
    text = C4.replace("(https://forum.example.org/t/release-notes-1-9/640)", "(https://[x/t/release-notes-1-9/640)").replace(
        "(https://forum.example.org/u/bob)", "(https://[x/u/bob)").replace(
        "(https://forum.example.org/c/widgets/9.md?page=1)", "(//[x/c/widgets/9.md?page=1)")
    listing, general, _ = parse_both_ways(text, None)
    assert listing == general
    assert 640 not in [t.id for t in listing.topics] and listing.skipped == 1 and listing.next_page_url is None
    assert next(t for t in listing.topics if t.author == "bob").author_url == "https://forum.example.org/u/bob"
    for topic in listing.topics:
        assert all(urlsplit(url) for url in (topic.url, topic.author_url) if url)


ALL_LISTS = sorted(p for p in FIXTURES.rglob("*.md") if p.read_text(encoding="utf-8").startswith("# ") and "**URL:**" in p.read_text(encoding="utf-8")[:4096])


def parse_both_ways(text: str, base_url: str | None):
    """(fast result, general-path result, topics the fast path read); a refusal is the exception's text."""
    from feedbridge.discourse import listing as parser

    read_fast = []
    real = parser._c4_topic

    def counting(match: re.Match, base: str):
        topic = real(match, base)
        read_fast.extend([topic] if topic else [])
        return topic

    def outcome():
        try:
            return parse_listing(text, base_url=base_url)
        except NotAListError as exc:
            return str(exc)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parser, "_c4_topic", counting)
        fast = outcome()
        patch.setattr(parser, "_C4_TOPIC", re.compile(r"(?!)"))  # never matches: every block takes the line loop
        general = outcome()
    return fast, general, len(read_fast)


@pytest.mark.parametrize("base", [None, "https://forum.example.org"])
@pytest.mark.parametrize("path", ALL_LISTS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fast_path_reads_every_fixture_as_the_line_loop_does(path: Path, base: str | None):
    fast, general, _ = parse_both_ways(path.read_text(encoding="utf-8"), base)
    assert fast == general


def test_fast_path_takes_the_current_layout_pristine_and_flattened():
    for name in ("widgets-c4.md", "widgets-c4-flattened.md"):
        text = (FIXTURES / "dialects" / name).read_text(encoding="utf-8")
        fast, general, matched = parse_both_ways(text, None)
        assert fast == general
        with_author = sum(1 for t in fast.topics if t.author)
        # Deleted authors are left to the line loop, and so is the last block when page links follow it.
        assert with_author - 1 <= matched <= with_author and matched > 0, name
    fast, _, matched = parse_both_ways((FIXTURES / "dev-discuss-compiler.md").read_text(encoding="utf-8"), None)
    assert len(fast.topics) == 30 and matched >= 29


@pytest.mark.parametrize("block, why", [
    ("**Author:** [@a](https://f.org/u/a)\\\n**Author:** 5\\\n**Last updated:** [x](u \"2024-01-01T00:00:00Z\")\n",
     "a second Author row"),
    ("**Author:** [@](https://f.org/u/a)\\\n**Replies:** 5\\\n**Last updated:** [x](u \"2024-01-01T00:00:00Z\")\n",
     "an empty name"),
    ("**Author:** [@a](https://f.org/u/a)\\\n**Replies:** ５\\\n**Last updated:** [x](u \"2024-01-01T00:00:00Z\")\n",
     "a full-width digit"),
    ("**Author:** [@a](https://f.org/u/a)\\\n**Replies:** 5\\\n**Last updated:** [x](u \"not a time\")\n",
     "a bad timestamp"),
    ("**Author:** [@a](https://f.org/u/a)\\\n**Replies:** 5\\\n**Last updated:** [x](u \"2024-01-01T00:00:00Z\")\n**Tags:** x\n",
     "a fourth row"),
    ("**Author:** [@a](javascript:alert(1))\\\n**Replies:** 5\\\n**Last updated:** [x](u \"2024-01-01T00:00:00Z\")\n",
     "a script profile link"),
    ("**Author:** [@a](https://[f.org/u/a)\\\n**Replies:** 5\\\n**Last updated:** [x](u \"2024-01-01T00:00:00Z\")\n",
     "a profile link urlsplit refuses"),
])
@pytest.mark.parametrize("url", ["https://f.org/t/a/7", "https://f.org/t/a/7?page=2", "https://f.org/t/a/7//",
                                 "https://f.org/t/a/7?u=/8", "/t/a/7", "https://[f.org/t/a/7"])
def test_fast_path_agrees_on_blocks_near_its_shape(block, why, url):
    text = f"# T\n\n**URL:** https://f.org/latest.md\n\n---\n\n## [A \\[b\\] title]({url})\n\n{block}\nexcerpt\n\n---\n"
    fast, general, _ = parse_both_ways(text, None)
    assert fast == general, why


def test_a_block_too_long_for_the_fast_path_reads_the_same_through_the_line_loop():
    """Past four rows' worth (`MAX_ROW`) a block takes the line loop, which reads each row capped: the topic
    is the same, the long excerpt included, and only the fast path's count tells which path read it."""
    rows = '**Author:** [@a](https://f.org/u/a)\\\n**Replies:** 5\\\n**Last updated:** [x](u "2024-01-01T00:00:00Z")\n'
    for words, fast_reads in ((10, 1), (4 * MAX_ROW // 5 + 1, 0)):
        excerpt = " ".join(["word"] * words)
        text = f"# T\n\n**URL:** https://f.org/latest.md\n\n---\n\n## [A](https://f.org/t/a/7)\n\n{rows}\n{excerpt}\n\n---\n"
        fast, general, matched = parse_both_ways(text, None)
        assert fast == general and matched == fast_reads, words
        (topic,) = fast.topics
        assert (topic.author, topic.replies, topic.excerpt) == ("a", 5, excerpt)
        assert topic.last_posted_at == datetime(2024, 1, 1, tzinfo=UTC)


def test_a_metadata_row_longer_than_max_row_is_read_as_no_link():
    name = "b" * MAX_ROW
    text = (f"# T\n\n**URL:** https://f.org/latest.md\n\n## [A](https://f.org/t/a/7)\n\n**Author:** [@{name}]"
            f"(https://f.org/u/{name})\\\n**Replies:** 5\n\nexcerpt\n")
    (topic,) = parse_listing(text).topics
    assert topic.author is None and topic.author_url is None and topic.replies == 5


# --- plugin excerpts, stray control characters, lists that are not topic lists (issue 16) --------------

PLUGIN_LIST = ("# w\n\n**URL:** /c/w/9.md\n**Topics on this page:** 2\n\n## [A](/t/a/1)\n\n**Author:** @x\n"
               "**Last posted:** 2024-03-01T09:00:00Z\n\n{excerpt}\n\n---\n\n## [B](/t/b/2)\n\n**Author:** @y\n"
               "**Last posted:** 2024-03-02T09:00:00Z\n")


def test_a_plugin_excerpt_keeps_a_line_that_looks_like_a_rule() -> None:
    excerpt = "&lt;b&gt;escaped&lt;/b&gt; &amp; <i>tagged</i>\n --- \n1. list&hellip;"
    listing = parse_listing(PLUGIN_LIST.format(excerpt=excerpt), base_url="https://forum.example.org")
    assert [t.excerpt for t in listing.topics] == ["<b>escaped</b> & tagged --- 1. list…", None]
    # ...while a line that is exactly `---` between blank lines still separates topics
    assert [t.id for t in listing.topics] == [1, 2]


@pytest.mark.parametrize("stray", ["\x00", "\x1b", "\x0b", "\ufffe"])
def test_a_stray_control_character_in_a_title_is_dropped_not_the_list(stray: str) -> None:
    text = C4.replace("## [About the", f"## [About{stray} the", 1)
    assert stray in text[:4096]
    listing = parse_listing(text)
    first = listing.topics[0]
    assert first.title == "About the widgets category"
    assert all(stray not in (t.title + (t.excerpt or "") + (t.author or "")) for t in listing.topics)
    meta = FeedMeta(title="w", forum_url=listing.base_url, html_url=listing.base_url, feed_id=listing.base_url)
    parsed = feedparser.parse(render("atom", meta, [topic_entry(t, meta.forum_url) for t in listing.topics]))
    assert parsed.bozo == 0 and parsed.entries[0].title == "About the widgets category"


@pytest.mark.parametrize(("body", "seen"), [
    (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03# T\n**URL:** https://f.example/latest.md\n", "gzip-compressed"),
    ("\x1f\x8b\x08\x00# T\n**URL:** https://f.example/latest.md\n", "gzip-compressed"),  # decoded as Latin-1
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "a PNG image"),
    (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "a PDF document"),
    (b"PK\x03\x04\x14\x00\x00\x00\x08\x00", "a zip archive"),
    ("# T\n**URL:** https://f.example/latest.md\n" + "\x00\x01\x02\x03\x1b\x10" * 100, "binary data"),
])
def test_real_binary_is_still_refused(body: str | bytes, seen: str) -> None:
    with pytest.raises(NotAListError, match="binary data") as caught:
        parse_listing(body)
    assert seen in str(caught.value)


def test_a_categories_directory_is_refused_as_a_topic_list() -> None:
    with pytest.raises(NotAListError, match="looks like a categories directory"):
        parse_listing((FIXTURES / "site" / "categories.md").read_text(encoding="utf-8"))
    empty = parse_listing((FIXTURES / "dialects" / "widgets-c4-empty.md").read_text(encoding="utf-8"))  # a real empty list
    assert empty.topics == () and empty.title == "widgets"


def test_a_heading_that_links_outside_t_is_not_a_topic() -> None:
    text = C4.replace("/t/about-the-widgets-category/11)", "/c/widgets/11)", 1)
    listing = parse_listing(text)
    assert 11 not in [t.id for t in listing.topics] and listing.skipped == 1


@pytest.mark.parametrize("past", [-1, 0, 1])
def test_a_row_at_the_edge_of_max_row_is_read_alike_by_both_paths(past: int) -> None:
    """Found by Hypothesis: an author row whose link was one character past MAX_ROW was read by the fast path's
    one regex and, capped, as no author by the general path (`_author`). Now a row past MAX_ROW sends the block
    to the general path, which decides; at MAX_ROW and below both read the author (whose name, past any username
    core keeps, gets no link: `fields.user_link`)."""
    text = (FIXTURES / "dev-discuss-compiler.md").read_text(encoding="utf-8")
    found = re.search(r"\*\*Author:\*\* (\[@(\w+)\]\([^)]+\))", text)
    assert found is not None
    value, name = found.group(1, 2)
    padded = text.replace(f"[@{name}](", f"[@{'(' * (MAX_ROW + past - len(value))}{name}](", 1)
    fast, general, _ = parse_both_ways(padded, None)
    assert fast == general
    assert (general.topics[0].author is not None) == (past <= 0)  # the padded row is the first topic's
    assert general.topics[0].author_url is None and general.topics[1].author_url is not None


def test_a_leap_second_dates_its_topic_the_second_before():
    """RFC 3339 (§5.6) and ISO 8601 allow `23:59:60`, which `datetime` cannot hold: the topic's block was dropped as
    malformed ("skipped 1"), where the same topic of a JSON list was kept undated."""
    text = (FIXTURES / "dev-discuss-compiler.md").read_text(encoding="utf-8")
    listing = parse_listing(text.replace('"2021-01-22T19:19:40Z"', '"2016-12-31T23:59:60Z"', 1))
    whole = parse_listing(text)
    assert listing.skipped == 0 and len(listing.topics) == len(whole.topics)
    assert listing.topics[0].last_posted_at == datetime(2016, 12, 31, 23, 59, 59, tzinfo=UTC)


def test_a_directorys_percent_encoded_slugs_are_the_feed_paths_names():
    """Core stores a slug percent-encoded when `slug_generation_method` is `encoded` (`Slug.encoded_generator`), and
    its directory links `/c/%E4%B8%AD%E6%96%87/7`: a Markdown directory left such categories out (no front page
    choice, no OPML line), and a JSON one offered `c/%E4…/7`, which no feed route reads (a 404). Both are `中文`."""
    from feedbridge.discourse.categories import parse_categories
    from feedbridge.discourse.json_pages import parse_json_categories

    hindi = "%E0%A4%B9%E0%A4%BF%E0%A4%A8%E0%A5%8D%E0%A4%A6%E0%A5%80"
    markdown = (f"# Categories\n\n## [中文](https://f.example/c/%E4%B8%AD%E6%96%87/7)\n\nChinese\n\n"
                f"## [Hindi](https://f.example/c/{hindi}/8)\n\nHindi\n\n## [compiler](https://f.example/c/compiler/5)\n\nx\n")
    document = {"category_list": {"categories": [
        {"id": 7, "name": "中文", "slug": "%E4%B8%AD%E6%96%87"}, {"id": 8, "name": "Hindi", "slug": hindi},
        {"id": 5, "name": "compiler", "slug": "compiler"},
        {"id": 9, "name": "Party", "slug": "%F0%9F%8E%89-news"}]}}  # an emoji's: named, though no path reads it
    assert [(c.slugs, c.id) for c in parse_categories(markdown)] == [("中文", 7), ("हिन्दी", 8), ("compiler", 5)]
    assert [(c.slugs, c.id) for c in parse_json_categories(json.dumps(document))] == [
        ("中文", 7), ("हिन्दी", 8), ("compiler", 5), ("%F0%9F%8E%89-news", 9)]


@pytest.mark.parametrize("length", [34, 50])
def test_a_category_named_in_fifty_cjk_characters_keeps_its_place_in_the_directory(length):
    """Core takes names of up to 50 characters and never cuts an encoded slug (lib/slug.rb: `max_length = 9999`
    for `:encoded`): a name of 34 CJK characters has a slug of 306 characters, and one of 50 of 450. Cut at 300,
    the category was left out of both directories (no front page choice, no name on its entries)."""
    from feedbridge.discourse.categories import parse_categories
    from feedbridge.discourse.json_pages import parse_json_categories
    from feedbridge.feeds.request.spec import route_of

    name = "中" * length
    slug = quote(name)
    assert len(slug) > 300
    markdown = f"# Categories\n\n## [{name}](https://f.example/c/{slug}/7)\n\nx\n\n## [compiler](https://f.example/c/compiler/5)\n\nx\n"
    document = {"category_list": {"categories": [{"id": 7, "name": name, "slug": slug},
                                                 {"id": 5, "name": "compiler", "slug": "compiler"}]}}
    assert [(c.slugs, c.id) for c in parse_categories(markdown)] == [(name, 7), ("compiler", 5)]
    assert [(c.slugs, c.id) for c in parse_json_categories(json.dumps(document))] == [(name, 7), ("compiler", 5)]
    assert route_of(f"c/{name}/7") is not None  # the feed path its directory offers
    # with an emoji, the slug is kept encoded (no feed path names it), the category's name with it: it was read as
    # far as 100 characters, and a name of 11 with an emoji was left out
    party = "中" * (length // 3) + "🎉"
    document = {"category_list": {"categories": [{"id": 9, "name": party, "slug": quote(party)}]}}
    assert len(quote(party)) > 100
    assert [(c.name, c.slugs, c.id) for c in parse_json_categories(json.dumps(document))] == [(party, quote(party), 9)]
