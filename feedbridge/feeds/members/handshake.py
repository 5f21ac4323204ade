"""Connecting a member's forum account: Discourse's User API key handshake, done without storing anything.

What core does (app/controllers/user_api_keys_controller.rb, AUTH_API_VERSION 4): a client sends the member
to `/user-api-key/new?application_name=&client_id=&scopes=&public_key=&nonce=` (`padding=oaep` on releases
that read it, PKCS#1 v1.5 on those that do not; `auth_redirect` only if the forum's admin allowed it in
`allowed_user_api_auth_redirects`, or `#create` refuses the whole page, `UserApiKeyClient.invalid_auth_redirect?`).
The member approves; `#create` destroys the member's earlier keys for that `client_id`, makes a key with
those scopes, and answers the base64 (`Base64.encode64`, line breaks every 60 characters) of the client's
public key encrypting `{"key", "nonce", "push", "api"}`: on the page, for the member to copy, or sent to the
`auth_redirect` as `?payload=`. `HEAD /user-api-key/new` answers `Auth-Api-Version`, and where the newest
core has the device flow, `Auth-Api-Device-Code: true`: the client `POST`s the same fields to
`/user-api-key/device.json` (`#create_device_request`), the member types the code it got at
`/user-api-key/activate`, and the client polls `/user-api-key/device/poll.json` (`#poll_device_request`) until
it is `authorized` with the payload (`UserApiKey::DeviceAuth::Poll`).

What the bridge sends, and why:

- `scopes=read`: the narrowest that serve (app/models/user_api_key_scope.rb: `read` is every GET; the
  `notifications` scope reads only notifications#index and cannot read `/session/current.json`, which
  names the key's owner; `session_info` reads nothing else).
- `client_id`: one per connect, `feedbridge-` and the nonce's random part. Since 2016
  (db/migrate/20160816052836_user_api_client_id_is_unique.rb) `user_api_keys.client_id` is unique, and until
  user API key clients got a table of their own (CreateUserApiKeyClients, 2024) a second member
  connecting with the client id of a first failed on that index: `#create` destroys only the member's own
  keys for the client. So no two connects share one, and a member's earlier key for the bridge stays
  valid until they revoke it (preferences → Apps) or core expires it unused (`expire_user_api_keys_days`).
- `public_key`: the bridge's RSA key (FEEDBRIDGE_CONNECT_KEY, 2048 bits or more, kept beside the secret).
- `nonce`: `Nonce`, which the bridge verifies without storing it: 31 bytes (42 characters, so that the
  payload fits the RSA key: OAEP on 2048 bits holds 214 bytes, core's own check
  `UserApiKey::DeviceAuth::Crypto.validate_payload_size!`, and core destroys the member's earlier key for
  the client before it checks) carrying when it was made, its random part, a digest of the cookie the
  connect page set in the member's browser, and an HMAC of those, the forum and the RSA key under
  FEEDBRIDGE_SECRET (or the previous secret, while it rotates).

A payload is accepted once it decrypts (OAEP, else PKCS#1 v1.5 for a release that ignored `padding`), holds
a key and a nonce this bridge made for this forum with this RSA key, not older than FEEDBRIDGE_CONNECT_TTL,
and bound to the cookie of the browser that brings it. That is what a replay means without storage: a
payload is worth something only in the browser whose connect page asked for it, within minutes, and
the page that completes a connect deletes that cookie, so the same browser cannot complete it twice; a
payload copied elsewhere (a log of the redirect's `?payload=`, another browser) completes nothing. Then
the key itself names its owner (`/session/current.json`, read with it within the member's own budget), and
the member's feed URLs are sealed (`feedbridge.feeds.members.personal.seal`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import msgspec
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from feedbridge.config import Forum, Settings, parse_credential
from feedbridge.discourse.json_pages import on_forum
from feedbridge.discourse.personal import Owner, parse_current_user
from feedbridge.errors import ConfigError, Forbidden, KeyRefused, NotAListError, RequestError, UpstreamRefused
from feedbridge.feeds.admission.callers import Caller
from feedbridge.feeds.admission.gate import Gate
from feedbridge.feeds.members import personal
from feedbridge.store import keys
from feedbridge.store.control import ControlStore

AUTH_API_VERSION = 4
SCOPES = "read"
APPLICATION = "feedbridge"
COOKIE = "feedbridge_connect"
MIN_RSA_BITS = 2048
MAX_RSA_BITS = 8192
_STAMP, _RANDOM, _BIND, _TAG = 4, 9, 6, 12
NONCE_CHARS = 42  # (4 + 9 + 6 + 12) bytes in unpadded base64url
SKEW = 60
"""Seconds a nonce's time may lie ahead of this instance's clock (another instance made it)."""
SUPPORT_FOR = 3600
"""Seconds what `HEAD /user-api-key/new` said of a forum is trusted."""


@dataclass(frozen=True, slots=True)
class RsaKey:
    """The key pair forums encrypt members' keys to, loaded once (`load`)."""

    private: rsa.RSAPrivateKey
    public_pem: str
    fingerprint: bytes

    @property
    def size(self) -> int:
        return self.private.key_size // 8

    @classmethod
    def load(cls, settings: Settings) -> RsaKey:
        """FEEDBRIDGE_CONNECT_KEY's private key; a ConfigError that never quotes it when it is not one."""
        name = "FEEDBRIDGE_CONNECT_KEY"
        try:
            private = serialization.load_pem_private_key((settings.connect_key or "").encode(), password=None)
        except (ValueError, TypeError):
            raise ConfigError(f"{name} is not an unencrypted RSA private key in PEM (`openssl genrsa 2048`)",
                              name) from None
        if not isinstance(private, rsa.RSAPrivateKey) or not MIN_RSA_BITS <= private.key_size <= MAX_RSA_BITS:
            raise ConfigError(f"{name} must be an RSA key of {MIN_RSA_BITS} to {MAX_RSA_BITS} bits", name)
        public = private.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)
        return cls(private, public.decode(), hashlib.sha256(public).digest()[:8])

    def decrypt(self, payload: str) -> bytes:
        """What a forum encrypted to this key: OAEP (SHA-1, as Ruby's OpenSSL pads), else PKCS#1 v1.5 for a
        release without `padding`; RequestError when it is no such ciphertext."""
        compact = "".join(payload.split())
        if len(compact) > 2 * self.size:
            raise RequestError("the payload is longer than anything a forum encrypts to this bridge's key: paste "
                               "exactly what the forum showed", param="payload")
        try:
            sealed = base64.b64decode(compact, validate=True)
        except (binascii.Error, ValueError):
            raise RequestError("the payload is not base64: paste exactly the text the forum showed",
                               param="payload") from None
        if len(sealed) != self.size:
            raise RequestError("the payload is cut short or is not the forum's answer to this bridge: paste all "
                               "of the text the forum showed", param="payload")
        oaep = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
        for pad in (oaep, padding.PKCS1v15()):
            try:
                return self.private.decrypt(sealed, pad)
            except ValueError:
                continue
        raise RequestError("the payload does not decrypt with this bridge's key: it was made for another "
                           "application, or before this bridge's key changed; connect again", param="payload")


