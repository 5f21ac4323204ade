"""The pool's one wave loop (`feeds/admission/callers.py`), counted, not timed: which jobs ran, what they saw of
their submitter's context, what was cancelled when the request's deadline passed."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from concurrent.futures import TimeoutError as FutureTimeout

import pytest

from feedbridge.config import Settings, parse_forum
from feedbridge.feeds.admission.callers import Caller, CallerPool
from feedbridge.web import context
from feedbridge.web.app import create_app


@pytest.fixture
def pool() -> Iterator[CallerPool]:
    made = CallerPool(max_workers=2)
    yield made
    made.shutdown(wait=True, cancel_futures=True)


def test_pool_work_runs_in_a_copy_of_its_submitters_context(pool: CallerPool) -> None:
    """What the work a request fans out is charged to travels in its context (a static build's request tally,
    the CPU meter): a job sees its submitter's values, and its own changes stay its own."""
    mark: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="none")
    token = mark.set("the submitter's")
    try:
        seen = [f.result() for _j, f in pool.waves([1, 2, 3], lambda n, _ahead: (mark.get(), mark.set(str(n)))[0], 2,
                                                    caller=None)]
    finally:
        mark.reset(token)
    assert seen == ["the submitter's"] * 3
    assert mark.get() == "none"


def test_results_come_in_order_with_each_jobs_own_error(pool: CallerPool) -> None:
    def run(n: int, _ahead: int) -> int:
        if n == 2:
            raise ValueError("two")
        return n * 10

    taken = []
    for job, done in pool.waves([1, 2, 3, 4, 5], run, 2, caller=None):
        taken.append((job, done.exception() is None and done.result()))
    assert taken == [(1, 10), (2, False), (3, 30), (4, 40), (5, 50)]


def test_each_job_is_told_the_reads_its_step_may_still_make(pool: CallerPool) -> None:
    """A job's `ahead` is how many jobs are left from its wave on (each reads one page or batch): what the gate
    asks the budget to have room for when a cold build may wait (`Building.ahead`), handed to the job, not
    set in an ambient variable its context copies."""
    seen = [(job, done.result()) for job, done in pool.waves([1, 2, 3, 4, 5], lambda _n, ahead: ahead, 2,
                                                               caller=None)]
    assert seen == [(1, 5), (2, 5), (3, 3), (4, 3), (5, 1)]


def test_a_consumer_that_stops_starts_no_further_wave(pool: CallerPool) -> None:
    ran: list[int] = []
    lock = threading.Lock()

    def run(n: int, _ahead: int) -> int:
        with lock:
            ran.append(n)
        return n

    for job, _done in pool.waves(list(range(10)), run, 3, caller=None):
        if job == 1:
            break
    pool.shutdown(wait=True)
    assert sorted(ran) == [0, 1, 2]  # the first wave only, of 10 jobs


def test_past_the_deadline_what_has_not_started_never_starts(pool: CallerPool) -> None:
    release = threading.Event()
    ran: list[int] = []

    def run(n: int, _ahead: int) -> int:
        ran.append(n)
        release.wait(30)
        return n

    narrow = CallerPool(max_workers=1)
    try:
        with pytest.raises(FutureTimeout):
            for _job, _done in narrow.waves([1, 2, 3], run, 3, caller=Caller("203.0.113.9", time.monotonic() + 0.2)):
                pass
    finally:
        release.set()
        narrow.shutdown(wait=True)
    assert ran == [1]  # 2 and 3 were queued behind it and cancelled


def test_the_request_is_served_by_one_caller_made_at_its_edge_and_ended_at_its_teardown() -> None:
    """`open_scope` makes the request's service, serving one `Caller` that every read of the request is handed
    (`FeedService._read`); teardown ends it, so pool work the request left behind fetches nothing more, and
    the next request gets a caller of its own."""
    app = create_app(Settings(forums=(parse_forum("markdown:https://forum.example"),)))
    served = []
    for _ in range(2):
        with app.test_request_context("/", environ_base={"REMOTE_ADDR": "203.0.113.9"}):
            context.open_scope()
            svc = context.service()
            assert svc.caller is not None and svc.caller.client == context.client() == "203.0.113.9"
            assert svc._read().caller is svc.caller and svc.scope(False).caller is svc.caller
            assert not svc.caller.admission.ended
            served.append(svc.caller)
            context.close_scope()
    assert served[0] is not served[1] and all(caller.admission.ended for caller in served)
