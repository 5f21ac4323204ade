"""Discourse core's request limits, for the fake forum: `FakeForum(core_limits=CoreLimits())` or
`python -m tests.upstream --core-limits [SPEC]`.

A forum running core counts every request of one address in two windows, and every request carrying a key
against that key, and answers `429` with `Retry-After` past any of them. Those refusals stop every reader
of a bridge (it honours the forum's Retry-After for all of them), so the bridge's budget must keep it under
them: this class lets a test see whether it did (`refused`). The numbers are core's defaults
(`config/discourse_defaults.conf`) unless a test sets them.

What is followed, and where:

- `lib/rate_limiter.rb`: each limiter is a list of the last `max` times in whole seconds (`Time.now.to_i`;
  `LPUSH` then `LTRIM 0, max - 1`); a request is allowed while the list is shorter than `max` or its oldest
  entry is `secs` old or more; refused, it waits `secs - (now - oldest)`. An `aggressive` limiter records
  refused requests too, so a client that keeps asking while refused stays refused.
- `lib/middleware/request_tracker.rb` (the per-address limits, `RequestsRateLimiter#check_limits!`):
  `global_ip_limit_10_IP` (`max_reqs_per_ip_per_10_seconds`, 50 in 10 s) then `global_ip_limit_60_IP`
  (`max_reqs_per_ip_per_minute`, 200 in 60 s), both aggressive, before anything else; refused: `429`,
  `text/plain`, "Slow down, too many requests from this IP address." with `Retry-After` and
  `Discourse-Rate-Limit-Error-Code: ip_10_secs_limit` (or `ip_60_secs_limit`). Core skips private
  addresses unless `max_reqs_rate_limit_on_private` is set; this forum counts them (every test client is
  on 127.0.0.1), as a forum with that setting does.
- `lib/auth/default_current_user_provider.rb` (the keys): an `Api-Key` request is counted in one
  `admin_api_min` limiter for every admin key of the site (`max_admin_api_reqs_per_minute`, 60 in 60 s),
  and then the address's limiters are rolled back (`rollback!`: `LPOP`), so admin requests are refused by
  them but not counted in them; a `User-Api-Key` request in `user_api_min_KEY`
  (`max_user_api_reqs_per_minute`, 20 in 60 s) then `user_api_day_KEY` (`max_user_api_reqs_per_day`, 2,880
  in 86,400 s). Refused: `app/controllers/application_controller.rb` `rescue_from RateLimiter::LimitExceeded`,
  `429` JSON `{"errors": [...], "error_type": "rate_limit", "extras": {"wait_seconds": N}}` with
  `Retry-After` and `Discourse-Rate-Limit-Error-Code`. Core looks a key up before counting it; this forum
  counts every key presented (tests/fake_private.py refuses a wrong one afterwards).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields

Answer = tuple[int, dict[str, str], bytes]
"""Status, headers, body: the fake forum's handler sends it as it is (`_Handler._send(*answer)`)."""


@dataclass
class Limiter:
    """One `RateLimiter` kind (core: lib/rate_limiter.rb): the last `max` times per key, newest first."""

    max: int
    secs: int
    error_code: str
    aggressive: bool = False
    _lists: dict[str, deque[int]] = field(default_factory=dict, repr=False)

    def performed(self, key: str, now: int) -> int | None:
        """Count the request (core: `performed!`); None when allowed, else the seconds to wait."""
        times = self._lists.setdefault(key, deque(maxlen=self.max))
        allowed = len(times) < self.max or now - times[-1] >= self.secs
        if allowed or self.aggressive:
            times.appendleft(now)  # core: LPUSH, then LTRIM 0, max - 1 (the deque's maxlen)
        return None if allowed else self.secs - (now - times[-1])

    def rollback(self, key: str) -> None:
        """core: `rollback!` (LPOP): the newest entry goes."""
        times = self._lists.get(key)
        if times:
            times.popleft()


