"""A hostile forum, one misbehaviour at a time, over a real socket: what a single upstream fetch accepts.

Each case here was a 500, an unbounded cost or an escape before (issue 13, points 1-4, 6 and 8):
decompression bombs, malformed validators, unbounded or unreadable `Retry-After`, undecodable charsets,
slow redirect chains, and dot segments that leave a subfolder forum. A cold cache must answer the
documented status with a clear message; a warm one must serve the last good copy (200, stale).

The hostile answers and the compressed lists are served to the Procfile's gunicorn with its gevent worker,
as production reads them (`served`: one server per settings combination, each case with a fake forum of its
own, as in tests/test_faults.py); the cases that look into one fetch's settings run on the threaded app.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace

import feedparser
import httpx
import pytest

from feedbridge.config import Forum, Settings, parse_forum
from feedbridge.discourse.topic import parse_topic
from feedbridge.errors import MAX_MESSAGE_CHARS, ConfigError, NotATopicError, UpstreamError
from feedbridge.feeds.service import build_service
from feedbridge.store import keys
from feedbridge.store.memory import MemoryStore
from feedbridge.upstream.fetcher import Fetcher, is_within, normalise_url
from tests.appserver import PROJECT_ROOT, ProcfileApp, procfile_apps, running_app, settings_for
from tests.upstream import DEFAULT_ROOT, MARKDOWN, FakeForum, Fault, compression_bomb, list_reads, stop_together

LIST = "/latest.md"
FAST = {"read_timeout": 2.0, "total_timeout": 5.0, "connect_timeout": 1.0, "retries": 0}
GIB = 1 << 30
LATEST = (DEFAULT_ROOT / "latest.md").read_bytes()


def get(url: str, **kwargs) -> httpx.Response:
    return httpx.get(url, timeout=30, **kwargs)


def latin1(text: str) -> str:
    """`text` as its UTF-8 bytes, spelled so that http.server (which writes headers as Latin-1) sends them."""
    return text.encode().decode("latin-1")


def assert_plain_error(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    assert words in response.text, response.text
    assert response.headers["content-type"] == "text/plain; charset=utf-8"


def assert_entries(response: httpx.Response, count: int) -> None:
    parsed = feedparser.parse(response.content)
    assert parsed.bozo == 0 and len(parsed.entries) == count


# --- one hostile answer at a time, cold and warm -------------------------------------------------------


@dataclass(frozen=True)
class Hostile:
    name: str
    arm: Callable[[FakeForum], None]
    status: int  # with a cold cache
    words: str  # in the cold error message
    retry_after: str | None = None  # the cold answer's Retry-After, when it is a 503


def body(content: bytes | Callable[[], bytes], **headers: str) -> Callable[[FakeForum], None]:
    def arm(forum: FakeForum) -> None:
        data = content() if callable(content) else content
        forum.set_body(LIST, data, headers={"Content-Type": MARKDOWN, **headers})
    return arm


@functools.cache
def bomb(size: int, codings: str) -> bytes:
    return compression_bomb(size, codings)


def bomb_body(size: int, codings: str) -> Callable[[FakeForum], None]:
    """A bomb served with its `Content-Encoding`, built when first used (not while collecting tests)."""
    return body(lambda: bomb(size, codings), **{"Content-Encoding": codings})


HOSTILE = [
    Hostile("gzip, gzip bomb (1 GiB in 2.5 KB)", bomb_body(GIB, "gzip, gzip"), 502,
            "stacked content encodings (gzip, gzip)"),
    Hostile("deflate, gzip bomb", bomb_body(GIB, "deflate, gzip"), 502, "stacked content encodings"),
    Hostile("gzip bomb (1 GiB in 1 MB)", bomb_body(GIB, "gzip"), 502, "limit once decoded"),
    Hostile("deflate bomb", bomb_body(GIB, "deflate"), 502, "limit once decoded"),
    Hostile("unsupported coding", body(LATEST, **{"Content-Encoding": "br"}), 502, "unsupported content encoding"),
    Hostile("corrupt gzip", body(b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4, **{"Content-Encoding": "gzip"}),
            502, "corrupt gzip-compressed body"),
    Hostile("truncated gzip", body(gzip.compress(LATEST)[:-40], **{"Content-Encoding": "gzip"}),
            502, "ended early"),
    Hostile("two gzip members", body(gzip.compress(LATEST) * 2, **{"Content-Encoding": "gzip"}),
            502, "after the end of the compressed body"),
    Hostile("charset=undefined", body(LATEST, **{"Content-Type": "text/markdown; charset=undefined"}),
            502, "charset 'undefined', which is not a charset of text the bridge reads"),
    Hostile("charset=unknown", body(LATEST, **{"Content-Type": "text/markdown; charset=x-no-such"}),
            502, "charset 'x-no-such', which cannot be decoded"),
    Hostile("charset=unicode_escape", body(LATEST, **{"Content-Type": "text/markdown; charset=unicode_escape"}),
            502, "charset 'unicode_escape', which is not a charset of text"),
    Hostile("charset=hex", body(LATEST, **{"Content-Type": "text/markdown; charset=hex"}),
            502, "charset 'hex'"),
    Hostile("Retry-After: ² (isdigit, not a number)", lambda forum: forum.rate_limit(LIST, latin1("²")),
            503, "rate-limited", "60"),
    Hostile("Retry-After: 10^11 seconds", lambda forum: forum.rate_limit(LIST, "100000000000"),
            503, "rate-limited", "3600"),
    Hostile("Retry-After: 400 digits", lambda forum: forum.rate_limit(LIST, "9" * 400), 503, "rate-limited", "3600"),
    Hostile("Retry-After: year 9999", lambda forum: forum.rate_limit(LIST, "Fri, 31 Dec 9999 23:59:59 GMT"),
            503, "rate-limited", "3600"),
    Hostile("unreadable Location", lambda forum: forum.redirect(LIST, "http://[::1/latest.md"), 502,
            "to an unreadable Location"),
]


def raw_deflate(data: bytes) -> bytes:
    encoder = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return encoder.compress(data) + encoder.flush()


COMPRESSED = {
    "gzip": ("gzip", gzip.compress),
    "x-gzip": ("x-gzip", gzip.compress),
    "deflate-zlib": ("deflate", zlib.compress),  # the zlib format RFC 9110 means
    "deflate-raw": ("deflate", raw_deflate),  # what some servers send instead
    "identity": ("identity", lambda data: data),
}


@pytest.fixture(scope="module")
def served() -> Iterator[dict[str, tuple[ProcfileApp, FakeForum]]]:
    """Each case's server and fake forum, by name: the cold cases' server keeps copies, the warm and the
    compressed cases' rebuild on every request (cache TTL 0); both boot at once."""
    cases = ({f"cold {hostile.name}": {} for hostile in HOSTILE}
             | {f"warm {hostile.name}": {"cache_ttl": 0} for hostile in HOSTILE}
             | {f"compressed {name}": {"cache_ttl": 0} for name in COMPRESSED})
    with ExitStack() as stack:
        forums = {name: FakeForum().start() for name in cases}
        stack.callback(stop_together, list(forums.values()))
        apps = stack.enter_context(procfile_apps({name: settings_for(forums[name].url, **FAST, **extra)
                                                  for name, extra in cases.items()}))
        yield {name: (apps[name], forums[name]) for name in cases}


