"""The feed routes: `/healthz` and every feed path, in each format, with content negotiation.

The view only translates: request → `FeedSpec` (once per URL served, remembered for the hit path) →
`FeedService` → response with validators. Errors are raised (`feedbridge.errors`) and answered by the
app's one error handler; conditional GET is Werkzeug's (`make_conditional`). A feed the cache does not
answer is built within the client's CPU allowance (`feedbridge.web.allowance`): past it, the last good copy
or `429`. A personal feed (`/HOST/me/TOKEN/...`) is read as its member (`feedbridge.feeds.members.personal`), and the
forum's refusal of their key is told apart from its refusal of the page here.
"""

from __future__ import annotations

import re
import time
from urllib.parse import quote, urlencode

from flask import Blueprint, Response, current_app, g, jsonify, request, url_for

from feedbridge import __version__
from feedbridge.errors import CpuSpent, FeedMoved, KeyRefused, RequestError
from feedbridge.feeds.members import personal
from feedbridge.feeds.request import signing
from feedbridge.feeds.request.spec import parse_feed_request
from feedbridge.feeds.service import FeedResult, FeedService
from feedbridge.render.formats import FORMATS
from feedbridge.store.redis_store import RedisLink
from feedbridge.web import pages
from feedbridge.web.allowance import allowance
from feedbridge.web.context import client, service
from feedbridge.web.hits import LOOKED, Resolved, ResolvedUrls
from feedbridge.web.responses import asks_for_a_page, conditional, feed_headers

bp = Blueprint("feeds", __name__)

# What a Host header may be: a name or address and a port. Anything else would go into the self link and
# the cache key of a feed built for it, so it is refused rather than stored. Checked piece by piece after a
# length cap: one regex over the whole header backtracked exponentially on labels of mixed lengths.
MAX_HOST_CHARS = 260  # a 253-character name, a colon and a 5-digit port
_LABEL = re.compile(r"[A-Za-z0-9-]{1,63}")
_PORT = re.compile(r"[0-9]{1,5}")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]{2,45}")


def valid_host(host: str) -> bool:
    """A host name (labels of letters, digits and hyphens, an optional final dot) or a bracketed IPv6
    address, with an optional port."""
    if len(host) > MAX_HOST_CHARS:
        return False
    if host.startswith("["):
        address, bracket, port = host[1:].partition("]")
        return bool(bracket) and bool(_IPV6.fullmatch(address)) and (
            port == "" or (port[:1] == ":" and bool(_PORT.fullmatch(port[1:]))))
    name, colon, port = host.partition(":")
    if colon and not _PORT.fullmatch(port):
        return False
    labels = name.removesuffix(".").split(".")
    return len(labels) <= 127 and all(_LABEL.fullmatch(label) for label in labels)



@bp.get("/healthz")
def healthz() -> Response:
    """200 while the process serves; what it says is this worker's view, and nothing is asked of a forum for
    it: each forum's last answer to this worker (its HTTP status or why none came, and how long ago; null
    before the first), and whether Redis, when configured, answers a PING now (`RedisLink.health`: `busy` when
    every connection of the worker is in use)."""
    svc = service()
    link: RedisLink | None = current_app.extensions["feedbridge.redis"]
    upstream: dict[str, dict[str, object]] = {}
    for forum in svc.settings.forums:
        answer = svc.fetcher.last.get(forum.key)
        upstream[forum.key] = {"last": answer and answer.status,
                               "seconds_ago": answer and round(time.time() - answer.at, 1)}
    return jsonify(status="ok", version=__version__, forums=list(upstream), topic_fetch_failures=svc.topic_failures,
                   redis="not configured" if link is None else link.health(),
                   upstream=upstream)


ROBOTS = "User-agent: *\nAllow: /$\nDisallow: /\n"
"""The front page may be indexed; nothing else (RFC 9309, whose `$` ends a path). Each feed, filter, view and
preview URL a crawler follows from the pages is a cold read of a forum, spent from the budget the readers
need; feed readers fetch the feeds they are given without asking robots.txt."""


@bp.get("/robots.txt")
def robots() -> Response:
    return Response(ROBOTS, content_type="text/plain; charset=utf-8",
                    headers={"Cache-Control": "public, max-age=86400"})


@bp.get("/favicon.ico")
def favicon() -> Response:
    """The pages' icon, for the clients that ask a host's `/favicon.ico` rather than read the page's link to it
    (some feed readers do, for the bridge's host): each was a 404 and a log line."""
    return Response(status=301, headers={"Location": url_for("static", filename="icon.svg"),
                                         "Cache-Control": "public, max-age=86400"})


@bp.get("/<path:path>")
def feed(path: str) -> Response:
    """The feed or its page; the URL's resolution is remembered for the next request (and the hit path) once
    it was served: an error (400, 404, 429, 503, ...) is raised past the `remember` and leaves nothing behind."""
    svc = service()
    urls: ResolvedUrls = current_app.extensions["feedbridge.resolved"]
    known = urls.get(request.environ)
    try:
        resolved = known or _resolved(svc, path)
    except FeedMoved as moved:
        return _moved(svc, path, moved)
    g.feed = resolved.spec  # what the request's metrics count it as, answered or not (`web.app._log_request`)
    response = _answer(svc, resolved, path)
    if known is None:
        urls.remember(request.environ, resolved)
    return response


