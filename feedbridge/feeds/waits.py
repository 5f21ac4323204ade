"""What each forum asked the bridge to wait for: its last 429's `Retry-After`, remembered so that nothing
is sent to it until then.

Kept in the control store (`feedbridge.store.control`), so every worker and instance behind one Redis
honours it, and no flood of readers' requests can push it out. A wait is capped at
FEEDBRIDGE_RETRY_AFTER_MAX when it is stored and again when it is read: a Redis shared with another
version could hold a longer one, and a forum must not be able to silence the bridge for a year.
"""

from __future__ import annotations

import time

from feedbridge.config import Forum
from feedbridge.errors import UpstreamRateLimited
from feedbridge.store import keys
from feedbridge.store.control import ControlStore

DEFAULT_WAIT = 60.0
"""Seconds waited after a 429 that names no time."""


class ForumWaits:
    def __init__(self, control: ControlStore, longest: float):
        self.control = control
        self.longest = longest

    @staticmethod
    def key(forum: Forum) -> str:
        return keys.ratelimit(forum.base_url)

    def check(self, forum: Forum) -> None:
        """UpstreamRateLimited, with what is left of the wait, while `forum` has asked us to wait."""
        until = self.control.get(self.key(forum))
        now = time.time()
        if until is not None and now < until <= now + self.longest:
            wait = until - now
            raise UpstreamRateLimited(f"{forum.key} asked us to wait; retry in {wait:.0f}s", retry_after=wait)

    def remember(self, forum: Forum, exc: UpstreamRateLimited) -> None:
        wait = min(DEFAULT_WAIT if exc.retry_after is None else exc.retry_after, self.longest)
        self.control.set(self.key(forum), time.time() + wait, wait)
