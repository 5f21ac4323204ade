"""Cached hits while one client sends CPU-costly requests back to back (issue #31, item 2): the p99 of a
cached feed on ONE gevent worker while that client asks, one request at a time, for new `q=` variants of a
500-post topic of 20,000-character posts, new `.html` views of it and front page previews, against the
idle p99 in the same run.

The fake forum (JSON mode, `tests/fake_heavy.py`) runs in this process; the topic's full feed is built once
beforehand, so the costly requests send nothing upstream (no budget or slot applies) and spend only the
worker's CPU. `FEEDBRIDGE_CPU_ALLOWANCE=0`: the allowance would turn the client away after 20 s of CPU a
minute, and what is measured here is how the worker shares its loop while the client is served. Each
round: wrk -c4 on the cached feed alone, then again while the client's requests run.

Row 9b, in this process: the CPU that 100 hits a second on a few clients' moving windows take with 30,000
other clients' windows held (each charged once, then idle, as a flood of addresses or a public instance's
readers leave them for a minute) against none held, over the in-process storage `Windows` uses
(`store.control.LocalWindows`), and over `limits`' own `MemoryStorage` for reference, whose timer sweeps
every window it holds after a hit.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

import httpx
from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage, Storage
from limits.strategies import MovingWindowRateLimiter

from feedbridge.store.control import LocalWindows
from tests.fake_heavy import HEAVY_TOPIC, heavy_site
from tests.upstream import FakeForum

from .harness import Context, Row
from .procs import Procs, WrkRun, wrk

HIT_CONNECTIONS = 4
P99_TARGET = 2.0
IDLE_WINDOWS = 30_000
HITS_PER_SECOND = 100
IDLE_CPU_TARGET = 1.25


class Costly(threading.Thread):
    """One client, one request at a time, each a new variant (or the same `.html` view again)."""

    def __init__(self, app: str, key: str):
        super().__init__(daemon=True)
        self.app, self.key = app, key
        self.stop = threading.Event()
        self.sent = 0
        self.seconds: list[float] = []

    def run(self) -> None:
        topic = f"{self.app}/{self.key}/t/{HEAVY_TOPIC}"
        with httpx.Client(timeout=120) as client:
            while not self.stop.is_set():
                self.sent += 1
                n = self.sent
                # post1 matches the posts numbered 1, 10-19, 100-199: all 500 are filtered, 111 rendered
                url = [f"{topic}.atom?limit=500&q=post1%20-zz{n}", f"{topic}.html?limit=500&q=post1%20-zy{n}",
                       f"{topic}.html?limit=500&q=post1",
                       f"{self.app}/preview?forum={self.key}&list=topic&topic={HEAVY_TOPIC}&q=post+-zx{n}&pages=5",
                       ][n % 4]
                started = time.monotonic()
                client.get(url).raise_for_status()
                self.seconds.append(time.monotonic() - started)


def cpu_section(ctx: Context) -> list[Row]:
    rounds, seconds = ctx.loops(3, 1), ctx.loops(6, 2)
    idle: list[WrkRun] = []
    busy: list[WrkRun] = []
    sent, answer_times = 0, []
    with FakeForum(mode="json", posts=heavy_site().answer) as forum, Procs(ctx.workdir) as procs:
        key = forum.url.removeprefix("http://")
        app, _ = procs.gunicorn("feedbridge-cpu", {"FEEDBRIDGE_FORUMS": forum.url, "WEB_CONCURRENCY": "1",
                                                   "FEEDBRIDGE_CPU_ALLOWANCE": "0", "FEEDBRIDGE_LOG_LEVEL": "WARNING"})
        httpx.get(f"{app}/{key}/t/{HEAVY_TOPIC}.atom?limit=500", timeout=120).raise_for_status()
        cached = f"{app}/{key}/t/9003.atom"
        httpx.get(cached, timeout=30).raise_for_status()
        for _ in range(rounds):
            idle.append(wrk(cached, seconds, HIT_CONNECTIONS))
            costly = Costly(app, key)
            costly.start()
            time.sleep(1.0)  # its requests are under way
            busy.append(wrk(cached, seconds, HIT_CONNECTIONS))
            costly.stop.set()
            costly.join(120)
            sent += costly.sent
            answer_times += costly.seconds
    idle_p99 = statistics.median(r.p99_ms for r in idle)
    p99 = statistics.median(r.p99_ms for r in busy)
    ctx.notes.append(
        f"9: the Procfile's gunicorn, ONE gevent worker, {rounds} rounds of wrk -c{HIT_CONNECTIONS} --latency for "
        f"{seconds} s on a cached post feed: idle, then while one client sends, one at a time, new q= variants of "
        f"a 500-post topic of 20,000-character posts, new .html views of it, the same view again and previews "
        f"(FEEDBRIDGE_CPU_ALLOWANCE=0); medians of the p99s. The client sent {sent} requests, answered in a "
        f"median of {statistics.median(answer_times) * 1e3:.0f} ms (max {max(answer_times) * 1e3:.0f} ms). "
        f"Idle rps {statistics.median(r.rps for r in idle):,.0f}, busy {statistics.median(r.rps for r in busy):,.0f}.")
    return [Row("9", "cached-hit p99 on one worker while one client sends CPU-costly requests back to back "
                "(q= variants, .html views, previews of a 500-post topic) vs idle", p99, idle_p99, "ms",
                p99 / idle_p99, f"≤ {P99_TARGET:g}×", p99 / idle_p99 <= P99_TARGET), *windows_rows(ctx)]


def windows_rows(ctx: Context) -> list[Row]:
    seconds = ctx.loops(3, 1)
    cpu = {(name, idle): _hits_cpu(storage, idle, seconds)
           for name, storage in (("ours", LocalWindows), ("limits", MemoryStorage)) for idle in (0, IDLE_WINDOWS)}
    ours, limits = (cpu[name, IDLE_WINDOWS] / cpu[name, 0] for name in ("ours", "limits"))
    ctx.notes.append(f"9b: {HITS_PER_SECOND} hits a second for {seconds} s on 50 clients' windows of 2,000, after "
                     f"{IDLE_WINDOWS:,} other windows were hit once each (or none), process CPU (`time.process_time`, "
                     "the storage's timer threads included) per second of the run.")
    what = (f"CPU of {HITS_PER_SECOND} moving-window hits a second with {IDLE_WINDOWS:,} idle clients' windows held "
            "vs none")
    return [Row("9b", f"{what}, `Windows`' in-process storage", cpu["ours", IDLE_WINDOWS] * 1e3, cpu["ours", 0] * 1e3,
                "ms/s", ours, f"≤ {IDLE_CPU_TARGET:g}×", ours <= IDLE_CPU_TARGET),
            Row("9b", f"{what}, `limits`' MemoryStorage", cpu["limits", IDLE_WINDOWS] * 1e3, cpu["limits", 0] * 1e3,
                "ms/s", limits, "(reference)", None)]


def _hits_cpu(storage: Callable[[], Storage], idle: int, seconds: float) -> float:
    """CPU seconds per second of `HITS_PER_SECOND` paced hits over a new `storage` holding `idle` other windows."""
    limiter = MovingWindowRateLimiter(storage())
    item = RateLimitItemPerSecond(2000, 60)
    for n in range(idle):
        limiter.hit(item, f"idle{n}")
    time.sleep(0.1)  # whatever the idle hits scheduled has run
    started, spent, n = time.monotonic(), time.process_time(), 0
    while (now := time.monotonic()) < started + seconds:
        limiter.hit(item, f"client{n % 50}")
        n += 1
        time.sleep(max(started + n / HITS_PER_SECOND - now, 0))
    return (time.process_time() - spent) / (time.monotonic() - started)


if __name__ == "__main__":  # python -m bench.cpu [--quick]: this section alone
    import sys
    import tempfile
    from pathlib import Path

    from .harness import table

    with tempfile.TemporaryDirectory(prefix="feedbridge-bench-") as workdir:
        context = Context(quick="--quick" in sys.argv, workdir=Path(workdir))
        print(table(cpu_section(context)))
        print("\n".join(f"- {note}" for note in context.notes))
