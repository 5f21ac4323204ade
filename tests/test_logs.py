"""Request lines are standard `logging` records: on stdout as the standard formatter writes them, seen by
any handler attached, escaped, written before `log_request` returns, and safe across a fork."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from feedbridge.config import Settings
from feedbridge.errors import ConfigError
from feedbridge.web.logs import configure_logging, log_request
from tests.appserver import running_app, settings_for

COMPILER = "/c/compiler/5"
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"


def run_python(script: str) -> subprocess.CompletedProcess[str]:
    """`script` in a fresh interpreter whose root logger has no handler, as in a gunicorn worker. Warnings
    are shown, not raised: Python reports a fork with threads running through a warning it then clears."""
    return subprocess.run([sys.executable, "-W", "always", "-c", textwrap.dedent(script)],
                          capture_output=True, text=True, timeout=60)


def test_a_request_line_is_on_stdout_as_the_standard_formatter_writes_it_before_the_call_returns():
    # `os._exit` skips `logging.shutdown`: a worker killed outright keeps every line it had logged.
    done = run_python("""
        import os, time
        from feedbridge.web.logs import configure_logging, log_request
        configure_logging("INFO")
        log_request("GET", "/x\\n2026-01-01 00:00:00,000 WARNING forged\\x1b[2J", 404, time.perf_counter(), "-")
        os._exit(0)
    """)
    assert done.returncode == 0 and done.stderr == ""
    assert re.fullmatch(
        STAMP + r" INFO feedbridge\.access GET /x\\x0a2026-01-01 00:00:00,000 WARNING forged\\x1b\[2J 404 "
        r"\d+\.\dms cache=-\n", done.stdout), done.stdout


def test_lines_are_written_once_across_a_fork_and_no_logging_thread_is_forked():
    done = run_python("""
        import os, threading, time
        from feedbridge.web.logs import configure_logging, log_request
        configure_logging("INFO")
        log_request("GET", "/before-fork", 200, time.perf_counter(), "hit")
        assert threading.active_count() == 1, threading.enumerate()
        pid = os.fork()
        if pid == 0:
            log_request("GET", "/in-child", 200, time.perf_counter(), "hit")
            os._exit(0)
        os.waitpid(pid, 0)
        log_request("GET", "/after-fork", 200, time.perf_counter(), "hit")
        os._exit(0)
    """)
    assert done.returncode == 0 and done.stderr == ""  # no "multi-threaded, use of fork() may lead to deadlocks"
    assert [line.split(" ")[5] for line in done.stdout.splitlines()] == ["/before-fork", "/in-child", "/after-fork"]


class Records(logging.Handler):
    """Each record's logger, level, arguments and message as this handler received them (the escaping
    filter on the root's handlers merges the arguments into the message later, in the same record)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[str, int, tuple[object, ...], str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        assert isinstance(record.args, tuple)
        self.records.append((record.name, record.levelno, record.args, record.getMessage()))


@contextmanager
def attached(logger_name: str) -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def test_a_handler_attached_sees_a_record_for_hits_and_for_requests_flask_answers(upstream):
    with running_app(settings_for(upstream.url, access_log=True)) as app, attached("feedbridge") as seen:
        feed = app.feed_url(f"{COMPILER}.atom")
        statuses = [httpx.get(url, timeout=15).status_code
                    for url in (feed, feed + "?limit=5", feed, app.feed_url("/nothing.atom"))]
    assert statuses == [200, 200, 200, 404]
    lines = [(level, args, message) for name, level, args, message in seen.records if name == "feedbridge.access"]
    assert [level for level, _, _ in lines] == [logging.INFO] * 4
    path = f"/{app.forum_key}{COMPILER}.atom"
    assert [args[:3] for _, args, _ in lines] == [
        ("GET", path, 200), ("GET", path + "?limit=5", 200), ("GET", path, 200),
        ("GET", f"/{app.forum_key}/nothing.atom", 404)]
    assert [args[4] for _, args, _ in lines] == ["miss", "miss", "hit", "-"]
    assert re.fullmatch(rf"GET {path} 200 \d+\.\dms cache=hit", lines[2][2])