@dataclass(frozen=True, slots=True)
class Nonce:
    """A connect's nonce (see the module docstring), as made and as read back."""

    made_at: int
    random: bytes
    bind: bytes
    text: str

    @property
    def client_id(self) -> str:
        return f"{APPLICATION}-{self.random.hex()}"


def _nonce_key(secret: str) -> bytes:
    return HKDF(hashes.SHA256(), 32, salt=b"feedbridge", info=b"connect nonce v1").derive(secret.encode())


def _tag(secret: str, forum: Forum, key: RsaKey, body: bytes) -> bytes:
    message = forum.key.encode() + b"\0" + key.fingerprint + body
    return hmac.new(_nonce_key(secret), message, hashlib.sha256).digest()[:_TAG]


def _bind(cookie: str) -> bytes:
    return hashlib.sha256(cookie.encode()).digest()[:_BIND]


def new_cookie() -> str:
    return base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


def make_nonce(settings: Settings, forum: Forum, key: RsaKey, cookie: str, now: float | None = None) -> Nonce:
    assert settings.secret
    made = int(time.time() if now is None else now)
    body = struct.pack(">I", made) + os.urandom(_RANDOM) + _bind(cookie)
    raw = body + _tag(settings.secret, forum, key, body)
    return Nonce(made, body[_STAMP : _STAMP + _RANDOM], _bind(cookie),
                 base64.urlsafe_b64encode(raw).decode().rstrip("="))


