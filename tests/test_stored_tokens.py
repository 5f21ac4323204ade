"""A feed URL's capability never reaches the cache: a signed feed's `token=` (it reads the forum with the
bridge's key) and a personal feed's sealed token (it holds a member's key), over real sockets, with the
in-process store and with Redis.

Each feed links to itself (Atom's `rel="self"` and id, RSS's `atom:link`, JSON Feed's `feed_url`) and an
`.html` view to its formats, and the bytes are what the cache keeps, in Redis for every instance to read: so
every value the store holds is read back and searched for the token, while each answer, the first, the
repeat (the hit path's, for a signed feed), another instance's from Redis, still links to the client's own
URL, token and all, and a conditional request still gets `304`.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import feedparser
import httpx
import pytest
from flask import Flask
from lxml import html as lxml_html

from feedbridge.feeds.members import personal
from feedbridge.store.control import MemoryControl
from feedbridge.store.memory import MemoryStore
from feedbridge.store.redis_store import TieredStore
from feedbridge.web import withheld
from tests import fake_personal
from tests.appserver import RunningApp, serving
from tests.fake_personal import marker
from tests.fake_private import PRIVATE_MARKER, STAFF_PATH
from tests.redis_server import RedisServer, redis_module, redis_server  # noqa: F401
from tests.test_personal import bridge_settings, personal_forum
from tests.test_private import private_forum, redis_dump, sign, token_of

FORMATS = ("atom", "rss", "json", "html")


@dataclass
class Feed:
    """A feed URL that carries a capability: its path with `{fmt}` for the format, and the token in it."""

    path: str
    token: str
    marker: str  # a word only its reader's entries hold: the answer is the feed, not an error

    def url(self, app: RunningApp, fmt: str) -> str:
        return app.url + self.path.format(fmt=fmt)


@contextmanager
def bridge(kind: str, cache_url: str | None, instances: int = 1,
           quoting: str = "") -> Iterator[tuple[Feed, list[tuple[RunningApp, Flask]]]]:
    """`instances` apps over one fake forum (and one Redis when `cache_url` is given), and a `kind` feed on it;
    with `quoting`, text the forum's users wrote in every title of that feed (a topic's, a notification's)."""
    with ExitStack() as stack:
        if kind == "signed":
            forum = stack.enter_context(private_forum("json"))
            forum.site.topics = tuple(replace(topic, title=f"{topic.title} {quoting}", excerpt=f"{topic.excerpt} {quoting}")
                                      for topic in forum.site.topics)
            settings = forum.settings(**({"FEEDBRIDGE_CACHE_URL": cache_url} if cache_url else {}))
            path = sign(settings, f"/{forum.key}{STAFF_PATH}.atom?limit=5").replace(".atom?", ".{fmt}?")
            feed = Feed(path, token_of(path), PRIVATE_MARKER)
        else:
            if quoting:
                monkeypatch = stack.enter_context(pytest.MonkeyPatch.context())
                monkeypatch.setattr(fake_personal, "marker", lambda name: f"{marker(name)} {quoting}")
            fake, site = stack.enter_context(personal_forum())
            settings = bridge_settings(fake, cache_url=cache_url)
            key = site.make_key("alice")
            token = personal.seal(settings, settings.forums[0], key, 41, "alice")
            feed = Feed(f"/{settings.forums[0].key}/me/{token}/notifications.{{fmt}}", token, marker("alice"))
        apps = [stack.enter_context(serving(settings)) for _ in range(instances)]
        yield feed, apps


def self_links(fmt: str, response: httpx.Response) -> list[str]:
    """Every link of the answer to a feed of this bridge: a feed's own URL (and its Atom id), or the `.html`
    view's links to its formats."""
    if fmt == "json":
        return [response.json()["feed_url"]]
    if fmt == "html":
        page = lxml_html.fromstring(response.content)
        return sorted({href for href in page.xpath("//a/@href | //link/@href")
                       if urlsplit(href).path.endswith((".atom", ".rss", ".json"))})
    parsed = feedparser.parse(response.content)
    links = [link.href for link in parsed.feed.links if link.rel == "self"]
    return links + ([parsed.feed.id] if fmt == "atom" else [])


def expected_links(feed: Feed, app: RunningApp, fmt: str) -> list[str]:
    if fmt != "html":
        return [feed.url(app, fmt)] * (2 if fmt == "atom" else 1)
    return sorted(feed.url(app, f) for f in ("atom", "rss", "json"))


def cache_said(response: httpx.Response, fmt: str) -> str:
    """A feed's `X-Feedbridge-Cache`; an `.html` view says nothing of it, and is taken as kept (the ETag and
    the identical bytes say the rest)."""
    return "hit" if fmt == "html" else response.headers["x-feedbridge-cache"]


def stored(app: Flask) -> list[bytes]:
    """Every key and value of the app's in-process cache and control store, as pickle writes them (for a
    tiered store, its first level: Redis is read by `redis_dump`)."""
    service = app.extensions["feedbridge"]
    cache: Any = service.public.store
    if isinstance(cache, TieredStore):
        cache = cache.local
    assert isinstance(cache, MemoryStore)
    control = service.public.control
    items: list[tuple[object, object]] = [*cache._probation.items(), *cache._protected.items()]
    if isinstance(control, MemoryControl):
        items += [pair for kind in control._kinds.values() for pair in kind.items()]
    assert items
    return [pickle.dumps(item) for item in items]


