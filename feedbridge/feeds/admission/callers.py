"""Who asks, until when, and what it may spend of a forum: the request-side half of the cache policy.

- `Caller`: one web request, made once at its edge (`FeedService.serving`) and handed to all it runs. Its
  deadline (FEEDBRIDGE_REQUEST_DEADLINE) bounds every wait on top of a fetch (further pages, topic pages,
  another request's fetch); the service answers with what it has by then.
- `Admission`: what the request holds, shared by all it runs, pool work included: at most one cold slot
  (`feedbridge.feeds.admission.policy`), taken by its first read that goes upstream, and the refusals its reads met.
- `Turns`: which requests may wait for a window of the forums' budgets now.
- `CallerPool`: the pool a request's reads run in, in waves, within its deadline.
- `ForumBudget` (the second half of the module): what the requests may spend of each forum, and each client.

Reads outside a web request (the static build, the CLI) have no `Caller` and get the cache and negative
caching only: they pace themselves (`upstream/batch.py`) and have no readers waiting on a thread.
"""

from __future__ import annotations

import contextvars
import copy
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from feedbridge.config import Forum
from feedbridge.errors import BridgeBusy
from feedbridge.feeds.admission.cpu import run_in
from feedbridge.store.control import Windows

T = TypeVar("T")
J = TypeVar("J")

WAIT_MARGIN = 2.0
"""Seconds of its deadline a request keeps after waiting for a window: for the build it waited for (its topic
pages that do not answer in them keep their excerpts, and mark nothing slow for others: `TopicPages`)."""
WAITERS = 2
"""Requests of one process that may wait for a window at once, one per client (`Turns`). A waiting request
holds no slot, flight or pool thread (it gave its build up, and makes it again when it wakes), but each
wake is a build made again from the cache: a client's other requests refused meanwhile are answered at
once, as before waiting existed, and no client loops through rebuilds many requests at a time."""


@dataclass
class Admission:
    """What one web request holds, shared by everything it runs, its pool work included: one cold slot at
    most, taken by whichever of its reads first goes upstream (`CachePolicy.take_slot`) and given back when
    the request ends (`leave`, at the web layer's teardown), after which nothing is fetched for it."""

    slot: tuple[Held, ...] | None = None  # what `ColdSlots.take` took
    ended: bool = False
    spent: bool = False  # charged for an upstream request: its build has begun (`Gate.fetch`)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


@dataclass
class Caller:
    """One web request: who asks (for the budget's fair share), until when, and what it holds.

    Made once at the edge (`FeedService.serving`) and handed down with every read (`Read.caller`), to the
    work the request fans out too: a page 2 or a topic page read in the pool takes the request's slot if the
    request holds none yet, and is refused with the request's own reads when none is free, so no read of the
    request goes upstream without a slot.
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
        self.give_back(ended=True)

    def give_back(self, *, ended: bool = False) -> None:
        """The request's slot goes back (its next read that goes upstream takes one again), and with `ended`
        nothing is fetched for it any more."""
        with self.admission.lock:
            slot, self.admission.slot = self.admission.slot, None
            self.admission.ended = self.admission.ended or ended
        for taken in slot or ():
            taken.release()


KEPT_FOR_OTHERS = 3
"""One client may hold every cold slot of a process but a third of them (one at least), kept for the others:
one client whose cold feeds waited on a slow page held all six, well within its share of the forum's budget,
and every other client's cold feed got 503 for as long as the page was slow (RELIABILITY.md row 87). A reader
alone on an instance still has two thirds of them for its feeds at once."""


class ClientSlot:
    """A client's part of the slots a request holds, given back with the rest (`Caller.give_back`)."""

    __slots__ = ("_slots", "_client")

    def __init__(self, slots: ColdSlots, client: str):
        self._slots, self._client = slots, client

    def release(self) -> None:
        self._slots._give(self._client)


