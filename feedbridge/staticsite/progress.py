"""What a `feedbridge build --config` run says while it works, on stderr.

On a terminal: a coloured line per finished feed and one live line naming the feeds still running. In
CI logs and cron mail (not a terminal): the same lines, plain, nothing redrawn. `quiet` keeps only
failures, for scripts that read the `--json` summary or only the exit status.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from typing import Any, TextIO

import click

STATUS_COLOURS = {"written": "green", "unchanged": "blue", "failed": "red"}


@dataclass(slots=True)
class FeedOutcome:
    name: str
    status: str  # "written", "unchanged" or "failed"
    # "fetched": this feed's pages came from upstream; "cached": another feed fetched them in this run;
    # "file": read from a local source file; "-": failed before its pages were ready.
    fetch: str
    requests: int  # upstream requests this feed made
    files: list[tuple[str, str]] = field(default_factory=list)  # (path, written|unchanged|kept|missing)
    ms: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "status": self.status, "fetch": self.fetch, "requests": self.requests,
            "files": [{"path": path, "status": status} for path, status in self.files],
            "ms": round(self.ms, 1), "error": self.error,
        }

    def describe(self) -> str:
        counts: dict[str, int] = {}
        for _path, status in self.files:
            counts[status] = counts.get(status, 0) + 1
        files = ", ".join(f"{n} {status}" for status, n in counts.items())
        fetch = {"fetched": f"fetched ({self.requests} request{'s' * (self.requests != 1)})",
                 "cached": "cached", "file": "from file"}.get(self.fetch, "")
        text = "  ".join(part for part in (fetch, f"files: {files}" if files else "", f"{self.ms:.0f} ms") if part)
        return text + (f"  error: {self.error}" if self.error else "")


class Progress:
    def __init__(self, names: list[str], *, tty: bool, quiet: bool, stream: TextIO | None = None):
        self.total = len(names)
        self.width = max(map(len, names), default=0)
        self.tty = tty and not quiet
        self.quiet = quiet
        self.stream = stream
        self.running: list[str] = []
        self.finished = 0
        self._lock = threading.Lock()

    @classmethod
    def for_stderr(cls, names: list[str], quiet: bool) -> Progress:
        stream = sys.stderr  # itself (CliRunner swaps it too), not a Click stream helper, which Click 8.2+ deprecates
        return cls(names, tty=stream.isatty(), quiet=quiet, stream=stream)

    def started(self, name: str) -> None:
        with self._lock:
            self.running.append(name)
            self._redraw()

    def waiting(self, forum_key: str, seconds: float) -> None:
        self._line(f"{forum_key} asked us to slow down (429): waiting {seconds:.0f} s", "yellow")

    def feed_done(self, outcome: FeedOutcome) -> None:
        with self._lock:
            self.running.remove(outcome.name)
            self.finished += 1
        if outcome.status == "failed" or not self.quiet:
            name = click.style(f"{outcome.status:<9}", fg=STATUS_COLOURS[outcome.status]) if self.tty \
                else f"{outcome.status:<9}"
            self._line(f"{name} {outcome.name:<{self.width}}  {outcome.describe()}", force=outcome.status == "failed")

    def note(self, text: str, failed: bool = False) -> None:
        if failed or not self.quiet:
            self._line(text, "red" if failed else None, force=failed)

    def _line(self, text: str, colour: str | None = None, force: bool = False) -> None:
        if self.quiet and not force:
            return
        with self._lock:
            if self.tty:
                click.echo("\r\x1b[K", nl=False, file=self.stream, err=True)
                text = click.style(text, fg=colour) if colour else text
            click.echo(text if self.tty else f"feedbridge: {text}", file=self.stream, err=True)
            self._redraw()

    def _redraw(self) -> None:
        """The live line: only on a terminal, only while something runs (called with the lock held)."""
        if not self.tty:
            return
        line = ""
        if self.running:
            names = ", ".join(self.running)
            line = f"building {self.finished}/{self.total}: {names[:60] + '…' if len(names) > 60 else names}"
        click.echo("\r\x1b[K" + (click.style(line, dim=True) if line else ""), nl=False, file=self.stream, err=True)
