"""Topic pages (`/t/SLUG/ID.md`) parsed into `TopicPage`, first posts turned into safe HTML, `enrich()`.

Fixtures live where the fake forum serves them, `fixtures/site/t/SLUG/ID.md` (page N of a topic:
`ID/page-N.md`), so a full-content feed of the compiler category finds them; 2742 has no file and 404s.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import httpx
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedbridge.discourse.fields import MAX_ROW
from feedbridge.discourse.topic import TopicPage, parse_topic
from feedbridge.errors import NotATopicError
from feedbridge.feeds.sources.dialects import enrich
from feedbridge.models import Topic
from feedbridge.render.sanitize import MAX_MARKDOWN_CHARS, markdown_to_safe_html

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
TOPICS = ROOT / "site" / "t"
HOST = "https://dev-discuss.pytorch.org"

POLYHEDRAL = "rfc-polyhedral-optimization-pass-for-pytorch-inductor/3341.md"
ARENA = "rfc-0036-zero-gc-64-byte-cache-aligned-flat-arena-for-speculative-decoding-verification/3441.md"
HOSTILE = "review-request-custom-kernel-attribution-benchmarks-vs-torch-compile-for-decode-workloads/3411.md"
MINCUT = "min-cut-optimal-recomputation-i-e-activation-checkpointing-with-aotautograd/467.md"
MINCUT_2 = "min-cut-optimal-recomputation-i-e-activation-checkpointing-with-aotautograd/467/page-2.md"
TOOLKIT = "torch-compile-as-a-toolkit-manipulating-dynamo-outputs/3306.md"
ABOUT = "about-the-compiler-category/14.md"
ESCAPED = "rfc-my-op-t/4001.md"
ORPHAN = "old-build-question/998.md"

# path: (id, category, tags, created_at, post 1 start, post 1 end)
GOLDEN = {
    POLYHEDRAL: (3341, "compiler", ("inductor", "rfc", "loop-fusion"), "2026-05-28T14:03:11Z",
                 "## RFC: Polyhedral Optimization Pass", "especially on **compile-time cost** and *dynamic shapes*."),
    ARENA: (3441, "compiler", ("rfc", "speculative-decoding"), "2026-07-15T16:30:45Z",
            "We have submitted RFC-0036:", "---\n\n_Edit: fixed the table units._"),
    HOSTILE: (3411, "compiler", ("benchmarks",), "2026-07-01T05:54:04Z",
              "Hi PyTorch compiler folks,", f"![results chart]({HOST}/uploads/default/original/2X/f/f00d.png)"),
    MINCUT: (467, "compiler", ("aotautograd", "memory"), "2022-02-02T20:07:05Z",
             "**Intro**: In this note", "/notebooks/aot_autograd_optimizations.html)."),
    MINCUT_2: (467, "compiler", ("aotautograd", "memory"), "2022-02-02T20:07:05Z", None, None),
    TOOLKIT: (3306, "compiler", ("dynamo", "fx"), "2026-04-03T09:15:02Z",
              "Ich möchte `torch.compile` als Werkzeugkasten", "```\n\nGeht das ohne private APIs?"),
    ABOUT: (14, "compiler", (), "2021-01-22T19:19:40Z",
            "Discussion of the PyTorch compiler stack", "[contribution guide](/t/how-to-contribute/7) before posting."),
    ESCAPED: (4001, "compiler <internals>", ("my_op", "rfc", "c__api"), "2026-08-03T09:00:00Z",
              "Proposal: add `my_op<T>`", "such as \\*literal asterisks\\* stays Markdown for the converter."),
    ORPHAN: (998, None, (), "2023-03-03T15:03:03Z", "My build stops with:\n\n    fatal error:", "What am I missing?"),
}


def read(path: str) -> str:
    return (TOPICS / path).read_text(encoding="utf-8")


def iso(moment: datetime | None) -> str | None:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None


def flatten(text: str) -> str:
    """What the copying tool does to a page (see FORMAT.md): div lines become line breaks, whitespace squeezed."""
    segments = re.split(r"^[ \t]*</?div[^>]*>[ \t]*$", text, flags=re.MULTILINE)
    return "\n".join(" ".join(segment.split()) for segment in segments)


def one_line(text: str) -> str:
    return " ".join(text.split())


def without_divs(text: str) -> str:
    return re.sub(r"^[ \t]*</?div[^>]*>[ \t]*\n", "", text, flags=re.MULTILINE)


def summary(page: TopicPage) -> tuple:
    return page.id, page.url, page.category, page.tags, iso(page.created_at)


class Tags(HTMLParser):
    """Every start tag with its attributes, as a browser's tokenizer would see them."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag


