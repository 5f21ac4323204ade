"""The Flask application: an application factory and one blueprint of feed routes.

The HTTP layer only translates: request → `FeedSpec` → `FeedService` → response with validators.
Conditional GET is Werkzeug's (`make_conditional`), errors are short plain text with a precise status,
and nothing a client sends is echoed back as markup.
"""

from __future__ import annotations

import logging
import sys
import time
from datetime import datetime, timezone
from urllib.parse import urlencode

from flask import Blueprint, Flask, Response, current_app, g, jsonify, request, url_for
from werkzeug.exceptions import HTTPException

from . import __version__, pages
from .backends import make_backends
from .config import Settings
from .fetch import Fetcher, UpstreamError
from .render import MEDIA_TYPES
from .service import FeedService
from .spec import SpecError, parse_feed_request

log = logging.getLogger("feedbridge.web")
bp = Blueprint("feeds", __name__)


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or Settings.from_env()
    _configure_logging(settings.log_level)
    app = Flask(__name__)
    app.config["FEEDBRIDGE_SETTINGS"] = settings
    store, flight = make_backends(settings)
    app.extensions["feedbridge"] = FeedService(settings, store, Fetcher(settings), flight)
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
    try:
        spec = parse_feed_request(svc.settings, path, request.args.to_dict(flat=False))
    except SpecError as exc:
        return (pages.error_page if path.endswith(".html") else error)(exc.status, exc.message)
    if spec.fmt == "html":
        return pages.feed_page(spec, path)
    query = urlencode(spec.canonical_query())
    self_url = request.host_url.rstrip("/") + request.path + (f"?{query}" if query else "")
    try:
        stylesheet = url_for("static", filename="feed.xsl") if spec.fmt in ("atom", "rss") else None
        result = svc.feed(spec, self_url, stylesheet_url=stylesheet)
    except UpstreamError as exc:
        response = error(exc.status, exc.message)
        if exc.retry_after is not None:
            response.headers["Retry-After"] = str(max(int(exc.retry_after + 0.999), 1))
        return response
    g.cache = result.cache
    entry = result.entry
    response = Response(entry.body, content_type=_media_type(spec.fmt))
    response.vary.add("Accept")
    response.set_etag(entry.etag)
    if entry.last_modified is not None:
        response.last_modified = datetime.fromtimestamp(entry.last_modified, timezone.utc)
    # A plain string: Werkzeug's cache_control object parses and re-serialises the header on every change,
    # a measurable share of a cached hit (bench/RESULTS.md, target 1).
    response.headers["Cache-Control"] = f"public, max-age={svc.settings.cache_ttl}"
    response.headers["X-Feedbridge-Cache"] = result.cache
    if result.cache == "stale":
        response.headers["Age"] = str(int(result.age))
        response.headers["X-Feedbridge-Stale"] = _header_safe(
            f"upstream failed ({result.stale_reason}); serving the copy from {int(result.age)}s ago"
        )
    return response.make_conditional(request)


def _media_type(fmt: str) -> str:
    """A browser that asks for a page gets Atom/RSS as `application/xml`: Chromium shows `+xml` feed types
    as plain text and applies the XSL stylesheet only to XML it renders. Readers get the feed type."""
    accept = request.accept_mimetypes
    if fmt in ("atom", "rss") and accept.quality("text/html") > accept.quality(MEDIA_TYPES[fmt].partition(";")[0]):
        return "application/xml; charset=utf-8"
    return MEDIA_TYPES[fmt]


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
