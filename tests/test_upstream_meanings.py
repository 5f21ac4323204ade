"""One status and one message per upstream meaning, on every route (issue 32, items 4 and 5), over real sockets.

A meaning is what the forum's answer says, whichever URL a route reads: 404 (missing, or private: core
answers an anonymous reader 404 for what it may not see, `detailed_404` being off by default), 401/403
(members only), a bot wall (a Cloudflare challenge instead of the forum), 429 (slow down). Each is told the
same way on a category feed, a topic's posts, the latest posts, a user's posts and a user's topics, as a
feed and as its `.html` view: `errors.explained` is the one place that words them.
"""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace

import httpx
import pytest
from lxml import html as lxml_html

from feedbridge.config import Settings, parse_forum
from feedbridge.errors import BotWall, NotPublic, UpstreamError, UpstreamNotFound, UpstreamRefused
from feedbridge.feeds.service import FeedService, build_service
from feedbridge.feeds.sources.dialects import MARKDOWN, UNDECIDED
from feedbridge.feeds.sources.reads import Read
from feedbridge.store.entries import SourceEntry
from feedbridge.store.memory import MemoryStore
from feedbridge.upstream.fetcher import Fetcher
from feedbridge.upstream.transport import CHALLENGE_PEEK
from tests.appserver import procfile_web, running_app
from tests.fake_private import PRIVATE_MARKER, STAFF_PATH, TOPICS, USER_API_KEY
from tests.test_private import private_forum, sign
from tests.upstream import CHALLENGE_PAGE, FakeForum, read_at

SECRET = "meanings-secret-5c1e9b7a3d2f8064"
NEGATIVE_TTL = 45
LIST = "/latest.md"
# route -> the label its messages name it by (feeds/request/spec.py)
ROUTES = {
    "/c/compiler/5": "compiler",
    "/t/9446": "posts of topic 9446",
    "/posts": "latest posts",
    "/u/alice/posts": "posts by alice",
    "/u/alice": "topics by alice",
}


@dataclass(frozen=True)
class Meaning:
    arm: Callable[[FakeForum], None]
    status: int
    said: str  # what the message says after "FORUM · LABEL: "
    ends: str  # how it ends, after the forum's own answer in parentheses
    keyed: bool = False
    waits: bool = False  # a Retry-After comes with it, the first time too


MEANINGS = {
    "404 missing": Meaning(lambda f: f.fail("/", 404, prefix=True), 404,
                           "missing, or private to the forum's members (", ")"),
    "404 private, a key configured": Meaning(lambda f: f.fail("/", 404, prefix=True), 404, "missing, or private (",
                                             "); if it is private, a signed feed URL reads it (`feedbridge sign`)",
                                             keyed=True),
    "403 members only": Meaning(lambda f: f.json_error("/", 403, prefix=True), 403,
                                "shown only to signed-in members (", "); this bridge has no key for that forum"),
    "bot wall": Meaning(lambda f: f.challenge("/", prefix=True), 503,
                        "the forum's bot protection turned the bridge away (", "); try again later", waits=True),
    "429": Meaning(lambda f: f.rate_limit("/", 120, prefix=True), 503, "the forum asked the bridge to slow down (",
                   ")", waits=True),
}


def key_of(forum: FakeForum) -> str:
    return forum.url.removeprefix("http://")


def said(response: httpx.Response) -> str:
    """The one line a reader is told: the plain error's text, or an `.html` view's error paragraph."""
    if response.headers["Content-Type"].startswith("text/html"):
        return " ".join(lxml_html.fromstring(response.content).xpath('//p[@class="problem"]')[0].text_content().split())
    assert response.text.count("\n") == 1 and response.text.endswith("\n"), response.text
    return response.text.removeprefix(f"{response.status_code} ").removesuffix("\n")


# --- the fetcher: a bot wall is recognised by its header and by its page ----------------------------------


