"""Budgets as Discourse core counts the bridge (issue #32), on the Procfile's gunicorn over a real socket.

The fake forum runs in its own process with core's rate limits (`python -m tests.upstream --core-limits`,
tests/core_limits.py): every request of the bridge's address in two windows, every request with a key in
the key's. Core answers past any of them with 429 and Retry-After, and a bridge that honours it stops every
reader until then: `feedbridge.feeds.callers.ForumBudget` keeps below them. The bridge runs two gevent
workers without Redis (each allows itself half of every window, `feedbridge.store.control.Windows`), or two
instances sharing one Redis. Before the split each worker spent the whole budget, so the forum saw twice
it: every test here checks a bound that code broke, and that both workers (or both instances) took part.
Windows are checked on the forum's log, as core counts: when a request arrives, a moment after the bridge
counted it (which `feedbridge.feeds.callers.LEEWAY` covers).

The readers are hostile (`bench.burst.burst`): 20 clients behind a trusted router (FEEDBRIDGE_TRUSTED_HOPS=1,
X-Forwarded-For), each asking for its share of distinct cold feeds (`/latest.atom?category=N`: one upstream
list request each) and asking again at once for every feed refused, Retry-After or not, until the test's
time is up, each request on a new connection so that both workers take them. Only counts are asserted,
never speed.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from bench.burst import Answer, burst, busiest, cold_feed
from feedbridge.config import Settings
from feedbridge.feeds.signing import sign_url
from tests.appserver import procfile_web
from tests.fake_private import USER_API_KEY, carries_key
from tests.redis_server import RedisServer, redis_module, redis_server  # noqa: F401
from tests.upstream import ForumProcess, Request, list_reads, spawn

SMALL = {"FEEDBRIDGE_FORUM_BUDGET_10S": "10", "FEEDBRIDGE_FORUM_BUDGET": "16"}
"""Budgets small enough to spend in a moment (each worker 5 in 10 s and 8 a minute), and core's limits just
above them (`SMALL_CORE`)."""
SMALL_CORE = "per_ip_10s=12,per_ip_minute=19"


def env(forum: ForumProcess, **extra: str) -> dict[str, str]:
    """Two workers behind a trusted router, the forum's source given (no detection probe): every upstream
    request is one feed's list."""
    return {"FEEDBRIDGE_FORUMS": f"markdown:{forum.url}", "WEB_CONCURRENCY": "2", "FEEDBRIDGE_TRUSTED_HOPS": "1",
            "FORWARDED_ALLOW_IPS": "127.0.0.1", "FEEDBRIDGE_LOG_LEVEL": "WARNING", **extra}


def key_of(forum: ForumProcess) -> str:
    return forum.url.removeprefix("http://")


def assert_polite(answers: list[Answer]) -> None:
    """Every answer a feed or a refusal that says when to come back, never an error; and the budget was
    reached (some refusals), not the readers' patience."""
    statuses = Counter(a.status for a in answers)
    assert set(statuses) <= {200, 429, 503}, statuses
    assert all(a.retry_after is not None and int(a.retry_after) >= 1 for a in answers if a.status != 200), \
        [a for a in answers if a.status != 200 and a.retry_after is None][:3]
    assert statuses[200] > 0 and statuses[503] > 0, statuses


def times(requests: list[Request]) -> list[float]:
    return [r.time for r in requests]


@pytest.fixture
def small_forum() -> Iterator[ForumProcess]:
    with spawn("--core-limits", SMALL_CORE) as forum:
        yield forum


@pytest.mark.timeout(60)
def test_a_burst_of_300_cold_feeds_at_the_defaults_never_gets_a_429_from_core() -> None:
    """lib/middleware/request_tracker.rb, config/discourse_defaults.conf: core allows one address 50
    requests in any 10 s (`max_reqs_per_ip_per_10_seconds`) and 200 a minute. At the bridge's defaults
    (FEEDBRIDGE_FORUM_BUDGET_10S 40, FEEDBRIDGE_FORUM_BUDGET 120) 300 cold feeds from 20 clients reach the
    forum at most 40 times in the burst (each worker 20; before, each 40, past core's 50), and every reader
    gets its feed or a 503 with Retry-After."""
    with spawn("--core-limits") as forum:
        with procfile_web(env(forum)) as (url, _):
            answers = burst([url], key_of(forum), feeds=300, seconds=3)
        log, refused = forum.control.requests, forum.control.stats()["core_refused"]
    budget = Settings().forum_budget_10s
    assert refused == {}
    assert budget // 2 < busiest(times(log)) <= budget  # both workers spent their half, no more
    lists = list_reads(log)
    assert len({r.target for r in lists}) == len(lists)  # each a cold feed's list, asked once
    assert len(log) - len(lists) <= 2  # and each worker's one read of the forum's basic info
    assert_polite(answers)
    assert Counter(a.status for a in answers)[200] == len(lists)


