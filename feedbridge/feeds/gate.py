"""The one door to the forums: every request the bridge sends upstream passes here, whatever it reads.

What protects a forum from the bridge (its own Retry-After, the cold slots, the per-forum budget) holds
only if no read can go around it, so lists, topic pages, the directory and post feeds all fetch through
one `Gate` rather than each through the fetcher.
"""

from __future__ import annotations

from dataclasses import dataclass

from feedbridge import metrics
from feedbridge.config import Forum
from feedbridge.errors import BridgeBusy, UpstreamRateLimited
from feedbridge.feeds.callers import ForumBudget, current
from feedbridge.feeds.policy import CachePolicy, refused
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
        try:
            self.waits.check(forum)
        except UpstreamRateLimited:
            metrics.refused("retry_after")
            raise
        caller = current()
        if caller is not None:
            self.policy.take_slot()
            try:
                self.budget.spend(forum, caller)
            except BridgeBusy as exc:
                metrics.refused("budget")
                raise refused(exc) from None
        try:
            return self.fetcher.get(forum, url, etag, last_modified, signed=self.signed)
        except UpstreamRateLimited as exc:
            self.waits.remember(forum, exc)
            raise
