"""Every error feedbridge raises on purpose, in one hierarchy, each carrying the HTTP status it means.

    FeedbridgeError                 status  raised when
    ├── ConfigError                   500   a setting (environment or TOML) is missing or malformed
    ├── RequestError                  400   a request cannot name a feed: a bad parameter
    │   └── RouteNotFound             404   no such forum, route or format
    ├── UnreadableError               502   text that is not what it claims (parsers: pure, no I/O)
    │   ├── NotAListError                   not a topic list
    │   └── NotATopicError                  not a topic page
    └── UpstreamError                 502   the forum did not give a usable answer
        ├── UpstreamNotFound          404   the forum answered 404/410
        ├── UpstreamRefused           502   the forum answered 401/403, or a login page where a list should be
        ├── UpstreamRateLimited       503   the forum (or our own budget for it) says wait
        │   └── BridgeBusy                  our own budget or cold-request slots say wait (never the forum's fault)
        └── UpstreamTimeout           504   the forum, or another request fetching the same thing, was too slow

Callers catch the narrowest class they can act on; the web layer has one handler that turns any of
them into `status` and `message`. `retry_after` travels with upstream errors so the reader is told
when to come back. Parse errors are not upstream errors by themselves (the CLI reads files), and the
service says which URL they came from when it wraps them.
"""

from __future__ import annotations


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


class UnreadableError(FeedbridgeError, ValueError):
    status = 502


class NotAListError(UnreadableError):
    """The text is not a Discourse topic list (an HTML login page, JSON, a topic page, binary data)."""


class NotATopicError(UnreadableError):
    """The text is not a Discourse topic page."""


class UpstreamError(FeedbridgeError):
    status = 502

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class UpstreamNotFound(UpstreamError):
    status = 404


class UpstreamRefused(UpstreamError):
    """The forum answered but would not give an anonymous reader the page (401/403, a login page).

    Told apart from other upstream failures because source detection treats it like a 404: the Markdown
    lists may be off or private while the JSON ones are public, and "both refused" is its own message.
    """


class UpstreamRateLimited(UpstreamError):
    status = 503


class BridgeBusy(UpstreamRateLimited):
    """The bridge itself declines to ask the forum now (its per-forum budget, a client's share of it, or its
    slots for requests waiting on upstream are used up). Not a failure of the forum: never remembered as one."""


class UpstreamTimeout(UpstreamError):
    status = 504