@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda h: h.name)
def test_cold_cache_answers_a_clear_error(served, hostile):
    app, upstream = served[f"cold {hostile.name}"]
    hostile.arm(upstream)
    response = get(app.feed_url("/latest.atom"))
    assert_plain_error(response, hostile.status, hostile.words)
    if hostile.retry_after is None:  # a failure is remembered, and said when it will be asked again
        assert response.headers.get("retry-after") in (None, *map(str, range(1, Settings().negative_ttl + 1)))
    else:
        assert response.headers.get("retry-after") == hostile.retry_after
    assert get(f"{app.url}/healthz").status_code == 200


@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda h: h.name)
def test_warm_cache_serves_the_last_good_copy(served, hostile):
    app, upstream = served[f"warm {hostile.name}"]
    url = app.feed_url("/latest.atom")
    good = get(url)
    assert good.status_code == 200
    hostile.arm(upstream)
    stale = get(url)
    assert stale.status_code == 200 and stale.content == good.content
    assert stale.headers["x-feedbridge-cache"] == "stale"
    assert hostile.words.split(" (")[0] in stale.headers["x-feedbridge-stale"]


@pytest.mark.parametrize("name", COMPRESSED)
def test_compressed_lists_are_read_like_plain_ones(served, name):
    app, upstream = served[f"compressed {name}"]
    coding, compress = COMPRESSED[name]
    url = app.feed_url("/latest.atom")
    plain = get(url)
    # The fake forum points the fixture's links at itself, but cannot inside a compressed body: done here.
    served_list = LATEST.replace(b"https://dev-discuss.pytorch.org", upstream.url.encode())
    upstream.set_body(LIST, compress(served_list), headers={"Content-Encoding": coding})
    compressed = get(url)
    assert compressed.status_code == 200, compressed.text
    assert compressed.headers["x-feedbridge-cache"] == "miss"
    assert compressed.content == plain.content
    assert_entries(compressed, 30)
    assert upstream.requests[-1].headers["accept-encoding"] == "gzip, deflate"


# --- memory under decompression bombs, measured in a worker process of its own ------------------------

WORKER = """
import json, resource, sys
import httpx
from tests.appserver import running_app, settings_for

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

forum_url, paths = sys.argv[1], sys.argv[2:]
with running_app(settings_for(forum_url, retries=0)) as app:
    warm = httpx.get(app.feed_url("/latest.atom"), timeout=60)
    report = {"warm": warm.status_code, "baseline_mb": peak_mb(), "bombs": []}
    for path in paths:
        answer = httpx.get(app.feed_url(path), timeout=60)
        report["bombs"].append({"path": path, "status": answer.status_code, "text": answer.text,
                                "peak_mb": peak_mb()})
print(json.dumps(report))
"""

