"""The connect pages: where a forum member gives the bridge a User API key and gets their personal feeds.

    GET  /HOST/connect              what the bridge will read, the forum's approval link (with this browser's
                                    cookie-bound nonce, `feeds/members/handshake.py`), a form for the payload, and the
                                    device flow where the forum offers it
    POST /HOST/connect              the payload the forum showed (`payload=`): the member's feed URLs and OPML
    GET  /HOST/connect?payload=     the same, where the forum sends the member back (an allowed auth_redirect)
    POST /HOST/connect/device       the device flow: a code to type on the forum (core's create_device_request)
    POST /HOST/connect/device/poll  whether the member approved it yet; when they did, as POST /HOST/connect
                                    (only from the browser that asked for the code: its cookie, `bound=`)
    GET  /HOST/me/TOKEN/opml        the member's feeds as OPML, made from the token alone

Every answer that holds a member's token is `no-store` (and, as every page, `no-referrer`). Nothing is kept:
the connect's state is the nonce in the forum's URL and a cookie in the member's browser, deleted by the page
that completes it. Every step after the first needs that cookie: a request without one is refused before any
work (an RSA decryption, a request to the forum), and the decryption is charged to the client's CPU
allowance (`allowance.charged`), as every page that computes without a cache in front is. The form's body is
the one the server reads (`web/worker.py` lets `FORM_BYTES` through
for this path, read whole within its deadline).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from urllib.parse import parse_qs, quote, urlsplit

from flask import Blueprint, Response, render_template, request, url_for

from feedbridge.config import Forum, Settings
from feedbridge.errors import RequestError, RouteNotFound
from feedbridge.feeds.members import handshake, personal
from feedbridge.feeds.service import FeedService
from feedbridge.feeds.sources.reads import Scope
from feedbridge.render.opml import Subscription, opml_document
from feedbridge.web.allowance import charged
from feedbridge.web.context import service
from feedbridge.web.worker import FORM_BYTES

bp = Blueprint("connect", __name__)

_COOKIE = re.compile(r"[A-Za-z0-9_-]{22}")
FEEDS = (*personal.OWN, "latest")
"""What the connected page and the OPML list, in order: the member's own lists, then the latest topics as
they see them (every other public feed path works under /me/TOKEN/ too)."""


@bp.app_context_processor
def _globals() -> dict[str, object]:
    return {"personal_feeds": service().settings.personal}


@cache
def _rsa_key(settings: Settings) -> handshake.RsaKey:
    return handshake.RsaKey.load(settings)


def _members(svc: FeedService, key: str) -> tuple[Forum, Callable[[personal.Member], Scope]]:
    """The forum `key` names and how the members' scope is made for a member, or 404 when the bridge has no
    personal feeds."""
    forum = svc.settings.forum_for_key(key)
    if forum is None:
        raise RouteNotFound(f"unknown forum {key[:80]!r}: this bridge serves "
                            + ", ".join(f.key for f in svc.settings.forums))
    if svc.member is None:
        raise RouteNotFound("this bridge has no personal feeds (FEEDBRIDGE_PERSONAL is off)")
    return forum, svc.member


@bp.get("/<path:key>/connect")
def connect(key: str) -> Response:
    svc = service()
    forum, members = _members(svc, key)
    if "payload" in request.args:  # the forum sent the member back here (an allowed auth_redirect)
        return _completed(svc, forum, members, request.args.getlist("payload"))
    found = handshake.support(svc.public.gate, svc.public.control, forum, caller=svc.caller)
    if found.version < handshake.AUTH_API_VERSION:
        raise RouteNotFound(f"{forum.key} does not give User API keys (its /user-api-key/new answers no "
                            f"Auth-Api-Version {handshake.AUTH_API_VERSION}): personal feeds need them")
    cookie = request.cookies.get(handshake.COOKIE, "")
    if not _COOKIE.fullmatch(cookie):
        cookie = handshake.new_cookie()
    rsa = _rsa_key(svc.settings)
    nonce = handshake.make_nonce(svc.settings, forum, rsa, cookie)
    page = render_template("connect.html", forum=forum, device=found.device, feeds=FEEDS,
                           approve_url=handshake.authorize_url(svc.settings, forum, rsa, nonce,
                                                               _application(svc.settings, forum)),
                           redirect=svc.settings.auth_redirect_for(forum), ttl=svc.settings.connect_ttl)
    response = _private(page)
    response.set_cookie(handshake.COOKIE, cookie, max_age=svc.settings.connect_ttl, path=_cookie_path(forum),
                        secure=request.is_secure, httponly=True, samesite="Lax")
    return response


@bp.post("/<path:key>/connect")
def posted(key: str) -> Response:
    svc = service()
    forum, members = _members(svc, key)
    return _completed(svc, forum, members, _form().get("payload", []))


@bp.post("/<path:key>/connect/device")
def device(key: str) -> Response:
    """Core's device flow (`#create_device_request`): the bridge asks for a code, the member types it on the
    forum, then comes back to `device_poll`. Only where the forum announced it (`Auth-Api-Device-Code`)."""
    svc = service()
    forum, _made = _members(svc, key)
    if not handshake.support(svc.public.gate, svc.public.control, forum, caller=svc.caller).device:
        raise RouteNotFound(f"{forum.key} has no device flow: use the approval link")
    cookie = _browsers(forum)
    rsa = _rsa_key(svc.settings)
    nonce = handshake.make_nonce(svc.settings, forum, rsa, cookie)
    code = handshake.start_device(svc.public.gate, forum, rsa, nonce, _application(svc.settings, forum),
                                  caller=svc.caller)
    assert svc.settings.secret  # personal feeds need one (config.py)
    bound = handshake.device_binding(svc.settings.secret, forum, cookie, code.device_code, code.user_code)
    return _private(render_template("device.html", forum=forum, code=code, ttl=svc.settings.connect_ttl,
                                    poll_url=url_for("connect.device_poll", key=forum.key, user_code=code.user_code,
                                                     device_code=code.device_code, bound=bound)))


@bp.post("/<path:key>/connect/device/poll")
def device_poll(key: str) -> Response:
    svc = service()
    forum, members = _members(svc, key)
    cookie = _browsers(forum)
    device_code = request.args.get("device_code", "")
    if not handshake.DEVICE_CODE.fullmatch(device_code):
        raise RequestError("device_code must be what the connect page gave: 64 hexadecimal digits",
                           param="device_code")
    user_code = request.args.get("user_code", "")
    if not handshake.device_bound(svc.settings, forum, cookie, device_code, user_code, request.args.get("bound", "")):
        raise RequestError(f"this code was not given to this browser: start again from /{forum.key}/connect",
                           param="bound")
    payload = handshake.poll_device(svc.public.gate, forum, device_code, caller=svc.caller)
    if payload is None:  # not approved yet: the same page again, saying so
        activate = f"{forum.base_url}/user-api-key/activate"
        code = handshake.DeviceCode(device_code, user_code, activate, activate)
        return _private(render_template("device.html", forum=forum, code=code, pending=True,
                                        ttl=svc.settings.connect_ttl, poll_url=request.full_path))
    return _completed(svc, forum, members, [payload])


@bp.get("/<path:key>/me/<token>/opml")
def opml(key: str, token: str) -> Response:
    svc = service()
    forum, _made = _members(svc, key)
    member = personal.opened(svc.settings, forum, token)
    feeds = _feed_urls(forum, token)
    subscriptions = [Subscription(f"{forum.key} · {name} of {member.username}", urls["atom"],
                                  forum.base_url + "/u/" + quote(member.username, safe=""))
                     for name, urls in feeds.items()]
    response = Response(opml_document(f"{forum.key} for {member.username} (feedbridge)", subscriptions,
                                      folder=forum.key), content_type="text/x-opml; charset=utf-8")
    response.headers["Content-Disposition"] = 'attachment; filename="feedbridge-personal.opml"'
    response.headers["Cache-Control"] = "no-store"
    return response


def _completed(svc: FeedService, forum: Forum, members: Callable[[personal.Member], Scope],
               given: list[str]) -> Response:
    if len(given) != 1 or not given[0].strip():
        raise RequestError("payload is required, once: paste the text the forum showed after you approved",
                           param="payload")
    cookie = _browsers(forum)
    with charged():
        connected = handshake.complete(svc.settings, lambda member: members(member).gate, forum,
                                       _rsa_key(svc.settings), given[0], cookie, caller=svc.caller)
    feeds = _feed_urls(forum, connected.token)
    page = render_template("connected.html", forum=forum, member=connected.member, feeds=feeds,
                           opml_url=url_for("connect.opml", key=forum.key, token=connected.token, _external=True))
    response = _private(page)
    response.delete_cookie(handshake.COOKIE, path=_cookie_path(forum), secure=request.is_secure, httponly=True,
                           samesite="Lax")
    return response


def _feed_urls(forum: Forum, token: str) -> dict[str, dict[str, str]]:
    """Each feed's URL in every format, under this bridge's address."""
    stem = f"{request.host_url}{forum.key}/{personal.ME}/{token}"
    return {name: {fmt: f"{stem}/{name}.{fmt}" for fmt in ("atom", "rss", "json", "html")} for name in FEEDS}


def _form() -> dict[str, list[str]]:
    """The form's fields: at most `FORM_BYTES`, which the worker read whole within its deadline
    (`web/worker.py`), so nothing here waits on a client."""
    size = request.content_length
    if size is None or size > FORM_BYTES:
        raise RequestError(f"the form must come with a Content-Length of at most {FORM_BYTES} bytes")
    try:
        return parse_qs(request.get_data(cache=False)[:FORM_BYTES].decode("utf-8"), max_num_fields=4)
    except (UnicodeDecodeError, ValueError):
        raise RequestError("the form is not a URL-encoded form of at most 4 fields") from None


def _application(settings: Settings, forum: Forum) -> str:
    """`application_name`: what the member sees on their forum's approval page and in their preferences.
    The bridge's address where the operator configured it (the forum's allowed `auth_redirect`), never the
    request's `Host`: a client names that, and a device code asked for under a made-up one showed the forum's
    members an application of the asker's naming."""
    redirect = settings.auth_redirect_for(forum)
    return f"feedbridge ({urlsplit(redirect).netloc})" if redirect else "feedbridge"


def _browsers(forum: Forum) -> str:
    """This browser's connect cookie (`connect` set it), or 400 when it has none: no connect is under way here."""
    cookie = request.cookies.get(handshake.COOKIE, "")
    if not _COOKIE.fullmatch(cookie):
        raise RequestError(f"this browser has no connect under way: a connect completes once, in the browser that "
                           f"started it (a payload from another browser, or one already completed, does nothing); "
                           f"start from /{forum.key}/connect")
    return cookie


def _cookie_path(forum: Forum) -> str:
    return f"{request.script_root}/{forum.key}/connect"


def _private(page: str) -> Response:
    response = Response(page, content_type="text/html; charset=utf-8")
    response.headers["Cache-Control"] = "no-store"
    return response

