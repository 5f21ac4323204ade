"""What the service keeps of its clients' requests, and what it makes of a forum's directory (issue 43, items 5-6).

The resolved-URL memo (`feedbridge.web.hits.ResolvedUrls`) is bounded in bytes and remembers only the URLs of
feeds served: 6,000 distinct 2.5 KB URLs grew a worker by 98 MiB (each entry about 25 KB: the query kept whole
in the key, the self URL, the spec parsed from it), 404 and 429 answers included. Its count is checked against
tracemalloc in process; the worker's growth over a real socket on the Procfile's gunicorn, in bytes of RSS.

The front page and the OPML list walked a forum's whole directory on every request (4.4-5 ms each with 500
categories, uncharged). What they make of it is made once per directory (`feedbridge.web.pages.OncePerDirectory`),
which the tests count as walks over the directory, and both pages are charged to the client's CPU allowance.
"""

from __future__ import annotations

import gc
import http.client
import random
import string
import threading
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from lxml import etree, html

from bench.procs import rss_bytes, worker_pids
from feedbridge.feeds.request.spec import parse_feed_request
from feedbridge.feeds.service import FeedService
from feedbridge.models import Category
from feedbridge.store import keys
from feedbridge.web.hits import Resolved, ResolvedUrls
from tests.appserver import procfile_app, serving, settings_for
from tests.upstream import FakeForum

MIB = 2**20


def _names(count: int, length: int) -> list[str]:
    return ["".join(random.choices(string.ascii_lowercase, k=length)) for _ in range(count)]


AUTHORS, TAGS = _names(20, 48), _names(20, 48)  # 20 of each, as many as a feed takes
WORDS = " ".join(_names(32, 14))[:490]  # 32 terms, under the 500 characters a query may have


def long_query(limit: int = 30) -> str:
    """About 2,450 characters naming one feed, written differently each time: its authors and tags shuffled."""
    authors, tags = random.sample(AUTHORS, len(AUTHORS)), random.sample(TAGS, len(TAGS))
    return f"q={WORDS}&author={','.join(authors)}&tag={','.join(tags)}&limit={limit}"


# --- the resolved-URL memo -------------------------------------------------------------------------------

def test_the_memo_counts_what_it_holds_and_keeps_within_its_bytes():
    """300 resolutions of 2.5 KB URLs into a memo of 2 MiB: it keeps what fits, and what it counts is what
    tracemalloc sees it hold, within a quarter."""
    settings = settings_for("http://forum.example")
    memo = ResolvedUrls(max_bytes=2 * MIB)

    def remember(n: int) -> None:
        query = long_query(n % 400 + 1)
        args = {name: [value] for name, value in (part.split("=", 1) for part in query.split("&"))}
        spec = parse_feed_request(settings, "forum.example/latest.atom", args)
        self_url = f"http://bridge.example/forum.example/latest.atom?{query}"
        environ = {"HTTP_HOST": "bridge.example", "PATH_INFO": "/forum.example/latest.atom", "QUERY_STRING": query}
        memo.remember(environ, Resolved(spec, self_url, "/static/feed.xsl", FeedService.feed_key(spec, self_url)))

    remember(0)  # what parsing keeps once (compiled patterns, quoting tables) is not the memo's
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(1, 301):
            remember(n)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 80 <= len(memo) <= 110, len(memo)  # about 21 KB each
    assert memo.held <= 2 * MIB
    assert 0.75 * memo.held <= held <= 1.25 * memo.held, (held, memo.held)


def test_only_the_urls_of_feeds_served_are_remembered(upstream):
    """A 400, a 404 (asked, then remembered) and a 429 (the client's CPU allowance, a hundredth of a second,
    spent) leave nothing in the memo; a feed served leaves its URL, and a 304 for it nothing more."""
    settings = settings_for(upstream.url, cpu_allowance=0.01)
    with serving(settings) as (app, flask_app):
        memo: ResolvedUrls = flask_app.extensions["feedbridge.resolved"]

        def get(address: str, path: str, **headers: str) -> httpx.Response:
            with httpx.Client(timeout=30, transport=httpx.HTTPTransport(local_address=address)) as client:
                return client.get(app.feed_url(path), headers=headers)

        served = get("127.0.0.2", "/latest.atom")  # a build: the client's allowance is spent
        assert served.status_code == 200 and len(memo) == 1
        assert get("127.0.0.2", "/latest.atom?author=x").status_code == 429
        assert get("127.0.0.3", "/c/nope/99.atom").status_code == 404
        assert get("127.0.0.4", "/c/nope/99.rss").status_code == 404
        assert get("127.0.0.5", "/latest.atom?limit=0").status_code == 400
        assert get("127.0.0.2", "/latest.atom", **{"If-None-Match": served.headers["etag"]}).status_code == 304
        assert len(memo) == 1


