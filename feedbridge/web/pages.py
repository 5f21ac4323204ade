"""The pages people look at: the front page that builds a feed, the `.html` view of every feed, and OPML.

Everything here is server-rendered and works without JavaScript (the front page is a GET form);
`static/pages.js` only saves the reloads. A preview goes through `FeedService.entries(spec)` with a spec
from `parse_feed_request`, exactly as the feed itself does, so the page cannot promise entries the feed
will not hold, and every validation message is the service's own. Jinja autoescapes everything that
reaches a template, and links taken from upstream become hrefs only when they are http(s).

An `.html` view and a preview are kept like feeds: the rendered bytes, in the store, fresh for the cache
TTL and kept for the stale TTL, keyed by the spec and all the request gives them (host, script root, the
form's values), so repeating one costs a lookup where it cost a filter and a render of every entry (1–3 s
for a topic of 500 long posts). What the cache does not answer is built within the client's CPU allowance
(`feedbridge.web.allowance`); past it the last good copy, else `429` for a view and a line in place of the
preview.

The front page and the OPML list show a forum's whole directory: with 500 categories each took 4.5–8 ms to
render, per request, uncharged. What they make of the directory (the form's category options, the OPML with
the bridge's URL left to fill in) is made once per directory (`OncePerDirectory`), and both are charged to
the client's allowance as one piece each, preview included: past it, `429`.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar
from urllib.parse import urlencode, urlsplit

from flask import (
    Blueprint,
    Response,
    current_app,
    jsonify,
    render_template,
    request,
    url_for,
)

from feedbridge.config import Forum, Settings
from feedbridge.errors import CpuSpent, NoForumAnswer, Reason, RequestError, RouteNotFound
from feedbridge.feeds.request import signing
from feedbridge.feeds.request.params import reaches_back
from feedbridge.feeds.request.spec import FeedSpec, parse_feed_request
from feedbridge.feeds.service import FeedService
from feedbridge.models import Category, Entry, Site
from feedbridge.render.formats import FEED_FORMATS, FORMATS, gzipped
from feedbridge.render.opml import OpmlFrame, Subscription, opml_frame
from feedbridge.render.turns import take_turn
from feedbridge.store.entries import FeedEntry
from feedbridge.web.allowance import charged
from feedbridge.web.context import service
from feedbridge.web.feedform import KEPT, LISTS, SECTIONS, FeedForm, form_from_path, recognise
from feedbridge.web.hits import Resolved
from feedbridge.web.responses import conditional, entity_tag, retry_after

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


def unavailable(forum: Forum, exc: NoForumAnswer | CpuSpent) -> Unavailable:
    """Say what happened in words, from the error's reason and the status the forum answered."""
    if isinstance(exc, CpuSpent):
        return Unavailable("this browser has used its share of the bridge's time for a moment; the preview "
                           "comes back when it has room again (the feed URL above works meanwhile)", exc.message)
    name, code, back = forum.key, exc.upstream_status, "feeds will appear when it is back"
    match exc.reason:
        case Reason.REFUSED | Reason.LOGIN:
            headline = (f"{name} did not show its topic lists (a login page, 401/403, or something that is not a "
                        "topic list): is it login-only?")
        case Reason.NOT_PUBLIC:
            headline = f"{name} shows this list only to signed-in members: a signed feed URL reads it"
        case Reason.NOT_FOUND:
            headline = (f"{name} has no such page (it answered {code or 404}): check the category, tag or "
                        "user name")
        case Reason.CRAWLER:
            headline = (f"{name} refuses feedbridge by its crawler policy: its admins can allow feedbridge in "
                        "allowed_crawler_user_agents")
        case Reason.BOT_WALL:
            headline = (f"{name} turned feedbridge away with its bot protection (a challenge only a browser "
                        f"passes); {back}")
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
    entries: list[Entry] = field(default_factory=list)
    total: int = 0
    preview_error: Unavailable | None = None
    stale: bool = False  # the preview was read from the last good pages: shown, never kept
    more_pages_url: str | None = None
    site: Site | None = None  # how the forum presents itself (its icon), where it says

    @property
    def discovery(self) -> list[tuple[str, str]]:
        """Autodiscovery links, the chosen format first: readers take the first one they understand."""
        chosen = self.spec.fmt if self.spec else "atom"
        order = sorted(FEED_FORMATS, key=lambda fmt: fmt != chosen)
        return [(fmt, self.alternates[fmt]) for fmt in order if fmt in self.alternates]



@bp.app_template_filter("http_url")
def http_url(url: str | None) -> str | None:
    """The URL when it is http(s), else None: a `javascript:` link from upstream never becomes an href, and
    neither does one urlsplit refuses (a broken IPv6 literal, `https://[x/t/1`), which raised in the template
    and made the page a 500. The parsers emit no such URL (`discourse.fields.web_url`); this holds for any."""
    if not url:
        return None
    try:
        scheme = urlsplit(url.strip()).scheme
    except ValueError:
        return None
    return url if scheme.lower() in ("http", "https") else None


