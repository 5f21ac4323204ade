"""Personal feeds (issue 47): a member connects their own account with a User API key and follows their own
forum, over real sockets, on the Procfile's gunicorn.

The forum is tests/fake_personal.py on the fake forum: core's handshake (`/user-api-key/new`, `#create`, the
device flow), its answers to a key, and tests/fake_private.py's staff side for a staff member. Each member's
documents carry their own marker, so one member's notification in another's feed is one substring away.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache
from typing import IO
from urllib.parse import parse_qs, quote, quote_plus, urlsplit

import feedparser
import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from feedbridge.config import AuthRedirect, Credential, Forum, Settings, parse_forum
from feedbridge.discourse.fields import MAX_USERNAME
from feedbridge.discourse.personal import parse_bookmarks, parse_notifications
from feedbridge.errors import ConfigError, Forbidden, RequestError, RouteNotFound
from feedbridge.feeds.members import handshake, personal
from feedbridge.web.app import create_app
from tests.appserver import (
    ProcfileApp,
    free_port,
    procfile_apps,
    procfile_env,
    procfile_web,
    running_app,
    serving,
    settings_for,
)
from tests.core_limits import CoreLimits
from tests.fake_personal import PersonalSite, encode64, marker
from tests.fake_private import PRIVATE_MARKER, STAFF_PATH
from tests.redis_server import RedisServer, redis_module, redis_server  # noqa: F401
from tests.test_private import redis_dump
from tests.upstream import FakeForum, upstream  # noqa: F401

SECRET = "personal-secret-9b1e4c7a2d6f"
NEXT_SECRET = "personal-secret-next-03c8e5a1"
OWN_FEEDS = ("notifications", "bookmarks", "messages", "unread", "new")


@cache
def rsa_pem(bits: int = 2048) -> str:
    key = rsa.generate_private_key(65537, bits)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def bridge_settings(*forums: FakeForum, **overrides: object) -> Settings:
    base = settings_for(forums[0].url, personal=True, secret=SECRET, connect_key=rsa_pem())
    return replace(base, forums=tuple(parse_forum(("json:" if f.mode == "json" else "") + f.url) for f in forums),
                   **overrides)


@contextmanager
def personal_forum(mode: str = "json", **site_options: object) -> Iterator[tuple[FakeForum, PersonalSite]]:
    site = PersonalSite(**site_options)  # type: ignore[arg-type]
    with FakeForum(mode=mode, private=site.answer, posted=site.posted) as forum:
        site.attach(forum.url)
        yield forum, site


@dataclass
class Member:
    """A member's browser: one cookie jar for the bridge, their session on the forum."""

    app: ProcfileApp
    forum: FakeForum
    username: str

    def __post_init__(self) -> None:
        self.bridge = httpx.Client(base_url=self.app.url, timeout=30)
        self.on_forum = httpx.Client(cookies={"_t": f"session-{self.username}"}, timeout=30)

    @property
    def key(self) -> str:
        return self.forum.url.removeprefix("http://")

    def connect_page(self) -> httpx.Response:
        return self.bridge.get(f"/{self.key}/connect")

    def approve(self, page: httpx.Response) -> httpx.Response:
        """On the forum: the approval page the connect page links to, then its Authorize button."""
        approve = html.unescape(re.search(r'id="approve" href="([^"]+)"', page.text)[1])  # type: ignore[index]
        shown = self.on_forum.get(approve)
        assert shown.status_code == 200 and 'id="authorize"' in shown.text, shown.text
        fields = {k: html.unescape(v) for k, v in re.findall(r'name="([^"]+)" value="([^"]*)"', shown.text)}
        return self.on_forum.post(f"{self.forum.url}/user-api-key", data=fields)

    def payload(self) -> str:
        created = self.approve(self.connect_page())
        return html.unescape(re.search(r'<pre id="payload">(.*?)</pre>', created.text, re.S)[1])  # type: ignore[index]

    def complete(self, payload: str) -> httpx.Response:
        return self.bridge.post(f"/{self.key}/connect", data={"payload": payload})

    def connect(self) -> dict[str, str]:
        """The whole flow; each feed's Atom URL by name."""
        done = self.complete(self.payload())
        assert done.status_code == 200, done.text
        return feed_urls(done)


def feed_urls(page: httpx.Response) -> dict[str, str]:
    return {name: url for name, url in re.findall(r"<strong>(\w+)</strong>: <a href=\"([^\"]+)\">atom", page.text)}


def problem(response: httpx.Response) -> str:
    found = re.search(r'class="problem"[^>]*>(.*?)</p>', response.text, re.S)
    return html.unescape(found[1]) if found else response.text


def titles(response: httpx.Response) -> list[str]:
    parsed = feedparser.parse(response.content)
    assert parsed.bozo == 0, parsed.bozo_exception
    return [entry.title for entry in parsed.entries]


@dataclass
class World:
    """One gunicorn serving three fake forums: the newest core, a 2023 one, and one without User API keys."""

    newest: tuple[FakeForum, PersonalSite]
    old: tuple[FakeForum, PersonalSite]
    nokeys: tuple[FakeForum, PersonalSite]
    app: ProcfileApp
    log: IO[str]

    def member(self, username: str, which: str = "newest") -> Member:
        forum, _site = getattr(self, which)
        return Member(self.app, forum, username)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with personal_forum() as newest, personal_forum("markdown", release="2023") as old, \
            personal_forum(keys_allowed=False) as nokeys:
        settings = bridge_settings(newest[0], old[0], nokeys[0], access_log=True, log_level="DEBUG")
        with procfile_apps({"app": settings}) as apps:
            app = apps["app"]
            yield World(newest, old, nokeys, app, app._started.log)