def _answer(svc: FeedService, resolved: Resolved, path: str) -> Response:
    """A member's feed is read as the member (`feeds.members.personal`), anyone else's in the scope its URL names:
    the service in that scope is made once here (a member's, a few objects of its own) and read by the rest."""
    scope = resolved.scope(svc)
    if resolved.member is None:
        return _feed(scope, resolved, path)
    members = scope.current  # everything read for a member's feed is read as them
    personal.check(members.control, resolved.member)
    try:
        return _feed(scope, resolved, path)
    except KeyRefused as exc:
        raise personal.refusal(members.gate, members.control, resolved.member, exc,
                               caller=scope.caller) from None


def _feed(scope: FeedService, resolved: Resolved, path: str) -> Response:
    spec = resolved.spec
    if spec.fmt == "html":
        return pages.feed_page(scope, resolved, path)
    stale_why = "upstream failed"
    try:  # a hit (a conditional one, or one for a browser) is never charged: the allowance is entered past it
        result = scope.feed(spec, resolved.withheld(resolved.self_url), resolved.stylesheet_url, key=resolved.key,
                            admitted=lambda: allowance().spending(client(), resolved.key),
                            looked=request.environ.get(LOOKED))
    except CpuSpent as spent:
        held = scope.held(resolved.key)
        if held is None:
            raise
        result, stale_why = FeedResult(held, "stale", spent.message), "not rebuilt"
    g.cache = result.cache
    media_type = _media_type(spec.fmt)
    variant = "" if media_type == FORMATS[spec.fmt].media_type else "-xml"
    body, gzipped = resolved.answer(result.entry, request.headers.get("Accept-Encoding"))
    headers = feed_headers(result.entry, media_type, scope.settings.cache_ttl, result.cache,
                           private=resolved.private, variant=variant, gzipped=gzipped,
                           stale=f"{stale_why} ({result.stale_reason})" if result.cache == "stale" else None)
    return conditional(Response(body, headers=headers), request, result.entry.last_modified)


def _moved(svc: FeedService, path: str, moved: FeedMoved) -> Response:
    """301 to the path that gives a moved path's feed (`spec.MOVED`), with the same query, so a feed reader moves
    its subscription. Only once the feed there is one the bridge serves with that query (its checks, its 400s,
    and the parameter the old feed required); a token that signed the old URL is made again for the new one,
    since both sign the same canonical query. The answer echoes nothing as text: the query is in `Location`,
    each value bounded by the checks and percent-encoded again."""
    to = path.removesuffix(moved.path) + moved.to
    resolved = _resolved(svc, to, signed_as=path)
    if not request.args.get(moved.needs, "").strip():
        raise RequestError(f"{moved.needs} is required: {moved.message}", param=moved.needs)
    query = [(name, value) for name, value in request.args.items(multi=True) if name != signing.TOKEN]
    if resolved.signed:  # it verified: the bridge has a secret, the current one or only the one before
        secret = next(s for s in (svc.settings.secret, svc.settings.secret_previous) if s)
        query.append((signing.TOKEN, signing.token(secret, "/" + to, resolved.spec)))
    location = request.script_root + quote("/" + to, safe="/:@") + (f"?{urlencode(query)}" if query else "")
    response = Response(f"301 {moved.message}\n", status=301, content_type="text/plain; charset=utf-8")
    response.headers["Location"] = location
    shared = "private" if resolved.private else "public"
    response.headers["Cache-Control"] = f"{shared}, max-age={svc.settings.cache_ttl}"
    return response


def _resolved(svc: FeedService, path: str, signed_as: str | None = None) -> Resolved:
    """What the URL means: its spec (checked), links, cache key (of the URL as given, token included) and the
    token no kept body may hold (`feedbridge.web.withheld`). `signed_as`: the path a token signs, where the
    request named another (a moved feed's)."""
    args = request.args.to_dict(flat=False)
    given = args.pop(signing.TOKEN, [])
    mine = personal.split(svc.settings, path) if svc.member is not None else None
    member = token = None
    if mine is not None:  # a personal feed: its member, opened from the path's token before anything is read
        forum, token, rest = mine
        if given:  # its path carries the member's token; a signed URL's is no part of it, nor kept in its links
            raise RequestError("token= is a signed public feed's; a personal feed's URL carries its member's token "
                               "in its path, and takes no other", signing.TOKEN)
        member = personal.opened(svc.settings, forum, token)
        spec, signed, given = personal.feed_spec(svc.settings, member, rest, args), False, []
    else:
        spec = parse_feed_request(svc.settings, path, args)
        signed = signing.verified(svc.settings, "/" + (signed_as or path), spec, given)
        token = given[0] if signed else None
    query = urlencode(spec.canonical_query() + ([(signing.TOKEN, given[0])] if signed else []))
    self_url = request.host_url.rstrip("/") + request.path + (f"?{query}" if query else "")
    stylesheet = url_for("static", filename="feed.xsl") if spec.fmt in ("atom", "rss") else None
    return Resolved(spec, self_url, stylesheet, svc.feed_key(spec, self_url, stylesheet), signed, member, token)


def _media_type(fmt: str) -> str:
    """A browser that asks for a page gets Atom/RSS as `application/xml`: Chromium shows `+xml` feed types
    as plain text and applies the XSL stylesheet only to XML it renders. Readers get the feed type. The
    browser's answer has an ETag of its own (`feed_headers`' `variant`), and the hit path, which serves only
    the feed type, leaves browsers to this view."""
    if fmt not in ("atom", "rss") or not asks_for_a_page(request.headers.get("Accept", "")):
        return FORMATS[fmt].media_type
    accept = request.accept_mimetypes
    if accept.quality("text/html") > accept.quality(FORMATS[fmt].mime):
        return "application/xml; charset=utf-8"
    return FORMATS[fmt].media_type


