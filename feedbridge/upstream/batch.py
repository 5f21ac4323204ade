"""A fetcher for batch runs that never hammers a forum, and can read pages from local files instead.

A cron job or CI build fetches many pages at once and nobody is waiting for a single one of them, so it
can afford to be gentler than the web service: a few requests at a time per forum, starts spaced by a
delay, a short `Retry-After` sat out (by every request to that forum, not just the one that got the
429) and retried once, and a long one ends all requests to that forum for the rest of the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from feedbridge.config import Forum, Settings
from feedbridge.errors import UpstreamRateLimited
from feedbridge.upstream.fetcher import Fetched, Fetcher


class _ForumGate:
    def __init__(self, concurrency: int):
        self.slots = threading.Semaphore(concurrency)
        self.lock = threading.Lock()
        self.next_start = 0.0
        self.gave_up: str | None = None


class PoliteFetcher(Fetcher):
    """`Fetcher` with per-forum politeness. `local_pages` maps upstream URLs to Markdown served instead.

    `on_wait(forum, seconds)` is called before sitting out a Retry-After, so the run can say why it is
    quiet. Requests made by the current thread are counted in `thread_requests()`, which is how a feed
    tells whether its pages were fetched for it or already fetched in this run.
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
        self._local = threading.local()
        self._count_lock = threading.Lock()
        self.requests = 0

    def get(self, forum: Forum, url: str, etag: str | None = None, last_modified: str | None = None) -> Fetched:
        if url in self.local_pages:
            return Fetched(url, 200, self.local_pages[url])
        gate = self._gate(forum)
        for attempt in (1, 2):
            try:
                with self._turn(gate):
                    return super().get(forum, url, etag, last_modified)
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

    def thread_requests(self) -> int:
        return getattr(self._local, "requests", 0)

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
            self._local.requests = self.thread_requests() + 1
            with self._count_lock:
                self.requests += 1
            yield