# --- connecting ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["newest", "old"])
def test_a_member_connects_by_pasting_the_payload_and_reads_their_own_forum_in_every_format(
        world: World, which: str) -> None:
    """The copy-and-paste flow, on the newest core (OAEP) and on a 2023 one (no `padding`: PKCS#1 v1.5): the
    connect page names the narrowest scope and a nonce that fits, and the feeds read as the member."""
    forum, site = getattr(world, which)
    alice = world.member("alice", which)
    front = httpx.get(f"{world.app.url}/?forum={alice.key}", timeout=30)
    assert f'href="/{alice.key}/connect" id="connect-link"' in front.text
    page = alice.connect_page()
    assert page.status_code == 200 and page.headers["Cache-Control"] == "no-store"
    approve = html.unescape(re.search(r'id="approve" href="([^"]+)"', page.text)[1])  # type: ignore[index]
    query = dict(httpx.URL(approve).params)
    assert approve.startswith(f"{forum.url}/user-api-key/new?") and query["scopes"] == "read"
    assert query["padding"] == "oaep" and "auth_redirect" not in query
    assert len(query["nonce"]) == handshake.NONCE_CHARS and query["client_id"].startswith("feedbridge-")
    assert "BEGIN PUBLIC KEY" in query["public_key"] and "PRIVATE" not in approve
    urls = alice.connect()
    assert set(urls) == {*OWN_FEEDS, "latest"}
    key = site.keys_of("alice")[0].key
    expected = {"notifications": f"poster0 replied to “Topic 0 {marker('alice')}”",
                "bookmarks": f"Bookmarked 0 {marker('alice')} (read later)", "messages": f"Message 0 {marker('alice')}",
                "unread": f"Unread 0 {marker('alice')}", "new": f"New 0 {marker('alice')}"}
    for name, first in expected.items():
        for fmt in ("atom", "rss"):
            answer = alice.bridge.get(urls[name].replace(".atom", f".{fmt}"))
            assert answer.status_code == 200 and answer.headers["Cache-Control"].startswith("private")
            assert titles(answer)[0] == first and key not in answer.text
        document = alice.bridge.get(urls[name].replace(".atom", ".json")).json()
        assert document["items"][0]["title"] == first
        view = alice.bridge.get(urls[name].replace(".atom", ".html"))
        assert view.status_code == 200 and html.escape(first, quote=False) in view.text
        assert "front page" not in view.text  # the front page's form cannot make a member's feed
    staff = alice.bridge.get(urls["latest"].replace("latest.atom", f"{STAFF_PATH[1:]}.atom"))
    assert staff.status_code == 200 and all(PRIVATE_MARKER in t for t in titles(staff))
    public = httpx.get(f"{world.app.url}/{alice.key}{STAFF_PATH}.atom")
    assert public.status_code == 403 and PRIVATE_MARKER not in public.text
    assert {username for _path, username in site.keyed} == {"alice"}


def test_the_notifications_feed_says_what_happened_and_links_each_entry_to_its_post(world: World) -> None:
    forum, _site = world.newest
    urls = world.member("carol").connect()
    parsed = feedparser.parse(httpx.get(urls["notifications"], timeout=30).content)
    entries = {e.title: e for e in parsed.entries}
    said = {f"poster0 replied to “Topic 0 {marker('carol')}”": f"{forum.url}/t/topic-0/8000/2",
            f"poster1 mentioned you in “Topic 1 {marker('carol')}”": f"{forum.url}/t/topic-1/8001/3",
            f"poster2 quoted you in “Topic 2 {marker('carol')}”": f"{forum.url}/t/topic-2/8002/4",
            f"poster3 liked your post in “Topic 3 {marker('carol')}”": f"{forum.url}/t/topic-3/8003/2",
            f"poster4 sent you a message: “Topic 4 {marker('carol')}”": f"{forum.url}/t/topic-4/8004/3",
            "You were granted the badge “Welcome”": f"{forum.url}/badges/3/welcome",
            "poster6 liked 3 of your posts": f"{forum.url}/my/notifications"}
    assert {title: entries[title].link for title in said} == said
    assert len({e.id for e in parsed.entries}) == len(parsed.entries) == 7
    filtered = httpx.get(urls["notifications"] + "?author=poster1,poster2&limit=1", timeout=30)
    assert titles(filtered) == [f"poster1 mentioned you in “Topic 1 {marker('carol')}”"]


def test_two_members_on_one_bridge_never_see_each_others_feeds_or_the_publics(world: World) -> None:
    """One path, `latest.atom`, read as alice (staff), as bob and in public: three answers, each from its own
    cache (the member's key prefix), each member's key sent for their own feeds only."""
    _forum, site = world.newest
    alice, bob = world.member("alice").connect(), world.member("bob").connect()
    for _ in range(2):  # the second round is answered from each member's cache
        staff = titles(httpx.get(alice["latest"], timeout=30))
        plain = titles(httpx.get(bob["latest"], timeout=30))
        public = titles(httpx.get(bob["latest"].split("/me/")[0] + "/latest.atom", timeout=30))
        assert any(PRIVATE_MARKER in t for t in staff) and not any(PRIVATE_MARKER in t for t in plain + public)
        for name in OWN_FEEDS:
            theirs = httpx.get(bob[name], timeout=30).text
            assert marker("bob") in theirs and marker("alice") not in theirs
    bobs = [path for path, user in site.keyed if user == "bob"]
    assert len(bobs) == len(set(bobs))  # each of bob's lists read once with his key, then from his cache
    assert not any(user == "bob" and path == "/u/alice/bookmarks.json" for path, user in site.keyed)


