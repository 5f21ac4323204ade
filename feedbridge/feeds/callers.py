"""Who asks, until when, and what they may spend: the request-side half of the cache policy.

- `Caller`: one web request, made once in its own thread. Its deadline (FEEDBRIDGE_REQUEST_DEADLINE)
  bounds every wait on top of a fetch (further pages, topic pages, another request's fetch); the service
  answers with what it has by then.
- Which caller may take a cold slot (`feedbridge.feeds.policy`) is said by the caller, not by the thread
  it runs in: the request's own `Caller` may (`admits`), and the `CallerPool` hands work it runs for that
  request a `pooled()` copy with the same client and deadline that never does (the request's slot covers it).
- `ForumBudget`: at most FEEDBRIDGE_FORUM_BUDGET upstream requests per forum in any 60 seconds (a moving
  window, `feedbridge.store.control.Windows`: shared through Redis), well under Discourse's anonymous
  limit (about 200 a minute per IP), so the bridge is never the client that gets the forum to rate-limit
  it for everyone. One client (its address, see `feedbridge.web.context`) may spend at most a third of
  it (`CLIENT_SHARE`). Past either: `BridgeBusy`, a 503 with Retry-After = when the window has room
  again, or the stale copy.

Callers without a `Caller` (the static build, the CLI) get the cache and negative caching only: they
pace themselves (`upstream/batch.py`) and have no readers waiting on a thread.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from feedbridge.config import Forum
from feedbridge.errors import BridgeBusy
from feedbridge.store.control import Windows

T = TypeVar("T")

CLIENT_SHARE = 3
"""One client may spend at most 1/CLIENT_SHARE of a forum's budget per window."""
DAY = 24 * 3600


@dataclass
class Caller:
    """One web request: who asks (for the budget's fair share), until when, and whether it holds a slot.

    `admits`: whether this is the request's own caller, which takes a cold slot before it fetches. Work
    the request fans out (`CallerPool`) gets `pooled()`, which shares the budget and the deadline but never
    takes a slot: the request's own slot covers it, and a page 2 must not be refused for want of one.
    """

    client: str
    deadline: float  # time.monotonic()
    admits: bool = True
    slot: bool = False
    scopes: int = 0  # open `CachePolicy.request` scopes: the slot is given back when the outermost one ends

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def wait(self, longest: float) -> float:
        return max(min(longest, self.left()), 0.0)

    def pooled(self) -> Caller:
        return Caller(self.client, self.deadline, admits=False)


def result(future: Future[T], caller: Caller | None) -> T:
    """A pool future's result, within the request's deadline (FutureTimeout past it); unbounded without one."""
    return future.result(timeout=None if caller is None else max(caller.left(), 0.0))


class CallerPool(ThreadPoolExecutor):
    """The service's pool for the work one request or feed fans out (further pages, topic pages): it runs in
    a copy of the submitter's context (`contextvars`, e.g. the static build's per-feed request tally), and
    a `Caller` among its arguments is handed over as its `pooled()` copy."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        handed = tuple(arg.pooled() if isinstance(arg, Caller) else arg for arg in args)
        return super().submit(_call, contextvars.copy_context(), fn, handed, kwargs)


def _call(context: contextvars.Context, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    return context.run(fn, *args, **kwargs)


class ForumBudget:
    """Upstream requests per forum in any window (`Windows.seconds`, 60), and each client's share of them.

    The forum's window is looked at before the client's is counted, so a client refused for the forum's
    sake keeps its share; a client counted and then refused because another filled the forum's window
    in between has spent one of its share without a request, which errs towards the forum.
    """

    def __init__(self, windows: Windows, per_window: int, *, scope: str = "", share: int = CLIENT_SHARE,
                 per_day: int = 0):
        """`scope` keeps a budget's counters apart from another's (the credentialed requests' own,
        `feedbridge.feeds.signing`), `share` is what part of it one client may spend, and `per_day`, when
        set, bounds the requests of any 24 hours too (as Discourse does for one API key)."""
        self.windows = windows
        self.per_window = per_window
        self.share = max(per_window // share, 1)
        self.scope = scope
        self.per_day = per_day
        self.days = windows.spanning(DAY) if per_day else None

    def spend(self, forum: Forum, caller: Caller) -> None:
        if self.per_window <= 0:
            return
        whole = (f"{self.scope}forum", forum.key)
        if self.days is not None and not self.days.test(self.per_day, *whole):
            retry = self._retry(self.days, self.per_day, whole)
            raise BridgeBusy(f"the bridge has made its {self.per_day} signed-in requests of the last day to "
                             f"{forum.key}; retry in {retry:.0f}s", retry_after=retry)
        if not self.windows.test(self.per_window, *whole):
            self._forum_busy(forum, whole)
        mine = (f"{self.scope}client", forum.key, caller.client)
        if not self.windows.hit(self.share, *mine):
            retry = self._retry(self.windows, self.share, mine)
            raise BridgeBusy(f"this client has used its share ({self.share}) of the {self.per_window} upstream "
                             f"requests a minute the bridge makes to {forum.key}; retry in {retry:.0f}s",
                             retry_after=retry)
        if not self.windows.hit(self.per_window, *whole):
            self._forum_busy(forum, whole)
        if self.days is not None:
            self.days.hit(self.per_day, *whole)

    def _forum_busy(self, forum: Forum, whole: tuple[str, ...]) -> NoReturn:
        retry = self._retry(self.windows, self.per_window, whole)
        raise BridgeBusy(f"the bridge has made its {self.per_window} upstream requests of the last minute to "
                         f"{forum.key}; retry in {retry:.0f}s", retry_after=retry)

    @staticmethod
    def _retry(windows: Windows, limit: int, ids: tuple[str, ...]) -> float:
        return min(max(windows.reset_in(limit, *ids), 1.0), float(windows.seconds))