def assert_safe(html: str) -> None:
    for tag, attrs in Tags(html).tags:
        assert tag not in {"script", "style", "iframe", "object", "embed", "form", "input", "svg"}, html
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, html)
            assert name != "style" or re.fullmatch(r"text-align:\s*\w+;?", value or ""), (tag, value)
            if name in ("href", "src"):
                assert (value or "").startswith(("https://", "http://", "mailto:")), (tag, name, value)


# --- parsing ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", GOLDEN)
def test_golden_values(path: str) -> None:
    topic_id, category, tags, created, start, end = GOLDEN[path]
    page = parse_topic(read(path))
    assert page.id == topic_id
    assert page.url == f"{HOST}/t/{path.split('/')[0]}/{topic_id}"
    assert (page.category, page.tags) == (category, tags)
    assert iso(page.created_at) == created and page.created_at.tzinfo is UTC
    if start is None:
        assert page.first_post_markdown is None
    else:
        assert page.first_post_markdown.startswith(start)
        assert page.first_post_markdown.endswith(end)


def test_horizontal_rules_inside_a_post_stay_in_it_and_the_separator_does_not() -> None:
    first = parse_topic(read(POLYHEDRAL)).first_post_markdown
    assert "(/uploads/default/original/2X/7/7c1e0b5d4a.png)\n\n---\n\n### Prior art" in first
    assert not first.rstrip().endswith("---")
    assert "How does this interact" not in first  # post 2
    assert parse_topic(read(ARENA)).first_post_markdown.count("\n---\n") == 3


def test_the_reader_time_zone_offset_is_normalised_to_utc() -> None:
    page = parse_topic(read(ARENA))
    assert page.created_at == datetime(2026, 7, 15, 16, 30, 45, tzinfo=UTC)


def test_post_bodies_stay_markdown_with_their_escapes_and_indentation() -> None:
    assert "`C:\\temp`" in parse_topic(read(ESCAPED)).first_post_markdown
    assert "\n\n    fatal error: cuda.h: No such file or directory\n\n" in parse_topic(read(ORPHAN)).first_post_markdown


def test_a_later_page_has_no_first_post_but_the_topic_header() -> None:
    page = parse_topic(read(MINCUT_2))
    assert page.first_post_markdown is None
    assert page.created_at == datetime(2022, 2, 2, 20, 7, 5, tzinfo=UTC)


@pytest.mark.parametrize("trailer", ["\n\n[Next page]({url}.md?page=2)",
                                     "\n\n---\n\n[Previous page]({url}.md) · [Next page]({url}.md?page=2)"])
def test_pagination_links_are_cut_off_the_last_post(trailer: str) -> None:
    url = f"{HOST}/t/{ARENA.removesuffix('.md')}"
    page = parse_topic(read(ARENA).rstrip("\n") + trailer.format(url=url) + "\n")
    assert page.first_post_markdown == parse_topic(read(ARENA)).first_post_markdown


def test_a_garbled_page_row_is_not_read_as_the_category() -> None:
    garbled = read(MINCUT).replace("**Category:** compiler\n", "**Page:** 1x\n")
    assert parse_topic(garbled).category is None


@pytest.mark.parametrize("path", GOLDEN)
@pytest.mark.parametrize("variant", [flatten, one_line, without_divs, lambda text: text.replace("\n", "\r\n")],
                         ids=["flattened", "one-line", "without-divs", "crlf"])
def test_whitespace_variants_give_the_same_page(path: str, variant) -> None:
    pristine = parse_topic(read(path))
    varied = parse_topic(variant(read(path)))
    assert summary(varied) == summary(pristine)
    squeeze = (lambda md: " ".join(md.split()) if md else md) if variant in (flatten, one_line) else (lambda md: md)
    assert squeeze(varied.first_post_markdown) == squeeze(pristine.first_post_markdown)


