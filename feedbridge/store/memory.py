"""The in-process store and single-flight: what a single process needs to cache and to fetch once.

The store keeps entries (`feedbridge.store.entries`) until their stale TTL runs out; the caller decides
what "fresh" means. `SingleFlight` makes concurrent requests for the same cold key share one fetch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from cachetools import TLRUCache

from feedbridge.errors import UpstreamTimeout

T = TypeVar("T")


class Store(Protocol):
    def get(self, key: str) -> Any | None: ...
    def set(self, key: str, value: Any, ttl: float) -> None: ...
    def delete(self, key: str) -> None: ...


class MemoryStore:
    """Thread-safe, per-item TTL, bounded by the approximate bytes it holds (LRU beyond that)."""

    def __init__(self, max_bytes: int):
        self._cache: TLRUCache = TLRUCache(
            maxsize=max_bytes, ttu=lambda _key, value, now: now + value[1], getsizeof=_sizeof, timer=time.monotonic
        )
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            item = self._cache.get(key)
        return None if item is None else item[0]

    def set(self, key: str, value: Any, ttl: float) -> None:
        if ttl <= 0:
            return
        with self._lock:
            try:
                self._cache[key] = (value, ttl)
            except ValueError:  # larger than the whole cache: not worth keeping
                pass

    def delete(self, key: str) -> None:
        with self._lock:
            self._cache.pop(key, None)


def _sizeof(item: tuple[Any, float]) -> int:
    # Per-entry overhead (dicts, dataclasses, the key) is roughly constant; 512 bytes keeps the bound honest.
    return int(getattr(item[0], "size", 64)) + 512


class _Call:
    __slots__ = ("done", "result", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class Flight(Protocol):
    """Runs `fn` for a key once among concurrent callers; the others get its result.

    `reread` returns the result from the shared store when another process produced it (the Redis
    flight's waiters use it; the in-process flight hands results over directly).
    """

    def do(self, key: str, fn: Callable[[], T], wait: float, reread: Callable[[], T | None]) -> T: ...


class SingleFlight:
    """Concurrent callers with the same key wait for the first one's result instead of repeating its work."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, _Call] = {}

    def do(self, key: str, fn: Callable[[], T], wait: float, reread: Callable[[], T | None] | None = None) -> T:
        with self._lock:
            call = self._calls.get(key)
            leader = call is None
            if leader:
                call = self._calls[key] = _Call()
        assert call is not None
        if not leader:
            if not call.done.wait(wait):
                raise UpstreamTimeout(f"waited {wait:g}s for another request to fetch the same page")
            if call.error is not None:
                raise call.error
            return call.result
        try:
            call.result = fn()
            return call.result
        except BaseException as exc:
            call.error = exc
            raise
        finally:
            with self._lock:
                del self._calls[key]
            call.done.set()