def test_with_the_access_log_off_requests_make_no_record_and_other_lines_stay(upstream):
    settings = settings_for(upstream.url, access_log=False)
    try:
        with running_app(settings) as app, attached("feedbridge") as seen:
            feed = app.feed_url(f"{COMPILER}.atom")
            assert [httpx.get(feed, timeout=15).status_code for _ in range(2)] == [200, 200]  # a miss, a hit
    finally:
        logging.getLogger("feedbridge.access").setLevel(logging.NOTSET)
    names = [name for name, _, _, _ in seen.records]
    assert "feedbridge.access" not in names and "feedbridge.upstream.fetcher" in names
    assert Settings.from_env({"FEEDBRIDGE_ACCESS_LOG": "on"}).access_log is True
    assert Settings.from_env({}).access_log is False  # as gunicorn's own access log: a router logs requests
    with pytest.raises(ConfigError, match="FEEDBRIDGE_ACCESS_LOG"):
        Settings.from_env({"FEEDBRIDGE_ACCESS_LOG": "no"})


@contextmanager
def only_our_handler() -> Iterator[logging.Handler]:
    """The root logger as `configure_logging` leaves it in a gunicorn worker (its own stdout handler and
    nothing else), writing to a stream of the test's. Entered in the test's body: pytest adds its capture
    handler to the root logger for each phase, after the fixtures ran."""
    root, feedbridge = logging.getLogger(), logging.getLogger("feedbridge")
    saved, level = root.handlers[:], feedbridge.level
    root.handlers = []
    try:
        configure_logging("INFO")
        (handler,) = root.handlers
        yield handler
    finally:
        root.handlers = saved
        feedbridge.setLevel(level)


def test_with_only_the_stdout_handler_a_request_line_is_still_a_log_record():
    made: list[logging.LogRecord] = []
    factory = logging.getLogRecordFactory()

    def counting(*args, **kwargs) -> logging.LogRecord:
        made.append(factory(*args, **kwargs))
        return made[-1]

    stream = io.StringIO()
    logging.setLogRecordFactory(counting)
    try:
        with only_our_handler() as handler:
            handler.setStream(stream)  # type: ignore[attr-defined]
            log_request("GET", "/forum/latest.atom", 200, time.perf_counter(), "hit")
    finally:
        logging.setLogRecordFactory(factory)
    assert [(r.name, r.getMessage().split(" ")[:3]) for r in made] == [
        ("feedbridge.access", ["GET", "/forum/latest.atom", "200"])]
    assert stream.getvalue() == logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s").format(made[0]) \
        + "\n"


def test_every_control_character_is_escaped_and_the_line_stays_one_line():
    stream = io.StringIO()
    with only_our_handler() as handler:
        handler.setStream(stream)  # type: ignore[attr-defined]
        log_request("GET", "/a\r\nb\x00c\x7fd\x85e\u2028f?q=\x1b", 400, time.perf_counter(), "-")
    assert stream.getvalue().count("\n") == 1
    assert " GET /a\\x0d\\x0ab\\x00c\\x7fd\\x85e\\u2028f?q=\\x1b 400 " in stream.getvalue()


def test_no_request_line_below_the_configured_level():
    stream = io.StringIO()
    with only_our_handler() as handler:
        handler.setStream(stream)  # type: ignore[attr-defined]
        logging.getLogger("feedbridge").setLevel("WARNING")
        log_request("GET", "/forum/latest.atom", 200, time.perf_counter(), "hit")
    assert stream.getvalue() == ""


def test_a_closed_stdout_never_fails_the_request(capsys):
    stream = io.StringIO()
    with only_our_handler() as handler:
        handler.setStream(stream)  # type: ignore[attr-defined]
        stream.close()
        log_request("GET", "/forum/latest.atom", 200, time.perf_counter(), "hit")  # no exception
    assert "Logging error" in capsys.readouterr().err  # logging's own report, on stderr