@dataclass
class CoreLimits:
    """Core's defaults (config/discourse_defaults.conf); set any of them for a test."""

    per_ip_10s: int = 50  # max_reqs_per_ip_per_10_seconds
    per_ip_minute: int = 200  # max_reqs_per_ip_per_minute
    user_api_minute: int = 20  # max_user_api_reqs_per_minute
    user_api_day: int = 2880  # max_user_api_reqs_per_day
    admin_api_minute: int = 60  # max_admin_api_reqs_per_minute
    clock: Callable[[], float] = field(default=time.time, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _refused: Counter[str] = field(default_factory=Counter, repr=False)

    def __post_init__(self) -> None:
        self.ip_10 = Limiter(self.per_ip_10s, 10, "ip_10_secs_limit", aggressive=True)
        self.ip_60 = Limiter(self.per_ip_minute, 60, "ip_60_secs_limit", aggressive=True)
        self.admin = Limiter(self.admin_api_minute, 60, "admin_api_key_rate_limit")
        self.user_min = Limiter(self.user_api_minute, 60, "user_api_key_limiter_60_secs")
        self.user_day = Limiter(self.user_api_day, 86_400, "user_api_key_limiter_1_day")

    @classmethod
    def parse(cls, spec: str) -> CoreLimits:
        """`per_ip_10s=50,user_api_minute=20`: the CLI's form (`--core-limits`); unnamed limits keep core's."""
        names = {f.name for f in fields(cls) if f.type == "int"}
        values: dict[str, int] = {}
        for part in filter(None, spec.split(",")):
            name, _, value = part.partition("=")
            if name not in names:
                raise ValueError(f"unknown core limit {name!r}; expected one of {sorted(names)}")
            values[name] = int(value)
        return cls(**values)  # type: ignore[arg-type]

    @property
    def refused(self) -> dict[str, int]:
        """How many requests each limiter refused (by core's error code)."""
        with self._lock:
            return dict(self._refused)

    def check(self, address: str, headers: Mapping[str, str]) -> Answer | None:
        """The 429 core would send this request (lower-cased `headers`), or None to serve it."""
        now = int(self.clock())
        with self._lock:
            for limiter in (self.ip_10, self.ip_60):  # core: request_tracker.rb, before the app runs
                wait = limiter.performed(f"global_{address}", now)
                if wait is not None:
                    return self._refuse(limiter, wait, plain=True)
            if "api-key" in headers:  # core: default_current_user_provider.rb, admin_api_key_limiter
                wait = self.admin.performed("admin_api_min", now)
                if wait is not None:
                    return self._refuse(self.admin, wait)
                self.ip_10.rollback(f"global_{address}")
                self.ip_60.rollback(f"global_{address}")
            elif "user-api-key" in headers:  # core: user_api_key_limiter_60_secs, then _1_day
                key = headers["user-api-key"]
                for limiter in (self.user_min, self.user_day):
                    wait = limiter.performed(key, now)
                    if wait is not None:
                        return self._refuse(limiter, wait)
        return None

    def _refuse(self, limiter: Limiter, wait: int, *, plain: bool = False) -> Answer:
        self._refused[limiter.error_code] += 1
        headers = {"Retry-After": str(wait), "Discourse-Rate-Limit-Error-Code": limiter.error_code}
        if plain:  # core: RequestsRateLimiter#error_response
            text = (f"Slow down, too many requests from this IP address.\nPlease retry again in {wait} seconds.\n"
                    f"Error code: {limiter.error_code}.\n")
            return 429, {**headers, "Content-Type": "text/plain; charset=utf-8"}, text.encode()
        body = {"errors": [f"You've performed this action too many times. Please wait {wait} seconds before "
                           "trying again."], "error_type": "rate_limit", "extras": {"wait_seconds": wait}}
        return 429, {**headers, "Content-Type": "application/json; charset=utf-8"}, json.dumps(body).encode()