BOMBS = [  # feed path (ids no fixture category has), decoded size, Content-Encoding; bodies of 2.5 KB to 3.2 MB
    ("/c/bomb/901.atom", GIB, "gzip, gzip"),
    ("/c/bomb/902.atom", 3 * GIB, "gzip, gzip"),
    ("/c/bomb/903.atom", GIB, "gzip"),
    ("/c/bomb/904.atom", 3 * GIB, "gzip"),
    ("/c/bomb/905.atom", 3 * GIB, "deflate"),
]


def cap_address_space() -> None:
    """A safety net for the machine running the tests, far above what the worker needs: a regression
    fails with MemoryError instead of taking gigabytes from everyone else."""
    resource.setrlimit(resource.RLIMIT_AS, (4 * GIB, 4 * GIB))


def test_decompression_bombs_cost_bounded_memory(upstream):
    """The worker's peak RSS after five bombs of 1-3 GiB stays within 100 MB of its peak after a normal
    feed (measured: a few MB). httpx's decoders inflated a whole read at once: 1 GiB took 2 GB."""
    for path, size, coding in BOMBS:
        upstream.set_body(path.replace(".atom", ".md"), bomb(size, coding),
                          headers={"Content-Type": MARKDOWN, "Content-Encoding": coding})
    worker = subprocess.run(
        [sys.executable, "-c", WORKER, upstream.url, *(path for path, _, _ in BOMBS)],
        cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True, text=True, timeout=120, check=False, preexec_fn=cap_address_space,
    )
    assert worker.returncode == 0, worker.stderr[-2000:]
    report = json.loads(worker.stdout.splitlines()[-1])
    assert report["warm"] == 200
    for answer, (_, _, coding) in zip(report["bombs"], BOMBS, strict=True):
        assert answer["status"] == 502, answer
        assert ("stacked" if "," in coding else "limit once decoded") in answer["text"]
    growth = report["bombs"][-1]["peak_mb"] - report["baseline_mb"]
    print(f"worker peak RSS {report['baseline_mb']:.1f} MB after a normal feed, +{growth:.1f} MB after the bombs")
    assert growth < 100, report


# --- validators ------------------------------------------------------------------------------------------

GOOD_DATE = "Sun, 06 Nov 1994 08:49:37 GMT"


@pytest.mark.parametrize("etag,last_modified,sent", [
    (latin1('"café"'), GOOD_DATE, {"if-modified-since"}),  # UTF-8 bytes: httpx reads them, cannot send them
    ('"caf\xe9"', GOOD_DATE, {"if-modified-since"}),  # Latin-1
    ("no-quotes", GOOD_DATE, {"if-modified-since"}),
    ('"' + "a" * 300 + '"', GOOD_DATE, {"if-modified-since"}),
    ('"ok"', latin1(GOOD_DATE + " ünïcödé"), {"if-none-match"}),
    ('"ok"', "yesterday", {"if-none-match"}),
    ('"ok"', GOOD_DATE, {"if-none-match", "if-modified-since"}),
])
def test_only_well_formed_validators_are_kept_and_sent_back(upstream, etag, last_modified, sent):
    """The page is stored with what the forum sent; its revalidation sends back only the valid validators,
    and neither the revalidation nor any later request fails (a non-ASCII ETag made every one a 500)."""
    with running_app(settings_for(upstream.url, cache_ttl=0, **FAST)) as app:
        upstream.set_body(LIST, LATEST, headers={"ETag": etag, "Last-Modified": last_modified})
        url = app.feed_url("/latest.atom")
        first = get(url)
        assert first.status_code == 200
        revalidated = get(url)
        assert revalidated.status_code == 200 and revalidated.headers["x-feedbridge-cache"] == "miss"
        asked = upstream.requests[-1].headers
        assert {"if-none-match", "if-modified-since"} & set(asked) == sent
        if "if-none-match" in sent:
            assert asked["if-none-match"] == etag
        upstream.clear()
        assert get(url).status_code == 200
        assert get(app.feed_url("/latest.html")).status_code == 200


def test_a_stored_malformed_validator_is_never_sent():
    """Defence at send time: a page stored by an older version (or shared through Redis) may hold any
    validator; the request still goes out, without it. (A forum behind a proxy that adds validators: core
    sends none.)"""
    fetcher = Fetcher(replace(Settings(), **FAST))
    with FakeForum(validators=True) as upstream:
        _sends_no_malformed_validator(fetcher, upstream)


def _sends_no_malformed_validator(fetcher: Fetcher, upstream: FakeForum) -> None:
    try:
        forum = Forum(upstream.url)
        fetched = fetcher.get(forum, upstream.url + LIST, etag='"café"', last_modified="lundi ☃")
        assert fetched.status == 200 and fetched.etag and fetched.last_modified
        asked = upstream.requests[-1].headers
        assert "if-none-match" not in asked and "if-modified-since" not in asked
        assert fetcher.get(forum, upstream.url + LIST, etag=fetched.etag).status == 304
    finally:
        fetcher.close()