def test_the_flattened_fixture_is_really_flattened() -> None:
    assert read(ABOUT).count("\n") == 3 and "<div" not in read(ABOUT)


def test_labels_are_not_needed_beyond_url_and_page() -> None:
    assert "**Kategorie:**" in read(TOOLKIT)
    page = parse_topic(read(TOOLKIT))
    assert (page.category, page.tags) == ("compiler", ("dynamo", "fx"))
    lone = parse_topic(read(TOOLKIT).replace("**Schlagwörter:** dynamo, fx\\\n", ""))
    assert (lone.category, lone.tags) == ("compiler", ())


def test_missing_created_falls_back_to_the_first_post_and_otherwise_is_none() -> None:
    assert "**Created:**" not in read(ORPHAN)
    assert parse_topic(read(ORPHAN)).created_at == datetime(2023, 3, 3, 15, 3, 3, tzinfo=UTC)
    no_created = re.sub(r"\*\*Created:\*\*.*\n", "", read(MINCUT_2))
    assert parse_topic(no_created).created_at is None


def test_a_created_row_longer_than_max_row_is_read_as_no_date() -> None:
    """The link patterns read at most `MAX_ROW` characters of a row, as in lists: a longer Created row is no
    date, and the creation time comes from the first post as when the row is missing."""
    row = re.search(r"\*\*Created:\*\*.*\n", read(MINCUT)).group()
    posted = datetime(2022, 2, 2, 20, 7, 5, tzinfo=UTC)  # the first post's `####` line
    for text_chars, want in ((MAX_ROW // 2, datetime(2020, 1, 1, tzinfo=UTC)), (MAX_ROW, posted)):
        long_row = f'**Created:** [{"x" * text_chars}]({HOST}/t/{MINCUT.removesuffix(".md")} "2020-01-01T00:00:00Z")\n'
        assert parse_topic(read(MINCUT).replace(row, long_row)).created_at == want, text_chars


def test_an_author_line_longer_than_max_row_is_not_a_posts_metadata() -> None:
    """In a page without its metadata divs a `###` author line belongs to the `####` line after it only when
    its author link is within the line's first `MAX_ROW` characters; past them it is body text."""
    for name_chars, in_first_post in ((MAX_ROW // 4, False), (MAX_ROW, True)):  # the name is in the URL too
        name = "b" * name_chars
        text = without_divs(read(MINCUT)).replace("[@albanD](https://dev-discuss.pytorch.org/u/albanD)",
                                                  f"[@{name}](https://dev-discuss.pytorch.org/u/{name})")
        first = parse_topic(text).first_post_markdown
        assert first.startswith("**Intro**")
        assert (f"[@{name}]" in first) is in_first_post, name_chars


def test_without_url_row_the_topic_url_comes_from_the_links_or_the_source() -> None:
    no_url = re.sub(r"\*\*URL:\*\*.*\n", "", read(POLYHEDRAL))
    assert summary(parse_topic(no_url)) == summary(parse_topic(read(POLYHEDRAL)))
    bare = re.sub(r"\*\*(URL|Created):\*\*.*\n", "", read(MINCUT_2))
    assert parse_topic(bare).url == f"{HOST}/t/{MINCUT.removesuffix('.md')}"
    page = parse_topic("# Only a title\n\nand some text", source_url="https://forum.example.org/t/slug/9.md?page=3")
    assert (page.id, page.url) == (9, "https://forum.example.org/t/slug/9")
    assert page.first_post_markdown is None


def test_relative_urls_are_resolved_against_the_base() -> None:
    text = read(MINCUT).replace(f"{HOST}/t/", "/t/")
    page = parse_topic(text, base_url="https://forum.example.org")
    assert page.url == f"https://forum.example.org/t/{MINCUT.removesuffix('.md')}"
    assert page.first_post_markdown.startswith("**Intro**")


def test_a_paged_link_to_another_topic_at_the_end_of_a_post_is_content() -> None:
    text = read(ABOUT).rstrip("\n") + " [see page 2](https://dev-discuss.pytorch.org/t/other/77.md?page=2)\n"
    page = parse_topic(text)
    assert page.first_post_markdown.endswith("[see page 2](https://dev-discuss.pytorch.org/t/other/77.md?page=2)")


def test_a_post_link_urlsplit_refuses_is_no_post_link() -> None:
    """A reply's date link to a broken IPv6 host (`https://[x/…`): urlsplit raised, and the topic lost its
    content; now that link is no post's (the reply's lines are the first post's, as under a metadata div
    without a post link), and the topic keeps its header and first post."""
    text = read(POLYHEDRAL)
    broken = text.replace("(https://dev-discuss.pytorch.org/t/rfc-polyhedral-optimization-pass-for-pytorch-inductor/3341/2 ",
                          "(https://[x/t/rfc-polyhedral-optimization-pass-for-pytorch-inductor/3341/2 ")
    assert broken != text
    page, original = parse_topic(broken), parse_topic(text)
    assert (page.id, page.url, page.created_at) == (original.id, original.url, original.created_at)
    assert page.first_post_markdown.startswith(original.first_post_markdown)


def test_a_metadata_div_without_a_post_link_is_body_text() -> None:
    text = read(ARENA).replace("_Edit: fixed", '<div class="post-metadata">\n\nnot metadata\n\n</div>\n\n_Edit: fixed')
    first = parse_topic(text).first_post_markdown
    assert '<div class="post-metadata">\n\nnot metadata\n\n</div>' in first and first.endswith("table units._")


@pytest.mark.parametrize(("text", "seen"), [
    ("", "empty"),
    (" \n\t\n", "empty"),
    ("<!DOCTYPE html>\n<html><head><title>Log In</title></head><body></body></html>", "HTML"),
    ('{"errors": ["You are not permitted to view the requested resource."]}', "JSON"),
    ("[]", "JSON"),
    ("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", "binary"),
    (b"\xff\xd8\xff\xe0\x00\x10JFIF", "a JPEG image"),
    (b"# caf\xe9 cr\xe8me\n", "not UTF-8"),
    (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", "gzip-compressed"),
    ("# " + "\x00\x01\x02\x1b" * 64, "binary data"),
    ("Just some text, no heading", "starting 'Just some text"),
    ((ROOT / "dev-discuss-compiler.md").read_text(encoding="utf-8"), "not a topic URL"),
    ((ROOT / "dialects" / "widgets-c4.md").read_text(encoding="utf-8"), "not a topic URL"),
    ("# Title\n\n" + "x" * (5 * 1024 * 1024), "limit"),
])
def test_what_is_not_a_topic_is_refused_with_a_reason(text: str | bytes, seen: str) -> None:
    with pytest.raises(NotATopicError, match="expected a Discourse topic in Markdown") as caught:
        parse_topic(text)
    assert seen in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_bytes_in_utf8_are_accepted() -> None:
    assert summary(parse_topic(read(TOOLKIT).encode())) == summary(parse_topic(read(TOOLKIT)))


_FRAGMENTS = st.sampled_from([
    "# T", "**URL:** https://h.org/t/s/1", "**URL:** /t/s/2", "**Tags:** a, b",
    "**Created:** [x](https://h.org/t/s/1 \"2020-01-01T00:00:00Z\")", '<div class="post-metadata">', "</div>",
    "### [@u](https://h.org/u/u)", "#### [d](https://h.org/t/s/1/1 \"2020-02-30T99:00Z\")",
    "#### [d](https://h.org/t/s/1/2 \"2021-01-01T00:00:00+05:30\")", "---", " --- ", "\n", "\n\n", "\\",
    "[Next page](https://h.org/t/s/1.md?page=2)",
])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_FRAGMENTS, st.text(max_size=20)), max_size=30))
def test_any_text_gives_a_page_or_not_a_topic_error(parts: list[str]) -> None:
    try:
        page = parse_topic("# " + "".join(parts), source_url="https://h.org/t/s/1.md")
    except NotATopicError:
        return
    assert page.id > 0
    assert page.created_at is None or page.created_at.tzinfo is UTC


# --- HTML ------------------------------------------------------------------------------------------------

def test_hostile_post_is_defused() -> None:
    page = parse_topic(read(HOSTILE))
    html = markdown_to_safe_html(page.first_post_markdown, page.url)
    assert_safe(html)
    for needle in ("<script", "onerror", "onclick", "onmouseover", "javascript:", "JaVaScRiPt", "data:", "<iframe",
                   "frame fallback text", "display: none", "position:fixed", "<form", "password"):
        assert needle not in html, needle
    # ...while the harmless parts survive
    assert '<pre><code>&lt;script&gt;alert("this one is only shown as code")&lt;/script&gt;' in html
    assert '<a href="https://github.com/MilkClouds/decode-attribution" rel="nofollow noopener">decode-' in html
    assert f'<img src="{HOST}/uploads/default/original/2X/f/f00d.png" alt="results chart">' in html
    assert "<blockquote>\n<p>The narrow claim is not that custom kernels are useless.</p>\n</blockquote>" in html
    assert "Click here" in html  # the javascript: link keeps its text, loses its URL and its element


def test_normal_post_keeps_code_images_quotes_links_and_rules() -> None:
    page = parse_topic(read(POLYHEDRAL))
    html = markdown_to_safe_html(page.first_post_markdown, page.url)
    assert_safe(html)
    assert "<pre><code>def f(x, w):\n    y = x @ w          # matmul, then\n    return y.relu() &lt; 0.5" in html
    assert f'<img src="{HOST}/uploads/default/original/2X/7/7c1e0b5d4a.png" alt="Fusion graph before' in html
    assert "<blockquote>\n<p>Polyhedral compilation represents" in html
    assert '<a href="https://github.com/pytorch/pytorch/compare/main...polyhedral-inductor" rel="nofollow noopener">' \
        in html
    assert html.count("<hr>") == 1 and "<h3>Prior art</h3>" in html
    assert "<li>MLIR's <code>affine</code> dialect</li>" in html


def test_urls_are_made_absolute_and_limited_to_web_and_mail_schemes() -> None:
    html = markdown_to_safe_html(
        "[a](/u/x) [b](y) [c](#f) [d](//cdn.example/z) [e](mailto:a@b.org) [f](ftp://h/x) [g](vbscript:x) "
        "![i](data:image/png;base64,AAAA) <a href='jav&#x09;ascript:alert(1)'>h</a>",
        "https://h.org/t/s/5",
    )
    hrefs = [attrs.get("href") for tag, attrs in Tags(html).tags if tag == "a"]
    # Links whose URL was refused are unwrapped (an <a> with rel but no href is invalid HTML), the image without
    # a source removed; the text stays.
    assert hrefs == ["https://h.org/u/x", "https://h.org/t/s/y", "https://h.org/t/s/5#f", "https://cdn.example/z",
                     "mailto:a@b.org"]
    assert "<img" not in html and " f g" in html and " h</p>" in html
    assert_safe(html)


def test_allowed_markup_and_table_alignment_survive_but_other_styles_do_not() -> None:
    html = markdown_to_safe_html(
        "| a | b |\n|:--|--:|\n| 1 | 2 |\n\n~~old~~ H<sub>2</sub>O x<sup>2</sup> <kbd>Ctrl</kbd>\n\n"
        '<details><summary>More</summary>\n\nhidden\n</details>\n\n<p style="color:red" class="x" id="y">styled</p>',
        "https://h.org/",
    )
    for fragment in ('<th style="text-align:left">a</th>', '<td style="text-align:right">2</td>', "<s>old</s>",
                     "<sub>2</sub>", "<sup>2</sup>", "<kbd>Ctrl</kbd>", "<details><summary>More</summary>",
                     "<p>styled</p>"):
        assert fragment in html, fragment
    assert_safe(html)


def test_a_huge_post_is_cut_to_the_cap() -> None:
    markdown = "A line of a very long post.\n\n" * 20_000  # ~580 KiB
    assert len(markdown) > 2 * MAX_MARKDOWN_CHARS
    html = markdown_to_safe_html(markdown, "https://h.org/")
    assert html.endswith("<p>…</p>")
    assert html.count("<p>A line") < MAX_MARKDOWN_CHARS // len("A line of a very long post.\n\n") + 1


def test_the_base_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="http"):
        markdown_to_safe_html("[a](x)", "javascript:alert(1)//")


_DANGER = st.sampled_from([
    "<script>alert(1)</script>", "<SCRIPT SRC=//x.js>", "<scr<script>ipt>", "<img src=x onerror=alert(1)>",
    "<svg onload=alert(1)>", "<a href=\"javascript:alert(1)\">x</a>", "[x](javascript:alert(1))",
    "![x](data:text/html,<script>)",
    "<iframe srcdoc='<script>alert(1)</script>'>", "<style>*{}</style>", "<body onload=x>", " onclick=\"x\" ",
    "<a href='  java\tscript:x'>", "<math><mi xlink:href=\"javascript:x\">", "<!-- <script> -->",
    "<![CDATA[<script>]]>",
    "```\n", "`", "> ", "    ", "\n", "<", ">", "\"", "'", "=", "&#60;script&#62;", "&lt;script", "<div ", "<p ",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_DANGER, st.text(max_size=12)), max_size=25))