def test_a_personal_feed_refuses_a_signed_urls_token_and_its_page_never_keeps_one(world: World) -> None:
    """A personal feed's URL carries its member's token in its path: `token=` (a signed public feed's) was
    accepted and ignored, and a `.html` view asked with one wrote it into its links and was kept so, for the
    same view asked without it. Now it is a 400 naming it, warm or cold, in every format."""
    latest = world.member("carol").connect()["latest"]
    for fmt in ("atom", "html"):
        url = latest.replace(".atom", f".{fmt}")
        assert httpx.get(url, timeout=30).status_code == 200  # kept, so the next ask could be a hit
        for token in ("ANYTHING", "%22INJECTED"):
            refused = httpx.get(f"{url}?token={token}", timeout=30)
            assert refused.status_code == 400 and "token=" in refused.text
            assert "INJECTED" not in refused.text
        page = httpx.get(url, timeout=30)
        assert page.status_code == 200 and "token=" not in page.text and "INJECTED" not in page.text


def test_a_members_search_path_moves_to_their_own_latest_feed_with_the_same_query(world: World) -> None:
    """`/search?q=`, moved to `/latest?q=` (feeds/request/spec.py `MOVED`), moves under a member's path too: the
    301 keeps them in their own feed, private, and following it reads the latest list as them (the staff
    topics alice sees are in it)."""
    alice = world.member("alice")
    latest = urlsplit(alice.connect()["latest"]).path
    word = next(t for t in titles(alice.bridge.get(latest)) if PRIVATE_MARKER in t).split()[0]
    moved = alice.bridge.get(latest.replace("latest.atom", "search.atom"), params={"q": word})
    assert moved.status_code == 301 and moved.headers["cache-control"].startswith("private"), moved.text
    assert moved.headers["location"] == f"{latest}?q={quote_plus(word)}"
    followed = alice.bridge.get(moved.headers["location"])
    assert followed.status_code == 200 and followed.headers["cache-control"].startswith("private")
    assert any(PRIVATE_MARKER in t and word in t for t in titles(followed))


def test_a_forum_that_lets_the_bridge_redirect_sends_the_member_back_with_their_feeds() -> None:
    """FEEDBRIDGE_AUTH_REDIRECTS: the approval link carries `auth_redirect`, the forum (whose admin allowed it)
    redirects to `/HOST/connect?payload=`, and that lands on the member's feeds; a redirect the admin did not
    allow makes the forum refuse the approval, as core does (`UserApiKeyClient.invalid_auth_redirect?`)."""
    port = free_port()
    with personal_forum() as (forum, site):
        key = forum.url.removeprefix("http://")
        redirect = f"http://127.0.0.1:{port}/{key}/connect"
        site.allowed_redirects.append(f"http://127.0.0.1:{port}/*")
        settings = bridge_settings(forum, auth_redirects=(AuthRedirect(key, redirect),))
        with procfile_web(procfile_env(settings), port=port) as (url, _process):
            member = Member(ProcfileApp(url, key, _process, None), forum, "alice")  # type: ignore[arg-type]
            page = member.connect_page()
            approve = html.unescape(re.search(r'id="approve" href="([^"]+)"', page.text)[1])  # type: ignore[index]
            assert dict(httpx.URL(approve).params)["auth_redirect"] == redirect
            created = member.approve(page)
            assert created.status_code == 302 and created.headers["Location"].startswith(redirect + "?payload=")
            landed = member.bridge.get(created.headers["Location"])
            assert landed.status_code == 200 and "Connected as alice" in landed.text
            assert marker("alice") in httpx.get(feed_urls(landed)["notifications"], timeout=30).text
            site.allowed_redirects.clear()  # the forum's admin takes it back: core refuses the approval page
            again = member.connect_page()
            refused = member.on_forum.get(html.unescape(re.search(r'id="approve" href="([^"]+)"',  # type: ignore[index]
                                                                  again.text)[1]))
        assert "Something went wrong" in refused.text and len(site.keys_of("alice")) == 1


def test_the_device_flow_gives_a_code_to_type_and_completes_once_the_member_approved(world: World) -> None:
    forum, site = world.newest
    bob = world.member("bob")
    page = bob.connect_page()
    assert 'id="device"' in page.text
    started = bob.bridge.post(f"/{bob.key}/connect/device")
    code = re.search(r'id="user-code">([A-Z0-9-]+)<', started.text)[1]  # type: ignore[index]
    poll = html.unescape(re.search(r'<form method="post" action="([^"]+)"', started.text)[1])  # type: ignore[index]
    cookie = bob.bridge.cookies[handshake.COOKIE]
    pending = bob.bridge.post(poll)
    assert pending.status_code == 200 and "has not seen your approval" in pending.text and code in pending.text
    site.approve(code, "bob")
    done = bob.bridge.post(poll)
    assert done.status_code == 200 and "Connected as bob" in done.text
    assert marker("bob") in httpx.get(feed_urls(done)["messages"], timeout=30).text
    # core consumes an authorized grant: the code is spent, even for a browser that kept its connect cookie
    bob.bridge.cookies.set(handshake.COOKIE, cookie, path=f"/{bob.key}/connect")
    again = bob.bridge.post(poll)
    assert again.status_code == 400 and "expired, or was used" in problem(again)
    bob.bridge.cookies.delete(handshake.COOKIE)
    assert bob.bridge.post(f"/{bob.key}/connect/device").status_code == 400  # that browser's connect is done
    bob.connect_page()
    denied = bob.bridge.post(f"/{bob.key}/connect/device")
    site.approve(re.search(r'id="user-code">([A-Z0-9-]+)<', denied.text)[1], "bob", deny=True)  # type: ignore[index]
    answer = bob.bridge.post(html.unescape(re.search(r'<form method="post" action="([^"]+)"',  # type: ignore[index]
                                                     denied.text)[1]))
    assert answer.status_code == 403 and "denied" in problem(answer)


