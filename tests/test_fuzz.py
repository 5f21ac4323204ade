"""Fuzzing the parser and the renderers: arbitrary text, mutated fixtures, hostile shapes.

Properties: `parse_listing` returns a Listing or raises `NotAListError`, nothing else; whatever it returns,
filtered as the service filters it, renders to Atom and RSS that are well-formed and parse in feedparser
with `bozo == 0`, and to JSON Feed that `json` reads, each with unique entry ids; and the list, topic and
categories parsers all stay linear in the size of the input, whatever its shape.

Example counts come from the Hypothesis profile (tests/conftest.py): `ci` by default,
`HYPOTHESIS_PROFILE=fuzz` for the long run reported in RELIABILITY.md.
"""

from __future__ import annotations

import gc
import json
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import feedparser
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lxml import etree

from feedbridge.discourse.categories import parse_categories
from feedbridge.discourse.listing import parse_listing
from feedbridge.discourse.topic import TopicPage, parse_topic
from feedbridge.errors import NotAListError, NotATopicError
from feedbridge.feeds.select.filters import make_filter
from feedbridge.models import Listing, Topic
from feedbridge.render.formats import FEED_FORMATS as FORMATS
from feedbridge.render.formats import render
from feedbridge.render.meta import FeedMeta, topic_entry

from .test_parser import parse_both_ways

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SAMPLES = sorted(p for p in FIXTURES.rglob("*.md") if p.name != "README.md")
TEXTS = [p.read_text(encoding="utf-8") for p in SAMPLES]
BASE = "https://forum.example.org"
META = FeedMeta(title="fuzz", forum_url=BASE, html_url=f"{BASE}/latest", feed_id=f"{BASE}/latest.md",
                self_url="http://bridge.example/forum.example.org/latest.atom")
MB = 1024 * 1024

# Characters that break naive parsers, XML writers or terminals: C0 controls and NUL, DEL and C1, lone
# surrogates, non-characters, bidi overrides, combining marks, BOM, line/paragraph separators, and the
# Markdown punctuation this format is made of.
NASTY = ["\x00", "\x01", "\x0b", "\x1b", "\x7f", "\x85", "\ud800", "\udfff", "\ufffe", "\uffff", "\u202e",
         "\u200f", "\u2066", "\u0301", "\u0338", "\ufeff", "\u2028", "\u2029", "\r", "\t", "\\", "[", "]",
         "(", ")", "*", "#", "<", ">", "&", '"', "`", "_", "@", "\n", " --- ", "## [", "**", "·", "…"]
NASTY_TEXT = st.lists(st.one_of(st.characters(), st.sampled_from(NASTY)), max_size=40).map("".join)


def _bulk(unit: str, size: int) -> str:
    return unit * max(size // len(unit), 1)


BIG = st.sampled_from([1_000, 64 * 1024, MB])
SMALLER = st.sampled_from([1_000, 64 * 1024])
HOSTILE_UNITS = ["[", "]", "\\", "\\[", "[@", "](", "((", "<", "**", "# ", "## [", "[a](?page=1) ", "?page=1",
                 "\\\\", "[](", "x", "\u0301", "\u202e", "\x00"]


@st.composite
def mutated_fixture(draw: st.DrawFn) -> str:
    """A fixture after a few line-level and character-level mutations."""
    lines = draw(st.sampled_from(TEXTS)).split("\n")
    # One megabyte line at most per text: feedparser, the oracle, reads an RSS body at about 6 µs a
    # character, so six of them made one example cost a minute or more, past the test's timeout on a busy
    # machine, without testing anything one does not.
    big = BIG
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["drop", "duplicate", "swap", "unseparate", "flatten", "insert", "splice",
                                     "bulk", "nest"]))
        i = draw(st.integers(0, len(lines) - 1))
        j = draw(st.integers(0, len(lines) - 1))
        if kind == "drop" and len(lines) > 1:
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "unseparate":  # every `---` separator removed
            lines = [line for line in lines if line.strip() != "---"]
        elif kind == "flatten":  # the text squeezed onto fewer lines, as the flattening tools do
            lines = [" ".join(lines[i : j + 1])] if i < j else lines
        elif kind == "insert":
            lines.insert(i, draw(NASTY_TEXT))
        elif kind == "splice":  # a character dropped into the middle of a line
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(st.sampled_from(NASTY)) + lines[i][at:]
        elif kind == "bulk":  # a 1 KB to 1 MB line
            size = draw(big)
            lines.insert(i, _bulk(draw(st.sampled_from(HOSTILE_UNITS)), size))
            if size == MB:
                big = SMALLER
        else:  # deep nesting of brackets, parentheses and backslashes
            depth = draw(st.integers(1, 5000))
            opener, closer = draw(st.sampled_from([("[", "]"), ("(", ")"), ("\\", ""), ("[\\", "\\]"), ("](", ")")]))
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + opener * depth + closer * depth + lines[i][at:]
    return "\n".join(lines)


