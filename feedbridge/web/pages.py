"""The pages people look at: the front page that builds a feed, the `.html` view of every feed, and OPML.

Everything here is server-rendered and works without JavaScript (the front page is a GET form);
`static/pages.js` only saves the reloads. A preview goes through `FeedService.topics(spec)` with a spec
from `parse_feed_request`, exactly as the feed itself does, so the page cannot promise entries the feed
will not hold, and every validation message is the service's own. Jinja autoescapes everything that
reaches a template, and links taken from upstream become hrefs only when they are http(s).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from urllib.parse import urlencode, urlsplit

from flask import (
    Blueprint,
    Response,
    jsonify,
    render_template,
    request,
    url_for,
)

from feedbridge.config import Forum, Settings
from feedbridge.errors import Reason, RequestError, RouteNotFound, UpstreamError
from feedbridge.feeds import signing
from feedbridge.feeds.service import FeedService
from feedbridge.feeds.spec import (
    TOP_PERIODS,
    FeedSpec,
    parse_feed_request,
)
from feedbridge.models import Category, Topic
from feedbridge.render.formats import FEED_FORMATS, FORMATS
from feedbridge.render.opml import Subscription
from feedbridge.render.opml import opml_document as opml_list
from feedbridge.web.context import caller, service
from feedbridge.web.feedform import LISTS, FeedForm, form_from_path, recognise
from feedbridge.web.hits import Resolved

log = logging.getLogger(__name__)
bp = Blueprint("pages", __name__)

PREVIEW_SIZE = 15
# No inline script or style anywhere: everything the pages need is served from /static.
OPML_TYPE = "text/x-opml; charset=utf-8"


@dataclass(frozen=True)
class Unavailable:
    """A forum failure as a person reads it: what it means for them first, the technical reason after."""

    headline: str
    detail: str


def unavailable(forum: Forum, exc: UpstreamError) -> Unavailable:
    """Say what happened in words, from the error's reason and the status the forum answered."""
    name, code, back = forum.key, exc.upstream_status, "feeds will appear when it is back"
    match exc.reason:
        case Reason.REFUSED:
            headline = (f"{name} did not show its topic lists (a login page, 401/403, or something that is not a "
                        "topic list): is it login-only?")
        case Reason.NOT_PUBLIC:
            headline = f"{name} shows this list only to signed-in members: a signed feed URL reads it"
        case Reason.NOT_FOUND:
            headline = (f"{name} has no such page (it answered {code or 404}): check the category, tag or "
                        "user name")
        case Reason.RATE_LIMITED:
            headline = (f"{name} asked feedbridge to slow down (rate limited); feeds will appear when it lets us "
                        "read again")
        case Reason.BUSY:
            headline = f"feedbridge is reading {name} as often as it allows itself right now; try again in a moment"
        case Reason.TIMEOUT:
            headline = f"{name} could not be reached (it did not answer in time); {back}"
        case Reason.CONNECTION:
            headline = f"{name} could not be reached (connection failed); {back}"
        case Reason.REDIRECT | Reason.OFF_FORUM:
            headline = f"{name} sent feedbridge elsewhere (a redirect it does not follow off the forum); {back}"
        case Reason.ANSWERED if code is not None:
            headline = f"{name} is not answering normally (it answered {code}); {back}"
        case _:
            headline = f"{name} sent something that is not a topic list; {back}"
    return Unavailable(headline, exc.message)


@dataclass
class Built:
    """A form's outcome: the feed URL and its preview, or what stops it from naming a feed."""

    form: FeedForm
    spec: FeedSpec | None = None
    feed_url: str = ""
    alternates: dict[str, str] = field(default_factory=dict)  # format -> URL of the same feed
    error: str | None = None
    topics: list[Topic] = field(default_factory=list)
    total: int = 0
    preview_error: Unavailable | None = None
    more_pages_url: str | None = None

    @property
    def discovery(self) -> list[tuple[str, str]]:
        """Autodiscovery links, the chosen format first: readers take the first one they understand."""
        chosen = self.spec.fmt if self.spec else "atom"
        order = sorted(FEED_FORMATS, key=lambda fmt: fmt != chosen)
        return [(fmt, self.alternates[fmt]) for fmt in order if fmt in self.alternates]



@bp.app_template_filter("http_url")
def http_url(url: str | None) -> str | None:
    """The URL when it is http(s), else None: a `javascript:` link from upstream never becomes an href."""
    return url if url and urlsplit(url.strip()).scheme.lower() in ("http", "https") else None


@bp.app_template_filter("when")
def when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "never"


@bp.get("/")
def index() -> Response:
    svc = service()
    form, message = _form_from_request(svc.settings)
    forum = svc.settings.forum_for_key(form.forum) or svc.settings.forums[0]
    form = replace(form, forum=forum.key)
    categories, categories_error = _categories(svc, forum)
    built = build(svc, form, preview=True)
    html = render_template(
        "index.html", form=form, built=built, message=message, forums=svc.settings.forums, lists=LISTS,
        periods=TOP_PERIODS, formats=tuple(FORMATS), categories=categories,
        categories_error=categories_error, pages_max=svc.settings.pages_max,
    )
    return _html(html, no_store=True)


@bp.get("/preview")
def preview() -> Response:
    """The result section of the front page alone, for the script to swap in without a reload."""
    svc = service()
    form, _ = _form_from_request(svc.settings)
    return _html(render_template("_result.html", built=build(svc, form, preview=True)), no_store=True)


