"""The fake forum's members and their User API keys (tests/upstream.py `FakeForum(private=site.answer,
posted=site.posted)`), as core's controllers answer them.

- `HEAD /user-api-key/new` (app/controllers/user_api_keys_controller.rb#new, `request.head?`): 200 with
  `Auth-Api-Version: 4`, and `Auth-Api-Device-Code: true` on the newest release; 404 on a forum without
  User API keys (`keys=False`).
- `GET /user-api-key/new?...` (#new): a member signed in (core's `_t` cookie, `sessions`) gets the approval
  page, whose form posts to `/user-api-key`; anyone else a redirect to `/login`; a missing parameter 400
  (`params.require`), scopes outside `allow_user_api_key_scopes`, a `padding` other than pkcs1/oaep or an
  `auth_redirect` outside `allowed_user_api_auth_redirects` (`UserApiKeyClient.invalid_auth_redirect?`,
  wildcards as WildcardUrlChecker) the generic error page.
- `POST /user-api-key` (#create): the same checks (403 `invalid_access` for scopes or the redirect), then the
  member's earlier keys for the `client_id` destroyed, a key made (32 hex digits, `SecureRandom.hex`), the
  payload `{"key","nonce","push","api"}` checked against the key size
  (`UserApiKey::DeviceAuth::Crypto.validate_payload_size!`, 400) and encrypted (`padding=oaep`, else PKCS#1
  v1.5), base64 with a line break every 60 characters (Ruby's `Base64.encode64`): shown on a page, or sent to
  the `auth_redirect` as `?payload=`. `release="2023"` is a forum from before `padding` and the clients
  table: `padding` is ignored (PKCS#1 v1.5 always) and `user_api_keys.client_id` is unique for every member
  (db/migrate/20160816052836_user_api_client_id_is_unique.rb): a second member's key for a client id
  another member holds fails, 500, as `create!` raising RecordNotUnique does.
- `POST /user-api-key/device.json`, `/user-api-key/device/poll.json` (#create_device_request,
  #poll_device_request, `UserApiKey::DeviceAuth::Poll`): codes, `approve(user_code, username)` for the
  member typing it, and `authorization_pending`, `authorized` (once), `access_denied`, `expired_token`.
- Requests with `User-Api-Key` (lib/auth/default_current_user_provider.rb): an unknown, revoked or expired key
  is `403 invalid_access` on every path; a key without `read` reads only what its scopes allow
  (app/models/user_api_key_scope.rb). With a good key: `/session/current.json` (session#current),
  `/notifications.json` (notifications#index, 60 a page by `offset=`), `/u/NAME/bookmarks.json` (users#bookmarks,
  the member's own only, 403 for another's), `/topics/private-messages/NAME.json` (list#private_messages, own
  only), `/unread.json` and `/new.json` (list#unread, list#new); every other path is tests/fake_private.py's
  forum as the member sees it: a staff member (`alice`) sees the staff category and private topics, anyone
  else what an anonymous visitor sees.

Each member's documents carry their own marker (`marker(name)`), so a feed that shows another member's
notification or message is one substring away. `keyed` lists every (path, username) read with a key.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.fake_private import INVALID_ACCESS, USER_API_KEY, PrivateSite

Answer = tuple[int, bytes, dict[str, str]]
JSON_TYPE = {"Content-Type": "application/json; charset=utf-8"}
HTML_TYPE = {"Content-Type": "text/html; charset=utf-8"}
ALLOWED_SCOPES = ("read", "write", "message_bus", "push", "notifications", "session_info", "one_time_password")
NOTIFICATIONS_PAGE = 60
BOOKMARKS_PAGE = 20
_NOW = datetime(2026, 9, 23, 12, 0, tzinfo=UTC)


def marker(name: str) -> str:
    return f"onlyfor{name}marker"


@dataclass
class Member:
    user_id: int
    username: str
    staff: bool = False


@dataclass
class Key:
    key: str
    username: str
    client_id: str
    scopes: tuple[str, ...]
    revoked: bool = False


@dataclass
class Grant:
    """A device request (core: UserApiKey::DeviceAuth's grant in Redis)."""

    device_code: str
    user_code: str
    params: dict[str, str]
    status: str = "pending"
    payload: str | None = None


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def encode64(data: bytes) -> str:
    """Ruby's `Base64.encode64`: a line break after every 60 characters, and at the end."""
    text = base64.b64encode(data).decode()
    return "".join(text[i : i + 60] + "\n" for i in range(0, len(text), 60))


def wildcard(pattern: str, url: str) -> bool:
    """core: lib/wildcard_url_checker.rb, `*` matching anything within the URL (the scheme is kept)."""
    return re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), url) is not None


