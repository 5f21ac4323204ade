"""Who asks and until when: the request-side half of the cache policy (what it may spend of a forum is
`feeds.admission.budget`).

- `Caller`: one web request, made once at its edge (`FeedService.serving`) and handed to all it runs. Its
  deadline (FEEDBRIDGE_REQUEST_DEADLINE) bounds every wait on top of a fetch (further pages, topic pages,
  another request's fetch); the service answers with what it has by then.
- `Admission`: what the request holds, shared by all it runs, pool work included: at most one cold slot
  (`feedbridge.feeds.admission.policy`), taken by its first read that goes upstream, and the refusals its reads met.
- `Turns`: which requests may wait for a window of the forums' budgets (`feeds.admission.budget`) now.
- `CallerPool`: the pool a request's reads run in, in waves, within its deadline.

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
from typing import Any, TypeVar

from feedbridge.feeds.admission.cpu import run_in

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