@bp.get("/recognise")
def recognise_url() -> Response:
    """The paste box, for the script: form values as JSON, or why the URL names no feed."""
    svc = service()
    base, _ = _form_from_request(svc.settings, with_url=False)
    found = recognise(svc.settings, request.args.get("url", ""), base)
    response = jsonify(form=asdict(found.form) if found.form else None, message=found.message)
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.get("/<path:key>/opml")
def opml(key: str) -> Response:
    svc = service()
    forum = svc.settings.forum_for_key(key)
    if forum is None:
        raise RouteNotFound(f"unknown forum {key[:80]!r}")
    categories = svc.categories(forum, caller())
    body = opml_document(forum, categories, request.host_url.rstrip("/"))
    response = Response(body, content_type=OPML_TYPE)
    filename = "".join(c if c.isalnum() or c in ".-" else "-" for c in forum.key) + ".opml"
    response.headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    response.cache_control.public = True
    response.cache_control.max_age = svc.settings.cache_ttl
    return response


def opml_document(forum: Forum, categories: tuple[Category, ...], bridge_url: str) -> bytes:
    """OPML 2.0: the forum's latest feed, then one Atom feed per category, in a folder named after the forum."""
    feeds = [(f"{forum.key} · latest", "latest", "/latest")]
    feeds += [(f"{forum.key} · {c.name}", f"c/{c.value}", f"/c/{c.value}") for c in categories]
    subscriptions = [Subscription(title, f"{bridge_url}/{forum.key}/{path}.atom", forum.base_url + html_path)
                     for title, path, html_path in feeds]
    return opml_list(f"{forum.key} categories (feedbridge)", subscriptions, folder=forum.key)


def feed_page(resolved: Resolved, path: str) -> Response:
    """The `.html` variant of a feed: the same spec and service path, rendered as a page. A signed one's
    links to its feeds keep the token (it signs every format), and no shared cache may keep it."""
    svc, spec = service(), resolved.spec
    args = request.args.to_dict(flat=False)
    token = args.pop(signing.TOKEN, [])  # only a signed feed's URL gets this far with one
    form = form_from_path(path, args, svc.settings)
    built = Built(form, spec, alternates=_alternates(spec, path, token[:1]))
    # the last good pages rather than an error, while there are any
    topics = svc.scope(resolved.signed).view(spec, caller())
    built.topics, built.total = topics, len(topics)
    html = render_template("feed.html", built=built, spec=spec, edit_url=url_for("pages.index", **form.args()))
    response = _html(html)
    if resolved.signed:
        response.cache_control.private = True
    else:
        response.cache_control.public = True
    response.cache_control.max_age = svc.settings.cache_ttl
    response.add_etag()  # from the bytes, so a reload of an unchanged page is a 304
    response.make_conditional(request)  # turns this response into a 304 in place where the validators match
    return response


def error_page(status: int, message: str) -> Response:
    """The app's error handler answers with this for the pages and every `.html` route."""
    response = _html(render_template("error.html", status=status, message=message), no_store=True)
    response.status_code = status
    return response


def build(svc: FeedService, form: FeedForm, preview: bool) -> Built:
    """Validate the form through the feed boundary and, when wanted, read the entries the feed holds now."""
    if form.missing:
        return Built(form, error=form.missing)
    built = Built(form)
    path, args = form.feed_request()
    try:
        spec = parse_feed_request(svc.settings, path, args)
    except RequestError as exc:
        built.error = exc.message
        return built
    built.spec, built.alternates = spec, _alternates(spec, path)
    built.feed_url = built.alternates[spec.fmt]
    if not preview:
        return built
    try:
        topics = svc.view(spec, caller())
    except UpstreamError as exc:
        built.preview_error = unavailable(spec.forum, exc)
        return built
    built.total, built.topics = len(topics), topics[:PREVIEW_SIZE]
    pages = spec.pages
    if not topics and pages < svc.settings.pages_max:
        built.more_pages_url = url_for("pages.index", **replace(form, pages=str(pages + 1)).args())
    return built


def _alternates(spec: FeedSpec, path: str, token: Sequence[str] = ()) -> dict[str, str]:
    query = urlencode(spec.canonical_query() + [(signing.TOKEN, t) for t in token])
    stem = request.host_url + path.rpartition(".")[0]
    return {fmt: f"{stem}.{fmt}" + (f"?{query}" if query else "") for fmt in FORMATS}


def _form_from_request(settings: Settings, with_url: bool = True) -> tuple[FeedForm, str | None]:
    form = FeedForm.from_args(request.args)
    if not form.forum:
        form = replace(form, forum=settings.forums[0].key)
    url = request.args.get("url", "").strip() if with_url else ""
    if not url:
        return form, None
    found = recognise(settings, url, form)
    return found.form or form, found.message


def _categories(svc: FeedService, forum: Forum) -> tuple[tuple[Category, ...], Unavailable | None]:
    try:
        return svc.categories(forum, caller()), None
    except UpstreamError as exc:
        log.warning("categories directory unavailable: %s", exc.message)
        return (), unavailable(forum, exc)


def _html(body: str, no_store: bool = False) -> Response:
    response = Response(body, content_type="text/html; charset=utf-8")
    if no_store:
        response.headers["Cache-Control"] = "no-store"
    return response