def test_a_device_code_is_polled_only_from_the_browser_that_asked_for_it(world: World) -> None:
    """A device code's poll URL is tied to the browser that asked for the code (its connect cookie). Before,
    anyone holding a code could have a victim's browser post its poll URL from any site (no cookie needed):
    this bridge's page showed the victim the code to type on the forum, and the asker completed the connect
    in their own browser with the victim's key. Refused now before the forum is asked or the code shown."""
    forum, site = world.newest
    carol = world.member("carol")
    carol.connect_page()
    started = carol.bridge.post(f"/{carol.key}/connect/device")
    code = re.search(r'id="user-code">([A-Z0-9-]+)<', started.text)[1]  # type: ignore[index]
    poll = html.unescape(re.search(r'<form method="post" action="([^"]+)"', started.text)[1])  # type: ignore[index]
    polled = sum("/user-api-key/device/poll" in r.path for r in forum.requests)
    with httpx.Client(base_url=world.app.url, timeout=30) as victim:
        cold = victim.post(poll)  # a cross-site form: no cookie of this bridge
        victim.get(f"/{carol.key}/connect")  # a connect of its own under way: a cookie, not the asker's
        other = victim.post(poll)
        forged = victim.post(poll.replace("bound=", "bound=x"))
        unicode = victim.post(re.sub(r"bound=[^&]*", "bound=%C3%A9", poll))  # `compare_digest` of text: a 500
    assert cold.status_code == 400 and "no connect under way" in problem(cold) and code not in cold.text
    assert unicode.status_code == 400 and "not given to this browser" in problem(unicode)
    assert other.status_code == 400 and "not given to this browser" in problem(other) and code not in other.text
    assert forged.status_code == 400 and code not in forged.text
    assert sum("/user-api-key/device/poll" in r.path for r in forum.requests) == polled
    site.approve(code, "carol")
    assert "Connected as carol" in carol.bridge.post(poll).text


def test_the_forum_shows_members_an_application_name_no_request_chose(world: World) -> None:
    """`application_name` is what a member sees on the forum's approval page and in their Apps. It was made of
    the request's Host header, so a code asked for under `Host: official-app.example` showed the forum's
    members an application of the asker's naming; it names only what the operator configured now."""
    dave = world.member("dave")
    page = dave.bridge.get(f"/{dave.key}/connect", headers={"Host": "official-app.example"})
    approve = html.unescape(re.search(r'id="approve" href="([^"]+)"', page.text)[1])  # type: ignore[index]
    [name] = parse_qs(urlsplit(approve).query)["application_name"]
    assert page.status_code == 200 and name == "feedbridge"


def test_a_connect_payload_is_decrypted_only_for_a_browser_with_a_connect_and_within_its_cpu_allowance() -> None:
    """Each payload posted to /connect is an RSA decryption (two, with the older padding): before, none needed a
    cookie or was charged, and one client posting random payloads held the worker (61 ms each with an 8,192-bit
    key), never refused. Now a request without a connect cookie is refused before any, and the decryptions are
    charged to the client's CPU allowance (a hundredth of a second here): 429 once it is spent, while another
    client still connects."""
    with personal_forum() as (forum, site):
        settings = bridge_settings(forum, cpu_allowance=0.01)
        with serving(settings) as (app, _flask_app):
            key = settings.forums[0].key
            garbage = {"payload": base64.b64encode(os.urandom(256)).decode()}
            with httpx.Client(base_url=app.url, timeout=30) as one:
                without = one.post(f"/{key}/connect", data=garbage)
                one.cookies.set(handshake.COOKIE, "a" * 22, path=f"/{key}/connect")
                answers = []
                for _ in range(500):  # each at least a tenth of a millisecond of RSA: 50 ms in all, at the least
                    answers.append(one.post(f"/{key}/connect", data=garbage))
                    if answers[-1].status_code == 429:
                        break
            with httpx.Client(base_url=app.url, timeout=30,
                              transport=httpx.HTTPTransport(local_address="127.0.0.2")) as other:
                theirs = other.get(f"/{key}/connect")
    assert without.status_code == 400 and "no connect under way" in problem(without)  # before any decryption
    assert {a.status_code for a in answers[:-1]} == {400} and answers[-1].status_code == 429
    assert theirs.status_code == 200 and 'id="approve"' in theirs.text


def test_a_2023_forum_gives_every_member_their_own_client_id_where_one_for_all_would_collide(world: World) -> None:
    """db/migrate/20160816052836: `user_api_keys.client_id` unique for every member. One client id per connect
    lets alice and bob both connect; the fake forum refuses the same id for two members, as core did."""
    _forum, site = world.old
    for name in ("alice", "bob"):
        assert world.member(name, "old").connect()
    site.make_key("carol", client_id="shared")
    with pytest.raises(ValueError):
        site.make_key("bob", client_id="shared")
    keys = site.keys_of("alice") + site.keys_of("bob")
    assert len({k.client_id for k in keys}) == len(keys) >= 2


# --- bad input: a clear 4xx, and nothing fetched with anyone's key ----------------------------------------


