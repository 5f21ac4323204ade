"""A turn for everyone else: the loops that run once per entry or post call `take_turn()`, so one request that
filters, sanitizes or renders hundreds of long posts never holds its process for more than `TURN`.

Under the Procfile's gevent worker every request of a process runs on one thread, one greenlet at a time,
and a greenlet gives the others their turn only when it waits (a socket, a lock, `time.sleep`): a build
that computes for 2 s without waiting kept every cached hit of its worker waiting 2 s (issue #31, item 2).
gevent's monkey-patching makes `time.sleep` a wait on the event loop, and a positive one (`PAUSE`) waits for
the loop's next iteration, in which it reads the sockets that are ready and runs their requests: gevent's
`sleep(0)` may resume the caller before the loop polls any socket, so a loop of such yields starved every
other connection until the request was done (measured: cached hits waited as long as the build). In plain
threads the pause lets the interpreter switch threads and costs about 60 µs per `TURN`, about 1%. So this
module yields without importing gevent, and the pure stages stay pure (no I/O, no state they read back).

It lives in `render`, the lowest stage with such loops, so that the filters and the sanitizer (`feeds`) can
import it too. The clock is the process's: whichever loop called last, the next call after `TURN` yields.
"""

from __future__ import annotations

import time

TURN = 0.005
"""Seconds a loop may compute between turns: a cached hit waits at most a few of these per running build."""

PAUSE = 1e-6
"""Seconds of the pause: any positive value makes gevent wait for the loop's next iteration."""

_last = time.perf_counter()


def take_turn() -> None:
    """Yield to other requests when `TURN` has passed since the last turn; else nothing (a clock read)."""
    global _last
    if time.perf_counter() - _last >= TURN:
        time.sleep(PAUSE)
        _last = time.perf_counter()
