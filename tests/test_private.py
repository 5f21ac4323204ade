"""Private forums (issue 24): a key on the server, signed feed URLs for the readers, over real sockets.

The forum is tests/fake_private.py's login-only side on the fake forum, on Markdown and on JSON: its staff
category and private topics answer only the bot's key. Every private topic carries `PRIVATE_MARKER`, so a
leak of private content anywhere (an unsigned feed, the front page, OPML) is one substring away.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import feedparser
import httpx
import pytest
from click.testing import CliRunner
from lxml import html as lxml_html

from feedbridge.config import Settings
from feedbridge.errors import ConfigError
from tests.appserver import PROJECT_ROOT, free_port, procfile_web, running_app, stop
from tests.fake_private import (
    ADMIN_API_KEY,
    ADMIN_USERNAME,
    PRIVATE_MARKER,
    STAFF_PATH,
    TOPICS,
    USER_API_KEY,
    PrivateSite,
    carries_key,
)
from tests.redis_server import RedisServer, redis_module, redis_server  # noqa: F401
from tests.upstream import FakeForum, Request, read_at

SECRET = "first-secret-4f1d9a7c2b8e6035"
NEXT_SECRET = "second-secret-a8c3e5f7091b2d46"
LAST_SECRET = "third-secret-71e0c4b9d2f8a635"
PRIVATE_TITLES = {t.title for t in TOPICS}
STAFF_FEED = f"{STAFF_PATH}.atom?content=full&limit=5"
SUFFIX = {"markdown": ".md", "json": ".json"}


@dataclass
class Private:
    forum: FakeForum
    site: PrivateSite
    mode: str

    @property
    def key(self) -> str:
        return self.forum.url.removeprefix("http://")

    @property
    def suffix(self) -> str:
        return SUFFIX[self.mode]

    @property
    def staff_list(self) -> str:
        """The target the bridge reads the staff category at (`/latest.md?category=9&order=activity`)."""
        return read_at(STAFF_PATH, self.mode)

    def forum_spec(self) -> str:
        return ("json:" if self.mode == "json" else "") + self.forum.url

    def env(self, kind: str = "user", **extra: str) -> dict[str, str]:
        value = f"user-api-key:{USER_API_KEY}" if kind == "user" else f"api-key:{ADMIN_USERNAME}:{ADMIN_API_KEY}"
        return {"FEEDBRIDGE_FORUMS": self.forum_spec(), "FEEDBRIDGE_CREDENTIALS": f"{self.key}={value}",
                "FEEDBRIDGE_SECRET": SECRET, **extra}

    def settings(self, kind: str = "user", **extra: str) -> Settings:
        return Settings.from_env(self.env(kind, **extra))

    def keyed(self) -> list[Request]:
        return [r for r in self.forum.requests if carries_key(r)]

    def reset(self) -> None:
        self.forum.reset()
        self.site.reset()


@contextmanager
def private_forum(mode: str, refusal: int = 403) -> Iterator[Private]:
    site = PrivateSite(refusal=refusal)
    with FakeForum(mode=mode, private=site.answer) as forum:
        yield Private(forum, site, mode)


@pytest.fixture(params=["markdown", "json"])
def private(request: pytest.FixtureRequest) -> Iterator[Private]:
    with private_forum(request.param) as made:
        yield made


def sign(settings: Settings, url_or_path: str) -> str:
    from feedbridge.feeds.request.signing import sign_url

    return sign_url(settings, url_or_path)


def token_of(url: str) -> str:
    tokens = [v for k, v in parse_qsl(urlsplit(url).query) if k == "token"]
    assert len(tokens) == 1, url
    return tokens[0]


def expected_token(secret: str, path: str, query: str) -> str:
    """The contract's token, computed here independently: HMAC-SHA256 over the path without its format
    extension, "?", and the canonical query without the token."""
    return hmac.new(secret.encode(), f"{path}?{query}".encode(), hashlib.sha256).hexdigest()


def get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=30)


def titles(response: httpx.Response) -> list[str]:
    return [entry.title for entry in feedparser.parse(response.content).entries]


def assert_public(response: httpx.Response) -> None:
    assert PRIVATE_MARKER not in response.text and "staff" not in response.text.lower()


# --- the fake forum itself ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["markdown", "json"])
def test_the_fake_forum_serves_its_private_side_only_to_the_bots_key(mode: str) -> None:
    with private_forum(mode) as p:
        latest, staff = f"{p.forum.url}/latest{p.suffix}", f"{p.forum.url}{STAFF_PATH}{p.suffix}"
        topic = f"{p.forum.url}/t/{TOPICS[0].slug}/{TOPICS[0].id}{p.suffix}"
        user = {"User-Api-Key": USER_API_KEY}
        admin = {"Api-Key": ADMIN_API_KEY, "Api-Username": ADMIN_USERNAME}
        for headers in (user, admin):
            assert all(PRIVATE_MARKER in httpx.get(url, headers=headers).text for url in (latest, staff, topic))
        anonymous = httpx.get(latest)
        assert anonymous.status_code == 200 and PRIVATE_MARKER not in anonymous.text
        assert httpx.get(staff).status_code == 403 and httpx.get(topic).status_code == 404
        assert httpx.get(latest, headers={"User-Api-Key": "someone-elses-key"}).status_code == 403
        assert httpx.get(latest, headers={**admin, "Api-Username": "mallory"}).status_code == 403
        assert len(p.site.keyed) == 8 and sum(carries_key(r) for r in p.forum.requests) == 8


# --- signed feeds ---------------------------------------------------------------------------------------


def test_a_signed_category_feed_is_what_the_bot_sees_private_to_the_reader(private: Private) -> None:
    settings = private.settings()
    with running_app(settings) as app:
        signed = sign(settings, f"{app.url}/{app.forum_key}{STAFF_FEED}")
        response = get(signed)
    assert response.status_code == 200, response.text
    assert set(titles(response)) == PRIVATE_TITLES
    parsed = feedparser.parse(response.content)
    assert all(t.body in parsed.entries[i].content[0].value for i, t in enumerate(TOPICS))  # content=full
    assert response.headers["Cache-Control"].split(",")[0].strip() == "private"
    assert USER_API_KEY not in response.text
    self_links = [link.href for link in parsed.feed.links if link.rel == "self"]
    assert len(self_links) == 1 and token_of(self_links[0]) == token_of(signed)
    keyed = private.keyed()
    assert {r.target for r in keyed} >= {private.staff_list}
    assert all(r.headers.get("user-api-key") == USER_API_KEY for r in keyed)
    assert len(private.site.keyed) == len(keyed)


def test_a_signed_latest_feed_mixes_the_private_topics_into_the_public_ones(private: Private) -> None:
    settings = private.settings()
    with running_app(settings) as app:
        response = get(app.url + sign(settings, f"/{app.forum_key}/latest.rss"))
    assert response.status_code == 200, response.text
    got = titles(response)
    assert PRIVATE_TITLES <= set(got) and len(set(got) - PRIVATE_TITLES) >= 10


def test_a_signed_search_url_moves_to_the_latest_list_with_a_token_of_its_own(private: Private) -> None:
    """A token made for `/search?q=` before that path moved signs the query the latest feed names too: its 301
    carries a token for `/latest` in its place, which reads the feed as the key's user sees it. A token that
    does not sign it is the 403 it was; neither asks the forum anything."""
    settings = private.settings()
    with running_app(settings) as app:
        old = f"/{app.forum_key}/search"
        moved = get(f"{app.url}{old}.rss?q=moderation&token={expected_token(SECRET, old, 'q=moderation')}")
        wrong = get(f"{app.url}{old}.rss?q=moderation&token={'0' * 64}")
        assert private.forum.requests == []
        assert (moved.status_code, wrong.status_code) == (301, 403), (moved.text, wrong.text)
        assert moved.headers["location"] == sign(settings, f"/{app.forum_key}/latest.rss?q=moderation")
        assert moved.headers["cache-control"].startswith("private")
        response = get(app.url + moved.headers["location"])
    assert response.status_code == 200, response.text
    assert [t for t in titles(response) if PRIVATE_MARKER in t] == [f"Moderation policy draft {PRIVATE_MARKER}"]


def test_an_admin_api_key_is_sent_as_api_key_and_api_username() -> None:
    with private_forum("markdown") as p:
        settings = p.settings("admin")
        with running_app(settings) as app:
            response = get(app.url + sign(settings, f"/{app.forum_key}{STAFF_PATH}.atom"))
        assert response.status_code == 200 and set(titles(response)) == PRIVATE_TITLES
        keyed = p.keyed()
        assert keyed and all(r.headers.get("api-key") == ADMIN_API_KEY and r.headers.get("api-username")
                             == ADMIN_USERNAME and "user-api-key" not in r.headers for r in keyed)


def test_one_token_serves_every_format_and_the_html_view_keeps_it_in_its_links(private: Private) -> None:
    settings = private.settings()
    with running_app(settings) as app:
        signed = app.url + sign(settings, f"/{app.forum_key}{STAFF_PATH}.atom?limit=5")
        token = token_of(signed)
        answers = {fmt: get(signed.replace(".atom?", f".{fmt}?")) for fmt in ("atom", "rss", "json", "html")}
    assert {fmt: r.status_code for fmt, r in answers.items()} == dict.fromkeys(answers, 200)
    assert PRIVATE_MARKER in answers["json"].text and PRIVATE_MARKER in answers["html"].text
    assert all(r.headers["Cache-Control"].split(",")[0].strip() == "private" for r in answers.values())
    assert not any(USER_API_KEY in r.text for r in answers.values())
    page = lxml_html.fromstring(answers["html"].content)
    feed_links = [href for href in page.xpath("//a/@href | //link/@href")
                  if urlsplit(href).path.endswith((".atom", ".rss", ".json"))]
    assert len(feed_links) >= 3 and all(token_of(href) == token for href in feed_links)


# --- unsigned requests ----------------------------------------------------------------------------------


def test_without_a_token_the_feed_is_exactly_the_public_one_fetched_without_a_key(private: Private) -> None:
    with running_app(private.settings()) as app:
        unsigned = get(app.feed_url("/latest.atom"))
    plain = Settings.from_env({"FEEDBRIDGE_FORUMS": private.forum_spec()})
    with running_app(plain) as app:
        public = get(app.feed_url("/latest.atom"))
    assert unsigned.status_code == public.status_code == 200
    assert titles(unsigned) == titles(public) and len(titles(public)) >= 10
    assert_public(unsigned)
    assert private.keyed() == [] and private.site.keyed == []


@pytest.mark.parametrize(("mode", "refusal"), [("markdown", 403), ("json", 403), ("json", 404), ("markdown", 404)])
def test_a_list_the_forum_refuses_to_anonymous_visitors_points_at_a_signed_url(mode: str, refusal: int) -> None:
    """A 403 from the forum is ours too: the list exists and is not public. A 404 cannot be told from a list
    that does not exist (Discourse hides some private lists so), so it stays 404 and says a signed URL
    would read a private one."""
    with private_forum(mode, refusal) as p, running_app(p.settings()) as app:
        response = get(app.feed_url(f"{STAFF_PATH}.atom"))
        assert response.status_code == refusal, response.text
        reason = response.text.lower()
        assert len(response.text.strip().splitlines()) == 1
        if refusal == 403:
            assert re.search(r"not public|only to signed-in", reason), reason
        assert re.search(r"signed (feed )?url", reason), reason
        assert p.forum.count(p.staff_list) >= 1 and p.keyed() == []


@pytest.mark.parametrize("case", ["wrong", "other feed", "other parameters", "extra parameter", "two tokens",
                                  "garbage", "huge"])
def test_a_bad_token_is_403_with_a_one_line_reason_and_nothing_is_fetched(case: str) -> None:
    with private_forum("markdown") as p:
        settings = p.settings()
        with running_app(settings) as app:
            good = sign(settings, f"/{app.forum_key}{STAFF_PATH}.atom?limit=5")
            token = token_of(good)
            path = {
                "wrong": f"{STAFF_PATH}.atom?limit=5&token={'0' * 64}",
                "other feed": f"/c/compiler/5.atom?limit=5&token={token}",
                "other parameters": f"{STAFF_PATH}.atom?limit=6&token={token}",
                "extra parameter": f"{STAFF_PATH}.atom?limit=5&content=full&token={token}",
                "two tokens": f"{STAFF_PATH}.atom?limit=5&token={token}&token={token}",
                "garbage": f"{STAFF_PATH}.atom?limit=5&token=%ff%00%0a%e2%80%a6",
                "huge": f"{STAFF_PATH}.atom?limit=5&token={token * 60}",
            }[case]
            response = get(app.feed_url(path))
        assert response.status_code == 403, response.text
        reason = response.text.strip()
        assert reason and "\n" not in reason and token not in reason
        assert p.forum.requests == []


def test_a_token_on_a_forum_without_credentials_is_403_and_fetches_nothing() -> None:
    with private_forum("markdown") as p, FakeForum() as other:
        other_key = other.url.removeprefix("http://")
        env = {**p.env(), "FEEDBRIDGE_FORUMS": f"{p.forum.url} {other.url}"}
        settings = Settings.from_env(env)
        path = f"/{other_key}/latest"
        with running_app(settings) as app:
            response = get(f"{app.url}{path}.atom?token={expected_token(SECRET, path, '')}")
            unsigned = get(f"{app.url}{path}.atom")
        assert response.status_code == 403 and "\n" not in response.text.strip()
        assert unsigned.status_code == 200
        assert [r.path for r in other.requests if r.path.startswith("/latest")] == ["/latest.md"]
        assert not any(carries_key(r) for r in other.requests) and p.keyed() == []


def test_rotation_accepts_the_previous_secret_and_rotating_both_revokes(private: Private) -> None:
    old = private.settings()
    path = f"/{private.key}{STAFF_PATH}.atom?limit=5"
    signed = sign(old, path)
    with running_app(private.settings(FEEDBRIDGE_SECRET=NEXT_SECRET, FEEDBRIDGE_SECRET_PREVIOUS=SECRET)) as app:
        assert get(app.url + signed).status_code == 200
        assert get(app.url + sign(Settings.from_env(private.env(FEEDBRIDGE_SECRET=NEXT_SECRET)), path)
                   ).status_code == 200
    private.reset()
    with running_app(private.settings(FEEDBRIDGE_SECRET=LAST_SECRET,
                                      FEEDBRIDGE_SECRET_PREVIOUS=NEXT_SECRET)) as app:
        revoked = get(app.url + signed)
    assert revoked.status_code == 403 and private.forum.requests == []


# --- isolation ------------------------------------------------------------------------------------------


def test_in_memory_private_pages_feeds_and_failures_never_reach_unsigned_requests(private: Private) -> None:
    # Some 45 upstream requests within a second from one client (a content=full latest alone is its list and
    # 30 topic pages), signed ones included: past the default 10 s budget (40) and past the client's share of
    # the forum's windows (a third of each, which its signed requests spend too), which would answer 503 for
    # the bridge's sake and hide what is checked.
    settings = private.settings(FEEDBRIDGE_RETRIES="0", FEEDBRIDGE_FORUM_BUDGET_10S="360",
                                FEEDBRIDGE_FORUM_BUDGET="360")
    with running_app(settings) as app:
        signed_latest = app.url + sign(settings, f"/{app.forum_key}/latest.atom")
        signed_staff = app.url + sign(settings, f"/{app.forum_key}{STAFF_PATH}.atom?content=full")
        topic_feed = f"/t/{TOPICS[0].slug}/{TOPICS[0].id}.atom"
        assert PRIVATE_TITLES <= set(titles(get(signed_latest)))
        assert set(titles(get(signed_staff))) == PRIVATE_TITLES
        assert TOPICS[0].body in get(app.url + sign(settings, f"/{app.forum_key}{topic_feed}")).text
        private.reset()
        for path in ("/latest.atom?content=full", "/latest.atom", "/latest.json", "/latest.html"):
            response = get(app.feed_url(path))
            assert response.status_code == 200 and PRIVATE_MARKER not in response.text, path
        for path in (f"{STAFF_PATH}.atom?content=full", f"{STAFF_PATH}.html", topic_feed):
            response = get(app.feed_url(path))
            assert response.status_code in (403, 404) and PRIVATE_MARKER not in response.text, path
        for page in ("/", f"/?forum={app.forum_key}", f"/{app.forum_key}/opml"):
            response = get(app.url + page)
            assert response.status_code == 200, page
            assert_public(response)
        assert private.keyed() == []
        # the other way round: a public page cached first is not what a signed request gets
        assert PRIVATE_TITLES <= set(titles(get(signed_latest.replace("latest.atom", "latest.rss"))))
        # a failure of a credentialed fetch is remembered for the signed scope only
        private.forum.fail(f"/hot{private.suffix}", 500)
        failed = get(app.url + sign(settings, f"/{app.forum_key}/hot.atom"))
        assert failed.status_code >= 500 and "retry-after" not in failed.headers  # the forum's 500, not a budget's
        private.forum.clear()
        private.reset()
        assert get(app.feed_url("/hot.atom")).status_code == 200
        assert private.forum.count(f"/hot{private.suffix}") == 1 and private.keyed() == []


def test_keys_are_sent_to_their_own_forum_only_and_follow_redirects_within_it() -> None:
    with private_forum("markdown") as p, FakeForum() as elsewhere:
        settings = Settings.from_env({**p.env(), "FEEDBRIDGE_FORUMS": f"{p.forum.url} {elsewhere.url}"})
        with running_app(settings) as app:
            p.forum.redirect(p.staff_list, f"{p.forum.url}{p.staff_list}&from=redirect", times=1)
            moved = get(app.url + sign(settings, f"/{app.forum_key}{STAFF_PATH}.atom"))
            p.forum.redirect("/latest.md", f"{elsewhere.url}/latest.md", times=1)
            get(app.url + sign(settings, f"/{app.forum_key}/latest.atom"))
        assert moved.status_code == 200 and set(titles(moved)) == PRIVATE_TITLES
        assert any(r.target == f"{p.staff_list}&from=redirect" and carries_key(r) for r in p.forum.requests)
        assert not any(carries_key(r) for r in elsewhere.requests)


def redis_dump(server: RedisServer) -> list[tuple[bytes, bytes]]:
    """Every key with its value's bytes, whatever the type."""
    client = server.client()
    pairs = []
    for key in client.scan_iter("*"):
        kind = client.type(key).decode()
        if kind == "string":
            values = [client.get(key) or b""]
        elif kind == "hash":
            values = [b for pair in client.hgetall(key).items() for b in pair]
        elif kind == "list":
            values = client.lrange(key, 0, -1)
        elif kind == "set":
            values = list(client.smembers(key))
        else:
            values = [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
        pairs += [(key, value) for value in values] or [(key, b"")]
    client.close()
    return pairs


def test_two_instances_on_one_redis_keep_private_entries_from_unsigned_requests(private: Private,
                                                                               redis_server: RedisServer) -> None:
    settings = private.settings(FEEDBRIDGE_CACHE_URL=redis_server.url)
    with running_app(settings) as first, running_app(settings) as second:
        signed = sign(settings, f"/{first.forum_key}/latest.atom")
        assert PRIVATE_TITLES <= set(titles(get(first.url + signed)))
        staff = sign(settings, f"/{first.forum_key}{STAFF_PATH}.atom?content=full")
        assert set(titles(get(first.url + staff))) == PRIVATE_TITLES
        private.reset()
        assert set(titles(get(second.url + staff))) == PRIVATE_TITLES  # shared: no second fetch
        assert private.forum.count(private.staff_list) == 0
        unsigned = get(second.feed_url("/latest.atom"))
        assert unsigned.status_code == 200 and PRIVATE_MARKER not in unsigned.text
        refused = get(second.feed_url(f"{STAFF_PATH}.atom?content=full"))
        assert refused.status_code == 403 and PRIVATE_MARKER not in refused.text
        assert private.keyed() == []
    dump = redis_dump(redis_server)
    assert dump and any(PRIVATE_MARKER.encode() in value for _, value in dump)  # private entries are cached
    for secret in (USER_API_KEY, SECRET):
        assert not any(secret.encode() in key or secret.encode() in value for key, value in dump), secret
    for token in (token_of(signed), token_of(staff)):  # a kept body holds a mark where its self link's token goes
        assert not any(token.encode() in key + value for key, value in dump), token


# --- secrets in logs and start-up -----------------------------------------------------------------------


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_the_apps_log_never_holds_a_key_or_a_token(private: Private) -> None:
    root = logging.getLogger()
    handler, level = Lines(), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    settings = private.settings(FEEDBRIDGE_ACCESS_LOG="on", FEEDBRIDGE_LOG_LEVEL="DEBUG")
    try:
        with running_app(settings) as app:
            signed = app.url + sign(settings, f"/{app.forum_key}{STAFF_PATH}.atom?content=full")
            wrong = signed.replace(token_of(signed), "f" * 64)
            statuses = [get(url).status_code for url in (signed, wrong, app.feed_url(f"{STAFF_PATH}.atom"))]
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    assert statuses == [200, 403, 403]
    text = "\n".join(handler.lines)
    for secret in (USER_API_KEY, SECRET, token_of(signed), "f" * 64):
        assert secret not in text, secret
    assert text.count("token=…") >= 2


def test_gunicorn_workers_on_redis_keep_scopes_apart_and_log_no_key_or_token(redis_server: RedisServer) -> None:
    with private_forum("markdown") as p:
        env = p.env(FEEDBRIDGE_CACHE_URL=redis_server.url, WEB_CONCURRENCY="2", FEEDBRIDGE_ACCESS_LOG="on",
                    FEEDBRIDGE_LOG_LEVEL="DEBUG")
        settings = Settings.from_env(env)
        with tempfile.TemporaryFile("a+") as log, procfile_web(env, stdout=log) as (url, _process):
            signed = url + sign(settings, f"/{p.key}{STAFF_PATH}.atom?content=full")
            wrong = signed.replace(token_of(signed), "e" * 64)
            for _ in range(4):  # spread over both workers
                assert set(titles(get(signed))) == PRIVATE_TITLES
                unsigned = get(f"{url}/{p.key}/latest.atom")
                assert unsigned.status_code == 200 and PRIVATE_MARKER not in unsigned.text
                assert get(f"{url}/{p.key}{STAFF_PATH}.atom").status_code == 403
                assert get(wrong).status_code == 403
            log.seek(0)
            output = log.read()
        # keyed: the staff list (and its JSON twin, for content=full's pictures), its topics and (for the source
        # detection) the probe of /latest
        assert {r.target for r in p.keyed()} <= {p.staff_list, read_at(STAFF_PATH, "json"), "/latest.md"} | {
            f"/t/{t.slug}/{t.id}.md" for t in TOPICS}
        assert any(r.path == "/latest.md" and not carries_key(r) for r in p.forum.requests)
    assert "GET" in output and output.count("token=…") >= 8
    for secret in (USER_API_KEY, SECRET, token_of(signed), "e" * 64):
        assert secret not in output, secret


@pytest.mark.parametrize(("entry", "extra", "words"), [
    ("elsewhere.example=user-api-key:{key}", {}, ["elsewhere.example"]),
    ("{host}=password:{key}", {}, ["{host}"]),
    ("{host}=api-key::{key}", {}, ["{host}"]),
    ("{host}=user-api-key:", {}, ["{host}"]),
    ("{host}=user-api-key:{key}", {"FEEDBRIDGE_SECRET": ""}, ["FEEDBRIDGE_SECRET"]),
])
def test_config_errors_name_the_entry_by_its_host_and_never_print_the_key(entry: str, extra: dict[str, str],
                                                                         words: list[str]) -> None:
    host = "127.0.0.1:9"
    env = {"FEEDBRIDGE_FORUMS": f"http://{host}", "FEEDBRIDGE_SECRET": SECRET,
           "FEEDBRIDGE_CREDENTIALS": entry.format(host=host, key=USER_API_KEY), **extra}
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({k: v for k, v in env.items() if v})
    message = str(raised.value)
    assert all(word.format(host=host) in message for word in words), message
    assert USER_API_KEY not in message and SECRET not in message


def test_settings_print_neither_keys_nor_secrets() -> None:
    settings = Settings.from_env({
        "FEEDBRIDGE_FORUMS": "http://127.0.0.1:9", "FEEDBRIDGE_SECRET": SECRET, "FEEDBRIDGE_SECRET_PREVIOUS":
        NEXT_SECRET, "FEEDBRIDGE_CREDENTIALS": f"127.0.0.1:9=api-key:{ADMIN_USERNAME}:{ADMIN_API_KEY}"})
    for text in (str(settings), repr(settings), repr(settings.credentials)):
        assert ADMIN_API_KEY not in text and SECRET not in text and NEXT_SECRET not in text


BAD_START = {"FEEDBRIDGE_FORUMS": "http://127.0.0.1:9", "FEEDBRIDGE_CREDENTIALS": f"127.0.0.1:9=user-api-key:{USER_API_KEY}"}


def test_the_service_refuses_to_start_with_credentials_and_no_secret_saying_why() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEEDBRIDGE_")} | BAD_START
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    serve = subprocess.run([sys.executable, "-m", "feedbridge", "serve", "--port", "0"], env=env,
                           capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT)
    command = (PROJECT_ROOT / "Procfile").read_text(encoding="utf-8").split("web:", 1)[1].strip()
    gunicorn = subprocess.Popen(["/bin/sh", "-c", f"exec {command}"], env={**env, "PORT": str(free_port())},
                                cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = gunicorn.communicate(timeout=60)
    finally:
        if gunicorn.poll() is None:
            stop(gunicorn, grace=5)
    assert serve.returncode != 0 and "FEEDBRIDGE_SECRET" in serve.stderr + serve.stdout
    assert gunicorn.returncode != 0 and "FEEDBRIDGE_SECRET" in output
    assert USER_API_KEY not in serve.stdout + serve.stderr + output


# --- the sign command -----------------------------------------------------------------------------------


def run_sign(target: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FEEDBRIDGE_")}
    return subprocess.run([sys.executable, "-m", "feedbridge", "sign", target], env={**clean, **env},
                          capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT)


def test_sign_prints_the_url_or_path_back_in_canonical_order_with_the_token() -> None:
    host = "127.0.0.1:9"
    env = {"FEEDBRIDGE_FORUMS": f"http://{host}", "FEEDBRIDGE_SECRET": SECRET,
           "FEEDBRIDGE_CREDENTIALS": f"{host}=user-api-key:{USER_API_KEY}"}
    token = expected_token(SECRET, f"/{host}/c/staff/9", "content=full&limit=5")
    as_url = run_sign(f"http://bridge/{host}/c/staff/9.atom?limit=5&content=full", env)
    as_path = run_sign(f"/{host}/c/staff/9.rss?limit=5&content=full", env)
    assert as_url.returncode == 0, as_url.stderr
    assert as_url.stdout == f"http://bridge/{host}/c/staff/9.atom?content=full&limit=5&token={token}\n"
    assert as_path.stdout == f"/{host}/c/staff/9.rss?content=full&limit=5&token={token}\n"
    assert USER_API_KEY not in as_url.stdout + as_url.stderr + as_path.stderr


@pytest.mark.parametrize("target", ["/127.0.0.1:10/latest.atom", "/nosuch.example/latest.atom",
                                    "/127.0.0.1:9/no/such/feed.atom", "http://bridge/127.0.0.1:9/c/staff/x.atom"])
def test_sign_refuses_a_forum_without_credentials_an_unknown_forum_or_a_bad_path(target: str) -> None:
    env = {"FEEDBRIDGE_FORUMS": "http://127.0.0.1:9 http://127.0.0.1:10", "FEEDBRIDGE_SECRET": SECRET,
           "FEEDBRIDGE_CREDENTIALS": f"127.0.0.1:9=user-api-key:{USER_API_KEY}"}
    done = run_sign(target, env)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and USER_API_KEY not in done.stderr


# --- politeness -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("throttled", ["credentialed", "public"])
def test_a_429_on_one_kind_of_fetch_does_not_stop_the_other_on_the_same_forum(throttled: str) -> None:
    with private_forum("markdown") as p:
        settings = p.settings(FEEDBRIDGE_RETRIES="0")
        with running_app(settings) as app:
            signed_hot = app.url + sign(settings, f"/{app.forum_key}/hot.atom")
            refused, other = ((app.url + sign(settings, f"/{app.forum_key}{STAFF_PATH}.atom"), app.feed_url("/hot.atom"))
                              if throttled == "credentialed" else (app.feed_url("/c/compiler/5.atom"), signed_hot))
            p.forum.rate_limit(p.staff_list if throttled == "credentialed" else read_at("/c/compiler/5"),
                               retry_after=600)
            assert get(refused).status_code in (429, 502, 503)
            p.reset()
            # the same kind waits out the Retry-After without asking the forum
            same = signed_hot if throttled == "credentialed" else app.feed_url("/hot.atom")
            assert get(same).status_code in (429, 502, 503) and p.forum.requests == []
            answer = get(other)
        assert answer.status_code == 200 and p.forum.count("/hot.md") == 1
        assert [carries_key(r) for r in p.forum.requests if r.path == "/hot.md"] == [throttled == "public"]


@pytest.mark.parametrize("budget", ["FEEDBRIDGE_PRIVATE_BUDGET", "FEEDBRIDGE_PRIVATE_DAILY_BUDGET"])
def test_signed_reads_have_a_budget_of_their_own_that_leaves_public_reads_alone(budget: str) -> None:
    """Discourse limits one key (20 requests a minute, 2,880 a day by default): past the bridge's budget for
    signed reads, a signed cold feed is 503 with Retry-After and nothing is sent, while public feeds of the
    same forum are still read (their budget is FEEDBRIDGE_FORUM_BUDGET's)."""
    with private_forum("markdown") as p:
        settings = p.settings(**{budget: "2"})
        with running_app(settings) as app:
            signed = [app.url + sign(settings, f"/{app.forum_key}{STAFF_PATH}.atom?limit={n}")
                      for n in range(1, 6)]
            assert get(signed[0]).status_code == 200  # the list, a Markdown list, which decides the source: 1 of 2
            assert get(signed[1]).status_code == 200  # a new feed of the cached list: nothing sent
            p.reset()
            cold = [get(url) for url in (app.url + sign(settings, f"/{app.forum_key}/hot.atom"),
                                                  app.url + sign(settings, f"/{app.forum_key}/top.atom"))]
            assert [r.status_code for r in cold] == [200, 503]
            assert "signed-in" in cold[1].text or "upstream requests" in cold[1].text
            assert int(cold[1].headers["Retry-After"]) >= 1
            assert [r.path for r in p.forum.requests] == ["/hot.md"]
            public = get(app.feed_url("/latest.atom"))
        assert public.status_code == 200  # its own source probe (the list itself), without the key
        assert [(r.path, carries_key(r)) for r in p.forum.requests] == [("/hot.md", True), ("/latest.md", False)]

# --- static builds --------------------------------------------------------------------------------------


def test_a_static_build_reads_a_feeds_key_from_the_variable_its_credential_names(tmp_path: Path) -> None:
    from feedbridge.cli import main

    with private_forum("markdown") as p:
        config = tmp_path / "feeds.toml"
        config.write_text(f'site_url = "https://feeds.example.net/dev/"\n[fetch]\ndelay = 0\n'
                          f'[defaults]\nforum = "{p.forum.url}"\n'
                          f'[[feeds]]\nname = "staff"\npath = "c/staff/9"\ncredential = "STAFF_FEED_KEY"\n'
                          f'[[feeds]]\nname = "latest"\npath = "latest"\nformats = ["atom"]\n')
        result = CliRunner().invoke(main, ["build", "--config", str(config), "--out-dir", str(tmp_path / "out")],
                                    env={"STAFF_FEED_KEY": f"user-api-key:{USER_API_KEY}"})
        assert result.exit_code == 0, (result.output, result.exception)
        out = tmp_path / "out"
        assert set(titles_of_file(out / "staff.atom")) == PRIVATE_TITLES
        assert PRIVATE_MARKER not in (out / "latest.atom").read_text(encoding="utf-8")
        assert p.staff_list in {r.target for r in p.keyed()} <= {p.staff_list, "/latest.md"}  # + the probe
        assert any(r.path == "/latest.md" and not carries_key(r) for r in p.forum.requests)
        assert all(r.headers["user-api-key"] == USER_API_KEY for r in p.keyed())
    assert USER_API_KEY not in result.output and USER_API_KEY not in config.read_text(encoding="utf-8")
    assert not any(USER_API_KEY.encode() in f.read_bytes() for f in out.rglob("*") if f.is_file())


def titles_of_file(path: Path) -> list[str]:
    return [entry.title for entry in feedparser.parse(path.read_bytes()).entries]
