"""Logging for the service: standard `logging` records on stdout, one request line each, and no line an
outsider can forge.

Request paths, query strings, headers, upstream URLs and upstream messages all reach log messages, and
any of them can carry `\\n` (a `%0a` in a path is decoded before the app sees it). Rather than trust
every call site to escape, one filter on the handlers escapes every control character (C0, DEL, C1 and
the Unicode line separators) in the final message as `\\xNN`, after the arguments are merged. The same
filter writes every `token=` value (a signed feed URL's, `feedbridge.feeds.request.signing`) as `token=…`, a
request line's `payload=` (a member's encrypted key, on its way to `/connect`) as `payload=…`, and
every personal feed's token (`/me/TOKEN/`, `feedbridge.feeds.members.personal`) as `/me/…`, valid or not: a
log is read by more people than the feeds it lists. A
traceback keeps its lines, each escaped and indented with `  | `, so only a record's own first line
starts at the left margin: nothing from outside can pass for a record of its own.

The request line is an INFO record of the `feedbridge.access` logger, written by a plain `StreamHandler`
in the thread that logs it: no thread of logging's own, so a fork (gunicorn's, a test's) never copies one
mid-write, and a worker killed outright loses no line it had logged. Making and writing that record is
the largest share of a cached hit's own work, and a PaaS router logs every request already, so
`FEEDBRIDGE_ACCESS_LOG=off` turns the request lines off and leaves every other record as it is.

`FEEDBRIDGE_LOG_FORMAT=json` writes each record as one JSON object on a line (`JsonFormatter`): its time
(UTC), level, logger, message and process, the request id of the request it was logged for, and the fields
the line carries (`extra={"fields": {...}}`: a request line's method, path, status, ms and cache; an upstream
fetch's url, status and ms), each string escaped and its tokens hidden as the message is. gunicorn's own
lines come out the same way (`feedbridge.web.gunicorn_conf`). The request id is made at the edge for each
request (`RequestIds`), never taken from the client (an `X-Request-ID` it sends is ignored: anyone could
make their lines pass for another's), is current for everything the request runs (a context variable, which
the service's pool copies into the work a request fans out, so its upstream fetches' lines carry it), and
is sent back as `X-Request-Id`, for a reader's report to be found in the log.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import quote, unquote_plus

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger("feedbridge.access")
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_ESCAPES |= {0x2028: "\\u2028", 0x2029: "\\u2029"}
_CONTINUATION = "\n  | "


_TOKEN_VALUE = re.compile(r"(token=)[^&\s#]*", re.IGNORECASE)
HIDDEN = "token=…"
# A personal feed's token (`feedbridge.feeds.members.personal`): the path segment after `/me/`, as long as one is.
_MEMBER_TOKEN = re.compile(r"/me/[A-Za-z0-9_-]{40,}")


def hide_tokens(text: str) -> str:
    return _MEMBER_TOKEN.sub("/me/…", _TOKEN_VALUE.sub(HIDDEN, text))


# payload: a member's encrypted key, on its way to /connect; device_code: what the forum gives it for
_HIDDEN_PARAMETERS = {"token": HIDDEN, "payload": "payload=…", "device_code": "device_code=…"}


def hidden_query(query: str) -> str:
    """A query string with the value of each parameter named `token`, `payload` or `device_code`, however its
    name is encoded, hidden; and the tokens in any other value, decoded (a signed or personal feed's URL pasted
    into the front page's `?url=` box came out whole, each `/` and `=` in it encoded)."""
    return "&".join(_HIDDEN_PARAMETERS.get(unquote_plus(piece.partition("=")[0]).lower()) or _hidden_value(piece)
                    for piece in query.split("&"))


def _hidden_value(piece: str) -> str:
    name, equals, value = piece.partition("=")
    decoded = unquote_plus(value)
    shown = hide_tokens(decoded)
    return piece if shown == decoded else f"{name}{equals}{quote(shown, safe='/:?=&…')}"


def escape_controls(text: str) -> str:
    return text.translate(_ESCAPES)


class EscapeControls(logging.Filter):
    """On each handler (a logger's filters would miss its children's records). Mutates the record, so a
    second handler with the same filter finds it already escaped and leaves it alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.__dict__.get("controls_escaped"):
            return True
        record.msg, record.args = hide_tokens(escape_controls(record.getMessage())), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            lines = map(escape_controls, hide_tokens(record.exc_text).split("\n"))
            record.exc_text = "  | " + _CONTINUATION.join(lines)
        if record.stack_info:
            record.stack_info = "  | " + _CONTINUATION.join(map(escape_controls, record.stack_info.split("\n")))
        record.controls_escaped = True
        return True


REQUEST_ID: ContextVar[str | None] = ContextVar("feedbridge_request_id", default=None)
"""The id of the request being served (`RequestIds`), in its own greenlet or thread and in its pool work."""


class RequestIds:
    """WSGI middleware: a new id for each request, current while the app answers it and sent back with it."""

    def __init__(self, app: WSGIApplication):
        self.app = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        made = secrets.token_hex(8)

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], object]:
            headers.append(("X-Request-Id", made))
            return start_response(status, headers, exc_info)

        token = REQUEST_ID.set(made)
        try:
            return self.app(environ, start)
        finally:
            REQUEST_ID.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module docstring); ASCII, so no byte of it needs a
    particular encoding of stdout."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(), "pid": record.process,
        }
        request_id = REQUEST_ID.get()
        if request_id is not None:
            line["request_id"] = request_id
        for name, value in getattr(record, "fields", {}).items():
            line[name] = hide_tokens(escape_controls(value)) if isinstance(value, str) else value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, separators=(",", ":"))


class _Stdout(logging.StreamHandler[TextIO]):
    """The handler `configure_logging` installs, told apart from a host's own; `fields`: it writes them (JSON),
    so the request line carries them (a text line would only pay for them)."""

    fields = False


def configure_logging(level: str, *, access_log: bool = True, log_format: str = "text") -> None:
    """A stdout handler in `log_format` (`text` or `json`) unless the host (gunicorn, a test runner) installed
    its own, and the escaping filter on every handler of the root logger either way. Request lines follow
    `level` unless `access_log` is off. With `json`, Python's warnings are records too, not lines of their own."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(_Stdout(sys.stdout))
    for handler in root.handlers:
        if isinstance(handler, _Stdout):
            handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(FORMAT))
    _Stdout.fields = log_format == "json"
    logging.captureWarnings(log_format == "json")
    for handler in root.handlers:
        if not any(isinstance(f, EscapeControls) for f in handler.filters):
            handler.addFilter(EscapeControls())
    logging.getLogger("feedbridge").setLevel(level)
    log.setLevel(logging.NOTSET if access_log else logging.WARNING)


def log_request(method: str, path: str, status: int, started: float, cache: str) -> None:
    """The one line per request, from the hit path and from Flask alike; `path` includes the query."""
    if not log.isEnabledFor(logging.INFO):
        return
    if "?" in path:
        path, _, query = path.partition("?")
        path += "?" + hidden_query(query)
    ms = (time.perf_counter() - started) * 1000
    extra = None
    if _Stdout.fields:
        extra = {"fields": {"method": method, "path": path, "status": status, "ms": round(ms, 1), "cache": cache}}
    log.info("%s %s %d %.1fms cache=%s", method, path, status, ms, cache, extra=extra)