def test_a_cookie_the_forum_sets_is_never_sent_back(upstream):
    """A cookie kept from one fetch would go out with every later one, whoever asked for it: state one
    request leaves for the next (a session, a locale, a tracking id). The fetcher keeps none."""
    upstream.set_body(LIST, LATEST, headers={"Set-Cookie": "_forum_session=abc; Path=/"})
    fetcher = Fetcher(replace(Settings(), **FAST))
    try:
        forum = Forum(upstream.url)
        for _ in range(2):
            assert fetcher.get(forum, upstream.url + LIST).status == 200
        assert [r.headers.get("cookie") for r in upstream.requests] == [None, None]
        assert upstream.requests[-1].headers["user-agent"].startswith("feedbridge")
    finally:
        fetcher.close()


@pytest.mark.parametrize("charset", ["ISO-8859-1", "windows-1252", "koi8-r", "utf-16", "Shift_JIS", "UTF8"])
def test_a_web_pages_charset_is_read_as_it_says(upstream, charset):
    """Only the charsets of web pages are read (the fetcher's `_CHARSETS`): these, as before."""
    text = "# Ça va · Привет · テスト\n" if charset.lower() in ("utf-16", "utf8") else {
        "shift_jis": "# テスト\n", "koi8-r": "# Привет\n"}.get(charset.lower(), "# Ça va\n")
    upstream.set_body(LIST, text.encode(charset), headers={"Content-Type": f"text/markdown; charset={charset}"})
    fetcher = Fetcher(replace(Settings(), **FAST))
    try:
        assert fetcher.get(Forum(upstream.url), upstream.url + LIST).text == text
    finally:
        fetcher.close()


def test_proxy_variables_in_the_environment_are_not_followed(upstream, monkeypatch):
    """A platform may set HTTP_PROXY for its own tools: forum fetches still go straight to the forum (a
    closed port here), never through whatever the environment names."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    fetcher = Fetcher(replace(Settings(), **FAST))
    try:
        assert fetcher.get(Forum(upstream.url), upstream.url + LIST).status == 200
        assert upstream.count(LIST) == 1
    finally:
        fetcher.close()


# --- Retry-After ------------------------------------------------------------------------------------------


def test_retry_after_is_clamped_to_the_configured_maximum(upstream):
    """`Retry-After: 100000000000` blocked the forum for 3,000 years; now for FEEDBRIDGE_RETRY_AFTER_MAX."""
    with running_app(settings_for(upstream.url, retry_after_max=1, **FAST)) as app:
        upstream.rate_limit(LIST, "100000000000", times=1)
        url = app.feed_url("/latest.atom")
        refused = get(url)
        assert_plain_error(refused, 503, "rate-limited")
        assert refused.headers["retry-after"] == "1"
        asked = upstream.count(LIST)
        time.sleep(1.2)  # the clamped wait is over: the forum is asked again, and answers
        assert get(url).status_code == 200
        assert upstream.count(LIST) == asked + 1


def test_a_stored_wait_past_the_maximum_is_not_honoured(upstream):
    """A shared control store written by another instance with a larger maximum may say 3,000 years: past
    this instance's maximum it is ignored and the forum asked (a new 429 would store a clamped wait)."""
    settings = settings_for(upstream.url, **FAST)
    fetcher = Fetcher(settings)
    try:
        service = build_service(settings, MemoryStore(1 << 20), fetcher)
        forum = settings.forums[0]
        service.public.control.set(keys.ratelimit(forum.base_url), time.time() + 1e11, 3600)
        assert service.public.gate.fetch(forum, upstream.url + LIST, caller=None).status == 200
        assert upstream.count(LIST) == 1
    finally:
        fetcher.close()


@pytest.mark.parametrize("raw,expected", [("1", 1), ("86400", 86400)])
def test_retry_after_max_setting(raw, expected):
    assert Settings.from_env({"FEEDBRIDGE_RETRY_AFTER_MAX": raw}).retry_after_max == expected
    assert Settings.from_env({}).retry_after_max == 3600


@pytest.mark.parametrize("raw", ["0", "86401", "1e3", "²"])
def test_retry_after_max_setting_is_range_checked(raw):
    with pytest.raises(ConfigError, match="FEEDBRIDGE_RETRY_AFTER_MAX"):
        Settings.from_env({"FEEDBRIDGE_RETRY_AFTER_MAX": raw})


# --- the whole-fetch deadline across redirects ------------------------------------------------------------

HOPS = ["/latest.md", "/latest.md?hop=1", "/latest.md?hop=2", "/latest.md?hop=3"]


