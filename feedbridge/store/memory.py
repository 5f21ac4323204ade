"""The in-process store and single-flight (`feedbridge.store.protocols`): what one process needs to cache and
to fetch once.

The store keeps entries (`feedbridge.store.entries`) until their stale TTL runs out; the caller decides
what "fresh" means. Its memory is segmented so that one-off URLs cannot evict the copies readers poll.
`SingleFlight` makes concurrent requests for the same cold key share one fetch.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from feedbridge.errors import UpstreamTimeout

T = TypeVar("T")


PROBATION_SHARE = 0.25
"""Of the byte bound, what new entries may take when the protected segment needs the rest (see MemoryStore)."""
SWEEP_INTERVAL = 30.0


@dataclass(slots=True)
class _Item:
    value: Any
    expires: float  # time.monotonic()
    size: int


class MemoryStore:
    """Thread-safe, per-item TTL, bounded by the approximate bytes it holds: a segmented LRU.

    Why segments: feed readers poll the same few URLs for hours, and their last good copies are what the
    service serves when the forum fails; a flood of cheap distinct URLs (`?q=-x1`, `?q=-x2`, ...) must not
    evict them. So an entry starts in the *probation* segment and moves to the *protected* one only when it
    is stored again, as a newer version (a later `stored_at`), while still held: a feed rebuilt or a page
    revalidated after its cache TTL, which is what polled URLs do and one-off URLs never do. Values without
    a `stored_at` never move up.

    Eviction takes the least recently used probation entry first, and touches the protected segment only
    while probation holds at most `PROBATION_SHARE` of the bound (then protected's least recently used entry
    drops back to probation for a last chance). A flood therefore churns a quarter of the memory, while
    new entries may still use everything protected does not need. To push a copy out of the protected
    segment an attacker must get its own URLs promoted, i.e. keep each alive in probation across a whole
    cache TTL and request it again after: at most a quarter of the bound per TTL.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._probation: OrderedDict[str, _Item] = OrderedDict()
        self._protected: OrderedDict[str, _Item] = OrderedDict()
        self._bytes = {"probation": 0, "protected": 0}
        self._lock = threading.Lock()
        self._swept = time.monotonic()

    def get(self, key: str) -> Any | None:
        now = time.monotonic()
        with self._lock:  # the hot path of every hit: two dict lookups at most, no loop
            segment, name = self._protected, "protected"
            item = segment.get(key)
            if item is None:
                segment, name = self._probation, "probation"
                item = segment.get(key)
                if item is None:
                    return None
            if item.expires <= now:
                del segment[key]
                self._bytes[name] -= item.size
                return None
            segment.move_to_end(key)
            return item.value

    def set(self, key: str, value: Any, ttl: float) -> None:
        if ttl <= 0:
            return
        size = _sizeof(value)
        if size > self.max_bytes:  # larger than the whole cache: not worth keeping
            return
        now = time.monotonic()
        with self._lock:
            old, was = self._pop(key, now)
            promote = old is not None and (was == "protected" or _newer(value, old.value))
            self._put("protected" if promote else "probation", key, _Item(value, now + ttl, size))
            self._evict(now)

    def delete(self, key: str) -> None:
        with self._lock:
            self._pop(key, time.monotonic())

    def __len__(self) -> int:
        """Entries held (expired ones included until they are swept or evicted)."""
        with self._lock:
            return len(self._probation) + len(self._protected)

    def held(self) -> tuple[int, int]:
        """Entries held and the bytes they are counted at, against `max_bytes` (`feedbridge.metrics`)."""
        with self._lock:
            return len(self._probation) + len(self._protected), self._bytes["probation"] + self._bytes["protected"]

    def _segment(self, name: str) -> OrderedDict[str, _Item]:
        return self._protected if name == "protected" else self._probation

    def _put(self, name: str, key: str, item: _Item) -> None:
        self._segment(name)[key] = item
        self._bytes[name] += item.size

    def _pop(self, key: str, now: float) -> tuple[_Item | None, str | None]:
        for name in ("protected", "probation"):
            item = self._segment(name).pop(key, None)
            if item is not None:
                self._bytes[name] -= item.size
                return (item, name) if item.expires > now else (None, None)
        return None, None

    def _evict(self, now: float) -> None:
        if now - self._swept > SWEEP_INTERVAL:  # expired entries would otherwise hold their bytes until evicted
            self._swept = now
            for name in ("protected", "probation"):
                segment = self._segment(name)
                for key in [k for k, item in segment.items() if item.expires <= now]:
                    self._bytes[name] -= segment.pop(key).size
        while self._bytes["probation"] + self._bytes["protected"] > self.max_bytes:
            if self._probation and (self._bytes["probation"] > self.max_bytes * PROBATION_SHARE or not self._protected):
                _, item = self._probation.popitem(last=False)
                self._bytes["probation"] -= item.size
            else:
                key, item = self._protected.popitem(last=False)
                self._bytes["protected"] -= item.size
                self._put("probation", key, item)


def _newer(value: Any, old: Any) -> bool:
    """A new version of a cached copy (rebuilt, revalidated): its `stored_at` is later than the held one's."""
    stored, held = getattr(value, "stored_at", None), getattr(old, "stored_at", None)
    return stored is not None and held is not None and stored > held


def _sizeof(value: Any) -> int:
    """An entry's `size` is what its parsed objects hold (`feedbridge.store.entries`); the key, the item, the
    dict slot and the entry's own fields add about 400 bytes more (tracemalloc), 512 counted."""
    return int(getattr(value, "size", 64)) + 512


class _Call:
    __slots__ = ("done", "result", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class SingleFlight:
    """Concurrent callers with the same key wait for the first one's result instead of repeating its work.

    `ended` counts the calls that have ended, of any key: a caller that read it before looking at the store
    knows, when it comes to lead a call, whether one may have stored the result since it looked
    (`CachePolicy.get`), and reads the store again only then."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, _Call] = {}
        self.ended = 0

    def busy(self, key: str) -> bool:
        """Whether a call for `key` is under way in this process (a new caller would wait for it)."""
        with self._lock:
            return key in self._calls

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
            shared: T = call.result
            return shared
        try:
            result = call.result = fn()
            return result
        except BaseException as exc:
            call.error = exc
            raise
        finally:
            with self._lock:
                del self._calls[key]
                self.ended += 1
            call.done.set()