def parse_or_refuse(text: str | bytes, base_url: str | None) -> Listing | None:
    """The documented contract: a Listing, or NotAListError. Any other exception fails the test."""
    try:
        listing = parse_listing(text, base_url=base_url, source_url=f"{BASE}/latest.md")
    except NotAListError as exc:
        assert str(exc).startswith("expected a Discourse topic list")
        return None
    assert isinstance(listing, Listing)
    assert all(isinstance(t.id, int) and t.id >= 0 for t in listing.topics)
    assert all(t.last_posted_at is None or t.last_posted_at.tzinfo is UTC for t in listing.topics)
    for url in (listing.url, listing.next_page_url, listing.previous_page_url,
                *(u for t in listing.topics for u in (t.url, t.author_url))):
        assert url is None or urlsplit(url), url  # what urlsplit refuses made the pages' `http_url` raise
    return listing


def assert_renders_cleanly(topics: list[Topic], meta: FeedMeta = META) -> None:
    """Every format well-formed, readable without complaint, one entry per topic and no repeated id."""
    entries = [topic_entry(t, meta.forum_url) for t in topics]
    for fmt in FORMATS:
        body = render(fmt, meta, entries)
        if fmt == "json":
            ids = [item["id"] for item in json.loads(body)["items"]]
        else:
            etree.fromstring(body, etree.XMLParser(resolve_entities=False, huge_tree=True))
            parsed = feedparser.parse(body)
            assert parsed.bozo == 0, (fmt, parsed.get("bozo_exception"))
            ids = [entry.id for entry in parsed.entries]
        assert len(ids) == len(set(ids)) == len(topics), fmt


def check_pipeline(text: str | bytes, base_url: str | None = BASE) -> None:
    listing = parse_or_refuse(text, base_url)
    if listing is not None:
        assert_renders_cleanly(make_filter().apply(listing.topics))


# --- the properties ------------------------------------------------------------------------------------

@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated_fixture(), st.booleans())
def test_fast_path_and_line_loop_agree_on_mutated_fixtures(text, with_base):
    fast, general, _ = parse_both_ways(text, BASE if with_base else None)
    assert fast == general


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated_fixture(), st.booleans())
def test_mutated_fixtures_parse_or_are_refused_and_render_cleanly(text, with_base):
    check_pipeline(text, BASE if with_base else None)


@given(st.one_of(NASTY_TEXT, st.binary(max_size=200), st.text(max_size=300).map(lambda s: f"# t\n**URL:** {BASE}/latest.md\n" + s)))
@example("# t\n**URL:** https://f.example/latest.md\n## [a](https://f.example/t/a/²)\n")
@example("# t\n**URL:** https://f.example/latest.md?page=²\n## [a](https://f.example/t/a/1)\n")
@example("# t\n**URL:** https://f.example/latest.md\n## [a](https://f.example/t/a/1)\n"
         "**Last posted:** 0001-01-01T00:00:00+01:00\n")
@example("# t\n**URL:** https://f.example/latest.md\n## [a](https://f.example/t/a/" + "9" * 5000 + ")\n")
@example("# t\n**URL:** https://[x/latest.md\n## [a](https://f.example/t/a/1)\n")  # urlsplit: "Invalid IPv6 URL"
@example("# x\n**URL:** /latest.md\n**Topics on this page:** 2\n## [a](//[]x/t/a/1)\n## [b](/t/b/2)\n")
@example("# t\n**URL:** https://f.example/latest.md\n## [a](https://[x/t/a/1)\n## [b](https://f.example/t/b/2)\n"
         "**Author:** [@u](https://[x/u/u)\n[Next page](https://[x/latest.md?page=1)\n")
def test_arbitrary_text_parses_or_is_refused(text):
    check_pipeline(text)


