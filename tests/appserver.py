"""Run the Flask app on a real socket for a test (a thread), or the Procfile's gunicorn (a subprocess)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

import httpx
from werkzeug.serving import make_server

from bench.procs import free_port
from feedbridge.config import Settings, parse_forum
from feedbridge.web.app import create_app

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class RunningApp:
    url: str  # http://127.0.0.1:PORT
    forum_key: str  # the fake forum's host:port, as it appears in feed paths

    def feed_url(self, path: str) -> str:
        return f"{self.url}/{self.forum_key}{path}"


def settings_for(upstream_url: str, **overrides) -> Settings:
    return replace(Settings(forums=(parse_forum(upstream_url),)), **overrides)


@contextmanager
def running_app(settings: Settings) -> Iterator[RunningApp]:
    app = create_app(settings)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield RunningApp(f"http://127.0.0.1:{server.port}", settings.forums[0].key)
    finally:
        server.shutdown()
        app.extensions["feedbridge"].fetcher.close()




@contextmanager
def procfile_web(env: Mapping[str, str], port: int | None = None, stdout: IO[str] | None = None,
                 stderr: IO[str] | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start the Procfile's `web:` command exactly as a PaaS would (shell, $PORT), and wait until it answers.

    Its output goes to files (by default one temporary file for both streams), never to a pipe: a chatty
    server must never block on a pipe nobody reads.
    """
    command = (PROJECT_ROOT / "Procfile").read_text(encoding="utf-8").split("web:", 1)[1].strip()
    port = port or free_port()
    full_env = {**os.environ, **env, "PORT": str(port)}
    full_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{full_env.get('PATH', '')}"
    log = stdout or tempfile.TemporaryFile("a+")  # append: gunicorn reopens /dev/stdout with its own offset
    process = subprocess.Popen(["/bin/sh", "-c", f"exec {command}"], cwd=PROJECT_ROOT, env=full_env,
                               stdout=log, stderr=stderr or subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                output = log.read()
                raise RuntimeError(f"{shlex.quote(command)} did not come up: {output[-2000:]}")
            time.sleep(0.1)
        yield url, process
    finally:
        stop(process, grace=10)
        log.close()


def stop(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `grace` seconds."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
