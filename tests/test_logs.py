"""The stdout handler: request lines are queued and written in batches, read exactly as the formatter
writes a record, and no line is lost, reordered, delayed past a warning or doubled across a fork."""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from feedbridge.web.logs import StdoutHandler, configure_logging, log_request


class CountingStream(io.StringIO):
    """A stream that counts its writes and flushes: the system calls a real stdout would make."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.flushes = 0
        self.attempted: list[str] = []

    def write(self, text: str) -> int:
        self.writes += 1
        self.attempted.append(text)
        return super().write(text)

    def flush(self) -> None:
        self.flushes += 1


@contextmanager
def sole_handler(stream: TextIO) -> Iterator[StdoutHandler]:
    """Our handler as the root logger's only one, as in a gunicorn worker. Entered in the test's body:
    pytest adds its capture handler to the root logger for each phase, after the fixtures ran."""
    root, feedbridge = logging.getLogger(), logging.getLogger("feedbridge")
    saved, level = root.handlers[:], feedbridge.level
    handler = StdoutHandler(stream)
    root.handlers = [handler]
    configure_logging("INFO")
    try:
        yield handler
    finally:
        root.handlers = saved
        feedbridge.setLevel(level)


def test_request_lines_skip_logging_and_are_written_in_a_few_writes_not_one_each(caplog):
    stream = CountingStream()
    with sole_handler(stream) as handler:
        with handler.lock:  # reentrant: the lines queue, the writer thread waits (no race with the clock)
            for i in range(500):
                log_request("GET", f"/forum/latest.atom?q={i}", 200, time.perf_counter(), "hit")
            assert stream.writes == 0
        handler.flush()
    assert not caplog.records  # no `LogRecord` was made: the lines went straight to the queue
    lines = stream.getvalue().splitlines()
    assert [line.rsplit("?q=", 1)[1].split(" ", 1)[0] for line in lines] == [str(i) for i in range(500)]
    assert all(" INFO feedbridge.web.app GET /forum/latest.atom?q=" in line for line in lines)
    assert stream.writes <= 2  # this flush, and maybe the writer thread's turn just before it


def test_the_writer_thread_writes_queued_lines_without_being_asked():
    stream = CountingStream()
    with sole_handler(stream):
        log_request("GET", "/forum/latest.atom", 200, time.perf_counter(), "miss")
        deadline = time.monotonic() + 5  # a margin: the thread writes every `WRITE_EVERY` (0.1 s)
        while "cache=miss" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
    assert "GET /forum/latest.atom 200 " in stream.getvalue() and stream.writes == 1


def test_a_request_line_reads_as_the_formatter_would_write_its_record(monkeypatch):
    stream = CountingStream()
    monkeypatch.setattr(time, "time", lambda: 1764590400.5)  # `LogRecord` reads the same clock
    with sole_handler(stream) as handler:
        log_request("GET", "/x\n2026-01-01 00:00:00,000 WARNING forged", 404, time.perf_counter(), "-")
        handler.flush()
        fast = stream.getvalue()
        message = fast.split(" INFO feedbridge.web.app ", 1)[1].rstrip("\n").replace("\\x0a", "\n")
        record = logging.LogRecord("feedbridge.web.app", logging.INFO, __file__, 1, message, None, None)
        handler.filter(record)
        assert fast == handler.format(record) + "\n"
    assert fast.count("\n") == 1 and "/x\\x0a2026-01-01" in fast  # escaped on the fast path too
    assert fast.startswith(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1764590400)) + ",500 INFO ")


def test_a_warning_is_written_at_once_after_the_lines_queued_before_it():
    stream = CountingStream()
    with sole_handler(stream):
        for status in (200, 304, 404):
            log_request("GET", "/forum/latest.atom", status, time.perf_counter(), "hit")
        logging.getLogger("feedbridge.upstream").warning("forum %s answered 503", "example.org")
        lines = stream.getvalue().splitlines()  # no flush asked for
    assert [line.split(" ")[6] for line in lines[:3]] == ["200", "304", "404"]
    assert len(lines) == 4 and lines[3].endswith("WARNING feedbridge.upstream forum example.org answered 503")


def test_with_another_handler_request_lines_go_through_logging_to_both():
    stream, other = CountingStream(), io.StringIO()
    extra = logging.StreamHandler(other)
    with sole_handler(stream) as handler:
        logging.getLogger("feedbridge").addHandler(extra)
        try:
            log_request("GET", "/forum/latest.atom", 200, time.perf_counter(), "hit")
        finally:
            logging.getLogger("feedbridge").removeHandler(extra)
        handler.flush()
    assert "GET /forum/latest.atom 200" in other.getvalue()
    assert "GET /forum/latest.atom 200" in stream.getvalue()


def test_no_request_line_below_the_configured_level():
    stream = CountingStream()
    with sole_handler(stream) as handler:
        logging.getLogger("feedbridge").setLevel("WARNING")
        log_request("GET", "/forum/latest.atom", 200, time.perf_counter(), "hit")
        handler.flush()
    assert stream.getvalue() == ""


def test_lines_queued_before_a_fork_are_written_once(tmp_path):
    path = tmp_path / "stdout"
    with open(path, "a") as out, sole_handler(out) as handler:
        log_request("GET", "/before-fork", 200, time.perf_counter(), "hit")
        pid = os.fork()
        if pid == 0:  # the child: a line of its own, written at its exit as logging.shutdown would
            log_request("GET", "/in-child", 200, time.perf_counter(), "hit")
            handler.flush()
            os._exit(0)
        os.waitpid(pid, 0)
        handler.flush()
    text = path.read_text()
    assert text.count("GET /before-fork 200") == 1 and text.count("GET /in-child 200") == 1


def test_a_closed_stdout_costs_the_lines_not_the_writer_thread():
    stream = CountingStream()
    with sole_handler(stream) as handler:
        log_request("GET", "/first", 200, time.perf_counter(), "hit")
        stream.close()
        handler.flush()  # what the writer thread does: no exception escapes it
        log_request("GET", "/second", 200, time.perf_counter(), "hit")
        handler.flush()
    # Each line was offered once, refused by the closed stream, and dropped rather than queued again.
    assert [" /first " in text for text in stream.attempted] == [True, False]
    assert [" /second " in text for text in stream.attempted] == [False, True]


def test_a_disabled_logger_writes_no_request_line():
    stream = CountingStream()
    with sole_handler(stream) as handler:
        logging.getLogger("feedbridge.web.app").disabled = True  # what `logging.config` does to old loggers
        try:
            log_request("GET", "/forum/latest.atom", 200, time.perf_counter(), "hit")
        finally:
            logging.getLogger("feedbridge.web.app").disabled = False
        handler.flush()
    assert stream.getvalue() == ""
