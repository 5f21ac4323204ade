"""The one door to the forums: every request the bridge sends upstream passes here, whatever it reads.

What protects a forum from the bridge (its own Retry-After, the cold slots, the per-forum budget) holds
only if no read can go around it, so lists, topic pages, the directory and post feeds all fetch through
one `Gate` rather than each through the fetcher.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from feedbridge import metrics
from feedbridge.config import Credential, Forum
from feedbridge.errors import BridgeBusy, KeyRefused, UpstreamRateLimited, UpstreamRefused
from feedbridge.feeds.callers import ForumBudget, current
from feedbridge.feeds.policy import CachePolicy, refused
from feedbridge.feeds.waits import ForumWaits
from feedbridge.upstream.fetcher import Exchanged, Fetched, Fetcher


@dataclass(frozen=True, slots=True)
class Gate:
    """`signed`: the requests carry the forum's key (the signed-in twin, `feedbridge.feeds.signing`), and
    are charged to `budget`, the key's own; `policy` is the one whose cold slots they take. `member`: the
    requests carry the current member's key instead (the member scope, `feedbridge.feeds.personal`), and
    the forum's refusal of it is `KeyRefused`, which no stale copy answers: the route finds out why."""

    fetcher: Fetcher
    waits: ForumWaits
    policy: CachePolicy
    budget: ForumBudget
    signed: bool
    member: Callable[[], Credential] | None = None

    def fetch(self, forum: Forum, url: str, etag: str | None = None, last_modified: str | None = None) -> Fetched:
        """Every upstream request goes through here: nothing is sent to a forum that asked us to wait, and a
        web request's fetches (`callers.current`) take its slot and are charged to the forum's budget."""
        self._admit(forum)
        credential = None if self.member is None else self.member()
        try:
            return self.fetcher.get(forum, url, etag, last_modified, signed=self.signed, credential=credential)
        except UpstreamRateLimited as exc:
            self.waits.remember(forum, exc)
            raise
        except UpstreamRefused as exc:
            if credential is not None and exc.upstream_status in (401, 403):
                raise KeyRefused(f"{forum.key} refused {url} to your key ({exc.message})") from None
            raise

    def send(self, forum: Forum, method: str, url: str, body: dict[str, str] | None = None) -> Exchanged:
        """A request that reads no page (the User API key handshake's, `feedbridge.feeds.handshake`), through
        the same waits, slot and budget, without any key."""
        self._admit(forum)
        try:
            return self.fetcher.exchange(forum, method, url, body)
        except UpstreamRateLimited as exc:
            self.waits.remember(forum, exc)
            raise

    def _admit(self, forum: Forum) -> None:
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