@st.composite
def topics(draw: st.DrawFn) -> list[Topic]:
    """Topics with hostile text everywhere the parser could put text; URLs have the parser's shape."""
    moments = st.one_of(st.none(), st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                                                 timezones=st.just(UTC)))
    result = []
    for topic_id in draw(st.lists(st.integers(0, 10**18), max_size=8, unique=True)):
        slug = draw(st.text(alphabet=st.characters(exclude_characters="()", exclude_categories=("Z", "Cc", "Cs")),
                            max_size=20))
        result.append(Topic(
            id=topic_id, title=draw(NASTY_TEXT), url=f"{BASE}/t/{slug}/{topic_id}",
            author=draw(st.one_of(st.none(), NASTY_TEXT)), author_url=draw(st.one_of(st.none(), st.just(f"{BASE}/u/x"))),
            replies=draw(st.one_of(st.none(), st.integers(0, 10**9))), last_posted_at=draw(moments),
            excerpt=draw(st.one_of(st.none(), NASTY_TEXT)), created_at=draw(moments),
            content_html=draw(st.one_of(st.none(), NASTY_TEXT)), category=draw(st.one_of(st.none(), NASTY_TEXT)),
            tags=tuple(draw(st.lists(NASTY_TEXT, max_size=3))),
        ))
    return result


@given(topics(), NASTY_TEXT, NASTY_TEXT)
def test_renderers_on_arbitrary_text(items, title, description):
    meta = FeedMeta(title=title, forum_url=BASE, html_url=f"{BASE}/latest", feed_id=f"{BASE}/latest.md",
                    description=description or None)
    assert_renders_cleanly(items, meta)


# --- linear time, for all three parsers ------------------------------------------------------------------
#
# Each hostile shape is put where each parser reads text: in a list (core and plugin), in a topic's last
# reply (pristine and flattened, where metadata is searched for inside lines) and in its header, and in a
# categories directory's description and heading. A reply or body of 32,000 characters (Discourse's post
# limit) must parse or be refused; and the same shape 16 times as large must not cost more than 64 times
# as much CPU time: linear work costs 16x, quadratic 256x, so either side would have to be 4x off to pass
# for the other. CPU time of this thread, not wall time, so other processes on a busy machine do not count;
# and the large run is stopped (SIGVTALRM: `re` checks signals while it matches) as soon as it has used its
# budget, so a quadratic parser fails in a bounded second, not after the hours it would take. The timings
# themselves are in bench/.

HEAD = f"# T\n\n**URL:** {BASE}/latest.md\n\n## [a]({BASE}/t/a/1)\n\n"
REPLY = 32_000
GROWTH = 16
BOUND = 64

FORUM = "https://h.example.org"
_POST_META = ('<div class="post-metadata">\n\n### ![u]({f}/a.png) [@u]({f}/u/u)\n'
              '#### [Mar 3](' + '{f}/t/s/7/{n} "2023-03-03T15:03:03Z")\n\n</div>\n\n')


def _topic_page(reply: str, created: str = f'[Mar 3]({FORUM}/t/s/7 "2023-03-03T15:03:03Z")') -> str:
    """A topic of two posts whose last reply is `reply`."""
    meta = [_POST_META.format(f=FORUM, n=n) for n in (1, 2)]
    return (f"# T\n\n**URL:** {FORUM}/t/s/7\n\n**Created:** {created}\n\n"
            f"{meta[0]}First post.\n\n---\n\n{meta[1]}{reply}\n")


def _flattened(text: str) -> str:
    """The page as the flattening tools leave it: no div lines, so metadata is found inside lines."""
    return "\n".join(line for line in text.split("\n") if not line.startswith(("<div", "</div")))