def test_bad_payloads_are_refused_with_a_4xx_saying_why_before_any_key_is_used(world: World) -> None:
    forum, site = world.newest
    settings = bridge_settings(forum, world.old[0])
    here, elsewhere = settings.forums
    bridge_key = handshake.RsaKey.load(settings)
    alice = world.member("alice")
    page = alice.connect_page()
    cookie = alice.bridge.cookies[handshake.COOKIE]
    stolen = site.make_key("alice")

    def sealed(nonce: str, to: rsa.RSAPublicKey | None = None) -> str:
        plain = json.dumps({"key": stolen, "nonce": nonce, "push": False, "api": 4}).encode()
        pad = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
        return encode64((to or bridge_key.private.public_key()).encrypt(plain, pad))

    good = handshake.make_nonce(settings, here, bridge_key, cookie).text
    other_app = rsa.generate_private_key(65537, 2048).public_key()
    cases = {
        "not base64": ("!!! not the forum's text !!!", 400, "not base64"),
        "cut short": ("".join(sealed(good).split())[:200], 400, "cut short"),
        "another application's key": (sealed(good, other_app), 400, "does not decrypt"),
        "another forum's nonce": (sealed(handshake.make_nonce(settings, elsewhere, bridge_key, cookie).text), 403,
                                  "not one this bridge made"),
        "a forged nonce": (sealed(good[:-4] + "AAAA"), 403, "not one this bridge made"),
        "an expired nonce": (sealed(handshake.make_nonce(settings, here, bridge_key, cookie,
                                                         now=time.time() - settings.connect_ttl - 5).text), 400,
                             "expired"),
        "another browser's nonce": (sealed(handshake.make_nonce(settings, here, bridge_key, "x" * 22).text), 403,
                                    "another browser"),
    }
    before = len(site.keyed)
    for name, (payload, status, words) in cases.items():
        answer = alice.complete(payload)
        assert (answer.status_code, words in problem(answer)) == (status, True), (name, problem(answer))
        assert stolen not in answer.text
    assert len(site.keyed) == before  # nothing was read with the key of any of them
    assert page.status_code == 200 and alice.complete(sealed(good)).status_code == 200


def test_a_payload_replayed_or_carried_to_another_browser_completes_nothing(world: World) -> None:
    """Without storage, a payload is worth something only in the browser whose connect asked for it, once:
    the completing page deletes the cookie the nonce is bound to."""
    _forum, site = world.newest
    carol = world.member("carol")
    payload = carol.payload()
    thief = world.member("carol")  # another browser, the same payload (a log of the redirect, say)
    stolen = thief.complete(payload)  # a browser with no connect of its own: refused before any decryption
    assert stolen.status_code == 400 and "another browser" in problem(stolen)
    thief.connect_page()  # with a connect of its own, the payload's nonce is not its browser's
    stolen = thief.complete(payload)
    assert stolen.status_code == 403 and "another browser" in problem(stolen)
    first = carol.complete(payload)
    assert first.status_code == 200 and "set-cookie" in first.headers and "Max-Age=0" in first.headers["set-cookie"]
    before = len(site.keyed)
    replayed = carol.complete(payload)
    assert replayed.status_code == 400 and "already completed" in problem(replayed)
    assert len(site.keyed) == before


def test_a_forum_without_user_api_keys_is_a_404_saying_so_and_a_refused_key_a_403(world: World) -> None:
    forum, site = world.nokeys
    page = world.member("alice", "nokeys").connect_page()
    assert page.status_code == 404 and "does not give User API keys" in problem(page)
    assert [r.method for r in forum.requests if r.path == "/user-api-key/new"] == ["HEAD"]
    newest, newest_site = world.newest
    bob = world.member("bob")
    payload = bob.payload()
    newest_site.keys_allowed = False  # the key the forum just gave is refused (an admin turned keys off)
    try:
        refused = bob.complete(payload)
    finally:
        newest_site.keys_allowed = True
    assert refused.status_code == 403 and "refused the key it has just given" in problem(refused)


@pytest.mark.parametrize("damage", ["a letter changed", "cut short", "another forum's"])
def test_a_tampered_or_truncated_token_is_403_and_nothing_is_fetched(world: World, damage: str) -> None:
    _forum, site = world.newest
    urls = world.member("alice").connect()
    url = urls["new"]
    token = url.split("/me/")[1].split("/")[0]
    if damage == "a letter changed":
        broken = url.replace(token, token[:40] + ("A" if token[40] != "A" else "B") + token[41:])
    elif damage == "cut short":
        broken = url.replace(token, token[:-10])
    else:
        broken = url.replace(world.newest[0].url.removeprefix("http://"), world.old[0].url.removeprefix("http://"))
    before = len(site.keyed) + len(world.old[1].keyed)
    answer = httpx.get(broken, timeout=30)
    assert answer.status_code == 403 and "not one this bridge made" in answer.text
    assert len(site.keyed) + len(world.old[1].keyed) == before


def test_only_a_connect_form_may_send_a_body_and_only_a_small_one_within_seconds(world: World) -> None:
    """The worker answers 413 to any body (web/worker.py) but a connect form's of at most FORM_BYTES, which it
    reads whole within FORM_WITHIN seconds: a body trickled past that is a 408, not a greenlet held for good."""
    host, port = world.app.url.removeprefix("http://").split(":")
    key = world.newest[0].url.removeprefix("http://")

    def ask(head: bytes, trickle: bytes = b"", gap: float = 0.0) -> tuple[bytes, float]:
        started = time.monotonic()
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head)
            for byte in trickle:
                if select.select([sock], [], [], gap)[0]:  # the server answered: no more to send
                    break
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    break
            answer = sock.recv(65536)
            took = time.monotonic() - started
            sock.settimeout(1)
            try:
                while chunk := sock.recv(65536):
                    answer += chunk
            except OSError:
                pass
            return answer, took

    big, _ = ask(f"POST /{key}/connect HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n".encode())
    elsewhere, _ = ask(f"POST /{key}/latest.atom HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n".encode())
    assert big.startswith(b"HTTP/1.1 413 ") and elsewhere.startswith(b"HTTP/1.1 413 ")
    slow, took = ask(f"POST /{key}/connect HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n"
                     "Content-Type: application/x-www-form-urlencoded\r\n\r\n".encode(), b"payload=" + b"A" * 32, 0.5)
    assert slow.startswith(b"HTTP/1.1 408 ") and b"took too long" in slow and took < 12


# --- a key the forum no longer accepts --------------------------------------------------------------------


