"""Source detection (`feedbridge.feeds.sources.dialects`): one test per transition of its state machine, over a real socket.

The fake forum answers the probes; the bridge is the Procfile's gunicorn with its gevent worker, as in
production: one server per settings combination, each test with a fake forum of its own (`served`, as in
tests/test_faults.py), so what one test's bridge decided about its forum is that forum's alone. Nothing
probes a forum before its test's first feed request, and a Markdown list where that feed's own list is decides
without a probe. Which source a feed was read through is seen from
outside, in the forum's request log (`.md` or `.json` URLs). A short `source_recheck` puts the re-check
(and the retry after an inconclusive probe, a tenth of it) within a test; `cache_ttl=0` and
`negative_ttl=0` where a cached probe page or a remembered failure would hide a probe from the log.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from tests.appserver import ProcfileApp, procfile_apps, settings_for
from tests.upstream import DEFAULT_ROOT, JSON_ROOT, FakeForum, read_at, stop_together

COMPILER = "/c/compiler/5"
RECHECK = 2
RETRIED = RECHECK / 10 + 0.1  # past the retry after an inconclusive probe, well before the re-check


def get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=30)


def md(forum: FakeForum) -> list[str]:
    """The Markdown requests' targets: the probe is `/latest.md`, a category's list `/latest.md?category=ID...`."""
    return [r.target for r in forum.requests if r.path.endswith(".md")]


def probes(forum: FakeForum) -> int:
    return md(forum).count("/latest.md")


RECHECKED = {"cache_ttl": 0, "source_recheck": RECHECK, "negative_ttl": 0}
SLOW_PROBE = {"source_recheck": RECHECK, "negative_ttl": 0, "read_timeout": 1.0, "total_timeout": 1.0}
CASES: dict[str, tuple[dict, dict]] = {  # each test's fake forum (its arguments) and settings
    **{f"conclusive {mode} {answer}": ({"mode": mode}, {}) for mode, answer in (
        ("markdown", "list"), ("json", "404"), ("json", "403"), ("json", "login"))},
    **{f"markdown probe fails {fault}": ({"mode": "json"}, SLOW_PROBE) for fault in ("500", "6MB", "slow")},
    "both inconclusive": ({}, RECHECKED),
    "undecided then json": ({"mode": "json"}, {"source_recheck": RECHECK, "negative_ttl": 0}),
    "429 first": ({"mode": "json"}, {}),
    "own list fails": ({"mode": "markdown"}, {}),
    "own list 429": ({"mode": "markdown"}, {}),
    "walled": ({"mode": "markdown"}, {}),
    "inconclusive recheck markdown": ({"mode": "markdown"}, RECHECKED),
    "inconclusive recheck json": ({"mode": "json"}, RECHECKED),
    "429 recheck": ({"mode": "json"}, RECHECKED),
    "markdown off": ({"root": JSON_ROOT}, RECHECKED),
    "private category": ({"mode": "json"}, {"cache_ttl": 0}),
    "garbage json": ({"mode": "json"}, {"negative_ttl": 0}),
}


@pytest.fixture(scope="module")
def served() -> Iterator[dict[str, tuple[ProcfileApp, FakeForum]]]:
    """Each test's server and fake forum, by case name; all the servers boot at once."""
    with ExitStack() as stack:
        forums = {name: FakeForum(**forum).start() for name, (forum, _settings) in CASES.items()}
        stack.callback(stop_together, list(forums.values()))
        apps = stack.enter_context(procfile_apps({name: settings_for(forums[name].url, **settings)
                                                  for name, (_forum, settings) in CASES.items()}))
        yield {name: (apps[name], forums[name]) for name in CASES}


# --- (none) → a decision: from the feed's own Markdown list, else from the Markdown probe alone -----------------

@pytest.mark.parametrize("case,fault,source", [
    ("markdown list", None, "markdown"),  # a list: Markdown
    ("json 404", None, "json"),  # 404: JSON
    ("json 403", lambda forum: forum.json_error("/latest.md", status=403), "json"),
    ("json login", lambda forum: forum.html_login("/latest.md"), "json"),  # a login page where a list should be
])
def test_a_conclusive_answer_decides_without_asking_json(served, case, fault, source):
    app, forum = served[f"conclusive {case}"]
    if fault:
        fault(forum)
    assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200
    assert forum.count(read_at(COMPILER, source)) == 1
    # A Markdown list where the feed's own list is decides Markdown with no probe; a JSON forum refuses that
    # read (it decides nothing) and the probe decides.
    assert probes(forum) == (0 if source == "markdown" else 1) and forum.count("/latest.json") == 0
    assert forum.count(read_at(COMPILER)) == 1


