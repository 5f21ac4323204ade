"""Every error feedbridge raises on purpose: those a reader may be answered with in one hierarchy, each
carrying the HTTP status it means, and the few that never reach one below it.

    FeedbridgeError                 status  reason        raised when
    ├── ConfigError                   500                 a setting (environment or TOML) is missing or malformed
    ├── RequestError                  400                 a request cannot name a feed: a bad parameter
    │   ├── FilterError                                   a filter's value (author, tag, category, threshold, limit)
    │   ├── QueryError                                    a keyword query that does not parse (feeds/select/query.py)
    │   ├── FilterQueryError                              a /filter query the bridge will not send
    │   ├── RouteNotFound             404                 no such forum, route or format
    │   │   └── FeedMoved                                 a feed path gone, and where its feed went (301 on the web)
    │   └── Forbidden                 403                 a feed URL's token does not sign it (feeds/request/signing.py)
    │       └── KeyRefused                                a forum refused a member's key (feeds/members/personal.py)
    ├── UnreadableError               502                 text that is not what it claims (parsers: pure, no I/O)
    │   ├── NotAListError                                 not a topic list
    │   │   └── NoBaseURL                                 a list whose URL is relative, read without a base URL
    │   ├── NotATopicError                                not a topic page
    │   └── NotPostsError                                 not the posts document asked for (discourse/posts.py)
    ├── NoForumAnswer                 502   (the raiser's) the forum's answer was not had (a stale copy stands in)
    │   ├── UpstreamError             502   (the raiser's) the forum did not give a usable answer
    │   │   ├── UpstreamNotFound      404   not_found     the forum answered 404/410
    │   │   ├── UpstreamRefused       502   refused       the forum answered 401/403, or a login page for a list
    │   │   │   ├── LoginRequired           login         it sent the bridge to sign in (`/login`, `/session/sso`)
    │   │   │   └── NotPublic         403   not_public    ... to the bridge's anonymous request for a list
    │   │   ├── CrawlerRefused        403   crawler       the forum's crawler policy refuses the bridge's User-Agent
    │   │   ├── BotWall               503   bot_wall      a bot challenge (Cloudflare's "Just a moment...") instead
    │   │   ├── UpstreamRateLimited   503   rate_limited  the forum says wait (429), or a wait it asked for is on
    │   │   └── UpstreamTimeout       504   timeout       the forum, or another request for the same thing, was slow
    │   │       └── DeadlinePassed                        ... past the request's deadline (never remembered)
    │   └── BridgeBusy                503   busy          the bridge did not ask: its own budget or slots say wait
    │       └── RoomSoon                                  ... for now: a build waits for the room (admission/policy.py)
    ├── CpuSpent                      429                 a client spent its CPU allowance (web/allowance.py)
    └── NotHeld                       502                 a cached-only read found no copy (feeds/sources/reads.py)

`UpstreamError` is the forum's doing, and only it is remembered as a failure of the forum (for the negative
TTL; a 429 is kept per forum instead). The bridge's own answers are outside it: a refusal to ask the forum
now (`BridgeBusy`), a refusal of a client (`CpuSpent`), and a state of the cache (`NotHeld`). What a
read falls back on when the forum's answer was not had (the stale copy) is the same whether the forum failed
or the bridge did not ask, so both are `NoForumAnswer`, the one class those fallbacks catch; the other two are
never caught where a forum's failure is, and the few callers that act on them name them.

Outside it, what has no status because the one caller that acts on it (the static build's command, the
Redis store, the sanitiser, the fetcher) catches it first; each keeps the built-in base it is known by:

    BuildConfigError   Exception    a static build's config file is wrong, at `line` (staticsite/plan.py)
    SavedFileError     Exception    a saved list is no regular file, or too large (staticsite/saved.py)
    UnsafeOutput       OSError      an output's folder is a link: not written (staticsite/atomic.py)
    DecodeError        ValueError   stored bytes are not a value this version wrote (store/codec.py)
    HostileMarkup      ValueError   HTML nested too deep, or built past what the pre-scan follows
    UnsafePath         ValueError   a URL path with an encoded slash or backslash: never fetched

Callers catch the narrowest class they can act on; the web layer has one handler that turns any of
them into `status` and `message`. `retry_after` travels with `NoForumAnswer` errors and `CpuSpent` so the reader
is told when to come back. `NoForumAnswer` errors also carry what went wrong as fields, set by whoever raises them:
`reason` (a `Reason`) and `upstream_status` (the forum's HTTP status, when it answered one), so a page
can say it in words without reading the message, which is for people and changes with wrapping. So do
request errors (`param`, the query parameter at fault) and config errors (`setting`, and `detail`, what is
wrong without the setting's name), so a static config's error points at the key's line by them. Parse
errors are not upstream errors by themselves (the CLI reads files), and the service says which URL they
came from when it wraps them.

`explained` is the one place an upstream answer becomes what a reader is told about a feed, so each
meaning (missing or private, members only, a crawler policy, a bot wall, slow down) has one status and one wording on
every route: list feeds, post feeds, user feeds and their `.html` views.
"""

