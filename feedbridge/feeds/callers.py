"""Who asks, until when, and what they may spend: the request-side half of the cache policy.

- `Caller`: one web request, made once at its edge and current for all it runs (`enter`, `current`). Its
  deadline (FEEDBRIDGE_REQUEST_DEADLINE) bounds every wait on top of a fetch (further pages, topic pages,
  another request's fetch); the service answers with what it has by then.
- `Admission`: what the request holds, shared by all it runs, pool work included: at most one cold slot
  (`feedbridge.feeds.policy`), taken by its first read that goes upstream, and the refusals its reads met.
- `ForumBudget`: upstream requests per forum counted as Discourse counts the bridge's address
  (`lib/middleware/request_tracker.rb`: `max_reqs_per_ip_per_10_seconds` 50, `max_reqs_per_ip_per_minute`
  200): at most FEEDBRIDGE_FORUM_BUDGET_10S in any 10 seconds and FEEDBRIDGE_FORUM_BUDGET in any 60,
  as the forum counts them, on arrival (moving windows, `feedbridge.store.control.Windows`, holding each
  request `LEEWAY` past their length: shared through Redis, split between the workers without it), below
  core's, so the bridge is never the client that gets the forum to rate-limit it for everyone. The forums
  of one multisite host (FEEDBRIDGE_MULTISITE) share these windows, as core's per-IP limiters are global to
  the host (`RateLimiter` with `global: true`). One client (its address, see `feedbridge.web.context`) may
  spend at most a third of the minute's (`CLIENT_SHARE`). Signed-in requests have the key's own budget
  (under core's `max_user_api_reqs_per_minute` 20 and `_per_day` 2,880 for a User API key; every admin API
  key of a site shares one `max_admin_api_reqs_per_minute` 60) and are counted in the forum's windows too:
  core counts them against the bridge's address as well. Past any: `BridgeBusy`, a 503 with Retry-After = when
  the refusing window has room again, or the stale copy.

Reads outside a web request (the static build, the CLI) have no `Caller` and get the cache and negative
caching only: they pace themselves (`upstream/batch.py`) and have no readers waiting on a thread.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from feedbridge.config import Forum
from feedbridge.errors import BridgeBusy
from feedbridge.store.control import Windows

T = TypeVar("T")
J = TypeVar("J")

CLIENT_SHARE = 3
"""One client may spend at most 1/CLIENT_SHARE of a forum's budget per minute."""
BURST = 10
"""Seconds of the short window: core's `max_reqs_per_ip_per_10_seconds` counts 10."""
DAY = 24 * 3600
LEEWAY = 1
"""Seconds the forum's windows hold each request past their length. The bridge counts a request before it
sends it; core counts it on arrival (lib/rate_limiter.rb, in whole seconds, which only ever lets more
through), from a busy worker a few hundred milliseconds later. Over exactly 10 s, the requests counted first
but sent late and those the next window let through at once reached the forum less than 10 s apart: 12 to
14 in 10 s for a budget of 10 (tests/test_budget_windows.py). Held a second longer, the requests that reach
the forum within any span of core's length were counted within one a second longer, so there are at most
the budget of them as long as none takes a second to be sent."""


@dataclass
class Admission:
    """What one web request holds, shared by everything it runs, its pool work included: one cold slot at
    most, taken by whichever of its reads first goes upstream (`CachePolicy.take_slot`) and given back when
    the request ends (`leave`, at the web layer's teardown), after which nothing is fetched for it."""

    slot: threading.BoundedSemaphore | None = None
    ended: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