def test_a_feeds_own_list_that_fails_decides_nothing_and_is_not_asked_again(served):
    """A Markdown forum whose category list answers 500 to the first feed: the probe decides (Markdown), and the
    feed answers the list's failure, remembered, without asking for the list again; other feeds read Markdown."""
    app, forum = served["own list fails"]
    forum.fail(read_at(COMPILER), 500)
    failed = get(app.feed_url(f"{COMPILER}.atom"))
    assert failed.status_code == 502 and "500" in failed.text, failed.text
    assert md(forum) == [read_at(COMPILER), "/latest.md"] and forum.count("/latest.json") == 0
    assert get(app.feed_url("/hot.atom")).status_code == 200
    assert md(forum)[2:] == ["/hot.md"] and forum.count(read_at(COMPILER, "json")) == 0


def test_a_429_on_a_feeds_own_list_is_its_error_and_asks_no_probe(served):
    """The forum said wait: the probe would only be refused too, so nothing more is sent, and nothing decided."""
    app, forum = served["own list 429"]
    forum.rate_limit(read_at(COMPILER), retry_after=1, times=1)
    assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 503
    assert md(forum) == [read_at(COMPILER)]
    time.sleep(1.2)
    assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200  # its own list again, which decides now
    assert md(forum) == [read_at(COMPILER)] * 2 and probes(forum) == 0


def test_a_forum_behind_a_wall_is_asked_nothing_more_per_feed(served):
    """A bot wall on every page: the first feed's own list decides nothing, the probe meets the wall too (the
    feed's error, nothing written); then the probe's remembered failure answers every feed, whatever list a
    reader invents, without a request: no feed's own list is read first while it is remembered."""
    app, forum = served["walled"]
    forum.challenge("/", prefix=True)
    first = get(app.feed_url(f"{COMPILER}.atom"))
    assert first.status_code in (502, 503) and md(forum) == [read_at(COMPILER), "/latest.md"], first.text
    for n in range(1, 6):
        assert get(app.feed_url(f"/c/made-up/{1000 + n}.atom")).status_code in (502, 503)
    assert forum.count() == 2


# --- (none) → inconclusive Markdown probe → /latest.json ------------------------------------------------

@pytest.mark.parametrize("fault", [
    lambda forum: forum.fail("/latest.md", 500),
    lambda forum: forum.huge("/latest.md", size=6 * 2**20, declare_length=False),
    lambda forum: forum.stall("/latest.md", 3.0),
], ids=["500", "6MB", "slow"])
def test_a_json_forum_whose_markdown_probe_fails_is_read_from_json(served, request, fault):
    """Must hold 6: its feeds come from the JSON lists at once, and stay so at every re-check."""
    app, forum = served[f"markdown probe fails {request.node.callspec.id}"]
    fault(forum)
    for path in (f"{COMPILER}.atom", "/c/hardware/gpu/12.rss", "/tag/gpu.json"):
        assert get(app.feed_url(path)).status_code == 200, path
    time.sleep(RECHECK + 0.1)
    assert get(app.feed_url("/hot.atom")).status_code == 200
    assert set(md(forum)) == {read_at(COMPILER), "/latest.md"} and probes(forum) >= 2  # probed again, still JSON
    assert forum.count(read_at(COMPILER, "json")) == 1
    assert forum.count(read_at(COMPILER)) == 1  # the first feed's own list as Markdown, while the forum was undecided


def test_with_both_probes_inconclusive_or_refused_markdown_is_read_and_retried_soon(served):
    """(none) → UNDECIDED (a Markdown forum whose /latest.md and the feed's own list failed once; it has no
    /latest.json) → MARKDOWN."""
    app, upstream = served["both inconclusive"]
    upstream.fail("/latest.md", 500, times=1)
    upstream.fail(read_at(COMPILER), 500, times=1)
    assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200  # read as Markdown meanwhile
    # the feed's own list twice: once while undecided (a 500 decides nothing), once as Markdown (negative_ttl=0)
    assert upstream.count("/latest.json") == 1 and upstream.count(read_at(COMPILER)) == 2
    time.sleep(RETRIED)
    assert get(app.feed_url("/hot.atom")).status_code == 200
    assert probes(upstream) == 2  # retried before the re-check period, and decided
    upstream.fail("/latest.md", 500)
    time.sleep(RECHECK + 0.1)
    assert get(app.feed_url("/top.atom?period=weekly")).status_code == 200
    assert probes(upstream) == 3 and upstream.count("/latest.json") == 1  # decided: JSON not asked


def test_an_undecided_forum_is_decided_by_json_once_its_json_probe_answers(served):
    """UNDECIDED → JSON: both probes failed once; on the retry /latest.json is a list."""
    app, forum = served["undecided then json"]
    forum.fail("/latest.md", 500)
    forum.fail("/latest.json", 500, times=1)
    assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 404  # read as Markdown: this forum has none
    time.sleep(RETRIED)
    assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200
    assert forum.count(read_at(COMPILER, "json")) == 1


