"""Personal feeds: a forum member's own notifications, bookmarks, messages, unread and new topics, and every
public feed path read as them, from the User API key they connected (`feedbridge.feeds.members.handshake`).

Nothing about a member is stored. Their key lives only inside their feed URLs, `/{host}/me/{token}/...`:
the token is the key, its owner's id and name, sealed with AES-GCM-SIV under a key HKDF derives from
FEEDBRIDGE_SECRET (the forum's key as associated data, so a token opens under its own forum only). Any
instance with the secret reads any URL; an altered or cut token opens nowhere (403, nothing fetched); a
token made under FEEDBRIDGE_SECRET_PREVIOUS still opens while members move over, as signed URLs do.

A request's member is one value, `Member`, opened at the edge (`opened`), from which the service makes the
members' scope as that member reads in it (`FeedService.scope`; `feeds/service.py`, a `feeds.sources.reads.Scope`,
handed down with every read, into the pool's work too). Each of its parts holds the member:

    key prefix   every store, control and single-flight key of the scope carries `Member.id`, a SHA-256
                 of the forum and the key (`store/scoped.py`): no other member or public request can name
                 a member's copies, and the digest reveals nothing of the key (a 128-bit random value)
    credential   every fetch of the scope sends the member's key (`Gate`, `upstream/fetcher.py`), and
                 only to its own forum
    budget       the member's own windows, under core's limits for one key (`max_user_api_reqs_per_minute`
                 20, `_per_day` 2,880: lib/auth/default_current_user_provider.rb), by `Member.id`, shared
                 through Redis by every worker and instance, counted in the forum's windows too

There is no members' scope without a member: no request can fall into another's.

The member's own lists (`OWN`), each read as JSON whatever the forum's source, 1 to FEEDBRIDGE_PAGES_MAX
pages: `notifications` (core's full list, which does not mark anything seen), `bookmarks`, `messages`
(their private messages), `unread` and `new`. The topic lists take every topic filter; notifications and
bookmarks take those of post feeds (`author=`, `q=`, `limit=`, `pages=`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from urllib.parse import quote

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCMSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from feedbridge.config import MAX_KEY_CHARS, Credential, Forum, Settings, parse_credential
from feedbridge.discourse.fields import MAX_USERNAME
from feedbridge.discourse.json_pages import parse_json_listing
from feedbridge.discourse.personal import (
    NOTIFICATIONS_PAGE,
    parse_bookmarks,
    parse_current_user,
    parse_notifications,
)
from feedbridge.errors import Forbidden, KeyRefused, NoForumAnswer, NotAListError, RequestError, RouteNotFound
from feedbridge.feeds.admission.callers import Caller
from feedbridge.feeds.admission.gate import Gate
from feedbridge.feeds.request.params import shorten
from feedbridge.feeds.request.spec import FeedSpec, parse_feed_request, split_forum
from feedbridge.feeds.sources.dialects import JSON, Source
from feedbridge.store import keys
from feedbridge.store.control import ControlStore

ME = "me"
"""The path segment after the forum's key that starts a personal feed's path."""
MEMBER = "member"
"""The scope of everything read with a member's key (`feedbridge.store.scoped`)."""
MAX_TOKEN_CHARS = 600
_TOKEN = re.compile(r"[A-Za-z0-9_-]{40,600}")
_VERSION = b"\x01"
_NONCE_BYTES = 12
MAX_USERNAME_CHARS = 60


@dataclass(frozen=True, slots=True)
class Member:
    """A connected forum member: whose key (`credential`, whose repr leaves the key out), on which forum."""

    forum: Forum
    user_id: int
    username: str
    credential: Credential

    @property
    def id(self) -> str:
        """The member's key prefix and budget name: a digest of the forum and the key, never the key."""
        text = f"feedbridge member\0{self.forum.key}\0{self.credential.key}"
        return hashlib.sha256(text.encode()).hexdigest()[:32]


# --- the token: the member's key sealed into their feed URLs -----------------------------------------------


def _aead(secret: str) -> AESGCMSIV:
    key = HKDF(hashes.SHA256(), 32, salt=b"feedbridge", info=b"personal feed token v1").derive(secret.encode())
    return AESGCMSIV(key)


def seal(settings: Settings, forum: Forum, key: str, user_id: int, username: str) -> str:
    """The token of a member's feed URLs (see the module docstring), sealed with the current secret."""
    if not settings.secret:
        raise RequestError("FEEDBRIDGE_SECRET is not set: there is nothing to seal a key with")
    nonce = os.urandom(_NONCE_BYTES)
    sealed = _aead(settings.secret).encrypt(nonce, msgspec.json.encode([key, user_id, username]), forum.key.encode())
    return _spelled(_VERSION + nonce + sealed)


