"""The one door to the forums: every request the bridge sends upstream passes here, whatever it reads.

What protects a forum from the bridge (its own Retry-After, the cold slots, the per-forum budget) holds
only if no read can go around it, so lists, topic pages, the directory and post feeds all fetch through
one `Gate` rather than each through the fetcher.

A web request's read that a window of the budget refuses is refused at once when it is the request's first
(it has spent nothing, and its 503 costs nobody anything). A later one, of a cold build under way, may
wait for the window's room instead: a `content=full` feed's list and 30 topic pages are more than a
client's third of the forum's 10 s window, and a build refused one read is never stored, so what it spent
would be lost. Waiting is not done here, inside the flights of the pages being read (whoever joined them
would wait on this client's share too, holding their slots): the read raises `RoomSoon`, the build gives
its attempt up, and `CachePolicy` waits outside every flight and makes it again from what is cached by then.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from feedbridge.config import Forum
from feedbridge.errors import BridgeBusy, RoomSoon, UpstreamRateLimited
from feedbridge.feeds.callers import WAIT_MARGIN, Caller, ForumBudget, ahead, current
from feedbridge.feeds.policy import CachePolicy, refused, waitable
from feedbridge.feeds.waits import ForumWaits
from feedbridge.upstream.fetcher import Fetched, Fetcher


@dataclass(frozen=True, slots=True)
class Gate:
    """`signed`: the requests carry the forum's key (the signed-in twin, `feedbridge.feeds.signing`), and
    are charged to `budget`, the key's own; `policy` is the one whose cold slots they take."""

    fetcher: Fetcher
    waits: ForumWaits
    policy: CachePolicy
    budget: ForumBudget
    signed: bool

    def fetch(self, forum: Forum, url: str, etag: str | None = None, last_modified: str | None = None) -> Fetched:
        """Every upstream request goes through here: nothing is sent to a forum that asked us to wait, and a
        web request's fetches (`callers.current`) take its slot and are charged to the forum's budget."""
        self.waits.check(forum)
        caller = current()
        if caller is not None:
            self.policy.take_slot()
            try:
                self.budget.spend(forum, caller)
            except BridgeBusy as exc:
                raise refused(self._room_soon(forum, caller, exc) or exc) from None
            caller.admission.spent = True
        try:
            return self.fetcher.get(forum, url, etag, last_modified, signed=self.signed)
        except UpstreamRateLimited as exc:
            self.waits.remember(forum, exc)
            raise

    def _room_soon(self, forum: Forum, caller: Caller, busy: BridgeBusy) -> RoomSoon | None:
        """`busy` as the room its build may wait for: only for a read of a cold build under way (the request
        was charged before; no build it is part of holds a copy to answer with, or was refused outright),
        when the room comes `WAIT_MARGIN` before the deadline and every window could take what is left of
        the build's step by then (`ForumBudget.could_take`: else the build would be refused all the same,
        later)."""
        wait = busy.retry_after or 0.0
        within = caller.left() - WAIT_MARGIN
        if (not caller.admission.spent or not waitable() or wait > within
                or not self.budget.could_take(forum, caller, ahead(), within)):
            return None
        return RoomSoon(busy.message, wait, time.monotonic() + wait)
