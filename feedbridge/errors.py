"""Every error feedbridge raises on purpose, in one hierarchy, each carrying the HTTP status it means.

    FeedbridgeError                 status  reason        raised when
    ├── ConfigError                   500                 a setting (environment or TOML) is missing or malformed
    ├── RequestError                  400                 a request cannot name a feed: a bad parameter
    │   ├── RouteNotFound             404                 no such forum, route or format
    │   └── Forbidden                 403                 a feed URL's token does not sign it (feeds/signing.py)
    ├── UnreadableError               502                 text that is not what it claims (parsers: pure, no I/O)
    │   ├── NotAListError                                 not a topic list
    │   └── NotATopicError                                not a topic page
    └── UpstreamError                 502   (the raiser's) the forum did not give a usable answer
        ├── UpstreamNotFound          404   not_found     the forum answered 404/410
        ├── UpstreamRefused           502   refused       the forum answered 401/403, or a login page for a list
        │   └── NotPublic             403   not_public    ... to the bridge's anonymous request for a list
        ├── UpstreamRateLimited       503   rate_limited  the forum (or our own budget for it) says wait
        │   └── BridgeBusy                  busy          our own budget or cold-request slots say wait
        └── UpstreamTimeout           504   timeout       the forum, or another request for the same thing, was slow

Callers catch the narrowest class they can act on; the web layer has one handler that turns any of
them into `status` and `message`. `retry_after` travels with upstream errors so the reader is told
when to come back. Upstream errors also carry what went wrong as fields, set by whoever raises them:
`reason` (a `Reason`) and `upstream_status` (the forum's HTTP status, when it answered one), so a page
can say it in words without reading the message, which is for people and changes with wrapping. Parse
errors are not upstream errors by themselves (the CLI reads files), and the service says which URL they
came from when it wraps them.
"""

from __future__ import annotations

from enum import StrEnum


class FeedbridgeError(Exception):
    status = 500

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class ConfigError(FeedbridgeError, ValueError):
    """`setting` names the variable or TOML key, so a config file's error can point at its line."""

    def __init__(self, message: str, setting: str | None = None):
        super().__init__(message)
        self.setting = setting


class RequestError(FeedbridgeError):
    status = 400


class RouteNotFound(RequestError):
    status = 404


class Forbidden(RequestError):
    status = 403


class UnreadableError(FeedbridgeError, ValueError):
    status = 502


class NotAListError(UnreadableError):
    """The text is not a Discourse topic list (an HTML login page, JSON, a topic page, binary data)."""


class NotATopicError(UnreadableError):
    """The text is not a Discourse topic page."""


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
    RATE_LIMITED = "rate_limited"
    BUSY = "busy"
    TIMEOUT = "timeout"


class UpstreamError(FeedbridgeError):
    status = 502
    default_reason = Reason.UNUSABLE

    def __init__(self, message: str, retry_after: float | None = None, *, reason: Reason | None = None,
                 upstream_status: int | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        self.reason = reason or self.default_reason
        self.upstream_status = upstream_status


class UpstreamNotFound(UpstreamError):
    status = 404
    default_reason = Reason.NOT_FOUND


class UpstreamRefused(UpstreamError):
    """The forum answered but would not give an anonymous reader the page (401/403, a login page).

    Told apart from other upstream failures because source detection treats it like a 404: the Markdown
    lists may be off or private while the JSON ones are public, and "both refused" is its own message.
    """

    default_reason = Reason.REFUSED


class NotPublic(UpstreamRefused):
    """A list the forum shows only to signed-in users, asked for without a token: the reader's answer is
    403 (the list exists, this URL cannot read it), not a failure of the forum."""

    status = 403
    default_reason = Reason.NOT_PUBLIC


class UpstreamRateLimited(UpstreamError):
    status = 503
    default_reason = Reason.RATE_LIMITED


class BridgeBusy(UpstreamRateLimited):
    """The bridge itself declines to ask the forum now (its per-forum budget, a client's share of it, or its
    slots for requests waiting on upstream are used up). Not a failure of the forum: never remembered as one."""

    default_reason = Reason.BUSY


class UpstreamTimeout(UpstreamError):
    status = 504
    default_reason = Reason.TIMEOUT


_CLASS_OF: dict[Reason, type[UpstreamError]] = {
    cls.default_reason: cls
    for cls in (UpstreamNotFound, UpstreamRefused, NotPublic, UpstreamRateLimited, BridgeBusy, UpstreamTimeout)
}


def upstream_error(reason: Reason, message: str, retry_after: float | None = None,
                   upstream_status: int | None = None) -> UpstreamError:
    """The error a reason is raised as: a failure kept by its reason (a remembered one) comes back whole."""
    return _CLASS_OF.get(reason, UpstreamError)(message, retry_after, reason=reason, upstream_status=upstream_status)
