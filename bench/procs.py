"""Child processes on 127.0.0.1 (gunicorn, the fake forum, PHP, Redis) and wrk, all bounded and cleaned up.

Every process is started in its own session and registered on an ExitStack, so leaving the `with`
(normally or by an exception or Ctrl-C) ends exactly the processes this run started, by their id: all
of them told at once and then waited for, since each takes about a second to shut down.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from .harness import PROJECT_ROOT

if TYPE_CHECKING:
    from tests.upstream import ForumProcess

GUNICORN_APP = "feedbridge.web.app:create_app()"  # as in the Procfile
KEEPALIVE_EXPIRY = 2.0
"""Seconds a bench client keeps an idle connection: under the server's own 5 s (`gunicorn_conf.keepalive`),
so a client never sends on a connection the server is closing (httpx's default is the same 5 s, and a
round that started just as the server closed one read `Connection reset by peer`)."""
WRK_CONNECTIONS = 16  # = the Procfile's default 2 workers × 8 threads


class Procs(ExitStack):
    def __init__(self, workdir: Path):
        super().__init__()
        self.workdir = workdir
        self._started: list[subprocess.Popen] = []
        self.callback(_stop_all, self._started)

    def start(self, name: str, command: list[str], ready_url: str, env: dict[str, str] | None = None,
              cwd: Path = PROJECT_ROOT, timeout: float = 30.0, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "ab")
        self.callback(log.close)
        process = subprocess.Popen(command, cwd=cwd, env={**os.environ, **(env or {})}, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                   pass_fds=pass_fds)
        self._started.append(process)
        wait_ready(ready_url, process, timeout, self.workdir / f"{name}.log")
        return process

    def gunicorn(self, name: str, env: dict[str, str], app: str = GUNICORN_APP,
                 ready_path: str = "/healthz") -> tuple[str, subprocess.Popen]:
        """Gunicorn with the Procfile's config module; the bind address is forced to loopback, and the per-forum
        budget is off unless `env` sets it: one load generator on one address is the abuse pattern the budget
        exists to stop, and a benchmark measures the serving path, not the budget's refusals."""
        # The socket is bound here, on a port the kernel picks, and handed to gunicorn (`fd://`), as `feedbridge
        # serve` does: a port only checked free and bound later by gunicorn could be taken in between by another
        # test's server, which then answered the readiness check and the requests meant for this one (met once:
        # the limit of section 1 answered with another server's bytes, in a loaded suite).
        listener = socket.socket()
        self.callback(listener.close)
        listener.bind(("127.0.0.1", 0))
        listener.listen(2048)
        port = listener.getsockname()[1]
        command = [sys.executable, "-m", "gunicorn", "--config", "python:feedbridge.web.gunicorn_conf",
                   "--bind", f"fd://{listener.fileno()}", app]
        url = f"http://127.0.0.1:{port}"
        return url, self.start(name, command, url + ready_path,
                               {"PORT": str(port), "FEEDBRIDGE_FORUM_BUDGET": "0", **env},
                               pass_fds=(listener.fileno(),))

    def redis(self) -> str:
        """A throw-away redis-server (no persistence); returns its URL."""
        port = free_port()
        self.start("redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], f"tcp://127.0.0.1:{port}")
        return f"redis://127.0.0.1:{port}/0"

    def forum(self, *options: str) -> ForumProcess:
        from tests.upstream import spawn  # the project's fake Discourse forum

        handle = spawn(*options)
        self.callback(handle.stop)
        return handle


def free_port() -> int:
    """A port that is free now, below the kernel's ephemeral range (32768 and up on Linux): a port the
    kernel picked could be handed to another process's outgoing connection before the server that was
    meant to have it binds it, and then the server cannot start (seen with two suites running at once)."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port between 20000 and 32000")


def wait_ready(url: str, process: subprocess.Popen, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode}:\n{_tail(log)}")
        try:
            if url.startswith("tcp://"):
                host, port = url.removeprefix("tcp://").split(":")
                socket.create_connection((host, int(port)), timeout=2).close()
                return
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {timeout:g}s:\n{_tail(log)}")


def worker_pids(master: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{master}/task/{master}/children").read_text(encoding="utf-8").split()]
    except OSError:
        return []


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a server process and its live workers (gunicorn and `php -S` both pre-fork)."""
    total = 0.0
    for process in (pid, *worker_pids(pid)):
        fields = Path(f"/proc/{process}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return total


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@dataclass(frozen=True)
class WrkRun:
    rps: float
    p99_ms: float
    requests: int = 0
    cpu_ms: float | None = None  # the server's CPU per request, where its process was given


def wrk(url: str, seconds: int, connections: int = WRK_CONNECTIONS) -> WrkRun:
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", "5s", "--latency", url],
                         capture_output=True, text=True, timeout=seconds + 30, check=True).stdout
    # Read errors alone are servers closing after each response (php -S does); anything else is a failure.
    errors = re.search(r"Socket errors: connect (\d+), read \d+, write (\d+), timeout (\d+)", out)
    if "Non-2xx" in out or (errors and any(int(n) for n in errors.groups())):
        raise RuntimeError(f"wrk saw errors on {url}:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])
    value, unit = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", out, re.M).groups()
    requests = int(re.search(r"(\d+) requests in ", out)[1])
    return WrkRun(rps, float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit], requests)


def wrk_compare(urls: dict[str, str], runs: int, seconds: int,
                servers: dict[str, int] | None = None, warmup: bool = True) -> dict[str, WrkRun]:
    """Warm every URL up (a second of wrk each, unless not `warmup`), then alternate runs (rotating the order)
    and return per-URL medians; for the URLs whose server process is in `servers`, also its CPU per request
    (user + system, /proc)."""
    for url in urls.values() if warmup else ():
        wrk(url, 1)
    results: dict[str, list[WrkRun]] = {name: [] for name in urls}
    names = list(urls)
    servers = servers or {}
    for i in range(runs):
        for name in names[i % len(names):] + names[: i % len(names)]:
            before = cpu_seconds(servers[name]) if name in servers else 0.0
            run = wrk(urls[name], seconds)
            if name in servers:
                run = dataclasses.replace(run, cpu_ms=(cpu_seconds(servers[name]) - before) / run.requests * 1e3)
            results[name].append(run)
    return {name: WrkRun(statistics.median(r.rps for r in runs_), statistics.median(r.p99_ms for r in runs_),
                         sum(r.requests for r in runs_),
                         statistics.median(r.cpu_ms for r in runs_ if r.cpu_ms is not None) if name in servers
                         else None)
            for name, runs_ in results.items()}


def _stop_all(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to every process group, then SIGKILL to those not gone within 10 s."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        _signal(process, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for process in running:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            _signal(process, signal.SIGKILL)
            process.wait(timeout=10)


def _signal(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)  # its own session: the group is exactly what we started
    except ProcessLookupError:
        pass


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
