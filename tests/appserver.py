"""Run the Flask app on a real socket for a test (a thread), or the Procfile's gunicorn (a subprocess)."""

from __future__ import annotations

import fcntl
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx
from flask import Flask
from werkzeug.serving import make_server

from bench.procs import free_port
from feedbridge.config import Credential, Forum, Settings, parse_forum
from feedbridge.web.app import create_app

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class RunningApp:
    url: str  # http://127.0.0.1:PORT
    forum_key: str  # the fake forum's host:port, as it appears in feed paths

    def feed_url(self, path: str) -> str:
        return f"{self.url}/{self.forum_key}{path}"


GENEROUS_BUDGETS = {"forum_budget_10s": 1000, "forum_budget": 3000}
"""The forum budgets of an in-process app, unless a test sets its own: at the defaults (40 in 10 s, a client's
third of its process's half) a `content=full` feed's 32 reads wait about 20 s for the window's room, which
is what the budget's own tests check (test_budget_windows, test_admission, test_control, test_signal's
budget test, on the Procfile's gunicorn where they need it), and only time in every other test."""


def settings_for(upstream_url: str, **overrides) -> Settings:
    return replace(Settings(forums=(parse_forum(upstream_url),)), **{**GENEROUS_BUDGETS, **overrides})


@contextmanager
def running_app(settings: Settings) -> Iterator[RunningApp]:
    with serving(settings) as (running, _app):
        yield running


@contextmanager
def serving(settings: Settings) -> Iterator[tuple[RunningApp, Flask]]:
    """`running_app`, with the Flask app at hand so a test can look into its store."""
    app = create_app(settings)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    # A short poll interval: `shutdown` waits for the loop to see it (0.5 s by default, in every test).
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield RunningApp(f"http://127.0.0.1:{server.port}", settings.forums[0].key), app
    finally:
        server.shutdown()
        app.extensions["feedbridge"].fetcher.close()