def fetch(forum: FakeForum, path: str = LIST, **overrides: object) -> UpstreamError:
    config = replace(Settings(forums=(parse_forum(f"markdown:{forum.url}"),)), retries=0,
                     negative_ttl=NEGATIVE_TTL, **overrides)
    fetcher = Fetcher(config)
    try:
        with pytest.raises(UpstreamError) as raised:
            fetcher.get(config.forums[0], forum.url + path)
    finally:
        fetcher.close()
    return raised.value


@pytest.mark.parametrize(("arm", "status"), [
    (lambda up: up.challenge(LIST), 403),
    (lambda up: up.challenge(LIST, page=False), 403),  # the header alone
    (lambda up: up.challenge(LIST, header=False), 403),  # the page alone
    (lambda up: up.challenge(LIST, status=503, header=False), 503),
    (lambda up: up.set_body(LIST, gzip.compress(CHALLENGE_PAGE.encode()), status=403,
                            headers={"Content-Encoding": "gzip", "Content-Type": "text/html; charset=UTF-8"}), 403),
], ids=["header and page", "header", "page", "503 page", "gzipped page"])
def test_a_challenge_is_a_bot_wall_by_its_header_or_its_page(upstream: FakeForum, arm: Callable[[FakeForum], None],
                                                             status: int) -> None:
    arm(upstream)
    error = fetch(upstream)
    assert type(error) is BotWall and error.status == 503, error.message
    assert error.upstream_status == status and error.retry_after == NEGATIVE_TTL
    assert "bot challenge" in error.message and "\n" not in error.message


@pytest.mark.parametrize(("arm", "kind"), [
    (lambda up: up.challenge(LIST, status=403, header=False, page=False), UpstreamRefused),  # a bare 403
    (lambda up: up.html_login(LIST, status=403), UpstreamRefused),  # a login page, not a challenge
    (lambda up: up.set_body(LIST, " " * CHALLENGE_PEEK + CHALLENGE_PAGE, status=403,
                            headers={"Content-Type": "text/html"}), UpstreamRefused),  # its title past the cap
    (lambda up: up.set_body(LIST, CHALLENGE_PAGE, status=404, headers={"Content-Type": "text/html"}),
     UpstreamNotFound),  # the page, but on a 404: a forum's own page may say anything
    (lambda up: up.fail(LIST, 503, body="<title>Just a moment...</title>"), UpstreamError),  # not HTML
], ids=["bare 403", "login page", "title past the cap", "404 page", "503 text/plain"])
def test_what_is_not_a_challenge_keeps_its_own_meaning(upstream: FakeForum, arm: Callable[[FakeForum], None],
                                                       kind: type[UpstreamError]) -> None:
    arm(upstream)
    error = fetch(upstream)
    assert type(error) is kind, error.message
    assert not isinstance(error, BotWall)


# --- every meaning × every route, on the Procfile's gunicorn ----------------------------------------------


@pytest.fixture(scope="module")
def forums() -> Iterator[dict[str, FakeForum]]:
    with ExitStack() as stack:
        made = {name: stack.enter_context(FakeForum()) for name in MEANINGS}
        for name, meaning in MEANINGS.items():
            meaning.arm(made[name])
        yield made


@pytest.fixture(scope="module")
def server(forums: dict[str, FakeForum]) -> Iterator[str]:
    keyed = [key_of(forums[name]) for name, meaning in MEANINGS.items() if meaning.keyed]
    env = {"FEEDBRIDGE_FORUMS": " ".join(forum.url for forum in forums.values()),
           "FEEDBRIDGE_CREDENTIALS": " ".join(f"{key}=user-api-key:{USER_API_KEY}" for key in keyed),
           "FEEDBRIDGE_SECRET": SECRET, "FEEDBRIDGE_NEGATIVE_TTL": str(NEGATIVE_TTL), "FEEDBRIDGE_RETRIES": "0",
           "FEEDBRIDGE_LOG_LEVEL": "WARNING", "WEB_CONCURRENCY": "2",
           # Generous budgets (tests/appserver.py GENEROUS_BUDGETS): the first meaning's ten feeds, past the
           # client's share of the 10 s window, waited for it (10 s), which is not what this module checks.
           "FEEDBRIDGE_FORUM_BUDGET_10S": "1000", "FEEDBRIDGE_FORUM_BUDGET": "3000"}
    with procfile_web(env) as (url, _process):
        yield url


