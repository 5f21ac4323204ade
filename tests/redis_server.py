"""A real `redis-server` on a free 127.0.0.1 port for tests: no persistence, killed and restarted on demand.

The Debian package provides /usr/bin/redis-server (`.ci/run` installs it). `kill()` is SIGKILL, as
when the Redis host dies; `start()` again brings up an empty server on the same port, as after a
restart without persistence; `pause()`/`resume()` (SIGSTOP/SIGCONT) make it hang without refusing
connections, the slow-Redis case.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis

from tests.appserver import free_port

BINARY = shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisServer:
    def __init__(self, port: int | None = None, options: tuple[str, ...] = ()):
        """`options`: more of redis-server's own (`--rename-command INFO ""`, as some providers do)."""
        self.options = options
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [BINARY, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--protected-mode", "yes", "--loglevel", "warning", *self.options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = self.client()
        deadline = time.monotonic() + 5
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.01)
            finally:
                client.close()

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=2)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.resume()
        self.kill()


@pytest.fixture(scope="module")
def redis_module() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_server(redis_module: RedisServer) -> Iterator[RedisServer]:
    """The module's server, running and empty."""
    if redis_module.process is None:
        redis_module.start()
    client = redis_module.client()
    client.flushall()
    client.close()
    yield redis_module
    if redis_module.process is not None:
        redis_module.resume()