@contextmanager
def procfile_web(env: Mapping[str, str], port: int | None = None, stdout: IO[str] | None = None,
                 stderr: IO[str] | None = None, graceful: bool = False) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start the Procfile's `web:` command exactly as a PaaS would (shell, $PORT), and wait until it answers.

    Its output goes to files (by default one temporary file for both streams), never to a pipe: a chatty
    server must never block on a pipe nobody reads.

    It is stopped as `procfile_apps` stops its servers, with gunicorn's quick shutdown (`_tell_to_stop`), not
    the graceful one a PaaS sends, which waited a second or more in every test (CI's serial part has about
    twenty) for the gevent worker's connections to close. Its workers still log their exit, and one that
    has not gone in 10 s is killed. `graceful`: stopped as a PaaS stops it (SIGTERM), for a test of what the
    shutdown itself writes: the quick one can leave gevent's "Exception ignored ... SystemExit: 0" on stderr
    (a worker's `sys.exit` in a greenlet while its main thread shuts down), which a PaaS never sends it into.
    """
    started = _start_web(env, port, stdout, stderr)
    try:
        started.wait_up()
        yield started.url, started.process
    finally:
        if graceful:
            stop(started.process, grace=10)
        else:
            _tell_to_stop(started.process)
            _wait_or_kill(started.process, grace=10)
        started.log.close()


def _procfile_command() -> str:
    return (PROJECT_ROOT / "Procfile").read_text(encoding="utf-8").split("web:", 1)[1].strip()


@dataclass
class _Started:
    process: subprocess.Popen
    url: str
    log: IO[str]
    command: str
    env: Mapping[str, str]

    def wait_up(self, seconds: float = 30, forums: list[str] | None = None) -> None:
        """Until /healthz answers 200 (and names `forums`, when given: the server on the port is this one)."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                health = httpx.get(f"{self.url}/healthz", timeout=1)
                if health.status_code == 200 and (forums is None or health.json().get("forums") == forums):
                    return
            except (httpx.HTTPError, ValueError):
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{shlex.quote(self.command)} did not come up: {self.output()[-2000:]}")
            time.sleep(0.05)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()


def _start_web(env: Mapping[str, str], port: int | None = None, stdout: IO[str] | None = None,
               stderr: IO[str] | None = None, session: bool = False) -> _Started:
    """`session`: in a process group of its own (its id the master's), which its workers share."""
    command = _procfile_command()
    port = port or free_port()
    full_env = {**os.environ, **env, "PORT": str(port)}
    full_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{full_env.get('PATH', '')}"
    log = stdout or appending(tempfile.TemporaryFile("a+"))
    process = subprocess.Popen(["/bin/sh", "-c", f"exec {command}"], cwd=PROJECT_ROOT, env=full_env,
                               stdout=log, stderr=stderr or subprocess.STDOUT, text=True, start_new_session=session)
    return _Started(process, f"http://127.0.0.1:{port}", log, command, env)


def appending(log: IO[str]) -> IO[str]:
    """`log` with O_APPEND on its descriptor, which Python's "a" mode does not set on a file it did not open
    by name (a temporary file): gunicorn reopens /dev/stdout with an offset of its own, and without the flag
    the workers' first lines, written at the descriptor's shared offset, overwrite the master's."""
    fcntl.fcntl(log.fileno(), fcntl.F_SETFL, fcntl.fcntl(log.fileno(), fcntl.F_GETFL) | os.O_APPEND)
    return log


# --- Settings as the Procfile reads them --------------------------------------------------------------

SET_BY_THE_SERVER = ("port", "web_concurrency", "workers")
"""Settings the environment holds but the tests do not choose: PORT is procfile_web's, WEB_CONCURRENCY is
`procfile_app`'s `workers`, FEEDBRIDGE_WORKERS is gunicorn_conf's `pre_fork`."""


def _as_text(value: Any) -> str:
    """A setting's value written as its variable holds it (the inverse of its `Env.read`)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple):
        return " ".join(_as_text(item) for item in value)
    if isinstance(value, Forum):
        return value.base_url if value.source == "auto" else f"{value.source}:{value.base_url}"
    if isinstance(value, Credential):
        key = f"user-api-key:{value.key}" if value.username is None else f"api-key:{value.username}:{value.key}"
        return f"{value.host}={key}"
    return str(value)


def procfile_env(settings: Settings, workers: int = 1) -> dict[str, str]:
    """The environment under which the Procfile's server runs with `settings` and `workers` worker processes.

    The names come from feedbridge/config.py's own declarations (each field's `Env`, its first variable).
    A setting at its default is given as the empty string, which Settings.from_env reads as unset, so
    nothing in the test runner's own environment (a REDIS_URL, say) reaches the server. The result is read
    back with Settings.from_env and must give `settings` again: a setting no variable sets (or one written
    wrongly here) is a ValueError, never a server silently running with other settings than the test's.
    """
    defaults = Settings()
    for name in SET_BY_THE_SERVER:
        if getattr(settings, name) != getattr(defaults, name):
            raise ValueError(f"Settings.{name} is set by the server, not by a test (see SET_BY_THE_SERVER)")
    env = {"WEB_CONCURRENCY": str(workers)}
    for f in fields(Settings):
        if "env" not in f.metadata or f.name in SET_BY_THE_SERVER:
            continue
        names = f.metadata["env"].names
        env.update(dict.fromkeys(names, ""))
        value = getattr(settings, f.name)
        if value != getattr(defaults, f.name):
            env[names[0]] = _as_text(value)
    read = replace(Settings.from_env(env), **{name: getattr(defaults, name) for name in SET_BY_THE_SERVER})
    if read != settings:
        differ = [f.name for f in fields(Settings) if getattr(read, f.name) != getattr(settings, f.name)]
        raise ValueError(f"the Procfile's environment cannot carry these settings: {', '.join(differ)}")
    return env


# --- the Procfile's gunicorn for tests ----------------------------------------------------------------

@dataclass
class ProcfileApp(RunningApp):
    """A RunningApp served by the Procfile's gunicorn (its gevent worker), in a process of its own."""

    process: subprocess.Popen
    _started: _Started

    def output(self) -> str:
        """What gunicorn and the app have logged so far (for a failing test's message)."""
        return self._started.output()