def test_a_revoked_key_answers_403_saying_so_and_is_not_used_again(world: World) -> None:
    """Core answers a revoked key 403 invalid_access, as it does a page the member may not see: the key itself
    is tried on /session/current.json before the bridge says it is gone, and then nothing more is sent."""
    forum, site = world.newest
    bob = world.member("bob").connect()
    hidden = httpx.get(bob["latest"].replace("latest.atom", f"{STAFF_PATH[1:]}.atom"), timeout=30)
    assert hidden.status_code == 403 and "does not show this to bob" in hidden.text
    assert titles(httpx.get(bob["unread"], timeout=30))  # the key itself works
    site.revoke("bob")
    gone = httpx.get(bob["new"], timeout=30)  # not read before: asked of the forum
    assert gone.status_code == 403 and "no longer accepts the key" in gone.text and "Connect again" in gone.text
    sent = [r.path for r in forum.requests if "user-api-key" in r.headers]
    assert sent[-2:] == ["/new.json", "/session/current.json"]
    before = len(forum.requests)
    again = httpx.get(bob["bookmarks"].replace(".atom", ".html"), timeout=30)
    assert again.status_code == 403 and "no longer accepts the key" in again.text
    assert len(forum.requests) == before
    assert world.member("bob").connect()  # the member's next connect gives new URLs


# --- what is kept, and where ------------------------------------------------------------------------------


def test_the_opml_lists_the_members_feeds_and_no_page_log_or_header_holds_the_key(world: World) -> None:
    _forum, site = world.newest
    alice = world.member("alice")
    done = alice.complete(alice.payload())
    key = site.keys_of("alice")[-1].key
    opml = alice.bridge.get(re.search(r'href="([^"]+)" id="opml"', done.text)[1])  # type: ignore[index]
    assert opml.status_code == 200 and opml.headers["Cache-Control"] == "no-store"
    assert sorted(re.findall(r'xmlUrl="([^"]+)"', opml.text)) == sorted(feed_urls(done).values())
    token = next(iter(feed_urls(done).values())).split("/me/")[1].split("/")[0]
    for answer in (done, opml, *(httpx.get(url, timeout=30) for url in feed_urls(done).values())):
        assert key not in answer.text and key not in str(answer.headers)
    # a member's feed URL pasted into the front page's box: its token reached the request line encoded
    pasted = next(iter(feed_urls(done).values()))
    assert httpx.get(f"{world.app.url}/", params={"url": pasted}, timeout=30).status_code in (200, 400)
    assert httpx.get(f"{world.app.url}/?url={pasted.replace('/', '%2F')}&x=1", timeout=30).status_code in (200, 400)
    world.log.seek(0)
    output = world.log.read()
    assert "/me/…/" in output and "GET" in output
    for secret in (key, token, SECRET):
        assert secret not in output


def test_keys_and_tokens_never_reach_redis_and_two_instances_share_a_members_cache(
        redis_server: RedisServer) -> None:
    with personal_forum() as (forum, site):
        settings = bridge_settings(forum, cache_url=redis_server.url)
        with running_app(settings) as first, running_app(settings) as second:
            key = site.make_key("alice")
            token = personal.seal(settings, settings.forums[0], key, 41, "alice")
            url = f"/{first.forum_key}/me/{token}/notifications.atom"
            assert marker("alice") in httpx.get(first.url + url, timeout=30).text
            before = len(site.keyed)
            assert marker("alice") in httpx.get(second.url + url, timeout=30).text
            assert len(site.keyed) == before  # the second instance read the member's copy from Redis
    dump = redis_dump(redis_server)
    assert any(marker("alice").encode() in value for _, value in dump)
    for secret in (key, SECRET):
        assert not any(secret.encode() in k or secret.encode() in v for k, v in dump), secret
    assert not any(token.encode() in k + v for k, v in dump)  # a kept body holds a mark where the token goes


# --- politeness: each key within core's limits, across workers ---------------------------------------------


def test_two_instances_on_one_redis_spend_one_budget_for_a_members_key(redis_server: RedisServer) -> None:
    with personal_forum() as (forum, site):
        settings = bridge_settings(forum, cache_url=redis_server.url, member_budget=3)
        with running_app(settings) as first, running_app(settings) as second:
            token = personal.seal(settings, settings.forums[0], site.make_key("alice"), 41, "alice")
            answers = [httpx.get(f"{app.url}/{app.forum_key}/me/{token}/{name}.atom", timeout=30)
                       for app, name in zip((first, second) * 3, OWN_FEEDS, strict=False)]
    assert [a.status_code for a in answers] == [200, 200, 200, 503, 503]
    assert [user for _path, user in site.keyed] == ["alice"] * 3


def test_each_members_key_has_its_own_budget_under_cores_and_others_are_not_stopped() -> None:
    """FEEDBRIDGE_MEMBER_BUDGET, split between two gevent workers: alice's key never reaches core's per-key
    limit (the forum refuses nothing), past her budget her cold feeds are 503 with Retry-After, and bob's
    feeds and public ones are read all the same."""
    limits = CoreLimits(user_api_minute=6)
    site = PersonalSite()
    with FakeForum(mode="json", private=site.answer, posted=site.posted, core_limits=limits) as forum:
        site.attach(forum.url)
        settings = bridge_settings(forum, member_budget=4)
        with procfile_apps({"app": settings}, workers=2) as apps:
            stem = f"{apps['app'].url}/{apps['app'].forum_key}/me/"
            alice = personal.seal(settings, settings.forums[0], site.make_key("alice"), 41, "alice")
            bob = personal.seal(settings, settings.forums[0], site.make_key("bob"), 42, "bob")
            feeds = [f"{name}.atom" for name in OWN_FEEDS]
            answers = [httpx.get(f"{stem}{alice}/{feed}", timeout=30) for feed in feeds]
            statuses = [a.status_code for a in answers]
            theirs = httpx.get(f"{stem}{bob}/messages.atom", timeout=30)
            public = httpx.get(f"{apps['app'].url}/{apps['app'].forum_key}/hot.atom", timeout=30)
    alices = [path for path, user in site.keyed if user == "alice"]
    assert 2 <= len(alices) <= 4 and limits.refused == {}
    assert statuses.count(503) == len(feeds) - len(alices) >= 1
    busy = next(a for a in answers if a.status_code == 503)
    assert "your key" in busy.text and int(busy.headers["Retry-After"]) >= 1
    assert theirs.status_code == 200 and public.status_code == 200