def check_nonce(settings: Settings, forum: Forum, key: RsaKey, text: object, cookie: str | None) -> Nonce:
    """The nonce of a payload, if this bridge made it for `forum` with `key`, within FEEDBRIDGE_CONNECT_TTL,
    for the browser holding `cookie`; a 4xx saying which of those it is not."""
    again = f"connect again at /{forum.key}/connect"
    foreign = Forbidden(f"the payload's nonce is not one this bridge made for {forum.key} (a payload for another "
                        f"application or forum, or made before this bridge's key or secret changed): {again}")
    if not isinstance(text, str) or len(text) != NONCE_CHARS:
        raise foreign
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise foreign from None
    if base64.urlsafe_b64encode(raw).decode().rstrip("=") != text:  # one spelling of each nonce, as made
        raise foreign
    body, tag = raw[:-_TAG], raw[-_TAG:]
    secrets = [s for s in (settings.secret, settings.secret_previous) if s]
    if not any(hmac.compare_digest(_tag(s, forum, key, body), tag) for s in secrets):
        raise foreign
    (made,) = struct.unpack(">I", body[:_STAMP])
    nonce = Nonce(made, body[_STAMP : _STAMP + _RANDOM], body[_STAMP + _RANDOM :], text)
    age = time.time() - made
    if age > settings.connect_ttl or age < -SKEW:
        raise RequestError(f"this connect expired ({settings.connect_ttl // 60} minutes to approve and bring the "
                           f"payload back): {again}", param="payload")
    if cookie is None or not hmac.compare_digest(_bind(cookie), nonce.bind):
        raise Forbidden("this payload belongs to a connect started in another browser, or one already completed "
                        f"here: {again}")
    return nonce


def authorize_url(settings: Settings, forum: Forum, key: RsaKey, nonce: Nonce, application: str) -> str:
    """The forum's page where the member approves the key (`/user-api-key/new`)."""
    params = [("application_name", application), ("client_id", nonce.client_id), ("scopes", SCOPES),
              ("public_key", key.public_pem), ("nonce", nonce.text), ("padding", "oaep")]
    if redirect := settings.auth_redirect_for(forum):
        params.append(("auth_redirect", redirect))
    return f"{forum.base_url}/user-api-key/new?{urlencode(params)}"


@dataclass(frozen=True, slots=True)
class Support:
    """What `HEAD /user-api-key/new` said: core's `Auth-Api-Version`, and whether it has the device flow."""

    version: int
    device: bool

    def stored(self) -> float:
        """As the control store shares a number (`store/codec.py`): the version, and half for the device flow."""
        return self.version + (0.5 if self.device else 0.0)

    @classmethod
    def read(cls, value: float) -> Support:
        return cls(int(value), value % 1 >= 0.5)


def support(gate: Gate, control: ControlStore, forum: Forum, *, caller: Caller | None) -> Support:
    """Whether `forum` gives User API keys (version 0: it does not), asked once per `SUPPORT_FOR` through the
    public gate (its budget, the forum's waits): an answer without `Auth-Api-Version` is a forum without them
    (not Discourse, or an old one); a failure to ask is the forum's error, never remembered."""
    held = control.get(keys.handshake(forum.base_url))
    if isinstance(held, float | int):
        return Support.read(float(held))
    answer = gate.send(forum, "HEAD", f"{forum.base_url}/user-api-key/new", caller=caller)
    version = answer.headers.get("auth-api-version", "")
    found = Support(int(version) if answer.status == 200 and version.isdigit() and len(version) < 4 else 0,
                    answer.headers.get("auth-api-device-code", "").strip().lower() == "true")
    # a forum that said no is asked again sooner: a maintenance page answers without the header too
    control.set(keys.handshake(forum.base_url), found.stored(), SUPPORT_FOR if found.version else SUPPORT_FOR / 60)
    return found


@dataclass(frozen=True, slots=True)
class Connected:
    """A completed connect: the member, and the token of their feed URLs."""

    member: personal.Member
    token: str


def complete(settings: Settings, members: Callable[[personal.Member], Gate], forum: Forum, key: RsaKey, payload: str,
             cookie: str | None, *, caller: Caller | None) -> Connected:
    """The payload the forum gave back (see the module docstring), checked, its key's owner read with it, and
    sealed into the member's token. Nothing is fetched with a key from a payload that fails a check."""
    plain = key.decrypt(payload)
    try:
        given = msgspec.json.decode(plain)
    except msgspec.DecodeError:
        given = None
    if not isinstance(given, dict):
        raise RequestError("the payload does not decrypt with this bridge's key: it was made for another "
                           "application, or before this bridge's key changed; connect again", param="payload")
    check_nonce(settings, forum, key, given.get("nonce"), cookie)
    api_key = personal.valid_key(given.get("key"))
    if api_key is None:
        raise RequestError("the forum's payload holds no key this bridge can use", param="payload")
    credential = parse_credential(f"user-api-key:{api_key}", forum.key)
    owner = _owner(members, personal.Member(forum, 0, "", credential), caller)
    member = personal.Member(forum, owner.user_id, owner.username, credential)
    return Connected(member, personal.seal(settings, forum, api_key, owner.user_id, owner.username))


def _owner(members: Callable[[personal.Member], Gate], member: personal.Member, caller: Caller | None) -> Owner:
    """Who the key belongs to, read with it, within its own budget (`members(member)`: the members' gate as
    `member` reads)."""
    forum = member.forum
    url = f"{forum.base_url}/session/current.json"
    try:
        fetched = members(member).fetch(forum, url, caller=caller)
    except (KeyRefused, UpstreamRefused):
        raise Forbidden(f"{forum.key} refused the key it has just given (does it allow User API keys with the "
                        "read scope to your account?)") from None
    try:
        return parse_current_user(fetched.text)
    except NotAListError as exc:
        raise UpstreamRefused(f"{forum.key} did not say whose key it gave: {exc}") from None