PLACES: dict[str, Callable[[str], str]] = {
    "list": lambda body: HEAD + body,
    "plugin list": lambda body: "# T\n**URL:** /latest.md\n**Topics on this page:** 1\n## [a](/t/a/1)\n" + body,
    "reply": _topic_page,
    "flattened reply": lambda body: _flattened(_topic_page(body)),
    "topic header": lambda body: _topic_page("x", created=body),
    "category description": lambda body: f"# Categories\n\n## [c]({FORUM}/c/c/1)\n\n{body}\n",
    "category heading": lambda body: f"# Categories\n\n## [{body}]({FORUM}/c/c/1)\n\ntext\n",
}
PARSERS: dict[str, Callable[[str], object]] = {
    "list": lambda text: _listing_or_refusal(text),
    "plugin list": lambda text: _listing_or_refusal(text),
    "reply": lambda text: _topic_or_refusal(text),
    "flattened reply": lambda text: _topic_or_refusal(text),
    "topic header": lambda text: _topic_or_refusal(text),
    "category description": parse_categories,
    "category heading": parse_categories,
}
SHAPES: dict[str, Callable[[int], str]] = {
    "open brackets": lambda n: _bulk("[", n),
    "escaped brackets": lambda n: _bulk("\\[", n),
    "user links": lambda n: "**Author:** " + _bulk("[@", n),
    "dated link": lambda n: "**Last updated:** [" + _bulk("\\]", n),
    "page links on a line": lambda n: _bulk("[a](?page=1) ", n),
    "page links on lines": lambda n: _bulk("[a](?page=1)\n", n),
    "page= in one url": lambda n: "[a](" + _bulk("?page=1", n) + ")x",
    "backslashes": lambda n: _bulk("\\", n),
    "headings": lambda n: _bulk(f"## [a]({BASE}/t/a/1)\n", n),
    "unclosed heading": lambda n: "## [" + _bulk("](x", n) + "\n",
    "flattened separators": lambda n: _bulk(" --- ## [", n),
    "row markers": lambda n: _bulk("**", n),
    "escaped heading": lambda n: "## [" + _bulk("\\a", n) + f"]({BASE}/t/a/1)\n",
    "topic url of slashes and digits": lambda n: f"## [a]({BASE}" + _bulk("/1//", n) + "x)\n",
    "list metadata divs": lambda n: f"## [a]({BASE}/t/a/1)\n" + _bulk('<div class="topic-metadata">\n', n),
    "escaped author": lambda n: f"## [a]({BASE}/t/a/1)\n**Author:** [@" + _bulk("\\]", n) + "\n",
    "tags": lambda n: _bulk("<", n),
    # the topic parser's own shapes: page links at the end of the last post, post metadata lines
    "md links then text": lambda n: _bulk("[a](b.md)", n) + "\nand then some text",
    "md links to the end": lambda n: _bulk("[a](b.md)", n),
    "md links with separators": lambda n: _bulk(" · [a](b.md?page=2)", n) + " x",
    "post line of brackets": lambda n: "#### " + _bulk("[", n),
    "author line of brackets": lambda n: "### " + _bulk("[@", n),
    "post link of /t/": lambda n: "#### [a](" + _bulk("/t/", n) + ' "',
    "inline post metadata": lambda n: _bulk(f'x #### [d]({FORUM}/t/s/7/2 "2021-01-01T00:00:00Z") ', n),
    "unfinished inline metadata": lambda n: _bulk("x ### #### [d](/t/", n),
    "post metadata divs": lambda n: _bulk('<div class="post-metadata">\n', n),
    "header rows": lambda n: _bulk("**a:** ", n),
    "dated links": lambda n: _bulk('[d](/t/s/7 "2020-01-01T00:00:00Z")', n),
    # a paragraph's long first line, then many short ones
    "long line then lines": lambda n: "x" * (n // 2) + "\n" + _bulk("y\n", n // 2),
    **{f"bulk {unit!r}": partial(_bulk, unit) for unit in HOSTILE_UNITS},
}


def _listing_or_refusal(text: str) -> Listing | None:
    return parse_or_refuse(text, BASE)


def _topic_or_refusal(text: str) -> TopicPage | None:
    try:
        page = parse_topic(text, source_url=f"{FORUM}/t/s/7.md")
    except NotATopicError as exc:
        assert str(exc).startswith("expected a Discourse topic")
        return None
    assert isinstance(page, TopicPage) and page.id > 0
    return page


class _OverBudget(BaseException):
    """Raised from the CPU timer's signal; a BaseException so that no `except Exception` in a parser eats it."""


def _cpu_seconds(parse: Callable[[str], object], text: str, budget: float) -> float:
    """CPU seconds this thread spent in `parse(text)`; `_OverBudget` once the process has used `budget`."""

    def stop(signum: int, frame: object) -> None:
        raise _OverBudget

    previous = signal.signal(signal.SIGVTALRM, stop)
    gc.disable()  # collector pauses grow with the heap and are not the parser's work
    started = time.thread_time()
    signal.setitimer(signal.ITIMER_VIRTUAL, budget)
    try:
        parse(text)
        return time.thread_time() - started
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)
        gc.enable()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("place", PLACES)
def test_hostile_shapes_cost_linear_time_in_every_parser(place: str, shape: str) -> None:
    parse, make = PARSERS[place], SHAPES[shape]
    small, large = PLACES[place](make(REPLY)), PLACES[place](make(REPLY * GROWTH))
    small_cost = min(_cpu_seconds(parse, small, 60) for _ in range(3))  # the contract holds at 32,000 characters
    budget = max(small_cost, 1e-3) * BOUND
    for _ in range(2):  # one retry: a page fault storm can still spoil one run
        try:
            if _cpu_seconds(parse, large, budget) <= budget:
                return
        except _OverBudget:
            pass
    pytest.fail(f"{shape} in a {place}: {small_cost * 1000:.1f} ms of CPU for {REPLY:,} characters, "
                f"more than {BOUND}x that for {GROWTH}x the size: not linear")
