"""A fetcher for batch runs (the static build, the CLI's saved lists) that can read pages from local files
instead, and counts what it sends.

How gently a run reads each forum (a few requests at a time, starts spaced, a short `Retry-After` sat out)
is decided where every request passes, the gate (`feedbridge.feeds.admission.gate.Pace`), which remembers a forum's
waits for the web service and the batch run alike.

What each feed cost is counted where it is spent: `counting()` opens a tally in the current context
(`contextvars`), and every request made in that context adds to it, also from the service's pool, which
runs the work a feed fans out (its further pages, its topic pages) in a copy of the feed's context.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from feedbridge.config import Credential, Forum, Settings
from feedbridge.errors import UpstreamError, UpstreamNotFound, UpstreamRefused
from feedbridge.upstream.fetcher import Fetched, Fetcher


class Tally:
    """Requests made within one `BatchFetcher.counting()` block (a request that was only waited on is not), and
    those the forum failed (`failed`: the first one's message, and how many): a 5xx, a timeout, a 429, not a
    page it says is gone or refuses, which is what the feed is now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self.failures = 0
        self.first_failure: str | None = None

    @property
    def requests(self) -> int:
        with self._lock:
            return self._count

    def add(self) -> None:
        with self._lock:
            self._count += 1

    def failed(self, exc: UpstreamError) -> None:
        with self._lock:
            self.failures += 1
            self.first_failure = self.first_failure or exc.message


_TALLY: ContextVar[Tally | None] = ContextVar("feedbridge_tally", default=None)


def met(exc: UpstreamError) -> None:
    """A failure of the forum that a read of the feed being built (`BatchFetcher.counting`) met without a request
    of its own: remembered from another feed's, or the answer of another feed's request it waited on
    (`CachePolicy`). Counted as its own failed requests are: only the feed that asked was, and the others
    replaced their better files with what they built without it, exit 0."""
    tally = _TALLY.get()
    if tally is not None and not isinstance(exc, UpstreamNotFound | UpstreamRefused):
        tally.failed(exc)


class BatchFetcher(Fetcher):
    """`Fetcher` for a batch run. `local_pages` maps upstream URLs to Markdown served instead.

    `requests` counts every request of the run; `counting()` those made for one feed, which is how a feed
    tells whether its pages were fetched for it or already fetched in this run.
    """

    def __init__(self, settings: Settings, *, local_pages: Mapping[str, str] | None = None,
                 unjudged: Collection[str] = ()):
        """`unjudged`: URLs whose failure leaves no feed the worse (the source probes': the forum's other lists are
        read instead, whole, or the feed fails), so a feed is not `Tally.failed` for them."""
        super().__init__(settings)
        self.local_pages = dict(local_pages or {})
        self.unjudged = frozenset(unjudged)
        self._count_lock = threading.Lock()
        self.requests = 0

    def get(self, forum: Forum, url: str, etag: str | None = None, last_modified: str | None = None,
            signed: bool = False, credential: Credential | None = None, until: float | None = None) -> Fetched:
        if url in self.local_pages:
            return Fetched(url, 200, self.local_pages[url])
        tally = _TALLY.get()
        if tally is not None:
            tally.add()
        with self._count_lock:
            self.requests += 1
        try:
            return super().get(forum, url, etag, last_modified, signed, credential, until)
        except (UpstreamNotFound, UpstreamRefused):  # a topic deleted, a list refused: what the feed is now
            raise
        except UpstreamError as exc:  # the forum failed: what is built without it is the worse for it
            if tally is not None and url not in self.unjudged:
                tally.failed(exc)
            raise

    @staticmethod
    @contextmanager
    def counting() -> Iterator[Tally]:
        tally = Tally()
        token = _TALLY.set(tally)
        try:
            yield tally
        finally:
            _TALLY.reset(token)


class SavedList(BatchFetcher):
    """The fetcher of a feed built from a saved list (`feedbridge build FILE`, a static build's `source =`): its
    pages (`local_pages`, the file for the URLs it stands for) and nothing else. A saved list is built from the
    file alone, so what the service would read besides (a JSON list's category names from the forum's
    directory) the feed goes without, as when the forum refuses it; a feed that needs more is refused
    before (the CLI's options, the static config's checks)."""

    def get(self, forum: Forum, url: str, etag: str | None = None, last_modified: str | None = None,
            signed: bool = False, credential: Credential | None = None, until: float | None = None) -> Fetched:
        if url not in self.local_pages:
            raise UpstreamRefused(f"a saved list is built from the file alone, without reading {url}")
        return super().get(forum, url, etag, last_modified, signed, credential, until)