def arm_slow_redirects(forum: FakeForum, seconds: float) -> None:
    """Three redirects, each answering after `seconds`; the fourth target is the list itself."""
    for source, target in itertools.pairwise(HOPS):
        forum.set_fault(source, Fault("redirect", status=302, location=target, delay=seconds))


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_total_timeout_covers_every_redirect_hop(upstream, warm):
    """Total 2 s, hops of 1.5 s each: 4.5 s and more before; now 504 (or the stale copy) at about 2 s.
    The source is fixed: a probe that times out would be followed by detection's /latest.json."""
    settings = settings_for(f"markdown:{upstream.url}", cache_ttl=0, read_timeout=10.0, total_timeout=2.0, retries=0)
    with running_app(settings) as app:
        url = app.feed_url("/latest.atom")
        good = get(url) if warm else None
        upstream.reset()
        arm_slow_redirects(upstream, 1.5)
        started = time.monotonic()
        response = get(url)
        seconds = time.monotonic() - started
        if good is None:
            assert_plain_error(response, 504, "longer than 2s")
            assert "after 1 redirect" in response.text
        else:
            assert response.status_code == 200 and response.content == good.content
            assert response.headers["x-feedbridge-cache"] == "stale"
        assert seconds < 2.0 + 1.0, f"{seconds:.1f}s"
        assert [r.target for r in upstream.requests] == HOPS[:2]  # the second hop was cut off


# --- dot segments and a subfolder forum ------------------------------------------------------------------

SUB_LIST = "/sub/latest.md"


def sub_forum_list(topic_prefix: str = "/sub/t/") -> bytes:
    """The fixture list as a forum under /sub serves it; topic links start with `topic_prefix`."""
    text = LATEST.decode().replace("https://dev-discuss.pytorch.org/", "https://dev-discuss.pytorch.org/sub/")
    return text.replace("https://dev-discuss.pytorch.org/sub/t/", f"https://dev-discuss.pytorch.org{topic_prefix}").encode()


def outside_sub(forum: FakeForum) -> list[str]:
    return [r.target for r in forum.requests if not r.target.startswith("/sub/")]


@pytest.mark.parametrize("location", [
    "/sub/../other/latest.md",
    "{url}/sub/../other/latest.md",
    "/sub/./../other/latest.md",
    "/sub/%2e%2e/other/latest.md",
    "/sub/%2E%2E/other/latest.md",
    "/sub/.%2e/other/latest.md",
    "/sub//../other/latest.md",  # nginx merges the slashes, then leaves /sub
    "/sub/..%2fother/latest.md",  # an encoded slash: refused whatever the server makes of it
    "/sub/%2e%2e%5cother/latest.md",
])
def test_a_redirect_cannot_leave_the_subfolder_through_dot_segments(upstream, location):
    upstream.set_body(SUB_LIST, sub_forum_list())
    upstream.set_body("/other/latest.md", LATEST)  # a list the escape would have served as /sub's feed
    upstream.redirect(SUB_LIST, location.format(url=upstream.url), times=1)
    # The source is fixed: after a refused redirect, detection would ask for /sub/latest.json next.
    with running_app(settings_for(f"markdown:{upstream.url}/sub", **FAST)) as app:
        response = get(app.feed_url("/latest.atom"))
        assert_plain_error(response, 502, "outside")
    assert [r.target for r in upstream.requests] == [SUB_LIST]


def test_dot_segments_that_stay_inside_the_subfolder_are_followed(upstream):
    upstream.set_body(SUB_LIST, sub_forum_list())
    upstream.redirect(SUB_LIST, "/sub/t/../latest.md?v=%2e", times=1)
    with running_app(settings_for(upstream.url + "/sub", **FAST)) as app:
        response = get(app.feed_url("/latest.atom"))
        assert response.status_code == 200, response.text
        assert_entries(response, 30)
    assert [r.target for r in list_reads(upstream.requests)] == [SUB_LIST, "/sub/latest.md?v=%2e"]


@pytest.mark.parametrize("prefix", ["/sub/../other/t/", "/sub/%2e%2e/other/t/", "/sub/t/%2E%2E/%2e%2e/other/t/"])
def test_topic_urls_cannot_leave_the_subfolder(upstream, prefix):
    """content=full fetches each topic's page: a list whose topic links climb out of /sub has nothing outside
    /sub asked for. A topic's link is made on the forum from its id and slug (`fields.topic_link`): each entry
    links, and its page is read, under /sub (the fixture has no such pages: excerpts). Before that, these links
    were the entries' links, and their pages were not read."""
    upstream.set_body(SUB_LIST, sub_forum_list(prefix))
    with running_app(settings_for(upstream.url + "/sub", **FAST)) as app:
        response = get(app.feed_url("/latest.atom?content=full"))
        assert response.status_code == 200, response.text
        assert_entries(response, 30)
    assert outside_sub(upstream) == []
    links = [entry.link for entry in feedparser.parse(response.content).entries]
    assert all(re.fullmatch(rf"{upstream.url}/sub/t/[^/]+/\d+", link) for link in links)
    # the list, its JSON twin for the topics' pictures (feeds/sources/reads.py), and each topic's page
    assert [r.target for r in list_reads(upstream.requests)][:2] == [SUB_LIST, "/sub/latest.json"]
    assert sorted(r.target for r in list_reads(upstream.requests)[2:]) == sorted(
        f"{link.removeprefix(upstream.url)}.md" for link in links)