def _spelled(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def opened(settings: Settings, forum: Forum, token: str) -> Member:
    """The member a token names, or Forbidden (before anything is fetched) for any token this bridge did not
    seal for this forum with its secret or the previous one: altered, cut short, or from another bridge."""
    again = (f"this personal feed URL is not one this bridge made for {forum.key} (altered, cut short, or "
             f"made before the bridge's secret changed): connect again at /{forum.key}/connect")
    if not _TOKEN.fullmatch(token):
        raise Forbidden(again)
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise Forbidden(again) from None
    # base64's last character can carry bits no byte uses: only the one spelling `seal` writes is a token
    if raw[:1] != _VERSION or len(raw) < 1 + _NONCE_BYTES + 16 or _spelled(raw) != token:
        raise Forbidden(again)
    nonce, sealed = raw[1 : 1 + _NONCE_BYTES], raw[1 + _NONCE_BYTES :]
    for secret in (s for s in (settings.secret, settings.secret_previous) if s):
        try:
            plain = _aead(secret).decrypt(nonce, sealed, forum.key.encode())
        except InvalidTag:
            continue
        key, user_id, username = msgspec.json.decode(plain, type=tuple[str, int, str])
        return Member(forum, user_id, username, parse_credential(f"user-api-key:{key}", forum.key))
    raise Forbidden(again)


# --- personal feed paths -----------------------------------------------------------------------------------


def split(settings: Settings, path: str) -> tuple[Forum, str, str] | None:
    """A personal feed's path (`HOST/me/TOKEN/REST`, without its leading slash) as its forum, token and the
    rest; None for any other path (no public route starts with `me/`)."""
    found = split_forum(settings, path)
    if found is None:
        return None
    forum, rest = found
    me, slash, after = rest.partition("/")
    if me != ME or not slash:
        return None
    token, slash, rest = after.partition("/")
    if not slash or not rest:
        raise Forbidden(f"a personal feed's path is /{forum.key}/me/TOKEN/FEED, as the connect page gave it")
    if len(token) > MAX_TOKEN_CHARS:
        raise Forbidden("this personal feed URL's token is longer than any this bridge makes")
    return forum, token, rest


@dataclass(frozen=True, slots=True)
class Own:
    """One of a member's own lists: its upstream path and its page on the forum (`{user}`: the member's name,
    quoted), what it is called, how its pages are read, and whether it is a topic list (every topic filter
    applies to it)."""

    path: str
    html: str
    label: str
    source: Source
    topics: bool
    offset: int = 0  # rows a page, for a list paged by `offset=` rather than `page=`

    @property
    def pattern(self) -> re.Pattern[str]:
        # A name quoted is up to 12 characters a character (4 UTF-8 bytes, `%XX` each): 200 left a member whose
        # name is 17 characters of CJK Extension B with a 500 on every bookmarks and messages feed.
        return re.compile(re.escape(self.path).replace(re.escape("{user}"), f"[^/]{{1,{12 * MAX_USERNAME}}}"))


OWN: dict[str, Own] = {
    # core: app/controllers/notifications_controller.rb#index (INDEX_LIMIT 60 a page, `offset=`)
    "notifications": Own("/notifications", "/u/{user}/notifications", "notifications",
                         replace(JSON, name="notifications", read_listing=parse_notifications), topics=False,
                         offset=NOTIFICATIONS_PAGE),
    # core: app/controllers/users_controller.rb#bookmarks (BOOKMARKS_LIMIT 20 a page, `page=`)
    "bookmarks": Own("/u/{user}/bookmarks", "/u/{user}/activity/bookmarks", "bookmarks",
                     replace(JSON, name="bookmarks", read_listing=parse_bookmarks), topics=False),
    # core: app/controllers/list_controller.rb#private_messages, a topic list of private_message topics
    "messages": Own("/topics/private-messages/{user}", "/u/{user}/messages", "messages",
                    replace(JSON, name="messages",
                            read_listing=partial(parse_json_listing, archetype="private_message")), topics=True),
    # core: app/controllers/list_controller.rb, the `unread` and `new` filters (TopicQuery#list_unread, _new)
    "unread": Own("/unread", "/unread", "unread", JSON, topics=True),
    "new": Own("/new", "/new", "new", JSON, topics=True),
}
_OWN = re.compile(rf"(?P<name>{'|'.join(OWN)})\.(?P<fmt>[a-z]{{2,5}})")


def feed_spec(settings: Settings, member: Member, rest: str, args: Mapping[str, Sequence[str]]) -> FeedSpec:
    """The spec of `rest` (after `me/TOKEN/`) read as `member`: one of their own lists (`OWN`), or any public
    feed path, with the parameters it takes, as `parse_feed_request` reads them."""
    forum = member.forum
    found = _OWN.fullmatch(rest)
    if found is None:
        spec = parse_feed_request(settings, f"{forum.key}/{rest}", args)
        if spec.forum != forum:  # `H/me/TOKEN/sub/latest` is forum H/sub's feed, which H's member's key never reads
            raise RouteNotFound(f"no feed of {forum.key} is /{shorten(rest)}: a personal feed is its own forum's")
        return spec
    own, fmt = OWN[found["name"]], found["fmt"]
    refused = ("category", "content") if not own.topics else ("category",) if found["name"] == "messages" else ()
    if given := next((name for name in refused if name in args), None):
        raise RequestError(f"{given}= does not apply to your {own.label}", param=given)
    # The topic lists take what /latest takes; notifications and bookmarks what a post feed takes.
    base = parse_feed_request(settings, f"{forum.key}/{'latest' if own.topics else 'posts'}.{fmt}", args)
    user = quote(member.username, safe="")
    return replace(base, kind="personal", label=f"{own.label} of {member.username}", owner=member.username,
                   list_path=own.path.format(user=user), html_path=own.html.format(user=user),
                   list_params=base.list_params if own.topics else (),
                   content=base.content if own.topics else "excerpt")


def own_pages(spec: FeedSpec) -> tuple[Callable[[int], str], Source]:
    """A personal list's page URLs and how they are read (`feedbridge.feeds.sources.reads`), for a personal feed."""
    own = next(own for own in OWN.values() if own.pattern.fullmatch(spec.list_path))
    if own.offset:
        return (lambda n: JSON.list_url(spec.forum.base_url, spec.list_path,
                                        (("offset", str(n * own.offset)),) if n else ())), own.source
    return partial(JSON.page_url, spec), own.source


def valid_key(key: object) -> str | None:
    """A User API key as core makes them (hex), within the bounds config.py gives every key; else None."""
    if isinstance(key, str) and 16 <= len(key) <= MAX_KEY_CHARS and re.fullmatch(r"[A-Za-z0-9_-]+", key):
        return key
    return None


# --- what a refusal of the member's key means ----------------------------------------------------------------

REVOKED_FOR = 3600
"""Seconds a confirmed revocation answers the member's requests without asking the forum again."""


def gone(forum: Forum) -> Forbidden:
    return Forbidden(f"{forum.key} no longer accepts the key in this feed URL: it was revoked (by you, in your "
                     "preferences' Apps, or by an admin) or it expired unused. Connect again at "
                     f"/{forum.key}/connect for new feed URLs")


def check(control: ControlStore, member: Member) -> None:
    """Before anything is read for `member`: Forbidden when their key is known to be gone."""
    if control.get(keys.revoked(member.forum.base_url)) is not None:
        raise gone(member.forum)


def refusal(gate: Gate, control: ControlStore, member: Member, exc: KeyRefused, *,
            caller: Caller | None) -> Forbidden:
    """What the forum's 401/403 to the member's key means. Core answers a revoked or expired key, a route
    outside the key's scopes and (with `detailed_404`) a page hidden from the member alike, `403
    invalid_access` (lib/auth/default_current_user_provider.rb raises Discourse::InvalidAccess when no active
    key matches, app/models/user_api_key.rb#allow? for a scope), so the key itself is tried on
    `/session/current.json` (session#current, which every `read` key may read): refused there too, the key
    is gone (remembered for `REVOKED_FOR`, so nothing more is sent with it meanwhile); answered, only the
    page is not the member's to read. When that cannot be asked (the member's budget, the forum failing), the
    refusal is told as it is."""
    forum = member.forum
    try:
        fetched = gate.fetch(forum, f"{forum.base_url}/session/current.json", caller=caller)
        owner = parse_current_user(fetched.text)
    except KeyRefused:
        control.set(keys.revoked(forum.base_url), time.time(), REVOKED_FOR)  # a number: Redis shares it
        return gone(forum)
    except (NoForumAnswer, NotAListError):
        return exc
    return Forbidden(f"{forum.key} does not show this to {owner.username}: it is hidden from your account, or "
                     f"outside what your key may read ({exc.message})")