@pytest.mark.timeout(60)
def test_the_10s_window_moves_and_the_minutes_budget_holds_across_both_workers(
        small_forum: ForumProcess) -> None:
    """lib/middleware/request_tracker.rb: core counts the bridge's address in a 10 s and a 60 s window
    (`max_reqs_per_ip_per_10_seconds`, `_per_minute`; here 12 and 19). With budgets of 10 and 16, 13 s of
    hostile readers get 10 requests to the forum at once and, once the 10 s window has moved on (11 s:
    callers.LEEWAY), 6 more, the rest of the minute's: never more than 10 in any 10 s as the forum counts
    them, never more than 16 in the minute, and no 429 from core. Before the split the two workers sent 20
    at once."""
    with procfile_web(env(small_forum, **SMALL)) as (url, _):
        started = time.time()
        answers = burst([url], key_of(small_forum), feeds=300, seconds=13)
    log, refused = small_forum.control.requests, small_forum.control.stats()["core_refused"]
    assert refused == {}
    assert busiest(times(log), 10) <= 10  # as the forum logged them, on arrival
    assert 10 < len(log) <= 16  # more than one 10 s window's, no more than the minute's
    assert any(r.time > started + 10 for r in log)  # the 10 s window moved on
    assert_polite(answers)
    assert any("of the last minute" in a.text for a in answers if a.status == 503)  # the minute's did not


@pytest.mark.timeout(60)
def test_the_minutes_budget_holds_across_both_workers_without_a_10s_window() -> None:
    """lib/middleware/request_tracker.rb: core's `max_reqs_per_ip_per_minute` (here 24, and core's 50 in
    10 s) counts every request of the bridge's address, whichever worker sent it. With the 10 s budget off
    and 20 a minute, a burst sends the forum at most 20 requests, 10 from each worker; before the split each
    sent 20, past core's 24."""
    with spawn("--core-limits", "per_ip_minute=24") as forum:
        with procfile_web(env(forum, FEEDBRIDGE_FORUM_BUDGET_10S="0", FEEDBRIDGE_FORUM_BUDGET="20")) as (url, _):
            answers = burst([url], key_of(forum), feeds=100, seconds=3)
        log, refused = forum.control.requests, forum.control.stats()["core_refused"]
    assert refused == {}
    assert 10 < len(log) <= 20
    assert_polite(answers)


@pytest.mark.timeout(60)
def test_signed_feeds_stay_within_the_keys_budget_across_both_workers() -> None:
    """lib/auth/default_current_user_provider.rb, config/discourse_defaults.conf: core allows one user API key
    20 requests a minute (`max_user_api_reqs_per_minute`) and 2,880 a day. 30 distinct cold signed feeds on
    the private forum send at most FEEDBRIDGE_PRIVATE_BUDGET (15) requests with the key in the minute,
    whichever worker reads them (each 7; before, each 15, past core's 20), and no 429 from core."""
    with spawn("--private", "--core-limits") as forum:
        key = key_of(forum)
        environ = env(forum, FEEDBRIDGE_CREDENTIALS=f"{key}=user-api-key:{USER_API_KEY}",
                      FEEDBRIDGE_SECRET="budget-windows-secret-5c1e9a")
        settings = Settings.from_env(environ)
        paths = [sign_url(settings, f"/{key}{cold_feed(n)}").removeprefix(f"/{key}") for n in range(30)]
        with procfile_web(environ) as (url, _):
            answers = burst([url], key, feeds=len(paths), seconds=3, path=paths.__getitem__)
        log, refused = forum.control.requests, forum.control.stats()["core_refused"]
    keyed = [r for r in log if carries_key(r)]
    budget = Settings().private_budget
    assert refused == {}
    # a signed feed reads with the key only; the forum's basic info (its icon), public everywhere, without it
    assert keyed == list_reads(log) and len(log) - len(keyed) <= 2
    assert budget // 2 < busiest(times(keyed), 60) <= budget
    assert_polite(answers)
    assert any("signed-in requests" in a.text for a in answers if a.status == 503)


@pytest.mark.timeout(60)
def test_two_instances_on_one_redis_stay_within_one_budget(small_forum: ForumProcess,
                                                           redis_server: RedisServer) -> None:  # noqa: F811
    """lib/middleware/request_tracker.rb: core counts the bridge's address, however many instances it runs.
    Two instances of two workers each share their windows through Redis: together they send the forum at
    most the one 10 s budget (10, where four workers each on its own share would have sent 4 × 5, and
    without the 10 s window the minute's 16), however the burst fell between the instances (on a loaded
    machine one of them may send all 10, and the other only refuse)."""
    environ = env(small_forum, FEEDBRIDGE_CACHE_URL=redis_server.url, **SMALL)
    with ExitStack() as stack:
        apps = [stack.enter_context(procfile_web(environ))[0] for _ in range(2)]
        answers = burst(apps, key_of(small_forum), feeds=200, seconds=3)
    log, refused = small_forum.control.requests, small_forum.control.stats()["core_refused"]
    assert refused == {}
    assert 5 < len(log) <= 10
    assert_polite(answers)
    assert {a.app for a in answers} == set(apps)  # both instances were asked, and answered
    served = Counter(a.app for a in answers if a.status == 200)
    assert sum(served.values()) == len(log), served
