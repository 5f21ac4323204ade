"""Every route and parameter against hostile values: traversal, encoded slashes, CRLF, oversized values,
Unicode look-alikes, markup and repeated keys.

What must hold for each: a clear answer (never a 5xx), errors as plain text with `nosniff` (or an escaped
HTML page for `.html` routes), no header injected, no markup reflected unescaped, and no request leaving
the process except to the configured fake forum, on a path of the shape the forum serves. Outgoing
requests are recorded at the httpx transport, so a request to anywhere else could not go unseen.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit

import httpx
import pytest

from feedbridge.feeds.request.params import MAX_PARAM_CHARS
from feedbridge.feeds.select.filters import MAX_AUTHORS, MAX_LIMIT
from feedbridge.feeds.select.query import MAX_QUERY_LENGTH
from tests.appserver import running_app, settings_for
from tests.upstream import FakeForum

HOSTILE = {
    "traversal": "../../../etc/passwd",
    "encoded traversal": "..%2F..%2Fadmin",
    "double-encoded": "%252e%252e%252fadmin",
    "encoded backslash": "%5c%5cevil.example",
    "absolute url": "http://169.254.169.254/latest/meta-data/",
    "protocol-relative": "//evil.example/x",
    "userinfo": "x@169.254.169.254",
    "crlf": "a\r\nX-Injected: 1",
    "nul": "a\x00b",
    "markup": "<script>alert(1)</script>",
    "attribute": '"><img src=x onerror=alert(1)>',
    "fullwidth look-alike": "ｃｏｍｐｉｌｅｒ",
    "cyrillic look-alike": "соmрilеr",
    "fullwidth dots": "．．／．．／admin",
    "zero-width": "compi\u200bler",
    "rtl override": "\u202ereliPmoc",
    "oversized": "a" * 10_000,
}
# Safe, well-formed values the routes below fill in where the hostile value does not go.
# A list is read as Markdown, and as JSON where a filter needs what Markdown lacks (`tag=`: feeds/sources/reads.py).
FORUM_PATH = re.compile(r"/(?:(?:latest|hot|top|categories|c(?:/[\w%.-]{1,300}){1,2}/\d{1,9}(?:/l/latest)?"
                        r"|tag/[\w%.-]{1,300}(?:/\d{1,9})?)\.(?:md|json)|t/[\w%.-]{1,300}/\d{1,9}\.md"
                        r"|topics/created-by/[\w%.-]{1,300}\.json"
                        r"|site/basic-info\.json)")  # the forum's icon (feeds/sources/site.py): a fixed path

# (name, URL template relative to the bridge; {forum} is the fake forum's key, {v} the quoted hostile value)
ROUTES = [
    ("category slug", "/{forum}/c/{v}/5.atom"),
    ("nested category slug", "/{forum}/c/compiler/{v}/5.rss"),
    ("category id", "/{forum}/c/compiler/{v}.atom"),
    ("tag", "/{forum}/tag/{v}.json"),
    ("tag id", "/{forum}/tag/gpu/{v}.atom"),
    ("user", "/{forum}/u/{v}.atom"),
    ("format", "/{forum}/latest.{v}"),
    ("list", "/{forum}/{v}.atom"),
    ("forum", "/{v}/latest.atom"),
    ("forum suffix", "/{forum}{v}/latest.atom"),
    ("html page", "/{forum}/c/{v}/5.html"),
    ("opml", "/{v}/opml"),
] + [(f"query {name}", f"/{{forum}}/{path}?{name}={{v}}") for name, path in [
    ("author", "latest.atom"), ("q", "latest.atom"), ("limit", "latest.atom"), ("pages", "latest.atom"),
    ("category", "latest.atom"), ("content", "latest.atom"), ("period", "top.atom"), ("tag", "latest.atom"),
    ("q", "search.rss"), ("category", "u/jansel.json"), ("author", "c/compiler/5.html"),
]] + [(f"front page {name}", f"/?{name}={{v}}") for name in (
    "forum", "list", "category", "tag", "period", "author", "q", "pages", "format", "url",
)] + [("preview q", "/preview?list=latest&q={v}"), ("recognise", "/recognise?url={v}")]


@pytest.fixture
def outgoing(monkeypatch):
    """Every request made through httpx in this process (the bridge's fetcher and the test's own calls)."""
    seen: list[httpx.Request] = []
    original = httpx.HTTPTransport.handle_request

    def record(self, request):
        seen.append(request)
        return original(self, request)

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", record)
    return seen


@pytest.fixture(scope="module")
def forum():
    with FakeForum() as fake:
        yield fake


@pytest.fixture(scope="module")
def bridge(forum):
    # Hundreds of cases from one address in one app: the per-forum budget (tests/test_abuse.py) is off.
    with running_app(settings_for(forum.url, forum_budget=0)) as running:
        yield running


@pytest.fixture
def upstream(forum):
    """One fake forum for the whole module (hundreds of cases), with a fresh request log per test."""
    forum.clear()
    forum.reset()
    return forum


@pytest.fixture
def app(bridge, upstream):
    return bridge


def get(url: str, **kwargs) -> httpx.Response:
    return httpx.get(url, timeout=30, **kwargs)


def assert_only_the_forum_was_asked(app, upstream, outgoing: list[httpx.Request]) -> None:
    bridge, forum = urlsplit(app.url).netloc, urlsplit(upstream.url).netloc
    for request in outgoing:
        if request.url.netloc.decode() == bridge:
            continue
        assert request.url.netloc.decode() == forum, f"fetched {request.url}"
    for request in upstream.requests:
        assert FORUM_PATH.fullmatch(request.path), f"unexpected upstream path {request.target!r}"
        assert ".." not in request.target and "%2f" not in request.target.lower()
        assert "%5c" not in request.target.lower() and "\\" not in request.target


def assert_safe_answer(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text[:300]
    assert "x-injected" not in response.headers
    assert "set-cookie" not in response.headers
    body = response.text
    if "<script>alert" in body or "<img src=x" in body:
        # Echoed only as plain text that may not be sniffed, or as a JSON string, which browsers never
        # render as HTML: inert.
        if response.headers["content-type"].startswith("text/plain"):
            assert response.headers["x-content-type-options"] == "nosniff"
        else:
            assert response.headers["content-type"].startswith("application/json")
    if response.status_code >= 400:
        content_type = response.headers["content-type"]
        assert content_type.startswith(("text/plain", "text/html", "application/json")), content_type
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "Traceback" not in body


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
@pytest.mark.parametrize("route", ROUTES, ids=[name for name, _ in ROUTES])
def test_hostile_values_in_every_route_and_parameter(app, upstream, outgoing, route, value):
    _, template = route
    url = app.url + template.format(forum=app.forum_key, v=quote(value, safe=""))
    response = get(url)
    assert_safe_answer(response)
    assert_only_the_forum_was_asked(app, upstream, outgoing)
    if not template.startswith("/?") and response.status_code >= 400:
        assert response.status_code in (400, 404)


@pytest.mark.parametrize("raw", [
    "/{forum}/c/..%2f..%2fadmin/5.atom", "/{forum}/c/%2e%2e/%2e%2e/5.atom", "/{forum}/../../etc/passwd",
    "/{forum}/c/compiler%2F..%2F..%2F/5.atom", "/{forum}/tag/a%0d%0aSet-Cookie:%20x=1.atom",
    "/{forum}/latest.atom?q=a%0d%0aSet-Cookie:%20x=1", "/{forum}/latest.atom%00.html",
    "/{forum}/latest.atom?author=%E2%80%AEnimda", "/{forum}/c/compiler/5.atom;x=1", "/{forum}/c/compiler/5.atom#x",
    "/{forum}/%2e%2e%2f%2e%2e%2flatest.atom", "/%31%32%37.0.0.1/latest.atom", "/{forum}/latest.atom?limit=%EF%BC%95",
])
def test_raw_path_tricks(app, upstream, outgoing, raw):
    response = get(app.url + raw.format(forum=app.forum_key))
    assert_safe_answer(response)
    assert_only_the_forum_was_asked(app, upstream, outgoing)


@pytest.mark.parametrize("name", ["q", "limit", "pages", "period", "category", "content"])
def test_single_valued_parameters_given_twice_are_refused(app, upstream, name):
    response = get(app.feed_url(f"/top.atom?{name}=1&{name}=2"))
    assert response.status_code == 400
    assert f"{name} was given 2 times" in response.text
    assert upstream.count() == 0


def test_repeated_authors_and_tags_are_a_set_with_a_bound(app, upstream):
    same = get(app.feed_url("/c/compiler/5.atom?author=jansel&author=JANSEL&author=jansel"))
    assert same.status_code == 200
    names = "&".join(f"author=user{i}" for i in range(MAX_AUTHORS + 1))
    too_many = get(app.feed_url(f"/c/compiler/5.atom?{names}"))
    assert too_many.status_code == 400 and f"at most {MAX_AUTHORS}" in too_many.text


@pytest.mark.parametrize("query,words", [
    (f"limit={MAX_LIMIT + 1}", f"from 1 to {MAX_LIMIT}"),
    ("limit=-1", "limit"),
    ("limit=1e3", "limit"),
    ("pages=6", "from 1 to 5"),
    ("pages=0", "pages"),
    (f"q={'a' * (MAX_QUERY_LENGTH + 1)}", "q"),
    (f"author={'a' * (MAX_PARAM_CHARS + 1)}", f"longer than {MAX_PARAM_CHARS}"),
    ("category=99999999999", "category"),
])
def test_documented_limits_are_enforced(app, upstream, query, words):
    path = "/latest.atom?" + query
    response = get(app.feed_url(path))
    assert response.status_code == 400, response.text
    assert words in response.text
    assert upstream.count() == 0


def test_limits_at_their_bounds_are_accepted(app):
    response = get(app.feed_url(f"/c/compiler/5.json?limit={MAX_LIMIT}&pages=5&q={'a' * 10}"))
    assert response.status_code == 200
    assert get(app.feed_url("/c/compiler/5.json?limit=1")).json()["items"].__len__() == 1


@pytest.mark.parametrize("where", ["path", "query"])
def test_ten_kilobyte_urls_are_refused_cleanly(app, upstream, where):
    big = "a" * 10_240
    url = app.feed_url(f"/c/{big}/5.atom") if where == "path" else app.feed_url(f"/latest.atom?q={big}")
    response = get(url)
    assert response.status_code in (400, 404, 414)
    assert response.headers["content-type"].startswith("text/plain")
    assert len(response.content) < 1024  # the value is not echoed back in full
    assert upstream.count() == 0


def test_hostile_host_header_does_not_poison_the_cache(app):
    evil = get(app.feed_url("/latest.atom"), headers={"Host": "evil.example"})
    assert evil.status_code == 200
    assert b"evil.example" in evil.content  # its own self link: the client asked for that host
    normal = get(app.feed_url("/latest.atom"))
    assert b"evil.example" not in normal.content


def test_markup_in_upstream_titles_never_reaches_html_pages_as_markup(app):
    page = get(app.feed_url("/latest.html"))
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
