"""The request scope and the pool's one wave loop (`feeds/admission/callers.py`), counted, not timed: which jobs ran,
what they saw of the request, what was cancelled when its deadline passed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import TimeoutError as FutureTimeout

import pytest

from feedbridge.feeds.admission import callers
from feedbridge.feeds.admission.callers import Caller, CallerPool


@pytest.fixture
def pool() -> Iterator[CallerPool]:
    made = CallerPool(max_workers=2)
    yield made
    made.shutdown(wait=True, cancel_futures=True)


def test_pool_work_runs_in_the_requests_scope_and_outside_one_in_none(pool: CallerPool) -> None:
    caller = Caller("203.0.113.9", time.monotonic() + 60)
    assert [f.result() for _j, f in pool.waves([1, 2, 3], lambda _n: callers.current(), 2)] == [None] * 3
    token = callers.enter(caller)
    try:
        seen = [f.result() for _j, f in pool.waves([1, 2, 3], lambda _n: callers.current(), 2)]
    finally:
        callers.leave(token)
    assert seen == [caller] * 3
    assert callers.current() is None
    assert caller.admission.ended  # leaving ends the request: its pool work fetches nothing more


def test_results_come_in_order_with_each_jobs_own_error(pool: CallerPool) -> None:
    def run(n: int) -> int:
        if n == 2:
            raise ValueError("two")
        return n * 10

    taken = []
    for job, done in pool.waves([1, 2, 3, 4, 5], run, 2):
        taken.append((job, done.exception() is None and done.result()))
    assert taken == [(1, 10), (2, False), (3, 30), (4, 40), (5, 50)]


def test_a_consumer_that_stops_starts_no_further_wave(pool: CallerPool) -> None:
    ran: list[int] = []
    lock = threading.Lock()

    def run(n: int) -> int:
        with lock:
            ran.append(n)
        return n

    for job, _done in pool.waves(list(range(10)), run, 3):
        if job == 1:
            break
    pool.shutdown(wait=True)
    assert sorted(ran) == [0, 1, 2]  # the first wave only, of 10 jobs


def test_past_the_deadline_what_has_not_started_never_starts(pool: CallerPool) -> None:
    release = threading.Event()
    ran: list[int] = []

    def run(n: int) -> int:
        ran.append(n)
        release.wait(30)
        return n

    narrow = CallerPool(max_workers=1)
    token = callers.enter(Caller("203.0.113.9", time.monotonic() + 0.2))
    try:
        with pytest.raises(FutureTimeout):
            for _job, _done in narrow.waves([1, 2, 3], run, 3):
                pass
    finally:
        callers.leave(token)
        release.set()
        narrow.shutdown(wait=True)
    assert ran == [1]  # 2 and 3 were queued behind it and cancelled