def test_a_clients_members_keys_spend_its_share_of_the_forums_window_and_other_clients_read_on() -> None:
    """One forum account connects as often as it likes, and each connect is a key of its own. Each key has its
    own budget, but its requests reach the forum from the bridge's address: they are counted in the forum's
    windows, and spend their client's share of those, as its public requests do (a third of each). Before,
    one client with three keys sent the forum 12 requests in 10 s (the whole 10 s window here) and every
    other client's cold feed got 503 for the rest of it (RELIABILITY.md row 52)."""
    with personal_forum() as (forum, site):
        settings = bridge_settings(forum, forum_budget_10s=12, forum_budget=120, member_budget=15)
        with procfile_apps({"app": settings}) as apps:
            app = apps["app"]
            tokens = [personal.seal(settings, settings.forums[0], site.make_key("alice", client_id=f"app{n}"), 41,
                                    "alice") for n in range(3)]
            sent = len(forum.requests)
            with httpx.Client(timeout=30, transport=httpx.HTTPTransport(local_address="127.0.0.1")) as one:
                answers = [one.get(f"{app.url}/{app.forum_key}/me/{token}/u/someone{n}.atom")
                           for token in tokens for n in range(5)]
            sent = len(forum.requests) - sent
            with httpx.Client(timeout=30, transport=httpx.HTTPTransport(local_address="127.0.0.2")) as other:
                theirs = other.get(f"{app.url}/{app.forum_key}/hot.atom")
    refused = [a for a in answers if a.status_code == 503]
    assert 2 <= sent <= 12 // 3 + 1  # its share of the 10 s window, and the forum's basic info once
    assert refused and all("this client has used its share" in a.text for a in refused)
    assert theirs.status_code == 200, theirs.text


# --- the parts, without a server ------------------------------------------------------------------------


def test_a_members_path_names_feeds_of_their_own_forum_only() -> None:
    """With forums `H` and `H/sub` on one bridge, `/H/me/TOKEN/sub/latest.atom` was read as forum H/sub's feed in
    the member's scope, stopped only by the fetcher (a 502): a personal feed is its own forum's, a 404 else."""
    settings = replace(Settings(), forums=(parse_forum("https://h.example"), parse_forum("https://h.example/sub")))
    member = personal.Member(settings.forums[0], 41, "alice", Credential("h.example", key="k" * 32))
    assert personal.feed_spec(settings, member, "latest.atom", {}).forum == settings.forums[0]
    with pytest.raises(RouteNotFound, match="a personal feed is its own forum's"):
        personal.feed_spec(settings, member, "sub/latest.atom", {})


def test_a_token_opens_only_under_its_own_forum_with_the_secret_or_the_previous_one() -> None:
    settings = Settings(forums=(Forum("https://a.example"), Forum("https://b.example")), secret=SECRET,
                        personal=True, connect_key=rsa_pem())
    a, b = settings.forums
    token = personal.seal(settings, a, "f" * 32, 7, "zoë")
    member = personal.opened(settings, a, token)
    assert (member.username, member.user_id, member.credential.key) == ("zoë", 7, "f" * 32)
    assert "f" * 32 not in repr(member) and member.id not in token and "f" * 32 not in token
    with pytest.raises(Forbidden):
        personal.opened(settings, b, token)
    rotated = replace(settings, secret=NEXT_SECRET, secret_previous=SECRET)
    assert personal.opened(rotated, a, token).username == "zoë"
    with pytest.raises(Forbidden):
        personal.opened(replace(settings, secret=NEXT_SECRET), a, token)
    for position in range(len(token)):  # every character counts: none can change and still open
        changed = token[:position] + ("A" if token[position] != "A" else "B") + token[position + 1:]
        with pytest.raises(Forbidden):
            personal.opened(settings, a, changed)


def test_a_nonce_is_short_bound_to_its_forum_key_browser_and_time() -> None:
    settings = Settings(forums=(Forum("https://a.example"), Forum("https://b.example")), secret=SECRET,
                        personal=True, connect_key=rsa_pem())
    a, b = settings.forums
    key = handshake.RsaKey.load(settings)
    nonce = handshake.make_nonce(settings, a, key, "cookie-one")
    assert len(nonce.text) == handshake.NONCE_CHARS
    # the payload must fit the key with OAEP (core's validate_payload_size!), whatever key length core gives
    payload = json.dumps({"key": "k" * 64, "nonce": nonce.text, "push": False, "api": 4})
    assert len(payload) <= key.size - 42
    assert handshake.check_nonce(settings, a, key, nonce.text, "cookie-one").client_id == nonce.client_id
    other_key = handshake.RsaKey.load(replace(settings, connect_key=rsa_pem(3072)))
    for forum, rsa_key, cookie, error in ((b, key, "cookie-one", Forbidden), (a, other_key, "cookie-one", Forbidden),
                                          (a, key, "cookie-two", Forbidden), (a, key, None, Forbidden)):
        with pytest.raises(error):
            handshake.check_nonce(settings, forum, rsa_key, nonce.text, cookie)
    old = handshake.make_nonce(settings, a, key, "cookie-one", now=time.time() - settings.connect_ttl - 1)
    with pytest.raises(RequestError, match="expired"):
        handshake.check_nonce(settings, a, key, old.text, "cookie-one")
    rotated = replace(settings, secret=NEXT_SECRET, secret_previous=SECRET)
    assert handshake.check_nonce(rotated, a, key, nonce.text, "cookie-one")


