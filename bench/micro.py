"""In-process sections: the parser against markdown-it-py (3) and the renderers' cost per entry (4)."""

from __future__ import annotations

import re

import msgspec

from feedbridge.discourse.listing import MAX_TOPICS, parse_listing
from feedbridge.models import Topic
from feedbridge.render.formats import FEED_FORMATS as FORMATS
from feedbridge.render.formats import render
from feedbridge.render.meta import FeedMeta, topic_entry
from feedbridge.store.entries import listing_bytes

from .harness import FIXTURES, Context, Row, median_seconds_rounds
from .json_parse import TARGET_MS as JSON_TARGET_MS
from .json_parse import json_parse_times

BASE = "http://127.0.0.1:8123"
PAGES = {  # the two 30-topic pages of the fake forum: the real (flattened) one and a pristine C4 one
    "real page (flattened, 30 topics)": FIXTURES / "c" / "compiler" / "5.md",
    "pristine C4 page (30 topics)": FIXTURES / "c" / "compiler" / "5" / "page-1.md",
}
PAGE_COUNTS = (1, 3, 10, MAX_TOPICS // 30)  # a list page is read up to MAX_TOPICS topics
ENTRY_COUNTS = (30, 100, 300, 1000)
SPEEDUP_TARGET = 15.0
COUNT_SHARE = 0.25  # the store's accounting of a page: a small part of reading it, never a second parse
FLAT = 1.5  # per-unit cost at the large size may exceed the small size's by at most this factor


def parser_section(ctx: Context) -> list[Row]:
    from markdown_it import MarkdownIt  # bench extra: the peer we are measured against

    markdown = MarkdownIt("commonmark")
    repeat = ctx.loops(31, 3)
    rows = []
    parsed = {}
    for label, path in PAGES.items():
        text = path.read_text(encoding="utf-8")
        times = median_seconds_rounds({"ours": (lambda text=text: parse_listing(text, base_url=BASE), ctx.loops(20, 2)),
                                       "peer": (lambda text=text: markdown.parse(text), ctx.loops(2, 1))}, repeat)
        ours, peer = times["ours"], times["peer"]
        parsed[label] = ours
        speedup = peer / ours
        rows.append(Row("3", f"parse {label}, ms/page", ours * 1e3, peer * 1e3, "ms", speedup,
                        f"≥ {SPEEDUP_TARGET:g}× faster than markdown-it-py", speedup >= SPEEDUP_TARGET))
    real = "real page (flattened, 30 topics)"
    listing = parse_listing(PAGES[real].read_text(encoding="utf-8"), base_url=BASE)
    counted = median_seconds_rounds({"count": (lambda: listing_bytes(listing), ctx.loops(100, 5))}, repeat)["count"]
    rows.append(Row("3", "count the bytes a parsed real page holds (the memory store's size of its entry, on every "
                    "page read) vs parsing it, µs/page", counted * 1e6, parsed[real] * 1e6, "µs",
                    counted / parsed[real], f"≤ {COUNT_SHARE:g}× the parse", counted / parsed[real] <= COUNT_SHARE))
    ctx.notes.append("3: markdown-it-py runs `MarkdownIt('commonmark').parse(text)` (tokens only, no HTML), "
                     "feedbridge runs `parse_listing` (a full `Listing`); same text, same process; "
                     "ratio = markdown-it-py time / feedbridge time.")

    json_times = json_parse_times(rounds=repeat, number=ctx.loops(200, 10))
    parse_ms, floor_ms = json_times["parse_json_listing"] * 1e3, json_times["msgspec"] * 1e3
    rows.append(Row("3", "parse a 30-topic JSON list page vs decoding its text alone (msgspec, the floor), ms/page",
                    parse_ms, floor_ms, "ms", parse_ms / floor_ms, f"< {JSON_TARGET_MS:g} ms",
                    parse_ms < JSON_TARGET_MS))
    ctx.notes.append("3: the JSON row parses fixtures/json/current-latest.json (30 topics) with `parse_json_listing`; "
                     "the baseline is `msgspec.json.decode` of the same text (the decoder the parser uses), the floor "
                     f"any reader of it pays; `json.loads` of it took {json_times['json.loads'] * 1e3:.3g} ms.")

    per_page = parse_scaling(ctx)
    one = per_page[1]
    for count in (10, PAGE_COUNTS[-1]):
        ratio = per_page[count] / one
        rows.append(Row("3", f"parse {count} pages in one list vs 1, ms/page", per_page[count] * 1e3, one * 1e3,
                        "ms", ratio, f"linear: ≤ {FLAT:g}× the 1-page cost per page", ratio <= FLAT))
    ctx.notes.append("3: N pages = one list of N×30 topics (the pristine page's blocks repeated), so any "
                     "super-linear step in the parser would show; baseline = the same parser on 1 page.")
    return rows


def parse_scaling(ctx: Context) -> dict[int, float]:
    """Seconds per page when one list holds `n` pages' worth of topics."""
    text = PAGES["pristine C4 page (30 topics)"].read_text(encoding="utf-8")
    first = text.index("\n## [")
    last = text.index("\n[Previous page]")
    header, blocks, trailer = text[:first], text[first:last].rstrip() + "\n\n---\n", text[last:]
    calls = {}
    for count in PAGE_COUNTS if not ctx.quick else (1, 10, PAGE_COUNTS[-1]):
        big = header + blocks * count + trailer
        parsed = parse_listing(big, base_url=BASE)
        assert len(parsed.topics) == 30 * count, (count, len(parsed.topics))
        calls[count] = ((lambda text=big: parse_listing(text, base_url=BASE)), max(1, 30 // count))
    timed = median_seconds_rounds(calls, ctx.loops(15, 3))
    result = {count: seconds / count for count, seconds in timed.items()}
    ctx.data["parse_per_page"] = result
    return result


def render_section(ctx: Context) -> list[Row]:
    per_entry = render_scaling(ctx)
    rows = []
    small, large = ENTRY_COUNTS[0], ENTRY_COUNTS[-1]
    for fmt in FORMATS:
        ratio = per_entry[fmt][large] / per_entry[fmt][small]
        rows.append(Row("4", f"render {fmt}, µs/entry at {large} vs {small} entries", per_entry[fmt][large] * 1e6,
                        per_entry[fmt][small] * 1e6, "µs", ratio, f"flat: ≤ {FLAT:g}×", ratio <= FLAT))
    ctx.notes.append(f"4: topics are the pristine page's 30, repeated with distinct ids up to {large}; "
                     "per-entry cost = whole render time / entries (so the fixed cost of a feed makes small "
                     "feeds look dearer per entry, never cheaper).")
    return rows


def render_scaling(ctx: Context) -> dict[str, dict[int, float]]:
    """Seconds per entry, by format and number of entries."""
    topics = sample_topics(ENTRY_COUNTS[-1])
    meta = FeedMeta(title="bench", forum_url=BASE, html_url=f"{BASE}/c/compiler/5", feed_id=f"{BASE}/feed",
                    self_url=f"{BASE}/feed")
    counts = ENTRY_COUNTS if not ctx.quick else (ENTRY_COUNTS[0], ENTRY_COUNTS[-1])
    # The topics made entries within the timing, as a feed's build does between its filter and its render.
    calls = {(fmt, count): ((lambda fmt=fmt, chunk=topics[:count]: render(fmt, meta, [topic_entry(t, BASE)
                                                                                     for t in chunk])),
                            max(1, 300 // count))
             for fmt in FORMATS for count in counts}
    times = median_seconds_rounds(calls, ctx.loops(15, 3))
    result: dict[str, dict[int, float]] = {fmt: {} for fmt in FORMATS}
    for (fmt, count), seconds in times.items():
        result[fmt][count] = seconds / count
    ctx.data["render_per_entry"] = result
    return result


def sample_topics(count: int) -> list[Topic]:
    page = parse_listing(PAGES["pristine C4 page (30 topics)"].read_text(encoding="utf-8"), base_url=BASE).topics
    return [msgspec.structs.replace(page[i % len(page)], id=i + 1,
                                   url=re.sub(r"/\d+$", f"/{i + 1}", page[i % len(page)].url))
            for i in range(count)]