def test_no_input_produces_script_or_event_handlers(parts: list[str]) -> None:
    html = markdown_to_safe_html("".join(parts), "https://h.org/t/s/1")
    assert "<script" not in html.lower()
    assert_safe(html)


# --- enrich ----------------------------------------------------------------------------------------------

def listed(topic_id: int) -> Topic:
    return Topic(id=topic_id, title="from the list", url=f"{HOST}/t/slug/{topic_id}", author="someone", replies=2,
                 last_posted_at=datetime(2026, 6, 9, 19, 10, 29, tzinfo=UTC), excerpt="An excerpt…")


def test_enrich_adds_content_created_category_and_tags_and_keeps_the_rest() -> None:
    topic = listed(3341)
    enriched = enrich(topic, parse_topic(read(POLYHEDRAL)), HOST)
    assert enriched.created_at == datetime(2026, 5, 28, 14, 3, 11, tzinfo=UTC)
    assert (enriched.category, enriched.tags) == ("compiler", ("inductor", "rfc", "loop-fusion"))
    assert enriched.content_html.startswith("<h2>RFC: Polyhedral Optimization Pass for PyTorch Inductor</h2>")
    assert '<img src="https://dev-discuss.pytorch.org/uploads/' in enriched.content_html
    assert msgspec.structs.replace(enriched, created_at=None, content_html=None, category=None, tags=()) == topic
    assert topic.content_html is None  # the original is untouched