@bp.app_template_global("turn")
def turn() -> str:
    """A turn for other requests between two entries of a page (`feedbridge.render.turns`); prints nothing."""
    take_turn()
    return ""


@bp.app_template_filter("when")
def when(moment: datetime | None) -> str:
    """`YYYY-MM-DD HH:MM UTC`, the year in four digits (`strftime`'s `%Y` writes the year 999 as `999`)."""
    return moment.replace(tzinfo=None).isoformat(" ", "minutes") + " UTC" if moment else "never"


@bp.get("/")
def index() -> Response:
    svc = service()
    with charged():
        form, message = _form_from_request(svc.settings)
        forum = svc.settings.forum_for_key(form.forum) or svc.settings.forums[0]
        form = form.replace(forum=forum.key)
        categories, categories_error = _categories(svc, forum)
        built = build(svc, form)
        html = render_template(
            "index.html", form=form, built=built, message=message, forums=svc.settings.forums, lists=LISTS,
            sections=SECTIONS, kept=KEPT, formats=tuple(FORMATS),
            category_options=_directory_parts().options.of(forum, categories) if categories else None,
            categories_error=categories_error, settings=svc.settings, result=result_html(svc, built),
        )
    return _html(html, no_store=True)


@bp.get("/preview")
def preview() -> Response:
    """The result section of the front page alone, for the script to swap in without a reload. Charged, as
    the front page is: a kept preview still parses its form first, three times a feed hit's CPU, and a client
    refused the front page had 500 of them a minute; a client without room gets the reason in its place."""
    svc = service()
    try:
        with charged():
            form, _ = _form_from_request(svc.settings)
            return _html(result_html(svc, build(svc, form)), no_store=True)
    except CpuSpent as exc:
        refused = _html(render_template("_refused.html", message=exc.message), no_store=True)
        refused.status_code, refused.headers["Retry-After"] = 429, retry_after(exc.retry_after or 1)
        return refused


@bp.get("/recognise")
def recognise_url() -> Response:
    """The paste box, for the script: form values as JSON, or why the URL names no feed (or is not read now:
    charged as the front page is)."""
    svc = service()
    try:
        with charged():
            base, _ = _form_from_request(svc.settings, with_url=False)
            found = recognise(svc.settings, request.args.get("url", ""), base)
            response = jsonify(form=found.form.as_dict() if found.form else None, message=found.message)
    except CpuSpent as exc:
        response = jsonify(form=None, message=exc.message)
        response.status_code, response.headers["Retry-After"] = 429, retry_after(exc.retry_after or 1)
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.get("/<path:key>/opml")
def opml(key: str) -> Response:
    svc = service()
    forum = svc.settings.forum_for_key(key)
    if forum is None:
        raise RouteNotFound(f"unknown forum {key[:80]!r}")
    with charged():
        body = _directory_parts().opml.of(forum, svc.categories(forum)).document(request.host_url.rstrip("/"))
    response = Response(body, content_type=OPML_TYPE)
    filename = "".join(c if c.isalnum() or c in ".-" else "-" for c in forum.key) + ".opml"
    response.headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    response.cache_control.public = True
    response.cache_control.max_age = svc.settings.cache_ttl
    return response


def opml_document(forum: Forum, categories: tuple[Category, ...], bridge_url: str) -> bytes:
    """OPML 2.0: the forum's latest feed, then one Atom feed per category, in a folder named after the forum."""
    return _opml_frame(forum, categories).document(bridge_url)


def _opml_frame(forum: Forum, categories: tuple[Category, ...]) -> OpmlFrame:
    """`opml_document` with the bridge's URL left to fill in."""
    feeds = [(f"{forum.key} · latest", "latest", "/latest")]
    feeds += [(f"{forum.key} · {c.name}", f"c/{c.value}", f"/c/{c.value}") for c in categories]
    subscriptions = [Subscription(title, f"/{forum.key}/{path}.atom", forum.base_url + html_path)
                     for title, path, html_path in feeds]
    return opml_frame(f"{forum.key} categories (feedbridge)", subscriptions, folder=forum.key)


@dataclass(frozen=True, slots=True)
class CategoryOptions:
    """The front page's `<option>` of every category, rendered once (`_category_options.html`): the HTML with
    none chosen, and where each category's option takes ` selected` (just after its value)."""

    html: str
    marks: dict[str, int]

    def __contains__(self, value: object) -> bool:
        return value in self.marks

    def chosen(self, value: str) -> str:
        """The options (autoescaped HTML) with `value`'s chosen, if it is one of them."""
        at = self.marks.get(value)
        return self.html if at is None else f"{self.html[:at]} selected{self.html[at:]}"


