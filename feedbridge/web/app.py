"""The Flask application: an application factory and one blueprint of feed routes.

The HTTP layer only translates: request → `FeedSpec` → `FeedService` → response with validators.
Conditional GET is Werkzeug's (`make_conditional`), errors are short plain text with a precise status,
and nothing a client sends is echoed back as markup.
"""

from __future__ import annotations

import logging
import sys
import time
from email.utils import formatdate
from urllib.parse import urlencode

from flask import Blueprint, Flask, Response, current_app, g, jsonify, request, url_for
from werkzeug.exceptions import HTTPException

from feedbridge import __version__
from feedbridge.config import Settings
from feedbridge.errors import RequestError, UpstreamError
from feedbridge.feeds.service import FeedService
from feedbridge.feeds.spec import parse_feed_request
from feedbridge.render.formats import FORMATS
from feedbridge.store.backends import make_backends
from feedbridge.upstream.fetcher import Fetcher
from feedbridge.web import pages
from feedbridge.web.callers import caller
from feedbridge.web.hits import HitPath, Resolved, ResolvedUrls

log = logging.getLogger("feedbridge.web.app")
bp = Blueprint("feeds", __name__)


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or Settings.from_env()
    _configure_logging(settings.log_level)
    app = Flask(__name__)
    app.config["FEEDBRIDGE_SETTINGS"] = settings
    store, flight = make_backends(settings)
    app.extensions["feedbridge"] = FeedService(settings, store, Fetcher(settings), flight)
    app.extensions["feedbridge.resolved"] = urls = ResolvedUrls()
    app.wsgi_app = HitPath(app.wsgi_app, app.extensions["feedbridge"], urls)  # type: ignore[method-assign]
    app.register_blueprint(pages.bp)
    app.register_blueprint(bp)
    app.before_request(_start_timer)
    app.after_request(_log_request)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)
    return app


def service() -> FeedService:
    return current_app.extensions["feedbridge"]


@bp.get("/healthz")
def healthz() -> Response:
    svc = service()
    return jsonify(status="ok", version=__version__, forums=[f.key for f in svc.settings.forums],
                   topic_fetch_failures=svc.topic_failures)


@bp.get("/<path:path>")
def feed(path: str) -> Response:
    svc = service()
    resolved = _resolved(svc, path)
    if isinstance(resolved, Response):
        return resolved
    spec = resolved.spec
    if spec.fmt == "html":
        return pages.feed_page(spec, path)
    try:
        result = svc.feed(spec, resolved.self_url, resolved.stylesheet_url, key=resolved.key, caller=caller())
    except UpstreamError as exc:
        response = error(exc.status, exc.message)
        if exc.retry_after is not None:
            response.headers["Retry-After"] = str(max(int(exc.retry_after + 0.999), 1))
        return response
    g.cache = result.cache
    entry = result.entry
    # Headers as plain strings: Werkzeug's header objects parse and re-serialise on every change, a
    # measurable share of a cached hit (bench/RESULTS.md, target 1).
    headers = {
        "Content-Type": _media_type(spec.fmt),
        "Vary": "Accept",
        "ETag": f'"{entry.etag}"',
        "Cache-Control": f"public, max-age={svc.settings.cache_ttl}",
        "X-Feedbridge-Cache": result.cache,
    }
    if entry.last_modified is not None:
        headers["Last-Modified"] = formatdate(entry.last_modified, usegmt=True)
    if result.cache == "stale":
        headers["Age"] = str(int(result.age))
        headers["X-Feedbridge-Stale"] = _header_safe(
            f"upstream failed ({result.stale_reason}); serving the copy from {int(result.age)}s ago"
        )
    response = Response(entry.body, headers=headers)
    if "If-None-Match" in request.headers or "If-Modified-Since" in request.headers:
        return response.make_conditional(request)
    return response


def _resolved(svc: FeedService, path: str) -> Resolved | Response:
    """The URL resolved once; later requests for it find it here (and the hit path finds it too)."""
    urls: ResolvedUrls = current_app.extensions["feedbridge.resolved"]
    found = urls.get(request.environ)
    if found is not None:
        return found
    try:
        spec = parse_feed_request(svc.settings, path, request.args.to_dict(flat=False))
    except RequestError as exc:
        return (pages.error_page if path.endswith(".html") else error)(exc.status, exc.message)
    query = urlencode(spec.canonical_query())
    self_url = request.host_url.rstrip("/") + request.path + (f"?{query}" if query else "")
    stylesheet = url_for("static", filename="feed.xsl") if spec.fmt in ("atom", "rss") else None
    found = Resolved(spec, self_url, stylesheet, svc.feed_key(spec, self_url, stylesheet))
    urls.remember(request.environ, found)
    return found


def _media_type(fmt: str) -> str:
    """A browser that asks for a page gets Atom/RSS as `application/xml`: Chromium shows `+xml` feed types
    as plain text and applies the XSL stylesheet only to XML it renders. Readers get the feed type."""
    if fmt not in ("atom", "rss") or "text/html" not in request.headers.get("Accept", ""):
        return FORMATS[fmt].media_type
    accept = request.accept_mimetypes
    if accept.quality("text/html") > accept.quality(FORMATS[fmt].mime):
        return "application/xml; charset=utf-8"
    return FORMATS[fmt].media_type


def error(status: int, message: str) -> Response:
    response = Response(f"{status} {message}\n", status=status, content_type="text/plain; charset=utf-8")
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-store"
    return response


def _header_safe(text: str) -> str:
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)[:300]


def _http_error(exc: HTTPException) -> Response:
    return error(exc.code or 500, exc.description or exc.name)


def _unexpected_error(exc: Exception) -> Response:
    log.exception("unexpected error on %s", request.path)
    return error(500, "internal error (logged)")


def _start_timer() -> None:
    g.started = time.perf_counter()


def _log_request(response: Response) -> Response:
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    elapsed = (time.perf_counter() - g.get("started", time.perf_counter())) * 1000
    log.info("%s %s %s %.1fms cache=%s", request.method, request.full_path.rstrip("?"), response.status_code,
             elapsed, g.get("cache", "-"))
    return response


def _configure_logging(level: str) -> None:
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        root.addHandler(handler)
    logging.getLogger("feedbridge").setLevel(level)