def test_enrich_resolves_relative_links_against_the_topic_url() -> None:
    enriched = enrich(listed(14), parse_topic(read(ABOUT)), HOST)
    assert f'<a href="{HOST}/t/how-to-contribute/7" rel="nofollow noopener">' in enriched.content_html


@pytest.mark.parametrize("named", ["https://evil.example/t/slug/14", "//evil.example/t/slug/14",
                                   "https://dev-discuss.pytorch.org.evil.example/t/slug/14"])
def test_enrich_resolves_relative_links_on_the_forum_whatever_host_the_page_names(named: str) -> None:
    # The page's **URL:** row named another host: the post's relative links and images went there
    # (`/uploads/setup.exe` from evil.example), where the entry's own link was the forum's.
    page = replace(parse_topic(read(ABOUT)), url=named,
                   first_post_markdown="Get the [installer](/uploads/setup.exe), ![pic](/uploads/p.png), [me](../../u/a).")
    shown = enrich(listed(14), page, HOST).content_html
    assert f'href="{HOST}/uploads/setup.exe"' in shown and f'src="{HOST}/uploads/p.png"' in shown
    assert f'href="{HOST}/u/a"' in shown and "evil" not in shown


def test_a_category_or_tag_named_by_a_number_is_kept_and_a_post_count_is_not() -> None:
    # `value.isdigit()` (the post count) was tested before the labels: `**Tags:** 2024` gave no tags.
    page = read(ABOUT)
    shown = re.sub(r"\*\*Category:\*\* [^\n]*", "**Category:** 2024", page, count=1)
    shown = re.sub(r"\*\*Tags:\*\* [^\n]*", "**Tags:** 2025", shown, count=1) if "**Tags:**" in page else \
        shown.replace("**Category:** 2024", "**Category:** 2024\\\n**Tags:** 2025", 1)
    parsed = parse_topic(shown)
    assert (parsed.category, parsed.tags) == ("2024", ("2025",))
    assert parse_topic(page).category != "2024"  # the fixture's own, for contrast


