"""Logging for the service: standard `logging` records on stdout, one request line each, and no line an
outsider can forge.

Request paths, query strings, headers, upstream URLs and upstream messages all reach log messages, and
any of them can carry `\\n` (a `%0a` in a path is decoded before the app sees it). Rather than trust
every call site to escape, one filter on the handlers escapes every control character (C0, DEL, C1 and
the Unicode line separators) in the final message as `\\xNN`, after the arguments are merged. The same
filter writes every `token=` value (a signed feed URL's, `feedbridge.feeds.signing`) as `token=…`, a
request line's `payload=` (a member's encrypted key, on its way to `/connect`) as `payload=…`, and
every personal feed's token (`/me/TOKEN/`, `feedbridge.feeds.personal`) as `/me/…`, valid or not: a
log is read by more people than the feeds it lists. A
traceback keeps its lines, each escaped and indented with `  | `, so only a record's own first line
starts at the left margin: nothing from outside can pass for a record of its own.

The request line is an INFO record of the `feedbridge.access` logger, written by a plain `StreamHandler`
in the thread that logs it: no thread of logging's own, so a fork (gunicorn's, a test's) never copies one
mid-write, and a worker killed outright loses no line it had logged. Making and writing that record is
the largest share of a cached hit's own work, and a PaaS router logs every request already, so
`FEEDBRIDGE_ACCESS_LOG=off` turns the request lines off and leaves every other record as it is.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from urllib.parse import unquote_plus

log = logging.getLogger("feedbridge.access")
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_ESCAPES |= {0x2028: "\\u2028", 0x2029: "\\u2029"}
_CONTINUATION = "\n  | "


_TOKEN_VALUE = re.compile(r"(token=)[^&\s#]*", re.IGNORECASE)
HIDDEN = "token=…"
# A personal feed's token (`feedbridge.feeds.personal`): the path segment after `/me/`, as long as one is.
_MEMBER_TOKEN = re.compile(r"/me/[A-Za-z0-9_-]{40,}")


def hide_tokens(text: str) -> str:
    return _MEMBER_TOKEN.sub("/me/…", _TOKEN_VALUE.sub(HIDDEN, text))


# payload: a member's encrypted key, on its way to /connect; device_code: what the forum gives it for
_HIDDEN_PARAMETERS = {"token": HIDDEN, "payload": "payload=…", "device_code": "device_code=…"}


def hidden_query(query: str) -> str:
    """A query string with the value of each parameter named `token`, `payload` or `device_code`, however its
    name is encoded, hidden."""
    return "&".join(_HIDDEN_PARAMETERS.get(unquote_plus(piece.partition("=")[0]).lower(), piece)
                    for piece in query.split("&"))


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


def configure_logging(level: str, *, access_log: bool = True) -> None:
    """A stdout handler unless the host (gunicorn, a test runner) installed its own, and the escaping filter
    on every handler of the root logger either way. Request lines follow `level` unless `access_log` is off."""
    root = logging.getLogger()
    if not root.handlers:
        stdout = logging.StreamHandler(sys.stdout)
        stdout.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(stdout)
    for handler in root.handlers:
        if not any(isinstance(f, EscapeControls) for f in handler.filters):
            handler.addFilter(EscapeControls())
    logging.getLogger("feedbridge").setLevel(level)
    log.setLevel(logging.NOTSET if access_log else logging.WARNING)


def log_request(method: str, path: str, status: int, started: float, cache: str) -> None:
    """The one line per request, from the hit path and from Flask alike; `path` includes the query."""
    if "?" in path and log.isEnabledFor(logging.INFO):
        path, _, query = path.partition("?")
        path += "?" + hidden_query(query)
    log.info("%s %s %d %.1fms cache=%s", method, path, status, (time.perf_counter() - started) * 1000, cache)