def test_a_payload_decrypts_with_oaep_and_with_pkcs1_for_a_forum_that_ignores_padding() -> None:
    settings = Settings(secret=SECRET, personal=True, connect_key=rsa_pem())
    key = handshake.RsaKey.load(settings)
    public = key.private.public_key()
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    for pad in (oaep, padding.PKCS1v15()):
        assert key.decrypt(encode64(public.encrypt(b'{"key":"k"}', pad))) == b'{"key":"k"}'
    with pytest.raises(RequestError, match="base64"):
        key.decrypt("%%%")
    with pytest.raises(RequestError, match="longer"):
        key.decrypt("A" * 10_000)
    with pytest.raises(RequestError, match="cut short"):
        key.decrypt(base64.b64encode(b"x" * 100).decode())


def test_a_bridge_without_personal_feeds_has_no_connect_page_and_no_member_paths(upstream: FakeForum) -> None:
    with running_app(settings_for(upstream.url, secret=SECRET)) as app:
        page = httpx.get(f"{app.url}/{app.forum_key}/connect", timeout=30)
        front = httpx.get(f"{app.url}/", timeout=30)
        before = len(upstream.requests)
        member = httpx.get(f"{app.url}/{app.forum_key}/me/{'A' * 60}/notifications.atom", timeout=30)
    assert page.status_code == 404 and "no personal feeds" in problem(page)
    assert front.status_code == 200 and "connect-link" not in front.text
    assert member.status_code == 404 and len(upstream.requests) == before


def test_the_settings_need_a_secret_and_a_connect_key_and_redirects_for_known_forums() -> None:
    env = {"FEEDBRIDGE_FORUMS": "https://a.example", "FEEDBRIDGE_PERSONAL": "on"}
    with pytest.raises(ConfigError, match="FEEDBRIDGE_CONNECT_KEY"):
        Settings.from_env({**env, "FEEDBRIDGE_SECRET": SECRET})
    full = {**env, "FEEDBRIDGE_SECRET": SECRET, "FEEDBRIDGE_CONNECT_KEY": rsa_pem().replace("\n", "\\n")}
    assert handshake.RsaKey.load(Settings.from_env(full)).size == 256  # a PaaS's one-line value, \n escaped
    with pytest.raises(ConfigError, match="not a forum"):
        Settings.from_env({**full, "FEEDBRIDGE_AUTH_REDIRECTS": "b.example=https://bridge.example/b.example/connect"})
    with pytest.raises(ConfigError, match="/a.example/connect"):
        Settings.from_env({**full, "FEEDBRIDGE_AUTH_REDIRECTS": "a.example=https://bridge.example/elsewhere"})
    with pytest.raises(ConfigError, match="FEEDBRIDGE_CONNECT_KEY") as raised:
        handshake.RsaKey.load(Settings.from_env({**full, "FEEDBRIDGE_CONNECT_KEY": "-----BEGIN nonsense"}))
    assert "nonsense" not in str(raised.value)
    assert rsa_pem()[40:80] not in repr(Settings.from_env(full))
    with pytest.raises(ConfigError, match="FEEDBRIDGE_CONNECT_KEY"):  # the service does not start with it
        create_app(Settings.from_env({**full, "FEEDBRIDGE_CONNECT_KEY": rsa_pem()[:300]}))


def test_notifications_and_bookmarks_parse_each_item_as_an_entry_of_its_own() -> None:
    site = PersonalSite(notifications=65)
    member = site.members["alice"]
    first = parse_notifications(json.dumps(site._notifications(member, 0)), base_url="https://f.example")
    rest = parse_notifications(json.dumps(site._notifications(member, 60)), base_url="https://f.example")
    assert len(first.topics) == 60 and len(rest.topics) == 5 and first.next_page_url is not None
    assert rest.next_page_url is None
    assert len({t.personal_id for t in first.topics + rest.topics}) == 65
    marks = parse_bookmarks(json.dumps(site._bookmarks(member, 0)), base_url="https://f.example")
    assert [t.excerpt for t in marks.topics][:1] == ["What was worth keeping & 0"]
    # each with its author's picture (a JSON Feed author's `avatar`), where core names one: a badge has none
    pictures = {t.author: t.author_avatar for t in first.topics[:7] + marks.topics}
    assert pictures["poster0"] == "https://f.example/user_avatar/forum/poster0/96/3_2.png"
    assert pictures["alice"] is None  # "You were granted the badge": no acting user
    assert pictures["author1"] == "https://f.example/user_avatar/forum/author1/96/4_2.png"
    hostile = site._notifications(member, 0)
    hostile["notifications"][0]["acting_user_avatar_template"] = "javascript:alert(1)//{size}"
    assert parse_notifications(json.dumps(hostile), base_url="https://f.example").topics[0].author_avatar is None
    assert parse_bookmarks('{"bookmarks": []}', base_url="https://f.example").topics == ()


def test_a_members_own_lists_are_found_for_the_longest_name_core_allows() -> None:
    """A name is quoted into its list's path, up to 12 characters a character (4 UTF-8 bytes, `%XX` each); the
    paths were matched up to 200, so a member named with 17 CJK Extension B letters had a 500 on every
    bookmarks and messages feed (`own_pages` found no list)."""
    for name in ("\U00020000" * 17, "\U00020000" * MAX_USERNAME, "中" * 23, "bob"):
        for own in personal.OWN.values():
            path = own.path.format(user=quote(name, safe=""))
            assert [o for o in personal.OWN.values() if o.pattern.fullmatch(path)] == [own], (name, own.label)
