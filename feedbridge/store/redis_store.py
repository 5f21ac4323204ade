"""The cache shared by every worker and instance: Redis behind a short-lived in-process first level.

Redis is an optimisation, never a dependency of a request: every call has sub-second socket timeouts
and no retries, and after one failure a circuit breaker skips Redis for a few seconds (one log line per
interval, not one per request), so a dead or hung Redis costs at most one short timeout now and then
while the in-process cache and the forum keep answering. The breaker closes by itself on the first
call that succeeds again.

A Redis that answers, but slowly, is failing too: once `SLOW_CALLS` calls in a row take `SLOW` each (a
healthy one answers in a millisecond), the breaker opens as for a timeout. In a row, not on average: a
worker busy with many requests resumes a call late now and then, which says nothing of Redis. Below the
read timeout every call waited it out, and a cold feed's 66 calls at 0.2 s each made it 11 s, past the
request's deadline, without a word in the log (RELIABILITY.md row 64).

Two things are no failure of Redis, and open no breaker:
- A Redis that is full (`maxmemory` with `noeviction`, as docs/redis.md advises) refuses writes and still
  answers reads: what is not written is kept in process (`TieredStore`, `RedisControl` write through), and
  the rest of Redis stays in use. Opening the breaker had turned off every read, lock and budget window of
  every instance for as long as the flood that filled it lived.
- A call that finds every one of the process's connections busy does without Redis, that once. A process
  opens at most `connections` (FEEDBRIDGE_REDIS_CONNECTIONS): one client's 200 concurrent requests had one
  worker hold 87 connections, past a small plan's client limit (20), which then refused every other worker
  and instance, and the worker itself, until it restarted (RELIABILITY.md row 61). `/healthz` says `busy`
  then, not that Redis does not answer (row 77).

Keys: `feedbridge:<schema>:<kind>:<32 hex>`. The schema (see `codec.SCHEMA`) changes with the value
format, and everything after the kind is a hash unless it already is one, so no request text reaches
Redis as a key.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from feedbridge.errors import DecodeError
from feedbridge.store import codec
from feedbridge.store.entries import FeedEntry, is_fresh
from feedbridge.store.memory import MemoryStore

log = logging.getLogger(__name__)
T = TypeVar("T")

PREFIX = f"feedbridge:{codec.SCHEMA}:"
MAX_VALUE_BYTES = 2 * 1024 * 1024
"""The largest value shared, beyond a feed's gzip (`RedisStore.set`)."""
CONNECT_TIMEOUT = 0.25
READ_TIMEOUT = 0.5
BREAKER_COOLDOWN = 5.0
LOG_INTERVAL = 60.0
_HASHED = re.compile(r"[0-9a-f]{32}")
_KIND = re.compile(r"[a-z]{1,20}")
SLOW = 0.1
"""Seconds a call to Redis may take; `SLOW_CALLS` in a row that take longer, and it counts as failing."""
SLOW_CALLS = 5
CONNECTIONS = 4
"""Connections one process opens to Redis at most, by default (FEEDBRIDGE_REDIS_CONNECTIONS)."""
ANSWERS_EVERY = 1.0
"""Seconds `/healthz` is told the last PING's answer before Redis is asked again (`RedisLink.health`)."""
Health = Literal["answers", "busy", "does not answer"]


def redis_key(key: str) -> str:
    """The Redis name for a store key: namespaced, versioned, and hashed unless already a digest."""
    kind, sep, rest = key.partition(":")
    if not sep or not _KIND.fullmatch(kind):
        kind, rest = "other", key
    if not _HASHED.fullmatch(rest):
        rest = hashlib.sha256(rest.encode()).hexdigest()[:32]
    return f"{PREFIX}{kind}:{rest}"


