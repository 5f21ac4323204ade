"""A fetcher for batch runs that never hammers a forum, and can read pages from local files instead.

A cron job or CI build fetches many pages at once and nobody is waiting for a single one of them, so it
can afford to be gentler than the web service: a few requests at a time per forum, starts spaced by a
delay, a short `Retry-After` sat out (by every request to that forum, not just the one that got the
429) and retried once, and a long one ends all requests to that forum for the rest of the run.

What each feed cost is counted where it is spent: `counting()` opens a tally in the current context
(`contextvars`), and every request made in that context adds to it, also from the service's pool, which
runs the work a feed fans out (its further pages, its topic pages) in a copy of the feed's context.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from feedbridge.config import Credential, Forum, Settings
from feedbridge.errors import UpstreamRateLimited
from feedbridge.upstream.fetcher import Fetched, Fetcher


class Tally:
    """Requests made within one `PoliteFetcher.counting()` block (a request that was only waited on is not)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    @property
    def requests(self) -> int:
        with self._lock:
            return self._count

    def add(self) -> None:
        with self._lock:
            self._count += 1


_TALLY: ContextVar[Tally | None] = ContextVar("feedbridge_tally", default=None)


class _ForumGate:
    def __init__(self, concurrency: int):
        self.slots = threading.Semaphore(concurrency)
        self.lock = threading.Lock()
        self.next_start = 0.0
        self.gave_up: str | None = None


class PoliteFetcher(Fetcher):
    """`Fetcher` with per-forum politeness. `local_pages` maps upstream URLs to Markdown served instead.

    `on_wait(forum, seconds)` is called before sitting out a Retry-After, so the run can say why it is
    quiet. `requests` counts every request of the run; `counting()` those made for one feed, which is how
    a feed tells whether its pages were fetched for it or already fetched in this run.
    """

    def __init__(self, settings: Settings, *, concurrency: int = 2, delay: float = 0.5, max_wait: float = 30.0,
                 local_pages: Mapping[str, str] | None = None,
                 on_wait: Callable[[Forum, float], None] | None = None):
        super().__init__(settings)
        self.concurrency = concurrency
        self.delay = delay
        self.max_wait = max_wait
        self.local_pages = dict(local_pages or {})
        self.on_wait = on_wait
        self._gates: dict[str, _ForumGate] = {}
        self._gates_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self.requests = 0

    def get(self, forum: Forum, url: str, etag: str | None = None, last_modified: str | None = None,
            signed: bool = False, credential: Credential | None = None) -> Fetched:
        if url in self.local_pages:
            return Fetched(url, 200, self.local_pages[url])
        gate = self._gate(forum)
        for attempt in (1, 2):
            try:
                with self._turn(gate):
                    return super().get(forum, url, etag, last_modified, signed, credential)
            except UpstreamRateLimited as exc:
                if gate.gave_up:
                    raise
                wait = exc.retry_after or 0.0
                if attempt == 2 or wait > self.max_wait:
                    gate.gave_up = (f"{forum.key} rate-limited us (429, Retry-After {wait:.0f}s); "
                                    "no more requests to it in this run")
                    raise UpstreamRateLimited(gate.gave_up, retry_after=wait) from None
                with gate.lock:
                    gate.next_start = max(gate.next_start, time.monotonic() + wait)
                if self.on_wait:
                    self.on_wait(forum, wait)
        raise AssertionError("unreachable: the second attempt returns or raises")

    @staticmethod
    @contextmanager
    def counting() -> Iterator[Tally]:
        tally = Tally()
        token = _TALLY.set(tally)
        try:
            yield tally
        finally:
            _TALLY.reset(token)

    def _gate(self, forum: Forum) -> _ForumGate:
        with self._gates_lock:
            return self._gates.setdefault(forum.key, _ForumGate(self.concurrency))

    @contextmanager
    def _turn(self, gate: _ForumGate) -> Iterator[None]:
        """A slot among the forum's concurrent requests, starting no sooner than `delay` after the last."""
        with gate.slots:
            with gate.lock:
                start = max(time.monotonic(), gate.next_start)
                gate.next_start = start + self.delay
            time.sleep(max(start - time.monotonic(), 0.0))
            if gate.gave_up:  # decided while this request waited for its turn
                raise UpstreamRateLimited(gate.gave_up)
            tally = _TALLY.get()
            if tally is not None:
                tally.add()
            with self._count_lock:
                self.requests += 1
            yield
