"""Which server holds against hostile clients (issue 23): the Procfile's command, gunicorn's stock `gevent` and
`gthread` workers and waitress, side by side, each on the same attacks and the same cached-hit load.

`python -m bench.servers [--quick] [--only NAME ...]`. Every server is started afresh for every scenario, bound
to 127.0.0.1 with the Procfile's settings (2 workers where the server forks, 8 threads where it has threads),
against the fake forum, and every attack is bounded in connections and seconds. Under an attack, probes
alternate a cached feed and `/healthz`, one a second, each on a new connection with a 3 s timeout: the
figure is how many answered within that, and the slowest answer.

- slowloris: 200 connections each send one header byte a second, never finishing.
- slow bodies: 80 connections send `GET /healthz` with `Content-Length: 100000`, then one body byte every
  3 s; also counted: how many of them got an answer within 3 s (the service reads no body).
- pipelines: 40 connections (4 KiB receive buffers) each send 300 requests for a cached feed and read nothing.
- slow readers: 40 connections (4 KiB receive buffers) each ask for a feed of about 330 KB and read 1 KiB a
  second.
- cold: 32 cold requests for distinct feeds of a forum answering in 9 s; wrk -c4 on a cached feed meanwhile
  (p99), against the idle p99 in the same run.
- hits: wrk -t2 -c16 on a cached feed, every server up at once and the runs alternating between them;
  median requests/s, p99 and server CPU per request (user + system of all its processes) over the runs.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from .procs import GUNICORN_APP, Procs, free_port, wrk, wrk_compare

if TYPE_CHECKING:
    from tests.upstream import ForumProcess

PROBE_TIMEOUT = 3.0
SMALL_BUFFER = 4096
COMPILER = "c/compiler/5.atom"
LARGE = "c/large/9.atom?limit=100"
"""A category of 100 topics with 3 KB excerpts (`_large_list`): a feed of about 330 KB."""


def _gunicorn(worker_class: str | None, *options: str) -> Callable[[int], list[str]]:
    def command(port: int) -> list[str]:
        extra = ["--worker-class", worker_class, *options] if worker_class else []
        return [sys.executable, "-m", "gunicorn", "--config", "python:feedbridge.web.gunicorn_conf",
                "--bind", f"127.0.0.1:{port}", *extra, GUNICORN_APP]
    return command


def _waitress(port: int) -> list[str]:
    # Its default connection limit (100) would refuse the slowloris' connections before any thread is spent:
    # raised to gunicorn's worker_connections, so both are measured on what they do with a connection.
    return [str(Path(sys.executable).parent / "waitress-serve"), f"--listen=127.0.0.1:{port}", "--threads=8",
            "--connection-limit=1000", "--call", GUNICORN_APP.removesuffix("()")]


SERVERS: dict[str, Callable[[int], list[str]]] = {
    "procfile": _gunicorn(None),
    "gevent": _gunicorn("gevent"),
    "gthread": _gunicorn("gthread", "--threads", "8"),
    "waitress": _waitress,
}


class Bench:
    def __init__(self, procs: Procs, forum: ForumProcess, quick: bool):
        self.procs, self.forum, self.quick = procs, forum, quick
        self.key = forum.url.removeprefix("http://")
        self.probe_count = 4 if quick else 10

    @contextmanager
    def server(self, name: str) -> Iterator[tuple[str, int]]:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        # the budget and the allowance off: one address sends every request (`bench/slowforum.py` says why)
        env = {"PORT": str(port), "FEEDBRIDGE_FORUMS": self.forum.url, "FEEDBRIDGE_FORUM_BUDGET": "0",
               "FEEDBRIDGE_CPU_ALLOWANCE": "0", "FEEDBRIDGE_LOG_LEVEL": "WARNING"}
        with Procs(self.procs.workdir) as own:
            process = own.start(f"{name}-{port}", SERVERS[name](port), url + "/healthz", env)
            for path in (COMPILER, LARGE):  # both workers warm: the kernel picks the worker per connection
                for _ in range(16):
                    httpx.get(f"{url}/{self.key}/{path}", timeout=30).raise_for_status()
            yield url, process.pid

    def probes(self, url: str) -> str:
        latencies: list[float] = []
        count = self.probe_count
        for i in range(count):
            target = f"{url}/{self.key}/{COMPILER}" if i % 2 == 0 else f"{url}/healthz"
            start = time.monotonic()
            try:  # httpx's timeout is per read: the total is checked too
                if httpx.get(target, timeout=PROBE_TIMEOUT).status_code == 200:
                    latencies.append(time.monotonic() - start)
            except httpx.HTTPError:
                pass
            time.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
        within = [t for t in latencies if t <= PROBE_TIMEOUT]
        slowest = f", slowest answer {max(latencies):.2f} s" if latencies else ""
        return f"{len(within)}/{count} probes within {PROBE_TIMEOUT:g} s{slowest}"


def _connect(url: str, clients: int, small_buffer: bool = False) -> list[socket.socket]:
    host, port = url.removeprefix("http://").split(":")
    sockets = []
    for _ in range(clients):
        sock = socket.socket()
        if small_buffer:  # set before connecting, so the window the server sees is small too
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
        sock.settimeout(5)
        sock.connect((host, int(port)))
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


@contextmanager
def attack(url: str, clients: int, first: Callable[[int], bytes], step: Callable[[socket.socket], None],
            every: float, small_buffer: bool = False) -> Iterator[list[socket.socket]]:
    """`clients` connections that each send `first(i)`, then run `step` on each every `every` seconds until
    the `with` ends; every socket is closed on exit."""
    sockets = _connect(url, clients, small_buffer)
    for i, sock in enumerate(sockets):
        try:
            sock.send(first(i))
        except OSError:
            pass
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            for sock in sockets:
                try:
                    step(sock)
                except OSError:  # the server closed it, or its buffer is full: both fine
                    pass

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield sockets
    finally:
        stop.set()
        thread.join(10)
        for sock in sockets:
            sock.close()


def _answered(sockets: list[socket.socket]) -> int:
    count = 0
    for sock in sockets:
        try:
            if sock.recv(16).startswith(b"HTTP/1."):
                count += 1
        except OSError:
            pass
    return count


def slowloris(bench: Bench, name: str) -> str:
    header = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    sent: dict[int, int] = {}

    def step(sock: socket.socket) -> None:
        index = sent.get(sock.fileno(), 0)
        sock.send(header[index:index + 1])
        sent[sock.fileno()] = index + 1

    with bench.server(name) as (url, _), attack(url, 200, lambda i: b"G", step, 1.0):
        time.sleep(2)
        return bench.probes(url)


def slow_bodies(bench: Bench, name: str) -> str:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
    with bench.server(name) as (url, _), attack(url, 80, lambda i: request, lambda s: s.send(b"x"), 3.0) as socks:
        time.sleep(PROBE_TIMEOUT)
        early = _answered(socks)
        return f"{bench.probes(url)}; {early}/80 body senders answered within 3 s"


def pipelines(bench: Bench, name: str) -> str:
    def burst(i: int) -> bytes:
        return f"GET /{bench.key}/{COMPILER} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * 300

    with bench.server(name) as (url, _), attack(url, 40, burst, lambda s: None, 1.0, small_buffer=True):
        time.sleep(2)
        return bench.probes(url)


def slow_readers(bench: Bench, name: str) -> str:
    def request(i: int) -> bytes:
        return f"GET /{bench.key}/{LARGE} HTTP/1.1\r\nHost: x\r\n\r\n".encode()

    def read_a_little(sock: socket.socket) -> None:
        sock.recv(1024)

    with bench.server(name) as (url, _):
        size = len(httpx.get(f"{url}/{bench.key}/{LARGE}", timeout=30).content)
        with attack(url, 40, request, read_a_little, 1.0, small_buffer=True):
            time.sleep(2)
            return f"{bench.probes(url)} (feed of {size:,} bytes)"


def cold(bench: Bench, name: str) -> str:
    seconds = 2 if bench.quick else 5
    with bench.server(name) as (url, _):
        cached = f"{url}/{bench.key}/latest.atom"
        httpx.get(cached, timeout=30).raise_for_status()
        for _ in range(16):
            httpx.get(cached, timeout=30).raise_for_status()
        idle = wrk(cached, seconds, 4)
        bench.forum.control.stall("/latest.md?category=", 9.0, prefix=True)  # every category's list
        limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
        try:
            with ThreadPoolExecutor(32) as pool, httpx.Client(timeout=60, limits=limits) as client:
                serial = int(time.monotonic() * 1000) % 10**6  # a category is its id: 32 new ones each run
                futures = [pool.submit(lambda u: client.get(u).status_code,
                                       f"{url}/{bench.key}/c/slow-{serial}-{i}/{serial * 100 + i + 1}.atom")
                           for i in range(32)]
                time.sleep(0.5)
                during = wrk(cached, seconds, 4)
                outcomes = Counter(f.result(timeout=40) for f in futures)
        finally:
            bench.forum.control.clear()
            bench.forum.control.set_body("/c/large/9.md", _large_list(bench.forum.url))
        return (f"cached p99 {during.p99_ms:.1f} ms while 32 cold requests wait (idle {idle.p99_ms:.1f} ms); "
                "cold answers " + ", ".join(f"{n}× {status}" for status, n in sorted(outcomes.items())))


def hits(bench: Bench, names: list[str]) -> dict[str, str]:
    """All servers up at once, wrk runs alternating between them (the order rotated), so a neighbour's burst
    of load on the shared cores hits every server alike."""
    runs, seconds = (1, 2) if bench.quick else (5, 4)
    with ExitStack() as stack:
        started = {name: stack.enter_context(bench.server(name)) for name in names}
        result = wrk_compare({name: f"{url}/{bench.key}/{COMPILER}" for name, (url, _) in started.items()}, runs,
                             seconds, {name: pid for name, (_, pid) in started.items()})
    return {name: f"{run.rps:,.0f} req/s, p99 {run.p99_ms:.1f} ms, server CPU {(run.cpu_ms or 0) * 1e3:.0f} µs "
                  "per request" for name, run in result.items()}


def _each(scenario: Callable[[Bench, str], str]) -> Callable[[Bench, list[str]], dict[str, str]]:
    return lambda bench, names: {name: scenario(bench, name) for name in names}


SCENARIOS: dict[str, Callable[[Bench, list[str]], dict[str, str]]] = {
    "slowloris": _each(slowloris), "slow_bodies": _each(slow_bodies), "pipelines": _each(pipelines),
    "slow_readers": _each(slow_readers), "cold": _each(cold), "hits": hits,
}


def _large_list(base: str) -> str:
    topics = "".join(f"""
## [Topic {i}]({base}/t/topic-{i}/{10000 + i})

<div class="topic-metadata">

**Author:** [@someone]({base}/u/someone)\\
**Replies:** 1\\
**Last updated:** [September 19, 2026, 11:59pm UTC]({base}/t/topic-{i}/{10000 + i} "2026-09-19T23:59:59Z")

</div>

{"word " * 600}

---
""" for i in range(100))
    return f"# Large\n\n**URL:** {base}/c/large/9.md\n\n---\n{topics}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.servers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer probes and shorter wrk runs")
    parser.add_argument("--only", action="append", choices=list(SERVERS), help="this server only (repeatable)")
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS), help="this scenario only (repeatable)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="feedbridge-servers-") as workdir, Procs(Path(workdir)) as procs:
        forum = procs.forum()
        forum.control.set_body("/c/large/9.md", _large_list(forum.url))
        bench = Bench(procs, forum, args.quick)
        for scenario in args.scenario or list(SCENARIOS):
            for name, figure in SCENARIOS[scenario](bench, args.only or list(SERVERS)).items():
                print(f"{scenario:<13} {name:<9} {figure}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