def linked_list(links: dict[int, str]) -> str:
    """A Markdown latest list (core's C4 layout) whose topic N's heading links to `links[N]`."""
    blocks = [f"## [Widget {n}]({url})\n\n**Author:** [@alice](https://forum.example.org/u/alice)\\\n**Replies:** 1"
              f'\\\n**Last updated:** [a day]({url} "2026-09-0{n % 9 + 1}T12:00:00Z")\n\nAbout widget {n}.\n'
              for n, url in links.items()]
    return "# Latest\n\n**URL:** https://forum.example.org/latest.md\n\n---\n\n" + "\n---\n\n".join(blocks)


def test_a_topic_id_paired_with_another_topics_link_is_no_such_entry(upstream):
    """A Markdown list names a topic by its link's last segment: `/t/widget-12/12/13` (topic 12's post 13) was
    topic 13 and `/t/14/15` (a slug of digits: topic 14's post 15 to Discourse) topic 15, each an entry whose id
    readers keep it by named one topic and whose link another, and `content=full` read the other's page for
    it; a link on another host was the entry's link. Now the link must end as core's do, `/t/{slug}/{id}`,
    or name no topic, and it is made on the forum from them (RELIABILITY.md row 75)."""
    upstream.set_body("/latest.md", linked_list({
        11: "https://elsewhere.example/t/widget-11/11",  # off the forum's host: made on the forum
        13: "https://forum.example.org/t/widget-12/12/13",  # topic 12's post 13, read as topic 13: no topic
        15: "https://forum.example.org/t/14/15",  # a slug of digits: no topic
        16: "https://forum.example.org/t/widget-16/16",  # core's: as it is
    }))
    with running_app(settings_for(upstream.url)) as app:
        response = get(app.feed_url("/latest.atom?content=full"))
    assert response.status_code == 200, response.text
    feed = feedparser.parse(response.content)
    assert feed.bozo == 0
    assert sorted((e.id, e.link) for e in feed.entries) == [(f"{upstream.url}/t/{n}", f"{upstream.url}/t/widget-{n}/{n}")
                                                            for n in (11, 16)]
    pages = sorted(r.target for r in upstream.requests if r.target.startswith("/t/"))
    assert pages == ["/t/widget-11/11.md", "/t/widget-16/16.md"]  # nothing of topics 12 to 15


def test_an_author_link_on_another_host_is_made_on_the_forum(upstream):
    """A Markdown list links each author, and the link was the entry's author URI whatever its host: a list
    could send readers of `[@alice](https://elsewhere.example/u/alice)` there. An author is the forum's user:
    the link is made from the name, `{base}/u/{name}` percent-encoded as core encodes unicode names, in the
    fast path (core's C4 rows), the general one (a row that names no link: `@bob`) and for JSON lists alike; a
    name no username of core could be (a dot segment, over 60 characters) gets none."""
    elsewhere = linked_list({21: "https://forum.example.org/t/widget-21/21", 22: "https://forum.example.org/t/w/22",
                             24: "https://forum.example.org/t/w/24", 25: "https://forum.example.org/t/w/25",
                             26: "https://forum.example.org/t/w/26"})
    elsewhere = elsewhere.replace("[@alice](https://forum.example.org/u/alice)",
                                  "[@alice](https://elsewhere.example/u/mallory)", 1)
    elsewhere = elsewhere.replace("[@alice](https://forum.example.org/u/alice)", "[@jörg](javascript:alert%281%29)", 1)
    elsewhere = elsewhere.replace("[@alice](https://forum.example.org/u/alice)", "[@..](https://forum.example.org/)", 1)
    elsewhere = elsewhere.replace("[@alice](https://forum.example.org/u/alice)", f"[@{'字' * 61}](https://x.example/)", 1)
    elsewhere = elsewhere.replace("[@alice](https://forum.example.org/u/alice)", f"[@{'字' * 60}](https://x.example/)", 1)
    plain = linked_list({23: "https://forum.example.org/t/w/23"}).replace(
        "[@alice](https://forum.example.org/u/alice)\\\n**Replies:** 1\\", "@bob\n**Replies:** 1\n")
    assert "**Author:** @bob\n" in plain
    upstream.set_body("/latest.md", elsewhere + "\n---\n\n" + plain.split("---\n\n", 1)[1])
    with running_app(settings_for(upstream.url)) as app:
        response = get(app.feed_url("/latest.atom"))
    assert response.status_code == 200, response.text
    feed = feedparser.parse(response.content)
    assert feed.bozo == 0
    assert sorted((e.id.rpartition("/")[2], e.get("author_detail", {}).get("href")) for e in feed.entries) == [
        ("21", f"{upstream.url}/u/alice"), ("22", f"{upstream.url}/u/j%C3%B6rg"), ("23", f"{upstream.url}/u/bob"),
        ("24", None),  # `..`: no user's page (`{base}/u/..` is the front page)
        ("25", None),  # 61 characters: longer than any username core keeps (a link of 549)
        ("26", f"{upstream.url}/u/" + "%E5%AD%97" * 60)]
    assert b"elsewhere" not in response.content and b"mallory" not in response.content