# --- the device flow (the newest core's, where `HEAD /user-api-key/new` announces it) -----------------------

USER_CODE = re.compile(r"[A-Z0-9]{4}-[A-Z0-9]{4}")
"""What core's device flow shows a member to type: the connect pages check a code carried back against it."""
DEVICE_CODE = re.compile(r"[0-9a-f]{64}")
"""What core's device flow polls with."""


def device_binding(secret: str, forum: Forum, cookie: str, device_code: str, user_code: str) -> str:
    """What ties a device code to the browser that asked for it: the poll URL carries it, and a poll is
    answered only for the browser holding the cookie it was made for (`device_bound`). Without it, anyone
    holding a device code could have a victim's browser post the poll (no cookie needed, from any site),
    be shown the code to approve on a page of this bridge, and complete the connect in their own browser
    with the victim's key."""
    message = b"\0".join((b"device", forum.key.encode(), _bind(cookie), device_code.encode(), user_code.encode()))
    digest = hmac.new(_nonce_key(secret), message, hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def device_bound(settings: Settings, forum: Forum, cookie: str, device_code: str, user_code: str, given: str) -> bool:
    """Whether `given` is the binding this bridge made (with its secret, or the one before) of these codes to
    the browser holding `cookie`."""
    given_bytes = given.encode("utf-8", "surrogatepass")  # bytes: `compare_digest` refuses non-ASCII text (a 500)
    return any(hmac.compare_digest(device_binding(secret, forum, cookie, device_code, user_code).encode(), given_bytes)
               for secret in (settings.secret, settings.secret_previous) if secret)


@dataclass(frozen=True, slots=True)
class DeviceCode:
    """What `/user-api-key/device.json` gave (core: `#create_device_request`): the code the bridge polls with,
    the one the member types at `verification_uri`, and the link that fills it in for them."""

    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_with_request: str


def start_device(gate: Gate, forum: Forum, key: RsaKey, nonce: Nonce, application: str, *,
                 caller: Caller | None) -> DeviceCode:
    """Ask the forum for a device code, with what the approval link carries (no `auth_redirect`: core's
    device flow has none); the request is the bridge's own, through the public gate."""
    body = {"application_name": application, "client_id": nonce.client_id, "scopes": SCOPES,
            "public_key": key.public_pem, "nonce": nonce.text, "padding": "oaep"}
    answer = gate.send(forum, "POST", f"{forum.base_url}/user-api-key/device.json", body, caller=caller)
    found = _json(answer.text) if answer.status == 200 else {}
    code, user_code = found.get("device_code"), found.get("user_code")
    uri = on_forum(found.get("verification_uri"), forum.base_url)
    with_request = on_forum(found.get("verification_uri_with_request"), forum.base_url) or uri
    if not (isinstance(code, str) and DEVICE_CODE.fullmatch(code) and isinstance(user_code, str)
            and USER_CODE.fullmatch(user_code) and uri and with_request):
        raise UpstreamRefused(f"{forum.key} did not start the device flow (it answered {answer.status})",
                              upstream_status=answer.status)
    return DeviceCode(code, user_code, uri, with_request)


def poll_device(gate: Gate, forum: Forum, device_code: str, *, caller: Caller | None) -> str | None:
    """The payload once the member approved (core: `#poll_device_request`, `UserApiKey::DeviceAuth::Poll`),
    None while they have not; a 4xx when they denied it or it expired."""
    answer = gate.send(forum, "POST", f"{forum.base_url}/user-api-key/device/poll.json",
                       {"device_code": device_code}, caller=caller)
    found = _json(answer.text) if answer.status == 200 else {}
    status, payload = found.get("status"), found.get("payload")
    if status == "authorization_pending":
        return None
    if status == "authorized" and isinstance(payload, str):
        return payload
    if status == "access_denied":
        raise Forbidden(f"you denied the bridge a key on {forum.key}; connect again to approve it")
    if status == "expired_token":
        raise RequestError(f"the code expired, or was used already: connect again at /{forum.key}/connect")
    raise UpstreamRefused(f"{forum.key} did not say how the device flow stands (it answered {answer.status})",
                          upstream_status=answer.status)


def _json(text: str) -> dict[str, object]:
    try:
        found = msgspec.json.decode(text[:64 * 1024]) if len(text) <= 64 * 1024 else None
    except msgspec.DecodeError:
        return {}
    return found if isinstance(found, dict) else {}