def test_enrich_from_a_later_page_adds_the_header_only() -> None:
    enriched = enrich(listed(467), parse_topic(read(MINCUT_2)), HOST)
    assert enriched.content_html is None
    assert enriched.created_at == datetime(2022, 2, 2, 20, 7, 5, tzinfo=UTC)
    assert enriched.tags == ("aotautograd", "memory")


def test_enrich_with_an_empty_first_post_keeps_no_content_and_the_list_values() -> None:
    topic = msgspec.structs.replace(listed(998), category="from-list")
    enriched = enrich(topic, replace(parse_topic(read(ORPHAN)), first_post_markdown="   "), HOST)
    assert (enriched.content_html, enriched.category) == (None, "from-list")


def test_enrich_refuses_another_topics_page() -> None:
    with pytest.raises(ValueError, match="3341"):
        enrich(listed(3441), parse_topic(read(POLYHEDRAL)), HOST)


# --- served by the fake forum ----------------------------------------------------------------------------

def test_topics_of_the_compiler_list_are_served_parsed_and_enriched_or_404(upstream) -> None:
    expected = json.loads((ROOT / "dev-discuss-compiler.expected.json").read_text(encoding="utf-8"))
    found: dict[int, int] = {}
    with httpx.Client(timeout=5) as client:
        for item in expected["topics"][:8]:
            url = item["url"].replace(HOST, upstream.url) + ".md"
            response = client.get(url)
            found[item["id"]] = response.status_code
            if response.status_code != 200:
                continue
            page = parse_topic(response.text, source_url=url)
            topic = Topic(id=item["id"], title=item["title"], url=item["url"].replace(HOST, upstream.url))
            enriched = enrich(topic, page, upstream.url)
            assert page.url == topic.url
            assert enriched.created_at is not None and enriched.content_html
            assert_safe(enriched.content_html)
    assert found == {14: 200, 3441: 200, 3411: 200, 3341: 200, 3392: 404, 2742: 404, 3351: 404, 3306: 200}
    second = httpx.get(f"{upstream.url}/t/{MINCUT.removesuffix('.md')}.md?page=2", timeout=5)
    assert parse_topic(second.text).first_post_markdown is None