@pytest.mark.timeout(300)
def test_4000_distinct_long_urls_grow_the_worker_by_at_most_24_mib(upstream_json):
    """Half of them a category the forum does not have (404, then 429 once the client's CPU allowance is spent),
    half one cached feed written 2,000 ways (hits). Before the fix the worker grew by 98 MiB over 6,000 (31 s of
    the suite's CPU; 4,000 keep the growth it would make, about 65 MiB, well past the bound)."""
    with procfile_app(settings_for(upstream_json.url)) as app:
        [worker] = worker_pids(app.process.pid)
        first = httpx.get(app.feed_url(f"/latest.atom?{long_query()}"), timeout=30)
        assert first.status_code == 200 and len(first.request.url.raw_path) > 2400
        before = rss_bytes(worker)
        answers: Counter[tuple[str, int]] = Counter()
        lock = threading.Lock()

        host, port = app.url.removeprefix("http://").split(":")

        def send(shapes: list[str]) -> None:
            # http.client on one keep-alive connection: httpx's client spent 9 of this test's 24 s of CPU
            # making 6,000 requests, more than a third of what was measured beside the server's own.
            connection = http.client.HTTPConnection(host, int(port), timeout=60)
            try:
                for n, shape in enumerate(shapes):
                    path = "/latest.atom" if shape == "hit" else "/c/nope/99.atom"
                    target = httpx.URL(app.feed_url(f"{path}?{long_query(30 if shape == 'hit' else n % 400 + 1)}"))
                    connection.request("GET", target.raw_path.decode("ascii"))  # as httpx writes it
                    answer = connection.getresponse()
                    answer.read()
                    if answer.will_close:
                        connection.close()
                    with lock:
                        answers[(shape, answer.status)] += 1
            finally:
                connection.close()

        senders = [threading.Thread(target=send, args=(["hit", "missing"] * 500,)) for _ in range(4)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        grown = rss_bytes(worker) - before
    assert answers[("hit", 200)] == 2000, answers
    assert answers[("missing", 404)] + answers[("missing", 429)] == 2000, answers
    assert grown <= 24 * MIB, f"the worker grew by {grown / MIB:.1f} MiB"


# --- what the pages make of the directory ----------------------------------------------------------------

def directory(count: int, prefix: str = "Category") -> str:
    """A Markdown categories directory of `count` categories, every tenth a subcategory."""
    return "# Categories\n\n" + "\n".join(
        f"## [{prefix} {i} & <co>](https://forum.example.org/c/{'parent/' if i % 10 == 0 else ''}cat-{i}/{i})\n\n"
        f"What {prefix.lower()} {i} is about.\n\n---\n" for i in range(1, count + 1))


class Walked(tuple[Category, ...]):
    """A directory that counts the walks over it (a template's loop, a list made of it)."""

    walks = 0

    def __iter__(self) -> Iterator[Category]:
        Walked.walks += 1
        return super().__iter__()


@pytest.fixture
def walked(monkeypatch: pytest.MonkeyPatch) -> type[Walked]:
    """`FeedService.categories` answering each copy of a directory as one `Walked` (the same object for the
    same copy, as the cache's own)."""
    real = FeedService.categories
    seen: dict[int, tuple[tuple[Category, ...], Walked]] = {}

    def categories(self: FeedService, forum: Any, parent: int | None = None) -> tuple[Category, ...]:
        found = real(self, forum, parent)
        if parent is not None:
            return found
        if id(found) not in seen or seen[id(found)][0] is not found:
            seen[id(found)] = (found, Walked(found))
        return seen[id(found)][1]

    monkeypatch.setattr(FeedService, "categories", categories)
    monkeypatch.setattr(Walked, "walks", 0)
    return Walked


def test_the_front_page_and_opml_walk_each_directory_once(upstream: FakeForum, walked: type[Walked]):
    """30 front pages (no category chosen, one of the directory's, one it does not have) and 20 OPML lists for
    two hosts walk the directory as often as the first of each did; a new directory is walked again, once.
    Before, every front page walked it twice and every OPML list once."""
    upstream.set_body("/categories.md", directory(500))
    with serving(settings_for(upstream.url)) as (app, flask_app), httpx.Client(timeout=30) as client:
        key = app.forum_key
        forms = [{}, {"list": "category", "category": "parent/cat-20/20"}, {"list": "category", "category": "x/7"}]

        def front(form: dict[str, str]) -> Any:
            answer = client.get(f"{app.url}/", params=form)
            assert answer.status_code == 200
            return html.fromstring(answer.content)

        def opml(host: str) -> list[str]:
            answer = client.get(f"{app.url}/{key}/opml", headers={"Host": host})
            assert answer.status_code == 200
            return [o.get("xmlUrl") for o in etree.fromstring(answer.content).iter("outline") if o.get("xmlUrl")]

        front({}), opml("bridge.example")
        first = walked.walks
        assert first > 0
        for n in range(30):
            page = front(forms[n % 3])
            chosen = page.xpath("//select[@id='category']/option[@selected]/@value")
            assert chosen == ([] if n % 3 == 0 else [forms[n % 3]["category"]])
            assert len(page.xpath("//select[@id='category']/option")) == 501 + (n % 3 == 2)
        for n in range(20):
            host = ("bridge.example", "other.example:8080")[n % 2]
            feeds = opml(host)
            assert len(feeds) == 501 and all(url.startswith(f"http://{host}/{key}/") for url in feeds)
            assert feeds[20] == f"http://{host}/{key}/c/parent/cat-20/20.atom"
        assert walked.walks == first

        upstream.set_body("/categories.md", directory(3, "Renamed"))
        flask_app.extensions["feedbridge"].public.store.delete(keys.categories(upstream.url))  # read again, as when stale
        options = front({}).xpath("//select[@id='category']/option/text()")
        assert options[1:] == ["Renamed 1 & <co>", "Renamed 2 & <co>", "Renamed 3 & <co>"]
        assert len(opml("bridge.example")) == 4
        for n in range(10):
            front(forms[n % 3]), opml("bridge.example")
        assert walked.walks == 2 * first


def test_the_front_page_and_opml_are_charged_to_the_clients_allowance(upstream):
    """A fifth of a second of CPU a minute: one client's front pages and OPML lists are refused (429 with
    Retry-After) within 21 requests, each charged at least a hundredth of a second; its cached feeds and another
    client's front page are still served. Before, neither page was ever charged."""
    upstream.set_body("/categories.md", directory(500))
    with procfile_app(settings_for(upstream.url, cpu_allowance=0.2)) as app:
        feed = app.feed_url("/latest.atom")
        with httpx.Client(timeout=30, transport=httpx.HTTPTransport(local_address="127.0.0.2")) as greedy:
            assert greedy.get(feed).status_code == 200
            fronts = []
            for _ in range(25):
                fronts.append(greedy.get(f"{app.url}/"))
                if fronts[-1].status_code == 429:
                    break
            opml = greedy.get(f"{app.url}/{app.forum_key}/opml")
            hit = greedy.get(feed)
        with httpx.Client(timeout=30, transport=httpx.HTTPTransport(local_address="127.0.0.3")) as other:
            theirs = other.get(f"{app.url}/")
            their_opml = other.get(f"{app.url}/{app.forum_key}/opml")
    refused = fronts[-1]
    assert refused.status_code == 429, [f.status_code for f in fronts]
    assert len(fronts) <= 21 and all(f.status_code == 200 for f in fronts[:-1])
    assert 1 <= int(refused.headers["retry-after"]) <= 60 and "CPU" in refused.text
    assert opml.status_code == 429 and "retry-after" in opml.headers
    assert hit.status_code == 200 and hit.headers["x-feedbridge-cache"] == "hit"
    assert theirs.status_code == 200 and theirs.text.count('<option value="cat-') == 450
    assert their_opml.status_code == 200
