"""Upstream requests per forum counted as Discourse counts the bridge's address
(`lib/middleware/request_tracker.rb`: `max_reqs_per_ip_per_10_seconds` 50, `max_reqs_per_ip_per_minute` 200): at
most FEEDBRIDGE_FORUM_BUDGET_10S in any 10 seconds and FEEDBRIDGE_FORUM_BUDGET in any 60, as the forum counts
them, on arrival (moving windows, `feedbridge.store.control.Windows`, holding each request `LEEWAY` past their
length: shared through Redis, split between the workers, each held to its part), below core's, so the bridge is
never the client that gets the forum to rate-limit it for everyone. The forums of one multisite host
(FEEDBRIDGE_MULTISITE) share these windows, as core's per-IP limiters are global to the host (`RateLimiter` with
`global: true`). One client (see `feedbridge.web.context`) may spend at most a third of each of them
(`CLIENT_SHARE`). Signed-in requests have the key's own budget (under core's `max_user_api_reqs_per_minute` 20
and `_per_day` 2,880 for a User API key; every admin API key of a site shares one `max_admin_api_reqs_per_minute`
60) and are counted in the forum's windows too, their client's share of them included: core counts them against
the bridge's address as well, and however many keys one client holds, it spends at most its share. Past any:
`BridgeBusy`, a 503 with Retry-After = when the refusing window has room again, or the stale copy; a cold build
already under way waits for the room instead, when it comes within the request's deadline
(`feedbridge.feeds.admission.gate`, `CachePolicy`), one request per client at a time (`Turns`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from feedbridge.config import Forum
from feedbridge.errors import BridgeBusy
from feedbridge.feeds.admission.callers import Caller
from feedbridge.store.control import Windows

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

    Every window is split between the instance's `processes` (`Windows.split`), so its workers together
    stay within it without Redis, and the forum's hold each worker to its part with Redis too
    (`Windows.capped_to_share`): a worker that spent the whole window through Redis left its sibling's part
    untouched, and once Redis failed the sibling spent it again, on top. The forum's windows hold each
    request `LEEWAY` past their length (`Windows.lasting`), so the forum, counting later, sees no more than
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
        self.shares = windows.split(processes)
        self.windows = self.shares.lasting(LEEWAY).capped_to_share()
        self.per_window = per_window
        self.share = max(per_window // share, 1)
        self.scope = scope
        self.per_day = per_day
        self.per_burst = per_burst
        self.days = self.windows.spanning(DAY) if per_day else None
        self.bursts = self.windows.spanning(BURST) if per_burst else None
        self.burst_shares = self.shares.spanning(BURST) if per_burst else None
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