class RedisLink:
    """One redis-py client over a pool of at most `connections`, and the circuit breaker around it."""

    def __init__(self, url: str, cooldown: float | None = None, connections: int = CONNECTIONS):
        # redis-py's blocking pool holds the bound; the semaphore in front says when it is reached, which
        # the pool says only with the ConnectionError a dead Redis raises too.
        pool = redis.BlockingConnectionPool.from_url(
            url, max_connections=connections, timeout=CONNECT_TIMEOUT, socket_timeout=READ_TIMEOUT,
            socket_connect_timeout=CONNECT_TIMEOUT, retry=Retry(NoBackoff(), 0), health_check_interval=30,
        )
        self.client = redis.Redis(connection_pool=pool)
        self.cooldown = BREAKER_COOLDOWN if cooldown is None else cooldown
        self._slots = threading.BoundedSemaphore(connections)
        self._lock = threading.Lock()
        self._open_until = 0.0
        self._last_logged = float("-inf")
        self._down = False
        self._health: Health = "does not answer"
        self._health_until = 0.0
        self._slow = 0  # calls in a row that took over `SLOW`

    def run(self, op: Callable[[redis.Redis], T]) -> T | None:
        """`op(client)`, or None when Redis failed now or recently, is full for a write, or has no connection
        free within `CONNECT_TIMEOUT` (the caller's signal to do without it)."""
        if time.monotonic() < self._open_until or not self._slots.acquire(timeout=CONNECT_TIMEOUT):
            return None
        return self._call(op)

    def _call(self, op: Callable[[redis.Redis], T]) -> T | None:
        """`run`'s call, on a connection slot the caller took (released here)."""
        began = time.monotonic()
        try:
            result = op(self.client)
        except redis.OutOfMemoryError as exc:
            self._say(f"Redis is full ({exc}); what it refuses is kept in this process only")
            return None
        except (redis.RedisError, OSError) as exc:
            if isinstance(exc, redis.ResponseError) and "WRONGTYPE" in str(exc):  # alone, or in a pipeline's error
                # A key holding a list or a hash, which none of ours is: that key is a miss, and Redis answers. It
                # was taken for Redis failing, and every read of the key shut Redis off for the process.
                self._say(f"a key in Redis holds a value of another type than feedbridge writes ({exc}); read as none")
            else:
                self._failed(exc)
            return None
        finally:
            self._slots.release()
        took = time.monotonic() - began
        with self._lock:
            self._slow = slow = self._slow + 1 if took > SLOW else 0
            if slow >= SLOW_CALLS:
                self._slow = 0
        if slow >= SLOW_CALLS:
            self._failed(TimeoutError(f"{SLOW_CALLS} calls in a row took over {SLOW:g}s, the last {took:.2f}s"))
        elif self._down and not slow:  # a slow call is no sign that Redis is back
            with self._lock:
                if self._down:
                    self._down = False
                    log.warning("Redis is reachable again; the shared cache is back in use")
        return result

    def health(self) -> Health:
        """What `/healthz` says of Redis, asked again every `ANSWERS_EVERY` seconds at most, whoever asks:
        `/healthz` is anyone's to call, uncharged, and a PING per call would let one client hold a Redis
        connection per request it keeps waiting, past a small plan's client limit, whose refusals open the
        breaker for everyone.

        `answers`: a PING answered (within the link's timeouts). `does not answer`: it failed, or the breaker
        is open (a call failed, or `SLOW_CALLS` were slow, within the cooldown). `busy`: every connection of
        the process stayed in use for `CONNECT_TIMEOUT`, so no PING was sent; with the breaker closed, the
        calls holding them are being answered, or end within the read timeout and open it. It was `does not
        answer`, which a burst of requests on a Redis answering in 30 ms made it say on every probe, and a
        platform reading it may restart a healthy instance (RELIABILITY.md row 77)."""
        now = time.monotonic()
        with self._lock:
            if now < self._health_until:
                return self._health
            self._health_until = now + ANSWERS_EVERY
        if now < self._open_until:
            health: Health = "does not answer"
        elif not self._slots.acquire(timeout=CONNECT_TIMEOUT):
            health = "busy"
        else:
            health = "does not answer" if self._call(lambda client: client.ping()) is None else "answers"
        with self._lock:
            self._health = health
        return health

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            self._open_until = time.monotonic() + self.cooldown
        if self._say(f"Redis failed ({type(exc).__name__}: {exc}); using the in-process cache only, retrying "
                     f"every {self.cooldown:g}s"):
            self._down = True  # "reachable again" follows a line that said it was not, once

    def _say(self, message: str) -> bool:
        """Log `message`, unless a line about Redis was logged within `LOG_INTERVAL`; whether it was."""
        now = time.monotonic()
        with self._lock:
            if now - self._last_logged < LOG_INTERVAL:
                return False
            self._last_logged = now
        log.warning("%s", message)
        return True


