"""A burst of cold feeds against a forum that enforces core's limits (issue #32, "Politeness as core counts it").

300 distinct cold feeds from 20 client addresses at once (FEEDBRIDGE_TRUSTED_HOPS=1 and X-Forwarded-For, as
behind a router) on the Procfile's gunicorn with 2 workers and no Redis, in front of the fake forum with
core's per-address windows (tests/core_limits.py: 50 requests in 10 s, 200 a minute). Measured: the upstream
requests in the busiest 10 s against the bridge's 10 s budget (FEEDBRIDGE_FORUM_BUDGET_10S), and the 429s
the forum answered (each one stops every reader of the bridge until its Retry-After). Every feed is a
category the forum does not have: one list request each, a 404 when admitted.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx

from feedbridge.config import Settings

from .harness import Context, Row
from .procs import Procs

FEEDS = 300
CLIENTS = 20
WINDOW = 10


def client_address(n: int) -> str:
    """The n-th client's address as the router saw it (TEST-NET-3, never routed)."""
    return f"203.0.113.{n + 1}"


def burst(app: str, forum_key: str, feeds: int = FEEDS, clients: int = CLIENTS, tag: str = "b") -> list[httpx.Response]:
    """`feeds` distinct cold feeds at once, spread over `clients` addresses (one thread per client)."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    with httpx.Client(timeout=60, limits=limits) as client, ThreadPoolExecutor(clients) as pool:
        def one(i: int) -> httpx.Response:
            return client.get(f"{app}/{forum_key}/c/{tag}-{i}/{i + 1}.atom",
                              headers={"X-Forwarded-For": client_address(i % clients)})
        return list(pool.map(one, range(feeds)))


def busiest(times: list[float], seconds: float = WINDOW) -> int:
    """The most of `times` within any `seconds`."""
    ordered = sorted(times)
    start, most = 0, 0
    for end, moment in enumerate(ordered):
        while moment - ordered[start] >= seconds:
            start += 1
        most = max(most, end - start + 1)
    return most


def burst_section(ctx: Context) -> list[Row]:
    budget = Settings().forum_budget_10s
    with Procs(ctx.workdir) as procs:
        forum = procs.forum("--core-limits")
        env = {"FEEDBRIDGE_FORUMS": forum.url, "WEB_CONCURRENCY": "2", "FEEDBRIDGE_TRUSTED_HOPS": "1",
               "FORWARDED_ALLOW_IPS": "127.0.0.1", "FEEDBRIDGE_LOG_LEVEL": "WARNING",
               "FEEDBRIDGE_FORUM_BUDGET": str(Settings().forum_budget)}  # procs.gunicorn turns it off otherwise
        app, _ = procs.gunicorn("feedbridge-burst", env)
        started = time.monotonic()
        answers = burst(app, forum.url.removeprefix("http://"))
        took = time.monotonic() - started
        log = forum.control.requests
        refused = forum.control.stats().get("core_refused", {})
    most = busiest([r.time for r in log])
    statuses = Counter(r.status_code for r in answers)
    without_retry = sum(1 for r in answers if r.status_code in (429, 503) and "retry-after" not in r.headers)
    forum_429s = sum(refused.values())
    ctx.notes.append(
        f"9: {FEEDS} distinct cold category feeds from {CLIENTS} client addresses (X-Forwarded-For behind "
        f"FEEDBRIDGE_TRUSTED_HOPS=1) at once, on the Procfile's gunicorn (2 workers, no Redis), against the fake "
        f"forum enforcing core's per-address limits (50 in 10 s, 200 a minute); {took:.1f} s. Upstream requests: "
        f"{len(log)}, {most} in the busiest 10 s; the forum's 429s: {forum_429s}; answers: "
        + ", ".join(f"{n}× {s}" for s, n in sorted(statuses.items()))
        + f" ({without_retry} refusals without Retry-After).")
    return [Row("9", f"upstream requests in the busiest 10 s of a {FEEDS}-feed burst from {CLIENTS} clients "
                "(2 workers, no Redis) vs the 10 s budget", most, budget, "requests", most / budget,
                "≤ 1.00× and no 429", most <= budget and forum_429s == 0 and without_retry == 0)]


if __name__ == "__main__":  # python -m bench.burst: this section alone
    import sys
    import tempfile
    from pathlib import Path

    from .harness import table

    with tempfile.TemporaryDirectory(prefix="feedbridge-bench-") as workdir:
        context = Context(quick="--quick" in sys.argv, workdir=Path(workdir))
        print(table(burst_section(context)))
        print("\n".join(f"- {note}" for note in context.notes))
