"""The application factory: it only assembles settings, logging, the store, the service, the hit path,
the blueprints (`pages` for what people look at, `feeds` for the feed routes) and one error handler.

Every error a view or the service raises on purpose is a `feedbridge.errors.FeedbridgeError` carrying
its status and message; the handler turns it into the `.html` routes' (and the pages') error page or a
short plain-text answer, with `Retry-After` when the error says when to come back.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx
from flask import Flask, Response, current_app, g, request
from werkzeug import exceptions
from werkzeug.exceptions import HTTPException

from feedbridge import __version__, metrics
from feedbridge.config import Settings
from feedbridge.errors import ConfigError, CpuSpent, FeedbridgeError, NoForumAnswer, RequestError
from feedbridge.feeds.service import build_service
from feedbridge.render.formats import FORMATS
from feedbridge.store.backends import make_backends
from feedbridge.store.memory import MemoryStore
from feedbridge.upstream.fetcher import Fetcher
from feedbridge.web import connect, pages, routes
from feedbridge.web.context import client_addresses, close_scope, open_scope
from feedbridge.web.hits import HitPath, ResolvedUrls
from feedbridge.web.logs import RequestIds, configure_logging, log_request
from feedbridge.web.responses import plain_error, retry_after
from feedbridge.web.routes import valid_host

if TYPE_CHECKING:
    from collections.abc import Iterable

    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, transport: httpx.BaseTransport | None = None) -> Flask:
    """`transport`, when given, is what the fetcher sends requests through instead of the network."""
    settings = settings or Settings.from_env()
    configure_logging(settings.log_level, access_log=settings.access_log, log_format=settings.log_format)
    app = Flask(__name__)
    try:
        backends = make_backends(settings.cache_url, max_bytes=settings.cache_max_bytes,
                                 fresh_for=settings.cache_ttl, fetch_deadline=settings.total_timeout,
                                 connections=settings.redis_connections)
    except ValueError as exc:
        raise ConfigError(f"FEEDBRIDGE_CACHE_URL / REDIS_URL: {exc}", "FEEDBRIDGE_CACHE_URL") from None
    app.extensions["feedbridge"] = service = build_service(settings, backends.store, Fetcher(settings, transport),
                                                           backends.flight, control=backends.control,
                                                           windows=backends.windows)
    app.extensions["feedbridge.resolved"] = urls = ResolvedUrls()
    app.extensions["feedbridge.redis"] = backends.link
    app.wsgi_app = _edge(client_addresses(HitPath(app.wsgi_app, service, urls),  # type: ignore[method-assign,assignment]
                                          settings.trusted_hops), settings, backends.cache)
    app.register_blueprint(pages.bp)
    app.register_blueprint(connect.bp)
    app.register_blueprint(routes.bp)
    app.config["FEEDBRIDGE_CSP"] = content_security_policy(settings)
    app.after_request(_security_headers)
    app.context_processor(_template_globals)
    app.before_request(_start_timer)
    app.before_request(_host_checked)
    app.before_request(_method_known)
    app.before_request(open_scope)
    app.after_request(_log_request)
    app.teardown_request(close_scope)
    app.register_error_handler(Exception, _error)
    return app


def _edge(app: WSGIApplication, settings: Settings, cache: MemoryStore) -> WSGIApplication:
    """The layers in front of everything: the host a request names in its target, `/metrics` (when on) for the
    peers allowed to read it (REMOTE_ADDR is the socket's peer there: no layer outside it changes it), and
    outermost the request id every answer carries and its log lines too (with JSON logs): a scrape's answer had
    none, the one answer without it."""
    app = _target_host(app)
    if settings.metrics:
        metrics.switch_on(cache.held)
        app = metrics.Endpoint(app, settings.metrics_allow)
    if settings.log_format == "json":
        app = RequestIds(app)
    return app


def _target_host(app: WSGIApplication) -> WSGIApplication:
    """A request target in absolute form (`GET http://host/path`) names the host, and the Host header is then
    ignored (RFC 9112 §3.2.2). gunicorn keeps the header in `HTTP_HOST`, which everything reads (the self links,
    the hit path's key), so the target's authority takes its place first: a proxy's request is answered for the
    host it asked for. The target is bounded by gunicorn's request line limit."""
    def targeted(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        target = environ.get("RAW_URI", "")
        if not target.startswith("/") and "://" in target[:8]:
            environ["HTTP_HOST"] = urlsplit(target).netloc
        return app(environ, start_response)

    return targeted


def _error(exc: Exception) -> Response:
    """Ours (status and message), Werkzeug's (404 for no route, 405, ...), or a bug: 500, logged."""
    if isinstance(exc, FeedbridgeError):
        if request.path.endswith(".html") or request.blueprint in ("pages", "connect"):
            response = pages.error_page(exc.status, exc.message)
        else:
            response = plain_error(exc.status, exc.message)
        if isinstance(exc, (NoForumAnswer, CpuSpent)) and exc.retry_after is not None:
            response.headers["Retry-After"] = retry_after(exc.retry_after)
        return response
    if isinstance(exc, HTTPException):
        response = plain_error(exc.code or 500, exc.description or exc.name)
        for name, value in exc.get_headers():  # a 405's `Allow`, a 416's `Content-Range` (RFC 9110 §15.5.6, 17)
            if name.lower() != "content-type":
                response.headers[name] = value
        return response
    log.exception("unexpected error on %s", request.path)
    return plain_error(500, "internal error (logged)")


def _start_timer() -> None:
    g.started = time.perf_counter()


def _host_checked() -> None:
    """Every page, feed and list builds its links from the request's Host, which Werkzeug reads as empty when
    it is malformed: a 400 then, before anything is built (the OPML and the front page answered 200 with
    `http:///…` links, and a preview was kept so). `/healthz` builds none, and answers whatever the Host."""
    if request.endpoint == "feeds.healthz":
        return
    if "HTTP_HOST" not in request.environ and request.environ.get("SERVER_PROTOCOL") == "HTTP/1.1":
        raise RequestError("no Host header, which an HTTP/1.1 request must send (RFC 9112 §3.2)")
    if not valid_host(request.host):
        raise RequestError("malformed Host header: give a host name or address, with an optional port")


KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
"""RFC 9110 §9's methods (and PATCH): one of them not allowed on a route is its 405, with `Allow`."""


def _method_known() -> None:
    """A method the server does not know is 501 (RFC 9110 §9.1, §15.6.2), not the 405 of a known one."""
    if request.method not in KNOWN_METHODS:
        raise exceptions.NotImplemented(f"{request.method[:32]!r} is no method this service knows; it answers GET "
                                        "and HEAD")


def _log_request(response: Response) -> Response:
    started, cache = g.get("started", time.perf_counter()), g.get("cache", "-")
    log_request(request.method, request.full_path.rstrip("?"), response.status_code, started, cache)
    if metrics.on() and request.endpoint == "feeds.feed":
        # the feed the path named, whether it was answered or refused (a 502, a 404 of the forum, a 503)
        spec = g.get("feed")
        kind, fmt = (spec.kind, spec.fmt) if spec is not None else (metrics.UNKNOWN, metrics.UNKNOWN)
        metrics.feed_answered(kind, fmt, response.status_code, cache)
    return response


def content_security_policy(settings: Settings) -> str:
    """Every page's (pages, `.html` views, error pages, a feed's browser view): scripts and styles from this
    origin only. Images also from https (a forum's pictures, which the pages show as its feeds carry them: a
    topic's thumbnail, the forum's icon, from its own origin or a CDN's), and from plain http when a forum is read
    over it: a picture it names without a scheme (`//bucket/…`) takes the forum's (docs/entries.md), and one on
    its bucket was blocked where only the forum's own origin was allowed."""
    plain = any(forum.base_url.startswith("http://") for forum in settings.forums)
    images = " ".join(["'self'", "data:", "https:", *(["http:"] if plain else [])])
    return (f"default-src 'none'; script-src 'self'; style-src 'self'; img-src {images}; connect-src 'self'; "
            "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


def _security_headers(response: Response) -> Response:
    """The CSP and no-referrer on every page a browser shows: HTML, and a feed sent to a browser as
    `application/xml`, which it shows as the page `/static/feed.xsl` makes of it, links and all."""
    if response.mimetype in ("text/html", "application/xml"):
        response.headers.setdefault("Content-Security-Policy", current_app.config["FEEDBRIDGE_CSP"])
        response.headers.setdefault("Referrer-Policy", "no-referrer")
    return response


def _template_globals() -> dict[str, object]:
    return {"media_types": {name: f.mime for name, f in FORMATS.items()}, "version": __version__}
