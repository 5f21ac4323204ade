"""Logging for the service: records on stdout, one request line each, and no line an outsider can forge.

Request paths, query strings, headers, upstream URLs and upstream messages all reach log messages, and
any of them can carry `\\n` (a `%0a` in a path is decoded before the app sees it). Rather than trust
every call site to escape, one filter on the handlers escapes every control character (C0, DEL, C1 and
the Unicode line separators) in the final message as `\\xNN`, after the arguments are merged. A
traceback keeps its lines, each escaped and indented with `  | `, so only a record's own first line
starts at the left margin: nothing from outside can pass for a record of its own.
"""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("feedbridge.web.app")  # the request lines' logger since the first release

_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_ESCAPES |= {0x2028: "\\u2028", 0x2029: "\\u2029"}
_CONTINUATION = "\n  | "


def escape_controls(text: str) -> str:
    return text.translate(_ESCAPES)


class EscapeControls(logging.Filter):
    """On each handler (a logger's filters would miss its children's records). Mutates the record, so a
    second handler with the same filter finds it already escaped and leaves it alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "controls_escaped", False):
            return True
        record.msg, record.args = escape_controls(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = "  | " + _CONTINUATION.join(map(escape_controls, record.exc_text.split("\n")))
        if record.stack_info:
            record.stack_info = "  | " + _CONTINUATION.join(map(escape_controls, record.stack_info.split("\n")))
        record.controls_escaped = True
        return True


def configure_logging(level: str) -> None:
    """A stdout handler unless the host (gunicorn, a test runner) installed its own, and the escaping filter
    on every handler of the root logger either way."""
    root = logging.getLogger()
    if not root.handlers:
        stdout = logging.StreamHandler(sys.stdout)
        stdout.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        root.addHandler(stdout)
    for handler in root.handlers:
        if not any(isinstance(f, EscapeControls) for f in handler.filters):
            handler.addFilter(EscapeControls())
    logging.getLogger("feedbridge").setLevel(level)


def log_request(method: str, path: str, status: int, started: float, cache: str) -> None:
    """The one line per request, from the hit path and from Flask alike; `path` includes the query."""
    log.info("%s %s %s %.1fms cache=%s", method, path, status, (time.perf_counter() - started) * 1000, cache)
