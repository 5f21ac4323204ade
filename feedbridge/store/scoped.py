"""A scope of its own inside a shared store, control store or single-flight: the private feeds' one, and
the members' (one part of it per member).

What a credentialed request reads (pages, feeds, topics, failures, a forum's `Retry-After`, its source
decision) is kept under keys no public request can name: every key's kind gets the scope in front
(`page:…` becomes `private-page:…`), so the same URL has two entries, one per scope, in memory and in
Redis alike, and a public request can neither read a private copy nor join a private fetch. Wrapping the
shared backends, rather than passing a scope to every call that makes a key, makes that hold for every
key the service will ever make. The control store's bounds are per kind, so the private kinds have
their own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from feedbridge.store.control import ControlStore
from feedbridge.store.protocols import Flight

T = TypeVar("T")


def scoped(scope: str, key: str, within: str = "") -> str:
    kind, colon, rest = key.partition(":")
    return f"{scope}-{kind}{colon}{within}{rest}"


class ScopedStore:
    """A `Store` or `ControlStore` whose keys all carry `scope`, and after their kind `within` (a member's id
    and "/", `feedbridge.feeds.members.personal`: one scope, a part of it per member, and the kinds, which the
    control store bounds, as few as the private scope's)."""

    def __init__(self, inner: ControlStore, scope: str, within: str = ""):
        self.inner = inner
        self.scope = scope
        self.within = within

    def get(self, key: str) -> Any | None:
        return self.inner.get(scoped(self.scope, key, self.within))

    def set(self, key: str, value: Any, ttl: float) -> None:
        self.inner.set(scoped(self.scope, key, self.within), value, ttl)

    def delete(self, key: str) -> None:
        self.inner.delete(scoped(self.scope, key, self.within))


class ScopedFlight:
    """A `Flight` whose keys all carry `scope` (and `within`, as `ScopedStore`'s)."""

    def __init__(self, inner: Flight, scope: str, within: str = ""):
        self.inner = inner
        self.scope = scope
        self.within = within

    def do(self, key: str, fn: Callable[[], T], wait: float, reread: Callable[[], T | None]) -> T:
        return self.inner.do(scoped(self.scope, key, self.within), fn, wait, reread)

    def busy(self, key: str) -> bool:
        return self.inner.busy(scoped(self.scope, key, self.within))

    @property
    def ended(self) -> int:
        return self.inner.ended
