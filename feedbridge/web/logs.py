"""Logging for the service: records on stdout, one request line each, and no line an outsider can forge.

Request paths, query strings, headers, upstream URLs and upstream messages all reach log messages, and
any of them can carry `\\n` (a `%0a` in a path is decoded before the app sees it). Rather than trust
every call site to escape, one filter on the handlers escapes every control character (C0, DEL, C1 and
the Unicode line separators) in the final message as `\\xNN`, after the arguments are merged. A
traceback keeps its lines, each escaped and indented with `  | `, so only a record's own first line
starts at the left margin: nothing from outside can pass for a record of its own.

A request line is the one record written for every request, and at the rate cached hits are served its
cost showed: through `logging` and one write and flush each, it took about 15% of a hit's throughput
(bench row 1). So the stdout handler queues lines and one thread writes them every `WRITE_EVERY`
seconds in one write, and a request line that only this handler would receive is formatted straight
into that queue (the same text the formatter writes). A record at WARNING or above is written at once,
after everything queued before it, so order holds and an error is never late; the queue is written
before a fork and at exit (`logging.shutdown` flushes every handler), so nothing is lost or doubled
unless the process is killed outright, which costs at most the last `WRITE_EVERY` seconds of lines.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import TextIO

log = logging.getLogger("feedbridge.web.app")  # the request lines' logger since the first release

_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_ESCAPES |= {0x2028: "\\u2028", 0x2029: "\\u2029"}
_CONTINUATION = "\n  | "
WRITE_EVERY = 0.1
"""Seconds between the writer thread's writes of queued lines."""
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def _cut(fmt: str) -> tuple[str, str, str]:
    """A request line as `fmt` writes it, cut around its two variable parts: the text before the time stamp,
    between the time stamp's milliseconds and the message, and after the message."""
    before, rest = (fmt % {"asctime": "\0", "levelname": "INFO", "name": log.name, "message": "\1"}).split("\0")
    between, after = rest.split("\1")
    return before, between, after


_REQUEST_LINE = _cut(FORMAT)


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
        return self.stamp(record.created, int(record.msecs))

    def stamp(self, created: float, msecs: int) -> str:
        return f"{self.second(int(created))},{msecs:03d}"  # logging's default_msec_format, '%s,%03d'

    def second(self, second: int) -> str:
        """The time stamp's text up to the milliseconds, formatted once per second."""
        cached = self._second
        if cached[0] != second:
            cached = self._second = (second, time.strftime(self.default_time_format, self.converter(second)))
        return cached[1]


class StdoutHandler(logging.StreamHandler[TextIO]):
    """Records on stdout, queued and written in batches by one thread (see the module docstring)."""

    def __init__(self, stream: TextIO):
        super().__init__(stream)
        self.own_formatter = _Formatter(FORMAT)
        self.setFormatter(self.own_formatter)
        self._queued: list[str] = []
        self._writing = False  # whether this process's writer thread runs (a forked child starts its own)
        # Written before a fork; a line queued in the instant between is the parent's alone to write.
        os.register_at_fork(before=self.flush, after_in_child=self._drop_queued)

    def emit(self, record: logging.LogRecord) -> None:  # called with `self.lock` held
        try:
            line = self.format(record) + self.terminator
        except Exception:  # logging's contract: a bad record is reported, never raised into the caller
            self.handleError(record)
            return
        self._queued.append(line)
        if record.levelno >= logging.WARNING:
            self._write()
        elif not self._writing:
            self._start_writer()

    def request_line(self, message: str) -> None:
        """Queue a request line, formatted as `emit` would format its record (`message` is escaped here)."""
        created = time.time()
        second = int(created)
        before, between, after = _REQUEST_LINE
        # the stamp as `stamp` writes it, with `int(msecs)` as `LogRecord` computes it
        line = f"{before}{self.own_formatter.second(second)},{int((created - second) * 1000):03d}{between}" \
               f"{escape_controls(message)}{after}{self.terminator}"
        with self.lock:  # type: ignore[union-attr]  # createLock() always sets it
            self._queued.append(line)
            if not self._writing:
                self._start_writer()

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._write()

    def _write(self) -> None:
        lines, self._queued = self._queued, []
        try:
            if lines:
                self.stream.write("".join(lines))
            self.stream.flush()
        except (OSError, ValueError):  # stdout closed or gone (ValueError: a closed file): nowhere to write
            pass

    def _drop_queued(self) -> None:
        self._queued = []
        self._writing = False  # the thread was the parent's

    def _start_writer(self) -> None:
        self._writing = True
        threading.Thread(target=self._write_every, name="feedbridge-log-writer", daemon=True).start()

    def _write_every(self) -> None:
        while True:
            time.sleep(WRITE_EVERY)
            self.flush()


def configure_logging(level: str) -> None:
    """A stdout handler unless the host (gunicorn, a test runner) installed its own, and the escaping filter
    on every handler of the root logger either way."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(StdoutHandler(sys.stdout))
    for handler in root.handlers:
        if not any(isinstance(f, EscapeControls) for f in handler.filters):
            handler.addFilter(EscapeControls())
    logging.getLogger("feedbridge").setLevel(level)


def log_request(method: str, path: str, status: int, started: float, cache: str) -> None:
    """The one line per request, from the hit path and from Flask alike; `path` includes the query."""
    if not log.isEnabledFor(logging.INFO):
        return
    message = f"{method} {path} {status} {(time.perf_counter() - started) * 1000:.1f}ms cache={cache}"
    handler = _sole_handler()
    if handler is None:
        log.info("%s", message)
        return
    handler.request_line(message)


def _sole_handler() -> StdoutHandler | None:
    """Our stdout handler, when it is the only handler a request line would reach and nothing on the way
    (a logger's or the handler's own filter, a level) would treat the record differently; else None."""
    if log.disabled or log.filters:  # `logging.config` may disable the logger: then no line at all
        return None
    found: StdoutHandler | None = None
    logger: logging.Logger | None = log
    while logger is not None:
        for handler in logger.handlers:
            if found is not None or not _plain(handler):
                return None
            found = handler  # type: ignore[assignment]  # `_plain` checked the type
        logger = logger.parent if logger.propagate else None
    return found


def _plain(handler: logging.Handler) -> bool:
    """Whether `handler` is our stdout handler as `configure_logging` set it up."""
    filters = handler.filters
    return (type(handler) is StdoutHandler and handler.formatter is handler.own_formatter
            and handler.level <= logging.INFO and len(filters) == 1 and type(filters[0]) is EscapeControls)