@pytest.mark.parametrize("meaning", list(MEANINGS))
def test_each_meaning_has_one_status_and_one_message_on_every_route(forums: dict[str, FakeForum], server: str,
                                                                    meaning: str) -> None:
    forum, expected = forums[meaning], MEANINGS[meaning]
    key = key_of(forum)
    answers = {(route, fmt): httpx.get(f"{server}/{key}{route}.{fmt}", timeout=30)
               for route in ROUTES for fmt in ("atom", "html")}
    for (route, fmt), response in answers.items():
        line = said(response)
        assert response.status_code == expected.status, (route, fmt, line)
        assert line.startswith(f"{key} · {ROUTES[route]}: {expected.said}"), (route, fmt, line)
        assert line.endswith(expected.ends), (route, fmt, line)
        if expected.waits:  # (a remembered failure of any meaning says when it is asked again, too)
            assert 1 <= int(response.headers["Retry-After"]) <= 120, (route, fmt)
    # Failures are remembered (the negative TTL; a 429 as the forum's wait): no URL is asked more than once
    # by each of the two workers, whatever the number of routes and formats that read it.
    targets = Counter(r.target for r in forum.requests)
    assert targets and max(targets.values()) <= 2, targets
    if meaning == "bot wall":  # the JSON probe is not sent into the wall, nor the user's latest-list fallback
        assert "/latest.json" not in targets, targets


def test_a_bot_walls_first_answer_says_when_the_bridge_asks_again(forums: dict[str, FakeForum], server: str) -> None:
    """Retry-After is what is left of the negative TTL: the full TTL on a fresh failure."""
    forum = forums["bot wall"]
    response = httpx.get(f"{server}/{key_of(forum)}/top.atom?period=weekly&limit=3", timeout=30)
    assert response.status_code == 503 and 1 <= int(response.headers["Retry-After"]) <= NEGATIVE_TTL


# --- private content on the fake forum: 404 to the anonymous, the content to the key ----------------------


@pytest.mark.parametrize("mode", ["markdown", "json"])
def test_private_topics_and_categories_answer_404_and_a_signed_url_reads_them(mode: str) -> None:
    topic = TOPICS[0]
    with private_forum(mode, refusal=404) as p:
        batch = f"{p.forum.url}/t/{topic.id}/posts.json?post_ids[]={topic.id * 10}"
        # core: topics#show hides a private topic (404), topics#posts refuses its posts (403), the key reads both
        assert httpx.get(f"{p.forum.url}/t/{topic.id}.json").status_code == 404
        assert httpx.get(batch).status_code == 403
        keyed = httpx.get(batch, headers={"User-Api-Key": USER_API_KEY})
        assert keyed.status_code == 200 and PRIVATE_MARKER in keyed.text
        settings = p.settings()
        with running_app(settings) as app:
            routes = {f"{STAFF_PATH}.atom": "staff", f"/t/{topic.slug}/{topic.id}.atom": f"posts of topic {topic.id}"}
            for path, label in routes.items():
                response = httpx.get(app.feed_url(path), timeout=30)
                assert response.status_code == 404, response.text
                line = said(response)
                assert line.startswith(f"{p.key} · {label}: missing, or private ("), line
                assert line.endswith("if it is private, a signed feed URL reads it (`feedbridge sign`)"), line
                assert PRIVATE_MARKER not in response.text
            signed = httpx.get(app.url + sign(settings, f"/{app.forum_key}/t/{topic.slug}/{topic.id}.atom"),
                               timeout=30)
            assert signed.status_code == 200 and topic.body in signed.text
        plain = Settings.from_env({"FEEDBRIDGE_FORUMS": p.forum_spec()})
        with running_app(plain) as app:
            response = httpx.get(app.feed_url(f"/t/{topic.slug}/{topic.id}.atom"), timeout=30)
        assert response.status_code == 404
        assert said(response).startswith(f"{p.key} · posts of topic {topic.id}: missing, or private to the forum's "
                                         "members (")
        assert "signed" not in response.text