from __future__ import annotations

import re
from enum import StrEnum
from urllib.parse import urlsplit

MAX_MESSAGE_CHARS = 2000
"""The most of a message an error keeps: a message may quote what a forum sent (a JSON key, a page's URL row),
and one quoting a 4.9 MB key was the body of every 502, held by each remembered failure and logged whole (a
worker grew by 383 MB in ten requests). Each quote is cut where it is made; this bounds any that is not."""


class FeedbridgeError(Exception):
    status = 500

    def __init__(self, message: str):
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[:MAX_MESSAGE_CHARS] + "…"
        super().__init__(message)
        self.message = message


class ConfigError(FeedbridgeError, ValueError):
    """`setting` names the variable or TOML key, so a config file's error can point at its line. `detail` is
    the message without the setting's name (`about`), for a caller that names the value its own way: a
    static config's `forum =` key, where FEEDBRIDGE_FORUMS would name a setting the file does not have."""

    def __init__(self, message: str, setting: str | None = None, detail: str | None = None):
        super().__init__(message)
        self.setting = setting
        self.detail = message if detail is None else detail

    @classmethod
    def about(cls, setting: str, detail: str) -> ConfigError:
        """`SETTING: detail`, the shape of most settings' errors, with both parts kept apart."""
        return cls(f"{setting}: {detail}", setting, detail)


class RequestError(FeedbridgeError):
    """`param` names the query parameter at fault, None for the path or the request as a whole."""

    status = 400

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class FilterError(RequestError):
    """A filter value from a feed URL is invalid; the message names the value, for the 400 page."""


class QueryError(RequestError):
    """The query text cannot be parsed; the message says what is wrong, for the feed's 400 page."""


class FilterQueryError(RequestError):
    """A `/filter` query the bridge will not send: too long, too many terms, or a malformed term."""


class RouteNotFound(RequestError):
    status = 404


class FeedMoved(RouteNotFound):
    """A feed path that named a feed once and names none now, because another path gives that feed
    (`feeds.request.spec.MOVED`): the web routes answer it 301 to that path with the same query, so a feed reader
    moves its subscription; anywhere else (a static config, `feedbridge sign`) it is the 404 its message says.
    `path` and `to` are the old and the new end of the request path (`search.atom`, `latest.atom`); `needs`
    is the parameter the old feed required, still a 400 naming it when missing."""

    def __init__(self, message: str, path: str, to: str, needs: str):
        super().__init__(message)
        self.path = path
        self.to = to
        self.needs = needs


class Forbidden(RequestError):
    status = 403


class KeyRefused(Forbidden):
    """The forum answered 401/403 to a member's own key. Not an upstream error, so that no stale copy or
    remembered failure answers for it: the route asks the forum whether the key itself is gone (revoked or
    expired) or only this page is not the member's to read, and says which (`feeds.members.personal.refusal`)."""


class UnreadableError(FeedbridgeError, ValueError):
    status = 502


class NotAListError(UnreadableError):
    """The text is not a Discourse topic list (an HTML login page, JSON, a topic page, binary data)."""


class NoBaseURL(NotAListError):
    """A Markdown list naming itself by a relative URL, read with no base URL to make its links absolute: a
    saved list whose forum has to be named (a static config's `path` and `forum`)."""