def test_a_429_on_the_first_probe_is_the_feeds_error_and_decides_nothing(served):
    app, forum = served["429 first"]
    forum.rate_limit("/latest.md", retry_after=1, times=1)
    limited = get(app.feed_url(f"{COMPILER}.atom"))
    assert limited.status_code == 503 and forum.count("/latest.json") == 0  # the forum said wait: nothing else
    time.sleep(1.2)
    assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200
    # the feed's own list as Markdown once: its 404 is remembered, and decides nothing either time
    assert md(forum) == [read_at(COMPILER), "/latest.md", "/latest.md"]


# --- a decision, then an inconclusive probe: kept, and asked again sooner --------------------------------

@pytest.mark.parametrize("mode,suffix", [("markdown", ".md"), ("json", ".json")])
def test_an_inconclusive_recheck_keeps_the_decision_and_is_retried_sooner(served, mode, suffix):
    app, forum = served[f"inconclusive recheck {mode}"]
    assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200
    forum.fail("/latest.md", 500)
    time.sleep(RECHECK + 0.1)
    assert get(app.feed_url("/hot.atom")).status_code == 200
    time.sleep(RETRIED)
    assert get(app.feed_url("/top.atom?period=weekly")).status_code == 200
    # the decision (a Markdown forum's made by the feed's own list), the re-check, the retry
    assert probes(forum) == (2 if mode == "markdown" else 3)
    assert forum.count("/latest.json") == 0  # decided: JSON is not tried
    assert forum.count(f"/hot{suffix}") == 1 and forum.count(f"/top{suffix}?period=weekly") == 1


def test_a_429_on_a_recheck_changes_nothing_and_leaves_the_probe_due(served):
    """A refusal to answer postpones nothing: the first request after the forum's wait probes again."""
    app, forum = served["429 recheck"]
    assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200
    time.sleep(RECHECK + 0.1)
    forum.rate_limit("/latest.md", retry_after=1, times=1)
    assert get(app.feed_url("/hot.atom")).status_code == 503  # the forum said wait, for this feed too
    time.sleep(1.2)
    assert get(app.feed_url("/hot.atom")).status_code == 200
    assert md(forum) == [read_at(COMPILER)] + ["/latest.md"] * 3 and forum.count("/latest.json") == 0


def test_a_forum_that_turns_markdown_off_is_followed_at_the_recheck(served):
    """MARKDOWN → JSON (the other way is `test_json_source.test_a_forum_that_turns_markdown_on_is_followed`)."""
    app, forum = served["markdown off"]
    for path in ("/latest.md", f"{COMPILER}.md"):
        forum.set_body(path, (DEFAULT_ROOT / path.lstrip("/")).read_text(encoding="utf-8"))
    assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200
    forum.clear()  # every .md is 404 now
    time.sleep(RECHECK + 0.1)
    assert get(app.feed_url(f"{COMPILER}.rss")).status_code == 200
    assert forum.count(read_at(COMPILER)) == 1 and forum.count(read_at(COMPILER, "json")) == 1


# --- what list pages answer is never a transition -----------------------------------------------------

def test_a_private_category_cannot_flip_the_source_for_other_readers(served):
    """Must hold 5: /latest.md is an HTML page and one category is private (403). Requesting that category,
    then any cold feed, used to replace the decision by Markdown for a minute, so every other reader's
    category feeds answered 404; the attacker could repeat it every minute."""
    app, forum = served["private category"]
    forum.html_login("/latest.md")
    forum.json_error(read_at("/c/staff/7", "json"), status=403)
    refusals = []
    for cold in ("/tag/gpu.atom", "/hot.rss"):
        refusals.append(get(app.feed_url("/c/staff/7.atom")))
        assert get(app.feed_url(cold)).status_code == 200
        for reader in (f"{COMPILER}.atom", "/c/hardware/gpu/12.rss"):
            assert get(app.feed_url(reader)).status_code == 200, reader
    assert md(forum) == [read_at("/c/staff/7"), "/latest.md"]  # the first feed's own list, which decides nothing
    for private in refusals:  # that list's own error (not public: 403), no guess about the forum
        assert private.status_code == 403 and "answered 403" in private.text and "login-only" not in private.text


def test_a_garbage_json_list_is_that_lists_error_and_changes_nothing(served):
    app, forum = served["garbage json"]
    assert get(app.feed_url("/hot.atom")).status_code == 200
    forum.set_body(f"{COMPILER}.json", '{"users": [], "primary_groups": []}')
    broken = get(app.feed_url(f"{COMPILER}.atom"))
    assert broken.status_code == 502 and "not a topic list" in broken.text
    assert "login-only" not in broken.text and "neither" not in broken.text
    for path in ("/tag/gpu.atom", "/c/hardware/gpu/12.rss"):
        assert get(app.feed_url(path)).status_code == 200
    assert md(forum) == [read_at("/hot"), "/latest.md"]  # the decision stood: no probe was asked again