def client_part(total: int) -> int:
    """How many of `total` slots one client may hold: all but `KEPT_FOR_OTHERS`' third, one at least. The CPU
    allowance lets a client build as many things at once (`feedbridge.web.allowance`), so a reader fetching its
    new feeds together meets one limit, not two."""
    return max(total - max(total // KEPT_FOR_OTHERS, 1), 1)


Held = threading.BoundedSemaphore | ClientSlot
"""A part of the slots a request holds: the process's, its forum's, its client's."""


class ColdSlots:
    """The process's cold slots (FEEDBRIDGE_COLD_SLOTS); with more than one forum configured each forum's part
    of them, half: a forum that answers slowly, or not at all, holds at most half the requests waiting on
    forums, and the other forums' cold feeds are still read. It held them all, and every other forum's
    uncached feed got 503 for as long as it was slow (RELIABILITY.md row 67). And each client's part, all but
    `KEPT_FOR_OTHERS`' third, so that no client can hold them all."""

    def __init__(self, total: int, forums: int = 1):
        self.total = total
        self.per_forum = total if forums <= 1 else max(total // 2, 1)
        self.per_client = client_part(total)
        self._all = threading.BoundedSemaphore(total)
        self._forums: dict[str, threading.BoundedSemaphore] = {}  # configured forums only: `Gate` reads no other
        self._clients: dict[str, int] = {}  # the clients holding slots, at most `total` of them
        self._lock = threading.Lock()

    def take(self, forum: str | None, client: str | None = None) -> tuple[Held, ...] | str:
        """The slots a request of `client` waiting on `forum` holds (their parts too: None, a read of no one
        forum or client, takes none), or why there is none free."""
        taken: list[Held] = []
        if client is not None and self.per_client < self.total:
            with self._lock:
                held = self._clients.get(client, 0)
                if held >= self.per_client:
                    return (f"this client has {held} requests waiting on the forums in this process, and the other "
                            f"{self.total - self.per_client} of its {self.total} slots are kept for other clients")
                self._clients[client] = held + 1
            taken.append(ClientSlot(self, client))
        if forum is not None and self.per_forum < self.total:
            with self._lock:
                part = self._forums.setdefault(forum, threading.BoundedSemaphore(self.per_forum))
            if not part.acquire(blocking=False):
                return self._refused(taken, f"{self.per_forum} requests are already waiting on {forum} in this "
                                            "process (its half)")
            taken.append(part)
        if not self._all.acquire(blocking=False):
            return self._refused(taken, f"{self.total} requests are already waiting on the forums in this process")
        return (self._all, *taken)

    @staticmethod
    def _refused(taken: list[Held], why: str) -> str:
        for part in taken:
            part.release()
        return why

    def _give(self, client: str) -> None:
        with self._lock:
            left = self._clients[client] - 1
            if left:
                self._clients[client] = left
            else:
                del self._clients[client]


class CallerPool(ThreadPoolExecutor):
    """The service's pool for the work one request or feed fans out (further pages, topic pages): it runs in
    a copy of the submitter's context (`contextvars`: the static build's per-feed request tally, the CPU meter
    its work is charged to: `feeds.admission.cpu.run_in`). What a job reads for (its request, the builds it is
    part of) it is handed as its read, by the code that submits it."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(run_in, contextvars.copy_context(), fn, *args, **kwargs)

    def waves(self, jobs: Sequence[J], run: Callable[[J, int], T], size: int, *,
              caller: Caller | None) -> Iterator[tuple[J, Future[T]]]:
        """`run(job, ahead)` for every job, `size` at a time, each wave submitted once every job of the one before
        is taken: each job with its future, done, in order. A consumer that stops taking (a list that ended)
        starts no further wave. When the deadline of `caller` (the web request they are for; None: none)
        passes, what has not started is cancelled and FutureTimeout raised: the consumer decides what a
        partial answer is worth. `ahead`: the upstream reads the step may still make, from the job's wave on
        (each job reads one page or batch, when it is not cached): what its read's `Building.ahead` says.

        The one wave loop of the service: list pages, topic pages, batches of posts and posts' topics."""
        for start in range(0, len(jobs), size):
            wave = jobs[start : start + size]
            futures = [self.submit(run, job, len(jobs) - start) for job in wave]
            for job, future in zip(wave, futures, strict=True):
                if not wait([future], timeout=None if caller is None else max(caller.left(), 0.0)).done:
                    for rest in futures:
                        rest.cancel()
                    raise FutureTimeout
                yield job, future


class Turns:
    """Which requests may wait for a window now: `most` of the process's, one per client (`WAITERS`). A
    request that may not wait is refused at once, as before waiting existed."""

    def __init__(self, most: int = WAITERS):
        self.most = most
        self._waiting: set[str] = set()
        self._lock = threading.Lock()

    def wait(self, caller: Caller, until: float) -> bool:
        """Until `until` (`time.monotonic()`), with its client's turn and without its slot, when that leaves
        `WAIT_MARGIN` of the deadline; whether `caller` waited and may go on."""
        if until > caller.deadline - WAIT_MARGIN:
            return False
        with self._lock:
            if caller.client in self._waiting or len(self._waiting) >= self.most:
                return False
            self._waiting.add(caller.client)
        try:
            caller.give_back()
            time.sleep(max(until - time.monotonic(), 0.0))
        finally:
            with self._lock:
                self._waiting.discard(caller.client)
        return not caller.admission.ended


# --- the forums' budgets --------------------------------------------------------------------------------------
#
# Upstream requests per forum counted as Discourse counts the bridge's address
# (`lib/middleware/request_tracker.rb`: `max_reqs_per_ip_per_10_seconds` 50, `max_reqs_per_ip_per_minute` 200): at
# most FEEDBRIDGE_FORUM_BUDGET_10S in any 10 seconds and FEEDBRIDGE_FORUM_BUDGET in any 60, as the forum counts
# them, on arrival (moving windows, `feedbridge.store.control.Windows`, holding each request `LEEWAY` past their
# length: shared through Redis, split between the workers, each held to its part), below core's, so the bridge is
# never the client that gets the forum to rate-limit it for everyone. The forums of one multisite host
# (FEEDBRIDGE_MULTISITE) share these windows, as core's per-IP limiters are global to the host (`RateLimiter` with
# `global: true`). One client (see `feedbridge.web.context`) may spend at most a third of each of them
# (`CLIENT_SHARE`). Signed-in requests have the key's own budget (under core's `max_user_api_reqs_per_minute` 20
# and `_per_day` 2,880 for a User API key; every admin API key of a site shares one `max_admin_api_reqs_per_minute`
# 60) and are counted in the forum's windows too, their client's share of them included: core counts them against
# the bridge's address as well, and however many keys one client holds, it spends at most its share. Past any:
# `BridgeBusy`, a 503 with Retry-After = when the refusing window has room again, or the stale copy; a cold build
# already under way waits for the room instead, when it comes within the request's deadline
# (`feedbridge.feeds.admission.gate`, `CachePolicy`), one request per client at a time (`Turns`).

CLIENT_SHARE = 3
"""One client may spend at most 1/CLIENT_SHARE of each of a forum's windows (10 s, minute)."""
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
@dataclass(frozen=True, slots=True)
class _Span:
    """One window a request is counted in: at most `limit` in any `windows.seconds`, for `ids`; a client's
    share of one when `of` (the window's whole limit) is set."""

    windows: Windows
    limit: int
    ids: tuple[str, ...]
    kind: str  # what the refusal calls the requests: "upstream requests", "signed-in requests"
    of: int = 0


_LAST = {BURST: "10 seconds", 60: "minute", DAY: "day"}
_PER = {BURST: "in any 10 seconds", 60: "a minute"}


class ForumBudget:
    """Upstream requests per forum in any 10 s (`per_burst`, over `bursts`), minute (`per_window`, over
    `windows`) and day (`per_day`), and each client's share of the 10 s's and the minute's (over `shares`).

    The share holds in every window a client could fill: a share of the minute alone let one client's 37
    cold feeds fill the 10 s window (40) in a moment, and every other client's cold read got 503 for up to
    10 s, a `content=full` build a copy without its first posts. One cold `content=full` feed is a list
    and 30 topic pages, more than a third of 40, so a cold build under way waits for the window's room
    when it comes within the request's deadline (`feedbridge.feeds.admission.gate`) instead of being refused.

    Every window is split between the instance's `processes` (`Windows.each`, `processes`), so its workers together
    stay within it without Redis, and the forum's hold each worker to its part with Redis too
    (`Windows.each`, `capped`): a worker that spent the whole window through Redis left its sibling's part
    untouched, and once Redis failed the sibling spent it again, on top. The forum's windows hold each
    request `LEEWAY` past their length (`Windows.each`, `leeway`), so the forum, counting later, sees no more than
    the budget either; a client's share is the bridge's own fairness, counted nowhere else, over the
    windows themselves, shared through Redis whichever worker serves the client. Every window is looked at
    before any is counted, so a client refused for the forum's sake keeps its share; a client counted and
    then refused because another filled a forum window in between has spent one of its share without a
    request, which errs towards the forum (as does a window counted before a later one refuses).
    """

    def __init__(self, windows: Windows, per_window: int, *, scope: str = "", share: int = CLIENT_SHARE,
                 per_day: int = 0, per_burst: int = 0, processes: int = 1, forum: ForumBudget | None = None,
                 per_member: bool = False, address: Callable[[Forum], str] | None = None):
        """`scope` keeps a budget's counters apart from another's (the credentialed requests' own,
        `feedbridge.feeds.request.signing`), `share` is what part of it one client may spend, `per_day` and
        `per_burst`, when set, bound the requests of any 24 hours and any 10 seconds too, and `forum` is the
        budget whose forum-wide windows these requests are counted in as well (the public one, for signed-in
        requests: core counts a key's requests against the bridge's address too). `per_member`: each member's key has
        windows of its own, as core counts each key, and this budget is only spent as one member's (`of`).
        `address` names the windows a forum's
        requests are counted in (`Settings.address_of`: one for the forums of a multisite host, which core
        counts in one per-IP window); by default each forum's own."""
        forum_wide = {"processes": processes, "leeway": LEEWAY, "capped": True}
        self.shares, self.windows, days, bursts, burst_shares = windows.each(
            {"processes": processes}, forum_wide, {**forum_wide, "seconds": DAY}, {**forum_wide, "seconds": BURST},
            {"processes": processes, "seconds": BURST})
        self.per_window = per_window
        self.share = max(per_window // share, 1)
        self.scope = scope
        self.per_day = per_day
        self.per_burst = per_burst
        self.days = days if per_day else None
        self.bursts = bursts if per_burst else None
        self.burst_shares = burst_shares if per_burst else None
        self.burst_share = max(per_burst // share, 1)
        self.forum = forum
        self.who: str | None = None
        self.kind = ("requests with your key" if per_member else "signed-in requests" if forum is not None
                     else "upstream requests")
        self.address: Callable[[Forum], str] = address or (lambda f: f.key)

    def _counted(self, forum: Forum, caller: Caller) -> list[_Span]:
        """Every window a request of `caller` to `forum` is counted in: its client's shares, shortest first,
        then this budget's own windows, then all of those of the budget it is counted in as well (`forum`),
        its client's shares of them included. So a client's signed-in or members' requests spend its share of
        the forum's windows as its public ones do: a client holding a few members' keys (each connect makes
        one) had each key's own budget, and together they filled the forum's 10 s window, so that every other
        client's cold feed got 503 (RELIABILITY.md row 52)."""
        counted = self.forum._counted(forum, caller) if self.forum is not None else []
        if self.per_window <= 0:
            return counted
        mine = (f"{self.scope}client", self.address(forum), caller.client, *self._whose())
        whole = (f"{self.scope}forum", self.address(forum), *self._whose())
        shares = [_Span(self.shares, self.share, mine, self.kind, of=self.per_window)]
        wholes = [_Span(self.windows, self.per_window, whole, self.kind)]
        if self.bursts is not None and self.burst_shares is not None:
            shares.insert(0, _Span(self.burst_shares, self.burst_share, mine, self.kind, of=self.per_burst))
            wholes.insert(0, _Span(self.bursts, self.per_burst, whole, self.kind))
        if self.days is not None:
            wholes.append(_Span(self.days, self.per_day, whole, self.kind))
        return shares + wholes + counted

    def spend(self, forum: Forum, caller: Caller) -> None:
        """One request to `forum` for `caller`, or BridgeBusy when a window (or the caller's share) is full."""
        spans = self._counted(forum, caller)
        for span in spans:
            if not span.windows.test(span.limit, *span.ids):
                self._busy(forum, span)
        for span in spans:
            if not span.windows.hit(span.limit, *span.ids):
                self._busy(forum, span)

    def of(self, who: str) -> ForumBudget:
        """This budget as spent by the member `who` (`feedbridge.feeds.members.personal`): the same windows,
        counted under their key's own names. A copy, so that the windows are shared, never made again (each
        `Windows` holds its own in-process counts)."""
        mine = copy.copy(self)
        mine.who = who
        return mine

    def _whose(self) -> tuple[str, ...]:
        return () if self.who is None else (self.who,)

    def could_take(self, forum: Forum, caller: Caller, reads: int, seconds: float) -> bool:
        """Whether every window `caller`'s requests to `forum` are counted in could take `reads` more within
        `seconds` (`Windows.capacity`): if one cannot, a build waiting for room would be refused all the
        same, later, so it is refused now."""
        return all(span.windows.capacity(span.limit, seconds) >= reads for span in self._counted(forum, caller))

    def _busy(self, forum: Forum, span: _Span) -> NoReturn:
        # Exact, for a read that waits (a tenth of a second at least: the room seen gone again is no reason
        # to spin); in whole seconds, one at least, for a reader.
        retry = min(max(span.windows.reset_in(span.limit, *span.ids), 0.1), float(span.windows.held))
        shown = max(retry, 1.0)
        if span.of:
            per = _PER.get(span.windows.seconds, f"in any {span.windows.seconds} seconds")
            raise BridgeBusy(f"this client has used its share ({span.limit}) of the {span.of} {span.kind} {per} "
                             f"the bridge makes to {forum.key}; retry in {shown:.0f}s", retry_after=retry)
        last = _LAST.get(span.windows.seconds, f"{span.windows.seconds} seconds")
        shared = "" if span.ids[1] == forum.key else f" and the forums on its multisite host ({span.ids[1]})"
        raise BridgeBusy(f"the bridge has made its {span.limit} {span.kind} of the last {last} to "
                         f"{forum.key}{shared}; retry in {shown:.0f}s", retry_after=retry)