def test_a_json_slug_that_makes_the_link_another_page_is_not_the_links():
    """A JSON list names a topic by its id and slug, and its link was `/t/{slug}/{id}` whatever the slug: topic
    9003 slugged `9446` linked to `/t/9446/9003` (topic 9446's post 9003 to Discourse), and `content=full` read
    topic 9446's document there, refused it, and remembered the refusal as topic 9003's: its own post feed
    answered 502 for the negative TTL. Topic 9446 slugged `..` linked to `/t/../9446`, which is `/9446`. A slug
    core never makes (digits alone, a dot segment) is core's default, `topic` (RELIABILITY.md row 75)."""
    from tests.fake_posts import PostSite

    site = PostSite.standard()

    def core(target: str) -> bytes | None:
        """Core's routes: `/t/ID/N` is topic ID's post N, routed before `/t/SLUG/ID`, which is topic ID."""
        path = target.partition("?")[0]
        found = re.fullmatch(r"/t/(\d+)/\d+\.json", path) or re.fullmatch(r"/t/[^/]+/(\d+)\.json", path)
        return site.answer(f"/t/{found[1]}.json" if found else target)

    with FakeForum(mode="json", posts=core) as forum, running_app(settings_for(forum.url)) as app:
        forum.set_body("/latest.json", json.dumps({"users": [], "topic_list": {"topics": [
            {"id": 9003, "title": "Small", "slug": "9446", "posts_count": 5, "last_posted_at": "2026-11-02T00:00:00Z"},
            {"id": 9446, "title": "Long", "slug": "..", "posts_count": 446, "last_posted_at": "2026-11-01T00:00:00Z"},
        ]}}))
        items = get(app.feed_url("/latest.json?content=full")).json()["items"]
        posts = get(app.feed_url("/t/9003.atom"))
    assert [(i["id"], i["url"]) for i in items] == [(f"{forum.url}/t/{n}", f"{forum.url}/t/topic/{n}")
                                                    for n in (9003, 9446)]
    assert all("content_html" in item for item in items)  # each its own topic's first post
    assert "Small thread post 1" in items[0]["content_html"] and "long thread" in items[1]["content_html"]
    assert posts.status_code == 200 and feedparser.parse(posts.content).bozo == 0

@pytest.mark.parametrize("url,inside", [
    ("http://f.example/sub/latest.md", True),
    ("http://f.example/sub", True),
    ("http://f.example/sub/a/../latest.md", True),
    ("http://f.example/sub/../other/latest.md", False),
    ("http://f.example/sub/..", False),
    ("http://f.example/sub/%2e%2e/x", False),
    ("http://f.example/sub/%2E./x", False),
    ("http://f.example/sub/..%2Fx", False),
    ("http://f.example/sub/%2fx", False),
    ("http://f.example/sub/%5C..", False),
    ("http://f.example/subway/latest.md", False),
    ("http://f.example/sub/x/%2e%2e/%2E%2E/y", False),
    ("http://f.example//sub/latest.md", True),  # merged slashes: what nginx serves
])
def test_is_within_checks_the_normalised_path(url, inside):
    """Service checks topic URLs with is_within before fetching: it must judge the path the server resolves."""
    assert is_within(Forum("http://f.example/sub"), url) is inside


@pytest.mark.parametrize("configured", ["https://bücher.example", "https://xn--bcher-kva.example"])
def test_an_internationalised_forum_is_one_host_in_either_form(configured):
    """httpx sends a Unicode host as its punycode name (IDNA 2008), and core names itself by that name in its
    redirects and links (`Discourse.base_url`). A forum configured as `https://bücher.example` refused every
    redirect and every topic link of its own as leaving the forum (content=full read no topic page), and one
    configured in punycode refused a link written in Unicode. Another name, or one IDNA refuses, is still outside."""
    forum = parse_forum(configured)
    for url in ("https://xn--bcher-kva.example/t/a/1", "https://bücher.example/t/a/1", "https://BÜCHER.example/t/a/1"):
        assert is_within(forum, url), url
    for url in ("https://xn--bcher-kvb.example/t/a/1", "https://bucher.example/t/a/1", "https://b\u200dücher.example/t",
                "http://bücher.example/t/a/1"):
        assert not is_within(forum, url), url
    with pytest.raises(ConfigError, match="not an http"):
        parse_forum("https://b\u200d\u00fccher.example")