@dataclass
class Caller:
    """One web request: who asks (for the budget's fair share), until when, and what it holds.

    It is the request's scope (`current`), set once at the edge (`enter`) and seen by the work the request
    fans out, since the pool runs each job in a copy of its submitter's context (`CallerPool`): a page 2 or
    a topic page read in the pool takes the request's slot if the request holds none yet, and is refused
    with the request's own reads when none is free, so no read of the request goes upstream without a slot.
    """

    client: str
    deadline: float  # time.monotonic()
    admission: Admission = field(default_factory=Admission)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def wait(self, longest: float) -> float:
        return max(min(longest, self.left()), 0.0)

    def end(self) -> None:
        """The request is answered: its slot goes back, and pool work it left behind fetches nothing more."""
        with self.admission.lock:
            slot, self.admission.slot, self.admission.ended = self.admission.slot, None, True
        if slot is not None:
            slot.release()


_CURRENT: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("feedbridge_caller", default=None)
"""The web request being served, in its own thread or greenlet and in the pool work it submits; None in a
static build or the CLI, which have no deadline, share or slot."""


def current() -> Caller | None:
    """The request whose deadline, share and slot bound the current read, if a web request makes it."""
    return _CURRENT.get()


def enter(caller: Caller) -> contextvars.Token[Caller | None]:
    """At the web request's start: `caller` is the scope of everything it runs, until `leave`."""
    return _CURRENT.set(caller)


def leave(token: contextvars.Token[Caller | None]) -> None:
    """At the web request's teardown: it ends (`Caller.end`) and the thread or greenlet serves no request."""
    caller = _CURRENT.get()
    _CURRENT.reset(token)
    if caller is not None:
        caller.end()


class CallerPool(ThreadPoolExecutor):
    """The service's pool for the work one request or feed fans out (further pages, topic pages): it runs in
    a copy of the submitter's context (`contextvars`: the request's `Caller`, the static build's per-feed
    request tally, the builds a read is part of)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(_call, contextvars.copy_context(), fn, args, kwargs)

    def waves(self, jobs: Sequence[J], run: Callable[[J], T], size: int) -> Iterator[tuple[J, Future[T]]]:
        """`run(job)` for every job, `size` at a time, each wave submitted once every job of the one before
        is taken: each job with its future, done, in order. A consumer that stops taking (a list that ended)
        starts no further wave. When the request's deadline passes, what has not started is cancelled and
        FutureTimeout raised: the consumer decides what a partial answer is worth.

        The one wave loop of the service: list pages, topic pages, batches of posts and posts' topics."""
        for start in range(0, len(jobs), size):
            wave = jobs[start : start + size]
            futures = [self.submit(run, job) for job in wave]
            for job, future in zip(wave, futures, strict=True):
                caller = current()
                if not wait([future], timeout=None if caller is None else max(caller.left(), 0.0)).done:
                    for rest in futures:
                        rest.cancel()
                    raise FutureTimeout
                yield job, future