K = TypeVar("K", bound=Hashable)


@contextmanager
def procfile_apps(wanted: Mapping[K, Settings], workers: int = 1) -> Iterator[dict[K, ProcfileApp]]:
    """The Procfile's gunicorn with each of `wanted`'s settings, all started at once (they boot side by side)
    and stopped at once when the `with` ends.

    Settings that differ only in their forums share one gunicorn, which serves all of those forums: so a
    module's tests can share one server per settings combination, each test with a fake forum of its own.
    Everything the bridge keeps about a forum (its cached pages and feeds, remembered failures, the budget
    and each client's share of it, a Retry-After, the detected source) is that forum's, so tests sharing a
    server meet only in what is the process's own: its cold slots, the cache's byte bound, and each client's
    CPU allowance. Each name's app reads its own settings' first forum (`feed_url`).
    """
    groups: dict[Settings, list[Forum]] = {}
    for settings in wanted.values():
        forums = groups.setdefault(replace(settings, forums=()), [])
        for forum in settings.forums:
            if forum in forums:
                continue
            if any(other.key == forum.key for other in forums):
                raise ValueError(f"{forum.key} is wanted with two sources on one server")
            forums.append(forum)
    servers: dict[Settings, _Started] = {}
    try:
        for shared, forums in groups.items():
            servers[shared] = _start_web(procfile_env(replace(shared, forums=tuple(forums)), workers), session=True)
        for shared, started in servers.items():
            keys = [forum.key for forum in groups[shared]]
            try:
                started.wait_up(forums=keys)
            except RuntimeError:
                if started.process.poll() is None:
                    raise
                # Another suite on this machine took the port between free_port() and gunicorn's bind: once
                # more, on another port (a server that cannot start for any other reason fails again).
                started.log.close()
                servers[shared] = started = _start_web(started.env, session=True)
                started.wait_up(forums=keys)
        apps = {}
        for name, settings in wanted.items():
            started = servers[replace(settings, forums=())]
            apps[name] = ProcfileApp(started.url, settings.forums[0].key, started.process, started)
        yield apps
    finally:
        for started in servers.values():  # all told first: each takes a moment to go
            _tell_to_stop(started.process)
        deadline = time.monotonic() + QUIT_GRACE
        for started in servers.values():
            _stop_quickly(started.process, deadline)
            started.log.close()


@contextmanager
def procfile_app(settings: Settings, workers: int = 1) -> Iterator[ProcfileApp]:
    """`running_app` on the Procfile's gunicorn: its command as a PaaS runs it, configured by the environment
    (`procfile_env`), with `workers` worker processes. The fake forum the settings name is in this process,
    on 127.0.0.1, and reached from the server's as any forum is."""
    with procfile_apps({"app": settings}, workers) as apps:
        yield apps["app"]


QUIT_GRACE = 1.0
"""Seconds the servers of `procfile_apps` have, together, to quit before they are killed."""


def _tell_to_stop(process: subprocess.Popen) -> None:
    """SIGQUIT: gunicorn's quick shutdown. A test's server has no request worth finishing, and the graceful
    one (SIGTERM) waits a second or more for the gevent worker's connections to close."""
    if process.poll() is None:
        process.send_signal(signal.SIGQUIT)


def _stop_quickly(process: subprocess.Popen, deadline: float) -> None:
    """Wait for the server until `deadline`, then kill its process group (the master's own session: itself
    and its workers). A worker whose upstream reads are still waiting on a stalled forum (the read timeout is
    the tests' to set, up to minutes) exits only when they end: a quick shutdown waits for its threads."""
    try:
        process.wait(max(deadline - time.monotonic(), 0.01))  # a master that quits has reaped its workers
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # still our unreaped child: the group id is its own
        process.wait()


def stop(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `grace` seconds."""
    process.terminate()
    _wait_or_kill(process, grace)


def _wait_or_kill(process: subprocess.Popen, grace: float) -> None:
    """Wait for a process told to stop, and SIGKILL it if it has not exited within `grace` seconds."""
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