def test_an_internationalised_forum_is_read_and_named_by_its_punycode_name(monkeypatch):
    """A forum configured as `http://bücher.localhost:PORT`, over a real socket (its name resolved to the fake
    forum in this process only). Its topic links, which core writes with the punycode name, are its own (the
    topic pages of content=full are read), and every entry's id and link names it in punycode: the ids of its
    posts and digest periods were in Unicode where its topics' were not, and an RSS guid that says it is a
    permalink was no URL."""
    from tests.fake_posts import PostSite
    from tests.test_conformance import violations

    resolve = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo",
                        lambda host, *a, **k: resolve("127.0.0.1" if host == "xn--bcher-kva.localhost" else host, *a, **k))
    with FakeForum(mode="json", posts=PostSite.standard().answer) as forum:
        settings = replace(settings_for(forum.url), forums=(parse_forum(f"json:http://Bücher.localhost:{forum.port}"),))
        base = f"http://xn--bcher-kva.localhost:{forum.port}"
        with running_app(settings) as app:
            assert app.forum_key == f"xn--bcher-kva.localhost:{forum.port}"
            for path in ("/latest", "/c/compiler/5?content=full", "/t/9003", "/posts", "/c/compiler/5?digest=daily"):
                for fmt in ("atom", "rss"):
                    feed_path, _, query = path.partition("?")
                    response = httpx.get(app.feed_url(f"{feed_path}.{fmt}" + (f"?{query}" if query else "")), timeout=30)
                    assert response.status_code == 200, (path, response.text)
                    assert violations(fmt, response.content) == [], path
                    entries = feedparser.parse(response.content).entries
                    assert entries and all(e.id.startswith(base + "/") and e.link.startswith(base + "/")
                                           for e in entries), (path, entries[0].id, entries[0].link)
        assert any(request.path.endswith("/3441.json") for request in forum.requests)  # content=full read its topics


@pytest.mark.parametrize("url,normal", [
    ("http://f.example/sub/a/./b/../c", "http://f.example/sub/a/c"),
    ("http://f.example/sub/a/%2E%2e/b?q=%2e#top", "http://f.example/sub/b?q=%2e"),  # the query is not a path
    ("http://f.example//sub//a/", "http://f.example/sub/a/"),
    ("http://f.example/../", "http://f.example/"),  # RFC 3986 §5.2.4; rfc3986 2.0 alone gives no path at all
    ("http://f.example/sub/x/../../../", "http://f.example/"),
    ("http://f.example/t/caf%c3%a9", "http://f.example/t/caf%C3%A9"),
    ("http://f.example", "http://f.example"),
])
def test_the_url_fetched_is_the_normalised_one(url, normal):
    assert normalise_url(url) == normal


def test_a_topic_with_a_hundred_thousand_tags_is_answered_over_gunicorn_with_its_first_hundred():
    """RELIABILITY.md row 72 on the Procfile's gunicorn: a JSON list with 100,000 distinct tags on one topic
    (1.1 MB) held the gevent worker until gunicorn killed it, on every request, `/healthz` waiting; the
    parser's own test (`test_json_lists.py`) checks the first `MAX_TAGS` are kept in order."""
    from feedbridge.discourse.fields import MAX_TAGS
    from tests.upstream import JSON_ROOT

    listing = json.loads((JSON_ROOT / "latest.json").read_text(encoding="utf-8"))
    tagged = listing["topic_list"]["topics"][0]
    tagged["tags"] = [f"tag-{n}" for n in range(100_000)]
    with FakeForum(mode="json") as forum:
        forum.set_body("/latest.json", json.dumps(listing), headers={"Content-Type": "application/json"})
        with procfile_apps({"app": settings_for(forum.url, **FAST)}) as apps:
            app = apps["app"]
            answer = httpx.get(app.feed_url("/latest.atom"), timeout=20)
            health = httpx.get(f"{app.url}/healthz", timeout=5)
    assert answer.status_code == 200 and health.status_code == 200
    feed = feedparser.parse(answer.content)
    entry = next(entry for entry in feed.entries if f"/{tagged['id']}" in entry.link)
    terms = [tag.term for tag in entry.get("tags", []) if tag.term.startswith("tag-")]
    assert terms == [f"tag-{n}" for n in range(MAX_TAGS)], terms[:5]


def test_what_a_forum_sent_is_quoted_in_an_error_cut_short(upstream):
    """A JSON list of one 4.9 MB key made a 4.9 MB message: the body of every 502, held by each remembered
    failure and logged, and a worker grew by 383 MB in ten requests; a topic page's 4 MB `**URL:**` row was
    4 MB of log a topic. Each quote is cut where it is made, and any error's message at `MAX_MESSAGE_CHARS`."""
    upstream.set_body("/latest.json", json.dumps({"a" * 1_000_000 + "\U0001f600": 1}))
    settings = replace(settings_for(upstream.url, **FAST), forums=(parse_forum(f"json:{upstream.url}"),))
    with running_app(settings) as app:
        answers = [get(app.feed_url("/latest.atom")) for _ in range(2)]  # built, then remembered
    assert [a.status_code for a in answers] == [502, 502]
    assert all(len(a.content) < 1000 and "JSON object with keys" in a.text for a in answers), [
        a.text for a in answers]
    with pytest.raises(NotATopicError) as raised:
        parse_topic(f"# T\n\n**URL:** https://x.example/{'a' * 1_000_000}\n\nhello\n")
    assert len(raised.value.message) < 400
    assert len(UpstreamError("x" * 1_000_000).message) == MAX_MESSAGE_CHARS + 1
