"""A burst of cold feeds against a forum that enforces core's limits (issue #32, "Politeness as core counts it").

300 distinct cold feeds from 20 client addresses at once (FEEDBRIDGE_TRUSTED_HOPS=1 and X-Forwarded-For, as
behind a router) on the Procfile's gunicorn with 2 workers and no Redis, in front of the fake forum with
core's per-address windows (tests/core_limits.py: 50 requests in 10 s, 200 a minute), at the bridge's default
budgets. The readers ask again at once for every feed refused, as a fleet of feed readers ignoring Retry-After
does, for `SECONDS`: what reaches the forum is then the budget's doing, not the cold slots' (a single pass
is over before a slot is free again). Every feed is `/latest.atom?category=N`: one list request each
(`/latest.md?category=N`, which the fake serves as /latest.md).

Measured: the upstream requests in the busiest 10 s against the bridge's 10 s budget
(FEEDBRIDGE_FORUM_BUDGET_10S), and the 429s the forum answered (each one stops every reader of the bridge
until its Retry-After). The baseline is the same burst on two one-worker instances the client alternates
between: two processes that each spend the whole budget, as the two workers did before the budget was
split between them (`feedbridge.store.control.Windows`).

`python -m bench.burst` runs this section alone.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from feedbridge.config import Settings

from .harness import Context, Row
from .procs import Procs

FEEDS = 300
CLIENTS = 20
WINDOW = 10
SECONDS = 3.0
"""How long the readers keep asking: under a 10 s window, so the busiest 10 s is the whole burst."""


@dataclass(frozen=True)
class Answer:
    app: str  # the instance that answered
    status: int
    retry_after: str | None
    text: str  # its first 300 characters


def client_address(n: int) -> str:
    """The n-th client's address as the router saw it (TEST-NET-3, never routed)."""
    return f"203.0.113.{n + 1}"


def cold_feed(n: int) -> str:
    """The n-th distinct cold feed's path under the forum: one upstream list request of its own."""
    return f"/latest.atom?category={n + 1}"


def burst(apps: list[str], forum_key: str, feeds: int = FEEDS, clients: int = CLIENTS, seconds: float = SECONDS,
          path: Callable[[int], str] = cold_feed) -> list[Answer]:
    """`feeds` distinct cold feeds from `clients` addresses (one thread each): feed n is client n % clients's,
    asked of instance n % len(apps), and asked again until it is answered 200 or `seconds` have passed. A
    tenth of a second between a client's rounds keeps the load on the budget, not on the generator's CPU;
    each request on a new connection, so the instance's workers share them."""
    deadline = time.monotonic() + seconds
    answers: list[Answer] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        left = list(range(c, feeds, clients))
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(timeout=60, limits=limits, headers={"X-Forwarded-For": client_address(c)}) as http:
            while left and time.monotonic() < deadline:
                for n in list(left):
                    app = apps[n % len(apps)]
                    response = http.get(f"{app}/{forum_key}{path(n)}")
                    with lock:
                        answers.append(Answer(app, response.status_code, response.headers.get("retry-after"),
                                              response.text[:300]))
                    if response.status_code == 200:
                        left.remove(n)
                time.sleep(0.1)

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return answers


def busiest(times: list[float], seconds: float = WINDOW) -> int:
    """The most of `times` within any `seconds`."""
    ordered = sorted(times)
    start, most = 0, 0
    for end, moment in enumerate(ordered):
        while moment - ordered[start] >= seconds:
            start += 1
        most = max(most, end - start + 1)
    return most


@dataclass(frozen=True)
class Burst:
    answers: list[Answer]
    requests: int
    busiest: int
    refused: int  # the forum's 429s


def _measure(ctx: Context, name: str, workers: int, instances: int) -> Burst:
    """The burst on `instances` instances of `workers` workers each, against a fresh forum."""
    with Procs(ctx.workdir) as procs:
        forum = procs.forum("--core-limits")
        env = {"FEEDBRIDGE_FORUMS": f"markdown:{forum.url}", "WEB_CONCURRENCY": str(workers),
               "FEEDBRIDGE_TRUSTED_HOPS": "1", "FORWARDED_ALLOW_IPS": "127.0.0.1", "FEEDBRIDGE_LOG_LEVEL": "WARNING",
               "FEEDBRIDGE_FORUM_BUDGET": str(Settings().forum_budget)}  # procs.gunicorn turns it off otherwise
        apps = [procs.gunicorn(f"{name}-{n}", env)[0] for n in range(instances)]
        answers = burst(apps, forum.url.removeprefix("http://"))
        log = forum.control.requests
        refused = forum.control.stats().get("core_refused", {})
    return Burst(answers, len(log), busiest([r.time for r in log]), sum(refused.values()))


def _answers(made: Burst) -> str:
    statuses = Counter(a.status for a in made.answers)
    without_retry = sum(1 for a in made.answers if a.status in (429, 503) and a.retry_after is None)
    return (", ".join(f"{n}× {s}" for s, n in sorted(statuses.items()))
            + f" ({without_retry} refusals without Retry-After)")


def burst_section(ctx: Context) -> list[Row]:
    budget = Settings().forum_budget_10s
    ours = _measure(ctx, "feedbridge-burst", workers=2, instances=1)
    unsplit = _measure(ctx, "feedbridge-burst-unsplit", workers=1, instances=2)
    without_retry = sum(1 for a in ours.answers if a.status in (429, 503) and a.retry_after is None)
    ctx.notes.append(
        f"9: {FEEDS} distinct cold feeds from {CLIENTS} client addresses (X-Forwarded-For behind "
        f"FEEDBRIDGE_TRUSTED_HOPS=1), each refused one asked again at once for {SECONDS:.0f} s, on the Procfile's "
        f"gunicorn (2 workers, no Redis), against the fake forum enforcing core's per-address limits (50 in 10 s, "
        f"200 a minute). Upstream requests: {ours.requests}, {ours.busiest} in the busiest 10 s; the forum's "
        f"429s: {ours.refused}; answers: {_answers(ours)}. Baseline, two one-worker instances (each spending the "
        f"whole budget, as each worker did before the split): {unsplit.requests} upstream requests, "
        f"{unsplit.busiest} in the busiest 10 s; the forum's 429s: {unsplit.refused}; answers: {_answers(unsplit)}.")
    return [
        Row("9", f"upstream requests in the busiest 10 s of a {FEEDS}-feed burst from {CLIENTS} clients "
            "(2 workers, no Redis) vs the 10 s budget", ours.busiest, budget, "requests", ours.busiest / budget,
            "≤ 1.00× and no 429", ours.busiest <= budget and ours.refused == 0 and without_retry == 0),
        Row("9", "the same, on two processes each spending the whole budget (before the split), vs the 10 s budget",
            unsplit.busiest, budget, "requests", unsplit.busiest / budget, "(reference)", None),
        Row("9", "the forum's 429s in that burst: split budget vs two processes each spending the whole budget",
            ours.refused, unsplit.refused, "", None, "0", ours.refused == 0),
    ]


if __name__ == "__main__":  # python -m bench.burst: this section alone
    import sys
    import tempfile
    from pathlib import Path

    from .harness import table

    with tempfile.TemporaryDirectory(prefix="feedbridge-bench-") as workdir:
        context = Context(quick="--quick" in sys.argv, workdir=Path(workdir))
        print(table(burst_section(context)))
        print("\n".join(f"- {note}" for note in context.notes))