def test_a_forum_refusing_the_bridges_key_is_a_failure_of_the_bridge_not_members_only() -> None:
    """403 to the key: the bot account or its key is wrong, which no reader can mend (502, no advice)."""
    with private_forum("json", refusal=404) as p:
        settings = p.settings()
        p.forum.json_error(read_at(STAFF_PATH, "json"), 403)
        with running_app(settings) as app:
            response = httpx.get(app.url + sign(settings, f"/{app.forum_key}{STAFF_PATH}.atom"), timeout=30)
    assert response.status_code == 502
    assert said(response).startswith(f"{p.key} · staff: refused to the key it was read with ("), response.text
    assert "signed feed URL" not in response.text and USER_API_KEY not in response.text


# --- detection: a bot wall is no answer about Markdown ----------------------------------------------------


def detector_service(forum: FakeForum) -> tuple[FeedService, Settings]:
    settings = replace(Settings(forums=(parse_forum(forum.url),)), retries=0, negative_ttl=0)
    return build_service(settings, MemoryStore(1 << 24), Fetcher(settings)), settings


def test_a_bot_wall_on_the_probe_keeps_the_decision_and_decides_nothing_without_one(upstream: FakeForum) -> None:
    service, settings = detector_service(upstream)
    forum, scope = settings.forums[0], service.public
    read, detector = Read(scope, None), scope.detector
    upstream.challenge(LIST)
    with pytest.raises(BotWall):  # no decision: the feed's error, nothing written, /latest.json not asked
        read.source(forum)
    assert scope.control.get(detector.key(forum)) is None
    assert [r.path for r in upstream.requests] == [LIST]

    past = SourceEntry(MARKDOWN.name, 0.0, 1.0)  # a Markdown decision, due for its re-check
    scope.control.set(detector.key(forum), past, 3600)
    assert read.source(forum) is MARKDOWN
    kept: SourceEntry = scope.control.get(detector.key(forum))
    assert kept.source == MARKDOWN.name and kept.due_at > past.due_at  # inconclusive: asked again within a minute

    upstream.clear()
    upstream.json_error(LIST, 403)  # a refusal, by contrast, moves it to JSON
    scope.control.set(detector.key(forum), past, 3600)
    assert read.source(forum).name == "json"
    service.close()


def test_a_bot_wall_with_an_undecided_record_leaves_it_as_it_was(upstream: FakeForum) -> None:
    service, settings = detector_service(upstream)
    forum, scope = settings.forums[0], service.public
    read, detector = Read(scope, None), scope.detector
    undecided = SourceEntry(UNDECIDED, 0.0, 1.0)
    scope.control.set(detector.key(forum), undecided, 3600)
    upstream.challenge(LIST)
    assert read.source(forum) is MARKDOWN
    assert scope.control.get(detector.key(forum)) == undecided
    assert [r.path for r in upstream.requests] == [LIST]
    service.close()


def test_a_members_only_refusal_of_a_post_feed_is_403_not_502(upstream: FakeForum) -> None:
    """Before: a post feed turned the forum's 403 into 502 "upstream answered 403"."""
    upstream.json_error("/t/9446.json", 403)
    with running_app(replace(Settings(forums=(parse_forum(upstream.url),)), retries=0)) as app:
        response = httpx.get(app.feed_url("/t/9446.rss"), timeout=30)
    assert response.status_code == NotPublic.status
    assert said(response).startswith(f"{app.forum_key} · posts of topic 9446: shown only to signed-in members (")

