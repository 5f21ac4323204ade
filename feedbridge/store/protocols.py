"""What the service needs of a cache and of a single-flight, whichever process or machine holds them.

`MemoryStore` and `SingleFlight` (`feedbridge.store.memory`) serve one process; `TieredStore` and
`RedisFlight` serve every worker and instance behind one Redis (`feedbridge.store.backends` picks).
Control state (budgets, remembered waits and failures, source decisions) has its own store of the same
`Store` protocol (`feedbridge.store.control`), so nothing in these can evict it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Store(Protocol):
    """Entries with a TTL each; what "fresh" means is the caller's (`feedbridge.feeds.admission.policy`)."""

    def get(self, key: str) -> Any | None: ...
    def set(self, key: str, value: Any, ttl: float) -> None: ...
    def delete(self, key: str) -> None: ...


class Flight(Protocol):
    """Runs `fn` for a key once among concurrent callers; the others get its result.

    `reread` returns the result from the shared store when another process produced it (the Redis
    flight's waiters use it; the in-process flight hands results over directly). `ended` counts this process's
    calls that have ended, of any key (`SingleFlight`).
    """

    @property
    def ended(self) -> int: ...
    def do(self, key: str, fn: Callable[[], T], wait: float, reread: Callable[[], T | None]) -> T: ...
    def busy(self, key: str) -> bool: ...
