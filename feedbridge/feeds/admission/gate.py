"""The one door to the forums: every request the bridge sends upstream passes here, whatever it reads.

What protects a forum from the bridge (its own Retry-After, the cold slots, the per-forum budget) holds
only if no read can go around it, so lists, topic pages, the directory and post feeds all fetch through
one `Gate` rather than each through the fetcher. A batch run (the static build) passes the same gate, with
a `Pace` of its own: nobody waits for any one of its pages, so it can afford to be gentler than the web
service, and a wait the forum asked for (its `Retry-After`) is one the gate remembers (`ForumWaits`, below)
either way.

A web request's read that a window of the budget refuses is refused at once when it is the request's first
(it has spent nothing, and its 503 costs nobody anything). A later one, of a cold build under way, may
wait for the window's room instead: a `content=full` feed's list and 30 topic pages are more than a
client's third of the forum's 10 s window, and a build refused one read is never stored, so what it spent
would be lost. Waiting is not done here, inside the flights of the pages being read (whoever joined them
would wait on this client's share too, holding their slots): the read raises `RoomSoon`, the build gives
its attempt up, and `CachePolicy` waits outside every flight and makes it again from what is cached by then.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from feedbridge import metrics
from feedbridge.config import Credential, Forum
from feedbridge.errors import BridgeBusy, KeyRefused, RoomSoon, UpstreamRateLimited, UpstreamRefused
from feedbridge.feeds.admission.callers import WAIT_MARGIN, Caller, ForumBudget
from feedbridge.feeds.admission.policy import OUTSIDE, Building, CachePolicy
from feedbridge.store import keys
from feedbridge.store.control import ControlStore
from feedbridge.upstream.fetcher import Exchanged, Fetched, Fetcher

DEFAULT_WAIT = 60.0
"""Seconds waited after a 429 that names no time."""


class ForumWaits:
    """What each forum asked the bridge to wait for: its last 429's `Retry-After`, remembered so that nothing is
    sent to it until then. Kept in the control store (`feedbridge.store.control`), so every worker and instance
    behind one Redis honours it, and no flood of readers' requests can push it out. A wait is capped at
    FEEDBRIDGE_RETRY_AFTER_MAX when it is stored and again when it is read: a Redis shared with another version
    could hold a longer one, and a forum must not be able to silence the bridge for a year."""

    def __init__(self, control: ControlStore, longest: float, hosts: Mapping[str, str] | None = None):
        """`hosts`: each forum of a multisite host (FEEDBRIDGE_MULTISITE) by key, and the host's name: a wait
        core asked of the bridge's address (`by_address`) holds for every site of the host, which were each
        asked a request certain to be refused before."""
        self.control = control
        self.longest = longest
        self.hosts = hosts or {}
        self._made: dict[str, tuple[str, ...]] = {}  # only configured forums are fetched from: a few keys

    def _keys(self, forum: Forum) -> tuple[str, ...]:
        """The forum's wait's key, and its host's: made once per forum, not digested again for every fetch."""
        made = self._made.get(forum.key)
        if made is None:
            host = self.hosts.get(forum.key)
            own = keys.ratelimit(forum.base_url)
            made = self._made[forum.key] = (own,) if host is None else (own, keys.ratelimit(f"multisite {host}"))
        return made

    def check(self, forum: Forum) -> None:
        """UpstreamRateLimited, with what is left of the wait, while `forum` (or its address) asked us to wait."""
        now = time.time()
        for key in self._keys(forum):
            until = self.control.get(key)
            if until is not None and now < until <= now + self.longest:
                wait = until - now
                raise UpstreamRateLimited(f"{forum.key} asked us to wait; retry in {wait:.0f}s", retry_after=wait)

    def remember(self, forum: Forum, exc: UpstreamRateLimited) -> None:
        wait = min(DEFAULT_WAIT if exc.retry_after is None else exc.retry_after, self.longest)
        for key in self._keys(forum)[: 2 if exc.by_address else 1]:
            self.control.set(key, time.time() + wait, wait)


