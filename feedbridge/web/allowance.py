"""Each client's allowance of the worker's CPU, for the work that sends nothing upstream.

A feed rebuilt from cached pages (a new `q=` of a long topic, another format), an `.html` view or a front
page preview asks the forum nothing, so neither the forum's budget nor the cold slots apply to it; yet a
500-post topic of long posts costs a second or more of CPU per variant, and one client sending such
requests back to back kept a worker busy for good (issue #31, item 2). So every request that builds (not
a cached hit: those are never refused) is charged the CPU time it took, and a client that has spent
`FEEDBRIDGE_CPU_ALLOWANCE` seconds in the last minute gets `429` + Retry-After (or the last good copy)
until its moving window has room again.

- The window is `limits`' moving window, the budgets' own (`store.control.Windows`), charged after the fact
  in units of `UNIT`: what a request spent is known only once it is done, so a request is admitted while the
  client has any room left, and its cost is counted whole, up to the window's limit (`Windows.charge`:
  `limits` refuses a cost larger than the room left without counting any of it, which would let the most
  expensive request through for free).
- Per process: the CPU protected is each worker's own, and a client spending in two workers holds two
  event loops. The windows of clients that stopped spending are cleared (`store.control.IdleWindows`), so a flood of
  addresses costs a bounded map.
- The CPU is the request's own (`feedbridge.feeds.admission.cpu.counting`): what its greenlet and its pool work ran,
  never what other requests ran while it waited on the forum or took its turn (`render.turns`). Counted
  across the thread, as it once was, a client whose cold feeds waited 6 s while another address computed
  was charged the other's 6 s and refused (issue 43, item 4).
- The client is the request's (`feedbridge.web.context.client`): its address, an IPv6 one's /64, so
  rotating addresses within a prefix buys no new allowance.
- A client builds at most its part of the cold slots at a time in a process (`callers.client_part`: 4 of the
  default 6); more get `429` (or the last good copy) at once. The window is tested as a request starts and
  charged as it ends, so requests sent together all found room: 100 rebuilds of a 12 MiB feed at once were
  all answered, 36 s of CPU charged as 20 and 2.5 GiB held together, another client's cached hits taking up
  to 17 s.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from flask import current_app, g, request

from feedbridge import metrics
from feedbridge.errors import CpuSpent
from feedbridge.feeds.admission.callers import client_part
from feedbridge.feeds.admission.cpu import counting
from feedbridge.store.control import WINDOW, Windows
from feedbridge.web.context import client, service

UNIT = 0.01
"""Seconds of CPU per unit counted in the window (a request costs at least one)."""


class CpuAllowance:
    """`seconds` of CPU per client in any `WINDOW` seconds, and `builds_at_once` things being built by one client
    at a time (its part of the cold slots, `callers.client_part`, so a reader fetching its new feeds together
    waits on no refusal the slots would not give it anyway); `seconds` 0 turns both off."""

    def __init__(self, seconds: float, builds_at_once: int):
        self.seconds = seconds
        self.builds_at_once = builds_at_once
        self.limit = max(math.ceil(seconds / UNIT), 1)
        self.windows = Windows(WINDOW)  # this process's own: the CPU it protects is its own
        self._building: dict[str, dict[str, int]] = {}  # client -> what it builds now -> its requests for it
        self._lock = threading.Lock()

    @property
    def on(self) -> bool:
        return self.seconds > 0

    def has_room(self, client: str) -> bool:
        return not self.on or self.windows.test(self.limit, client)

    def refusal(self, client: str) -> CpuSpent:
        """The error for a client without room: its message says how much it spent and when to come back."""
        metrics.refused("allowance")
        retry = min(max(self.windows.reset_in(self.limit, client), 1.0), float(WINDOW))
        return CpuSpent(f"this client has used its {self.seconds:g} s of the bridge's CPU a minute on pages and "
                        f"feeds built from what the bridge holds; retry in {retry:.0f}s", retry_after=retry)

    def charge(self, client: str, seconds: float) -> None:
        """Count `seconds` of CPU against the client, up to what its window has left."""
        if self.on:
            self.windows.charge(self.limit, max(math.ceil(seconds / UNIT), 1), client)

    @contextmanager
    def spending(self, client: str, what: str) -> Iterator[None]:
        """Around work a cache did not answer (`what`: the feed's or the page's key): CpuSpent at once when the
        client has no room, or `builds_at_once` other things being built, else the work, charged with the CPU it
        took, whatever its outcome. Its requests for one thing are one build: they join one flight."""
        if not self.has_room(client):
            raise self.refusal(client)
        if self.on:
            with self._lock:
                building = self._building.setdefault(client, {})
                if what not in building and len(building) >= self.builds_at_once:
                    metrics.refused("allowance")
                    raise CpuSpent(f"this client has {len(building)} pages and feeds being built at once already, "
                                   "the most it may; retry in 1s", retry_after=1.0)
                building[what] = building.get(what, 0) + 1
        try:
            with counting() as spent:
                try:
                    yield
                finally:
                    self.charge(client, spent())
        finally:
            if self.on:
                with self._lock:
                    building = self._building[client]
                    building[what] -= 1
                    if not building[what]:
                        del building[what]
                        if not building:
                            del self._building[client]


def allowance() -> CpuAllowance:
    """The app's allowance, made on first use from its settings (FEEDBRIDGE_CPU_ALLOWANCE, and
    FEEDBRIDGE_COLD_SLOTS for the builds at once)."""
    made: CpuAllowance | None = current_app.extensions.get(_EXTENSION)
    if made is None:
        settings = service().settings
        made = current_app.extensions.setdefault(
            _EXTENSION, CpuAllowance(settings.cpu_allowance, client_part(settings.cold_slots)))
    return made


_EXTENSION = "feedbridge.allowance"


@contextmanager
def charged() -> Iterator[None]:
    """The client's CPU allowance around a page's work (`CpuAllowance.spending`): `CpuSpent` (`429`) when the
    client has no room, else the work, charged. Once per request: work inside a charged page (the front
    page's preview, a kept page) is already counted by it. The pages that compute without a cache in front
    (the front page, the OPML, a feed's `.html` view, a connect's RSA decryption) all go through it."""
    if g.get("charged"):
        yield
        return
    g.charged = True
    try:
        with allowance().spending(client(), request.full_path):
            yield
    finally:
        g.charged = False