class RedisStore:
    """`Store` over Redis: encoded values with Redis TTLs; never raises, a failure reads as a miss."""

    def __init__(self, link: RedisLink, max_value_bytes: int = MAX_VALUE_BYTES, room: Room | None = None):
        """`room`: whether Redis has room for what this store shares (the cache's copies: `Room`); None, the
        control store's, writes whenever Redis takes it."""
        self.link = link
        self.room = room
        self.max_value_bytes = max_value_bytes

    def lookup(self, key: str) -> tuple[Any | None, float] | None:
        """(value or None, seconds left to live), or None when Redis could not be asked."""
        name = redis_key(key)

        def read(client: redis.Redis) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            pipe.get(name)
            pipe.pttl(name)
            answer: list[Any] = pipe.execute()
            return answer

        answer = self.link.run(read)
        if answer is None:
            return None
        data, pttl = answer
        if data is None:
            return None, 0.0
        try:
            value = codec.decode(data)
        except DecodeError as exc:
            log.warning("ignoring an unreadable cache entry %s: %s", name, exc)
            return None, 0.0
        if not codec.holds(key, value):
            log.warning("ignoring a cache entry of another kind than its key's: %s", name)
            return None, 0.0
        return value, max(pttl, 0) / 1000

    def get(self, key: str) -> Any | None:
        found = self.lookup(key)
        return None if found is None else found[0]

    def set(self, key: str, value: Any, ttl: float) -> None:
        """Share `value` for `ttl` seconds; a value the codec cannot write is not shared, and stays where the
        tier in front of Redis keeps it (`TieredStore.set` keeps it in process first), as a value over the size
        limit does. That is a value of a kind it has no encoding for (TypeError), and one msgspec refuses to
        write (ValueError: a string with no UTF-8 form, a lone surrogate, raises UnicodeEncodeError): the
        parsers keep those out of every model, and were one to slip through, the request that made it must
        still answer, since a write that cannot happen is no reason to fail it (`set` never raises)."""
        if ttl <= 0:
            return
        try:
            data = codec.encode(value)
        except (TypeError, ValueError) as exc:
            log.debug("not sharing %s: %s", key, exc)
            return
        # A feed's gzip rides along: never longer than its body, it left a feed of 1.6 to 2 MiB unshared, built
        # again by each worker, where the limit (docs/redis.md) bounds the feed.
        packed = value.gzipped if isinstance(value, FeedEntry) else None
        limit = self.max_value_bytes + len(packed or b"")
        if len(data) > limit:
            log.info("not sharing %s: %d bytes is over the %d-byte limit", key, len(data), limit)
            return
        if self.room is not None and not self.room(len(data)):
            return
        name = redis_key(key)
        self.link.run(lambda client: client.set(name, data, px=max(int(ttl * 1000), 1)))

    def delete(self, key: str) -> None:
        name = redis_key(key)
        self.link.run(lambda client: client.delete(name))



COPIES_SHARE = 0.75
"""Of a Redis with a `maxmemory`, what the cache's copies may fill: past it they are kept in process only, and the
rest stays for control state (the budgets' windows, the forums' waits, failures, decisions, locks). One client's
distinct `q=` feeds, each shared for the cache TTL, filled a 25 MB Redis in 10 s; every budget window's write was
refused then, each instance counted the forum's budget alone, and two instances sent the forum twice it."""
ROOM_EVERY = 0.25
ROOM_STEP = 0.01
"""Of `maxmemory`, what one process's copies may add between two looks at it (`ROOM_EVERY`): however fast they
come (a flood wrote 5 MB a second), a look at Redis comes before they pass `COPIES_SHARE` by more than this
for each process writing, where the quarter left holds a hundred times as much."""