def _call(context: contextvars.Context, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    return context.run(fn, *args, **kwargs)


@dataclass(frozen=True, slots=True)
class _Span:
    """One window a request is counted in: at most `limit` in any `windows.seconds`, for `ids`."""

    windows: Windows
    limit: int
    ids: tuple[str, ...]
    kind: str  # what the refusal calls the requests: "upstream requests", "signed-in requests"


_LAST = {BURST: "10 seconds", 60: "minute", DAY: "day"}


class ForumBudget:
    """Upstream requests per forum in any 10 s (`per_burst`), minute (`per_window`, over `windows`) and day
    (`per_day`), and each client's share of the minute's (over `shares`).

    The share is of the minute only: one cold `content=full` feed is a list and 30 topic pages, 31 requests
    within a second, so a share of the 10 s window small enough to leave others room in it would refuse
    every such feed. A client that spends its share at once fills the 10 s window for the rest of those
    10 s (others get their stale copies, or 503 with a Retry-After of at most 10 s), then waits out the
    minute.

    Every window is split between the instance's `processes` (`Windows.split`), so its workers together
    stay within it without Redis. The forum's windows hold each request `LEEWAY` past their length
    (`Windows.lasting`), so the forum, counting later, sees no more than the budget either; a client's share
    is the bridge's own fairness, counted nowhere else, over the minute itself. The forum's windows are
    looked at before the client's is counted, so a client refused for the forum's sake keeps its share; a
    client counted and then refused because another filled a forum window in between has spent one of its
    share without a request, which errs towards the forum (as does a window counted before a later one
    refuses).
    """

    def __init__(self, windows: Windows, per_window: int, *, scope: str = "", share: int = CLIENT_SHARE,
                 per_day: int = 0, per_burst: int = 0, processes: int = 1, forum: ForumBudget | None = None,
                 address: Callable[[Forum], str] | None = None):
        """`scope` keeps a budget's counters apart from another's (the credentialed requests' own,
        `feedbridge.feeds.signing`), `share` is what part of it one client may spend, `per_day` and
        `per_burst`, when set, bound the requests of any 24 hours and any 10 seconds too, and `forum` is the
        budget whose forum-wide windows these requests are counted in as well (the public one, for signed-in
        requests: core counts a key's requests against the bridge's address too). `address` names the windows
        a forum's requests are counted in (`Settings.address_of`: one for the forums of a multisite host, which
        core counts in one per-IP window); by default each forum's own."""
        self.shares = windows.split(processes)
        self.windows = self.shares.lasting(LEEWAY)
        self.per_window = per_window
        self.share = max(per_window // share, 1)
        self.scope = scope
        self.per_day = per_day
        self.per_burst = per_burst
        self.days = self.windows.spanning(DAY) if per_day else None
        self.bursts = self.windows.spanning(BURST) if per_burst else None
        self.forum = forum
        self.kind = "signed-in requests" if forum is not None else "upstream requests"
        self.address: Callable[[Forum], str] = address or (lambda f: f.key)

    def spans(self, forum: Forum) -> list[_Span]:
        """The forum-wide windows one request to `forum` is counted in, shortest first."""
        if self.per_window <= 0:
            return []
        whole = (f"{self.scope}forum", self.address(forum))
        made = [_Span(self.windows, self.per_window, whole, self.kind)]
        if self.bursts is not None:
            made.insert(0, _Span(self.bursts, self.per_burst, whole, self.kind))
        if self.days is not None:
            made.append(_Span(self.days, self.per_day, whole, self.kind))
        return made + (self.forum.spans(forum) if self.forum is not None else [])

    def spend(self, forum: Forum, caller: Caller) -> None:
        """One request to `forum` for `caller`, or BridgeBusy when a window (or the caller's share) is full."""
        if self.per_window <= 0:
            return
        spans = self.spans(forum)
        for span in spans:
            if not span.windows.test(span.limit, *span.ids):
                self._forum_busy(forum, span)
        mine = (f"{self.scope}client", self.address(forum), caller.client)
        if not self.shares.hit(self.share, *mine):
            retry = self._retry(self.shares, self.share, mine)
            raise BridgeBusy(f"this client has used its share ({self.share}) of the {self.per_window} upstream "
                             f"requests a minute the bridge makes to {forum.key}; retry in {retry:.0f}s",
                             retry_after=retry)
        for span in spans:
            if not span.windows.hit(span.limit, *span.ids):
                self._forum_busy(forum, span)

    def _forum_busy(self, forum: Forum, span: _Span) -> NoReturn:
        retry = self._retry(span.windows, span.limit, span.ids)
        last = _LAST.get(span.windows.seconds, f"{span.windows.seconds} seconds")
        shared = "" if span.ids[1] == forum.key else f" and the forums on its multisite host ({span.ids[1]})"
        raise BridgeBusy(f"the bridge has made its {span.limit} {span.kind} of the last {last} to "
                         f"{forum.key}{shared}; retry in {retry:.0f}s", retry_after=retry)

    @staticmethod
    def _retry(windows: Windows, limit: int, ids: tuple[str, ...]) -> float:
        return min(max(windows.reset_in(limit, *ids), 1.0), float(windows.held))
