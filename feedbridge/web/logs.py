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
    # Every character `_ESCAPES` maps is non-printable (Cc, Zl, Zp), so a printable line, nearly every line,
    # is returned as it is after one C scan instead of a translation through the table.
    return text if text.isprintable() else text.translate(_ESCAPES)


class EscapeControls(logging.Filter):
    """On each handler (a logger's filters would miss its children's records). Mutates the record, so a
    second handler with the same filter finds it already escaped and leaves it alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.__dict__.get("controls_escaped"):  # not getattr: a missing attribute costs an exception
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


class _Formatter(logging.Formatter):
    """The stdout handler's formatter: `%(asctime)s` is formatted once per second, not once per line (a
    request line's largest formatting cost); what it writes is the same."""

    def __init__(self, fmt: str):
        super().__init__(fmt)
        self._second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        if datefmt:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        cached = self._second
        if cached[0] != second:
            cached = self._second = (second, time.strftime(self.default_time_format, self.converter(second)))
        return f"{cached[1]},{int(record.msecs):03d}"  # logging's default_msec_format, '%s,%03d'


def configure_logging(level: str) -> None:
    """A stdout handler unless the host (gunicorn, a test runner) installed its own, and the escaping filter
    on every handler of the root logger either way."""
    root = logging.getLogger()
    if not root.handlers:
        stdout = logging.StreamHandler(sys.stdout)
        stdout.setFormatter(_Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        root.addHandler(stdout)
    for handler in root.handlers:
        if not any(isinstance(f, EscapeControls) for f in handler.filters):
            handler.addFilter(EscapeControls())
    logging.getLogger("feedbridge").setLevel(level)


def log_request(method: str, path: str, status: int, started: float, cache: str) -> None:
    """The one line per request, from the hit path and from Flask alike; `path` includes the query."""
    log.info("%s %s %s %.1fms cache=%s", method, path, status, (time.perf_counter() - started) * 1000, cache)