class Room:
    """Whether Redis has room for a copy of so many bytes: below `COPIES_SHARE` of its `maxmemory` (always, with
    none set), by its `INFO memory`, asked at most once a `ROOM_EVERY` per process by whichever write comes
    first, and by what this process wrote since, at most `ROOM_STEP` of it. A write that finds the look
    under way goes by the last one."""

    def __init__(self, link: RedisLink):
        self.link = link
        self._left = 0.0  # bytes this process may still share until its next look
        self._next = 0.0
        self._asking = threading.Lock()

    def __call__(self, size: int) -> bool:
        if time.monotonic() >= self._next and self._asking.acquire(blocking=False):
            try:
                self._next = time.monotonic() + ROOM_EVERY
                info = self.link.run(_memory)
                if info is not None:
                    limit = int(info.get("maxmemory", 0))
                    self._left = float("inf") if limit <= 0 else min(
                        COPIES_SHARE * limit - int(info.get("used_memory", 0)), ROOM_STEP * limit)
            finally:
                self._asking.release()
        if size > self._left:
            return False
        self._left -= size
        return True


def _memory(client: redis.Redis) -> dict[str, Any]:
    """Redis's `INFO memory`; nothing (no `maxmemory` known: every copy shared, as before) where a provider
    refuses the command, which is no failure of Redis to open the breaker for."""
    try:
        return dict(client.info("memory"))
    except redis.ResponseError:
        return {}


@dataclass(frozen=True, slots=True)
class _Local:
    """A first-level copy, when Redis was last asked about it, and when it expires (monotonic clock)."""

    value: Any
    checked: float
    expires: float

    @property
    def size(self) -> int:
        return int(getattr(self.value, "size", 64))

    @property
    def stored_at(self) -> float | None:
        """The wrapped entry's: a copy re-read from Redis is the same version, a rebuilt one is newer."""
        return getattr(self.value, "stored_at", None)


RENDERED = frozenset({"feed", "view"})
"""Kinds of key (`feedbridge.store.keys`) that hold what the service renders from what it read, not what it read:
shared through Redis only while fresh. Anyone can ask for a new one (another `q=`, another `Host`), so one
client could fill Redis with a day's stale copies in seconds; another instance needs none of them, since it
renders the same from the pages Redis keeps (each read from the forum, and budgeted), stale ones included."""


class TieredStore:
    """MemoryStore in front of RedisStore.

    A local copy is trusted without asking Redis for `recheck` seconds, and only while it is fresh
    (younger than `fresh_for`): a stale local copy always defers to Redis, where another worker may
    already have stored the new one (single-flight waiters poll for exactly that). Local copies are
    kept as long as their Redis TTL, so if Redis goes away the process still has its stale copies to
    serve when the forum fails too.
    """

    def __init__(self, local: MemoryStore, shared: RedisStore, fresh_for: float, recheck: float):
        self.local = local
        self.shared = shared
        self.fresh_for = fresh_for
        self.recheck = recheck

    def get(self, key: str) -> Any | None:
        mine: _Local | None = self.local.get(key)
        now = time.monotonic()
        if mine is not None and now - mine.checked < self.recheck and is_fresh(mine.value, self.fresh_for):
            return mine.value
        found = self.shared.lookup(key)
        if found is None:  # Redis unavailable: the local copy is all there is
            return None if mine is None else mine.value
        value, ttl = found
        if mine is not None and (value is None or _stored_at(mine.value) > _stored_at(value)):
            value, ttl = mine.value, mine.expires - now  # ours is newer, or never made it to Redis
        if value is not None:
            self.local.set(key, _Local(value, now, now + ttl), ttl)
        return value

    def set(self, key: str, value: Any, ttl: float) -> None:
        """Kept here for `ttl`; shared for `ttl` too, but what is rendered (`RENDERED`) only while it is fresh."""
        now = time.monotonic()
        self.local.set(key, _Local(value, now, now + ttl), ttl)
        rendered = codec.kind_of(key) in RENDERED  # a scope's (`private-feed`) too
        self.shared.set(key, value, min(ttl, self.fresh_for) if rendered else ttl)

    def delete(self, key: str) -> None:
        self.local.delete(key)
        self.shared.delete(key)


def _stored_at(value: Any) -> float:
    """Entries carry their age; a plain value (a rate-limit deadline) is never newer than Redis's."""
    return getattr(value, "stored_at", 0.0)