class NotATopicError(UnreadableError):
    """The text is not a Discourse topic page."""


class NotPostsError(UnreadableError):
    """The text is not the Discourse posts document that was asked for."""


class Reason(StrEnum):
    """What kept the forum's answer from us. Each class below has its own; the base class's depends on the raiser."""

    ANSWERED = "answered"  # an HTTP status the bridge cannot use (`upstream_status` says which)
    CONNECTION = "connection"  # no connection, or one that broke off mid-answer
    BODY = "body"  # an answer that cannot be read: too large, badly encoded or compressed
    REDIRECT = "redirect"  # a redirect off the forum, without a usable Location, or too many
    OFF_FORUM = "off_forum"  # a URL outside the configured forum, never asked for
    UNUSABLE = "unusable"  # anything else: no copy to fall back on, a failure remembered without its cause
    NOT_FOUND = "not_found"
    REFUSED = "refused"
    NOT_PUBLIC = "not_public"
    LOGIN = "login"
    CRAWLER = "crawler"
    BOT_WALL = "bot_wall"
    RATE_LIMITED = "rate_limited"
    BUSY = "busy"
    TIMEOUT = "timeout"


class NoForumAnswer(FeedbridgeError):
    """The forum's answer was not had, by its doing (`UpstreamError`) or the bridge's (`BridgeBusy`): what a
    read answers with a stale copy, when one is held."""

    status = 502
    default_reason = Reason.UNUSABLE

    def __init__(self, message: str, retry_after: float | None = None, *, reason: Reason | None = None,
                 upstream_status: int | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        self.reason = reason or self.default_reason
        self.upstream_status = upstream_status


class UpstreamError(NoForumAnswer):
    """The forum did not give a usable answer: the failures remembered for the negative TTL (a 429 is kept per
    forum instead, `ForumWaits` in `feeds/admission/gate.py`)."""

    remembered = False
    """A failure answered from memory (`CachePolicy.remembered`), not met now: never remembered again, under a
    feed built on it, or it would be so for its TTL from then, nearly twice its own."""


class UpstreamNotFound(UpstreamError):
    status = 404
    default_reason = Reason.NOT_FOUND


class UpstreamRefused(UpstreamError):
    """The forum answered but would not give an anonymous reader the page (401/403, a login page).

    Told apart from other upstream failures because source detection treats it like a 404: the Markdown
    lists may be off or private while the JSON ones are public, and "both refused" is its own message.
    """

    default_reason = Reason.REFUSED


class LoginRequired(UpstreamRefused):
    """The forum sent the bridge to sign in instead of answering: core's `redirect_to_login`
    (app/controllers/application_controller.rb) sends a non-JSON GET of a login-required forum to `/login`,
    or, with single sign-on, to `/session/sso` (DiscourseConnect, which goes on to another host) or to
    `/auth/PROVIDER` (the one authenticator). Not a failure of the forum: the same "members only" as a 401/403
    (`explained`), whichever way the forum signs people in."""

    default_reason = Reason.LOGIN


class NotPublic(UpstreamRefused):
    """A list the forum shows only to signed-in users, asked for without a token: the reader's answer is
    403 (the list exists, this URL cannot read it), not a failure of the forum."""

    status = 403
    default_reason = Reason.NOT_PUBLIC


class CrawlerRefused(UpstreamError):
    """The forum's crawler policy refuses the bridge: core's `Middleware::AnonymousCache` answers every
    anonymous GET from a User-Agent `CrawlerDetection.is_blocked_crawler?` names `403 Crawler is not allowed!`
    (lib/middleware/anonymous_cache.rb), once `allowed_crawler_user_agents` is set without `feedbridge` in it,
    or `blocked_crawler_user_agents` names it; core takes any User-Agent that is not a browser's for a
    crawler. 403, not "members only": the lists are public, the forum's admins can allow `feedbridge`, and a
    request with a key passes the check (a signed URL reads the feed). Not a failure of the forum either."""

    status = 403
    default_reason = Reason.CRAWLER


class BotWall(UpstreamError):
    """The forum's bot protection answered instead of the forum: a challenge page only a browser passes.

    503 with Retry-After, not 403 or 502, from what a reader can do: nothing but come back later. It is
    not a refusal of this reader (no token or key reads past it, so no such advice is given), and not a
    broken forum either: challenges are switched on and off by the forum's operators ("under attack"
    modes, bot scores), so the feed may read again soon. Retry-After is when the bridge asks again (the
    failure is remembered for FEEDBRIDGE_NEGATIVE_TTL, per page, as other failures are). Not a 429: the
    forum did not ask for a pause, so nothing stops the bridge's other reads of it.
    """

    status = 503
    default_reason = Reason.BOT_WALL


class UpstreamRateLimited(UpstreamError):
    status = 503
    default_reason = Reason.RATE_LIMITED
    by_address = False
    """Core refused the bridge's address, not one site of it (its per-IP limiters count a whole host)."""


class UpstreamTimeout(UpstreamError):
    status = 504
    default_reason = Reason.TIMEOUT


class DeadlinePassed(UpstreamTimeout):
    """The request's own deadline cut short a fetch it waited on (`Gate.fetch`): a 504 as a slow forum's, for this
    request, but no failure of the forum's, so never remembered: the next request has its whole deadline."""


class BridgeBusy(NoForumAnswer):
    """The bridge itself declines to ask the forum now (its per-forum budget, a client's share of it, or its
    slots for requests waiting on upstream are used up). Not a failure of the forum: never remembered as one,
    and outside `UpstreamError` so that no handler of the forum's failures can take it for one."""

    status = 503
    default_reason = Reason.BUSY


class RoomSoon(BridgeBusy):
    """A window of the budget refused a read of a build under way, and has room again at `until`
    (`time.monotonic()`), within the request's deadline: the build gives its attempt up and is made again
    then (`CachePolicy`), unless its request may not wait, when it is the refusal it says."""

    def __init__(self, message: str, retry_after: float, until: float):
        super().__init__(message, retry_after)
        self.until = until


class CpuSpent(FeedbridgeError):
    """This client has spent its CPU allowance: 429 (its own requests, not the bridge or the forum, are too
    many), with Retry-After when the window has room again."""

    status = 429

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class NotHeld(FeedbridgeError):
    """A read from cached copies only (the forum just failed) found none: what the read failed with is the
    forum's error, which the caller answers with; this one says only that there is nothing to fall back on,
    and is no failure of the forum (a topic page not held keeps its excerpt without counting as one)."""

    status = 502


_CLASS_OF: dict[Reason, type[UpstreamError]] = {
    cls.default_reason: cls
    for cls in (UpstreamNotFound, UpstreamRefused, LoginRequired, NotPublic, CrawlerRefused, BotWall,
                UpstreamRateLimited, UpstreamTimeout)
}


def upstream_error(reason: Reason, message: str, retry_after: float | None = None,
                   upstream_status: int | None = None) -> UpstreamError:
    """The error a reason is raised as: a failure kept by its reason (a remembered one) comes back whole."""
    return _CLASS_OF.get(reason, UpstreamError)(message, retry_after, reason=reason, upstream_status=upstream_status)


def explained(exc: NoForumAnswer, forum: str, label: str, *, keyed: bool, signed: bool,
              missing: str | None = None) -> NoForumAnswer:
    """What the reader of feed `label` of `forum` is told about the forum's answer `exc`: one wording and
    one status per meaning, the forum's own answer kept in parentheses; any other error as it is.

    `missing` is what a 404 means for a list whose route a release may lack (`FeedSpec.missing`: a forum
    without `/filter`): said instead of "missing, or private", to every reader, since no key reads a route
    the forum does not have.

    `keyed`: the bridge holds a key for the forum; `signed`: the request was read with it. Discourse
    answers an anonymous reader 404 for what it may not see (core's default, `detailed_404` off), so a
    404 without the key may be private content, which a signed URL reads when the bridge has a key;
    with the key, 404 is missing (or hidden from the bot account too). 401/403 to the bridge's anonymous
    request, or a redirect to sign in (`LoginRequired`), is members only (403); to the key, a failure of the
    bridge's own configuration (502). A crawler policy that refuses the bridge (`CrawlerRefused`) is 403 too,
    saying who can lift it.
    """
    where = f"{forum} · {label}"
    answer, retry, status = exc.message, exc.retry_after, exc.upstream_status
    if isinstance(exc, UpstreamNotFound):
        if missing is not None:
            return UpstreamNotFound(f"{where}: {missing} ({answer})", retry, upstream_status=status)
        if signed:
            return UpstreamNotFound(f"{where}: missing, or hidden from the key it was read with too ({answer})", retry,
                                    upstream_status=status)
        if keyed:
            return UpstreamNotFound(f"{where}: missing, or private ({answer}); if it is private, a signed feed URL "
                                    "reads it (`feedbridge sign`)", retry, upstream_status=status)
        return UpstreamNotFound(f"{where}: missing, or private to the forum's members ({answer})", retry,
                                upstream_status=status)
    if isinstance(exc, CrawlerRefused):
        how = "; a signed feed URL reads it (`feedbridge sign`)" if keyed else ""
        return CrawlerRefused(f"{where}: the forum's crawler policy refuses the bridge ({answer}); its admins can "
                              f"allow it by adding feedbridge to allowed_crawler_user_agents{how}", retry,
                              upstream_status=status)
    if (type(exc) is UpstreamRefused and status in (401, 403)) or isinstance(exc, LoginRequired):
        if signed:
            return UpstreamRefused(f"{where}: refused to the key it was read with ({answer})", retry,
                                   upstream_status=status)
        how = "a signed feed URL reads it (`feedbridge sign`)" if keyed else "this bridge has no key for that forum"
        return NotPublic(f"{where}: shown only to signed-in members ({answer}); {how}", upstream_status=status)
    if isinstance(exc, BotWall):
        return BotWall(f"{where}: the forum's bot protection turned the bridge away ({answer}); try again later",
                       retry, upstream_status=status)
    if type(exc) is UpstreamRateLimited:
        return UpstreamRateLimited(f"{where}: the forum asked the bridge to slow down ({answer})", retry,
                                   upstream_status=status)
    return exc


# --- how an error names a value it was given ------------------------------------------------------------

SHOWN_CHARS = 40


def cut(value: str) -> str:
    """`value` cut to about SHOWN_CHARS characters for an error message: a value thousands of characters
    long (a pasted file, a 5,000-digit number) is named by its start."""
    return value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "…"


def shown(value: str) -> str:
    """`value` quoted and cut short (`cut`), for an error message."""
    return repr(cut(value))


def shown_url(url: str) -> str:
    """`url` for an error message with what may hold a secret left out (`_redacted`), cut short (`shown`)."""
    return shown(_redacted(url))


def _redacted(url: str) -> str:
    """`url` without its user and password (`…@`), query and fragment (`?…`, `#…`); what does not parse
    as a URL is shown only when it is plain (letters, digits, `.`, `-`, `_`, `/`), else as `…`."""
    prefix, colon, rest = url.partition(":")
    if colon and "://" in rest and not rest.startswith("//"):  # a source prefix: json:https://…
        return f"{prefix}:{_redacted(rest)}"
    try:
        parts = urlsplit(url)
    except ValueError:  # a bracket left open
        return f"{prefix}://…" if "://" in url and prefix.isalpha() else "…"
    if not parts.netloc:
        return url if re.fullmatch(r"[\w./-]*", url) else "…"
    return (f"{parts.scheme}://{'…@' if '@' in parts.netloc else ''}{parts.netloc.rpartition('@')[2]}{parts.path}"
            f"{'?…' if parts.query or '?' in url else ''}{'#…' if parts.fragment or '#' in url else ''}")


class SavedFileError(Exception):
    """The file cannot be a saved list: `message` says why, naming the file."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class UnsafeOutput(OSError):
    """A path inside the output folder goes through a link or a file where a folder should be: not written."""


class BuildConfigError(Exception):
    """A static build's config file is wrong; `line` is where, when the text shows it (`FILE:LINE: message`)."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line


class DecodeError(ValueError):
    """Stored bytes are not a value this version wrote."""


class HostileMarkup(ValueError):
    """HTML nested deeper than `render.nesting.MAX_DEPTH`, or built in a way the pre-scan does not follow."""


class UnsafePath(ValueError):
    """A path whose meaning depends on who decodes it (an encoded `/` or `\\`): never fetched."""