def _category_options(_forum: Forum, categories: tuple[Category, ...]) -> CategoryOptions:
    """Rendered with a mark drawn at random where ` selected` may go, which nothing a forum sent can hold; the
    options are cut there and the marks' places kept (the first, for a value two categories share)."""
    mark = secrets.token_hex(16)
    parts = render_template("_category_options.html", categories=categories, mark=mark).split(mark)
    marks: dict[str, int] = {}
    at = 0
    for category, part in zip(categories, parts[:-1], strict=True):
        at += len(part)
        marks.setdefault(category.value, at)
    return CategoryOptions("".join(parts), marks)


T = TypeVar("T")


class OncePerDirectory(Generic[T]):
    """What is made of a forum's directory, made once per directory: kept per forum beside the directory it
    was made of, and made again when the forum's directory is another (read again from the forum). The same
    copy of the cache is the same object; a copy decoded again (from Redis) is compared whole, once."""

    def __init__(self, make: Callable[[Forum, tuple[Category, ...]], T]):
        self._make = make
        self._held: dict[str, tuple[tuple[Category, ...], T]] = {}  # by forum key: configured forums only
        self._lock = threading.Lock()

    def of(self, forum: Forum, categories: tuple[Category, ...]) -> T:
        with self._lock:
            held = self._held.get(forum.key)
        if held is not None and held[0] is categories:
            return held[1]
        made = held[1] if held is not None and held[0] == categories else self._make(forum, categories)
        with self._lock:
            self._held[forum.key] = (categories, made)
        return made


@dataclass(frozen=True)
class _DirectoryParts:
    """What the app's pages make of each forum's directory."""

    options: OncePerDirectory[CategoryOptions]
    opml: OncePerDirectory[OpmlFrame]


def _directory_parts() -> _DirectoryParts:
    """The app's, made on first use."""
    made: _DirectoryParts | None = current_app.extensions.get(_DIRECTORY_PARTS)
    if made is None:
        made = current_app.extensions.setdefault(_DIRECTORY_PARTS, _DirectoryParts(
            OncePerDirectory(_category_options), OncePerDirectory(_opml_frame)))
    return made


_DIRECTORY_PARTS = "feedbridge.directory_parts"


def feed_page(scope: FeedService, resolved: Resolved, path: str) -> Response:
    """The `.html` variant of a feed: the same spec and service path, rendered as a page. A signed one's
    links to its feeds keep the token (it signs every format), and a personal one's its member's: the page is
    kept with a mark in its place and served with it put back (`feedbridge.web.withheld`), and no shared cache
    between the bridge and the reader may keep it. `scope` is the service in the scope the URL reads in.

    The page is kept under the spec's canonical query, so all it shows is made from that query, never from
    how this request spelled it: its link back to the front page's form was made from the raw query, and the
    first reader's `?q=%22GPU%22&author=BOB` was served to everyone asking for `?q=gpu&author=bob`."""
    spec = resolved.spec

    def render(scope: FeedService) -> str:
        token = [resolved.token] if resolved.signed and resolved.token else []  # the signed feed's, verified
        canonical: dict[str, list[str]] = {}
        for name, value in spec.canonical_query():
            canonical.setdefault(name, []).append(value)
        form = form_from_path(path, canonical, scope.settings)
        links = _alternates(spec, path, token)
        built = Built(form, spec, alternates={fmt: resolved.withheld(url) for fmt, url in links.items()})
        # the last good pages rather than an error, while there are any (shown, never kept)
        view = scope.view(spec)
        built.entries, built.total = view.entries, len(view.entries)
        # a member's feed is not one the front page's form makes (nor may its link carry the member's token)
        edit_url = None if resolved.member is not None else url_for("pages.index", **form.args())
        html = render_template("feed.html", built=built, spec=spec, title=spec.feed_title(view.first),
                               edit_url=edit_url, site=view.site)
        if view.stale is not None:
            raise _NotKept(html)
        return html

    try:
        entry = _kept(scope, scope.page_key(spec, "page", resolved.self_url, request.script_root), render,
                      spec.forum.key, packed=not resolved.private)
    except _NotKept as shown:
        entry = _entry(shown.html.encode())
    body, gzipped = resolved.answer(entry, request.headers.get("Accept-Encoding"))  # as a feed's
    response = Response(body, content_type="text/html; charset=utf-8")
    response.vary.add("Accept-Encoding")
    if gzipped:
        response.headers["Content-Encoding"] = "gzip"
    if resolved.private:
        response.cache_control.private = True
    else:
        response.cache_control.public = True
    response.cache_control.max_age = scope.settings.cache_ttl
    response.set_etag(entity_tag(entry, gzipped))  # a reload of an unchanged page is a 304
    return conditional(response, request)


