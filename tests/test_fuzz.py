"""Fuzzing the parser and the renderers: arbitrary text, mutated fixtures, hostile shapes.

Properties: `parse_listing` returns a Listing or raises `NotAListError`, nothing else; whatever it returns,
filtered as the service filters it, renders to Atom and RSS that are well-formed and parse in feedparser
with `bozo == 0`, and to JSON Feed that `json` reads, each with unique entry ids; and parsing stays linear
in the size of the input (a 1 MB hostile input takes a fraction of a second).

Example counts come from the Hypothesis profile (tests/conftest.py): `ci` by default,
`HYPOTHESIS_PROFILE=fuzz` for the long run reported in RELIABILITY.md.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import feedparser
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lxml import etree

from feedbridge.discourse.listing import parse_listing
from feedbridge.errors import NotAListError
from feedbridge.feeds.filters import make_filter
from feedbridge.models import Listing, Topic
from feedbridge.render.feeds import FeedMeta
from feedbridge.render.formats import FEED_FORMATS as FORMATS
from feedbridge.render.formats import render

from .test_parser import parse_both_ways

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SAMPLES = sorted(p for p in FIXTURES.rglob("*.md") if p.name != "README.md")
TEXTS = [p.read_text() for p in SAMPLES]
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
HOSTILE_UNITS = ["[", "]", "\\", "\\[", "[@", "](", "((", "<", "**", "# ", "## [", "[a](?page=1) ", "?page=1",
                 "\\\\", "[](", "x", "\u0301", "\u202e", "\x00"]


@st.composite
def mutated_fixture(draw: st.DrawFn) -> str:
    """A fixture after a few line-level and character-level mutations."""
    lines = draw(st.sampled_from(TEXTS)).split("\n")
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
            lines.insert(i, _bulk(draw(st.sampled_from(HOSTILE_UNITS)), draw(BIG)))
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
    assert all(t.last_posted_at is None or t.last_posted_at.tzinfo is timezone.utc for t in listing.topics)
    return listing


def assert_renders_cleanly(topics: list[Topic], meta: FeedMeta = META) -> None:
    """Every format well-formed, readable without complaint, one entry per topic and no repeated id."""
    for fmt in FORMATS:
        body = render(fmt, meta, topics)
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
def test_arbitrary_text_parses_or_is_refused(text):
    check_pipeline(text)


@st.composite
def topics(draw: st.DrawFn) -> list[Topic]:
    """Topics with hostile text everywhere the parser could put text; URLs have the parser's shape."""
    moments = st.one_of(st.none(), st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                                                 timezones=st.just(timezone.utc)))
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


# --- linear time ---------------------------------------------------------------------------------------

HEAD = f"# T\n\n**URL:** {BASE}/latest.md\n\n## [a]({BASE}/t/a/1)\n\n"
PATHOLOGICAL: dict[str, Callable[[int], str]] = {
    "open brackets": lambda n: HEAD + _bulk("[", n),
    "escaped brackets": lambda n: HEAD + _bulk("\\[", n),
    "user links": lambda n: HEAD + "**Author:** " + _bulk("[@", n),
    "dated link": lambda n: HEAD + "**Last updated:** [" + _bulk("\\]", n),
    "page links on a line": lambda n: HEAD + _bulk("[a](?page=1) ", n),
    "page links on lines": lambda n: HEAD + _bulk("[a](?page=1)\n", n),
    "page= in one url": lambda n: HEAD + "[a](" + _bulk("?page=1", n) + ")x",
    "backslashes": lambda n: HEAD + _bulk("\\", n),
    "headings": lambda n: HEAD + _bulk(f"## [a]({BASE}/t/a/1)\n", n),
    "unclosed heading": lambda n: HEAD + "## [" + _bulk("](x", n) + "\n",
    "flattened separators": lambda n: HEAD + _bulk(" --- ## [", n),
    "row markers": lambda n: HEAD + _bulk("**", n),
    # the fast path's one regex over a whole topic block
    "escaped heading": lambda n: HEAD + "## [" + _bulk("\\a", n) + f"]({BASE}/t/a/1)\n",
    "topic url of slashes and digits": lambda n: HEAD + f"## [a]({BASE}" + _bulk("/1//", n) + "x)\n",
    "metadata divs": lambda n: HEAD + f"## [a]({BASE}/t/a/1)\n" + _bulk('<div class="topic-metadata">\n', n),
    "escaped author": lambda n: HEAD + f"## [a]({BASE}/t/a/1)\n**Author:** [@" + _bulk("\\]", n) + "\n",
    "tags": lambda n: "# T\n**URL:** /latest.md\n**Topics on this page:** 1\n## [a](/t/a/1)\n" + _bulk("<", n),
}


def _best_times(small: str, large: str) -> tuple[float, float]:
    """Best of two each, interleaved, with the cyclic GC paused (its pauses grow with the heap and are
    not the parser's): the minimum is the run the other processes on the machine disturbed least."""
    best = [float("inf"), float("inf")]
    gc.disable()
    try:
        for _ in range(2):
            for i, text in enumerate((small, large)):
                started = time.perf_counter()
                parse_or_refuse(text, BASE)
                best[i] = min(best[i], time.perf_counter() - started)
    finally:
        gc.enable()
    return max(best[0], 1e-4), best[1]


@pytest.mark.timeout(30)  # a quadratic case at 1 MB takes hours; this fails it in bounded time
@pytest.mark.parametrize("name", PATHOLOGICAL)
def test_hostile_megabyte_parses_in_linear_time(name):
    make = PATHOLOGICAL[name]
    # Both sizes are past the CPU caches, so only the algorithm differs: linear takes 2x the time for twice
    # the input, quadratic 4x.
    # A busy machine can still spoil one measurement, so up to three; a quadratic parser fails all of them.
    small, large = make(MB), make(2 * MB)
    ratios = []
    for _ in range(3):
        one, two = _best_times(small, large)
        ratios.append(f"{one:.3f}s for 1 MB, {two:.3f}s for 2 MB")
        if two / one < 3.2:
            return
    pytest.fail(f"{name} is not linear: " + "; ".join(ratios))