@dataclass
class PersonalSite:
    release: str = "newest"  # or "2023": no `padding`, no device flow, client_id unique for every member
    keys_allowed: bool = True
    allowed_redirects: list[str] = field(default_factory=lambda: ["https://api.discourse.org/api/auth_redirect",
                                                                  "discourse://auth_redirect"])
    allowed_scopes: tuple[str, ...] = ALLOWED_SCOPES
    private: PrivateSite = field(default_factory=PrivateSite)
    base: str = "http://127.0.0.1"  # the forum's URL, set once it listens (`attach`)
    members: dict[str, Member] = field(default_factory=lambda: {
        "alice": Member(41, "alice", staff=True), "bob": Member(42, "bob"), "carol": Member(43, "carol")})
    sessions: dict[str, str] = field(default_factory=lambda: {"session-alice": "alice", "session-bob": "bob",
                                                              "session-carol": "carol"})
    notifications: int = 7  # per member (a second page past 60)
    _keys: dict[str, Key] = field(default_factory=dict)
    _grants: dict[str, Grant] = field(default_factory=dict)
    _keyed: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- what tests drive ---------------------------------------------------------------------------------

    def attach(self, url: str) -> None:
        self.base = url

    @property
    def keyed(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._keyed)

    def keys_of(self, username: str) -> list[Key]:
        with self._lock:
            return [k for k in self._keys.values() if k.username == username]

    def revoke(self, username: str) -> None:
        """core: user_api_keys#revoke, or the member's preferences (Apps): `revoked_at` set."""
        with self._lock:
            for key in self._keys.values():
                if key.username == username:
                    key.revoked = True

    def make_key(self, username: str, scopes: tuple[str, ...] = ("read",), client_id: str = "test") -> str:
        """A key as #create makes one, for a test that needs one without the handshake."""
        with self._lock:
            return self._create(username, client_id, scopes).key

    def approve(self, user_code: str, username: str, deny: bool = False) -> None:
        """The member types the code on /user-api-key/activate and approves (or denies): core's
        DeviceAuth::Authorize makes the key and keeps the encrypted payload for the poll."""
        with self._lock:
            grant = next(g for g in self._grants.values() if g.user_code == user_code)
            if deny:
                grant.status = "denied"
                return
            key = self._create(username, grant.params["client_id"], tuple(grant.params["scopes"].split(",")))
            grant.payload = self._payload(key, grant.params)
            grant.status = "authorized"

    # --- GET and HEAD (FakeForum's `private` hook) --------------------------------------------------------

    def answer(self, target: str, headers: Mapping[str, str], public: bytes | None) -> Answer | None:
        path, _, query = target.partition("?")
        if path == "/user-api-key/new":
            return self._new(parse_qs(query), headers)
        if path == "/user-api-key/activate":
            return 200, b"<!DOCTYPE html><title>Activate</title><h1>Enter the code</h1>", HTML_TYPE
        if "user-api-key" not in headers:
            return self.private.answer(target, headers, public)
        with self._lock:
            key = self._keys.get(headers["user-api-key"])
            if key is None or key.revoked or not self.keys_allowed:
                return 403, INVALID_ACCESS.encode(), JSON_TYPE
            self._keyed.append((path, key.username))
        member = self.members[key.username]
        if "read" not in key.scopes and not (path == "/notifications.json" and "notifications" in key.scopes):
            return 403, INVALID_ACCESS.encode(), JSON_TYPE  # core: UserApiKey#allow? finds no scope
        found = self._own(path, parse_qs(query), member)
        if found is not None:
            return found
        # The rest of the forum as the member sees it: the staff side for staff, the public side for others.
        seen = {"user-api-key": USER_API_KEY} if member.staff else {}
        return self.private.answer(target, seen, public)

    def _new(self, params: dict[str, list[str]], headers: Mapping[str, str]) -> Answer:
        if not self.keys_allowed:
            return 404, b"404 Not Found\n", {"Content-Type": "text/plain; charset=utf-8"}
        if not params:  # a HEAD (or a bare GET): core answers the version before it reads anything
            extra = {"Auth-Api-Device-Code": "true"} if self.release == "newest" else {}
            return 200, b"", {"Auth-Api-Version": "4", **extra, **HTML_TYPE}
        flat = {name: values[0] for name, values in params.items()}
        missing = [p for p in ("nonce", "scopes", "client_id", "public_key", "application_name") if p not in flat]
        if missing:
            return 400, json.dumps({"errors": [f"param is missing or the value is empty: {missing[0]}"]}).encode(), \
                JSON_TYPE
        user = self._user(headers)
        if user is None:
            return 302, b"", {"Location": f"{self.base}/login"}
        if self._invalid(flat) is not None:
            return 200, b"<!DOCTYPE html><title>Error</title><p>Something went wrong.</p>", HTML_TYPE
        hidden = "".join(f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">' for k, v in flat.items())
        page = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>Authorize</title></head><body>'
                f'<h1>{escape(flat["application_name"])} is asking for access to your account</h1>'
                f'<p>Signed in as {escape(user.username)}. It will be able to: read all</p>'
                f'<form method="post" action="/user-api-key">{hidden}'
                f'<button type="submit" id="authorize">Authorize</button></form></body></html>')
        return 200, page.encode(), HTML_TYPE

    def _own(self, path: str, params: dict[str, list[str]], member: Member) -> Answer | None:
        name = quote(member.username, safe="")
        if path == "/session/current.json":
            document: dict[str, Any] = {"current_user": {"id": member.user_id, "username": member.username,
                                                         "name": member.username.title(), "admin": member.staff}}
        elif path == "/notifications.json":
            offset = int(params.get("offset", ["0"])[0])
            document = self._notifications(member, offset)
        elif path.startswith("/u/") and path.endswith("/bookmarks.json"):
            if path != f"/u/{name}/bookmarks.json":  # core: guardian.ensure_can_edit!(user)
                return 403, INVALID_ACCESS.encode(), JSON_TYPE
            document = self._bookmarks(member, int(params.get("page", ["0"])[0]))
        elif path.startswith("/topics/private-messages/"):
            if path != f"/topics/private-messages/{name}.json":  # core: ensure_can_see_private_messages!
                return 403, INVALID_ACCESS.encode(), JSON_TYPE
            document = self._list(member, "message", archetype="private_message")
        elif path in ("/unread.json", "/new.json"):
            document = self._list(member, path[1:-5])
        else:
            return None
        return 200, json.dumps(document, indent=1).encode(), JSON_TYPE

    # --- POST (FakeForum's `posted` hook) -------------------------------------------------------------------

    def posted(self, target: str, headers: Mapping[str, str], body: bytes) -> Answer | None:
        path = target.partition("?")[0]
        if path == "/user-api-key":
            form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            return self._create_answer(form, headers)
        if path == "/user-api-key/device.json" and self.release == "newest":
            return self._device(json.loads(body or b"{}"), headers)
        if path == "/user-api-key/device/poll.json" and self.release == "newest":
            return self._poll(json.loads(body or b"{}").get("device_code", ""))
        return None

    def _create_answer(self, form: dict[str, str], headers: Mapping[str, str]) -> Answer:
        user = self._user(headers)
        if user is None:
            return 403, INVALID_ACCESS.encode(), JSON_TYPE  # core: requires_login
        refused = self._invalid(form)
        if refused is not None:
            return refused
        with self._lock:
            try:
                key = self._create(user.username, form["client_id"], tuple(form["scopes"].split(",")))
            except ValueError:  # the 2023 release's unique index on user_api_keys.client_id
                return 500, b'{"errors":["PG::UniqueViolation"]}', JSON_TYPE
        try:
            payload = self._payload(key, form)
        except OverflowError:
            return 400, b'{"errors":["Payload too large"]}', JSON_TYPE
        if form.get("auth_redirect"):
            parts = urlsplit(form["auth_redirect"])
            query = "&".join(filter(None, (parts.query, "payload=" + quote(payload, safe=""))))
            return 302, b"", {"Location": parts._replace(query=query).geturl()}
        page = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>Key</title></head><body>'
                f'<p>Here is your key for {escape(form.get("application_name", ""))}:</p>'
                f'<pre id="payload">{escape(payload)}</pre></body></html>')
        return 200, page.encode(), HTML_TYPE

    def _device(self, params: dict[str, str], headers: Mapping[str, str]) -> Answer:
        if "json" not in headers.get("content-type", ""):
            return 403, INVALID_ACCESS.encode(), JSON_TYPE  # core: ensure_json_request!
        refused = self._invalid(params)
        if refused is not None:
            return refused
        code = secrets.token_hex(32)
        letters = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
        user_code = "".join(secrets.choice(letters) for _ in range(4)) + "-" + \
            "".join(secrets.choice(letters) for _ in range(4))
        with self._lock:
            self._grants[code] = Grant(code, user_code, dict(params))
        uri = f"{self.base}/user-api-key/activate"
        document = {"device_code": code, "user_code": user_code, "verification_uri": uri,
                    "verification_uri_with_request": f"{uri}?request=abcdEFGH", "expires_in": 600, "interval": 5}
        return 200, json.dumps(document).encode(), JSON_TYPE

    def _poll(self, device_code: str) -> Answer:
        with self._lock:
            grant = self._grants.get(device_code)
            if grant is None:
                status: dict[str, Any] = {"status": "expired_token"}
            elif grant.status == "authorized":
                status = {"status": "authorized", "payload": grant.payload}
                del self._grants[device_code]  # consumed: core's GrantStore.consume_authorized
            else:
                status = {"status": {"pending": "authorization_pending", "denied": "access_denied"}[grant.status]}
        return 200, json.dumps(status).encode(), JSON_TYPE

    # --- core's checks and key making ------------------------------------------------------------------------

    def _user(self, headers: Mapping[str, str]) -> Member | None:
        cookies = dict(part.strip().split("=", 1) for part in headers.get("cookie", "").split(";") if "=" in part)
        name = self.sessions.get(cookies.get("_t", ""))
        return None if name is None else self.members[name]

    def _invalid(self, params: dict[str, str]) -> Answer | None:
        if any(p not in params for p in ("nonce", "scopes", "client_id", "public_key", "application_name")):
            return 400, b'{"errors":["param is missing"]}', JSON_TYPE
        if not set(params["scopes"].split(",")) <= set(self.allowed_scopes):
            return 403, INVALID_ACCESS.encode(), JSON_TYPE
        if self.release == "newest" and params.get("padding") not in (None, "", "pkcs1", "oaep"):
            return 400, b'{"errors":["padding"]}', JSON_TYPE
        if "auth_redirect" in params and not any(wildcard(p, params["auth_redirect"]) for p in self.allowed_redirects):
            return 403, INVALID_ACCESS.encode(), JSON_TYPE
        try:
            key = serialization.load_pem_public_key(params["public_key"].encode())
        except ValueError:
            return 400, b'{"errors":["public_key"]}', JSON_TYPE
        if not isinstance(key, rsa.RSAPublicKey):
            return 400, b'{"errors":["public_key"]}', JSON_TYPE
        return None

    def _create(self, username: str, client_id: str, scopes: tuple[str, ...]) -> Key:
        """Under the lock: the member's keys for the client destroyed, then a new one (core: #create)."""
        for old in [k for k in self._keys.values() if k.client_id == client_id and k.username == username]:
            del self._keys[old.key]
        if self.release == "2023" and any(k.client_id == client_id for k in self._keys.values()):
            raise ValueError("duplicate client_id")
        key = Key(secrets.token_hex(16), username, client_id, scopes)
        self._keys[key.key] = key
        return key

    def _payload(self, key: Key, params: dict[str, str]) -> str:
        public = serialization.load_pem_public_key(params["public_key"].encode())
        assert isinstance(public, rsa.RSAPublicKey)
        oaep = self.release == "newest" and params.get("padding") == "oaep"
        plain = json.dumps({"key": key.key, "nonce": params["nonce"], "push": False, "api": 4},
                           separators=(",", ":")).encode()
        size = public.key_size // 8
        if len(plain) > (size - 42 if oaep else size - 11):
            raise OverflowError("payload too large")
        pad = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None) if oaep \
            else padding.PKCS1v15()
        return encode64(public.encrypt(plain, pad))

    # --- the member's documents -----------------------------------------------------------------------------

    def _notifications(self, member: Member, offset: int) -> dict[str, Any]:
        """core: notifications#index without `recent`: newest first, `load_more_notifications` always."""
        kinds = [(2, "replied"), (1, "mentioned"), (3, "quoted"), (5, "liked"), (6, "private_message"),
                 (12, "granted_badge"), (19, "liked_consolidated")]
        made = []
        for n in range(self.notifications):
            kind, _ = kinds[n % len(kinds)]
            topic = 8000 + n
            data: dict[str, Any] = {"topic_title": f"Topic {n} {marker(member.username)}",
                                    "original_post_id": topic * 10, "original_username": f"poster{n}",
                                    "display_username": f"poster{n}"}
            if kind == 12:
                data = {"badge_id": 3, "badge_name": "Welcome", "badge_slug": "welcome", "username": member.username}
            if kind == 19:
                data = {"display_username": f"poster{n}", "username": f"poster{n}", "count": 3}
            made.append({"id": member.user_id * 1000 + n, "user_id": member.user_id, "notification_type": kind,
                         "read": n % 2 == 0, "high_priority": kind == 6,
                         "created_at": _iso(_NOW - timedelta(hours=n)),
                         "post_number": None if kind in (12, 19) else 2 + n % 3,
                         "topic_id": None if kind in (12, 19) else topic,
                         "fancy_title": None if kind in (12, 19) else data["topic_title"],
                         "slug": None if kind in (12, 19) else f"topic-{n}", "data": data,
                         # NotificationSerializer#acting_user_avatar_template, included where the notification
                         # has an acting user (one named in its data: not a granted badge's)
                         **({} if kind == 12 else
                            {"acting_user_avatar_template": f"/user_avatar/forum/poster{n}/{{size}}/3_2.png",
                             "acting_user_name": f"Poster {n}"})})
        page = made[offset : offset + NOTIFICATIONS_PAGE]
        more = f"/notifications?{urlencode({'username': member.username, 'offset': offset + 60, 'limit': 60})}"
        return {"notifications": page, "total_rows_notifications": len(made), "seen_notification_id": 0,
                "load_more_notifications": more}

    def _bookmarks(self, member: Member, page: int) -> dict[str, Any]:
        if page > 0:
            return {"bookmarks": []}
        marks = [{"id": member.user_id * 100 + n, "created_at": _iso(_NOW - timedelta(days=n)),
                  "updated_at": _iso(_NOW - timedelta(days=n)), "name": "read later" if n == 0 else None,
                  "reminder_at": None, "pinned": False, "title": f"Bookmarked {n} {marker(member.username)}",
                  "fancy_title": f"Bookmarked {n}", "excerpt": f"<p>What was <b>worth</b> keeping &amp; {n}</p>",
                  "bookmarkable_id": 9000 + n, "bookmarkable_type": "Post",
                  "bookmarkable_url": f"{self.base}/t/bookmarked-{n}/{9100 + n}/{1 + n}",
                  "topic_id": 9100 + n, "linked_post_number": 1 + n, "slug": f"bookmarked-{n}",
                  "user": {"id": 7, "username": f"author{n}", "name": f"Author {n}",  # BasicUserSerializer
                           "avatar_template": f"/user_avatar/forum/author{n}/{{size}}/4_2.png"}} for n in range(3)]
        return {"user_bookmark_list": {"bookmarks": marks}}

    def _list(self, member: Member, what: str, archetype: str = "regular") -> dict[str, Any]:
        topics = [{"id": 9500 + n + (100 if what == "new" else 0), "title": f"{what.title()} {n} "
                   f"{marker(member.username)}", "fancy_title": f"{what.title()} {n}", "slug": f"{what}-{n}",
                   "posts_count": 2 + n, "reply_count": n, "created_at": _iso(_NOW - timedelta(days=n, hours=1)),
                   "last_posted_at": _iso(_NOW - timedelta(days=n)), "bumped_at": _iso(_NOW - timedelta(days=n)),
                   "pinned": False, "visible": True, "archetype": archetype, "category_id": None, "tags": [],
                   "like_count": n, "views": 10 * n,
                   "posters": [{"extras": "latest", "description": "Original Poster", "user_id": member.user_id}]}
                  for n in range(3)]
        return {"users": [{"id": member.user_id, "username": member.username}], "primary_groups": [],
                "topic_list": {"can_create_topic": True, "per_page": 30, "topics": topics}}