@dataclass(frozen=True, slots=True)
class Gate:
    """`signed`: the requests carry the forum's key (the private scope, `feedbridge.feeds.request.signing`), and
    are charged to `budget`, the key's own; `policy` is the one whose cold slots they take. `member`: the
    requests carry that member's key instead (the member scope, `feedbridge.feeds.members.personal`), and
    the forum's refusal of it is `KeyRefused`, which no stale copy answers: the route finds out why."""

    fetcher: Fetcher
    waits: ForumWaits
    policy: CachePolicy
    budget: ForumBudget
    signed: bool
    member: Credential | None = None
    pace: Pace | None = None

    def fetch(self, forum: Forum, url: str, etag: str | None = None, last_modified: str | None = None, *,
              caller: Caller | None, building: Building = OUTSIDE, pooled: bool = False,
              until: float | None = None) -> Fetched:
        """Every upstream request goes through here: nothing is sent to a forum that asked us to wait, and a
        web request's fetches (`caller`, None outside one) take its slot, are charged to the forum's budget (a
        refusal marks the builds of `building`) and end by its deadline (`DeadlinePassed`), but for `pooled`
        work, which the request stops waiting for at its deadline and which goes on to keep what it read for
        the next reader (`CallerPool.waves`); by `until` too when it comes sooner (`Read.hurried`); a batch run's
        go at its `pace`."""
        until = None if caller is None or pooled else caller.deadline if until is None else min(until, caller.deadline)
        if self.pace is not None:  # which sits out the forum's waits itself, just before `send`
            return self.pace.paced(forum, url, self.waits, lambda: self._fetch(forum, url, etag, last_modified, caller,
                                                                                building, until, waited=True))
        return self._fetch(forum, url, etag, last_modified, caller, building, until)

    def _fetch(self, forum: Forum, url: str, etag: str | None, last_modified: str | None,
               caller: Caller | None, building: Building, until: float | None, waited: bool = False) -> Fetched:
        self._admit(forum, caller, building, waited)
        credential = self.member
        try:
            return self.fetcher.get(forum, url, etag, last_modified, signed=self.signed, credential=credential,
                                    until=until)
        except UpstreamRateLimited as exc:
            self.waits.remember(forum, exc)
            raise
        except UpstreamRefused as exc:
            if credential is not None and exc.upstream_status in (401, 403):
                raise KeyRefused(f"{forum.key} refused {url} to your key ({exc.message})") from None
            raise

    def send(self, forum: Forum, method: str, url: str, body: dict[str, str] | None = None, *,
             caller: Caller | None) -> Exchanged:
        """A request that reads no page (the User API key handshake's, `feedbridge.feeds.members.handshake`), through
        the same waits, slot and budget, without any key."""
        self._admit(forum, caller, OUTSIDE)
        try:
            return self.fetcher.exchange(forum, method, url, body)
        except UpstreamRateLimited as exc:
            self.waits.remember(forum, exc)
            raise

    def _admit(self, forum: Forum, caller: Caller | None, building: Building, waited: bool = False) -> None:
        """The forum's waits (unless a batch run's `Pace` has just `waited` them out), then a web request's slot
        and budget."""
        try:
            if not waited:
                self.waits.check(forum)
        except UpstreamRateLimited:
            metrics.refused("retry_after")
            raise
        if caller is not None:
            self.policy.take_slot(caller, forum=forum.key, building=building)
            try:
                self.budget.spend(forum, caller)
            except BridgeBusy as exc:
                soon = self._room_soon(forum, caller, exc, building)
                if soon is None:
                    metrics.refused("budget")
                raise building.refused(soon or exc) from None
            caller.admission.spent = True

    def _room_soon(self, forum: Forum, caller: Caller, busy: BridgeBusy, building: Building) -> RoomSoon | None:
        """`busy` as the room its build may wait for: only for a read of a cold build under way (the request
        was charged before; no build it is part of holds a copy to answer with, or was refused outright),
        when the room comes `WAIT_MARGIN` before the deadline and every window could take what is left of
        the build's step by then (`ForumBudget.could_take`: else the build would be refused all the same,
        later)."""
        wait = busy.retry_after or 0.0
        within = caller.left() - WAIT_MARGIN
        if (not caller.admission.spent or not building.waitable() or wait > within
                or not self.budget.could_take(forum, caller, building.ahead, within)):
            return None
        return RoomSoon(busy.message, wait, time.monotonic() + wait)


@dataclass
class Pace:
    """How gently a batch run reads each forum: `concurrency` requests at a time, starts spaced by `delay`,
    a Retry-After of up to `max_wait` seconds sat out (by every request to that forum, not just the one
    that got the 429) and the request tried once more; a longer one, or a second 429, ends the run's
    requests to that forum. `on_wait(forum, seconds)` is told before a 429's wait is sat out, so the run
    can say why it is quiet."""

    concurrency: int = 2
    delay: float = 0.5
    max_wait: float = 30.0
    on_wait: Callable[[Forum, float], None] | None = None
    _forums: dict[str, _Turns] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def paced(self, forum: Forum, url: str, waits: ForumWaits, send: Callable[[], Fetched]) -> Fetched:
        """`send()` for `url` in one of the forum's turns, after what is left of a short wait it asked for
        (`waits`, where the gate remembers every 429); once more after a short 429."""
        with self._lock:
            turns = self._forums.setdefault(forum.key, _Turns(threading.Semaphore(self.concurrency)))
        for attempt in (1, 2):
            with self._turn(turns):
                if turns.gave_up:  # decided while this request waited for its turn
                    raise UpstreamRateLimited(turns.gave_up)
                self._sit_out(forum, waits)
                try:
                    return send()
                except UpstreamRateLimited as exc:
                    if turns.gave_up:
                        raise
                    wait = exc.retry_after or 0.0
                    if attempt == 2 or wait > self.max_wait:
                        turns.gave_up = (f"{forum.key} rate-limited us (429, Retry-After {wait:.0f}s); "
                                         "no more requests to it in this run")
                        raise UpstreamRateLimited(turns.gave_up, retry_after=wait) from None
                    if self.on_wait:
                        self.on_wait(forum, wait)
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _sit_out(self, forum: Forum, waits: ForumWaits) -> None:
        """What is left of a wait the forum asked for, when it is no longer than `max_wait`; a longer one is
        the gate's refusal (`ForumWaits.check`)."""
        while True:
            try:
                waits.check(forum)
                return
            except UpstreamRateLimited as exc:
                if exc.retry_after is None or exc.retry_after > self.max_wait:
                    raise
                time.sleep(exc.retry_after)

    @contextmanager
    def _turn(self, turns: _Turns) -> Iterator[None]:
        """One of the forum's `concurrency` turns, starting no sooner than `delay` after the last one did."""
        with turns.slots:
            with self._lock:
                start = max(time.monotonic(), turns.next_start)
                turns.next_start = start + self.delay
            time.sleep(max(start - time.monotonic(), 0.0))
            yield


@dataclass
class _Turns:
    """One forum's turns in a batch run, and why the run stopped asking it, once it has."""

    slots: threading.Semaphore
    next_start: float = 0.0
    gave_up: str | None = None