def test_markdown_link_tables_are_made_at_import_before_any_thread_renders() -> None:
    """mdurl (markdown-it's link normaliser) puts each lookup table in its module dict before filling it, with
    no lock: a thread rendering beside the first render read a half-made one (IndexError, a 500 in CI on
    Python 3.13). In a fresh process, importing the sanitiser makes every table; renders of links of every
    kind afterwards add none and find each one whole."""
    script = """
import json, sys
from mdurl import _decode, _encode
from feedbridge.render.sanitize import markdown_to_safe_html
made = {name: {k: len(v) for k, v in cache.items()}
        for name, cache in (("encode", _encode.encode_cache), ("decode", _decode.decode_cache))}
for text in ("[x](https://a.example/%E2%82%AC?q=1#f)", "![i](/p%2fq.png 't')", "<https://b.example/ü>",
             "<mail@c.example>", "[r][1]\\n\\n[1]: /ref%20x", "[*e*](<a b>)", "http://d.example/plain"):
    markdown_to_safe_html(text, "https://forum.example/t/x/1")
after = {name: {k: len(v) for k, v in cache.items()}
         for name, cache in (("encode", _encode.encode_cache), ("decode", _decode.decode_cache))}
print(json.dumps([made, after]))
"""
    made, after = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                            check=True).stdout)
    assert made["encode"] and made["decode"], made
    assert after == made  # nothing made after import, so no render can meet a table being made
    assert all(size == 128 for tables in made.values() for size in tables.values()), made