def result_html(svc: FeedService, built: Built) -> str:
    """The front page's result section for `built` (from `build`) with its preview, as HTML rendered by
    `_result.html`: kept from a request for the same form, or read and rendered now (see the module
    docstring)."""
    if built.spec is None:
        return render_template("_result.html", built=built)
    spec = built.spec

    def render(svc: FeedService) -> str:
        preview_of(svc, built)
        html = render_template("_result.html", built=built)
        if built.preview_error is not None or built.stale:  # a reason, or the last good pages: not kept
            raise _NotKept(html)
        return html

    form = urlencode(sorted(built.form.args().items()))
    try:
        entry = _kept(svc, svc.page_key(spec, "preview", f"{request.host_url}?{form}", request.script_root), render,
                      spec.forum.key)
    except _NotKept as answer:
        return answer.html
    except CpuSpent as exc:
        built.preview_error = unavailable(spec.forum, exc)
        return render_template("_result.html", built=built)
    return entry.body.decode()


class _NotKept(Exception):
    """A page rendered that must not be kept (a preview that says why it cannot show the feed), with its HTML."""

    def __init__(self, html: str):
        super().__init__("not kept")
        self.html = html


def _kept(svc: FeedService, key: str, render: Callable[[FeedService], str], forum: str,
          packed: bool = False) -> FeedEntry:
    """The page under `key` (of `forum`), kept by the service as a feed is (`FeedService.kept`), rendered by
    `render(service)` (the service within the page's build: what it reads is read for that build), within
    the client's CPU allowance (`allowance.charged`: once per request). `_NotKept` (a page that must not be kept)
    passes through. `packed`: kept with its gzip (a `.html` view, not a signed one's: `FeedService._render`)."""
    return svc.kept(key, lambda within: _entry(render(within).encode(), packed), charged, forum)


def _entry(body: bytes, packed: bool = False) -> FeedEntry:
    return FeedEntry(body, hashlib.sha256(body).hexdigest()[:32], None, time.time(), gzipped(body) if packed else None)


def error_page(status: int, message: str) -> Response:
    """The app's error handler answers with this for the pages and every `.html` route."""
    response = _html(render_template("error.html", status=status, message=message), no_store=True)
    response.status_code = status
    return response


def build(svc: FeedService, form: FeedForm) -> Built:
    """Validate the form through the feed boundary: the feed it names, or why it names none."""
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
    return built


def preview_of(svc: FeedService, built: Built) -> None:
    """Read into `built` the entries its feed holds now, or why they cannot be read."""
    assert built.spec is not None
    spec = built.spec
    try:
        view = svc.view(spec)
    except NoForumAnswer as exc:
        built.preview_error = unavailable(spec.forum, exc)
        return
    except RequestError as exc:  # what only the reading refuses (a /filter term only a signed-in reader can use,
        # a threshold whose JSON list the forum refuses): the feed URL stands (signed, it may read), the preview
        # says why this one cannot
        built.preview_error = Unavailable(f"the feed answers {exc.status} as it is", exc.message)
        return
    entries, built.stale, built.site = view.entries, view.stale is not None, view.site
    built.total, built.entries = len(entries), entries[:PREVIEW_SIZE]
    pages = spec.pages
    if not entries and pages < svc.settings.pages_max and reaches_back(spec.feed, spec.filter):
        built.more_pages_url = url_for("pages.index", **built.form.replace(pages=str(pages + 1)).args())


def _alternates(spec: FeedSpec, path: str, token: Sequence[str] = ()) -> dict[str, str]:
    query = urlencode(spec.canonical_query() + [(signing.TOKEN, t) for t in token])
    stem = request.host_url + path.rpartition(".")[0]
    return {fmt: f"{stem}.{fmt}" + (f"?{query}" if query else "") for fmt in FORMATS}


def _form_from_request(settings: Settings, with_url: bool = True) -> tuple[FeedForm, str | None]:
    form = FeedForm.from_args(request.args)
    if not form.forum:
        form = form.replace(forum=settings.forums[0].key)
    url = request.args.get("url", "").strip() if with_url else ""
    if not url:
        return form, None
    found = recognise(settings, url, form)
    return found.form or form, found.message


def _categories(svc: FeedService, forum: Forum) -> tuple[tuple[Category, ...], Unavailable | None]:
    try:
        return svc.categories(forum), None
    except NoForumAnswer as exc:
        log.warning("categories directory unavailable: %s", exc.message)
        return (), unavailable(forum, exc)


def _html(body: str, no_store: bool = False) -> Response:
    response = Response(body, content_type="text/html; charset=utf-8")
    if no_store:
        response.headers["Cache-Control"] = "no-store"
    return response