def view_calls(app: Flask) -> Callable[[], int]:
    """How many times the Flask view of feeds ran, from now on: a request the hit path answers adds none."""
    view, calls = app.view_functions["feeds.feed"], [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return view(*args, **kwargs)

    app.view_functions["feeds.feed"] = counted
    return lambda: calls[0]


@pytest.mark.parametrize("kind", ["signed", "personal"])
def test_no_stored_value_holds_the_token_and_every_answer_links_to_the_clients_own_url(kind: str) -> None:
    with bridge(kind, None) as (feed, [(app, flask_app)]), httpx.Client(timeout=30) as client:
        calls = view_calls(flask_app)
        for fmt in FORMATS:
            url = feed.url(app, fmt)
            first = client.get(url)
            assert first.status_code == 200 and feed.marker in first.text, (fmt, first.text[:300])
            assert self_links(fmt, first) == expected_links(feed, app, fmt), fmt
            before = calls()
            again = client.get(url)
            assert again.status_code == 200 and cache_said(again, fmt) == "hit", fmt
            assert again.content == first.content, fmt
            if kind == "signed" and fmt != "html":  # a signed feed's repeat is the hit path's, before Flask
                assert calls() == before, fmt
            # never gzipped (httpx takes gzip): each URL's body holds its own token, which no kept gzip could
            assert int(again.headers["content-length"]) == len(first.content) and "content-encoding" not in again.headers
            unchanged = client.get(url, headers={"If-None-Match": first.headers["etag"]})
            assert unchanged.status_code == 304 and unchanged.content == b"", fmt
            assert unchanged.headers["etag"] == first.headers["etag"]
        values = stored(flask_app)
    assert any(feed.marker.encode() in value for value in values)  # the feeds and pages are cached
    leaks = [value[:200] for value in values if feed.token.encode() in value]
    assert leaks == []


@pytest.mark.parametrize("kind", ["signed", "personal"])
def test_no_redis_value_holds_the_token_and_another_instance_serves_the_clients_own_url(
        kind: str, redis_server: RedisServer) -> None:
    with bridge(kind, redis_server.url, instances=2) as (feed, [(first, first_app), (second, second_app)]), \
            httpx.Client(timeout=30) as client:
        answers = {fmt: client.get(feed.url(first, fmt)) for fmt in FORMATS}
        assert {fmt: a.status_code for fmt, a in answers.items()} == dict.fromkeys(FORMATS, 200)
        # The second instance, asked under the first one's name, has only Redis to answer from.
        host = {"Host": urlsplit(first.url).netloc}
        for fmt, answer in answers.items():
            assert self_links(fmt, answer) == expected_links(feed, first, fmt), fmt
            shared = client.get(feed.url(second, fmt), headers=host)
            assert shared.status_code == 200 and cache_said(shared, fmt) == "hit", fmt
            assert shared.content == answer.content, fmt
            unchanged = client.get(feed.url(second, fmt), headers={**host, "If-None-Match": answer.headers["etag"]})
            assert unchanged.status_code == 304, fmt
        values = stored(first_app) + stored(second_app)
    dump = redis_dump(redis_server)
    assert any(feed.marker.encode() in value for _, value in dump)
    assert [key for key, value in dump if feed.token.encode() in key + value] == []
    assert [value[:200] for value in values if feed.token.encode() in value] == []



def written_by_the_forum(fmt: str, response: httpx.Response) -> list[str]:
    """Every text of an answer that came from the forum's users (entries' titles, summaries and links), none of
    what the bridge writes of the feed itself (its own URLs)."""
    if fmt == "html":
        entries = lxml_html.fromstring(response.content).xpath('//li[@class="entry"]')
        assert entries, fmt
        return [text for entry in entries for text in entry.xpath(".//text() | .//@href | .//@src")]
    if fmt == "json":
        return [str(item.get(field, "")) for item in response.json()["items"]
                for field in ("title", "summary", "content_html", "url", "id")]
    parsed = feedparser.parse(response.content)
    assert parsed.bozo == 0 and parsed.entries, fmt
    return [str(entry.get(field, "")) for entry in parsed.entries for field in ("title", "summary", "link", "id")]


@pytest.mark.parametrize("kind", ["signed", "personal"])
def test_text_quoting_a_mark_never_receives_the_token(kind: str) -> None:
    """A forum's users write what a feed's entries say. Were the place of the token in a kept body marked with
    words anyone can write, a topic or a notification quoting them would get the reader's token put in its
    place when served (an image URL in a reader's view would send it off): the words this bridge once used,
    and the mark of another token, stay as written, and the token is only where the feed's own URL is."""
    other = "0" * 40
    quoting = f"~feedbridge-token~ {withheld.mark(other)}"
    with bridge(kind, None, quoting=quoting) as (feed, [(app, _flask_app)]), httpx.Client(timeout=30) as client:
        for fmt in FORMATS:
            for answer in (client.get(feed.url(app, fmt)), client.get(feed.url(app, fmt))):  # built, then kept
                assert answer.status_code == 200 and feed.marker in answer.text, fmt
                texts = written_by_the_forum(fmt, answer)
                assert any(quoting in text for text in texts), fmt
                assert [text for text in texts if feed.token in text] == [], fmt
                assert self_links(fmt, answer) == expected_links(feed, app, fmt), fmt
