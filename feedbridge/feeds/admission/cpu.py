"""The CPU a piece of work ran itself, under the gevent worker as in plain threads: what the CPU allowance
charges (`feedbridge.web.allowance`).

`time.thread_time()` is the CPU of the calling OS thread. Under the Procfile's gevent worker every request
of a process runs on that one thread, one greenlet at a time, so its difference across a request counted
whatever the others ran while this one waited on the forum or took its turn (`render.turns`): a client
whose cold feeds waited 6 s on the forum, while another address computed 6 s, was charged those 6 s and
refused its next views (issue 43, item 4). So the clock is read where the thread changes hands: greenlet's
documented tracing hook (`greenlet.settrace`) is called on every switch between two greenlets of its
thread with the one left and the one entered, and what the thread ran since the switch before is the left
one's, charged to the `Meter` of the context it ran in (a context variable, `counting`).

- A context, not a greenlet: the pool work a request fans out (its topic pages, its batches of posts) runs
  in a copy of the request's context (`feedbridge.feeds.admission.callers.CallerPool`, through `run_in`), so its CPU
  is the request's too, and what a pool thread runs between two jobs is nobody's.
- A thread's clock is settled (the time since its last switch charged, the clock restarted) at every
  switch that leaves or enters a metered context, and wherever the meter changes without a switch: when
  `counting` starts and ends, when a pool job starts and ends. A switch between two unmetered greenlets
  (the hub, cached hits) costs the call and two lookups, about 0.5 µs of CPU; one into or out of a metered
  context a clock read as well, about 1.6 µs (80,000 switches, against 0.6 µs a switch untraced).
- The tracer is installed in a thread on its first use there, over any tracer already set (gevent's
  monitoring sets one as its hub starts, when enabled), which it calls on. In plain threads (the threaded
  test server, the CLI) nothing switches, and a meter counts each thread's own `thread_time` between its
  settles: the request's thread, as the allowance did before, and now its pool threads' jobs too.
- A meter is added to by each thread that runs its context, each into its own slot, so threads never race
  on one sum.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import Context, ContextVar
from typing import Any, Literal, TypeVar

import greenlet

T = TypeVar("T")
Trace = Callable[[Literal["switch", "throw"], tuple[greenlet.greenlet, greenlet.greenlet]], object]
"""greenlet's tracing callback: called with "switch" (or "throw", a switch that raises in the target) and the
greenlet left and the one entered."""


class Meter:
    """CPU seconds run in one context and the copies its pool work runs in, from every thread that ran it."""

    __slots__ = ("_by_clock",)

    def __init__(self) -> None:
        self._by_clock: dict[_Clock, float] = {}

    @property
    def seconds(self) -> float:
        return sum(self._by_clock.values())

    def add(self, clock: _Clock, seconds: float) -> None:
        self._by_clock[clock] = self._by_clock.get(clock, 0.0) + seconds


_METER: ContextVar[Meter | None] = ContextVar("feedbridge_cpu_meter", default=None)


def _meter_in(glet: greenlet.greenlet) -> Meter | None:
    context = glet.gr_context
    return None if context is None else context.get(_METER)


class _Clock:
    """One thread's: its CPU time when it last changed hands or meters, and the tracer it was installed over."""

    __slots__ = ("previous", "since")

    def __init__(self, previous: Trace | None):
        self.previous = previous
        self.since = time.thread_time()

    def settle(self, meter: Meter | None) -> None:
        """What the thread ran since the last settle goes to `meter` (none: nobody's)."""
        now = time.thread_time()
        if meter is not None:
            meter.add(self, now - self.since)
        self.since = now

    def __call__(self, event: Literal["switch", "throw"], args: tuple[greenlet.greenlet, greenlet.greenlet]) -> None:
        origin, target = args
        left = _meter_in(origin)
        if left is not None or _meter_in(target) is not None:
            self.settle(left)
        if self.previous is not None:
            self.previous(event, args)


def _clock() -> _Clock:
    """This thread's clock, installed on first use."""
    tracer = greenlet.gettrace()
    if isinstance(tracer, _Clock):
        return tracer
    clock = _Clock(tracer)
    greenlet.settrace(clock)
    return clock


@contextmanager
def counting() -> Iterator[Callable[[], float]]:
    """Around work whose CPU is wanted: yields `spent()`, the CPU seconds its context has run since the `with`
    began, in this greenlet and in the pool work submitted from it, and not what other greenlets ran
    meanwhile. Nested, the inner work counts in the outer as well."""
    clock = _clock()
    outer = _METER.get()
    clock.settle(outer)
    meter = outer or Meter()
    token = None if outer is not None else _METER.set(meter)
    started = meter.seconds

    def spent() -> float:
        clock.settle(meter)
        return meter.seconds - started

    try:
        yield spent
    finally:
        clock.settle(meter)
        if token is not None:
            _METER.reset(token)


def run_in(context: Context, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`context.run(fn, *args, **kwargs)` with the thread's clock settled as it enters and leaves the context,
    so the context's meter is charged what `fn` ran, to its last instruction, and nothing before."""
    _clock().settle(_METER.get())
    return context.run(_settled, fn, args, kwargs)


def _settled(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    try:
        return fn(*args, **kwargs)
    finally:
        _clock().settle(_METER.get())
